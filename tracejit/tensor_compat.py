"""Tensor methods PyTorch programs call beyond the core set (tensor_operators.py,
tensor_inplace.py): forwarders to the newer ops (``x.roll(...)``, ``x.median()``,
``x.scatter(...)``), their in-place spellings (``x.scatter_(...)``, ``x.index_add_(...)``),
in-place shape changes (``x.unsqueeze_(0)``), device predicates for devices tracejit
never has (``is_xpu``, ``is_mps``: False), and memory queries (``stride``,
``storage_offset``), and the constructor ``Tensor(data)`` / ``Tensor(2, 3)``. Installed on
Tensor when the package imports this module, like the other method groups.
"""
from __future__ import annotations

import numpy as np

from . import dtypes as _dt
from . import exactcall as _exactcall
from . import ops as _ops
from .tensor import Tensor, _install_methods
from .tensor_operators import _forward
from .ops.eager import eager_layout as _eager_layout, trace_state as _trace_state
from .device import as_device
from .legacy_types import LEGACY_BY_NAME, legacy_name
from .ops.creation import _to_array, empty
from .ops.donation import donating as _donating
from .tensor_inplace import refuse_overlapping_operands as _refuse_overlaps
from .size import Size

# Methods that forward unchanged to the op of the same name in tracejit.ops
# (tensor_operators.py `_forward`, as the core set's).
_FORWARDED = """
roll rot90 unflatten tile repeat_interleave diag diagonal diag_embed trace kron tensor_split hsplit
vsplit dsplit fliplr flipud swapdims moveaxis addmm addmv addbmm baddbmm addr inner cross scatter
scatter_reduce index_add index_copy index_fill masked_select masked_scatter take put select argwhere
hardshrink asin acos atan atan2 asinh acosh atanh arcsin arccos arctan arctan2 arcsinh arccosh arctanh
ceil trunc fix round frac sinh cosh tan log2 log10 exp2 reciprocal fmod hypot lerp addcmul addcdiv
logit xlogy sinc erfc erfinv lgamma digamma rad2deg deg2rad logaddexp logaddexp2 copysign heaviside
float_power clamp_min clamp_max positive absolute sgn signbit bitwise_and bitwise_or bitwise_xor
bitwise_not logical_xor isposinf isneginf isreal median nanmedian kthvalue quantile nanquantile
mode renorm i0 frexp ldexp nanmean nansum aminmax cummax cummin logcumsumexp count_nonzero diff dist equal unique
unique_consecutive bincount histc det slogdet true_divide divide multiply subtract negative
greater greater_equal less less_equal not_equal gcd lcm fmax fmin nextafter corrcoef cov histogram igamma igammac
diagflat msort ravel vdot select_scatter slice_scatter diagonal_scatter broadcast_to bernoulli prelu
is_nonzero is_same_size is_signed get_device index_reduce bitwise_left_shift bitwise_right_shift
as_strided mvlgamma conj conj_physical angle ger
""".split()

# ... and those whose function is tracejit's own (its legacy linear algebra spellings)
_FORWARDED_TOP = """inverse logdet cholesky pinverse matrix_power stft istft matrix_exp lu lu_solve
triangular_solve cholesky_solve cholesky_inverse orgqr ormqr qr svd unsafe_chunk unsafe_split""".split()

# In-place spellings: the op's result written into the tensor (`Tensor._assign`).
_INPLACE = """
scatter index_add index_copy index_fill masked_scatter put asin acos atan atan2 asinh acosh atanh
arcsin arccos arctan ceil trunc fix round frac sinh cosh tan log2 log10 exp2 reciprocal fmod hypot
lerp addcmul addcdiv logit xlogy sinc erfc erfinv lgamma digamma rad2deg deg2rad copysign
heaviside float_power clamp_min clamp_max sgn renorm i0 ldexp nextafter bitwise_and bitwise_or bitwise_xor bitwise_not
logical_xor addmm addmv addbmm baddbmm addr cumsum cumprod tril triu hardshrink true_divide
divide multiply subtract negative square abs cos sin expm1 erf floor log log1p sigmoid tanh sign
rsqrt nan_to_num remainder floor_divide eq ne lt le gt ge greater greater_equal less less_equal
not_equal logical_and logical_or logical_not clip arccosh arcsinh arctan2 arctanh lcm gcd absolute i0
scatter_add scatter_reduce igamma igammac index_reduce bitwise_left_shift bitwise_right_shift
pow clamp relu masked_fill
""".split()

def _donates(name: str) -> bool:
    """Whether op `name`'s result is its first operand updated: its primitive takes a
    donated target (``extra["donates"]``, ops/donation.py)."""
    from .ops.registry import REGISTRY
    prim = REGISTRY.get(name)
    return prim is not None and bool(prim.extra.get("donates"))


# (PyTorch's products read all their operands before writing, and its masked_scatter_
# reads the source while writing: neither refuses operands overlapping the written tensor)
_READ_FIRST = frozenset("addmm addmv addbmm baddbmm masked_scatter".split())
# (and its indexed writes refuse an operand sharing any of the written memory, all of it too)
_INDEXED = frozenset("scatter scatter_add scatter_reduce index_add index_copy index_reduce put".split())


def _inplace(name):
    aliased = _exactcall.numpy_names(getattr(_ops, name))
    if aliased:   # ``x.scatter_(axis=0, ...)``, as PyTorch's: the op through a forwarder taking them
        op = _exactcall.with_numpy_names(getattr(_ops, name), _ops.__name__, name)
    values = name in ("masked_fill", "index_fill")   # (their 0-d value is read as a number)
    check = (lambda *a: None) if name in _READ_FIRST else _refuse_overlaps
    full = name in _INDEXED
    donates, what = _donates(name), name + "_"

    def method(self, *args, **kwargs):
        fn = op if aliased else getattr(_ops, name)
        check(what, self, (*args, *kwargs.values()), values, full)
        if donates and self._donatable(what, args, kwargs):   # the op writes self's memory itself
            return self._assign_donated(_donating(self._data, fn, self, *args, **kwargs), what)
        return self._assign(fn(self, *args, **kwargs), what)
    method.__name__ = what
    method.__qualname__ = f"Tensor.{what}"
    return method


def _reshaped_inplace(name):
    """In-place shape changes (``x.unsqueeze_(0)``): the tensor takes the result's shape,
    memory and history (the result is a view of the same memory)."""
    def method(self, *args, **kwargs):
        if _trace_state.tracer is not None:
            return _trace_state.tracer.reshape_in_place(
                self, lambda: getattr(_ops, name)(self, *args, **kwargs), name + "_")
        out = getattr(_ops, name)(self, *args, **kwargs)
        self._data = out._data
        self._vbox[0] += 1   # (a gradient that saved self must not read it reshaped)
        if out.grad_fn is not None:
            self.grad_fn, self._output_nr = out.grad_fn, out._output_nr
        return self
    method.__name__ = name + "_"
    method.__qualname__ = f"Tensor.{name}_"
    return method


class CompatMethods:
    """Holder of the remaining methods (copied onto Tensor; never instantiated)."""

    def __init__(self, *args, dtype=None, device=None, requires_grad: bool = False):
        """``Tensor(data)``, or PyTorch's legacy ``Tensor(2, 3)`` / ``Tensor(torch.Size)``:
        an uninitialized tensor of that size (``Tensor(5)`` has 5 elements, not the value 5)."""
        d = as_device(device)
        dt = dtype if dtype is not None else _dt.get_default_dtype()
        data = args[0] if len(args) == 1 else []
        if len(args) > 1 or isinstance(data, (int, Size)) and not isinstance(data, bool):
            sizes = tuple(data) if isinstance(data, Size) else args
            if not all(isinstance(s, int) and not isinstance(s, bool) for s in sizes):
                raise TypeError(f"Tensor(): expected sizes (ints) or one sequence of data, got {args!r}")
            data = empty(*sizes, dtype=dt, device=d)
        arr, dt = _to_array(data, dt, d)
        self._init(arr, dt, d)
        if requires_grad:
            self.requires_grad = True

    def type(self, dtype=None, non_blocking: bool = False):
        """No argument: the PyTorch type string ("torch.FloatTensor"); a dtype, a legacy type
        (``tracejit.FloatTensor``) or its name: this tensor converted to it."""
        if dtype is None:
            return legacy_name(self)
        if isinstance(dtype, str) and dtype in LEGACY_BY_NAME:
            dtype = LEGACY_BY_NAME[dtype]
        if isinstance(getattr(dtype, "dtype", None), _dt.DType) and hasattr(dtype, "device_type"):
            return self.to(device=dtype.device_type, dtype=dtype.dtype)
        return self.to(dtype)

    def flip(self, *dims, **kwargs):
        """``x.flip(0, 1)``, ``x.flip((0, 1))`` or ``x.flip(dims=(0, 1))``."""
        if kwargs.keys() - {"dims"} or (dims and kwargs):
            raise TypeError(f"flip() got unexpected arguments {dims} {sorted(kwargs)}; expected dims")
        return _ops.flip(self, kwargs["dims"] if kwargs else dims[0] if len(dims) == 1 else dims)

    is_xpu = is_mps = is_ipu = is_hpu = is_mtia = is_maia = is_vulkan = is_mkldnn = is_nested = is_xla = \
        is_sparse_csr = property(lambda self: False)
    is_cpu = property(lambda self: self.device.type == "cpu")
    output_nr = property(lambda self: self._output_nr)   # (which output of its grad_fn)
    volatile = False

    def dense_dim(self) -> int:
        return self.dim()

    def sparse_dim(self) -> int:
        return 0

    def is_set_to(self, tensor) -> bool:
        """Whether `tensor` views the same memory with the same size, strides and offset."""
        return (self.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
                and self.shape == tensor.shape and self.stride() == tensor.stride()
                and self.storage_offset() == tensor.storage_offset())

    def map_(self, tensor, callable):  # noqa: A002  (torch's parameter name)
        """Each element of self becomes ``callable(it, tensor's broadcast element)``."""
        a = self.detach().numpy()
        b = np.broadcast_to(tensor.detach().numpy(), a.shape)
        return self.copy_(Tensor(np.frompyfunc(callable, 2, 1)(a, b).astype(a.dtype), dtype=self.dtype))

    def resize(self, *sizes):
        """The deprecated out-of-place resize: a view of another shape with as many elements."""
        shape = Size(sizes[0] if len(sizes) == 1 and not isinstance(sizes[0], int) else sizes)
        if shape.numel() != self.numel():
            raise RuntimeError(f"requested resize to {'x'.join(map(str, shape))} ({shape.numel()} elements in "
                               f"total), but the given tensor has a size of {'x'.join(map(str, self.shape))} "
                               f"({self.numel()} elements). autograd's resize can only change the shape of a "
                               f"given tensor, while preserving the number of elements.")
        return self.view(shape)

    def resize_as(self, tensor):
        return self.resize(tensor.shape)
    layout = property(lambda self: _strided())

    def stride(self, dim=None):
        """Strides in elements, as PyTorch counts them."""
        item, data = self.dtype.itemsize, _eager_layout(self)   # (a tracer's: as it would be eagerly)
        if data is None:
            raise TypeError("stride() of a tensor of symbolic size inside a compiled function")
        st = tuple(int(s) // item for s in data.strides)
        if data.size == 0 and not any(st):
            # numpy gives an empty array zero strides; PyTorch's empty tensors have row-major
            # ones, counting a dim of size 0 as 1
            st, n = [], 1
            for size in reversed(data.shape):
                st.append(n)
                n *= max(int(size), 1)
            st = tuple(reversed(st))
        return st if dim is None else st[dim]

    def storage_offset(self) -> int:
        base = getattr(self, "_base", None)
        if base is None:
            return 0
        from .autograd.views import _address
        return (_address(self._data) - _address(base._data)) // self.dtype.itemsize

    def untyped_storage(self):
        """The memory behind this tensor (`tracejit.storage.UntypedStorage`)."""
        from .storage import UntypedStorage
        return UntypedStorage(self)

    def storage(self):
        """The memory behind this tensor counted in its elements (`tracejit.storage.TypedStorage`)."""
        from .storage import TypedStorage
        return TypedStorage(self)

    def const_data_ptr(self) -> int:
        return self.data_ptr()

    def dim_order(self) -> tuple:
        """The dims from outermost to innermost in memory (by stride, ties in dim order)."""
        st = self.stride()
        return tuple(sorted(range(self.ndim), key=lambda d: -st[d]))

    def record_stream(self, stream) -> None:
        """Nothing to record: tracejit runs no asynchronous streams."""

    def set_(self, source=None):
        """This tensor made `source`'s memory (shared: writes to either show in both), its
        shape and dtype; with no source, an empty tensor."""
        from .autograd.grad_mode import no_grad
        if source is None:
            source = _ops.empty(0, dtype=self.dtype, device=self.device)
        if not isinstance(source, Tensor):
            raise TypeError(f"set_(): source must be a Tensor, got {type(source).__name__}")
        with no_grad():
            self.data = source
        self._vbox[0] += 1
        return self

    def as_subclass(self, cls):
        """This tensor's values and autograd history as an instance of `cls`, a subclass
        of Tensor."""
        if not (isinstance(cls, type) and issubclass(cls, Tensor)):
            raise TypeError(f"as_subclass(): cls must be a subclass of Tensor, got {cls!r}")
        out = self.view_as(self)
        out.__class__ = cls
        return out

    def nonzero_static(self, *, size: int, fill_value: int = -1):
        """``nonzero()``'s rows, truncated or padded with `fill_value` to `size` rows."""
        nz = _ops.nonzero(self)
        if nz.shape[0] >= size:
            return nz[:size]
        pad = _ops.full((size - nz.shape[0], self.ndim), fill_value, dtype=nz.dtype, device=nz.device)
        return _ops.cat([nz, pad])

    def ndimension(self) -> int:
        return self.ndim

    def new(self, *args):
        """The legacy constructor: sizes -> uninitialized, data -> a tensor of this dtype; a
        tensor of this dtype -> an alias of it, as PyTorch's (fairseq's ``x.new(x)``)."""
        if len(args) == 1 and isinstance(args[0], Tensor):
            if args[0].dtype is not self.dtype:
                raise TypeError(f"new(): expected a tensor of this tensor's dtype {self.dtype}, "
                                f"got {args[0].dtype}")
            return args[0].view(args[0].shape)
        if len(args) == 1 and not isinstance(args[0], int):
            return _ops.tensor(args[0], dtype=self.dtype, device=self.device)
        return _ops.empty(*(args or (0,)), dtype=self.dtype, device=self.device)

    def to_sparse(self, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
        """This tensor's nonzero entries as a sparse COO tensor (tracejit/sparse.py)."""
        from .sparse import to_sparse
        return to_sparse(self, sparse_dim)

    to_sparse_coo = to_sparse

    def to_dense(self, dtype=None, *, masked_grad=None):
        return self if dtype is None else self.to(dtype)

    def pin_memory(self, device=None):
        return self

    def is_pinned(self, device=None) -> bool:
        return False

    def share_memory_(self):
        return self

    def is_shared(self) -> bool:
        return False

    def random_(self, from_=0, to=None, *, generator=None):
        """Integers drawn uniformly from [from, to) (to: the dtype's range when None)."""
        if to is None:
            from_, to = (0, from_) if from_ else (0, 2 ** 24 if self.dtype.is_floating_point
                                                  else int(np.iinfo(self.dtype.np).max))
        with _ops.drawing_from(generator, "random_"):
            drawn = _ops.randint(int(from_), int(to), tuple(self.shape), device=self.device)
        return self._assign(_ops.cast(drawn, self.dtype), "random_")

    def exponential_(self, lambd: float = 1.0, *, generator=None):
        with _ops.drawing_from(generator, "exponential_"):
            u = _ops.rand(*tuple(self.shape), dtype=self.dtype, device=self.device)
        return self._assign(-_ops.log1p(-u) / lambd, "exponential_")

    def geometric_(self, p: float, *, generator=None):
        with _ops.drawing_from(generator, "geometric_"):
            u = _ops.rand(*tuple(self.shape), dtype=_dt.float64, device=self.device)
        out = _ops.ceil(_ops.log1p(-u) / float(np.log1p(-p)))
        return self._assign(_ops.cast(out, self.dtype), "geometric_")

    def cauchy_(self, median: float = 0.0, sigma: float = 1.0, *, generator=None):
        with _ops.drawing_from(generator, "cauchy_"):
            u = _ops.rand(*tuple(self.shape), dtype=self.dtype, device=self.device)
        return self._assign(median + sigma * _ops.tan((u - 0.5) * np.pi), "cauchy_")

    def log_normal_(self, mean: float = 1.0, std: float = 2.0, *, generator=None):
        with _ops.drawing_from(generator, "log_normal_"):
            z = _ops.randn(*tuple(self.shape), dtype=self.dtype, device=self.device)
        return self._assign(_ops.exp(z * std + mean), "log_normal_")

    def bernoulli_(self, p=0.5, *, generator=None):
        with _ops.drawing_from(generator, "bernoulli_"):
            u = _ops.rand(*tuple(self.shape), dtype=_dt.float64, device=self.device)
        return self._assign(_ops.cast(u < p, self.dtype), "bernoulli_")

    def apply_(self, callable):
        """Each element replaced by ``callable(element)``, called in Python on the element's
        number (CPU tensors only, as in PyTorch)."""
        if self.device.type != "cpu":
            raise TypeError(f"apply_ is only implemented on CPU tensors, not {self.device.type}")
        values = [callable(v) for v in _ops.reshape(self, (-1,)).tolist()]
        out = np.array(values, dtype=self.dtype.np).reshape(tuple(self.shape))
        return self._assign(_ops.tensor(out), "apply_")

    def unfold(self, dimension: int, size: int, step: int):
        """Every window of `size` elements `step` apart along `dimension`, as a new last dim
        (a view: writes go to `self`, as in PyTorch)."""
        return _ops.rearrange.unfold_windows(self, dimension, size, step)

    itemsize = property(lambda self: self.dtype.itemsize)
    nbytes = property(lambda self: self.numel() * self.dtype.itemsize)

    def is_inference(self) -> bool:
        """Made inside ``inference_mode`` (a view: its base was)."""
        base = self._base
        return (self if base is None else base)._inference

    def module_load(self, other, assign: bool = False):
        """What ``load_state_dict`` loads into this parameter or buffer from `other`: `other`
        itself with assign, else this tensor holding a copy of its values (detached)."""
        if not isinstance(other, Tensor):
            raise TypeError(f"module_load: expected a Tensor to load, got {type(other).__name__}")
        if assign:
            return other.detach()
        from .autograd.grad_mode import no_grad
        with no_grad():
            return self.copy_(other).detach()

    def is_neg(self) -> bool:
        return False

    def fill_diagonal_(self, fill_value, wrap: bool = False):
        """Write fill_value on the main diagonal (a 2-D tensor, or one whose dims are all
        equal); with wrap, a tall matrix's diagonal starts again every (cols + 1) rows."""
        if self.ndim < 2:
            raise ValueError(f"fill_diagonal_: expected a tensor of at least 2 dims, got {self.ndim}")
        shape = tuple(self.shape)
        if self.ndim > 2 and len(set(shape)) != 1:
            raise ValueError(f"fill_diagonal_: all dims must be equal above 2 dims, got shape {shape}")
        # the diagonal's flat positions are the multiples of one step (arange, not a list
        # of positions: sizes may be symbolic under a dynamic capture)
        pos = _ops.arange(self.numel(), device=self.device)
        if self.ndim == 2:
            cols = shape[1]
            mask = _ops.remainder(pos, cols + 1) == 0
            if not wrap:   # a tall matrix's diagonal ends at row cols
                mask = mask & (pos < cols * cols)
        else:
            n = shape[0]
            mask = _ops.remainder(pos, sum(n ** k for k in range(self.ndim))) == 0
        out = _ops.masked_fill(_ops.reshape(self, (-1,)), mask, fill_value)
        return self._assign(_ops.reshape(out, shape), "fill_diagonal_")

    def resize_(self, *sizes, memory_format=None):
        """This tensor with a new shape: the first elements kept in order, new ones zero."""
        shape = tuple(sizes[0]) if len(sizes) == 1 and not isinstance(sizes[0], int) else tuple(sizes)
        if self.requires_grad:
            raise RuntimeError("resize_: cannot resize a tensor that requires grad; use reshape or "
                               "a new tensor")
        if _trace_state.tracer is not None and tuple(self.shape) != shape:
            return _trace_state.tracer.reshape_in_place(self, lambda: self._resized(shape), "resize_")
        self._data = self._resized(shape)._data
        return self

    def _resized(self, shape: tuple):
        """resize_'s new value: the first elements kept in order, new ones zero."""
        n = int(np.prod(shape)) if shape else 1
        flat = _ops.reshape(self.detach(), (-1,))
        have = flat.shape[0]
        if n > have:
            flat = _ops.cat([flat, _ops.zeros(n - have, dtype=self.dtype, device=self.device)])
        return _ops.contiguous(_ops.reshape(flat[:n], shape))

    def resize_as_(self, other, memory_format=None):
        return self.resize_(tuple(other.shape))

    def sum_to_size(self, *size):
        """The sum over the dims broadcasting added: this tensor reduced to `size`."""
        target = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else tuple(size)
        from .shapes import broadcast_shapes
        if broadcast_shapes("sum_to_size", target, tuple(self.shape)) != tuple(self.shape):
            raise ValueError(f"sum_to_size: size {target} is not expandable to shape {tuple(self.shape)}")
        lead = self.ndim - len(target)
        out = _ops.sum(self, tuple(range(lead))) if lead else self
        dims = tuple(i for i, t in enumerate(target) if t == 1 and out.shape[i] != 1)
        return _ops.sum(out, dims, keepdim=True) if dims else out

    def split(self, split_size, dim: int = 0):
        """``torch.split`` of this tensor; the method's keyword is ``split_size``, as in PyTorch
        (``x.split(split_size=[d, d], dim=-1)``), the function's ``split_size_or_sections``."""
        return _ops.split(self, split_size, dim)

    def split_with_sizes(self, split_sizes, dim: int = 0):
        return _ops.split(self, list(split_sizes), dim)

    def new_empty_strided(self, size, stride, *, dtype=None, device=None, requires_grad: bool = False):
        return _ops.empty_strided(size, stride, dtype=dtype or self.dtype, device=device or self.device,
                                  requires_grad=requires_grad)

    def narrow_copy(self, dim: int, start: int, length: int):
        return _ops.narrow(self, dim, start, length).clone()

    def index_put(self, indices, values, accumulate: bool = False):
        return _ops.index_put(self, tuple(indices), values, accumulate)

    def index_put_(self, indices, values, accumulate: bool = False):
        indices = tuple(indices)
        _refuse_overlaps("index_put_", self, (indices, values), full=True)
        if self._donatable("index_put_", (values, *indices), {}):   # (as ``x[i] = v``)
            return self._assign_donated(_donating(self._data, _ops.index_put, self, indices, values,
                                                  accumulate), "index_put_")
        return self._assign(_ops.index_put(self, indices, values, accumulate), "index_put_")

    def mvlgamma_(self, p: int):
        return self._assign(self.mvlgamma(p), "mvlgamma_")

    def polygamma(self, n: int):
        return _ops.polygamma(n, self)

    def polygamma_(self, n: int):
        return self._assign(_ops.polygamma(n, self), "polygamma_")


def _strided():
    from .formats import strided
    return strided


_install_methods(CompatMethods)

for _n in _FORWARDED:
    if not hasattr(Tensor, _n):
        setattr(Tensor, _n, _forward(_n))
for _n in _FORWARDED_TOP:
    if not hasattr(Tensor, _n):
        setattr(Tensor, _n, _forward(_n, top=True))
for _n in _INPLACE:
    if not hasattr(Tensor, _n + "_") and hasattr(_ops, _n):
        setattr(Tensor, _n + "_", _inplace(_n))
# The augmented assignments as PyTorch's (in place), not Python's fallback ``x = x // y``
# (a new tensor: views and other names of x kept the old values); here, where every one's
# in-place method exists
for _op, _n in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "div"), ("floordiv", "floor_divide"),
                ("mod", "remainder"), ("pow", "pow"), ("and", "bitwise_and"), ("or", "bitwise_or"),
                ("xor", "bitwise_xor"), ("lshift", "bitwise_left_shift"), ("rshift", "bitwise_right_shift")):
    setattr(Tensor, f"__i{_op}__", getattr(Tensor, _n + "_"))
for _n in ("unsqueeze", "squeeze", "t", "transpose", "swapdims", "swapaxes", "as_strided"):
    if not hasattr(Tensor, _n + "_") and hasattr(_ops, _n):
        setattr(Tensor, _n + "_", _reshaped_inplace(_n))
del _n, _op


def top_level_inplace() -> dict:
    """``torch.abs_(x)`` and the other in-place functions of the torch namespace: each
    calls the tensor's method of the same name."""
    def make(name):
        def fn(input, *args, **kwargs):
            return getattr(input, name)(*args, **kwargs)
        fn.__name__ = fn.__qualname__ = name
        return fn
    names = [n + "_" for n in _INPLACE] + ["exp_", "sqrt_", "neg_", "relu_", "zero_", "fill_", "clamp_",
                                          "clamp_min_", "clamp_max_", "index_put_", "ldexp_", "i0_"]
    return {n: make(n) for n in names if hasattr(Tensor, n)}


def foreach(name: str):
    """``torch._foreach_<op>(tensors, *args)`` (timm's and ema-pytorch's weight EMA:
    ``_foreach_lerp_(ema, params, 1 - decay)``): the tensor method `op` on each tensor of
    the list, a list argument zipped with it, any other repeated; a list of the results
    (for the in-place forms, the tensors given), as PyTorch's. None for a name that is
    not such a method."""
    op = name[len("_foreach_"):]
    if not name.startswith("_foreach_") or not hasattr(Tensor, op):
        return None

    def fn(tensors, *args, **kwargs):
        lists = [a if isinstance(a, (list, tuple)) else [a] * len(tensors) for a in args]
        return [getattr(t, op)(*xs, **kwargs) for t, *xs in zip(tensors, *lists)]
    fn.__name__ = fn.__qualname__ = name
    return fn
