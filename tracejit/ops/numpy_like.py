"""Functions PyTorch shares with numpy's vocabulary, as composites of tracejit's ops (so
they trace and differentiate where their parts do): broadcasting helpers, dtype queries,
NaN-ignoring max/min, gcd/lcm/nextafter, statistics (cov, corrcoef, histogram), index
arithmetic (unravel_index), the ``*_scatter`` family, and PyTorch's comparison aliases.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from .. import dtypes as _dt
from ..errors import ShapeError
from ..shapes import broadcast_shapes as _broadcast_shapes, normalize_dim
from ..size import Size
from ..tensor import Tensor
from .creation import _STEPS, arange, complex_bound, count_arg, empty as _empty, tensor, zeros_like as _zeros_like
from .elementwise import _binary, _int_result, cast, ge, gt, isnan, le, logical_or, lt, ne, sqrt, where
from .host_steps import without_derivative
from .indexing import index_put
from .linalg import matmul
from .reductions import norm as _norm, sum as _sum
from .registry import Aval, bind, defprim, refuse_tracing, trace_state
from .rearrange import movedim
from .shape import cat, expand, reshape

__all__ = ["broadcast_tensors", "broadcast_shapes", "result_type", "can_cast", "fmax", "fmin",
           "gcd", "lcm", "nextafter", "cov", "corrcoef", "histogram", "unravel_index", "diagflat",
           "msort", "ravel", "logspace", "select_scatter", "slice_scatter", "diagonal_scatter",
           "concatenate", "rsub", "vdot", "greater", "greater_equal", "less", "less_equal",
           "not_equal", "norm", "is_nonzero", "is_same_size", "is_signed", "get_device", "mvlgamma", "fill",
           "detach", "as_strided", "view_dtype", "empty_strided"]

greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne
concatenate = cat


def broadcast_shapes(*shapes) -> Size:
    return Size(_broadcast_shapes("broadcast_shapes", *[(s,) if isinstance(s, int) else tuple(s) for s in shapes]))


def broadcast_tensors(*tensors) -> tuple:
    ts = tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else tensors
    shape = _broadcast_shapes("broadcast_tensors", *[tuple(t.shape) for t in ts])
    return tuple(t if tuple(t.shape) == shape else expand(t, shape) for t in ts)


def result_type(tensor1, tensor2) -> _dt.DType:
    """The dtype an arithmetic op on the two gives (PyTorch's three-group promotion)."""
    return _int_result(tensor1, tensor2)


def can_cast(from_, to) -> bool:
    """Whether PyTorch's casting rules allow `from_` into `to` in an in-place op: never
    to a lower category (complex > floating > integer > bool)."""
    return _dt.as_dtype(from_).category <= _dt.as_dtype(to).category


def fmax(input, other):
    """maximum that ignores NaN: the other value where one is NaN (NaN only if both are). A
    tie's gradient goes to `input`, as PyTorch's."""
    return where(logical_or(ge(input, other), isnan(other)), input, other)


def fmin(input, other):
    return where(logical_or(le(input, other), isnan(other)), input, other)


def _array_fn(op):
    def impl(xp, a, b):
        return getattr(xp, op)(a, b)
    return impl


GCD = _binary("gcd", _array_fn("gcd"))
LCM = _binary("lcm", _array_fn("lcm"))
# (PyTorch's gradient: the output's to input, zeros to other)
NEXTAFTER = _binary("nextafter", _array_fn("nextafter"), lambda g, out, a, b: (g, _zeros_like(g)),
                    save=lambda rq: (), extra={"own_dtype": True})


def _ints(prim, a, b):
    dts = [v.dtype for v in (a, b) if isinstance(v, Tensor)]
    for d in dts:   # (one bool operand promotes to the other's integers, as in PyTorch)
        if not (d.is_integer or d is _dt.bool_) or all(e is _dt.bool_ for e in dts):
            raise TypeError(f"{prim.name}: expected integer tensors, got {d.name}")
    return bind(prim, a, b)


def gcd(input, other):
    return _ints(GCD, input, other)


def lcm(input, other):
    return _ints(LCM, input, other)


def nextafter(input, other):
    """The next floating-point value after input towards other."""
    dt = result_type(input, other)   # (PyTorch checks the promoted dtype: int and float pass)
    if not dt.is_floating_point:
        raise TypeError(f"nextafter: expected floating point tensors, got {dt.name}")
    return bind(NEXTAFTER, cast(input, dt), cast(other, dt) if isinstance(other, Tensor) else other)


def cov(input, *, correction: int = 1, fweights=None, aweights=None):
    """The covariance of the rows of `input` (variables) over its columns (observations)."""
    if input.ndim > 2:
        raise ShapeError(f"cov: expected a tensor of at most 2 dims, got shape {tuple(input.shape)}")
    x = reshape(input, (1, -1)) if input.ndim < 2 else input
    if not x.dtype.is_floating_point and not x.dtype.is_complex:
        x = cast(x, _dt.get_default_dtype())
    n = x.shape[1]
    w = None
    for name, wt in (("fweights", fweights), ("aweights", aweights)):
        if wt is not None:
            if wt.ndim != 1 or wt.shape[0] != n:
                raise ShapeError(f"cov: {name} must be 1-D with {n} entries, got shape {tuple(wt.shape)}")
            w = wt if w is None else w * wt
    if w is None:
        total = float(n)
        avg = _sum(x, 1, keepdim=True) / max(n, 1)
        norm = total - correction
    else:
        w = cast(w, x.dtype)
        total = _sum(w)
        avg = _sum(x * w, 1, keepdim=True) / total
        if correction == 0:
            norm = total
        elif aweights is None:
            norm = total - correction
        else:
            norm = total - correction * _sum(w * cast(aweights, x.dtype)) / total
    xc = x - avg
    xw = xc if w is None else xc * w
    out = matmul(xw, xc.conj().transpose(0, 1) if xc.dtype.is_complex else xc.transpose(0, 1))
    out = out / (norm if not isinstance(norm, float) else max(norm, 0.0))
    return reshape(out, ()) if input.ndim < 2 else out


def corrcoef(input):
    """Pearson correlation coefficients of the rows of `input`, clipped to [-1, 1]."""
    c = cov(input)
    if c.ndim == 0:
        return c / c
    d = sqrt(c.diagonal())
    out = c / d.unsqueeze(1) / d.unsqueeze(0)
    return out.clamp(-1, 1)


_Histogram = namedtuple("histogram", ["hist", "bin_edges"])


def histogram(input, bins=100, *, range=None, weight=None, density: bool = False):  # noqa: A002
    """Counts of input's values in `bins` equal bins (or between the given edges)."""
    refuse_tracing("histogram", "its input")
    # (counts have no gradient: tensors that require grad are read as their values)
    edges = bins.detach().numpy() if isinstance(bins, Tensor) else bins
    w = weight.detach().numpy() if weight is not None else None
    hist, out_edges = np.histogram(input.detach().numpy().reshape(-1), bins=edges, range=range,
                                   weights=None if w is None else w.reshape(-1), density=density)
    dt = input.dtype
    hist, out_edges = (without_derivative(tensor(a.astype(dt.np), device=input.device), input, bins, weight,
                                          op="histogram") for a in (hist, out_edges))
    return _Histogram(hist, out_edges)


def unravel_index(indices, shape) -> tuple:
    """The coordinates in a tensor of `shape` of each flat index (a tuple of tensors)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    idx = indices if isinstance(indices, Tensor) else tensor(indices)
    if not idx.dtype.is_integer:
        raise TypeError(f"unravel_index: expected integer indices, got {idx.dtype.name}")
    size = int(np.prod(shape)) if shape else 1
    if idx.numel() and (int(idx.min()) < -size or int(idx.max()) >= size):
        raise IndexError(f"unravel_index: an index is out of range for shape {shape}")
    idx = where(idx < 0, idx + size, idx)
    out = []
    for dim in reversed(shape):
        out.append(idx % dim)
        idx = idx // dim
    return tuple(reversed(out))


def diagflat(input, offset: int = 0):
    from .rearrange import diag
    return diag(reshape(input, (-1,)), offset)


def msort(input):
    from .tensorfns import sort
    return sort(input, 0)[0]


def ravel(input):
    return reshape(input, (-1,))


def logspace(start, end, steps: int, base: float = 10.0, *, dtype=None, device=None,
             requires_grad: bool = False):
    dt = _dt.as_dtype(dtype) if dtype else _dt.get_default_dtype()
    steps = count_arg("logspace", steps, _STEPS)
    kind = complex if complex_bound(start, end) else float
    if kind is complex and not dtype:
        dt = dt.to_complex()   # (as linspace: the default dtype's complex form)
    if dt.is_integer:   # (as linspace: the bounds in the dtype first, truncated toward zero)
        start, end = int(start), int(end)
    vals = np.power(float(base), np.linspace(kind(start), kind(end), steps))
    return tensor(vals, dtype=dt, device=device, requires_grad=requires_grad)


def select_scatter(input, src, dim: int, index: int):
    """input with the slice ``input.select(dim, index)`` replaced by src."""
    d = normalize_dim(dim, input.ndim, "select_scatter")
    return index_put(input, (slice(None),) * d + (int(index),), cast(src, input.dtype))


def slice_scatter(input, src, dim: int = 0, start=None, end=None, step: int = 1):
    d = normalize_dim(dim, input.ndim, "slice_scatter")
    return index_put(input, (slice(None),) * d + (slice(start, end, step),), cast(src, input.dtype))


def diagonal_scatter(input, src, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """input with its diagonal (``input.diagonal(offset, dim1, dim2)``) replaced by src."""
    d1, d2 = normalize_dim(dim1, input.ndim, "diagonal_scatter"), normalize_dim(dim2, input.ndim,
                                                                                "diagonal_scatter")
    moved = movedim(input, (d1, d2), (-2, -1))
    rows, cols = moved.shape[-2], moved.shape[-1]
    n = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
    i = arange(n) + max(-offset, 0)
    j = arange(n) + max(offset, 0)
    out = index_put(moved, (Ellipsis, i, j), cast(src, input.dtype))
    return movedim(out, (-2, -1), (d1, d2))


def rsub(input, other, *, alpha=1):
    """other - alpha * input."""
    return other - input * alpha if alpha != 1 else other - input


def vdot(input, other):
    """The dot product of two 1-D tensors, conjugating the first."""
    if input.ndim != 1 or other.ndim != 1:
        raise ShapeError(f"vdot: expected 1-D tensors, got shapes {tuple(input.shape)} and {tuple(other.shape)}")
    a = input.conj() if input.dtype.is_complex else input
    return _sum(a * other)


def mvlgamma(input, p: int):
    """The multivariate log-gamma function of dimension p (``special.multigammaln``)."""
    from ..special import multigammaln
    return multigammaln(input, p)


def fill(input, value):
    """A new tensor of input's shape and dtype filled with `value`, a number or a 0-d tensor
    (converted as a copy: 300 wraps into int8, as PyTorch's). As PyTorch's, the result stays
    in the graph: input's gradient is zeros, and a tensor value's the sum of the result's."""
    from ..autograd.grad_mode import is_grad_enabled
    from .creation import full, full_like
    if isinstance(value, Tensor):
        if value.ndim:
            raise ShapeError(f"fill: value must be a 0-dim tensor or a number, got {value.ndim} dims")
        value = cast(value, input.dtype)
        graph = value.requires_grad or input.requires_grad
    else:
        graph = input.requires_grad
    # (a trace keeps a tensor value in its graph rather than reading it, and routes a
    # traced input as eagerly, so a compiled result requires grad where the eager one does)
    if trace_state.tracer is None and not (graph and is_grad_enabled()):
        return full_like(input, value.item() if isinstance(value, Tensor) else value)
    if not isinstance(value, Tensor):
        value = full((), value, dtype=input.dtype, device=input.device)
    everywhere = full(input.shape, True, dtype=_dt.bool_, device=input.device)
    return where(everywhere, value.to(input.device), input)


def detach(input):
    return input.detach()


def norm(input, p="fro", dim=None, keepdim: bool = False, dtype=None):
    """``torch.norm``: the reductions' vector norms, and p="nuc" (the sum of singular values
    of the last two dims, or of `dim`) through linalg."""
    if dtype is not None:
        input = cast(input, dtype)
    if p == "nuc":
        from ..linalg import matrix_norm
        return matrix_norm(input, "nuc", (-2, -1) if dim is None else dim, keepdim)
    return _norm(input, 2 if p is None else p, dim, keepdim)


def is_nonzero(input) -> bool:
    if input.numel() != 1:
        raise RuntimeError(f"is_nonzero: a tensor with {input.numel()} elements is ambiguous; "
                           f"expected exactly one")
    return bool(input.item() != 0)


def is_same_size(input, other) -> bool:
    return tuple(input.shape) == tuple(other.shape)


def is_signed(input) -> bool:
    return input.dtype.category >= 2 or (input.dtype.is_integer and np.dtype(input.dtype.np).kind == "i")


def get_device(input) -> int:
    """-1 for a CPU tensor, else the device index (PyTorch's convention)."""
    return -1 if input.device.type == "cpu" else int(input.device.index or 0)


def _strided_impl(xp, a, size, stride, offset):
    flat = a.reshape(-1)     # a view of a contiguous input
    return xp.lib.stride_tricks.as_strided(flat[offset:], size, tuple(st * a.itemsize for st in stride))


def _flat_positions(size, stride, offset, device):
    """The input element each output element reads, from creation ops (a captured backward
    may not hold a concrete index tensor)."""
    idx = None
    for axis, (n, st) in enumerate(zip(size, stride)):
        step = reshape(arange(n, device=device) * st, (n,) + (1,) * (len(size) - axis - 1))
        idx = step if idx is None else idx + step
    return (idx if idx is not None else arange(1, device=device) * 0) + offset


def _strided_vjp(g, out, a, size, stride, offset):
    """Each output element's gradient added at the element it reads (overlaps add)."""
    from .indexing_more import index_add
    from .creation import zeros
    idx = reshape(_flat_positions(size, stride, offset, g.device), (-1,))
    flat = index_add(zeros((a.numel(),), dtype=g.dtype, device=g.device), 0, idx, reshape(g, (-1,)))
    return (reshape(flat, tuple(a.shape)),)


# (a strided view of its operand: writes through it write into the input, as PyTorch's)
AS_STRIDED = defprim("as_strided", _strided_impl,
                     lambda a, size, stride, offset: Aval(tuple(size), a.dtype, a.device),
                     _strided_vjp, kind="other",
                     save=lambda rq: (), extra={"view": True, "meta": (0,)}, grad_name="AsStridedBackward0")


def as_strided(input, size, stride, storage_offset=None):
    """A view of `input`'s elements at ``storage_offset + sum(i_k * stride_k)``, laid out as
    `size`; writes through it reach `input`, and overlapping elements add their gradients.
    The input must be contiguous, so its storage is its own elements from
    ``input.storage_offset()`` on, as PyTorch counts them."""
    size, stride = tuple(int(v) for v in size), tuple(int(v) for v in stride)
    if len(size) != len(stride):
        raise RuntimeError(f"as_strided: size {size} and stride {stride} should have the same length")
    if any(n < 0 for n in size) or any(st < 0 for st in stride):
        raise RuntimeError(f"as_strided: negative size or stride ({size}, {stride})")
    if not input.is_contiguous():
        raise NotImplementedError("as_strided: the input is not contiguous; call .contiguous() first "
                                  "(strides here count elements of the input itself)")
    own = input.storage_offset() if isinstance(input.storage_offset(), int) else 0
    offset = (own if storage_offset is None else int(storage_offset)) - own
    numel = input.numel()
    last = offset + sum((n - 1) * st for n, st in zip(size, stride))
    if 0 not in size and (offset < 0 or last >= numel):
        raise RuntimeError(f"as_strided: size {size}, stride {stride} and offset "
                           f"{storage_offset if storage_offset is not None else own} reach storage "
                           f"element {(offset if offset < 0 else last) + own}, outside the input's "
                           f"{numel} elements from {own}")
    return bind(AS_STRIDED, input, size=size, stride=stride, offset=offset if 0 not in size else 0)


def view_dtype(input, dtype):
    """``x.view(dtype)``: the same memory read as `dtype` (not differentiable); a
    different element size rescales the last dim, which must be contiguous."""
    dt = _dt.as_dtype(dtype)
    a = input.detach()._data
    if a is None:
        from ..errors import TraceError
        raise TraceError(f"view({dt.name}) reinterprets a tensor's memory, which a compiled function does "
                         f"not capture; call it outside the compiled function or use tracejit.eager")
    try:
        out = a.view(np.dtype(dt.np))
    except ValueError as e:
        raise RuntimeError(f"view({dt.name}): a tensor of shape {tuple(input.shape)} and dtype "
                           f"{input.dtype.name} cannot be viewed as {dt.name}: {e}") from None
    return Tensor._wrap(out, dt, input.device)


def empty_strided(size, stride, *, dtype=None, device=None, requires_grad: bool = False):
    """An uninitialized tensor of `size` laid out with `stride` (in elements) over a buffer
    just large enough, as PyTorch's."""
    size, stride = tuple(int(n) for n in size), tuple(int(s) for s in stride)
    if len(size) != len(stride) or any(s < 0 for s in stride):
        raise ValueError(f"empty_strided: expected a non-negative stride per dim of {size}, got {stride}")
    if stride == _row_major(size):
        return _empty(size, dtype=dtype, device=device, requires_grad=requires_grad)
    buf = _empty(max(0, 1 + sum((n - 1) * s for n, s in zip(size, stride))), dtype=dtype, device=device)
    out = as_strided(buf, size, stride)
    return out.requires_grad_() if requires_grad else out


def _row_major(size: tuple) -> tuple:
    st, acc = [], 1
    for n in reversed(size):
        st.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(st))
