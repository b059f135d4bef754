"""Reverse-mode differentiation of a Graph with the primitives' own VJP rules.

``joint(graph, active)`` traces, on top of the forward graph's values, the backward
pass the eager engine would run: each primitive's VJP (written with tracejit ops)
applied in reverse order, broadcast gradients summed back to their input shapes the
same way the engine does. ``split`` then partitions it for compilation:

- the forward program returns its outputs plus the values the backward needs that are
  expensive to recompute (matmul, reductions, random draws, ...);
- cheap elementwise intermediates are *recomputed* inside the backward program from
  the saved values and the inputs, where fusion folds them into the backward kernels,
  instead of being written to memory by the forward.

``cond`` differentiates branch-wise (a ``cond`` over the branches' joint graphs);
a custom ``autograd.Function`` is differentiated by tracing its own ``backward``;
a ``while`` loop (data-dependent trip count) is refused with a clear error.
"""
from __future__ import annotations

from .. import ops
from ..autograd.engine import _fit
from ..autograd.function import FunctionCtx, check_grads
from ..errors import CompileError
from ..ops.creation import FULL
from ..ops.indexing import INDEX_ADD, index_add_
from ..ops.registry import REGISTRY
from .control import COND, CUSTOM_FUNCTION, SCAN, WHILE
from .ir import Eqn, Graph, Literal, Var
from .scatter_products import backward_rewrites
from .slice_grads import SliceGrads
from .size_args import known_facts
from .tracer import SymbolicSizeError, TraceContext, _make_tracer, active_vars

__all__ = ["joint", "split", "active_vars", "loss_joint", "traced_grad", "drawn", "replaying"]


def _backward_eqns(ctx: TraceContext, graph: Graph, act: set, cotangents: dict):
    """Record the backward pass into `ctx`; returns the cotangent of each graph input."""
    def tracer(v):
        return _make_tracer(v, ctx)

    def val(a):
        return a.value if isinstance(a, Literal) else tracer(a)

    ct = dict(cotangents)  # Var -> Tracer
    if ctx.sizes is None:   # the facts about int sizes the capture guarded hold here too
        ctx.sizes = known_facts(graph)
    # Blocks cut from one value (chunk, split, unbind) get one concat as their gradient,
    # assembled when the value's own equation is reached (slice_grads.py).
    blocks = SliceGrads()

    def vjp_one(e):
        # The gradient's equations carry the line of the equation they differentiate:
        # tracebacks and kernel comments point at the user's op, and the kernels'
        # source (their cache key) does not depend on where .backward() was called.
        ctx.loc_override = e.loc
        _vjp_one(ctx, e, act, ct, tracer, val)
        if ctx.specialized:
            # The capture chose these dims symbolic; a gradient fixed to the sizes seen
            # here would be wrong for the others.
            raise SymbolicSizeError(
                f"the gradient of {e.prim.name} needs the concrete value of the symbolic "
                f"size(s) {', '.join(sorted(ctx.specialized))}", frozenset(ctx.specialized))
    try:
        for e in reversed(graph.eqns):
            for o in e.outs:
                blocks.flush(o, ctx, ct, vjp_one)
            if not blocks.take(e, act, ct):
                vjp_one(e)
        for a in list(blocks.pending):
            blocks.flush(a, ctx, ct, vjp_one)
    finally:
        ctx.loc_override = None
    return ct


def _vjp_one(ctx, e, act, ct, tracer, val) -> None:
    """Add equation `e`'s contribution to the cotangents `ct` of its inputs."""
    gs = [ct.get(o) for o in e.outs]
    if all(g is None for g in gs):
        return
    diff_in = [isinstance(a, Var) and a in act for a in e.inputs]
    if not any(diff_in):
        return
    p = e.prim
    if p is COND:
        grads = _cond_vjp(ctx, e, gs, act)
    elif p is WHILE:
        raise CompileError(
            "reverse-mode differentiation through a `while` loop is not supported: its trip count "
            "depends on data, so the backward pass cannot be compiled. Use a `for i in range(n)` "
            "with a constant n (unrolled), or compute gradients eagerly (tracejit.eager()).")
    elif p is SCAN:
        if "vjp_graph" not in e.params:   # (joint's add_residuals rewrites every scan it can)
            _refuse_scan(e)
        from .scan_ad import scan_vjp   # residuals saved by the forward loop
        grads = scan_vjp(ctx, e, gs, act, val)
    elif p is CUSTOM_FUNCTION:
        grads = _custom_vjp(ctx, e, gs)
    else:
        if p.vjp is None:
            return
        out = tracer(e.out) if p.save_out else None
        ins = [val(a) for a in e.inputs]
        with ctx:
            grads = p.vjp(gs[0], out, *ins, **e.params)
    with ctx:
        for a, d, gr in zip(e.inputs, diff_in, grads):
            if not d or gr is None or a.aval.dtype is None or isinstance(gr, (int, float)):
                continue
            gr = _fit(gr, (a.aval.shape, a.aval.dtype))
            prev = ct.get(a)
            ct[a] = gr if prev is None else _added(ctx, prev, gr)


def _added(ctx, prev, gr):
    """``prev + gr``, cotangents of one value. Where `gr` is a read's gradient, an
    ``index_add`` into zeros just made, it adds into `prev` instead: the reads of a value
    written cell by cell (a lattice's) chain their adds into one buffer, which a plan updates
    in place, instead of each filling a full-size zeros that a kernel sums afterwards. Reads
    by index tensors keep their zeros (scatter_products.py takes an embedding's there)."""
    e = next((e for e in reversed(ctx.eqns[-4:]) if e.outs[0] is gr._var), None)
    if (e is None or e.prim is not INDEX_ADD or len(e.inputs) > 2 or prev.dtype is not gr.dtype
            or tuple(prev.shape) != tuple(gr.shape)):
        return prev + gr
    z = next((d for d in reversed(ctx.eqns[-4:]) if d.outs[0] is e.inputs[0]), None)
    if z is None or z.prim is not FULL or z.params["value"] != 0:
        return prev + gr
    v = e.inputs[1]   # (no index tensors: refused above)
    return index_add_(prev, v.value if isinstance(v, Literal) else _make_tracer(v, ctx), (), e.params["spec"])


def _cond_vjp(ctx, e, gs, act):
    tg, fg = e.params["true_graph"], e.params["false_graph"]
    operands = e.inputs[1:]
    op_active = [isinstance(a, Var) and a in act for a in operands]
    with ctx:
        cts = [g if g is not None else ops.zeros(o.aval.shape, dtype=o.aval.dtype)
               for o, g in zip(e.outs, gs)]
    jt = joint(tg, op_active, name="true_vjp")
    jf = joint(fg, op_active, name="false_vjp")
    atoms = [ctx.atom(_make_tracer(e.inputs[0], ctx))] + list(operands) + [ctx.atom(c) for c in cts]
    outs = ctx.emit_multi(COND, atoms, {"true_graph": jt, "false_graph": jf},
                          [v.aval for v, a in zip(operands, op_active) if a])
    it = iter(outs)
    return [None] + [next(it) if a else None for a in op_active]


def _refuse_scan(e: Eqn) -> None:
    """The error for a differentiated ``scan`` that `scan_ad.add_residuals` left as it was:
    its body has control flow, or its trip count is not a size."""
    if any(x.prim.kind == "control" for x in e.params["body_graph"].eqns):
        raise CompileError("reverse-mode differentiation of a loop whose body has its own control "
                           "flow (if/while/for decided at run time) is not supported yet; unroll the "
                           "inner loop (a constant range) or run that part eagerly")
    # (its residuals would be stacked on a leading dim known only at run time)
    raise CompileError("reverse-mode differentiation of a for loop whose trip count is a runtime "
                       "scalar argument is not supported yet (its residuals would have a "
                       "data-dependent size); make the count a size (range(x.shape[1])) or a constant")


def _custom_vjp(ctx, e, gs):
    cls = e.params["fn_cls"]
    n = e.params["n_args"]
    tensor_args = [_make_tracer(a, ctx) if isinstance(a, Var) else a.value for a in e.inputs[:n]]
    args = list(tensor_args)
    for pos, value in e.params["static_args"]:
        args.insert(pos, value)
    with ctx:
        fctx = FunctionCtx(e.params.get("needs_input_grad") or tuple(True for _ in args))
        cls._forward(fctx, *args)  # recomputes what forward saved, inside the backward program
        # (None where no gradient reached an output, if forward called set_materialize_grads(False))
        cts = [g if g is not None or not fctx.materialize_grads else ops.zeros(o.aval.shape, dtype=o.aval.dtype)
               for o, g in zip(e.outs, gs)]
        for pos, _ in e.params.get("static_outs", ()):   # (a plain output's gradient: None)
            cts.insert(pos, None)
        res = cls.backward(fctx, *cts)
    res = res if isinstance(res, tuple) else (res,)
    static_pos = {p for p, _ in e.params["static_args"]}
    check_grads(f"{cls.__name__}Backward", res, [None if i in static_pos else a.shape for i, a in enumerate(args)])
    res = list(res) + [None] * (len(args) - len(res))
    grads = [r for i, r in enumerate(res[:len(args)]) if i not in static_pos]
    return grads + [None] * (len(e.inputs) - len(grads))


def joint(graph: Graph, active_inputs, name: str = "joint") -> Graph:
    """A graph (inputs..., cotangents of outputs...) -> gradients of the active inputs.

    Inactive outputs get cotangent inputs too (ignored), so callers can pass one per output.
    """
    act = active_vars(graph, active_inputs)
    from .scan_ad import add_residuals
    graph = add_residuals(graph, act)   # differentiated loops also return their residuals
    ctx = TraceContext()
    ct_vars = [Var(a.aval) for a in graph.outputs]
    cts = {}
    with ctx:
        # An output listed twice (``return y, y``) gets the sum of its cotangents.
        for a, v in zip(graph.outputs, ct_vars):
            if isinstance(a, Var) and a in act:
                t = _make_tracer(v, ctx)
                cts[a] = t if a not in cts else cts[a] + t
    ct = _backward_eqns(ctx, graph, act, cts)
    with ctx:
        outs = [ctx.atom(ct[v] if ct.get(v) is not None
                         else ops.zeros(v.aval.shape, dtype=v.aval.dtype))
                for v, a in zip(graph.inputs, active_inputs) if a]
    eqns = tuple(graph.eqns) + _writes_last(ctx.eqns)
    inputs = tuple(graph.inputs) + tuple(ct_vars) + tuple(ctx._const_vars())
    if ctx.const_tensors:
        raise CompileError("internal: the backward pass captured a concrete tensor")
    return Graph(inputs, eqns, tuple(outs), name)


def _writes_last(eqns: list) -> tuple:
    """`eqns` with each that may write its first operand in place (``extra["donates"]``)
    moved after the other readers of that operand and of its views, where its own readers
    all come later still (an index_put's VJP writes g, and reads g[idx] for the next VJP):
    a plan may then let it write that memory instead of a copy."""
    root: dict = {}   # value -> the value whose memory it views (itself if none)
    last: dict = {}   # root -> the last equation reading its memory
    first: dict = {}  # value -> the first equation reading it
    for i, e in enumerate(eqns):
        for a in e.inputs:
            if isinstance(a, Var):
                first.setdefault(a, i)
                last[root.get(a, a)] = i
        p = e.prim
        if (p.is_view or (p.view_if is not None and p.view_if(e.params))) and e.inputs and isinstance(e.inputs[0], Var):
            for o in e.outs:
                root[o] = root.get(e.inputs[0], e.inputs[0])
    key = {}
    for i, e in enumerate(eqns):
        x = e.inputs[0] if e.inputs else None
        if e.prim.extra.get("donates") and isinstance(x, Var) and x not in root:
            end = last.get(x, i)
            if i < end < first.get(e.outs[0], len(eqns)):
                key[i] = (end, 1, i)
    if not key:
        return tuple(eqns)
    order = sorted(range(len(eqns)), key=lambda i: key.get(i) or (i, 0, i))
    return tuple(eqns[i] for i in order)


def _cheap(e: Eqn) -> bool:
    """Recomputed in the backward instead of saved: elementwise work (fused into the
    backward's kernels) and ``expand`` (a broadcast read there; saving it would write the
    full broadcast array to memory)."""
    return (e.prim.kind == "elementwise" or bool(e.prim.extra.get("broadcast_read"))) and len(e.outs) == 1


def split(graph: Graph, active_inputs, cheap=_cheap):
    """-> (forward graph, backward graph, n_saved).

    forward: inputs -> outputs + saved values.
    backward: inputs + saved + cotangents (one per output) -> grads of active inputs.
    `cheap(eqn)` says which forward equations the backward recomputes instead of saving.
    """
    # the backward's products of an embedding's rows, taken on the table's rows where it
    # has few: they read the forward's gather, which the backward half alone does not see
    j = backward_rewrites(joint(graph, active_inputs, "backward"), len(graph.eqns))
    n_in, n_out = len(graph.inputs), len(graph.outputs)
    fwd_eqns = list(j.eqns[:len(graph.eqns)])   # joint's forward: loops there also return residuals
    fwd_defined = {o: e for e in fwd_eqns for o in e.outs}
    bwd_eqns = list(j.eqns[len(fwd_eqns):])
    # (control-flow sub-graphs read forward values through their equation's inputs only)
    needed = list(dict.fromkeys(a for a in [a for e in bwd_eqns for a in e.inputs] + list(j.outputs)
                                if isinstance(a, Var) and a in fwd_defined))
    saved, recompute = [], set()
    stack = list(needed)
    while stack:
        v = stack.pop()
        e = fwd_defined.get(v)
        if e is None or id(e) in recompute or v in saved:
            continue
        if cheap(e):
            recompute.add(id(e))
            stack.extend(a for a in e.inputs if isinstance(a, Var) and a in fwd_defined)
        else:
            saved.append(v)
    rec_eqns = [e for e in fwd_eqns if id(e) in recompute]
    saved_in = [Var(v.aval) for v in saved]
    # The backward graph reads saved values through fresh input Vars.
    remap = dict(zip(saved, saved_in))

    def sub(a):
        return remap.get(a, a) if isinstance(a, Var) else a

    def re(e):
        return Eqn(e.prim, tuple(sub(a) for a in e.inputs), e.outs, e.params, e.loc)
    ct_inputs = j.inputs[n_in:n_in + n_out]
    bwd = Graph(tuple(graph.inputs) + tuple(saved_in) + tuple(ct_inputs),
                tuple(re(e) for e in rec_eqns + bwd_eqns), tuple(sub(a) for a in j.outputs), "backward")
    fwd = Graph(graph.inputs, tuple(fwd_eqns), tuple(graph.outputs) + tuple(saved), "forward")
    return fwd, bwd, len(saved)


def drawn(graph: Graph, active_inputs) -> tuple:
    """The random draws (top-level equations of kind "random") that the outputs depending
    on an active input are computed from. A backward differentiated again recomputes the
    forward's values; it must read these draws (`replaying`), not draw again."""
    if not any(e.prim.kind == "random" for e in graph.eqns):
        return ()
    act = active_vars(graph, active_inputs)
    need = {a for a in graph.outputs if isinstance(a, Var) and a in act}
    for e in reversed(graph.eqns):
        if any(o in need for o in e.outs):
            need.update(a for a in e.inputs if isinstance(a, Var))
    return tuple(e.outs[0] for e in graph.eqns if e.prim.kind == "random" and e.outs[0] in need)


def replaying(graph: Graph, draws: tuple) -> Graph:
    """`graph` with the equations drawing `draws` (from `drawn`) replaced by inputs, after
    its own. Refused where a loop or branch body draws: the recompute would draw again."""
    def body_draws(g):
        return any(e.prim.kind == "random" or any(isinstance(v, Graph) and body_draws(v) for v in e.params.values())
                   for e in g.eqns)
    if any(isinstance(v, Graph) and body_draws(v) for e in graph.eqns for v in e.params.values()):
        raise NotImplementedError(f"create_graph=True through compiled {graph.name}: a random draw inside a "
                                  f"loop or branch body would be drawn again when the backward recomputes "
                                  f"the forward; draw it outside the loop or branch")
    if not draws:
        return graph
    eqns = tuple(e for e in graph.eqns if not (e.prim.kind == "random" and e.outs[0] in draws))
    return Graph(tuple(graph.inputs) + tuple(draws), eqns, graph.outputs, graph.name)


def loss_joint(graph: Graph, active_inputs, k: int) -> Graph:
    """The forward pass and the gradients for a cotangent of exactly 1 on output `k` (a
    0-d loss), in one graph: inputs -> outputs + gradients of the active inputs.

    The backward pass is linear in the cotangent, so the gradients for any cotangent c
    are c times these. Computing them with the loss lets fusion put the loss and its
    gradient in one pass over memory (a GELU loss: read x, y, z once, write the three
    gradients) instead of a forward pass and a backward pass that reads them again.
    """
    j = joint(graph, active_inputs, "forward_and_grads")
    ct = j.inputs[len(graph.inputs) + k]
    a = ct.aval
    # The cotangent becomes a computed 0-d one (kernels read it as a scalar operand).
    one = Eqn(REGISTRY["full"], (), (ct,), {"shape": (), "value": 1, "dtype": a.dtype, "device": a.device})
    return Graph(graph.inputs, (one,) + tuple(j.eqns), tuple(graph.outputs) + tuple(j.outputs),
                 "forward_and_grads")


def _first_def(eqns, inputs) -> int:
    """The index of the first equation defining one of `inputs` (0 where one is no
    equation's): none before it depends on them, so a gradient taken from tensors made
    late in a long capture (torch.func's transforms per sample) differentiates only what
    follows."""
    want, i = {t._var for t in inputs}, len(eqns)
    while want and i:
        i -= 1
        want.difference_update(eqns[i].outs)
    return 0 if want else i


def traced_grad(outputs: list, inputs: list, grad_outputs: list, create_graph: bool) -> list:
    """``autograd.grad`` inside a captured function: the backward pass from `outputs` to
    `inputs` (tracers of the trace being recorded) recorded into that trace, so the compiled
    graph holds it, and differentiating that graph differentiates it again (create_graph).
    Without create_graph the gradients stop there (detached). None for an input the outputs
    do not depend on."""
    from ..errors import TraceError
    ctx = outputs[0]._trace
    if ctx.parent is not None or any(getattr(t, "_trace", None) is not ctx for t in outputs + inputs):
        raise TraceError("autograd.grad inside a branch or loop body of a compiled function, or on tensors "
                         "made outside it, is not supported; take the gradients outside")
    for i, t in enumerate(inputs):
        if not (t.requires_grad or ctx._reaches_grad([t._var], False)):
            raise RuntimeError(f"autograd.grad: input {i} does not require grad")
    graph = Graph(tuple(t._var for t in inputs), tuple(ctx.eqns[_first_def(ctx.eqns, inputs):]),
                  tuple(t._var for t in outputs), "grad")
    act = active_vars(graph, [True] * len(inputs))
    cts = {}
    # (ctx is active: the VJPs below enter it again, which overwrites what its exit restores)
    outer = ctx._prev, ctx._prev_hook, ctx._prev_number
    try:
        for i, (t, g) in enumerate(zip(outputs, grad_outputs)):
            if t._var not in act:
                if ctx._reaches_grad([t._var], False):   # (through other tensors: no gradient here)
                    continue
                raise RuntimeError(f"autograd.grad: element {i} of the outputs does not depend on the inputs")
            if g is None:
                if t.numel() != 1:
                    raise RuntimeError(f"autograd.grad: grad can be implicitly created only for scalar outputs; "
                                       f"output {i} has shape {tuple(t.shape)}: pass grad_outputs=")
                g = ops.ones_like(t)
            cts[t._var] = g if t._var not in cts else cts[t._var] + g
        ct = _backward_eqns(ctx, graph, act, cts)
    finally:
        ctx._prev, ctx._prev_hook, ctx._prev_number = outer
    return [None if ct.get(t._var) is None else ct[t._var] if create_graph else ct[t._var].detach()
            for t in inputs]
