"""The Tensor: an array (numpy or cupy) plus autograd state.

This module holds the class core: autograd state (requires_grad, grad, hooks,
backward), attributes, conversions and printing. Three method groups, which need
``tracejit.ops``, install themselves on the class when the package imports them right
after this module: ``tensor_operators.py`` (operators and the methods that forward to
the op of the same name in ``tracejit.ops``, so eager calls, traced calls and compiled
code share one definition per op), ``tensor_inplace.py`` (``add_``, ``x[i] = v``, ...)
and ``tensor_compat.py`` (the constructor ``Tensor(data)`` and the rest).
"""
from __future__ import annotations

import math
from operator import attrgetter as _attrgetter

import numpy as np

from . import dtypes as _dt
from .device import CPU, as_device, device_of_array
from .errors import DTypeError
from .formats import check_memory_format, laid_out
from .size import Size
from .tensor_repr import tensor_repr as _tensor_repr

__all__ = ["Tensor"]

_new_object = object.__new__

# Inference tensors (made inside ``inference_mode``, as PyTorch's): `_INFERENCE` holds one
# entry per thread inside inference_mode, so while it is empty a new tensor asks nothing
# more; `_MADE` turns True with the first one, until when the checks autograd and in-place
# updates make for them cost one list read.
_INFERENCE: list = []
_MADE = [False]


def _mark_inference(t) -> None:
    """Mark `t`, made while some thread is inside inference_mode, if this one is."""
    # (grad mode's thread-local, imported once: an import statement here cost 1.3 us of
    # each op inside inference_mode, doubling a small add's dispatch)
    state = _GRAD_STATE[0] if _GRAD_STATE else _grad_state()
    if state.inference:
        t._inference = True
        _MADE[0] = True


_GRAD_STATE: list = []   # grad_mode's `_state`, once imported (autograd imports this module)


def _grad_state():
    from .autograd.grad_mode import _state
    _GRAD_STATE[:] = [_state]
    return _state


def _refuse_saved(*tensors) -> None:
    """`_refuse_inference` of each tensor autograd is saving for backward (None: none)."""
    for t in tensors:
        if t is not None:
            _refuse_inference(t)


def _refuse_inference(t, inplace: bool = False) -> None:
    """PyTorch's errors for an inference tensor used outside inference_mode: saved for
    backward, updated in place, or made to require grad (`_MADE` checked by the caller)."""
    from .autograd.grad_mode import _state
    if _state.inference or not t.is_inference():
        return
    if inplace:
        raise RuntimeError("Inplace update to inference tensor outside InferenceMode is not "
                           "allowed.You can make a clone to get a normal tensor before doing "
                           "inplace update.See https://github.com/pytorch/rfcs/pull/17 for more "
                           "details.")
    raise RuntimeError("Inference tensors cannot be saved for backward. Please do not use "
                       "Tensors created in inference mode in computation tracked by autograd. "
                       "To work around this, you can make a clone to get a normal tensor and use "
                       "it in autograd, or use `torch.no_grad()` instead of "
                       "`torch.inference_mode()`.")


def _cast_method(name: str, dtype: "_dt.DType"):
    """``x.float()`` and its kind: this tensor in `dtype` (itself when already of it)."""
    def method(self, memory_format=None) -> "Tensor":
        if memory_format is not None:
            check_memory_format(memory_format, name)
        return _ops.cast(self, dtype)
    method.__name__, method.__qualname__ = name, f"Tensor.{name}"
    return method


class Tensor:
    # Every op result sets the slots below (so `_wrap` is the cost of each op's Tensor);
    # fields most tensors never set are class-level defaults, stored in the instance
    # __dict__ (made on first use) by the few that do: a leaf's .grad and accumulator, a
    # traced constant's name, the output index of a multi-output node.
    __slots__ = ("_data", "dtype", "device", "_requires_grad", "grad_fn", "_vbox", "_base",
                 "__dict__", "__weakref__")
    _grad = None
    _accumulator = None
    _name = None
    _output_nr = 0
    _data_of = None   # a `.data` alias made during a capture: the tensor it is the memory of
    _inference = False   # made inside inference_mode (a view asks its base: `is_inference`)

    __array_priority__ = 1000  # make numpy defer to our reflected operators

    # Tensor(data) and the legacy Tensor(2, 3): tensor_compat.py (they convert with ops.creation's rules)

    def _init(self, arr, dt, dev):
        self._data = arr
        self.dtype = dt
        self.device = dev
        self._requires_grad = False
        self.grad_fn = None
        self._vbox = [0]
        self._base = None  # for views made by ops: the tensor whose memory this is
        if _INFERENCE:
            _mark_inference(self)

    @staticmethod  # a plain function: every eager op result comes here, and a plain call
    def _wrap(arr, dtype=None, dev=None) -> "Tensor":  # costs less than a classmethod's
        # (ops/registry.py's plan paths set these same fields inline, one call less per op:
        # a field added here goes there too; tests/ops/test_registry_plans.py compares them)
        t = _new_object(Tensor)
        t._data = arr
        t.dtype = dtype if dtype is not None else _dt.as_dtype(arr.dtype)
        t.device = dev if dev is not None else device_of_array(arr)
        t._requires_grad = False
        t.grad_fn = None
        t._vbox = [0]
        t._base = None
        if _INFERENCE:
            _mark_inference(t)
        return t

    # ---- autograd state --------------------------------------------------------
    @property
    def grad(self) -> "Tensor | None":
        if _eager._tracers_active and _eager.trace_state.tracer is not None:
            from .errors import TraceError, user_where
            raise TraceError(f"reading .grad{user_where(2)} inside a compiled function reads a gradient "
                             "outside the graph, which a capture would keep as this call's tensor (or None) "
                             "for every later call; read it outside the compiled function and pass the "
                             "tensor in, or use tracejit.eager")
        g = self._grad
        if g is None and self.grad_fn is not None and not self.retains_grad:
            _warn_non_leaf_grad()
        return g

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
        if self._data is not None:   # (a tensor from outside a function being captured)
            _refuse_effect("setting .grad changes a gradient")
        self._grad = value

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if value and not self.dtype.differentiable:
            raise DTypeError(f"only floating-point and complex tensors can require gradients, got {self.dtype}")
        if not value and not self.is_leaf:   # (a tracer has no grad_fn: is_leaf asks its graph)
            raise RuntimeError("you can only change requires_grad of leaf tensors; "
                               "use .detach() to get a tensor that does not require grad")
        if self._data is None and bool(value) != self._requires_grad:   # (a tracer)
            from .ops.eager import trace_hooks
            trace_hooks.refuse_grad_change(self, bool(value))
        if value and _MADE[0]:
            from .autograd.grad_mode import _state
            if not _state.inference and self.is_inference():
                raise RuntimeError("Setting requires_grad=True on inference tensor outside "
                                   "InferenceMode is not allowed.")
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
        if _MADE[0] and self.is_inference():
            t._inference = True
        return t

    def detach_(self) -> "Tensor":
        if self._base is not None:   # (PyTorch refuses every view: its base's history would stay)
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        self.grad_fn = None
        self._requires_grad = False
        return self

    def retain_grad(self) -> None:
        import weakref
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on a tensor that does not require grad")
        if self.grad_fn is None:
            return  # leaves always keep .grad
        self.grad_fn._retain_output(self._output_nr, weakref.ref(self))

    @property
    def retains_grad(self) -> bool:
        n = self.grad_fn
        return n is not None and n._retains(self._output_nr)

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

    def backward(self, gradient=None, retain_graph=None, create_graph: bool = False, inputs=None) -> None:
        # (autograd's backward, bound by the tail import below: an import statement here
        # cost 0.4 µs per call)
        _backward([self], None if gradient is None else [gradient], retain_graph, create_graph, inputs)

    # ---- basic attributes --------------------------------------------------------
    @property
    def shape(self) -> "Size":
        return tuple.__new__(Size, self._data.shape)  # numpy's shape is already ints

    def size(self, dim: int | None = None):
        if dim is None:
            return self.shape
        if type(dim) is int and type(self) is Tensor:
            s = self._data.shape
            if -len(s) <= dim < len(s):   # (a plain in-range dim: numpy's shape holds ints)
                return s[dim]
        s = self.shape
        from .shapes import normalize_dim
        return s[normalize_dim(dim, len(s), "size")]

    # The array's own: a C getter, no Python frame (~10 reads a training step: matmul's
    # and mm's rank checks, VJPs). A subclass without an array (jit's Tracer) has its own.
    ndim = property(_attrgetter("_data.ndim"), doc="Number of dimensions.")

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        return self._data.size if type(self) is Tensor else math.prod(self.shape)

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
        return self.dtype.is_complex

    # complex tensors (ops/complex_ops.py): .real is a view of the real parts (the tensor
    # itself when real), .imag of the imaginary parts
    @property
    def real(self) -> "Tensor":
        return _ops.real(self)

    @property
    def imag(self) -> "Tensor":
        return _ops.imag(self)

    def resolve_conj(self) -> "Tensor":
        return self

    resolve_neg = resolve_conj

    def is_conj(self) -> bool:
        return False

    @property
    def mH(self) -> "Tensor":
        """The conjugate transpose of the last two dims."""
        return _ops.conj(self.mT)

    def adjoint(self) -> "Tensor":
        return self.mH

    @property
    def H(self) -> "Tensor":
        if self.ndim > 2:
            raise RuntimeError("tensor.H is only supported on matrices (2-D tensors); use .mH")
        return _ops.conj(self.t())

    def contiguous(self, memory_format=None) -> "Tensor":
        """Dense memory in `memory_format`'s order (row-major by default; tracejit/formats.py)."""
        check_memory_format(memory_format, "contiguous")
        return _ops.contiguous(self) if memory_format is None else laid_out(self, memory_format)

    def clone(self, *, memory_format=None) -> "Tensor":
        check_memory_format(memory_format, "clone")
        return _ops.clone(self, memory_format=memory_format)

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def is_contiguous(self, memory_format=None) -> bool:
        """Whether memory is dense in `memory_format`'s order (row-major by default; for
        channels_last, channels innermost, as PyTorch's strides would say)."""
        if memory_format is None or memory_format.name in ("contiguous_format", "preserve_format"):
            return self._data.flags.c_contiguous
        from .formats import dense_in_order
        return dense_in_order(self, memory_format)

    def data_ptr(self) -> int:
        return self._data.__array_interface__["data"][0] if self.device is CPU else self._data.data.ptr

    @property
    def data(self) -> "Tensor":
        # self's memory with a version counter of its own, as PyTorch's: writes through it
        # are not seen by autograd (detach() shares the counter; they are)
        t = Tensor._wrap(self._data, self.dtype, self.device)
        t._vbox = _DataVersion(self._vbox)
        if _eager._tracers_active and _eager.trace_state.tracer is not None:
            t._data_of = self   # (a capture's writes through t are writes to self)
        return t

    @data.setter
    def data(self, value: "Tensor") -> None:
        if value._data is self._data and value.dtype is self.dtype:
            return   # its own memory (``w.data *= mask`` sets it back): nothing changes
        if (_eager.trace_state.tracer is not None and value.dtype is self.dtype and value.device is self.device
                and tuple(value.shape) == tuple(self.shape)):
            # (a momentum encoder's ``p_k.data = p_k.data * m + ...``): captured as a write of
            # the new values into self's memory, which holds the same values from then on
            self.data.copy_(value.detach())
            return
        _refuse_effect("setting .data replaces a tensor's memory")
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
        if self.dtype is _dt.bfloat16:   # numpy has no bf16: ml_dtypes' view of the words
            from .bf16 import ml_bfloat16
            mdt = ml_bfloat16()
            if mdt is None:
                raise TypeError("numpy() of a bfloat16 tensor needs ml_dtypes (pip install ml_dtypes); "
                                "or call .float().numpy()")
            self._note_read()
            return self._data.view(mdt)
        self._note_read()
        return self._data

    def item(self):
        if self.numel() != 1:
            from .errors import ShapeError   # (RuntimeError as PyTorch's item, ValueError as its float)
            raise ShapeError(f"a tensor with {self.numel()} elements cannot be converted to a Python scalar")
        value = self._values().reshape(()).item()
        self._note_read(value)
        return value

    def _note_read(self, value=None) -> None:
        """Under a capture, a Python read of this concrete tensor's value (a number, or a copy
        of the values when `value` is None) is guarded: the capture holds what it read
        (jit/value_snapshot.py `TensorValueReads`)."""
        if _eager._tracers_active and _eager.trace_state.tracer is not None:
            _eager.trace_state.tracer.note_value_read(self, np.array(self._values()) if value is None else value)

    def tolist(self):
        self._note_read()
        return self._values().tolist()

    def _host(self) -> np.ndarray:
        return self._data if self.device is CPU else self._data.get()

    def _values(self) -> np.ndarray:
        """`_host`, with bf16 words as their float32 values (item, tolist, printing)."""
        if self.dtype is _dt.bfloat16:
            from .bf16 import to_float32
            return to_float32(self._data)
        return self._host()

    def __array__(self, dtype=None, copy=None):
        a = self.detach()._values()
        self._note_read()
        return a if dtype is None else a.astype(dtype)

    def __float__(self) -> float:
        return float(self.item())

    def __complex__(self) -> complex:
        return complex(self.item())

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
        if not kwargs and len(args) == 1 and type(args[0]) is _dt.DType:   # (most calls: the parsing costs more)
            return self if args[0] is self.dtype else _ops.cast(self, args[0])
        dtype = kwargs.pop("dtype", None)
        dev = kwargs.pop("device", None)
        kwargs.pop("non_blocking", None)
        fmt = kwargs.pop("memory_format", None)
        check_memory_format(fmt, "to")
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
        out = self
        if dev is not None and as_device(dev) != self.device:
            out = _ops.to_device(out, as_device(dev))
        if dtype is not None and _dt.as_dtype(dtype) is not out.dtype:
            out = _ops.cast(out, _dt.as_dtype(dtype))
        if copy and out is self:
            out = out.clone()
        if getattr(fmt, "name", "").startswith("channels_last"):
            out = laid_out(out, fmt)
        return out

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self, device=None) -> "Tensor":
        dev = as_device("cuda" if device is None else device)  # an int means cuda:<int>
        if dev.type != "cuda":
            raise ValueError(f"cuda(): expected a CUDA device, got {dev}")
        return self.to(dev)

    # (cast itself, not to(): to()'s argument parsing cost more than a small cast)
    float, double, half, bfloat16, cfloat, cdouble, int, long, short, char, byte, bool = (
        _cast_method(n, getattr(_dt, d)) for n, d in (
            ("float", "float32"), ("double", "float64"), ("half", "float16"), ("bfloat16", "bfloat16"),
            ("cfloat", "complex64"), ("cdouble", "complex128"), ("int", "int32"), ("long", "int64"),
            ("short", "int16"), ("char", "int8"), ("byte", "uint8"), ("bool", "bool_")))

    def type_as(self, other: "Tensor") -> "Tensor":
        return self.to(other.dtype)

    # ---- printing ---------------------------------------------------------------------
    def __repr__(self) -> str:
        return _tensor_repr(self)

    def __format__(self, spec: str) -> str:
        if spec and self.numel() == 1:
            return format(self.item(), spec)
        return repr(self)


class _DataVersion(list):
    """A ``.data`` alias's version counter: its own in slot 0 (autograd does not see writes
    through the alias), and each write also counts in slot 1 of the owner's counter, so a
    cache of values derived from the memory (autocast's kept weight casts) sees them."""
    __slots__ = ("owner",)

    def __init__(self, owner: list) -> None:
        super().__init__((0,))
        if len(owner) < 2:
            owner.append(0)
        self.owner = owner

    def __setitem__(self, i, v) -> None:
        list.__setitem__(self, i, v)
        self.owner[1] += 1


def _warn_non_leaf_grad() -> None:
    import warnings
    from .errors import user_stacklevel
    warnings.warn("The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its "
                  ".grad attribute won't be populated during autograd.backward(). If you indeed want "
                  "the gradient for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor.",
                  UserWarning, stacklevel=user_stacklevel())


def _same_shape(a: Tensor, b: Tensor) -> bool:
    da, db = getattr(a, "_data", None), getattr(b, "_data", None)
    if da is not None and db is not None:
        return da.shape == db.shape  # (no Size objects: this runs per leaf per backward)
    return tuple(a.shape) == tuple(b.shape)


# Class attributes of an empty class (__module__, __dict__, ...): not methods to install.
_CLASS_MACHINERY = frozenset(vars(type("_Empty", (), {})))


def _install_methods(holder: type) -> None:
    """Copy the methods defined on `holder` (a method-group class in tensor_inplace.py or
    tensor_operators.py) onto Tensor. Those modules need ``tracejit.ops``, which needs
    Tensor, so they cannot be Tensor's base classes; JAX attaches its array methods the
    same way. Subclasses (Parameter, the tracer) still override them as usual."""
    for name, value in vars(holder).items():
        if name in _CLASS_MACHINERY or (name == "__hash__" and value is None):
            continue  # (a class defining __eq__ gets __hash__ = None; Tensor hashes by id)
        if getattr(value, "__name__", None) == name:  # (not for aliases: __rand__ = __and__)
            value.__qualname__ = f"Tensor.{name}"
        setattr(Tensor, name, value)


# The tail imports that close the tensor/ops/autograd cycle (the one idiom for it, see
# ops/registry.py): ops and autograd import Tensor, defined above, at their tops. The
# method groups (tensor_inplace.py, tensor_operators.py, tensor_compat.py) need both; the
# package imports them right after this module, and they install their methods on Tensor.
from . import ops as _ops  # noqa: E402
from .ops import eager as _eager  # noqa: E402
from .ops.eager import refuse_effect as _refuse_effect  # noqa: E402
from .autograd import backward as _backward  # noqa: E402  (loaded by ops by now)
from .exactcall import with_numpy_names as _with_numpy_names  # noqa: E402
for _k, _v in list(vars(Tensor).items()):   # x.gather(axis=1, index=i), as PyTorch's methods
    if type(_v) is type(_install_methods):
        setattr(Tensor, _k, _with_numpy_names(_v, __name__, f"Tensor.{_k}"))
