"""``torch.library``: custom operators, as plain Python here.

``custom_op("ns::name", mutates_args=...)`` gives a `CustomOpDef`: calling it calls the
function (or the kernel ``register_kernel`` gave for the first tensor's device), so a
compiled function traces through it as through any Python. ``register_autograd`` makes
its gradient the given backward (an ``autograd.Function`` around the call, with
``setup_context``). Inside a compiled function a kernel that cannot be traced (numpy,
``.item()``) runs as one host step, its results shaped as ``register_fake`` says, and the
rest of the function still compiles. ``register_vmap`` and ``register_autocast`` are kept
but not needed (vmap calls the op per element). The older
``Library(ns, "DEF").define(schema)`` / ``impl`` spelling defines the same objects. A
custom op is also ``tracejit.ops.<ns>.<name>`` (and ``.default``) where that namespace is free.
"""
from __future__ import annotations

import inspect
import re
from typing import Any, Callable, Optional

from . import ops as _ops_package
from .tensor import Tensor

__all__ = ["custom_op", "CustomOpDef", "register_fake", "register_autograd", "register_kernel", "impl_abstract",
           "Library", "define", "impl"]

_OPS: dict = {}   # "ns::name" -> CustomOpDef


class _Namespace:
    """``tracejit.ops.<ns>``: that namespace's custom ops as attributes."""


class CustomOpDef:
    """A custom operator: call it as the function it wraps."""

    def __init__(self, qualname: str, fn: Optional[Callable], mutates_args=(), device_types=None) -> None:
        self._qualname, self._fn, self._kernels = qualname, fn, {}
        self._backward = self._setup_context = self._fake = self._autograd = None
        self.mutates_args = mutates_args
        if fn is not None:
            self.__name__, self.__doc__ = getattr(fn, "__name__", qualname), getattr(fn, "__doc__", None)
            for dev in ([device_types] if isinstance(device_types, str) else device_types or ()):
                self._kernels[dev] = fn
        self.default = self   # (``torch.ops.ns.name.default``, the overload)
        ns, name = qualname.split("::")
        space = getattr(_ops_package, ns, None)
        if space is None:
            space = _Namespace()
            setattr(_ops_package, ns, space)
        if isinstance(space, _Namespace):
            setattr(space, name, self)

    def __repr__(self) -> str:
        return f"<CustomOpDef({self._qualname})>"

    def register_fake(self, fn: Optional[Callable] = None, /, **_: Any):
        if fn is None:
            return lambda f: self.register_fake(f)
        self._fake = fn
        return fn

    register_vmap = register_autocast = register_torch_dispatch = register_fake

    def register_kernel(self, device_types, fn: Optional[Callable] = None, /):
        if fn is None:
            return lambda f: self.register_kernel(device_types, f)
        for dev in [device_types] if isinstance(device_types, str) or device_types is None else device_types:
            self._kernels[dev] = fn
        return fn

    def register_autograd(self, backward: Callable, /, *, setup_context: Optional[Callable] = None) -> None:
        if not callable(backward) or (setup_context is not None and not callable(setup_context)):
            raise TypeError(f"register_autograd({self._qualname}): backward and setup_context must be callable")
        self._backward, self._setup_context, self._autograd = backward, setup_context, None

    def _kernel(self, args) -> Callable:
        dev = next((a.device.type for a in args if isinstance(a, Tensor)), None)
        fn = self._kernels.get(dev) or self._kernels.get(None) or self._fn
        if fn is None:
            raise NotImplementedError(f"{self._qualname}: no implementation for device {dev!r}; register one "
                                      f"with register_kernel or torch.library.impl")
        return fn

    def __call__(self, *args, **kwargs):
        if self._backward is None:
            if self._fake is not None and _tracing():
                return self._traced(args, kwargs)
            return self._kernel(args)(*args, **kwargs)
        if self._autograd is None:
            self._sig = inspect.signature(self._fn or self._kernel(args))
            self._kw_only = {n for n, p in self._sig.parameters.items() if p.kind is p.KEYWORD_ONLY}
            self._autograd = _autograd_function(self)
        bound = self._sig.bind(*args, **kwargs)
        bound.apply_defaults()
        kw = {n: v for n, v in bound.arguments.items() if n in self._kw_only}
        # (as torch's: the keyword-only arguments travel as one last input, with no gradient)
        return self._autograd.apply(*[v for n, v in bound.arguments.items() if n not in kw], kw)

    def _traced(self, args, kwargs):
        """Inside a capture: the kernel traced through where it can be (tracejit ops), else
        one host step that runs it as it is, with the shapes ``register_fake`` gives."""
        from .errors import TraceError
        tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, Tensor)]
        try:
            return self._kernel(args)(*args, **kwargs)
        except TraceError:
            if not tensors:
                raise
        from .ops.host_steps import host_step
        fake = self._fake(*args, **kwargs)
        outs = [fake] if isinstance(fake, Tensor) else list(fake)
        spec = (tuple(None if isinstance(a, Tensor) else a for a in args),
                tuple((k, None if isinstance(v, Tensor) else v) for k, v in kwargs.items()))
        got = host_step(_run_kernel, tensors, [tuple(o.shape) for o in outs], [o.dtype for o in outs],
                        self._qualname, op=self._qualname, spec=spec)
        return got[0] if isinstance(fake, Tensor) else type(fake)(got)


def _tracing() -> bool:
    from .ops.eager import trace_state
    return trace_state.tracer is not None


def _run_kernel(xp, *arrays, op, spec):
    """A custom op's kernel on `arrays` (its tensor arguments, in order; `spec` holds the
    others in place): the arrays of its results (a compiled plan's host step)."""
    from .ops.creation import tensor
    it = iter(tensor(a) for a in arrays)
    args = [next(it) if a is None else a for a in spec[0]]
    kwargs = {k: next(it) if v is None else v for k, v in spec[1]}
    out = _OPS[op]._kernel(args)(*args, **kwargs)
    return tuple(o._data for o in ([out] if isinstance(out, Tensor) else out))


def _autograd_function(op: CustomOpDef):
    """The ``autograd.Function`` running `op` with its registered backward."""
    from .autograd.function import Function
    kw_only = bool(op._kw_only)

    class CustomOpFunction(Function):
        @staticmethod
        def forward(ctx, *args):
            *pos, kw = args
            out = op._kernel(pos)(*pos, **kw)
            if op._setup_context is not None:
                more = {"keyword_only_inputs": kw} if kw_only else {}
                op._setup_context(ctx=ctx, inputs=tuple(pos), output=out, **more)
            return out

        @staticmethod
        def backward(ctx, *grads):
            needs = ctx.needs_input_grad
            ctx.needs_input_grad = needs[:-1]
            try:
                g = op._backward(ctx, *grads)
            finally:
                ctx.needs_input_grad = needs
            return (*g, None) if isinstance(g, tuple) else (g, None)
    CustomOpFunction.__name__ = CustomOpFunction.__qualname__ = op._qualname.replace("::", "_")
    return CustomOpFunction


def _check_name(qualname: Any, who: str) -> str:
    if not isinstance(qualname, str) or not re.fullmatch(r"\w+::\w+", qualname):
        raise ValueError(f"{who}: expected a name of the form 'namespace::op_name', got {qualname!r}")
    return qualname


def custom_op(name: str, fn: Optional[Callable] = None, /, *, mutates_args, device_types=None,
              schema: Optional[str] = None, tags=None):
    """``@custom_op("ns::name", mutates_args=())``: `fn` as a `CustomOpDef`."""
    _check_name(name, "custom_op")
    if fn is None:
        return lambda f: custom_op(name, f, mutates_args=mutates_args, device_types=device_types, schema=schema)
    op = _OPS[name] = CustomOpDef(name, fn, mutates_args, device_types)
    return op


def _op(op, who: str) -> CustomOpDef:
    if isinstance(op, CustomOpDef):
        return op
    found = _OPS.get(_check_name(op, who))
    if found is None:
        raise ValueError(f"{who}: no custom op {op!r} is defined (custom_op or Library.define first)")
    return found


def register_fake(op, func: Optional[Callable] = None, /, *, lib=None, _stacklevel: int = 1, allow_override=True):
    return _op(op, "register_fake").register_fake(func)


impl_abstract = register_fake


def register_autograd(op, backward: Callable, /, *, setup_context: Optional[Callable] = None, lib=None) -> None:
    _op(op, "register_autograd").register_autograd(backward, setup_context=setup_context)


def register_kernel(op, device_types, func: Optional[Callable] = None, /, *, lib=None):
    return _op(op, "register_kernel").register_kernel(device_types, func)


def define(qualname: str, schema: str, *, lib=None, tags=()) -> None:
    """Declare op `qualname` (its schema is not checked); ``impl`` gives its kernel."""
    _OPS.setdefault(_check_name(qualname, "define"), CustomOpDef(qualname, None))


def impl(qualname, types, func: Optional[Callable] = None, *, lib=None):
    """The kernel of `qualname` for the device types `types` ("cpu", "cuda", "default")."""
    op = _op(qualname, "impl")
    devs = [types] if isinstance(types, str) else list(types)
    devs = [None if d.lower() in ("default", "compositeimplicitautograd", "compositeexplicitautograd", "autograd")
            else d.lower() for d in devs]
    return op.register_kernel(devs, func)


class Library:
    """``Library(ns, "DEF" | "IMPL" | "FRAGMENT")``: ``define(schema)`` and ``impl(name, fn, key)``."""

    def __init__(self, ns: str, kind: str, dispatch_key: str = "") -> None:
        if kind not in ("DEF", "IMPL", "FRAGMENT"):
            raise ValueError(f"Library: kind must be 'DEF', 'IMPL' or 'FRAGMENT', got {kind!r}")
        self.ns, self.kind, self.dispatch_key = ns, kind, dispatch_key

    def define(self, schema: str, alias_analysis: str = "", *, tags=()) -> str:
        name = schema.split("(", 1)[0].split(".", 1)[0].strip()
        define(f"{self.ns}::{name}", schema)
        return name

    def impl(self, op_name, fn: Callable, dispatch_key: str = "", *, with_keyset: bool = False) -> None:
        name = op_name if isinstance(op_name, str) else op_name._qualname.split("::")[1]
        impl(f"{self.ns}::{name.split('.', 1)[0]}", dispatch_key or self.dispatch_key or "default", fn)
