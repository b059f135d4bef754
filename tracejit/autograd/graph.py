"""``tracejit.autograd.graph``: the autograd graph's node type and the helpers PyTorch
keeps at ``torch.autograd.graph``: ``Node`` (every ``grad_fn`` is one), ``increment_version``
and the saved-tensor hooks: ``saved_tensors_hooks`` (each input an op saves goes through
`pack_hook` as it is recorded, and its backward reads `unpack_hook`'s tensor; compiled
functions run eagerly inside, so every op is recorded so), ``save_on_cpu`` (tensors here are
saved where they live; on the CPU that is where PyTorch's puts them) and
``disable_saved_tensors_hooks``."""
from __future__ import annotations

import contextlib
from typing import Any, Callable

from ..ops import impls as _impls
from ..tensor import Tensor
from .node import AccumulateGrad, Node, PrimNode
from .saved import HOOKS, PackedSaved

__all__ = ["Node", "increment_version", "saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks",
           "register_multi_grad_hook"]


def increment_version(tensor) -> None:
    """Bump `tensor`'s version counter (or each of an iterable's), as an in-place write
    does: a backward that saved it then refuses to use the old value."""
    for t in (tensor,) if isinstance(tensor, Tensor) else tensor:
        if not isinstance(t, Tensor):
            raise TypeError(f"increment_version: expected a tensor, got {type(t).__name__}")
        t._vbox[0] += 1


class saved_tensors_hooks:  # noqa: N801  (PyTorch's name)
    """``with saved_tensors_hooks(pack_hook, unpack_hook):`` ops recorded in the block call
    ``pack_hook(tensor)`` for each input they save, and their backward reads
    ``unpack_hook(what pack returned)``. Per thread; the innermost pair applies."""

    def __init__(self, pack_hook: Callable[[Tensor], Any], unpack_hook: Callable[[Any], Tensor]) -> None:
        for name, hook in (("pack_hook", pack_hook), ("unpack_hook", unpack_hook)):
            if not callable(hook):
                raise TypeError(f"saved_tensors_hooks: {name} must be callable, got {type(hook).__name__}")
        self.pack_hook, self.unpack_hook = pack_hook, unpack_hook

    def __enter__(self) -> "saved_tensors_hooks":
        if HOOKS.disabled is not None:
            raise RuntimeError(HOOKS.disabled)
        HOOKS.stack += ((self.pack_hook, self.unpack_hook),)
        _impls.count_tier0_thread(1)   # (the recording ops then ask which node class to make)
        _jit_config().hold_eager(1)
        return self

    def __exit__(self, *exc) -> None:
        HOOKS.stack = HOOKS.stack[:-1]
        _impls.count_tier0_thread(-1)
        _jit_config().hold_eager(-1)


def _jit_config():
    from ..jit import config
    return config


class save_on_cpu(contextlib.nullcontext):  # noqa: N801  (PyTorch's name)
    """Tensors the graph saves inside the block are kept in host memory: on the CPU they
    already are, so the block changes nothing."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda"):
        super().__init__()
        self.pin_memory, self.device_type = pin_memory, device_type


class disable_saved_tensors_hooks:  # noqa: N801
    """A block in which entering ``saved_tensors_hooks`` raises RuntimeError(`error_message`)."""

    def __init__(self, error_message: str):
        self.error_message = error_message

    def __enter__(self) -> None:
        self.prev, HOOKS.disabled = HOOKS.disabled, self.error_message

    def __exit__(self, *exc) -> None:
        HOOKS.disabled = self.prev


# the slots HookedPrimNode's properties stand in front of
_SAVED, _OUT, _OUT_DEVICE = PrimNode.saved, PrimNode.out, PrimNode._out_device
_OUT_FIELDS = ("_out_box", "_out_v", "_out_dtype")


class HookedPrimNode(PrimNode):
    """A PrimNode recorded inside ``saved_tensors_hooks``: the inputs it saves, and its
    output if it keeps it, go to the pack hook as they are set (the recording sets the
    output's device last), and its backward reads the unpack hook's tensors."""

    __slots__ = ()

    @property
    def saved(self):
        return _SAVED.__get__(self)

    @saved.setter
    def saved(self, value) -> None:
        hooks = HOOKS.stack[-1] if value is not None and HOOKS.stack else None
        _SAVED.__set__(self, value if hooks is None else
                       tuple(PackedSaved(s, hooks) if isinstance(s, Tensor) else s for s in value))

    @property
    def _out_device(self):
        return _OUT_DEVICE.__get__(self)

    @_out_device.setter
    def _out_device(self, device) -> None:
        _OUT_DEVICE.__set__(self, device)
        out = _OUT.__get__(self)
        if out is not None and HOOKS.stack:
            t = Tensor._wrap(out, self._out_dtype, device)
            t._vbox = self._out_box
            _OUT.__set__(self, PackedSaved(t, HOOKS.stack[-1]))

    def apply(self, grads, create_graph, retain_graph):
        packed, versions, out = _SAVED.__get__(self), self.versions, _OUT.__get__(self)
        if packed is not None:
            plain = tuple(s.unpack() if type(s) is PackedSaved else s for s in packed)
            _SAVED.__set__(self, plain)
            self.versions = tuple(t._vbox[0] if type(s) is PackedSaved else v
                                  for s, t, v in zip(packed, plain, versions))
        if type(out) is PackedSaved:
            kept = [getattr(self, f) for f in _OUT_FIELDS] + [self._out_device]
            t = out.unpack()
            _OUT.__set__(self, t._data)
            self._out_box, self._out_v, self._out_dtype = t._vbox, t._vbox[0], t.dtype
            _OUT_DEVICE.__set__(self, t.device)
        try:
            return PrimNode.apply(self, grads, create_graph, retain_graph)
        finally:
            if not self._freed:
                _SAVED.__set__(self, packed)
                self.versions = versions
                if type(out) is PackedSaved:
                    _OUT.__set__(self, out)
                    self._out_box, self._out_v, self._out_dtype = kept[:3]
                    _OUT_DEVICE.__set__(self, kept[3])


HOOKS.node_class = HookedPrimNode


def reachable_leaves(outs) -> set:
    """ids of the leaf tensors whose gradient the graphs of `outs` (tensors; anything else
    is skipped) reach."""
    return _reached(outs)[1]


def _reached(outs) -> tuple:
    """ids of the nodes the graphs of `outs` reach, and of the leaf tensors among them."""
    seen, used = set(), set()
    stack = [x.grad_fn for x in outs if isinstance(x, Tensor) and x.grad_fn is not None]
    while stack:
        n = stack.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, AccumulateGrad):
            t = n.variable()
            if t is not None:
                used.add(id(t))
        stack.extend(n._next)
    return seen, used


class _Handles:
    """Removes every hook of a multi-gradient hook."""

    def __init__(self, handles) -> None:
        self.handles = handles

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def register_multi_grad_hook(tensors, fn: Callable, *, mode: str = "all"):
    """``fn`` once per backward that reaches `tensors`: with mode "all" given the list of
    their gradients once this backward has computed each it reaches (None for the others),
    with mode "any" given the first gradient it computes. Returns a handle (``remove()``)."""
    from .engine import TASK
    if mode not in ("all", "any"):
        raise ValueError(f"register_multi_grad_hook: mode must be 'all' or 'any', got {mode!r}")
    tensors = list(tensors)
    TASK[0] = True
    state: dict = {}   # backward number -> (gradients so far, how many it reaches)

    def any_hook(grad) -> None:
        if TASK[1] not in state:
            state.clear()
            state[TASK[1]] = True
            fn(grad)

    def all_hook(i: int):
        def hook(grad) -> None:
            if TASK[1] not in state:
                nodes, leaves = _reached([r() for r in TASK[2]])
                due = sum(id(t.grad_fn) in nodes if t.grad_fn is not None else id(t) in leaves for t in tensors)
                state.clear()
                state[TASK[1]] = [None] * len(tensors), due
            grads, due = state[TASK[1]]
            grads[i] = grad
            if sum(g is not None for g in grads) >= due:
                del state[TASK[1]]
                fn(grads)
        return hook
    if mode == "any":
        return _Handles([t.register_hook(any_hook) for t in tensors if t.requires_grad])
    return _Handles([t.register_hook(all_hook(i)) for i, t in enumerate(tensors)])
