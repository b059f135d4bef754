"""Tensor's in-place methods: ``add_``, ``mul_``, ``fill_``, ``copy_``, ``x[i] = v``, ...

Each computes its result out of place with the op of the same name, then ``_assign``
writes it into the tensor's memory, bumps the version counter and takes over the new
``grad_fn`` (which is how ``x[i] = v`` and ``y.mul_(2)`` stay differentiable). Updates
autograd never sees (``w -= lr * w.grad`` under no_grad) skip the result array and the
copy: the op's ufunc writes into the tensor's memory (``_into``). The methods
are installed on :class:`tracejit.tensor.Tensor` when the package imports this module.
"""
from __future__ import annotations

import sys

import numpy as np

from . import dtypes as _dt
from .device import CPU
from .errors import DTypeError, ShapeError
from .formats import dense
from .tensor import _MADE as _INFERENCE_MADE, Tensor, _install_methods, _refuse_inference
from . import ops as _ops
from .ops.donation import donating as _donating
from .autograd.node import PrimNode, Tier0PrimNode
from .autograd.grad_mode import _state as _grad_state
from .ops import elementwise as _EW
from .ops.eager import trace_hooks as _trace_hooks, trace_state as _trace_state
from .ops.eager_into import run_into as _run_into


def _self_overlapping(a) -> bool:
    """Whether two elements of array `a` share memory (overlapping ``unfold`` windows, an
    ``as_strided`` view): an in-place result written there would depend on the order the
    elements are stored in, so it is refused, as PyTorch refuses expanded targets."""
    fl = a.flags
    if fl.c_contiguous or fl.f_contiguous or a.size < 2:
        return False
    dims = sorted((abs(st), n) for st, n in zip(a.strides, a.shape) if n > 1)
    reach = 0
    for st, n in dims:
        if st <= reach:   # (may overlap: count the offsets, an unusual layout's cost only)
            offs = np.zeros(1, dtype=np.int64)
            for st2, n2 in dims:
                offs = (offs[:, None] + np.arange(n2, dtype=np.int64) * st2).ravel()
            return np.unique(offs).size < offs.size
        reach += (n - 1) * st
    return False


def refuse_partial_overlap(what: str, written, read, full: bool = False) -> None:
    """Raise where tensor `read` shares some but not all of its memory with `written`, the
    tensor an op writes (``y[1:] = y[:-1]``): the result would depend on the order elements
    are written in. As PyTorch, the same view (``out=a`` for input ``a``) passes but with
    `full` (the indexed writes: ``index_add_``, ``scatter_``), and layouts with gaps or
    repeats pass; tensors of one base whose bounds do not meet pass."""
    if not isinstance(read, Tensor):
        return
    x, y = written._data, read._data
    if x is None and y is None:   # (tracers: their arrays as they would be eagerly)
        x, y = _trace_hooks.eager_pair(written, read) or (None, None)
    else:
        rb, wb = read._base, written._base
        if (rb if rb is not None else read) is not (wb if wb is not None else written) or x is y and not full:
            return
    if type(x) is not np.ndarray or type(y) is not np.ndarray or not (dense(x) and dense(y)):
        return
    if np.may_share_memory(x, y) and (full or not (x.shape == y.shape and x.strides == y.strides and (
            x.__array_interface__["data"][0] == y.__array_interface__["data"][0]))):
        raise RuntimeError(f"{what}: unsupported operation: some elements of the input tensor and the "
                           f"written-to tensor refer to a single memory location. Please clone() the "
                           f"tensor before performing the operation.")


def refuse_overlapping_operands(what: str, written, operands, values: bool = False, full: bool = False) -> None:
    """`refuse_partial_overlap` for each tensor of `operands` (and of a list or tuple among
    them: ``cat``'s), as PyTorch checks every tensor operand of an in-place op or ``out=``;
    with `values`, a 0-d operand passes (``masked_fill_``'s value: read once, as a number)."""
    for a in operands:
        if type(a) is list or type(a) is tuple:
            refuse_overlapping_operands(what, written, a, values, full)
        elif isinstance(a, Tensor) and (a._base is not None or written._base is not None or a._data is None
                                        or full and a is written) and not (values and a.ndim == 0):
            refuse_partial_overlap(what, written, a, full)


def _writable_alias(a: np.ndarray):
    """A writeable array over `a`'s memory when `a` is a read-only view (an ``expand``, or
    a view of one) of writeable memory, else None. The caller has refused a target whose
    elements overlap: PyTorch writes ``x.expand(3)[0]`` and ``fill_`` there, and refuses
    only a write that reaches one memory location twice."""
    owner = a.base
    while isinstance(owner, np.ndarray) and not owner.flags.writeable:
        owner = owner.base
    if not isinstance(owner, np.ndarray):
        return None   # (memory nothing may write: a read-only numpy array, a shared constant)
    interface = dict(a.__array_interface__)
    interface["data"] = (interface["data"][0], False)
    out = np.asarray(_Memory(interface, owner))
    return out if out.dtype == a.dtype else out.view(a.dtype)


class _Memory:
    """An ``__array_interface__`` holder that keeps the memory's owner alive."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, interface: dict, owner: np.ndarray):
        self.__array_interface__ = interface
        self.owner = owner


class InPlaceMethods:
    """Holder of the in-place methods (copied onto Tensor below; never instantiated)."""

    def _check_inplace(self, what: str) -> None:
        if _INFERENCE_MADE[0]:
            _refuse_inference(self, inplace=True)
        if self._requires_grad and self.grad_fn is None and _grad_state.enabled:
            if _trace_state.tracer is not None and _trace_hooks.writes_argument(self):
                return   # (a traced argument that is not a leaf in this call)
            raise RuntimeError(
                f"{what}: a leaf tensor that requires grad is being used in an in-place operation; "
                f"wrap the update in `with tracejit.no_grad():` (as optimizers do)")

    def _assign(self, result: "Tensor", what: str) -> "Tensor":
        """Make `result` the new value of self, in self's memory."""
        self._check_inplace(what)
        if _trace_state.tracer is not None:
            return _trace_state.tracer.assign(self, result, what)
        if result.dtype is not self.dtype:
            if self.dtype.category < result.dtype.category:
                raise DTypeError(f"{what}: result type {result.dtype.name} can't be cast to the "
                                 f"in-place output type {self.dtype.name}")
        if tuple(result.shape) != tuple(self.shape):
            raise ShapeError(f"{what}: output of shape {tuple(result.shape)} doesn't match the "
                               f"in-place tensor of shape {tuple(self.shape)} (in-place ops cannot broadcast the target)")
        base = getattr(self, "_base", None)
        positions = None
        if base is not None and (base._requires_grad or result._requires_grad):
            from .autograd.grad_mode import is_grad_enabled
            if is_grad_enabled() and not (base._requires_grad and base.grad_fn is None):
                from .autograd.views import view_positions  # CopySlices, as PyTorch does
                positions = view_positions(self, base)
            if is_grad_enabled() and positions is None:
                # A view of a leaf that requires grad (PyTorch refuses too), or a geometry
                # autograd/views.py cannot rebase: a silently stale gradient is worse than an error.
                raise RuntimeError(
                    f"{what}: in-place operation on a view (e.g. x[0], x.view(...), x.t()) of a tensor "
                    f"that is part of an autograd graph is not supported; write through the base "
                    f"instead (x[idx] = value, or x = x.index_put/where(...)), or do it under "
                    f"tracejit.no_grad()")
        target = self._data
        flags = getattr(target, "flags", None)
        if flags is not None and not (flags.c_contiguous or flags.f_contiguous) and what != "fill_" \
                and isinstance(target, np.ndarray) and _self_overlapping(target):   # (one value: any order)
            raise RuntimeError(f"{what}: unsupported operation: more than one element of the written-to "
                               f"tensor refers to a single memory location (e.g. an expand() or "
                               f"overlapping unfold() windows); clone() it first")
        if flags is not None and not getattr(flags, "writeable", True):
            target = _writable_alias(target)
            if target is None:
                raise RuntimeError(f"{what}: this tensor's memory is read-only (e.g. a read-only "
                                   f"numpy array); clone() it first")
        node = result.grad_fn
        if type(node) is PrimNode or type(node) is Tier0PrimNode:  # (a compiled call's node
            # keeps its inputs itself)
            # The new node may have saved self (``a.mul_(b)`` needs the old a for b's
            # gradient): give it its own copy, since self's memory is overwritten next.
            node.keep_input(self)
        xp = np if self.device is CPU else self._xp()
        src = result._data
        if result.dtype is not self.dtype and _dt.bfloat16 in (result.dtype, self.dtype):
            from .bf16 import cast
            src = cast(xp, src, self.dtype)   # (bf16 words convert, never reinterpret)
        if src is not self._data:   # (else the op wrote self's memory: `_donatable`)
            xp.copyto(target, src, casting="unsafe")
        self._vbox[0] += 1
        if result.grad_fn is not None:
            from .autograd.views import ACTIVE
            ACTIVE[0] = True  # older views of this memory must now be checked when used
        if positions is not None:
            from .autograd.views import rebase_view_history
            rebase_view_history(self, base, positions, result)
        elif result.grad_fn is not None:
            old, nr = self.grad_fn, self._output_nr
            self._requires_grad = True
            self.grad_fn = result.grad_fn
            self._output_nr = result._output_nr
            if old is not None and old._hooks is not None:
                old._pass_retain(nr, self)
        return self

    def _donatable(self, what: str, args, kwargs) -> bool:
        """Whether an op whose result is self updated (ops/donation.py) may write self's
        memory itself: `_assign` would store the result there, raising for none of its
        reasons (a leaf that requires grad raises here, before anything is written), and
        no tensor operand shares self's memory (it would be read while written)."""
        self._check_inplace(what)
        data = self._data
        if (_trace_state.tracer is not None or self._base is not None or type(data) is not np.ndarray
                or not data.flags.writeable or not data.flags.c_contiguous):
            return False
        for x in (*args, *kwargs.values()):
            if isinstance(x, Tensor) and (type(x._data) is not np.ndarray
                                          or np.may_share_memory(x._data, data)):
                return False
        return True

    def _assign_donated(self, result: "Tensor", what: str) -> "Tensor":
        """`_assign` of the result of an op that `_donatable` let write self's memory: one
        that did and records nothing only moves self's version (`_donatable` made the
        checks `_assign` would; they cost more than a small write)."""
        if result._data is self._data and result.grad_fn is None:
            self._vbox[0] += 1
            return self
        return self._assign(result, what)

    def _xp(self):
        from .device import array_module
        return array_module(self.device)

    def _into(self, prim, other=None) -> bool:
        """The result of `prim` on self (and `other`) written straight into self's memory
        (`eager_into.run_into`), for updates autograd never sees: under no_grad, or with no
        operand requiring grad (optimizer steps, ``w -= lr * w.grad``). Exactly what
        `_assign` would have stored, without the result array and the copy; False when
        `_assign`'s path must run (recording, tracing, another device, a read-only or
        cast result, a signature seen for the first time)."""
        if isinstance(other, Tensor) and (other._base is not None or self._base is not None or other._data is None):
            refuse_partial_overlap(prim.name + "_", self, other)   # (two views may share memory)
        if self.device is not CPU or _trace_state.tracer is not None:
            return False
        if _INFERENCE_MADE[0]:
            _refuse_inference(self, inplace=True)
        if _grad_state.enabled:
            base = self._base
            if (self._requires_grad or (isinstance(other, Tensor) and other._requires_grad)
                    or (base is not None and base._requires_grad)):
                return False
        data = self._data
        if type(data) is not np.ndarray:
            return False
        fl = data.flags
        if not fl.writeable or not (fl.c_contiguous or fl.f_contiguous) and _self_overlapping(data):
            return False
        if not _run_into(prim, self, (self,) if other is None else (self, other)):
            return False
        self._vbox[0] += 1
        return True

    def mul_(self, other):
        if self._into(_EW.MUL, other):
            return self
        return self._assign(_ops.mul(self, other), "mul_")

    def div_(self, other, *, rounding_mode=None):
        if rounding_mode is not None:   # ('floor' / 'trunc': div's own rounded forms)
            return self._assign(_ops.div(self, other, rounding_mode=rounding_mode), "div_")
        if self._into(_EW.DIV, other):
            return self
        return self._assign(_ops.div(self, other), "div_")

    def lerp_(self, end, weight):
        refuse_overlapping_operands("lerp_", self, (end, weight))
        return self._assign(_ops.lerp(self, end, weight), "lerp_")

    def zero_(self):
        return self.fill_(0)

    def fill_(self, value):
        # (ops.fill routes self's old value and a tensor value through the graph itself)
        return self._assign(_ops.fill(self, value), "fill_")

    def copy_(self, src, non_blocking: bool = False):
        if isinstance(src, Tensor) and (src._base is not None or self._base is not None or src._data is None):
            refuse_partial_overlap("copy_", self, src)
        src = src if isinstance(src, Tensor) else _ops.as_tensor(src)
        if src.device != self.device:
            src = src.to(self.device)
        new = _ops.cast(src, self.dtype)
        if (new.grad_fn is not None or (new._requires_grad and _grad_state.enabled)
                or _trace_state.tracer is not None or new._data.shape != self._data.shape):
            # (a view of its own: self never takes src's node; the common copy of values
            # outside autograd, a running statistic's or a buffer's, needs no view)
            new = _ops.expand(new, self.shape)
        return self._assign(self._overwrite(new), "copy_")

    def _overwrite(self, new: "Tensor") -> "Tensor":
        """`new` as the in-place result replacing all of self: when self is part of a graph,
        route it through where() so self's old value gets a zero gradient (rather than
        keeping self's old grad_fn)."""
        # (a tracer's graph is known only to the trace: routing it the same way keeps a
        # compiled output requiring grad exactly where the eager one does)
        if (self.grad_fn is not None and self._requires_grad) or getattr(self, "_trace", None) is not None:
            from .autograd.grad_mode import is_grad_enabled
            if is_grad_enabled():
                everywhere = _ops.full(self.shape, True, dtype=_dt.bool_, device=self.device)
                return _ops.where(everywhere, new, self)
        return new

    def uniform_(self, a=0.0, b=1.0, *, generator=None):
        from .ops import random as R
        with _no_grad(), R.drawing_from(generator, "uniform_"):
            return self._assign(R.rand(*self.shape, dtype=self.dtype, device=self.device) * (b - a) + a, "uniform_")

    def normal_(self, mean=0.0, std=1.0, *, generator=None):
        from .ops import random as R
        with _no_grad(), R.drawing_from(generator, "normal_"):
            return self._assign(R.randn(*self.shape, dtype=self.dtype, device=self.device) * std + mean, "normal_")

    def __setitem__(self, index, value):
        data = self._data
        if type(data) is np.ndarray and not (data.flags.c_contiguous or data.flags.f_contiguous) \
                and _self_overlapping(data):
            # overlapping windows: write only the indexed elements (a view), as PyTorch does
            region = self[index]
            if not isinstance(region._data, np.ndarray) or not np.may_share_memory(region._data, data):
                raise RuntimeError("__setitem__: unsupported operation: more than one element of the "
                                   "written-to tensor refers to a single memory location and the index "
                                   "selects a copy, not a view; clone() the tensor first")
            region.copy_(value)
            return
        if isinstance(value, Tensor):
            if value._data is not None:
                vb, sb = value._base, self._base
                if (vb if vb is not None else value) is (sb if sb is not None else self):
                    _refuse_setitem_overlap(self, index, value)
            elif data is None and _trace_hooks.eager_pair(self, value) is not None:   # (tracers of one value)
                _refuse_setitem_overlap(self, index, value)
        if self._donatable("__setitem__", (value, *(index if type(index) is tuple else (index,))), {}):
            # index_put writes self's memory itself (ops/donation.py): one pass over it, not a
            # copy of self written and then copied back
            self._assign_donated(_donating(data, _ops.index_put, self, index, value), "__setitem__")
            return
        self._assign(_ops.index_put(self, index, value), "__setitem__")


def _alpha_inplace(name: str, prim):
    """``add_`` or ``sub_``: `other` scaled by `alpha` (also given second, positionally)."""
    op, what = getattr(_ops, name), name + "_"

    def method(self, other, *rest, alpha=1):
        if rest:
            if len(rest) != 1:
                raise TypeError(f"{what}: takes at most 2 positional arguments, got {1 + len(rest)}")
            other, alpha = _ops.elementwise.alpha_first(what, other, rest[0])
        if alpha != 1:
            refuse_overlapping_operands(what, self, (other,))
            other = _ops.mul(other, alpha)
        if self._into(prim, other):
            return self
        return self._assign(op(self, other), what)
    method.__name__ = what
    return method


def _unary_inplace(name: str, prim):
    """``neg_``, ``exp_``, ``sqrt_``: the op's ufunc into self's memory where it can."""
    op, what = getattr(_ops, name), name + "_"

    def method(self):
        if self._into(prim):
            return self
        return self._assign(op(self), what)
    method.__name__ = what
    return method


def _refuse_setitem_overlap(self: Tensor, index, value: Tensor) -> None:
    """``self[index] = value`` where `value` views self's memory, refused as PyTorch: a
    basic index writes a view (copy_: partial overlap refused, a 0-d value is a fill); an
    advanced one is ``index_put_``, refusing any overlap with self but a 0-d value under a
    bool mask (``masked_fill_``)."""
    region = self[index]
    rb, sb = region._base, self._base
    if rb is not None and rb is (sb if sb is not None else self) or region._data is None and getattr(
            region, "_view_src", None) is not None:   # (a view, a tracer's too)
        if value.ndim:
            refuse_partial_overlap("__setitem__", region, value)
    elif not (value.ndim == 0 and isinstance(index, Tensor) and index.dtype is _dt.bool_):
        refuse_partial_overlap("__setitem__", self, value, full=True)


def take_value(self: Tensor, result: Tensor, aliases: int = 0) -> bool:
    """``self.copy_(result)`` without the copy, for an in-place op computed out of place
    (``relu6(x, inplace=True)``): self takes over `result`'s array, version bump and
    ``grad_fn``, when nothing else can see either memory: self is no view, and no other
    array, tensor or saved value refers to self's array (or its owner) or to result's
    (counted by reference, CPython's count) but `aliases` tensors the caller made of it.
    False, having changed nothing, otherwise; the caller then copies. Not while tracing,
    and only on the CPU."""
    if (_trace_state.tracer is not None or self.device is not CPU or result.device is not CPU
            or result.dtype is not self.dtype or self._base is not None or _counts_hold() is False):
        return False
    old, new = self._data, result._data
    if (type(old) is not np.ndarray or type(new) is not np.ndarray or old.shape != new.shape
            or not (_sole(old, aliases) and _sole(new)) or _getrefcount(result) > _RESULT_REFS):
        return False
    if result.grad_fn is None and (self._requires_grad or self.grad_fn is not None):
        return False    # (self's old history must get a zero gradient: copy_'s `_overwrite`)
    self._check_inplace("copy_")
    self._data = new
    self._vbox[0] += 1
    if result.grad_fn is not None:
        old, nr = self.grad_fn, self._output_nr
        self._requires_grad = True
        self.grad_fn = result.grad_fn
        self._output_nr = result._output_nr
        if old is not None and old._hooks is not None:
            old._pass_retain(nr, self)
    return True


_getrefcount = sys.getrefcount


def can_take(self: Tensor) -> bool:
    """Whether `take_value` can take a result for self as far as self decides (nothing
    else sees its memory), so a caller can choose before computing the result."""
    old = self._data
    return (_trace_state.tracer is None and self.device is CPU and self._base is None
            and type(old) is np.ndarray and _counts_hold() is True and _sole(old))


_COUNTS_HOLD: list = []


def _counts_hold():
    """Whether this interpreter's reference counts are the ones `_sole` expects, probed
    once: another interpreter (a later CPython, a free-threaded build) may count stack
    references differently, and a miscount would let a tensor leave a view of its memory
    behind, so there `take_value` never takes."""
    if not _COUNTS_HOLD:
        _COUNTS_HOLD.append(None)      # (while probing: take_value's own checks decide)
        ok = getattr(sys, "_is_gil_enabled", lambda: True)()
        if ok:
            def probe(keep):
                x = Tensor._wrap(np.zeros(4, np.float32), _dt.float32, CPU)
                r = Tensor._wrap(np.ones(4, np.float32), _dt.float32, CPU)
                held = keep(x._data)
                return take_value(x, r), held
            ok = (probe(lambda a: None)[0] and not probe(lambda a: a)[0]
                  and not probe(lambda a: a[1:])[0] and not probe(lambda a: [a])[0])
        _COUNTS_HOLD[0] = ok
    return _COUNTS_HOLD[0]


def _sole(a, aliases: int = 0) -> bool:
    """Whether array `a`'s memory is referred to by its one holder (and `aliases` more)
    alone: `a` itself by those (and this call's), and its owner, if `a` views one, by `a`."""
    if _getrefcount(a) > _ARRAY_REFS + aliases:
        return False
    base = a.base
    if base is None:
        return True
    # (a view's base is the array owning the memory, numpy's rule; any other view of
    # it refers to it too)
    return type(base) is np.ndarray and base.base is None and _getrefcount(base) <= _BASE_REFS


# References to an array that only its tensor holds, seen in `_sole`: the tensor's slot,
# `take_value`'s local, `_sole`'s argument and getrefcount's; to its owner: the view's
# base, `_sole`'s local and getrefcount's; to the result tensor: the caller's local,
# `take_value`'s argument and getrefcount's.
_ARRAY_REFS = 4
_BASE_REFS = 3
_RESULT_REFS = 3


def _no_grad():
    from .autograd.grad_mode import no_grad
    return no_grad()


for _name, _prim in (("add", _EW.ADD), ("sub", _EW.SUB)):
    setattr(InPlaceMethods, _name + "_", _alpha_inplace(_name, _prim))
for _name, _prim in (("neg", _EW.NEG), ("exp", _EW.EXP), ("sqrt", _EW.SQRT)):
    setattr(InPlaceMethods, _name + "_", _unary_inplace(_name, _prim))
_install_methods(InPlaceMethods)
