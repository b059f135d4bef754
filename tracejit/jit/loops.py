"""Loops in the IR: ``while`` (``trace_while``), ``for i in range(n)`` (``trace_for_range``)
and ``scan`` (a loop whose trip count is known when it starts, as ``lax.scan``).

With a concrete condition or trip count they run as plain Python; with a traced one the
body is traced once into a sub-graph and one ``while``/``scan`` equation is emitted (the
primitives are defined in control.py, which also holds the helpers shared with ``if``).
"""
from __future__ import annotations

from typing import Optional

from .. import dtypes as _dt
from .. import ops
from ..errors import ScriptError, TraceError, user_location
from ..ops import registry as _reg
from ..ops.registry import Aval
from ..ops.step_slices import unbind_steps  # noqa: F401  (its home; the interpreter's scan slices with it)
from ..shapes import Sym
from ..tensor import Tensor
from .control import (SCAN, WHILE, as_pred, aval_of, graph_with_captures, is_traced, is_undefined, materialize,
                      union_captures)
from .tracer import TraceContext

__all__ = ["trace_while", "trace_for_range", "scan", "unbind_steps"]


def trace_while(cond_fn, body_fn, init: tuple, names: tuple = (), touched: Optional[dict] = None):
    """``while cond_fn(*vals): vals = body_fn(*vals)``; a graph loop once the condition is
    traced, but where the body updates a Python container (`trace_for_range`'s `touched`):
    then Python's, with the condition's value (an int argument's, guarded)."""
    vals = tuple(init)
    held = _containers(init, names, touched)
    while True:
        c = cond_fn(*vals)
        if is_traced(c):
            if not held:
                return _graph_while(cond_fn, body_fn, vals, names)
            try:
                c = bool(c)
            except TraceError:
                loc = user_location(2)
                raise ScriptError(
                    f"while loop{f' at {loc[0]}:{loc[1]}' if loc else ''}: its condition depends on "
                    f"tensor values, so it can only be a graph loop, whose body is traced once and "
                    f"cannot update the Python {type(held[1]).__name__} {held[0]!r}; carry the values "
                    f"in tensors (torch.cat) or bound the loop by a count") from None
        if isinstance(c, Tensor):
            c = bool(c._data)
        if not c:
            return vals
        vals = tuple(body_fn(*vals))


def _carried(vals):
    """A loop's carried values: numbers become 0-d tensors (so the body can change them,
    weakly typed as the Python numbers they were); returns (carried, positions of the
    tensors, their avals)."""
    carried = [ops.full((), v, dtype=_dt.scalar_dtype(v))
               if isinstance(v, (bool, int, float)) and not isinstance(v, Tensor) else v
               for v in vals]
    tensor_pos = [i for i, v in enumerate(carried) if isinstance(v, Tensor)]
    avals = []
    for i in tensor_pos:
        a = aval_of(carried[i])
        number = not isinstance(vals[i], Tensor)
        avals.append(Aval(a.shape, a.dtype, a.device, weak=a.weak or number))
    return carried, tensor_pos, avals


def _body_outputs(bsub, new, carried, tensor_pos, avals, names, what):
    """The body's new values of the carried tensors, cast back to the carried dtype;
    a changed shape, a widened dtype or a changed non-tensor value is a ScriptError."""
    body_outs = []
    for i, p in enumerate(tensor_pos):
        nv = new[p]
        name = names[p] if p < len(names) else f"value {p}"
        if not isinstance(nv, Tensor):
            nv = materialize(bsub, nv, avals[i])
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
            return fn(*_placed(carried, tensor_pos, [sub.new_input(a) for a in avals]))

    csub = TraceContext(ctx)
    c = _run(cond_fn, csub)
    if not isinstance(c, Tensor):
        raise ScriptError(f"{what}: the condition stopped depending on tensors inside the loop")
    with csub:
        c = as_pred(csub, c)
    bsub = TraceContext(ctx)
    new = tuple(_run(body_fn, bsub))
    body_outs = _body_outputs(bsub, new, carried, tensor_pos, avals, names, what)
    outer_all = union_captures([csub, bsub])
    cg = graph_with_captures(csub, csub.inputs, outer_all, [csub.atom(c)], "cond")
    bg = graph_with_captures(bsub, bsub.inputs, outer_all, body_outs, "body")
    outs = ctx.emit_multi(WHILE, [ctx.atom(carried[p]) for p in tensor_pos] + outer_all,
                          {"cond_graph": cg, "body_graph": bg}, _out_avals(avals, body_outs))
    return tuple(_placed(carried, tensor_pos, outs))


def _placed(vals, positions, new) -> list:
    """`vals` with the items at `positions` replaced by `new`'s, in order."""
    out = list(vals)
    for p, v in zip(positions, new):
        out[p] = v
    return out


def _out_avals(avals, body_outs) -> list:
    """A loop's result types: a carried value stays a number only if the body keeps it one."""
    return [Aval(a.shape, a.dtype, a.device, weak=a.weak and o.aval.weak)
            for a, o in zip(avals, body_outs)]


def _define_body_locals(body_fn, vals):
    """Names first bound inside the loop body (temporaries, ``y = x * i``) have no value
    on entry. A loop in the graph carries every name the body binds, so give those an
    initial value of the type the body gives them: trace the body once to learn it (that
    trace is thrown away). Python would leave such a name unbound if the loop never ran;
    here it reads as zeros."""
    undefined = [i for i, v in enumerate(vals) if is_undefined(v)]
    if not undefined:
        return vals
    ctx: TraceContext = _reg.trace_state.tracer
    probe = TraceContext(ctx)
    with probe:
        args = [probe.new_input(aval_of(v), requires_grad=False) if isinstance(v, Tensor) else v
                for v in vals]
        out = tuple(body_fn(*args))
    vals = list(vals)
    for i in undefined:
        o = out[i]
        if isinstance(o, Tensor):
            a = probe.atom(o).aval
            vals[i] = ops.zeros(tuple(a.shape), dtype=a.dtype, device=a.device)
    return tuple(vals)


def _containers(init: tuple, names: tuple, touched: Optional[dict]) -> Optional[tuple]:
    """(name, value) of the first Python list, dict or set among a loop's carried values
    and the values its body changes in place, or None."""
    named = tuple(names) + (None,) * (len(init) - len(names))
    for name, v in list(zip(named, init)) + list((touched or {}).items()):
        if isinstance(v, (list, dict, set)):
            return name, v
    return None


def trace_for_range(args: tuple, body_fn, init: tuple, names: tuple = (), touched: Optional[dict] = None):
    """``for i in range(*args): vals = body_fn(i, *vals)``; `touched`: the values of the names
    the body may change in place without binding them (``out.append(y)``).

    Plain int bounds run (unroll) in Python. Bounds that are runtime scalars or symbolic
    sizes (``range(x.shape[1])`` with a dynamic dim) become a ``scan``: its trip count is
    known when the loop starts, so it differentiates (the backward runs the steps in
    reverse), and a new sequence length does not recompile."""
    if len(args) == 1:
        start, stop, step = 0, args[0], 1
    elif len(args) == 2:
        (start, stop), step = args, 1
    else:
        start, stop, step = args
    symbolic = isinstance(stop, Sym) and isinstance(start, int) and start <= 2 and step == 1 \
        and not isinstance(start, bool)
    if _containers(init, names, touched):
        # The body updates a Python container (``outputs += [y]``, ``outputs.append(y)``):
        # that is Python structure, which a graph loop cannot carry. Run the loop in Python,
        # with its bounds specialized (a runtime scalar's value is guarded, a dynamic size
        # becomes static), as torch.compile does for loops it cannot keep.
        args = tuple(int(a) for a in args)
        symbolic = False
    if not any(is_traced(a) for a in args) and not symbolic:
        vals = tuple(init)
        for i in range(*[int(a) for a in args]):
            vals = tuple(body_fn(i, *vals))
        return vals
    if is_traced(step) or not isinstance(step, int) or step == 0:
        raise ScriptError("for-range over traced bounds needs a constant non-zero integer step")
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
        new = tuple(body_fn(k, *_placed(carried, tensor_pos, [bsub.new_input(a) for a in avals])))
    body_outs = _body_outputs(bsub, new, carried, tensor_pos, avals, names, what)
    outer_all = union_captures([bsub])
    bg = graph_with_captures(bsub, bsub.inputs, outer_all, body_outs, "body")
    outs = ctx.emit_multi(SCAN, [ctx.atom(length)] + [ctx.atom(carried[p]) for p in tensor_pos] + outer_all,
                          {"body_graph": bg, "n_carry": len(tensor_pos), "n_xs": 0, "reverse": False,
                           "trip": length if isinstance(length, (int, Sym)) else None},
                          _out_avals(avals, body_outs))
    return tuple(_placed(carried, tensor_pos, outs))


def scan(f, init, xs=(), length=None, reverse: bool = False):
    """``lax.scan`` for tracejit: ``carry, y = f(carry, x)`` over the leading axis of `xs`.

    `init` is a tensor or a tuple of tensors (the carry); `xs` a tensor or tuple of
    tensors sliced along dim 0 (or ``length`` steps with no xs); ``reverse=True`` runs the
    steps from the last slice to the first (ys[k] still belongs to xs[k]). Returns ``(carry, ys)``
    with ys stacked along a new dim 0 (a tuple when `f` returns a tuple of ys, None when
    it returns None). Eagerly it is a Python loop. Captured, it is one ``scan``
    equation whatever the length (never unrolled: the graph and its kernels stay the
    size of one step, and a dynamic length reuses the compiled program); it
    differentiates like any op (the backward runs the steps in reverse). User loops over
    recurrent cells are written with it; the layers (tracejit.nn.RNN/LSTM/GRU) are one
    whole-layer op each way instead (ops/lstm_prim.py, gru_prim.py, rnn_prim.py).
    """
    single_c = not isinstance(init, tuple)
    carry = (init,) if single_c else tuple(init)
    single_x = isinstance(xs, Tensor)
    xs_t = (xs,) if single_x else tuple(xs)
    n = length if length is not None else xs_t[0].shape[0]
    if _reg.trace_state.tracer is None:
        n = int(n)
        ys_steps = [None] * n
        slices = [unbind_steps(x) for x in xs_t]
        for k in (range(n - 1, -1, -1) if reverse else range(n)):
            c_arg = carry[0] if single_c else carry
            x_arg = slices[0][k] if single_x else tuple(s[k] for s in slices)
            c_new, y = f(c_arg, x_arg if xs_t else None)
            carry = (c_new,) if single_c else tuple(c_new)
            ys_steps[k] = y
        return (carry[0] if single_c else carry), _stack_ys(ys_steps, f, carry, xs_t, single_c, single_x)
    return _traced_scan(f, carry, xs_t, n, single_c, single_x, reverse)


def _stack_ys(steps, f, carry, xs_t, single_c, single_x):
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
    ctx: TraceContext = _reg.trace_state.tracer
    k_aval = Aval((), _dt.int64, weak=True)
    c_avals = [aval_of(c) for c in carry]
    x_avals = [Aval(tuple(aval_of(x).shape[1:]), x.dtype, x.device) for x in xs_t]
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
    bg = graph_with_captures(sub, sub.inputs, outer, c_out + y_out, "scan_body")
    out_avals = c_avals + [Aval((n,) + tuple(v.aval.shape), v.aval.dtype, v.aval.device) for v in y_out]
    outs = ctx.emit_multi(SCAN, [ctx.atom(n)] + [ctx.atom(c) for c in carry] + [ctx.atom(x) for x in xs_t] + outer,
                          {"body_graph": bg, "n_carry": len(carry), "n_xs": len(xs_t), "reverse": reverse,
                           "trip": n}, out_avals)
    cs, ys_o = outs[:len(carry)], outs[len(carry):]
    carry_out = cs[0] if single_c else tuple(cs)
    if y is None:
        return carry_out, None
    return carry_out, (ys_o[0] if isinstance(y, Tensor) else tuple(ys_o))
