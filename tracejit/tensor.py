"""The Tensor: an array (numpy or cupy) plus autograd state.

Methods are thin: each forwards to the op function of the same name in
``tracejit.ops``, so eager calls, traced calls and compiled code share one
definition per op. In-place methods compute out of place, then write the result
into this tensor's memory, bump its version counter and take over the new
``grad_fn`` (which is how ``x[i] = v`` and ``y.mul_(2)`` stay differentiable).
"""
from __future__ import annotations

import numpy as np

from . import dtypes as _dt
from .device import CPU, as_device, device_of_array
from .errors import DTypeError, ShapeError
from .formats import check_memory_format
from .size import Size

__all__ = ["Tensor"]


class Tensor:
    __slots__ = ("_data", "dtype", "device", "_requires_grad", "_grad", "grad_fn", "_output_nr",
                 "_vbox", "_accumulator", "_name", "_base", "__weakref__")

    __array_priority__ = 1000  # make numpy defer to our reflected operators

    def __init__(self, data=None, *, dtype=None, device=None, requires_grad: bool = False):
        from .ops.creation import _to_array
        d = as_device(device)
        arr, dt = _to_array(data if data is not None else [], dtype if dtype is not None else _dt.get_default_dtype(), d)
        self._init(arr, dt, d)
        if requires_grad:
            self.requires_grad = True

    def _init(self, arr, dt, dev):
        self._data = arr
        self.dtype = dt
        self.device = dev
        self._requires_grad = False
        self._grad = None
        self.grad_fn = None
        self._output_nr = 0
        self._vbox = [0]
        self._accumulator = None
        self._name = None
        self._base = None  # for views made by ops: the tensor whose memory this is

    @classmethod
    def _wrap(cls, arr, dtype=None, dev=None) -> "Tensor":
        t = object.__new__(Tensor)
        t._data = arr
        t.dtype = dtype if dtype is not None else _dt.as_dtype(arr.dtype)
        t.device = dev if dev is not None else device_of_array(arr)
        t._requires_grad = False
        t._grad = None
        t.grad_fn = None
        t._output_nr = 0
        t._vbox = [0]
        t._accumulator = None
        t._name = None
        t._base = None
        return t

    # ---- autograd state --------------------------------------------------------
    @property
    def grad(self) -> "Tensor | None":
        return self._grad

    @grad.setter
    def grad(self, value: "Tensor | None") -> None:
        # Checked at assignment, as in PyTorch: a wrong .grad would otherwise surface (or
        # not) much later, in an optimizer step or a broadcasting accumulation.
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None, got {type(value).__name__}")
            if value is not self and (value.dtype is not self.dtype or value.device != self.device
                                      or not _same_shape(value, self)):
                raise RuntimeError(
                    f"assigned grad has {value.dtype.name}{list(value.shape)} on {value.device}, but the "
                    f"tensor is {self.dtype.name}{list(self.shape)} on {self.device}: a gradient must "
                    f"match its tensor's shape, dtype and device")
        self._grad = value

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if value and not (self.dtype.is_floating_point):
            raise DTypeError(f"only floating-point tensors can require gradients, got {self.dtype}")
        if not value and self.grad_fn is not None:
            raise RuntimeError("you can only change requires_grad of leaf tensors; "
                               "use .detach() to get a tensor that does not require grad")
        self._requires_grad = bool(value)

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        self.requires_grad = requires_grad
        return self

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def _version(self) -> int:
        return self._vbox[0]

    def detach(self) -> "Tensor":
        t = Tensor._wrap(self._data, self.dtype, self.device)
        t._vbox = self._vbox  # shares memory, so it shares the version counter
        return t

    def detach_(self) -> "Tensor":
        self.grad_fn = None
        self._requires_grad = False
        return self

    def retain_grad(self) -> None:
        import weakref
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on a tensor that does not require grad")
        if self.grad_fn is None:
            return  # leaves always keep .grad
        node = self.grad_fn
        if node._retain is None:
            node._retain = {}
        node._retain[self._output_nr] = weakref.ref(self)

    @property
    def retains_grad(self) -> bool:
        n = self.grad_fn
        return n is not None and bool(n._retain) and self._output_nr in n._retain

    def register_hook(self, hook):
        """hook(grad) -> new grad or None, called when this tensor's gradient is computed."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that does not require grad")
        if self.grad_fn is not None:
            return self.grad_fn._add_tensor_hook(self._output_nr, hook)
        from .autograd.node import leaf_node
        return leaf_node(self)._add_tensor_hook(0, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """hook(tensor) runs after this leaf's ``.grad`` has been accumulated in a backward
        (eager or compiled); its return value is ignored. DistributedDataParallel uses it."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that does not require grad")
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        from .autograd.node import leaf_node
        return leaf_node(self)._add_post_acc_hook(hook)

    def backward(self, gradient=None, retain_graph=None, create_graph: bool = False) -> None:
        from .autograd import backward
        backward([self], None if gradient is None else [gradient], retain_graph, create_graph)

    # ---- basic attributes --------------------------------------------------------
    @property
    def shape(self) -> "Size":
        return tuple.__new__(Size, self._data.shape)  # numpy's shape is already ints

    def size(self, dim: int | None = None):
        s = self.shape
        if dim is None:
            return s
        from .shapes import normalize_dim
        return s[normalize_dim(dim, len(s), "size")]

    @property
    def ndim(self) -> int:
        if type(self) is Tensor:
            return self._data.ndim  # no Size object (subclasses, e.g. tracers, may override shape)
        return len(self.shape)

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        if type(self) is Tensor:
            return self._data.size
        n = 1
        for d in self.shape:
            n = n * d
        return n

    nelement = numel

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    is_sparse = False     # tracejit tensors are always dense and strided
    is_quantized = False
    is_meta = False

    def is_complex(self) -> bool:
        return False  # no complex dtypes in tracejit

    def contiguous(self, memory_format=None) -> "Tensor":
        """Row-major memory (every memory_format is accepted; see tracejit/formats.py)."""
        check_memory_format(memory_format, "contiguous")
        return _ops.contiguous(self)

    def clone(self, *, memory_format=None) -> "Tensor":
        check_memory_format(memory_format, "clone")
        return _ops.clone(self)

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def is_contiguous(self) -> bool:
        return bool(self._data.flags["C_CONTIGUOUS"])

    def data_ptr(self) -> int:
        return self._data.__array_interface__["data"][0] if self.device is CPU else self._data.data.ptr

    @property
    def data(self) -> "Tensor":
        return self.detach()

    @data.setter
    def data(self, value: "Tensor") -> None:
        self._data = value._data
        self.dtype = value.dtype
        self.device = value.device

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __hash__(self) -> int:
        return id(self)

    # ---- conversions ----------------------------------------------------------------
    def numpy(self, *, force: bool = False) -> np.ndarray:
        if self.requires_grad and not force:
            raise RuntimeError("can't call numpy() on a tensor that requires grad; use tensor.detach().numpy()")
        if self.device is not CPU:
            if not force:
                raise TypeError(f"can't convert a {self.device} tensor to numpy; use tensor.cpu() first")
            return self._data.get()
        return self._data

    def item(self):
        if self.numel() != 1:
            raise ValueError(f"a tensor with {self.numel()} elements cannot be converted to a Python scalar")
        return self._host().reshape(()).item()

    def tolist(self):
        return self._host().tolist()

    def _host(self) -> np.ndarray:
        return self._data if self.device is CPU else self._data.get()

    def __array__(self, dtype=None, copy=None):
        a = self.detach()._host()
        return a if dtype is None else a.astype(dtype)

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if not self.dtype.is_integer:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise RuntimeError(f"the truth value of a tensor with {self.numel()} elements is ambiguous; "
                               f"use .any() or .all()")
        return bool(self.item())

    def __dlpack__(self, *args, **kwargs):
        return self._data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()

    def to(self, *args, **kwargs) -> "Tensor":
        """``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(other_tensor)``."""
        dtype = kwargs.pop("dtype", None)
        dev = kwargs.pop("device", None)
        kwargs.pop("non_blocking", None)
        check_memory_format(kwargs.pop("memory_format", None), "to")
        copy = kwargs.pop("copy", False)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, Tensor):
                dtype, dev = a.dtype, a.device
            elif isinstance(a, (_dt.DType, type, np.dtype)) or (isinstance(a, str) and a in _dt._BY_NAME):
                dtype = a
            else:
                dev = a
        from . import ops
        out = self
        if dev is not None and as_device(dev) != self.device:
            out = ops.to_device(out, as_device(dev))
        if dtype is not None and _dt.as_dtype(dtype) is not out.dtype:
            out = ops.cast(out, _dt.as_dtype(dtype))
        if copy and out is self:
            out = out.clone()
        return out

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self, device=None) -> "Tensor":
        dev = as_device("cuda" if device is None else device)  # an int means cuda:<int>
        if dev.type != "cuda":
            raise ValueError(f"cuda(): expected a CUDA device, got {dev}")
        return self.to(dev)

    def float(self) -> "Tensor":
        return self.to(_dt.float32)

    def double(self) -> "Tensor":
        return self.to(_dt.float64)

    def half(self) -> "Tensor":
        return self.to(_dt.float16)

    def int(self) -> "Tensor":
        return self.to(_dt.int32)

    def long(self) -> "Tensor":
        return self.to(_dt.int64)

    def bool(self) -> "Tensor":
        return self.to(_dt.bool_)

    def type_as(self, other: "Tensor") -> "Tensor":
        return self.to(other.dtype)

    def type(self, dtype=None):
        if dtype is None:
            return f"tracejit.{self.dtype.name}"
        return self.to(dtype)

    # ---- printing ---------------------------------------------------------------------
    def __repr__(self) -> str:
        a = self._host()
        extras = []
        if a.size == 0:
            body = "[]"
            if a.shape != (0,):
                extras.append(f"size={tuple(a.shape)}")
        else:
            body = np.array2string(a, separator=", ", prefix="tensor(", threshold=1000,
                                   precision=4, suppress_small=False, floatmode=_float_mode(a))
        if self.device is not CPU:
            extras.append(f"device='{self.device}'")
        default = _dt.get_default_dtype()
        if a.size == 0 and self.dtype is not default or \
                self.dtype not in (default, _dt.int64, _dt.bool_):
            extras.append(f"dtype={self.dtype!r}")
        if self.grad_fn is not None:
            extras.append(f"grad_fn=<{self.grad_fn.name()}>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + body + "".join(", " + e for e in extras) + ")"

    def __format__(self, spec: str) -> str:
        if spec and self.numel() == 1:
            return format(self.item(), spec)
        return repr(self)

    # ---- in-place machinery ---------------------------------------------------------
    def _check_inplace(self, what: str) -> None:
        from .autograd.grad_mode import is_grad_enabled
        if self.requires_grad and self.grad_fn is None and is_grad_enabled():
            raise RuntimeError(
                f"{what}: a leaf tensor that requires grad is being used in an in-place operation; "
                f"wrap the update in `with tracejit.no_grad():` (as optimizers do)")

    def _assign(self, result: "Tensor", what: str) -> "Tensor":
        """Make `result` the new value of self, in self's memory."""
        self._check_inplace(what)
        from .ops.registry import trace_state
        if trace_state.tracer is not None:
            return trace_state.tracer.assign(self, result, what)
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
        flags = getattr(self._data, "flags", None)
        if flags is not None and not getattr(flags, "writeable", True):
            raise RuntimeError(f"{what}: this tensor's memory is read-only (e.g. the result of "
                               f"expand() or of a read-only numpy array); clone() it first")
        node = result.grad_fn
        saved = getattr(node, "saved", None) if node is not None else None
        if isinstance(saved, dict):  # (a compiled call's node keeps its inputs itself)
            # The new node may have saved self (``a.mul_(b)`` needs the old a for b's
            # gradient): give it its own copy, since self's memory is overwritten next.
            for s in saved.values():
                if getattr(s, "vbox", None) is self._vbox:
                    s.data = s.data.copy()
                    s.vbox = [s.version]
        xp = np if self.device is CPU else self._xp()
        xp.copyto(self._data, result._data, casting="unsafe")
        self._vbox[0] += 1
        if result.grad_fn is not None:
            from .autograd.views import ACTIVE
            ACTIVE[0] = True  # older views of this memory must now be checked when used
        if positions is not None:
            from .autograd.views import rebase_view_history
            rebase_view_history(self, base, positions, result)
        elif result.grad_fn is not None:
            self._requires_grad = True
            self.grad_fn = result.grad_fn
            self._output_nr = result._output_nr
        return self

    def _xp(self):
        from .device import array_module
        return array_module(self.device)

    def add_(self, other, *, alpha=1):
        return self._assign(_ops.add(self, other, alpha=alpha), "add_")

    def sub_(self, other, *, alpha=1):
        return self._assign(_ops.sub(self, other, alpha=alpha), "sub_")

    def mul_(self, other):
        return self._assign(_ops.mul(self, other), "mul_")

    def div_(self, other):
        return self._assign(_ops.div(self, other), "div_")

    def pow_(self, other):
        return self._assign(_ops.pow(self, other), "pow_")

    def clamp_(self, min=None, max=None):
        return self._assign(_ops.clamp(self, min, max), "clamp_")

    def neg_(self):
        return self._assign(_ops.neg(self), "neg_")

    def exp_(self):
        return self._assign(_ops.exp(self), "exp_")

    def sqrt_(self):
        return self._assign(_ops.sqrt(self), "sqrt_")

    def relu_(self):
        return self._assign(_ops.relu(self), "relu_")

    def masked_fill_(self, mask, value):
        return self._assign(_ops.masked_fill(self, mask, value), "masked_fill_")

    def addcmul_(self, t1, t2, value=1):
        return self._assign(self + value * t1 * t2, "addcmul_")

    def addcdiv_(self, t1, t2, value=1):
        return self._assign(self + value * t1 / t2, "addcdiv_")

    def lerp_(self, end, weight):
        return self._assign(self + weight * (end - self), "lerp_")

    def zero_(self):
        return self.fill_(0)

    def fill_(self, value):
        if isinstance(value, Tensor):
            value = value.item()
        new = _ops.full(self.shape, value, dtype=self.dtype, device=self.device)
        return self._assign(self._overwrite(new), "fill_")

    def copy_(self, src):
        src = src if isinstance(src, Tensor) else _ops.as_tensor(src)
        if src.device != self.device:
            src = src.to(self.device)
        new = _ops.expand(_ops.cast(src, self.dtype), self.shape)
        return self._assign(self._overwrite(new), "copy_")

    def _overwrite(self, new: "Tensor") -> "Tensor":
        """`new` as the in-place result replacing all of self: when self is part of a graph,
        route it through where() so self's old value gets a zero gradient (rather than
        keeping self's old grad_fn)."""
        if self.grad_fn is not None and self._requires_grad:
            from .autograd.grad_mode import is_grad_enabled
            if is_grad_enabled():
                everywhere = _ops.full(self.shape, True, dtype=_dt.bool_, device=self.device)
                return _ops.where(everywhere, new, self)
        return new

    def uniform_(self, a=0.0, b=1.0):
        from .ops import random as R
        with _no_grad():
            return self._assign(R.rand(*self.shape, dtype=self.dtype, device=self.device) * (b - a) + a, "uniform_")

    def normal_(self, mean=0.0, std=1.0):
        from .ops import random as R
        with _no_grad():
            return self._assign(R.randn(*self.shape, dtype=self.dtype, device=self.device) * std + mean, "normal_")

    __iadd__ = add_
    __isub__ = sub_
    __imul__ = mul_
    __itruediv__ = div_

    def __setitem__(self, index, value):
        self._assign(_ops.index_put(self, index, value), "__setitem__")

    # ---- operators ------------------------------------------------------------------------
    def __add__(self, o):
        return _ops.add(self, o)

    def __radd__(self, o):
        return _ops.add(o, self)

    def __sub__(self, o):
        return _ops.sub(self, o)

    def __rsub__(self, o):
        return _ops.sub(o, self)

    def __mul__(self, o):
        return _ops.mul(self, o)

    def __rmul__(self, o):
        return _ops.mul(o, self)

    def __truediv__(self, o):
        return _ops.div(self, o)

    def __rtruediv__(self, o):
        return _ops.div(o, self)

    def __floordiv__(self, o):
        return _ops.floor_divide(self, o)

    def __rfloordiv__(self, o):
        return _ops.floor_divide(o, self)

    def __mod__(self, o):
        return _ops.remainder(self, o)

    def __rmod__(self, o):
        return _ops.remainder(o, self)

    def __pow__(self, o):
        return _ops.pow(self, o)

    def __rpow__(self, o):
        return _ops.pow(o, self)

    def __matmul__(self, o):
        return _ops.matmul(self, o)

    def __rmatmul__(self, o):
        return _ops.matmul(o, self)

    def __neg__(self):
        return _ops.neg(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _ops.abs(self)

    def __invert__(self):
        return _ops.logical_not(self)

    def __and__(self, o):
        return _ops.logical_and(self, o)

    def __or__(self, o):
        return _ops.logical_or(self, o)

    __rand__ = __and__
    __ror__ = __or__

    def __eq__(self, o):
        if o is None or not isinstance(o, _OPERAND_TYPES):
            return NotImplemented  # `t == None` is False, as for any other object
        return _ops.eq(self, o)

    def __ne__(self, o):
        if o is None or not isinstance(o, _OPERAND_TYPES):
            return NotImplemented
        return _ops.ne(self, o)

    def __lt__(self, o):
        return _ops.lt(self, o)

    def __le__(self, o):
        return _ops.le(self, o)

    def __gt__(self, o):
        return _ops.gt(self, o)

    def __ge__(self, o):
        return _ops.ge(self, o)

    def __getitem__(self, index):
        return _ops.getitem(self, index)

    def where(self, condition, other):
        """``x.where(cond, y)`` is ``where(cond, x, y)``, as in PyTorch."""
        return _ops.where(condition, self, other)

    def nonzero(self, *, as_tuple: bool = False):
        return _ops.nonzero(self, as_tuple=as_tuple)

    @property
    def T(self) -> "Tensor":
        return _ops.permute(self, tuple(range(self.ndim))[::-1])

    @property
    def mT(self) -> "Tensor":
        return _ops.transpose(self, -2, -1)

    def view(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (_dt.DType, type)):
            raise NotImplementedError("view(dtype) is not supported; use .to(dtype)")
        return _ops.view(self, *shape)

    def new_tensor(self, data, dtype=None):
        return _ops.tensor(data, dtype=dtype or self.dtype, device=self.device)

    def new_zeros(self, *size, dtype=None):
        return _ops.zeros(*size, dtype=dtype or self.dtype, device=self.device)

    def new_ones(self, *size, dtype=None):
        return _ops.ones(*size, dtype=dtype or self.dtype, device=self.device)

    def new_full(self, size, fill_value, dtype=None):
        return _ops.full(size, fill_value, dtype=dtype or self.dtype, device=self.device)

    def new_empty(self, *size, dtype=None):
        return _ops.empty(*size, dtype=dtype or self.dtype, device=self.device)


# Methods that forward unchanged to the op of the same name.
_FORWARDED = """
add sub mul div pow neg abs exp log log1p sqrt rsqrt sin cos tanh sigmoid relu gelu erf sign floor
square clamp clip maximum minimum sum mean var std max min amax amin argmax argmin logsumexp prod
all any mm matmul bmm reshape transpose permute t squeeze unsqueeze expand expand_as flatten
contiguous split chunk gather scatter_add masked_fill softmax log_softmax eq ne lt le gt ge
clone view_as reshape_as unbind flip repeat cumsum norm index_select logical_not
floor_divide remainder narrow isnan isinf isfinite nan_to_num dropout expm1 logical_and logical_or
movedim swapaxes outer dot mv take_along_dim isclose allclose
tril triu sort argsort topk multinomial cumprod
""".split()


def _forward(name):
    fn = None

    def method(self, *args, **kwargs):
        nonlocal fn
        if fn is None:
            fn = getattr(_ops, name)  # looked up once (ops are imported after this class)
        return fn(self, *args, **kwargs)
    method.__name__ = name
    method.__qualname__ = f"Tensor.{name}"
    return method


for _n in _FORWARDED:
    if not hasattr(Tensor, _n):
        setattr(Tensor, _n, _forward(_n))


def _same_shape(a: Tensor, b: Tensor) -> bool:
    da, db = getattr(a, "_data", None), getattr(b, "_data", None)
    if da is not None and db is not None:
        return da.shape == db.shape  # (no Size objects: this runs per leaf per backward)
    return tuple(a.shape) == tuple(b.shape)


def _float_mode(a) -> str:
    """PyTorch's look: ``1., 2.`` for whole numbers, else 4 fixed decimals (numpy switches
    to scientific notation on the same ranges PyTorch does)."""
    if a.dtype.kind != "f":
        return "maxprec"
    finite = a[np.isfinite(a)]
    if finite.size == 0:
        return "maxprec"
    nz = np.abs(finite[finite != 0]).astype(np.float64)
    sci = nz.size > 0 and (nz.max() >= 1e8 or nz.min() < 1e-4 or nz.max() / nz.min() > 1e3)
    whole = bool(np.all(finite == np.round(finite)))
    return "maxprec" if whole and not sci else "fixed"


def _no_grad():
    from .autograd.grad_mode import no_grad
    return no_grad()


_OPERAND_TYPES = (Tensor, bool, int, float, np.number, np.bool_)


# The tail import that closes the tensor/ops/autograd cycle (the one idiom for it, see
# ops/registry.py): ops and autograd import Tensor, defined above, at their tops.
from . import ops as _ops  # noqa: E402


# Operators that are exactly one op call: the operator calls the op function itself
# rather than through the method above (one Python call less on every `a * b`).
_OPERATOR_OPS = {"__add__": "add", "__sub__": "sub", "__mul__": "mul", "__truediv__": "div",
                 "__floordiv__": "floor_divide", "__mod__": "remainder", "__pow__": "pow",
                 "__matmul__": "matmul", "__lt__": "lt", "__le__": "le", "__gt__": "gt",
                 "__ge__": "ge", "__and__": "logical_and", "__or__": "logical_or"}


def _with_ndarray_operand(name):
    # PyTorch's operators take a numpy array as the right operand (as a tensor of its dtype);
    # like PyTorch, `ndarray op tensor` (the reflected forms) still raises a TypeError.
    op = getattr(_ops, _OPERATOR_OPS[name]) if name in _OPERATOR_OPS else getattr(Tensor, name)
    ndarray = np.ndarray

    def method(self, o):
        if isinstance(o, ndarray):
            o = _ops.as_tensor(o, device=self.device)
        return op(self, o)
    method.__name__ = name
    method.__qualname__ = f"Tensor.{name}"
    return method


for _n in ("__add__", "__sub__", "__mul__", "__truediv__", "__floordiv__", "__mod__", "__pow__",
           "__matmul__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__and__",
           "__or__"):
    setattr(Tensor, _n, _with_ndarray_operand(_n))
