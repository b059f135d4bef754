"""Tensor creation: tensor/as_tensor/from_numpy, zeros/ones/full/empty/arange/linspace/eye, *_like.

``full`` (and so zeros/ones) and ``arange`` are primitives so that code creating
tensors inside a traced function records an op (whose shape may be symbolic)
instead of freezing a constant.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .. import bf16 as _bf16
from .. import dtypes as _dt
from ..device import CPU, array_module, as_device
from ..errors import ArgumentError, ShapeError
from ..formats import check_layout, check_memory_format, made_in_order, memory_order
from ..tensor import Tensor
from .registry import Aval, defprim
from .eager import bind, trace_hooks, trace_state
from .shape_params import as_size, size_arg

__all__ = ["tensor", "as_tensor", "from_numpy", "from_dlpack", "zeros", "ones", "full", "empty",
           "arange", "linspace", "eye", "zeros_like", "ones_like", "full_like", "empty_like",
           "scalar_tensor"]


def _infer_dtype(data, arr) -> "_dt.DType":
    """PyTorch's inference: bools -> bool, ints -> int64, floats -> default float; numpy
    arrays and numpy scalars (np.float64(1.5)) keep their dtype. `arr` is data as an array."""
    keep = isinstance(data, (np.ndarray, np.generic)) or not isinstance(data, (list, tuple, int, float, bool, complex))
    kind = arr.dtype.kind
    if kind == "b":
        return _dt.bool_
    if kind in "iu":
        return _dt.as_dtype(arr.dtype) if keep else _dt.int64
    if kind == "f":
        return _dt.as_dtype(arr.dtype) if keep else _dt.get_default_dtype()
    if kind == "c":
        return _dt.as_dtype(arr.dtype) if keep else _dt.get_default_dtype().to_complex()
    if arr.dtype.name == "bfloat16":  # ml_dtypes' (kind "V"; asked last: the name costs 0.4 us)
        return _dt.bfloat16
    raise TypeError(f"can't make a tensor from data of type {type(data).__name__} (numpy dtype {arr.dtype})")


def _untensor(x):
    """Nested lists that may hold Tensors -> nested lists of numbers."""
    if isinstance(x, Tensor):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [_untensor(i) for i in x]
    return x


def _to_array(data, dtype, dev, copy=True):
    if isinstance(data, Tensor):
        arr = data._host() if dev is CPU else data._data
        dt = _dt.as_dtype(dtype) if dtype is not None else data.dtype
    else:
        if isinstance(data, (list, tuple)) and _holds_tensor(data):
            data = _untensor(data)
        if hasattr(data, "__cuda_array_interface__") or type(data).__module__.startswith("cupy"):
            arr = data
        else:
            try:
                arr = np.asarray(data)
            except ValueError:
                raise ValueError("can't make a tensor from ragged nested sequences (every "
                                 "sub-list at one depth must have the same length)") from None
            if arr.dtype == object:
                big = [x for x in (_flat(data) if isinstance(data, (list, tuple)) else [data])
                       if isinstance(x, int) and not -2 ** 63 <= x < 2 ** 64]
                if big:
                    raise OverflowError(f"tensor: value {big[0]} does not fit in a 64-bit integer")
                raise TypeError("can't make a tensor from ragged or non-numeric data")
        dt = _dt.as_dtype(dtype) if dtype is not None else _infer_dtype(data, arr)
        if dtype is not None and not isinstance(data, (np.ndarray, np.generic)) and arr is not data:
            _check_fits(arr, dt)
    xp = array_module(dev)
    if dt is _dt.bfloat16:   # numbers round to bf16 words; bf16 words (or ml_dtypes') are kept
        if isinstance(data, Tensor) and data.dtype is dt:
            pass
        elif arr.dtype.name == "bfloat16":  # ml_dtypes' array: the same words
            arr = arr.view(_bf16.STORAGE)
        else:
            arr = _bf16.to_bfloat16(np.asarray(arr, dtype=np.float32))
    arr = xp.array(arr, dtype=dt.np, copy=copy) if copy else xp.asarray(arr, dtype=dt.np)
    return arr, dt


def _check_fits(arr, dt) -> None:
    """Python numbers that the integer dtype cannot hold raise (PyTorch does; numpy wraps
    ``2**40`` to 0 in int32). numpy arrays keep numpy's cast, as in ``torch.tensor``."""
    if dt.is_floating_point or dt.is_complex or dt.is_bool or arr.size == 0 or arr.dtype.kind not in "iuf":
        return
    info = np.iinfo(dt.np)
    lo, hi = arr.min(), arr.max()
    if lo < info.min or hi > info.max or (arr.dtype.kind == "f" and not np.isfinite(arr).all()):
        bad = lo if lo < info.min else hi
        raise OverflowError(f"tensor: value {bad} cannot be converted to {dt.name} without overflow "
                            f"(range [{info.min}, {info.max}])")


_NUMBERS = frozenset((int, float, bool, complex))


def _holds_tensor(x) -> bool:
    """Whether nested lists `x` hold a Tensor. A list of plain numbers is told by its set of
    types (a pass in C: a text's 35 token ids took 0.1 ms walked element by element)."""
    if _NUMBERS.issuperset(map(type, x)):
        return False
    return any(isinstance(i, Tensor) or (isinstance(i, (list, tuple)) and _holds_tensor(i)) for i in x)


def _flat(x):
    for i in x:
        if isinstance(i, (list, tuple)):
            yield from _flat(i)
        else:
            yield i


def tensor(data, *, dtype=None, device=None, requires_grad: bool = False, pin_memory: bool = False):
    """A new tensor holding a copy of `data` (nested lists, numbers, arrays)."""
    dev = as_device(device)
    arr, dt = _to_array(data, dtype, dev, copy=True)
    return _requiring(Tensor._wrap(arr, dt, dev), requires_grad)


def _requiring(t, requires_grad: bool):
    """`t`, set to require grad when `requires_grad` (a factory's argument)."""
    if requires_grad:
        t.requires_grad = True
    return t


def as_tensor(data, dtype=None, device=None):
    """Like tensor() but shares memory with a numpy array (or returns a Tensor) when it can."""
    if isinstance(data, Tensor):
        var = getattr(data, "_var", None)
        if var is not None and var.aval.weak:   # (a compiled function's number argument)
            return full((), data, dtype=dtype, device=device)
        return data.to(device=device if device is not None else data.device,
                       dtype=dtype if dtype is not None else data.dtype)
    dev = as_device(device)
    arr, dt = _to_array(data, dtype, dev, copy=False)
    return Tensor._wrap(arr, dt, dev)


def from_numpy(a: np.ndarray):
    """A tensor sharing memory with `a`."""
    if not isinstance(a, np.ndarray):
        if type(a).__name__ == "ArrayArg":   # a numpy argument of a capture (jit/numpy_args.py)
            return a.detach()
        raise TypeError(f"from_numpy expects a numpy.ndarray, got {type(a).__name__}")
    return Tensor._wrap(a, _dt.as_dtype(a.dtype), CPU)


def from_dlpack(obj):
    if hasattr(obj, "__dlpack_device__") and obj.__dlpack_device__()[0] != 1:  # not kDLCPU
        cp = array_module(as_device("cuda"))
        arr = cp.from_dlpack(obj)
        return Tensor._wrap(arr, _dt.as_dtype(arr.dtype), as_device(f"cuda:{arr.device.id}"))
    arr = np.from_dlpack(obj)
    return Tensor._wrap(arr, _dt.as_dtype(arr.dtype), CPU)


def _size(size, keyword=None):
    if keyword is not None:   # `zeros(size=(2, 3))`, as PyTorch's factories take it
        if size:
            raise TypeError(f"got multiple values for argument 'size': {size} and size={keyword!r}")
        size = (keyword,)
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    out = []
    for d in size:
        if type(d) is int and d >= 0:  # the common case, without the ABC checks below
            out.append(d)
            continue
        if getattr(d, "_trace", None) is not None:   # a traced int argument: maybe a Sym
            d = trace_hooks.size_of(d)
        d = as_size(d)
        if isinstance(d, bool) or not isinstance(d, (numbers.Integral,)) and not hasattr(d, "terms"):
            raise TypeError(f"size must be a sequence of ints, got {d!r}")
        if isinstance(d, numbers.Integral):
            if d < 0:
                raise ShapeError(f"negative dimension {d} in size {tuple(size)}")
            d = int(d)
        out.append(d)
    return tuple(out)


def _full_impl(xp, shape, value, dtype, device):
    if dtype is _dt.bfloat16:
        return _bf16.to_bfloat16(xp.full(shape, value, dtype=np.float32))
    if type(value) in (int, float, bool) and value == 0 and not (type(value) is float and math.copysign(1.0, value) < 0):
        # zeros come from calloc: fresh zero pages, not a pass writing every element (the
        # gradient of a slice is mostly zeros of the whole input's size)
        return xp.zeros(shape, dtype=dtype.np)
    return xp.full(shape, value, dtype=dtype.np)


FULL = defprim("full", _full_impl, lambda shape, value, dtype, device: Aval(shape, dtype, device),
               kind="creation")


def full(size, fill_value, *, dtype=None, device=None, requires_grad: bool = False,
         layout=None, pin_memory: bool = False):
    if layout is not None:
        check_layout(layout, "full")
    size = _size((size,) if isinstance(size, int) else tuple(size))
    dtype = _dt.scalar_dtype(fill_value) if dtype is None else _dt.as_dtype(dtype)
    fill_value = _dt.number_as(dtype, fill_value, "full")
    return _requiring(_bind_creation(FULL, shape=size, value=fill_value, dtype=dtype, device=as_device(device)),
                      requires_grad)


def _bind_creation(prim, **params):
    if trace_state.tracer is not None:
        return bind(prim, **params)
    dev = params["device"]
    arr = prim.impl(np if dev is CPU else array_module(dev), **params)
    return Tensor._wrap(arr, params["dtype"], dev)


def zeros(*dims, size=None, dtype=None, device=None, requires_grad: bool = False, layout=None,
          pin_memory: bool = False):
    if layout is not None:
        check_layout(layout, "zeros")
    shape = _size(dims, size)
    if dtype is None:
        dtype = _dt._default_float
    if ((device is None or device is CPU) and type(dtype) is _dt.DType and dtype is not _dt.bfloat16
            and trace_state.tracer is None):
        # (`full`'s CPU zeros without its second normalization and dispatch: most VJPs that
        # scatter into an input's shape start here, ~1.5 us of a small backward node)
        t = Tensor._wrap(np.zeros(shape, dtype.np), dtype, CPU)
        if requires_grad:
            t.requires_grad = True
        return t
    return full(shape, 0, dtype=dtype, device=device, requires_grad=requires_grad)


def ones(*dims, size=None, dtype=None, device=None, requires_grad: bool = False, layout=None,
         pin_memory: bool = False):
    check_layout(layout, "ones")
    return full(_size(dims, size), 1, dtype=dtype or _dt.get_default_dtype(), device=device, requires_grad=requires_grad)


def empty(*dims, size=None, dtype=None, device=None, requires_grad: bool = False,
          layout=None, pin_memory: bool = False, memory_format=None):
    check_memory_format(memory_format, "empty")
    check_layout(layout, "empty")
    return zeros(_size(dims, size), dtype=dtype, device=device, requires_grad=requires_grad)


def like(a, make, memory_format=None, layout=None, op: str = "*_like", requires_grad: bool = False):
    """``make(shape)`` (a row-major tensor) for a tensor shaped and laid out like `a` under
    `memory_format` (`formats.memory_order`: by default a's own dim order, as PyTorch's
    preserve_format), a leaf requiring grad where asked."""
    check_layout(layout, op)
    out = made_in_order(make, tuple(a.shape), memory_order(a, memory_format, op))
    if requires_grad:
        out.requires_grad_()
    return out


def _filled_like(a, fill_value, dtype, device, requires_grad, memory_format, layout, op):
    data = a._data
    if (type(data) is np.ndarray and data.flags.c_contiguous and device is None and memory_format is None
            and layout is None and trace_state.tracer is None):
        # (a row-major CPU tensor's like, the common case: `full`'s impl at once, without
        # the layout question and the size and dtype normalizations, ~5 us of 7)
        dt = a.dtype if dtype is None else _dt.as_dtype(dtype)
        if type(dt) is _dt.DType and dt is not _dt.bfloat16 and a.device is CPU:
            out = Tensor._wrap(_full_impl(np, data.shape, _dt.number_as(dt, fill_value, op), dt, CPU), dt, CPU)
            if requires_grad:
                out.requires_grad_()
            return out
    kw = dict(dtype=dtype or a.dtype, device=device or a.device)
    return like(a, lambda shape: full(shape, fill_value, **kw), memory_format, layout, op, requires_grad)


def zeros_like(a, *, dtype=None, device=None, requires_grad: bool = False, memory_format=None,
               layout=None, pin_memory: bool = False):
    return _filled_like(a, 0, dtype, device, requires_grad, memory_format, layout, "zeros_like")


def ones_like(a, *, dtype=None, device=None, requires_grad: bool = False, memory_format=None,
              layout=None, pin_memory: bool = False):
    return _filled_like(a, 1, dtype, device, requires_grad, memory_format, layout, "ones_like")


def empty_like(a, *, dtype=None, device=None, requires_grad: bool = False, memory_format=None,
               layout=None, pin_memory: bool = False):
    return _filled_like(a, 0, dtype, device, requires_grad, memory_format, layout, "empty_like")


def full_like(a, fill_value, *, dtype=None, device=None, requires_grad: bool = False, memory_format=None,
              layout=None, pin_memory: bool = False):
    return _filled_like(a, fill_value, dtype, device, requires_grad, memory_format, layout, "full_like")


def scalar_tensor(v, *, dtype=None, device=None):
    """A 0-d tensor of `v`, in the default float dtype unless `dtype` says otherwise (as
    PyTorch's, whatever the type of `v`)."""
    return full((), v, dtype=dtype if dtype is not None else _dt.get_default_dtype(), device=device)


def _arange_len(start, end, step):
    if hasattr(end, "terms"):
        return end  # symbolic: only arange(0, n, 1) stays symbolic (see arange)
    if all(isinstance(v, (int, np.integer)) for v in (start, end, step)):
        return max(0, -(-(end - start) // step))
    return max(0, int(np.ceil((end - start) / step)))  # what numpy computes for floats


def _arange_impl(xp, start, end, step, dtype, device):
    if dtype in (_dt.float32, _dt.float16, _dt.bfloat16):
        # PyTorch computes start + i * step in double and rounds once to the dtype (numpy
        # would step in the dtype: arange(0, 1, 0.3)[3] one float32 ulp off)
        out = xp.arange(start, end, step, dtype=np.float64)
        return _bf16.to_bfloat16(out) if dtype is _dt.bfloat16 else out.astype(dtype.np)
    return xp.arange(start, end, step, dtype=dtype.np)


ARANGE = defprim("arange", _arange_impl,
                 lambda start, end, step, dtype, device: Aval((_arange_len(start, end, step),), dtype, device),
                 kind="creation")


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad: bool = False,
           layout=None, pin_memory: bool = False):
    check_layout(layout, "arange")
    if end is None:
        start, end = 0, start
    # (an eager 0-d tensor bound counts as its number: arange(tensor(3)) is int64, as PyTorch's)
    start, end, step = (v.item() if isinstance(v, Tensor) and getattr(v, "_trace", None) is None else v
                        for v in (start, end, step))
    if (type(end) is not int or type(start) is not int) and trace_state.tracer is not None:
        # (a traced int argument: a Sym where it may be one, as in zeros(n))
        start, end, step = (trace_hooks.size_of(v) if getattr(v, "_trace", None) is not None and v.dtype.is_integer
                            else v for v in (start, end, step))
    if dtype is None:
        dtype = _dt.int64 if all(isinstance(v, (int, np.integer)) or hasattr(v, "terms")
                                 for v in (start, end, step)) else _dt.get_default_dtype()
    dtype = _dt.as_dtype(dtype)
    if not any(hasattr(v, "terms") for v in (start, end, step)) and (end - start) * step < 0:
        raise ArgumentError(f"arange: upper bound and lower bound inconsistent with step sign "
                            f"(start {start}, end {end}, step {step})")
    if dtype.is_integer and not any(hasattr(v, "terms") for v in (start, end, step)):
        # PyTorch truncates an integer arange's start and step (int64: the end too) to
        # integers; the narrower types count ceil((end - start) / step) from the given values
        n = None if dtype is _dt.int64 or step == 0 else max(0, math.ceil((end - start) / step))
        start, end, step = int(start), int(end), int(step)
        if n is not None:
            end = start + n * step
    if step == 0:
        raise ArgumentError("arange: step must be nonzero")
    if hasattr(start, "terms") or (hasattr(end, "terms") and (start != 0 or step != 1)):
        shifted = _shifted_arange(start, end, step, dtype, device)
        if shifted is not None:
            return _requiring(shifted, requires_grad)
        start, end = int(start), int(end)
    if hasattr(end, "terms") and not (start == 0 and step == 1):
        end = int(end)
    t = _bind_creation(ARANGE, start=start, end=end, step=step, dtype=dtype, device=as_device(device))
    return _requiring(t, requires_grad)


def _shifted_arange(start, end, step, dtype, device):
    """``arange(start, end)`` with a symbolic bound while tracing (a KV cache's positions,
    ``arange(past, past + t)``, a reversal's ``arange(n - 1, -1, -1)``) as
    ``arange(0, count) * step + start``: one capture serves every offset. None for a
    non-integer bound or step: the caller specializes."""
    if not isinstance(step, (int, np.integer)) or not all(
            isinstance(v, (int, np.integer)) or hasattr(v, "terms") for v in (start, end)):
        return None
    span, step = end - start, int(step)
    if hasattr(span, "terms"):   # (its count: ceil(span / step), of a size whose sign is step's)
        count = -((-span) // step) if step > 0 else -(span // -step)
        base = _bind_creation(ARANGE, start=0, end=count, step=1, dtype=_dt.int64, device=as_device(device))
        base = base if step == 1 else base * step
    else:
        n = max(0, -(-span // step))
        base = _bind_creation(ARANGE, start=0, end=n * step, step=step, dtype=_dt.int64,
                              device=as_device(device))
    out = base + start
    return out if dtype is _dt.int64 else out.to(dtype)


def count_arg(op: str, v, rule: str) -> int:
    """A count argument (steps, rows) as an int: a negative one raises PyTorch's error
    (`rule`: its words, ``"n must be greater or equal to 0"``)."""
    v = int(v)
    if v < 0:
        raise ArgumentError(f"{op}: {rule}, got {v}")
    return v


_STEPS = "number of steps must be non-negative"   # (linspace's and logspace's words)


def linspace(start, end, steps: int, *, dtype=None, device=None, requires_grad: bool = False,
             layout=None, pin_memory: bool = False):
    check_layout(layout, "linspace")
    dt = _dt.as_dtype(dtype) if dtype else _dt.get_default_dtype()
    if not dtype and complex_bound(start, end):
        dt = dt.to_complex()   # (as PyTorch's: the default dtype's complex form)
    if dt.is_integer:   # (PyTorch's: the bounds in the dtype first, truncated toward zero)
        start, end = int(start), int(end)
    steps = size_arg(steps)
    if hasattr(steps, "terms") and dt.is_floating_point and all(
            type(v) in (int, float) for v in (start, end)):
        return _requiring(_linspace_of_a_size(float(start), float(end), steps, dt, device), requires_grad)
    return tensor(np.linspace(start, end, count_arg("linspace", steps, _STEPS)), dtype=dt,
                  device=device, requires_grad=requires_grad)


def _linspace_of_a_size(start: float, end: float, steps, dt, device):
    """``linspace`` of a symbolic count (``x.shape[-1]``, a changing int argument) while
    tracing: numpy's formula (`linspace` eagerly) from an arange, so one capture serves
    every count where a constant would fix it."""
    from .shape import cat
    head = arange(steps - 1, dtype=_dt.float64, device=device) * ((end - start) / (steps - 1)) + start
    last = full((1,), end, dtype=_dt.float64, device=device)   # (`end` exactly, as numpy's)
    return cat([head, last]).to(dt)


def complex_bound(*bounds) -> bool:
    """Whether a bound of linspace or logspace is complex (a number or a tensor)."""
    return any(isinstance(v, complex) or isinstance(v, Tensor) and v.dtype.is_complex for v in bounds)


def eye(n: int, m: int | None = None, *, dtype=None, device=None, requires_grad: bool = False,
        layout=None, pin_memory: bool = False):
    check_layout(layout, "eye")
    dt = _dt.as_dtype(dtype) if dtype else _dt.get_default_dtype()
    n, m = size_arg(n), (None if m is None else size_arg(m))
    n = n if hasattr(n, "terms") else count_arg("eye", n, "n must be greater or equal to 0")
    m = m if m is None or hasattr(m, "terms") else count_arg("eye", m, "m must be greater or equal to 0")
    if hasattr(n, "terms") or hasattr(m, "terms"):
        # (a symbolic size while tracing, a batch's ``eye(x.shape[0])``: a comparison of two
        # aranges, so one capture serves every size, where a constant would fix it)
        rows, cols = arange(n, device=device), arange(n if m is None else m, device=device)
        return _requiring((rows.unsqueeze(1) == cols.unsqueeze(0)).to(dt), requires_grad)
    return tensor(np.eye(n, m), dtype=dt, device=device, requires_grad=requires_grad)
