"""Module backward hooks (``register_full_backward_hook``, ``register_full_backward_pre_hook``),
the forward hooks registered with ``always_call`` run when forward raises, and the hooks of
every module (``torch.nn.modules.module.register_module_forward_hook`` and the like), which
run before each module's own.

A module with such hooks passes its tensor inputs and outputs through two identity
functions on the autograd graph. The outputs' identity sees the gradients of all outputs
at once (the pre-hooks may replace them); the inputs' identity sees the gradients of the
inputs that require grad, and calls the full hooks with both, as PyTorch does. When no
input requires grad, the full hooks run at the outputs' identity with ``grad_input`` all
None. Inside a compiled function the hooks cannot be captured: tracing stops with a
TraceError and the function runs eagerly, hooks and all.
"""
from __future__ import annotations

from collections import OrderedDict
from types import MappingProxyType
from typing import Callable

from ..autograd.function import Function
from ..errors import TraceError
from ..ops.eager import trace_state as _trace_state
from ..tensor import Tensor

__all__ = ["BackwardHooks", "EMPTY_HOOKS", "hook_inputs", "hook_outputs", "run_always_called",
           "register_module_forward_pre_hook", "register_module_forward_hook", "register_module_full_backward_hook",
           "register_module_full_backward_pre_hook", "register_module_backward_hook", "global_hook_ids",
           "any_global_hooks"]

# The class-level tables of a module without backward hooks: falsy, shared, read-only.
EMPTY_HOOKS = MappingProxyType({})

# The hooks of every module, by kind; mutated in place (Module.__call__ holds these objects).
GLOBAL_FORWARD_PRE: OrderedDict = OrderedDict()
GLOBAL_FORWARD: OrderedDict = OrderedDict()
GLOBAL_BACKWARD_PRE: OrderedDict = OrderedDict()
GLOBAL_BACKWARD: OrderedDict = OrderedDict()
GLOBAL_WITH_KWARGS: set = set()      # ids of global forward hooks taking the call's kwargs
GLOBAL_ALWAYS_CALLED: set = set()    # ids of global forward hooks registered with always_call


def global_hook_ids() -> tuple:
    """The ids of the hooks of every module, by kind (a compiled module's guard compares them)."""
    return tuple(tuple(t) for t in (GLOBAL_FORWARD_PRE, GLOBAL_FORWARD, GLOBAL_BACKWARD_PRE, GLOBAL_BACKWARD))


def any_global_hooks() -> bool:
    return bool(GLOBAL_FORWARD_PRE or GLOBAL_FORWARD or GLOBAL_BACKWARD_PRE or GLOBAL_BACKWARD)


def _global(table: OrderedDict, hook: Callable):
    from .module import RemovableHandle
    if not callable(hook):
        raise TypeError(f"module hook: expected a callable, got {type(hook).__name__}")
    return RemovableHandle.add(table, hook)


def register_module_forward_pre_hook(hook: Callable):
    """hook(module, args) -> new args or None, run before every module's forward (before
    the module's own pre-hooks)."""
    return _global(GLOBAL_FORWARD_PRE, hook)


def register_module_forward_hook(hook: Callable, *, with_kwargs: bool = False, always_call: bool = False):
    """hook(module, args, output) -> new output or None (``with_kwargs``: hook(module, args,
    kwargs, output)), run after every module's forward, before the module's own hooks."""
    h = _global(GLOBAL_FORWARD, hook)
    if with_kwargs:
        GLOBAL_WITH_KWARGS.add(h.id)
    if always_call:
        GLOBAL_ALWAYS_CALLED.add(h.id)
    return h


def register_module_full_backward_pre_hook(hook: Callable):
    """hook(module, grad_output) -> new grad_output or None, for every module."""
    return _global(GLOBAL_BACKWARD_PRE, hook)


def register_module_full_backward_hook(hook: Callable):
    """hook(module, grad_input, grad_output) -> new grad_input or None, for every module."""
    return _global(GLOBAL_BACKWARD, hook)


def register_module_backward_hook(hook: Callable):
    """The deprecated spelling: run as ``register_module_full_backward_hook``."""
    return _global(GLOBAL_BACKWARD, hook)


class _Call:
    """One call of a hooked module: what the outputs' identity hands the inputs' one.
    Positions count all positional arguments and all outputs, as PyTorch's grad_input and
    grad_output do (None at a non-tensor; zeros at a tensor input without a gradient when
    another input has one)."""

    __slots__ = ("module", "n_inputs", "hooked", "grad_output", "frozen", "n_outputs", "out_at")

    def __init__(self, module, n_inputs: int, hooked: list, frozen: list):
        self.module, self.n_inputs, self.hooked, self.grad_output = module, n_inputs, hooked, None
        self.frozen = frozen   # (position, shape, dtype, device) of tensor inputs without grad
        self.n_outputs, self.out_at = 0, []

    def run_full_hooks(self, grads: tuple) -> tuple:
        from ..ops import zeros
        grad_input = [None] * self.n_inputs
        for pos, g in zip(self.hooked, grads):
            grad_input[pos] = g
        if self.hooked:
            for pos, shape, dtype, device in self.frozen:
                grad_input[pos] = zeros(shape, dtype=dtype, device=device)
        grad_input = tuple(grad_input)
        for hook in list(GLOBAL_BACKWARD.values()) + list(self.module._backward_hooks.values()):
            res = hook(self.module, grad_input, self.grad_output)
            if res is not None:
                res = tuple(res) if isinstance(res, (tuple, list)) else (res,)
                if len(res) != self.n_inputs:
                    raise RuntimeError(f"backward hook {getattr(hook, '__qualname__', hook)!r} returned "
                                       f"{len(res)} gradients for {self.n_inputs} inputs")
                grad_input = res
        return tuple(grad_input[pos] for pos in self.hooked)


class _Inputs(Function):
    @staticmethod
    def forward(ctx, call, *ts):
        ctx.call = call
        return ts

    @staticmethod
    def backward(ctx, *grads):
        return (None,) + ctx.call.run_full_hooks(grads)


class _Outputs(_Inputs):
    @staticmethod
    def forward(ctx, call, *ts):
        ctx.call = call
        ctx.set_materialize_grads(False)   # (an output the loss does not use: None in grad_output)
        return ts

    @staticmethod
    def backward(ctx, *grads):
        call = ctx.call
        module = call.module
        full = [None] * call.n_outputs
        for i, g in zip(call.out_at, grads):
            full[i] = g
        grads = tuple(full)
        for hook in list(GLOBAL_BACKWARD_PRE.values()) + list(module._backward_pre_hooks.values()):
            res = hook(module, grads)
            if res is not None:
                grads = tuple(res) if isinstance(res, (tuple, list)) else (res,)
        call.grad_output = grads
        if not call.hooked:
            call.run_full_hooks(())
        return (None,) + tuple(grads[i] for i in call.out_at)


def hook_inputs(module, args: tuple) -> tuple:
    """(call, args): `module`'s tensor inputs that require grad through the inputs' identity."""
    if _trace_state.tracer is not None:
        raise TraceError(f"{type(module).__name__} has backward hooks, which cannot be captured "
                         f"in a graph; it runs eagerly")
    pos = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    hooked = [i for i in pos if args[i].requires_grad]
    frozen = [(i, tuple(args[i].shape), args[i].dtype, args[i].device) for i in pos if i not in hooked]
    call = _Call(module, len(args), hooked, frozen)
    if hooked:
        args = list(args)
        for i, t in zip(hooked, _Inputs.apply(call, *(args[i] for i in hooked))):
            args[i] = t
        args = tuple(args)
    return call, args


def hook_outputs(call: _Call, out):
    """`out` (a tensor, or a tuple or list holding tensors) through the outputs' identity."""
    single = isinstance(out, Tensor)
    outs = (out,) if single else tuple(out) if isinstance(out, (tuple, list)) else ()
    at = [i for i, o in enumerate(outs) if isinstance(o, Tensor) and o.requires_grad]
    if not at:
        return out
    call.n_outputs, call.out_at = len(outs), at
    wrapped = list(outs)
    for i, t in zip(at, _Outputs.apply(call, *(outs[i] for i in at))):
        wrapped[i] = t
    return wrapped[0] if single else type(out)(wrapped)


def run_always_called(module, args: tuple, kwargs: dict, ran: int) -> None:
    """After `module`'s call raised: its ``always_call`` forward hooks that had not run yet,
    with output None, as PyTorch's. An error of one of them is only warned about: the
    call's own error is the one raised."""
    import warnings
    out = None
    for hid, hook in list({**GLOBAL_FORWARD, **module._forward_hooks}.items())[ran:]:
        if hid not in module._forward_hooks_always_called and hid not in GLOBAL_ALWAYS_CALLED:
            continue
        try:
            res = (hook(module, args, kwargs, out) if hid in module._forward_hooks_with_kwargs
                   or hid in GLOBAL_WITH_KWARGS else hook(module, args, out))
        except Exception as e:
            warnings.warn("module forward hook with ``always_call=True`` raised an exception that was silenced "
                          f"as another error was raised in forward: {e}", stacklevel=3)
            continue
        if res is not None:
            out = res


class BackwardHooks:
    """The registration methods `Module` inherits."""

    _backward_hooks = EMPTY_HOOKS
    _backward_pre_hooks = EMPTY_HOOKS
    _forward_hooks_always_called = EMPTY_HOOKS   # (ids of forward hooks registered with always_call)

    def _hook_table(self, name: str) -> OrderedDict:
        table = self.__dict__.get(name)
        if table is None:
            table = self.__dict__[name] = OrderedDict()
        return table

    def _add_hook(self, name: str, hook: Callable, prepend: bool):
        from .module import RemovableHandle
        if not callable(hook):
            raise TypeError(f"{name.strip('_').replace('_', ' ')}: expected a callable, got "
                            f"{type(hook).__name__}")
        return RemovableHandle.add(self._hook_table(name), hook, prepend)

    def register_full_backward_hook(self, hook: Callable, prepend: bool = False):
        """hook(module, grad_input, grad_output) -> new grad_input or None, run when the
        gradients of the module's inputs are computed (grad_input: one entry per positional
        argument, None for a non-tensor, zeros for a tensor that does not require grad)."""
        return self._add_hook("_backward_hooks", hook, prepend)

    def register_full_backward_pre_hook(self, hook: Callable, prepend: bool = False):
        """hook(module, grad_output) -> new grad_output or None, run when the gradients of the
        module's outputs are known, before the module's own backward."""
        return self._add_hook("_backward_pre_hooks", hook, prepend)

    def register_backward_hook(self, hook: Callable):
        """The deprecated spelling: tracejit runs it as ``register_full_backward_hook``."""
        return self._add_hook("_backward_hooks", hook, False)
