"""What a node saves: a tensor with its version at save time (SavedTensor), a value's device
and layout without it (SavedMeta), the stand-ins a backward that needs only shapes
receives (shape_only, column_major), and what ``saved_tensors_hooks`` packed (PackedSaved)."""
from __future__ import annotations

import threading

import numpy as np

from ..device import CPU, array_module
from ..errors import InplaceModifiedError
from ..tensor import Tensor

_wrap = Tensor._wrap


def _modified(node, what: str, version: int, now: int) -> InplaceModifiedError:
    return InplaceModifiedError(
        f"one of the tensors needed for gradient computation has been modified by an "
        f"in-place operation: {what} of {node.name()} was saved at version {version} "
        f"and is now at version {now}. Clone it before modifying it in place "
        f"(x = x.clone()), or use the out-of-place op.")


class SavedTensor:
    """A snapshot of a tensor for a custom Function's ``ctx.save_for_backward``."""

    __slots__ = ("data", "vbox", "version", "grad_fn", "output_nr", "leaf", "dtype", "device", "is_output")

    def __init__(self, t, is_output: bool = False):
        self.data = t._data
        vbox = self.vbox = t._vbox
        self.version = vbox[0]
        self.dtype = t.dtype
        self.device = t.device
        self.is_output = is_output
        fn = t.grad_fn
        leaf = fn is None and not is_output
        self.grad_fn = None if is_output else fn   # (an output's: the node itself, at unpack: no cycle)
        self.leaf = t if leaf and t._requires_grad else None
        self.output_nr = 0 if leaf else t._output_nr

    def unpack(self, node: "Node", index: int, create_graph: bool):
        if self.vbox[0] != self.version:
            raise _modified(node, "output" if self.is_output else f"input {index}", self.version, self.vbox[0])
        if self.leaf is not None:
            return self.leaf if create_graph else self.leaf.detach()
        t = Tensor._wrap(self.data, self.dtype, self.device)
        t._vbox = self.vbox
        if create_graph:
            fn = node if self.is_output else self.grad_fn
            if fn is not None:
                t.requires_grad = True
                t.grad_fn = fn
                t._output_nr = self.output_nr
        return t


class _Hooks(threading.local):
    stack: tuple = ()        # (pack_hook, unpack_hook) pairs of this thread, innermost last
    disabled = None          # an enclosing disable_saved_tensors_hooks's message
    node_class = None        # the class of a node recorded under hooks (set by graph.py)


HOOKS = _Hooks()


class PackedSaved:
    """A tensor saved inside ``saved_tensors_hooks``: what its pack hook returned, and
    the unpack hook that gives the backward its tensor."""

    __slots__ = ("packed", "unpack_hook")

    def __init__(self, t, hooks) -> None:
        self.packed, self.unpack_hook = hooks[0](t), hooks[1]

    def unpack(self, node=None, index: int = 0, create_graph: bool = False):
        """The unpack hook's tensor (as `SavedTensor.unpack`; the hook decides its graph)."""
        t = self.unpack_hook(self.packed)
        if not isinstance(t, Tensor):
            raise TypeError(f"saved_tensors_hooks: the unpack hook must return a tensor, got {type(t).__name__}")
        return t


class SavedMeta:
    """What a VJP needs of an input whose values it never reads: shape, dtype, device.

    Unpacks to a tensor of the right shape backed by one broadcast zero, so no data is
    kept alive and later in-place changes of the input do not trip the version check (as
    PyTorch's SumBackward stores only sizes). The shape and dtype are the node's ``_meta``
    entry, so one object per (device, layout) serves every node (`saved_meta`).
    """

    __slots__ = ("device", "column_major")

    def __init__(self, device, column_major: bool):
        self.device = device
        # The layout too, as PyTorch's MmBackward keeps mat2's strides: a transposed weight's
        # gradient is then produced in the layout that makes the weight's own gradient
        # contiguous (see `column_major`).
        self.column_major = column_major

    def unpack(self, node, index: int, create_graph: bool):
        shape, dtype = node._meta[index]
        if self.device is CPU:
            # np.broadcast_to's Python-level checks cost more than a small backward node;
            # a read-only ndarray over one zero with all strides 0 is the same view, one
            # per (shape, dtype)
            npd = dtype.np
            key = (shape, npd)
            zeros = _STAND_INS.get(key)
            if zeros is None:
                if len(_STAND_INS) >= 256:
                    _STAND_INS.clear()
                zeros = _STAND_INS[key] = np.ndarray(shape, npd, _zero_buffer(npd), 0, (0,) * len(shape))
            t = _wrap(zeros, dtype, CPU)
            if self.column_major:
                t._column_major = True
            return t
        xp = array_module(self.device)
        key = (self.device, dtype.np)
        zero = _ZEROS.get(key)
        if zero is None:
            zero = _ZEROS[key] = xp.zeros((), dtype.np)
        return Tensor._wrap(xp.broadcast_to(zero, shape), dtype, self.device)


def saved_meta(t) -> SavedMeta:
    """The SavedMeta for input `t` of a node being recorded (the node's ``_meta`` must
    hold `t`'s shape and dtype): the shared one for its device and layout."""
    data = t._data
    dev = t.device
    if dev is CPU:  # (an ndarray: the layout test of `_is_column_major`, inline)
        if data.ndim == 2:
            flags = data.flags
            if flags.f_contiguous and not flags.c_contiguous:
                return _CPU_COLUMN_MAJOR
        return _CPU_ROW_MAJOR
    key = (dev, _is_column_major(data))
    m = _SAVED_METAS.get(key)
    if m is None:
        m = _SAVED_METAS[key] = SavedMeta(*key)
    return m


_CPU_ROW_MAJOR = SavedMeta(CPU, False)
_CPU_COLUMN_MAJOR = SavedMeta(CPU, True)
_SAVED_METAS: dict = {}  # (non-CPU device, column-major?) -> its SavedMeta
_ZEROS: dict = {}
_STAND_INS: dict = {}  # (shape, numpy dtype) -> the read-only stride-0 view over _ZEROS's zero


def shape_only(t) -> bool:
    """Whether `t` is a SavedMeta stand-in (shape and dtype right, values not kept).

    A VJP must not compute another input's gradient from one: that input needs none (else
    this one's values would have been saved). Recognized by the shared zero the stand-ins
    are views of, which no user tensor can be backed by."""
    data = t._data
    base = getattr(data, "base", None)
    if base is None:
        return False
    if isinstance(data, np.ndarray):
        return base is _ZEROS.get(data.dtype)
    return base is _ZEROS.get((t.device, data.dtype))


def _is_column_major(data) -> bool:
    flags = getattr(data, "flags", None)
    return (flags is not None and getattr(data, "ndim", 0) == 2 and flags.f_contiguous
            and not flags.c_contiguous)


def column_major(t, stand_in: bool | None = None) -> bool:
    """Whether `t` (an input handed to a VJP) is a 2-D array in column-major order, e.g.
    ``weight.T``: matmul's VJP then computes its gradient as ``(g.T @ a).T``, row-major for
    the leaf, so no copy is made. `stand_in`: ``shape_only(t)``, when the caller has it."""
    if shape_only(t) if stand_in is None else stand_in:
        return getattr(t, "_column_major", False)
    return _is_column_major(t._data)


def _zero_buffer(npd):
    """One read-only zero of dtype `npd`, shared by every SavedMeta view."""
    z = _ZEROS.get(npd)
    if z is None:
        z = _ZEROS[npd] = np.zeros(1, npd)
        z.flags.writeable = False
    return z
