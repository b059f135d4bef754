"""The primitive registry: `Primitive`, the single definition of an op.

- ``impl(xp, *arrays, **params)``: the eager implementation, generic over the array
  module ``xp`` (numpy or cupy);
- ``rule(*avals, **params) -> Aval``: shape/dtype rule; it also raises the user-facing
  errors (it runs eagerly too, so errors are the same in every mode);
- ``vjp(g, out, *inputs, **params) -> tuple``: the vector-Jacobian product written with
  tracejit ops, so one rule gives eager backward, traced backward and higher orders.
  Broadcast gradients are summed back centrally by the autograd engine;
- ``scalar(e, *names, **params) -> str``: for elementwise ops, the scalar expression the
  fused-kernel generators emit.

Eager autograd keeps only what the VJP reads: ``save(requires_grad flags) -> input
positions``, ``save_out``, and ``extra["meta"]`` for inputs whose shape, dtype and device
only are needed (a zeros stand-in, ``autograd.node.shape_only``); other inputs reach the
VJP as None. ``extra["needs"]`` marks a VJP taking ``needs=`` (per input: does it get a
gradient?), default all True. ``extra["view"]`` / ``extra["view_if"](params)`` mark ops
whose output aliases input 0. ``extra["selects"]`` marks ops whose floating results are
among their operands (relu, max, where), so bf16-exact in gives bf16-exact out. ``extra["moves"]``
(operand positions) marks ops that only move those operands' elements, reading the
others for their shapes or the VJP: on bf16 words they run as they are.
``extra["own_dtype"]`` marks an elementwise op whose result depends on the operand dtype's
own representation (nextafter): float16 operands are not widened for it (`widens_half`).
``extra["batch"]``: ``(n, params, *avals) -> params`` for the call with a leading batch
dim of size n on every operand, a function of those operands, or None (``vmap``'s
batching rule, func/batching.py). ``extra["passes"]``: how many array passes an
elementwise op's numpy form makes (sigmoid's ``1 / (1 + exp(-x))``: 4), where it is more
than one: a backend may run its scalar rule as one kernel from fewer elements then.

How to add an op: docs/dev/add-an-op.md; a backend implementation:
docs/dev/add-a-backend-implementation.md. The import cycle tensor -> ops -> autograd ->
tensor is closed with tail imports (see the end of this module and of tracejit/tensor.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from .. import dtypes as _dt
from ..device import CPU
from . import impls as _impls

__all__ = ["Primitive", "Aval", "bind", "REGISTRY", "trace_state", "defprim", "shift_dims", "batch_shape",
           "batch_leading"]


class Aval:
    """Abstract value: what is known about a tensor without its data."""

    __slots__ = ("shape", "dtype", "device", "weak")

    def __init__(self, shape: tuple, dtype: "_dt.DType", device=CPU, weak: bool = False):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device
        self.weak = weak  # a Python scalar: does not widen dtypes in promotion

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        return f"{self.dtype.short}[{dims}]"

    def __eq__(self, o) -> bool:
        return (isinstance(o, Aval) and self.shape == o.shape and self.dtype is o.dtype
                and self.device == o.device)

    def __hash__(self):
        return hash((self.shape, self.dtype.name))


@dataclass(eq=False)
class Primitive:
    name: str
    impl: Callable
    rule: Callable
    vjp: Optional[Callable] = None
    kind: str = "other"            # elementwise | reduction | shape | index | matmul | creation | random | other
    scalar: Optional[Callable] = None
    promote: bool = False          # elementwise: cast operands to a common dtype first
    int_to_float: bool = False     # integer operands compute in the default float dtype
    save: Optional[Callable] = None  # requires_grad flags -> indices of inputs the vjp needs
    save_out: bool | Callable = False  # does the vjp use the output? (or requires_grad flags -> that)
    nondiff: tuple | frozenset = ()  # input positions that never get gradients (kept as a set)
    grad_name: str = ""
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        self.nondiff = frozenset(self.nondiff)
        self.is_view = bool(self.extra.get("view"))
        # params -> bool, for ops that are views only sometimes (basic vs advanced indexing)
        self.view_if = self.extra.get("view_if")
        # eager dispatch plans by operand signature (see `bind`): the rules of these kinds
        # are pure functions of shapes, dtypes and params, so their results can be kept
        self.plans = {} if self.kind in _PLANNED_KINDS else None
        # numpy's ufunc when the impl is exactly one (ops/elementwise.py `_ufunc1/2`): then
        # an in-place method writes the result into the tensor's memory (`run_into`)
        self.ufunc = getattr(self.impl, "ufunc", None)
        self.fast = self.extra.get("fast")  # the plan's numpy call (see the top)
        # float16 computes in float32 and rounds the result once, as PyTorch's CPU kernels
        # do (a Python float operand keeps float32 precision: numpy would round 0.1 to
        # float16 first); ops that select among their operands are exact either way
        self.widens_half = (self.kind == "elementwise" and not self.extra.get("selects")
                            and not self.extra.get("own_dtype"))
        self.check_operands = self.extra.get("operands")  # avals -> None or raise (promotion.compute_dtype)
        # two operands without params: the plan fast path as a closure (`_make_binary`)
        inline = self.plans is not None and not self.is_view and self.view_if is None
        from .eager import _make_binary   # (defined before eager.py's tail imports the ops modules)
        self.binary = _make_binary(self) if inline else None
        # what autograd keeps per requires_grad pattern (autograd/node.py `_records`); for
        # two operands also by 2 * (a requires grad) + (b requires grad), a list index
        self.records = {}
        self.records2 = [None] * 4
        self.needs = bool(self.extra.get("needs"))  # the VJP takes needs= (see the top)
        if not self.grad_name:
            self.grad_name = _TORCH_GRAD_NAMES.get(self.name) or (
                "".join(p.capitalize() for p in self.name.split("_")) + "Backward0")
        self._impl0 = self.impl  # the impl `ufunc` and `fast` describe
        # what eager calls and compiled plans run (`run`): ops/impls.py's table, then
        # `impl` (`dispatch`; `impl` itself until a backend registers an implementation:
        # `rebuild_run`), or a replaced impl or run (tests count calls so)
        self.has_impls = False
        self.dispatch = self.run = self.impl

    def rebuild_run(self) -> None:
        """`run` from ops/impls.py's table (`impls.register` calls this). With a registered
        implementation no plan calls the numpy form's ufunc or `fast` call directly: an
        implementation's `specialize` says what a plan calls."""
        object.__setattr__(self, "has_impls", True)
        object.__setattr__(self, "dispatch", _impls.runner(self))
        if self.impl is self._impl0:
            object.__setattr__(self, "run", self.dispatch)
            object.__setattr__(self, "ufunc", None)
        if self.plans:
            self.plans.clear()

    def table_runs(self) -> bool:
        """Whether calls go through registered implementations (eager plans then take an
        implementation's `specialize` call)."""
        return self.has_impls and self.run is self.dispatch

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)
        # (getattr, not `self.__dict__`: reading __dict__ turns the instance's inline
        # attribute values into a dict, and every read of prim.<field> on the eager path
        # gets slower, ~0.2 us an op)
        if name in ("impl", "ufunc", "run") and getattr(self, "_impl0", None) is not None:
            # A replaced impl (tests count an op's calls so) runs from now on, the table's
            # implementations included, and none of the plans made before (they hold the
            # old impl's call). A replaced `run` likewise makes no plan take a call of its own.
            if name == "impl":
                original = value is self._impl0
                object.__setattr__(self, "ufunc", getattr(value, "ufunc", None)
                                   if not (original and self.has_impls) else None)
                object.__setattr__(self, "fast", self.extra.get("fast") if original else None)
                object.__setattr__(self, "run", self.dispatch if original else value)
            if self.plans:
                self.plans.clear()

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


REGISTRY: dict[str, Primitive] = {}
# (the kinds whose rules are pure functions of shapes, dtypes and params: "other" holds the
# coarse ops, softmax, layer_norm, losses, attention pieces, argsort, pooling; not
# creation, random or control, whose calls read a device, the generator or a body)
_PLANNED_KINDS = ("elementwise", "reduction", "matmul", "shape", "index", "other")

# grad_fn names as PyTorch prints them where its op is named differently (the rest are
# the capitalised primitive name + "Backward0", e.g. MulBackward0). One name per
# primitive: PyTorch's variants (SliceBackward0 vs SelectBackward0, BmmBackward0) differ
# by arguments these records do not look at.
_TORCH_GRAD_NAMES = {
    "cast": "ToCopyBackward0", "to_device": "ToCopyBackward0", "concat": "CatBackward0",
    "copy": "CloneBackward0", "getitem": "IndexBackward0", "matmul": "MmBackward0",
    "reshape": "ViewBackward0", "unfold": "Im2ColBackward0", "fold": "Col2ImBackward0",
    "clamp": "ClampBackward1",
}


def defprim(name: str, impl, rule, vjp=None, *, host: bool = False, **kw) -> Primitive:
    """Define and register a primitive. `host=True` marks an impl that computes with numpy
    alone (special functions, small factorisations): device arrays go to the host and the
    result comes back (`extra["host"]`)."""
    if name in REGISTRY:
        raise ValueError(f"primitive {name!r} defined twice")
    if host:
        impl = _on_host(impl)
        kw["extra"] = {**kw.get("extra", {}), "host": True}
    if kw.get("kind") == "reduction" or kw.get("extra", {}).get("row_major"):
        impl = _row_major_result(impl)
        if kw.get("extra", {}).get("fast"):
            kw["extra"] = {**kw["extra"], "fast": _row_major_fast(kw["extra"]["fast"])}
    p = Primitive(name, impl, rule, vjp, **kw)
    REGISTRY[name] = p
    return p


def shift_dims(n: int, params: dict, *avals) -> dict:
    """A batching rule (``extra["batch"]``): the ``dim``/``dims`` params, counted in the
    first operand's dims, moved past the leading batch dim."""
    r = max(avals[0].ndim, 1)
    out = dict(params)
    for k in ("dim", "dims"):
        d = params.get(k)
        if isinstance(d, int):
            out[k] = d % r + 1
        elif isinstance(d, (tuple, list)):
            out[k] = tuple(x % r + 1 for x in d)
        elif k in params:
            return None
    return out


def batch_shape(n: int, params: dict, *avals) -> dict:
    """A batching rule: the ``shape`` param (the output's) with the batch dim in front."""
    return {**params, "shape": (n,) + tuple(params["shape"])}


def batch_leading(n: int, params: dict, *avals) -> dict:
    """A batching rule: the op maps over its operands' leading dims as they are."""
    return params


def _row_major(xp, out):
    if isinstance(out, tuple):
        return tuple(_row_major(xp, o) for o in out)
    flags = getattr(out, "flags", None)
    return out if flags is None or flags.c_contiguous else xp.ascontiguousarray(out)


def _row_major_result(impl):
    """The impl of a reduction (or of an op marked ``extra["row_major"]``: softmax, batch
    norm) whose arrays are row-major, as PyTorch's results are: numpy's follow the input's
    layout, so ``x.t().sum(0, keepdim=True).view(-1)`` would refuse a view PyTorch allows."""
    def run(xp, *args, **params):
        out = impl(xp, *args, **params)
        if type(out) is np.ndarray:   # (the usual result: one flag read)
            return out if out.flags.c_contiguous else np.ascontiguousarray(out)
        return _row_major(xp, out)
    run.__name__ = run.__qualname__ = getattr(impl, "__name__", "impl")
    return run


def _row_major_fast(fast):
    """`_row_major_result` for a plan's numpy call (``extra["fast"]``), which only needs it
    where the result has two dims or more."""
    def plan_fn(shapes, dtype, params):
        fn = fast(shapes, dtype, params)
        dims = params.get("dims") or ()
        kept = len(shapes[0] or ()) - (0 if params.get("keepdim") else len(dims))
        if fn is None or kept < 2:
            return fn

        def row_major(x):
            out = fn(x)
            return out if out.flags.c_contiguous else np.ascontiguousarray(out)
        return row_major
    return plan_fn


def _on_host(impl):
    def run(xp, *args, **params):
        if xp.__name__ == "numpy":
            return impl(xp, *args, **params)
        import numpy as np
        host = [xp.asnumpy(a) if isinstance(a, xp.ndarray) else a for a in args]
        out = impl(np, *host, **params)
        return xp.asarray(out)
    run.__name__ = run.__qualname__ = getattr(impl, "__name__", "impl")
    return run


# The eager dispatcher (bind and its plans) lives in ops/eager.py; its names are read
# from here by most of ops/, so they are imported at the tail, once every name eager.py
# takes from this module is defined.
from .eager import (_make_binary, bind, refuse_tracing, trace_state, tracer_entered,  # noqa: E402,F401
                    tracer_exited)
from .promotion import compute_dtype, prepare, scalar_aval  # noqa: E402,F401
