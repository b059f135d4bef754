"""Structured control flow in the IR: ``cond``, ``while`` and captured custom Functions.

These primitives hold sub-graphs in their params and are executed by the
interpreter (and later the compiler) rather than by an array implementation. The
``trace_cond`` / ``trace_while`` / ``trace_for_range`` functions are what code
rewritten by ``@script`` calls: with a concrete condition they run plain Python;
with a traced condition they trace each branch/body into a sub-graph and emit one
structured equation.
"""
from __future__ import annotations

from .. import dtypes as _dt
from ..errors import ScriptError, TraceError, user_location
from ..ops import registry as _reg
from ..ops.registry import Aval, defprim
from ..tensor import Tensor
from .ir import Graph, Var
from .tracer import TraceContext, Tracer

__all__ = ["COND", "WHILE", "SCAN", "CUSTOM_FUNCTION", "scan", "trace_cond", "trace_while", "trace_for_range",
           "UNDEFINED"]


def _no_impl(*a, **k):
    raise RuntimeError("control-flow primitives are run by the interpreter")


COND = defprim("cond", _no_impl, _no_impl, kind="control")


def _check_impl(xp, pred, *, exc_type, message, where):
    if bool(pred):
        raise exc_type(message)
    return pred


# ``if <traced condition>: raise E(msg)`` under @script: the branch that raises becomes a
# check that raises E(msg) at run time when the condition selects it (and only then, as
# in Python). It has an effect, so dead-code elimination keeps it though nothing reads it.
CHECK = defprim("check", _check_impl, lambda p, **kw: Aval((), _dt.bool_, p.device), None,
                kind="other", extra={"effect": True})


def _raised_by_user_code(exc: BaseException) -> str:
    """"file:line" when `exc` came from a ``raise`` in user code (its innermost frame is
    outside tracejit), else "" (an op's own error, e.g. a shape mismatch, stays an error
    of the capture)."""
    import os
    from ..errors import TracejitError, _PKG_DIR
    if isinstance(exc, TracejitError):
        return ""
    tb = exc.__traceback__
    if tb is None:
        return ""
    while tb.tb_next is not None:
        tb = tb.tb_next
    fn = tb.tb_frame.f_code.co_filename
    if fn.startswith(_PKG_DIR) or fn.startswith("<tracejit"):
        return ""
    return f"{os.path.basename(fn)}:{tb.tb_lineno}"
WHILE = defprim("while", _no_impl, _no_impl, kind="control")
# ``scan``: a loop whose trip count is known when it starts (a size, a runtime scalar),
# as lax.scan. Inputs: [length, carries..., xs..., consts...]; params: ``body_graph``
# (k, carries..., x slices..., consts...) -> (new carries..., y slices...), ``n_carry``,
# ``n_xs``, ``reverse`` (k runs length-1 .. 0), ``trip`` (the length as a size, or None). Outputs: final carries..., ys stacked on a
# new leading axis (ys[k] is step k's slice, either direction). Unlike ``while`` it has a
# reverse mode: the backward loop runs the body's VJP from the last step to the first.
SCAN = defprim("scan", _no_impl, _no_impl, kind="control")
CUSTOM_FUNCTION = defprim("custom_function", _no_impl, _no_impl, kind="control")


class _Undefined:
    """A name not (yet) bound on some path through a converted if/while."""

    _inst = None

    def __new__(cls):
        if cls._inst is None:
            cls._inst = object.__new__(cls)
        return cls._inst

    def __repr__(self):
        return "<undefined>"


UNDEFINED = _Undefined()


class Unbound:
    """A variable an if/else decided at run time binds on one path only. Python would
    raise UnboundLocalError where it is read on the other path; the capture cannot know
    which path runs, so any use of it is a ScriptError naming the variable and both lines.
    Not using it afterwards is fine, as in Python."""

    __slots__ = ("name", "where")

    def __init__(self, name: str, where: str):
        self.name, self.where = name, where

    def error(self, how: str = "") -> ScriptError:
        loc = user_location(3)
        used = how or (f" and read at {loc[0]}:{loc[1]}" if loc else "")
        return ScriptError(f"`{self.name}` is assigned on only one path of the {self.where}{used}; "
                           f"its condition is decided at run time, so `{self.name}` may be unbound "
                           f"there. Assign it on both paths (or before the if).")

    def __repr__(self):
        return f"<unbound {self.name}>"


def _unbound_use(self, *a, **k):
    raise self.error()


for _name in ("__bool__", "__getattr__", "__getitem__", "__iter__", "__len__", "__call__", "__array__",
              "__float__", "__int__", "__index__", "__neg__", "__pos__", "__abs__", "__invert__",
              "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__",
              "__matmul__", "__rmatmul__", "__lt__", "__le__", "__gt__", "__ge__", "__and__", "__rand__",
              "__or__", "__ror__", "__xor__", "__rxor__"):
    setattr(Unbound, _name, _unbound_use)
del _name


def is_undefined(v) -> bool:
    return v is UNDEFINED or type(v) is Unbound


def _is_traced(x) -> bool:
    return isinstance(x, Tracer)


def _as_pred(ctx: TraceContext, p) -> Tracer:
    from .. import ops
    if not (p.dtype is _dt.bool_):
        p = ops.ne(p, 0)
    if p.ndim != 0:
        if p.numel() != 1:
            raise TraceError(f"the condition of an if/while is a tensor of shape {tuple(p.shape)}; "
                             f"it must have exactly one element (use .any() or .all())")
        p = ops.reshape(p, ())
    return p


def _trace_branch(parent: TraceContext, fn, operands, name: str):
    """Trace ``fn(*operands)`` as a sub-graph. Tensor operands become inputs."""
    sub = TraceContext(parent)
    with sub:
        args = []
        for o in operands:
            if isinstance(o, Tensor):
                args.append(sub.new_input(_aval_of(o), requires_grad=o.requires_grad))
            else:
                args.append(o)
        out = fn(*args)
    return sub, out


def _aval_of(t: Tensor) -> Aval:
    return t._var.aval if isinstance(t, Tracer) else Aval(t._data.shape, t.dtype, t.device)


def _finish(parents_outer: list, subs: list, results: list, names, what: str):
    """Unify branch results; returns the branch graphs' output atoms and python-valued outputs."""
    n = len(results[0])
    kinds = []
    for i in range(n):
        vals = [r[i] for r in results]
        is_t = [isinstance(v, Tensor) for v in vals]
        name = names[i] if names and i < len(names) else f"value {i}"
        if any(is_undefined(v) for v in vals):
            kinds.append("undef")
        elif all(is_t):
            a0 = _aval_of(vals[0]) if not isinstance(vals[0], Tracer) or vals[0]._trace is subs[0] else None
            avs = []
            for s, v in zip(subs, vals):
                avs.append(s.atom(v).aval)
            for av in avs[1:]:
                if tuple(av.shape) != tuple(avs[0].shape) or av.dtype is not avs[0].dtype:
                    raise ScriptError(f"{what}: `{name}` is a tensor of type {avs[0]} on one path and "
                                      f"{av} on another; both paths must agree on shape and dtype")
            kinds.append("tensor")
            del a0
        elif not any(is_t):
            first = vals[0]
            for v in vals[1:]:
                if v is not first and not (type(v) is type(first) and v == first):
                    if isinstance(first, (int, float, bool)) and isinstance(v, (int, float, bool)):
                        kinds.append("promote")
                        break
                    raise ScriptError(f"{what}: `{name}` takes different non-tensor values on different "
                                      f"paths ({first!r} vs {v!r}); only tensors and numbers can differ")
            else:
                kinds.append("python")
        else:
            kinds.append("promote")
    return kinds


def _materialize(sub: TraceContext, v, like_aval=None):
    """Turn a Python number into a tensor inside `sub` (for paths that disagree)."""
    from .. import ops
    with sub:
        if isinstance(v, Tensor):
            return v
        dt = _dt.scalar_dtype(v) if like_aval is None else like_aval.dtype
        return ops.full((), v, dtype=dt)


def _union_captures(subs):
    outer = []
    for s in subs:
        for a in s.captured_outer:
            if a not in outer:
                outer.append(a)
    return outer


def _graph_with_captures(sub: TraceContext, n_inputs_vars, outer_all, outs, name):
    cap_vars = []
    for a in outer_all:
        v = sub.captured.get(a)
        cap_vars.append(v if v is not None else Var(a.aval))
    return Graph(tuple(n_inputs_vars) + tuple(cap_vars), tuple(sub.eqns), tuple(outs), name)


def trace_cond(pred, true_fn, false_fn, operands: tuple = (), names: tuple = (), effect: str = ""):
    """``true_fn(*operands) if pred else false_fn(*operands)``, as graph control flow when traced.

    `effect` names a Python side effect in the branches (an attribute assignment): fine when
    the condition is a plain value, an error when it is traced, as both branches then run.
    """
    if not _is_traced(pred):
        if isinstance(pred, Tensor) and _reg.trace_state.tracer is not None:
            pred = bool(pred._data)
        return true_fn(*operands) if pred else false_fn(*operands)
    ctx: TraceContext = _reg.trace_state.tracer
    if ctx is None:
        raise TraceError("a traced value was used outside of its trace")
    if effect:
        raise ScriptError(f"{effect} inside an if/else whose condition is decided at run time (it "
                          f"depends on a tensor or a scalar argument): both branches are captured, so "
                          f"Python side effects cannot depend on the condition. Compute the value "
                          f"with the if/else and assign it after it.")
    pred = _as_pred(ctx, pred)
    single = not isinstance(operands, tuple)
    subs, results, raised = [], [], []
    for fn, nm in ((true_fn, "true"), (false_fn, "false")):
        try:
            s, r = _trace_branch(ctx, fn, operands, nm)
        except Exception as exc:
            where = _raised_by_user_code(exc)
            if not where:
                raise
            raised.append((nm, exc, where))
            continue
        subs.append(s)
        results.append(r if isinstance(r, tuple) else (r,))
    if raised:
        survivor = _raise_at_run_time(ctx, pred, raised, true_fn, false_fn)
        return survivor(*operands)
    what = "if/else"
    loc = user_location(2)
    if loc:
        what = f"if/else at {loc[0]}:{loc[1]}"
    if len(results[0]) != len(results[1]):
        raise ScriptError(f"{what}: the branches produce different numbers of values")
    _cast_numbers(subs, results)
    kinds = _finish(None, subs, results, names, what)
    # Numbers that differ between branches (or meet a tensor) become tensors; numbers on
    # both paths stay numbers (weakly typed values, returned as Python numbers).
    numbers = set()
    for i, k in enumerate(kinds):
        if k == "promote":
            ref = next((subs[j].atom(results[j][i]).aval for j in range(2)
                        if isinstance(results[j][i], Tensor)), None)
            if ref is None:
                numbers.add(i)
                vals = [results[j][i] for j in range(2)]
                dt = _dt.result_type([], [_dt.scalar_dtype(v) for v in vals])
                ref = Aval((), dt)
            for j in range(2):
                v = results[j][i]
                if not isinstance(v, Tensor):
                    results[j] = results[j][:i] + (_materialize(subs[j], v, ref),) + results[j][i + 1:]
            kinds[i] = "tensor"
    outer_all = _union_captures(subs)
    graphs = []
    for s, r, nm in zip(subs, results, ("true", "false")):
        outs = [s.atom(r[i]) for i, k in enumerate(kinds) if k == "tensor"]
        graphs.append(_graph_with_captures(s, s.inputs, outer_all, outs, nm))
    tensor_ops = [ctx.atom(o) for o in operands if isinstance(o, Tensor)]
    out_avals = []
    for i in (i for i, k in enumerate(kinds) if k == "tensor"):
        a, b = (g.outputs[len(out_avals)].aval for g in graphs)
        out_avals.append(Aval(a.shape, a.dtype, a.device, weak=i in numbers or (a.weak and b.weak)))
    outs = ctx.emit_multi(COND, [ctx.atom(pred)] + tensor_ops + outer_all,
                          {"true_graph": graphs[0], "false_graph": graphs[1]}, out_avals)
    it = iter(outs)
    final = []
    for i, k in enumerate(kinds):
        if k == "tensor":
            final.append(next(it))
        elif k == "undef":
            nm = names[i] if names and i < len(names) else f"value {i}"
            final.append(Unbound(nm, what))
        else:
            final.append(results[0][i])
    if single:
        return final[0]
    return tuple(final)


def _raise_at_run_time(ctx: TraceContext, pred, raised: list, true_fn, false_fn):
    """One branch raised (a ``raise`` statement): record a check that raises at run time
    when the condition selects that branch, and return the other branch's function, which
    the caller runs inline (it is the only path on which the program continues). Both
    branches raised: that is what the program does, so the capture raises."""
    from .. import ops
    if len(raised) == 2:
        raise raised[0][1]
    nm, exc, where = raised[0]
    selects = pred if nm == "true" else ops.logical_not(pred)
    ctx.emit_multi(CHECK, [ctx.atom(selects)],
                   {"exc_type": type(exc), "message": str(exc), "where": where},
                   [Aval((), _dt.bool_, _aval_of(pred).device)])
    return false_fn if nm == "true" else true_fn


def _cast_numbers(subs, results) -> None:
    """A runtime number on one path and a tensor on the other (``n if c else x.sum()``):
    the number takes the tensor's dtype, as it would in arithmetic with it."""
    from .. import ops
    for i in range(len(results[0])):
        vals = [r[i] for r in results]
        if not all(isinstance(v, Tensor) for v in vals):
            continue
        avs = [s.atom(v).aval for s, v in zip(subs, vals)]
        strong = [a for a in avs if not a.weak]
        if not strong or len(strong) == len(avs) or any(a.dtype is not strong[0].dtype for a in strong):
            continue
        for j, (s, v, a) in enumerate(zip(subs, vals, avs)):
            if a.weak and a.dtype is not strong[0].dtype:
                with s:
                    results[j] = results[j][:i] + (ops.cast(v, strong[0].dtype),) + results[j][i + 1:]


def trace_ifexp(pred, true_thunk, false_thunk):
    return trace_cond(pred, lambda: (true_thunk(),), lambda: (false_thunk(),), (), ("value",))[0]


def trace_while(cond_fn, body_fn, init: tuple, names: tuple = ()):
    """``while cond_fn(*vals): vals = body_fn(*vals)``; a graph loop once the condition is traced."""
    vals = tuple(init)
    while True:
        c = cond_fn(*vals)
        if _is_traced(c):
            return _graph_while(cond_fn, body_fn, vals, names)
        if isinstance(c, Tensor):
            c = bool(c._data)
        if not c:
            return vals
        vals = tuple(body_fn(*vals))


def _carried(vals):
    """A loop's carried values: numbers become 0-d tensors (so the body can change them,
    weakly typed as the Python numbers they were); returns (carried, positions of the
    tensors, their avals)."""
    from .. import ops
    carried = []
    for v in vals:
        if isinstance(v, (bool, int, float)) and not isinstance(v, Tensor):
            carried.append(ops.full((), v, dtype=_dt.scalar_dtype(v)))
        else:
            carried.append(v)
    tensor_pos = [i for i, v in enumerate(carried) if isinstance(v, Tensor)]
    avals = []
    for i in tensor_pos:
        a = _aval_of(carried[i])
        number = not isinstance(vals[i], Tensor)
        avals.append(Aval(a.shape, a.dtype, a.device, weak=a.weak or number))
    return carried, tensor_pos, avals


def _body_outputs(bsub, new, carried, tensor_pos, avals, names, what):
    """The body's new values of the carried tensors, cast back to the carried dtype;
    a changed shape, a widened dtype or a changed non-tensor value is a ScriptError."""
    from .. import ops
    body_outs = []
    for i, p in enumerate(tensor_pos):
        nv = new[p]
        name = names[p] if p < len(names) else f"value {p}"
        if not isinstance(nv, Tensor):
            nv = _materialize(bsub, nv, avals[i])
        at = bsub.atom(nv)
        if at.aval.dtype is not avals[i].dtype:
            if avals[i].dtype.category < at.aval.dtype.category:
                raise ScriptError(f"{what}: `{name}` changes dtype from {avals[i].dtype.name} inside the loop")
            with bsub:
                at = bsub.atom(ops.cast(nv, avals[i].dtype))
        if tuple(at.aval.shape) != tuple(avals[i].shape):
            raise ScriptError(f"{what}: `{name}` changes shape from {tuple(avals[i].shape)} to "
                              f"{tuple(at.aval.shape)} inside the loop; loop-carried tensors must keep "
                              f"their shape")
        body_outs.append(at)
    for p, v in enumerate(new):
        if p not in tensor_pos and not (v is carried[p] or v == carried[p]):
            raise ScriptError(f"{what}: non-tensor value `{names[p] if p < len(names) else p}` changes inside the loop")
    return body_outs


def _graph_while(cond_fn, body_fn, vals, names):
    ctx: TraceContext = _reg.trace_state.tracer
    loc = user_location(3)
    what = f"while loop at {loc[0]}:{loc[1]}" if loc else "while loop"
    vals = _define_body_locals(body_fn, vals)
    carried, tensor_pos, avals = _carried(vals)

    def _run(fn, sub):
        with sub:
            ins = [sub.new_input(a) for a in avals]
            full = list(carried)
            for p, t in zip(tensor_pos, ins):
                full[p] = t
            return ins, fn(*full)

    csub = TraceContext(ctx)
    cins, c = _run(cond_fn, csub)
    if not isinstance(c, Tensor):
        raise ScriptError(f"{what}: the condition stopped depending on tensors inside the loop")
    with csub:
        c = _as_pred(csub, c)
    bsub = TraceContext(ctx)
    bins, new = _run(body_fn, bsub)
    new = tuple(new)
    body_outs = _body_outputs(bsub, new, carried, tensor_pos, avals, names, what)
    outer_all = _union_captures([csub, bsub])
    cg = _graph_with_captures(csub, csub.inputs, outer_all, [csub.atom(c)], "cond")
    bg = _graph_with_captures(bsub, bsub.inputs, outer_all, body_outs, "body")
    # A carried value stays a number only if the body keeps it one.
    out_avals = [Aval(a.shape, a.dtype, a.device, weak=a.weak and o.aval.weak) for a, o in zip(avals, body_outs)]
    outs = ctx.emit_multi(WHILE, [ctx.atom(carried[p]) for p in tensor_pos] + outer_all,
                          {"cond_graph": cg, "body_graph": bg}, out_avals)
    final = list(carried)
    for p, o in zip(tensor_pos, outs):
        final[p] = o
    return tuple(final)


def _define_body_locals(body_fn, vals):
    """Names first bound inside the loop body (temporaries, ``y = x * i``) have no value
    on entry. A loop in the graph carries every name the body binds, so give those an
    initial value of the type the body gives them: trace the body once to learn it (that
    trace is thrown away). Python would leave such a name unbound if the loop never ran;
    here it reads as zeros."""
    from .. import ops
    undefined = [i for i, v in enumerate(vals) if is_undefined(v)]
    if not undefined:
        return vals
    ctx: TraceContext = _reg.trace_state.tracer
    probe = TraceContext(ctx)
    with probe:
        args = [probe.new_input(_aval_of(v), requires_grad=False) if isinstance(v, Tensor) else v
                for v in vals]
        out = tuple(body_fn(*args))
    vals = list(vals)
    for i in undefined:
        o = out[i]
        if isinstance(o, Tensor):
            a = probe.atom(o).aval
            vals[i] = ops.zeros(tuple(a.shape), dtype=a.dtype, device=a.device)
    return tuple(vals)


def trace_for_range(args: tuple, body_fn, init: tuple, names: tuple = ()):
    """``for i in range(*args): vals = body_fn(i, *vals)``.

    Plain int bounds run (unroll) in Python. Bounds that are runtime scalars or symbolic
    sizes (``range(x.shape[1])`` with a dynamic dim) become a ``scan``: its trip count is
    known when the loop starts, so it differentiates (the backward runs the steps in
    reverse), and a new sequence length does not recompile."""
    from ..shapes import Sym
    if len(args) == 1:
        start, stop, step = 0, args[0], 1
    elif len(args) == 2:
        (start, stop), step = args, 1
    else:
        start, stop, step = args
    symbolic = isinstance(stop, Sym) and isinstance(start, int) and start <= 2 and step == 1 \
        and not isinstance(start, bool)
    if any(isinstance(v, (list, dict, set)) for v in init):
        # The body updates a Python container (``outputs += [y]``): that is Python
        # structure, which a graph loop cannot carry. Run the loop in Python, with its
        # bounds specialized (a runtime scalar's value is guarded, a dynamic size becomes
        # static), as torch.compile does for loops it cannot keep.
        args = tuple(int(a) for a in args)
        symbolic = False
    if not any(_is_traced(a) for a in args) and not symbolic:
        vals = tuple(init)
        for i in range(*[int(a) for a in args]):
            vals = tuple(body_fn(i, *vals))
        return vals
    if _is_traced(step) or not isinstance(step, int) or step == 0:
        raise ScriptError("for-range over traced bounds needs a constant non-zero integer step")
    from .. import ops
    if symbolic:
        length = stop - start            # a size: >= 2 - start >= 0
    else:
        span = stop - start if not (isinstance(start, int) and start == 0) else stop
        if step != 1:
            span = (span + (step - 1 if step > 0 else step + 1)) // step
        length = ops.maximum(span, 0)

    def body(k, *vals):
        return tuple(body_fn(k * step + start if (step, start) != (1, 0) else k, *vals))

    return _graph_scan(length, body, tuple(init), names)


def _graph_scan(length, body_fn, vals, names):
    """A ``scan`` with carries only (no xs/ys) for a for-range loop. Its ``trip`` param
    keeps the trip count when it is a size (int or symbolic dim): reverse mode stacks
    per-step residuals along it."""
    from ..shapes import Sym
    ctx: TraceContext = _reg.trace_state.tracer
    loc = user_location(4)
    what = f"for loop at {loc[0]}:{loc[1]}" if loc else "for loop"
    k_aval = Aval((), _dt.int64, weak=True)
    vals = _define_body_locals(
        lambda *vs: body_fn(_reg.trace_state.tracer.new_input(k_aval), *vs), vals)
    carried, tensor_pos, avals = _carried(vals)
    bsub = TraceContext(ctx)
    with bsub:
        k = bsub.new_input(k_aval)
        ins = [bsub.new_input(a) for a in avals]
        full = list(carried)
        for p, t in zip(tensor_pos, ins):
            full[p] = t
        new = tuple(body_fn(k, *full))
    body_outs = _body_outputs(bsub, new, carried, tensor_pos, avals, names, what)
    outer_all = _union_captures([bsub])
    bg = _graph_with_captures(bsub, bsub.inputs, outer_all, body_outs, "body")
    out_avals = [Aval(a.shape, a.dtype, a.device, weak=a.weak and o.aval.weak) for a, o in zip(avals, body_outs)]
    outs = ctx.emit_multi(SCAN, [ctx.atom(length)] + [ctx.atom(carried[p]) for p in tensor_pos] + outer_all,
                          {"body_graph": bg, "n_carry": len(tensor_pos), "n_xs": 0, "reverse": False,
                           "trip": length if isinstance(length, (int, Sym)) else None},
                          out_avals)
    final = list(carried)
    for p, o in zip(tensor_pos, outs):
        final[p] = o
    return tuple(final)


def scan(f, init, xs=(), length=None, reverse: bool = False):
    """``lax.scan`` for tracejit: ``carry, y = f(carry, x)`` over the leading axis of `xs`.

    `init` is a tensor or a tuple of tensors (the carry); `xs` a tensor or tuple of
    tensors sliced along dim 0 (or ``length`` steps with no xs); ``reverse=True`` runs the
    steps from the last slice to the first (ys[k] still belongs to xs[k]). Returns ``(carry, ys)``
    with ys stacked along a new dim 0 (a tuple when `f` returns a tuple of ys, None when
    it returns None). Eagerly it is a Python loop. Captured, it is one ``scan``
    equation whatever the length (never unrolled: the graph and its kernels stay the
    size of one step, and a dynamic length reuses the compiled program); it
    differentiates like any op (the backward runs the steps in reverse). Recurrent
    layers (tracejit.nn.RNN/LSTM/GRU) are written with it.
    """
    single_c = not isinstance(init, tuple)
    carry = (init,) if single_c else tuple(init)
    single_x = isinstance(xs, Tensor)
    xs_t = (xs,) if single_x else tuple(xs)
    n = length if length is not None else xs_t[0].shape[0]
    if _reg.trace_state.tracer is None:
        n = int(n)
        ys_steps = [None] * n
        for k in (range(n - 1, -1, -1) if reverse else range(n)):
            c_arg = carry[0] if single_c else carry
            x_arg = xs_t[0][k] if single_x else tuple(x[k] for x in xs_t)
            c_new, y = f(c_arg, x_arg if xs_t else None)
            carry = (c_new,) if single_c else tuple(c_new)
            ys_steps[k] = y
        return (carry[0] if single_c else carry), _stack_ys(ys_steps, f, carry, xs_t, single_c, single_x)
    return _traced_scan(f, carry, xs_t, n, single_c, single_x, reverse)


def _stack_ys(steps, f, carry, xs_t, single_c, single_x):
    from .. import ops
    if not steps:
        # zero steps: the ys' shapes come from one probe call on zeros (results dropped)
        xz = tuple(ops.zeros(tuple(x.shape[1:]), dtype=x.dtype, device=x.device) for x in xs_t)
        _, y = f(carry[0] if single_c else carry, (xz[0] if single_x else xz) if xs_t else None)
        if y is None:
            return None
        ys = (y,) if isinstance(y, Tensor) else tuple(y)
        empty = tuple(ops.zeros((0,) + tuple(v.shape), dtype=v.dtype, device=v.device) for v in ys)
        return empty[0] if isinstance(y, Tensor) else empty
    if steps[0] is None:
        return None
    if isinstance(steps[0], tuple):
        return tuple(ops.stack([s[j] for s in steps]) for j in range(len(steps[0])))
    return ops.stack(steps)


def _traced_scan(f, carry, xs_t, n, single_c, single_x, reverse):
    from .. import ops
    ctx: TraceContext = _reg.trace_state.tracer
    k_aval = Aval((), _dt.int64, weak=True)
    c_avals = [_aval_of(c) for c in carry]
    x_avals = [Aval(tuple(_aval_of(x).shape[1:]), x.dtype, x.device) for x in xs_t]
    sub = TraceContext(ctx)
    with sub:
        sub.new_input(k_aval)
        c_in = [sub.new_input(a, requires_grad=c.requires_grad) for a, c in zip(c_avals, carry)]
        x_in = [sub.new_input(a, requires_grad=x.requires_grad) for a, x in zip(x_avals, xs_t)]
        c_new, y = f(c_in[0] if single_c else tuple(c_in),
                     (x_in[0] if single_x else tuple(x_in)) if xs_t else None)
        c_new = (c_new,) if single_c else tuple(c_new)
        ys = () if y is None else (y,) if isinstance(y, Tensor) else tuple(y)
        c_out = [sub.atom(ops.cast(c, a.dtype) if sub.atom(c).aval.dtype is not a.dtype else c)
                 for c, a in zip(c_new, c_avals)]
        for c, a in zip(c_out, c_avals):
            if tuple(c.aval.shape) != tuple(a.shape):
                raise ScriptError(f"scan: the carry changes shape from {tuple(a.shape)} to {tuple(c.aval.shape)}")
        y_out = [sub.atom(v) for v in ys]
    outer = list(sub.captured_outer)
    bg = _graph_with_captures(sub, sub.inputs, outer, c_out + y_out, "scan_body")
    out_avals = c_avals + [Aval((n,) + tuple(v.aval.shape), v.aval.dtype, v.aval.device) for v in y_out]
    outs = ctx.emit_multi(SCAN, [ctx.atom(n)] + [ctx.atom(c) for c in carry] + [ctx.atom(x) for x in xs_t] + outer,
                          {"body_graph": bg, "n_carry": len(carry), "n_xs": len(xs_t), "reverse": reverse,
                           "trip": n}, out_avals)
    cs, ys_o = outs[:len(carry)], outs[len(carry):]
    carry_out = cs[0] if single_c else tuple(cs)
    if y is None:
        return carry_out, None
    return carry_out, (ys_o[0] if isinstance(y, Tensor) else tuple(ys_o))
