"""Structured control flow in the IR: the primitives, and ``if`` (``cond``).

The primitives ``cond``, ``while``, ``scan``, ``check`` and ``custom_function`` hold
sub-graphs in their params and are executed by the interpreter (and the backends)
rather than by an array implementation. ``trace_cond`` / ``trace_ifexp`` are what code
rewritten by ``@script`` calls for ``if``: with a concrete condition they run plain
Python; with a traced one they trace each branch into a sub-graph and emit one ``cond``.
Also here: the helpers branches and loop bodies share (tracing a sub-graph, unifying
what paths return, captured outer values). Loops are in loops.py.
"""
from __future__ import annotations

import os

from .. import dtypes as _dt
from .. import ops
from ..errors import _PKG_DIR, ScriptError, TraceError, TracejitError, user_location
from ..ops import registry as _reg
from ..ops.registry import Aval, defprim
from ..ops.value_checks_prim import CHECK
from ..tensor import Tensor
from .ir import Graph, Var, VerifyError
from .tracer import TraceContext, Tracer

__all__ = ["COND", "CHECK", "WHILE", "SCAN", "CUSTOM_FUNCTION", "trace_cond", "trace_ifexp", "UNDEFINED",
           "Unbound", "is_undefined", "is_traced"]


def _no_impl(*a, **k):
    raise RuntimeError("control-flow primitives are run by the interpreter")


def _same_type(a: Aval, b: Aval) -> bool:
    return tuple(a.shape) == tuple(b.shape) and a.dtype is b.dtype


def _check_cond(i: int, e) -> None:
    """ir.verify's check of a cond: operands and results agree with both branches."""
    where = f"eqn {i} ({e.prim.name})"
    pred = e.inputs[0] if e.inputs else None
    if pred is None or tuple(pred.aval.shape) != () or not pred.aval.dtype.is_bool:
        raise VerifyError(f"{where}: the predicate must be a bool[] value")
    ops = e.inputs[1:]
    for k in ("true_graph", "false_graph"):
        g = e.params[k]
        if len(g.inputs) != len(ops) or not all(_same_type(a.aval, v.aval) for a, v in zip(ops, g.inputs)):
            raise VerifyError(f"{where}: operands do not match the inputs of {k}")
        if len(g.outputs) != len(e.outs) or not all(_same_type(a.aval, o.aval) for a, o in zip(g.outputs, e.outs)):
            raise VerifyError(f"{where}: outputs of {k} do not match the equation's outputs")


def _check_while(i: int, e) -> None:
    """ir.verify's check of a while: operands and results agree with its condition and body."""
    where = f"eqn {i} ({e.prim.name})"
    cg, bg = e.params["cond_graph"], e.params["body_graph"]
    for g in (cg, bg):
        if len(g.inputs) != len(e.inputs) or not all(_same_type(a.aval, v.aval) for a, v in zip(e.inputs, g.inputs)):
            raise VerifyError(f"{where}: operands do not match the inputs of {g.name!r}")
    if len(cg.outputs) != 1 or tuple(cg.outputs[0].aval.shape) != () or not cg.outputs[0].aval.dtype.is_bool:
        raise VerifyError(f"{where}: the loop condition must return one bool[] value")
    n = len(e.outs)
    if len(bg.outputs) != n or not all(_same_type(a.aval, o.aval) for a, o in zip(bg.outputs, e.outs)) \
            or not all(_same_type(a.aval, o.aval) for a, o in zip(e.inputs[:n], e.outs)):
        raise VerifyError(f"{where}: loop-carried values change type in the body")


COND = defprim("cond", _no_impl, _no_impl, kind="control", extra={"check": _check_cond})


# ``if <traced condition>: raise E(msg)`` under @script: the branch that raises becomes a
# check (ops/value_checks_prim.py's CHECK) that raises E(msg) at run time when the
# condition selects it, and only then, as in Python.


def _raised_by_user_code(exc: BaseException) -> str:
    """"file:line" when `exc` came from a ``raise`` in user code (its innermost frame is
    outside tracejit), else "" (an op's own error, e.g. a shape mismatch, stays an error
    of the capture)."""
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
WHILE = defprim("while", _no_impl, _no_impl, kind="control", extra={"check": _check_while})
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


def is_traced(x) -> bool:
    return isinstance(x, Tracer)


def as_pred(ctx: TraceContext, p) -> Tracer:
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
        out = fn(*[sub.new_input(aval_of(o), requires_grad=o.requires_grad) if isinstance(o, Tensor) else o
                   for o in operands])
    return sub, out


def aval_of(t: Tensor) -> Aval:
    return t._var.aval if isinstance(t, Tracer) else Aval(t._data.shape, t.dtype, t.device)


def _finish(subs: list, results: list, names, what: str):
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
            avs = [s.atom(v).aval for s, v in zip(subs, vals)]
            for av in avs[1:]:
                if tuple(av.shape) != tuple(avs[0].shape) or av.dtype is not avs[0].dtype:
                    raise ScriptError(f"{what}: `{name}` is a tensor of type {avs[0]} on one path and "
                                      f"{av} on another; both paths must agree on shape and dtype")
            kinds.append("tensor")
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


def materialize(sub: TraceContext, v, like_aval=None):
    """Turn a Python number into a tensor inside `sub` (for paths that disagree)."""
    with sub:
        if isinstance(v, Tensor):
            return v
        dt = _dt.scalar_dtype(v) if like_aval is None else like_aval.dtype
        return ops.full((), v, dtype=dt)


def union_captures(subs):
    """The outer values the sub-traces `subs` read, each once, in order."""
    return list(dict.fromkeys(a for s in subs for a in s.captured_outer))


def graph_with_captures(sub: TraceContext, n_inputs_vars, outer_all, outs, name):
    cap_vars = [sub.captured.get(a) or Var(a.aval) for a in outer_all]
    return Graph(tuple(n_inputs_vars) + tuple(cap_vars), tuple(sub.eqns), tuple(outs), name)


def trace_cond(pred, true_fn, false_fn, operands: tuple = (), names: tuple = (), effect: str = ""):
    """``true_fn(*operands) if pred else false_fn(*operands)``, as graph control flow when traced.

    `effect` names a Python side effect in the branches (an attribute assignment): fine when
    the condition is a plain value, an error when it is traced, as both branches then run.
    """
    if not is_traced(pred):
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
    pred = as_pred(ctx, pred)
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
    loc = user_location(2)
    what = f"if/else at {loc[0]}:{loc[1]}" if loc else "if/else"
    if len(results[0]) != len(results[1]):
        raise ScriptError(f"{what}: the branches produce different numbers of values")
    _cast_numbers(subs, results)
    kinds = _finish(subs, results, names, what)
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
                    results[j] = results[j][:i] + (materialize(subs[j], v, ref),) + results[j][i + 1:]
            kinds[i] = "tensor"
    outer_all = union_captures(subs)
    graphs = []
    for s, r, nm in zip(subs, results, ("true", "false")):
        outs = [s.atom(r[i]) for i, k in enumerate(kinds) if k == "tensor"]
        graphs.append(graph_with_captures(s, s.inputs, outer_all, outs, nm))
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
    if len(raised) == 2:
        raise raised[0][1]
    nm, exc, where = raised[0]
    selects = pred if nm == "true" else ops.logical_not(pred)
    ctx.emit_multi(CHECK, [ctx.atom(selects)],
                   {"exc_type": type(exc), "message": str(exc), "where": where},
                   [Aval((), _dt.bool_, aval_of(pred).device)])
    return false_fn if nm == "true" else true_fn


def _cast_numbers(subs, results) -> None:
    """A runtime number on one path and a tensor on the other (``n if c else x.sum()``):
    the number takes the tensor's dtype, as it would in arithmetic with it."""
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
