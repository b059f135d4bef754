"""Graph passes: dead-code elimination, CSE, constant folding, algebraic simplification,
and lifting symbolic sizes out of literals (for the backends).

Each pass takes a Graph and returns a new one (graphs are never mutated). They
recurse into the sub-graphs of control-flow equations.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..ops.creation import FULL
from ..ops.elementwise import ADD, CAST, DIV, MUL, NEG, POW, RELU, SUB
from ..ops.lstm_prim import LSTM_LAYER_BACKWARD
from ..ops.pool_offsets import MAX_POOL2D_VALUES, MAX_POOL2D_WITH_OFFSETS
from ..ops.pooling_prim import MAX_POOL2D
from ..ops.promotion import on_numpy
from ..ops.registry import Aval
from ..ops.shape import CONCAT, COPY, EXPAND, PERMUTE, RESHAPE
from ..ops.host_steps import HOST_STEP, size_bindings
from ..shapes import DataSize, Sym
from .ir import Eqn, Graph, Literal, Var
from .tracer import DETACH
from . import patterns as _patterns
from . import scatter_products as _scatter_products  # noqa: F401  (its patterns: registered at import)
from ..ops.linalg import MATMUL

__all__ = ["optimize", "dce", "cse", "fold_constants", "simplify", "drop_detach", "lift_symbolic_literals"]

# Primitives whose repeated execution is observable: never merged, never folded.
_EFFECTFUL_KINDS = ("random",)


# The passes run in every capture (a first call's: the CNN's 70 equations took 0.68 ms
# through the four with generator expressions per equation, 0.3 ms with the plain loops
# below): what they do per unchanged equation is kept to a few dict lookups.

def _subst(a, env):
    while isinstance(a, Var) and a in env:
        a = env[a]
    return a


def _substs(atoms: tuple, env: dict) -> tuple:
    """`atoms` with `env`'s replacements (`_subst`): the same tuple when none applies."""
    if env:
        for a in atoms:
            if isinstance(a, Var) and a in env:
                return tuple(_subst(b, env) for b in atoms)
    return atoms


def _map_graphs(params, fn):
    for v in params.values():
        if isinstance(v, Graph):
            return {k: (fn(v) if isinstance(v, Graph) else v) for k, v in params.items()}
    return params


def _eqn(e: Eqn, ins: tuple, params: dict) -> Eqn:
    """`e` with these operands and params: `e` itself when they are the ones it has (an
    equation is immutable, so graphs share it; a frozen dataclass costs ~1.5 us to build,
    four passes rebuilt every equation of a capture, and `verify` checks a shared
    equation's types once)."""
    if params is e.params:
        if ins is e.inputs:
            return e
        for a, b in zip(ins, e.inputs):
            if a is not b:
                break
        else:
            return e
    return Eqn(e.prim, ins, e.outs, params, e.loc)


def _rebuild(g: Graph, eqns, env) -> Graph:
    return Graph(g.inputs, tuple(eqns), _substs(g.outputs, env), g.name)


def dce(g: Graph) -> Graph:
    """Drop equations whose outputs are never used, keeping those that bind a data-dependent
    size something kept names (``x.nonzero().shape[0] * 1.0`` reads only the count)."""
    live = {a for a in g.outputs if isinstance(a, Var)}
    sizes: set = set()
    steps = any(e.prim is HOST_STEP for e in g.eqns)
    if steps:
        _name_sizes([a.aval.shape if isinstance(a, Var) else a for a in g.outputs], sizes)
    kept = []
    for e in reversed(g.eqns):
        for o in e.outs:
            if o in live:
                break
        else:
            # an equation with an effect (a runtime check that raises) is kept unused
            if not (e.prim.extra.get("effect") or sizes and any(s in sizes for s, _, _ in size_bindings(e))):
                continue
        e = _eqn(e, e.inputs, _map_graphs(e.params, dce))
        kept.append(e)
        for a in e.inputs:
            if isinstance(a, Var):
                live.add(a)
        if steps:
            _name_sizes((e.inputs, e.params, [o.aval.shape for o in e.outs]), sizes)
    kept.reverse()
    return Graph(g.inputs, tuple(kept), g.outputs, g.name)


def _name_sizes(v, out: set) -> None:
    """Add the data-dependent sizes (`DataSize`) that `v` (atoms, params, shapes) names."""
    if isinstance(v, Literal):
        v = v.value
    if isinstance(v, Sym):
        out.update(s for s in v.free_symbols if isinstance(s, DataSize))
    elif isinstance(v, (tuple, list, dict)):
        for x in v.values() if isinstance(v, dict) else v:
            _name_sizes(x, out)


def _key(e: Eqn, env):
    ins = []
    for a in e.inputs:
        a = _subst(a, env)
        ins.append(("lit", type(a.value), a.value) if isinstance(a, Literal) else ("var", id(a)))
    try:
        ps = tuple(sorted([(k, _hashable(v)) for k, v in e.params.items()]))
        hash(ps)
    except TypeError:
        return None
    return (e.prim.name, tuple(ins), ps)


_PLAIN = (int, str, bool, type(None))


def _hashable(v):
    if type(v) in _PLAIN:
        return v
    if isinstance(v, Graph):
        return ("graph", id(v))
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    if isinstance(v, float) and v != v:
        return ("nan",)
    return v


def cse(g: Graph) -> Graph:
    """Merge equations computing the same primitive on the same operands; a bf16 value's
    widenings to float32 stay apart (`_widens_bf16`)."""
    env: dict = {}
    seen: dict = {}
    eqns = []
    for e in g.eqns:
        e = _eqn(e, _substs(e.inputs, env), _map_graphs(e.params, cse))
        if (e.prim.kind not in _EFFECTFUL_KINDS and e.prim.kind != "control" and len(e.outs) == 1
                and not _widens_bf16(e)):
            k = _key(e, env)
            if k is not None:
                prev = seen.get(k)
                if prev is not None:
                    env[e.out] = prev
                    continue
                seen[k] = e.out
        eqns.append(e)
    return _rebuild(g, eqns, env)


def _widens_bf16(e) -> bool:
    """Whether `e` widens a bf16 Var to float32. Each widening is a use of the bf16 value
    (autocast widens a weight's cached words once per product, as PyTorch's products
    each read the bf16 weight): the gradients of the uses are then rounded to bf16 and
    summed in bf16 at the value, as PyTorch sums them, where one shared widening would
    sum them in float32 and round once."""
    return (e.prim is CAST and isinstance(e.inputs[0], Var) and e.inputs[0].aval.dtype is _dt.bfloat16
            and e.out.aval.dtype is _dt.float32)


def fold_constants(g: Graph) -> Graph:
    """Evaluate elementwise equations whose operands are all literals.

    A graph output stays computed by an equation: outputs are tensors, and a literal is a
    Python number.
    """
    env: dict = {}
    eqns = []
    outputs = set(a for a in g.outputs if isinstance(a, Var))
    for e in g.eqns:
        ins = _substs(e.inputs, env)
        if (e.prim.kind == "elementwise" and ins and e.out not in outputs
                and all(isinstance(a, Literal) and not isinstance(a.value, Sym) for a in ins)
                and e.out.aval.shape == () and e.out.aval.dtype.np.kind in "fiub"):
            try:
                # (operands in the dtype the op computes in: a comparison's is not its bool result)
                r = np.asarray(on_numpy(e.prim, [a.aval for a in ins], [a.value for a in ins],
                                        e.params)).astype(e.out.aval.dtype.np)
                if all(a.aval.weak for a in ins):
                    env[e.out] = Literal(r.item(), Aval((), e.out.aval.dtype, weak=True))
                    continue
            except Exception:  # folding is an optimization; leave the equation if it can't fold
                pass
        eqns.append(_eqn(e, ins, _map_graphs(e.params, fold_constants)))
    return _rebuild(g, eqns, env)


def _is_lit(a, v) -> bool:
    return (isinstance(a, Literal) and not isinstance(a.value, (bool, Sym)) and a.value == v)


def _is_one(a, producer: dict) -> bool:
    """`a` is the number 1: a literal, or a value of ``full`` with value 1 (the unit
    cotangent of a loss's gradients: autodiff.loss_joint) or an ``expand`` of one."""
    if _is_lit(a, 1):
        return True
    p = producer.get(a) if isinstance(a, Var) else None
    if p is not None and p.prim is EXPAND:
        return _is_one(p.inputs[0], producer)
    v = p.params.get("value") if p is not None and p.prim is FULL else None
    return v is not None and not isinstance(v, (bool, Sym)) and v == 1


# x*1, x+0, x-0, x/1, x**1: the unit operand of each, and whether it may come first
_UNITS = {MUL: (1, True), ADD: (0, True), SUB: (0, False), DIV: (1, False), POW: (1, False)}


def simplify(g: Graph) -> Graph:
    """x*1, 1*x, x+0, 0+x, x-0, x/1, x**1, --x, cast to the same dtype, identity reshapes.
    The 1 of x*1 may be a computed tensor of ones (`_is_one`): x*1 is x exactly in IEEE
    arithmetic, and the GELU loss kernel multiplied every element twice by its unit
    cotangent (2 of its ~40 operations per element).

    An output is not replaced by a graph input: the caller would get its own argument
    back (the same tensor object) where the Python code returns a new tensor.
    """
    env: dict = {}
    producer: dict = {}
    eqns = []
    outputs = set(a for a in g.outputs if isinstance(a, Var))
    inputs = set(g.inputs)
    uses: dict = {}
    for e in g.eqns:
        for a in e.inputs:
            if isinstance(a, Var):
                uses[a] = uses.get(a, 0) + 1
    for a in outputs:
        uses[a] = uses.get(a, 0) + 1
    for e in g.eqns:
        ins = _substs(e.inputs, env)
        e = _eqn(e, ins, _map_graphs(e.params, simplify))
        p = e.prim
        repl = None
        swapped = _first_rewrite(e, producer, uses)
        if swapped is not None:
            for q in swapped:
                # an equation a rewrite wrote may be one another rewrites (a product of
                # `_transposed_matmul`, one of an embedding's rows: scatter_products.py)
                again = _first_rewrite(q, producer, uses) if q.prim is not p else None
                for r in again or (q,):
                    eqns.append(r)
                    producer[r.out] = r
            continue
        same = lambda a: isinstance(a, Var) and a.aval == e.out.aval  # noqa: E731 - no broadcast/promotion change
        if p in _UNITS:
            v, both = _UNITS[p]
            unit = (lambda a: _is_one(a, producer)) if p is MUL else (lambda a: _is_lit(a, v))
            if unit(ins[1]) and same(ins[0]):
                repl = ins[0]
            elif both and unit(ins[0]) and same(ins[1]):
                repl = ins[1]
        elif p is NEG:
            p = producer.get(ins[0])
            if p is not None and p.prim is NEG and same(p.inputs[0]):
                repl = p.inputs[0]
        elif p in (CAST, RESHAPE, EXPAND):
            if same(ins[0]):
                repl = ins[0]
        if repl is not None and not (e.out in outputs and repl in inputs):
            env[e.out] = repl
            continue
        eqns.append(e)
        for o in e.outs:
            producer[o] = e
    return _rebuild(g, eqns, env)


def _first_rewrite(e: Eqn, producer: dict, uses: dict):
    """The first simplify-stage pattern's rewrite of `e` (jit/patterns.py), or None."""
    for pattern in _patterns.equation_rewrites("simplify", e.prim):
        if pattern.applies():
            new = pattern.rewrite(e, producer, uses)
            if new is not None:
                return new
    return None


def _transposed_matmul(e: Eqn, producer: dict, uses: dict):
    """``matmul(a, b).T`` (2-D, the product used only here) as ``matmul(b.T, a.T)``.

    The backward of ``x @ w.T`` (``nn.Linear``) computes the weight's gradient as the
    transpose of a product: a strided view, which the leaf's ``.grad`` then has to copy.
    The swapped product is written C-contiguous by BLAS at the same cost. Operands that
    are themselves transposes are read untransposed. Which side of the product BLAS's M
    is stays the backend's choice (compiler/cpu/gemm/products.py `rows_first`).
    """
    m = producer.get(e.inputs[0])
    if (m is None or m.prim is not MATMUL or tuple(e.params.get("dims", ())) != (1, 0)
            or uses.get(m.out, 0) != 1 or len(m.out.aval.shape) != 2
            or any(len(a.aval.shape) != 2 for a in m.inputs) or not all(isinstance(a, Var) for a in m.inputs)):
        return None
    a, b = m.inputs
    new = []

    def t(a):
        p = producer.get(a)
        if p is not None and p.prim is PERMUTE and tuple(p.params["dims"]) == (1, 0):
            return p.inputs[0]
        v = Var(Aval((a.aval.shape[1], a.aval.shape[0]), a.aval.dtype, a.aval.device))
        new.append(Eqn(PERMUTE, (a,), (v,), {"dims": (1, 0)}, e.loc))
        return v
    bt, at = t(b), t(a)
    new.append(Eqn(m.prim, (bt, at), e.outs, dict(m.params), m.loc))
    return new


def _pooled_relu(e: Eqn, producer: dict, uses: dict):
    """``max_pool2d(relu(x))`` (the relu used only here) as ``relu(max_pool2d(x))``.

    ReLU is monotone, so the maximum of a window of relu(x) is relu of its maximum, and
    the gradient reaches the same element: where the window's maximum is positive, the
    first maximum of x is the first maximum of relu(x); where it is not, ReLU's gradient
    is zero either way (a NaN window: NaN both ways, and a zero gradient). The ReLU then
    runs on the pooled value, a quarter of the activation for 2x2 pooling, forward and
    backward (LeNet's CNN: three passes over each conv activation fewer per step: the
    ReLU, its recomputation in the backward and ReLU's gradient). Only the sign of a zero
    can differ (relu(-0.0) against a window's max of relu values).
    """
    r = producer.get(e.inputs[0])
    if (r is None or r.prim is not RELU or uses.get(r.out, 0) != 1
            or not isinstance(r.inputs[0], Var) or not r.out.aval.dtype.is_floating_point):
        return None
    pooled = Var(e.out.aval)
    return [Eqn(e.prim, (r.inputs[0],), (pooled,), dict(e.params), e.loc),
            Eqn(r.prim, (pooled,), e.outs, dict(r.params), r.loc)]


def _pooled_relu_record(e: Eqn, producer: dict, uses: dict):
    """``max_pool2d_values(max_pool2d_with_offsets(relu(x)), relu(x))`` (floating max-pooling,
    ops/pool_offsets.py; the relu and the record used only here) as ``relu(max_pool2d_values(
    max_pool2d_with_offsets(x), x))``: `_pooled_relu`'s rewrite, for the same reasons. The
    recorded offsets of x and of relu(x) differ only in windows whose maximum is not positive
    (relu(x) ties them at 0), where ReLU's gradient is zero either way. The relu and the
    record of it are left unused (dead code elimination removes them)."""
    rec, r_in = e.inputs
    rp = producer.get(rec)
    r = producer.get(r_in)
    if (rp is None or rp.prim is not MAX_POOL2D_WITH_OFFSETS or rp.inputs[0] is not r_in
            or uses.get(rec, 0) != 1 or r is None or r.prim is not RELU
            or uses.get(r_in, 0) != 2 or not isinstance(r.inputs[0], Var)
            or not r.out.aval.dtype.is_floating_point):
        return None
    x = r.inputs[0]
    rec2, pooled = Var(rec.aval), Var(e.out.aval)
    return [Eqn(rp.prim, (x,), (rec2,), dict(rp.params), rp.loc),
            Eqn(e.prim, (rec2, x), (pooled,), dict(e.params), e.loc),
            Eqn(r.prim, (pooled,), e.outs, dict(r.params), r.loc)]


def _lstm_h_cotangent(e: Eqn, producer: dict, uses: dict):
    """``lstm_layer_backward(concat([dh, zeros], 1), ...)`` as ``lstm_layer_backward(dh, ...)``.

    A captured LSTM's differentiable result holds every step's h and c, (L, 2H, N); when
    only h is used (a language model reads the outputs, not the cell states), its
    cotangent is assembled as h's gradient next to a block of zeros (jit/slice_grads.py).
    The backward op takes the cotangent of h alone as well, so the zero block, the concat
    writing twice h's size and the backward's reading and adding those zeros are skipped.
    """
    dy = e.inputs[0]
    cat = producer.get(dy)
    if (cat is None or cat.prim is not CONCAT or uses.get(dy, 0) != 1 or len(cat.inputs) != 2
            or cat.params.get("dim") not in (1, -2)):
        return None
    h, zero = cat.inputs
    fill = producer.get(zero)
    H = e.inputs[-1].aval.shape[1] // 6         # Z (L, 6H, N)
    if (fill is None or fill.prim is not FULL or fill.params.get("value") != 0
            or not isinstance(h, Var) or h.aval.shape[1] != H or h.aval.dtype != dy.aval.dtype):
        return None
    return [Eqn(e.prim, (h,) + tuple(e.inputs[1:]), e.outs, e.params, e.loc)]


# The simplify stage's patterns (jit/patterns.py): an equation replaced by a reordered
# sequence, tried in this order per primitive.
for _name, _rewrite, _prims in (("transposed_matmul", _transposed_matmul, (PERMUTE,)),
                                ("pooled_relu", _pooled_relu, (MAX_POOL2D,)),
                                ("pooled_relu_record", _pooled_relu_record, (MAX_POOL2D_VALUES,)),
                                ("lstm_h_cotangent", _lstm_h_cotangent, (LSTM_LAYER_BACKWARD,))):
    _patterns.register(_patterns.Pattern(_name, _rewrite, ("simplify",), _prims))


def drop_detach(g: Graph) -> Graph:
    """A differentiated graph (a plan's) with each ``detach`` replaced by its operand. It only
    stops gradients, and as a group of its own it copied every value an op under no_grad
    made (a key encoder's every convolution and BatchNorm), and kept BatchNorm's split
    pattern from matching. An output keeps its ``detach``, so what the caller gets is
    never an input or a new view of one."""
    env: dict = {}
    eqns = []
    outputs = {a for a in g.outputs if isinstance(a, Var)}
    for e in g.eqns:
        ins = _substs(e.inputs, env)
        if e.prim is DETACH and isinstance(ins[0], Var) and e.out not in outputs:
            env[e.out] = ins[0]
            continue
        eqns.append(_eqn(e, ins, _map_graphs(e.params, drop_detach)))
    return _rebuild(g, eqns, env)


def optimize(g: Graph, apart: bool = False) -> Graph:
    """The passes; with `apart` (a function's graph), an output they made an input or a view
    of one is copied (`_outputs_apart`)."""
    g0 = g
    for p in (fold_constants, simplify, cse, dce):
        g = p(g)
    return _outputs_apart(g0, g) if apart else g


_MOVEMENT_KINDS = ("shape", "index", "other")


def _possible_views(graph: Graph) -> dict:
    """{output position: graph input position} for outputs reached from an input through
    movement ops only: the plan may return them as views of the caller's array."""
    src = {v: i for i, v in enumerate(graph.inputs)}
    for e in graph.eqns:
        if e.prim.kind in _MOVEMENT_KINDS and e.inputs and e.inputs[0] in src and len(e.outs) == 1:
            src[e.outs[0]] = src[e.inputs[0]]
    out = {}
    for k, a in enumerate(graph.outputs):
        if isinstance(a, Var) and a in src and a not in graph.inputs:
            out[k] = src[a]
    return out


def _outputs_apart(before: Graph, after: Graph) -> Graph:
    """`after` (`before` optimized) with a copy in place of each output the passes made an
    input or a view of one (``x.narrow(..) * 1`` -> the narrow): a result the caller
    writes into changes an argument only where the function returned a view of it."""
    def aliasing(g):
        return set(_possible_views(g)) | {k for k, a in enumerate(g.outputs) if isinstance(a, Var) and a in g.inputs}
    new = aliasing(after) - aliasing(before)
    if not new:
        return after
    eqns, results = list(after.eqns), list(after.outputs)
    for k in sorted(new):
        c = Var(results[k].aval)
        eqns.append(Eqn(COPY, (results[k],), (c,), {}))
        results[k] = c
    return Graph(after.inputs, tuple(eqns), tuple(results), after.name)


def lift_symbolic_literals(graph: Graph) -> Graph:
    """Literals whose value is a symbolic size (``x.sum() / x.shape[0]``) become 0-d values
    computed by the plan from the input shapes, so kernels read them at run time instead
    of baking in the size seen at trace time. Run on a graph before it is lowered (not
    part of `optimize`: the interpreter evaluates such literals from the bound sizes)."""
    eqns = []
    changed = False
    for e in graph.eqns:
        ins = []
        for a in e.inputs:
            if isinstance(a, Literal) and isinstance(a.value, Sym):
                v = Var(Aval((), a.aval.dtype, a.aval.device))
                eqns.append(Eqn(FULL, (), (v,), {"shape": (), "value": a.value, "dtype": a.aval.dtype,
                                                 "device": a.aval.device}, e.loc))
                ins.append(v)
                changed = True
            else:
                ins.append(a)
        params = e.params
        if any(isinstance(p, Graph) for p in params.values()):
            params = {k: (lift_symbolic_literals(p) if isinstance(p, Graph) else p) for k, p in params.items()}
            changed = changed or any(params[k] is not e.params[k] for k in params)
        eqns.append(Eqn(e.prim, tuple(ins), e.outs, params, e.loc) if changed else e)
    if not changed:
        return graph
    return Graph(graph.inputs, tuple(eqns), graph.outputs, graph.name)
