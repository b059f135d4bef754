"""What the compiled program reads off its graphs: the inputs its outputs use, the inputs a
backward reads or eager autograd would save (or a create_graph backward recomputes from), the
inputs a backward reads that eager would not save (kept as the forward's copies), the backward
graph's gradients kept apart,
where the forward's saved values sit among its outputs, and array identity helpers
(executor.py calls them)."""
from __future__ import annotations

from ..autograd.node import _KEEP as KEEP, _records as saved_records
from ..jit.control import COND, CUSTOM_FUNCTION, SCAN, WHILE
from ..jit.entry import root_array
from ..jit.ir import Eqn, Graph, Var
from ..ops.shape import COPY, RESHAPE

_CONTROL = (COND, CUSTOM_FUNCTION, SCAN, WHILE)   # (their VJPs are autodiff's own)


def _inputs_used(g: Graph) -> set:
    """Positions of `g`'s inputs that its outputs depend on."""
    live = {a for a in g.outputs if isinstance(a, Var)}
    for e in reversed(g.eqns):   # (a sub-graph's captured values are its equation's inputs)
        if any(o in live for o in e.outs):
            live.update(a for a in e.inputs if isinstance(a, Var))
    return {i for i, v in enumerate(g.inputs) if v in live}


def _nbytes(v) -> int:
    n = v.aval.dtype.itemsize
    for d in v.aval.shape:
        n *= d.hint if hasattr(d, "hint") else int(d)
    return n


def _gradients_apart(graph: Graph, n_out: int) -> Graph:
    """`graph`, a loss plan's graph (the function's `n_out` outputs, then the gradients it
    saves), with a copy in place of each gradient that is, or views, one of the outputs:
    the backward scales or hands over saved gradients in place, which would change the
    output the caller holds."""
    root = _view_roots(graph)
    outs = {root.get(v, v) for v in graph.outputs[:n_out] if isinstance(v, Var)}
    eqns, results = list(graph.eqns), list(graph.outputs)
    for j in range(n_out, len(results)):
        v = results[j]
        if isinstance(v, Var) and root.get(v, v) in outs:
            c = Var(v.aval)
            eqns.append(Eqn(COPY, (v,), (c,), {}))
            results[j] = c
    if len(eqns) == len(graph.eqns):
        return graph
    return Graph(graph.inputs, tuple(eqns), tuple(results), graph.name)


def _view_roots(graph: Graph) -> dict:
    """{var: the var it views, through ops marked as views only}. Narrower than
    `jit.passes._possible_views`: a false match would make an in-place write to an output raise at
    backward() where eager allows it."""
    root: dict = {}
    for e in graph.eqns:
        p = e.prim
        if ((p.is_view or (p.view_if is not None and p.view_if(e.params))) and e.inputs
                and isinstance(e.inputs[0], Var) and len(e.outs) == 1):
            root[e.outs[0]] = root.get(e.inputs[0], e.inputs[0])
    return root


def _outputs_saved(fwd: Graph, n_out: int, n_saved: int) -> tuple:
    """Positions of a training forward's outputs whose memory a saved value shares: an
    in-place write to one after the call must raise, as eager's saved-tensor check does."""
    root = _view_roots(fwd)
    saved = {root.get(v, v) for v in fwd.outputs[n_out:n_out + n_saved] if isinstance(v, Var)}
    return tuple(k for k, v in enumerate(fwd.outputs[:n_out])
                 if isinstance(v, Var) and root.get(v, v) in saved)


def _same_memory(a, b) -> bool:
    """Whether array `a` is (a view of) the memory of array `b`."""
    return root_array(a) is root_array(b)


def _shapes_of(inputs, graph):
    """The concrete shape of a Var of `graph` run on `inputs`, as a function: the sizes are
    bound once, at the first symbolic shape asked for (a backward's absent gradients: one
    walk over its inputs for all of them, not one each)."""
    from ..jit.interpreter import bind_symbols
    from ..shapes import Sym
    syms = []

    def shape(a):
        dims = a.aval.shape
        if not any(isinstance(d, Sym) for d in dims):
            # (a static shape: binding the symbols walks every input's shape, 7 ms a ResNet step)
            return tuple(dims)
        if not syms:
            syms.append(bind_symbols(graph, inputs() if callable(inputs) else inputs))
        return tuple(d.evaluate(syms[0]) if isinstance(d, Sym) else d for d in dims)
    return shape


def _inputs_watched(graph: Graph, active: set, bwd: Graph | None) -> tuple:
    """Positions of `graph`'s inputs that an in-place write after the forward must make
    ``backward()`` refuse: those the backward plan `bwd` reads, and those eager autograd
    would save (each primitive's ``save`` for its operands' requires-grad pattern, `active`
    from `active_vars`), through views too. Writing into another input leaves the
    gradient as it was, as in eager and PyTorch (a cross-entropy's logits: log_softmax
    saves its result)."""
    n = len(graph.inputs)
    watched = set() if bwd is None else {i for i in _inputs_used(bwd) if i < n}
    pos = {v: i for i, v in enumerate(graph.inputs)}
    root = _view_roots(graph)
    for e in graph.eqns:
        if e.prim.vjp is None and e.prim not in _CONTROL:
            continue   # (eager records no node for it: a BatchNorm record's forward pass)
        nondiff = e.prim.nondiff
        needs = tuple(isinstance(a, Var) and a in active and a.aval.dtype.differentiable
                      and k not in nondiff for k, a in enumerate(e.inputs))
        if not any(needs):
            continue
        # (what eager autograd keeps for these flags: one rule, kept per pattern by the prim)
        hows, keep_out = saved_records(e.prim, needs)
        kept = (list(e.inputs) if any(isinstance(p, Graph) for p in e.params.values())
                else [a for a, how in zip(e.inputs, hows) if how == KEEP])
        kept += list(e.outs) if keep_out else []
        watched.update(pos[root.get(a, a)] for a in kept
                       if isinstance(a, Var) and root.get(a, a) in pos)
    return tuple(sorted(watched))


def _inputs_recomputed(graph: Graph, active: set) -> tuple:
    """Positions of `graph`'s inputs a create_graph backward reads when it recomputes the
    differentiable path (create_graph.py): those that reach an operand of an equation with a
    differentiable operand, through any equations (a spectral norm's power-iteration vector,
    read without gradient into the sigma the weight is divided by)."""
    need = {a for e in graph.eqns if any(isinstance(a, Var) and a in active for a in e.inputs)
            for a in e.inputs if isinstance(a, Var)}
    for e in reversed(graph.eqns):
        if any(o in need for o in e.outs):
            need.update(a for a in e.inputs if isinstance(a, Var))
    return tuple(i for i, v in enumerate(graph.inputs) if v in need)


def _inputs_snapshot(bwd: Graph, eager_saved: tuple, n_in: int, n_saved: int):
    """-> (bwd, positions): a backward graph that reads, instead of each forward input eager
    autograd would not save (a bias added before a GELU: the backward recomputes the sum),
    a copy of it, passed after the saved values: the training call copies these inputs when
    the forward has run (`copy_inputs`). An in-place write to such an input between the
    forward and ``backward()`` (an EMA or a clamp of the weights under no_grad) then leaves
    the gradient as eager's, not refused nor read from the new values. Only an input
    smaller than every value the backward computes from it (a broadcast operand) is copied:
    its copy costs less than the value saved instead would. Another (``x * y + z`` before
    a tanh, z of the sum's shape) stays watched, its write refused (`_inputs_watched`): a
    copy would add a pass over its size to every training step of an elementwise chain."""
    keep = set(eager_saved)
    pos = tuple(i for i in sorted(_inputs_used(bwd)) if i < n_in and i not in keep
                and not bwd.inputs[i].aval.weak and _broadcast_read(bwd, bwd.inputs[i]))
    if not pos:
        return bwd, ()
    sub = {bwd.inputs[i]: Var(bwd.inputs[i].aval) for i in pos}

    def s(a):
        return sub.get(a, a) if isinstance(a, Var) else a
    k = n_in + n_saved
    bwd = Graph(bwd.inputs[:k] + tuple(sub[bwd.inputs[i]] for i in pos) + bwd.inputs[k:],
                tuple(Eqn(e.prim, tuple(s(a) for a in e.inputs), e.outs, e.params, e.loc)
                      for e in bwd.eqns),
                tuple(s(a) for a in bwd.outputs), bwd.name)
    return bwd, pos


def copy_inputs(saved, arrays, pos: tuple) -> list:
    """`saved`, the forward's values for the backward, then copies of the input arrays at
    `pos` (`_inputs_snapshot`)."""
    return [*saved, *[arrays[i].copy() for i in pos]]


def _broadcast_read(g: Graph, v: Var, depth: int = 4) -> bool:
    """Whether every equation of `g` that reads `v` makes values larger than `v`, through
    views of it (a conv bias reshaped to (1, C, 1, 1) before its add)."""
    n = _nbytes(v)
    readers = [e for e in g.eqns if any(a is v for a in e.inputs)]
    if not readers:
        return False
    for e in readers:
        for o in e.outs:
            if _nbytes(o) > n:
                continue
            p = e.prim
            view = p.is_view or p.view_if is not None and p.view_if(e.params) or p is RESHAPE
            if not (depth and view and e.inputs[0] is v and _broadcast_read(g, o, depth - 1)):
                return False
    return True
