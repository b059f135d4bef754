"""Rearranging composites: reshapes, permutations and gathers with PyTorch's signatures.

pixel_shuffle / pixel_unshuffle / channel_shuffle (sub-pixel layers), roll, rot90, unflatten,
repeat, tile, repeat_interleave, diag / diagonal / diag_embed / trace, tensordot, kron, meshgrid,
block_diag, cartesian_prod, combinations, vander, atleast_1d/2d/3d, hstack / vstack / dstack / column_stack,
tensor_split, fliplr / flipud, swapdims, triu_indices / tril_indices.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ..errors import ArgumentError, ShapeError
from ..formats import contiguous_format
from ..shapes import Sym, normalize_dim
from ..tensor import Tensor
from .creation import tensor, zeros
from .indexing import getitem
from .linalg import matmul
from .reductions import sum as _sum
from .shape import cat, clone, expand, flip, permute, reshape, stack, transpose, unsqueeze
from .step_slices import split
from .shape_params import as_size, keyword_shape, shape_args
from .registry import Aval, defprim
from .roll_prim import roll
from .step_slices import records_pieces
from .eager import bind
from .host_steps import host_step
from . import autocast as _autocast

__all__ = ["repeat", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle", "roll",
           "rot90", "unflatten", "tile", "repeat_interleave", "diag", "diagonal", "diag_embed", "trace",
           "tensordot", "kron", "meshgrid", "block_diag", "cartesian_prod", "atleast_1d", "atleast_2d",
           "atleast_3d", "hstack", "vstack", "row_stack", "dstack", "column_stack", "tensor_split",
           "hsplit", "vsplit", "dsplit", "fliplr", "flipud", "swapdims", "movedim", "moveaxis", "triu_indices",
           "tril_indices", "combinations", "vander"]


def pixel_shuffle(input, upscale_factor: int):
    """(*, C*r^2, H, W) -> (*, C, H*r, W*r)."""
    r = int(upscale_factor)
    if r <= 0:
        raise ArgumentError(f"pixel_shuffle: upscale_factor must be positive, got {upscale_factor!r}")
    if input.ndim < 3 or input.shape[-3] % (r * r):
        raise ShapeError(f"pixel_shuffle: expected (*, C*{r * r}, H, W), got shape {tuple(input.shape)}")
    lead = tuple(input.shape[:-3])
    c, h, w = input.shape[-3] // (r * r), input.shape[-2], input.shape[-1]
    x = reshape(input, lead + (c, r, r, h, w))
    k = len(lead)
    x = permute(x, tuple(range(k)) + (k, k + 3, k + 1, k + 4, k + 2))
    return reshape(x, lead + (c, h * r, w * r))


def pixel_unshuffle(input, downscale_factor: int):
    """(*, C, H*r, W*r) -> (*, C*r^2, H, W)."""
    r = int(downscale_factor)
    if r <= 0:
        raise ArgumentError(f"pixel_unshuffle: downscale_factor must be positive, got {downscale_factor!r}")
    if input.ndim < 3 or input.shape[-2] % r or input.shape[-1] % r:
        raise ShapeError(f"pixel_unshuffle: height and width of {tuple(input.shape)} must be divisible "
                         f"by {r}")
    lead = tuple(input.shape[:-3])
    c, h, w = input.shape[-3], input.shape[-2] // r, input.shape[-1] // r
    x = reshape(input, lead + (c, h, r, w, r))
    k = len(lead)
    x = permute(x, tuple(range(k)) + (k, k + 2, k + 4, k + 1, k + 3))
    return reshape(x, lead + (c * r * r, h, w))


def channel_shuffle(input, groups: int):
    """(N, g*c, *) -> (N, c*g, *): the channels of the groups interleaved."""
    n, ch = input.shape[0], input.shape[1]
    if groups <= 0 or ch % groups:
        raise ValueError(f"channel_shuffle: {ch} channels must be divisible by groups={groups}")
    rest = tuple(input.shape[2:])
    x = reshape(input, (n, groups, ch // groups) + rest)
    return reshape(transpose(x, 1, 2), (n, ch) + rest)


native_channel_shuffle = channel_shuffle


def rot90(input, k: int = 1, dims=(0, 1)):
    d0, d1 = (normalize_dim(d, input.ndim, "rot90") for d in dims)
    if d0 == d1:
        raise ArgumentError("rot90: the two dims must differ")
    k %= 4
    if k == 1:
        return transpose(flip(input, (d1,)), d0, d1)
    if k == 2:
        return flip(input, (d0, d1))
    if k == 3:
        return flip(transpose(input, d0, d1), (d1,))
    return clone(input)   # (new memory for a whole turn too, as PyTorch's)


def unflatten(input, dim: int, sizes):
    d = normalize_dim(dim, input.ndim, "unflatten")
    sizes = shape_args(tuple(sizes))   # (symbolic ones, a changing int argument's too, stay so)
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, (int, Sym)):
            raise TypeError(f"unflatten: sizes must be ints, got {tuple(sizes)}")
    n, rest = input.shape[d], math.prod(s for s in sizes if s != -1)
    if sizes.count(-1) == 1 and isinstance(n, int) and isinstance(rest, int) and rest and n % rest == 0:
        # -1 is inferred within the dim (its size known where another dim is 0, as PyTorch's)
        sizes = tuple(n // rest if s == -1 else s for s in sizes)
    return reshape(input, tuple(input.shape[:d]) + sizes + tuple(input.shape[d + 1:]))


def repeat(a, *sizes, repeats=None):
    if repeats is not None:
        sizes = keyword_shape("repeat", "repeats", sizes, repeats)
    sizes = shape_args(sizes)
    if len(sizes) < a.ndim:
        raise ShapeError(f"repeat: number of repeat dims {len(sizes)} is less than the tensor rank {a.ndim}")
    x = reshape(a, (1,) * (len(sizes) - a.ndim) + tuple(a.shape))
    # Interleave a size-r axis before each dim, expand it, then merge: pure views + one copy.
    inter, target, final = [], [], []
    for r, d in zip(sizes, x.shape):
        inter += [1, d]
        target += [r, d]
        final.append(r * d)
    y = expand(reshape(x, tuple(inter)), tuple(target))
    # (a row-major copy even where every size is 1, as PyTorch's repeat: `contiguous` would
    # return that view of a, and an in-place op on the result would change a)
    return reshape(clone(y, memory_format=contiguous_format), tuple(final))


def tile(input, *sizes, dims=None):
    """`input` repeated `dims` times per dim (``x.tile(2, 1)`` or ``torch.tile(x, (2, 1))``);
    missing leading dims count as 1."""
    if dims is not None:
        sizes = keyword_shape("tile", "dims", sizes, dims)
    if not sizes:
        raise TypeError("tile() missing required argument 'dims'")
    dims = tuple(d if isinstance(d, Sym) else int(d)   # (a symbolic count stays one: shape_args)
                 for d in ((sizes[0],) if len(sizes) == 1 and isinstance(sizes[0], int) else shape_args(sizes)))
    if len(dims) < input.ndim:
        dims = (1,) * (input.ndim - len(dims)) + dims
    x = reshape(input, (1,) * (len(dims) - input.ndim) + tuple(input.shape))
    return x.repeat(*dims)


def _repeat_index(xp, reps, n, size=None):
    """Each position in [0, n) repeated by its count in `reps` (one count: every position);
    `size`: the count of the result the caller promised (``output_size``)."""
    reps = reps.astype(np.int64, copy=False).reshape(-1)
    if reps.size == 1:
        reps = xp.full(n, int(reps[0]))
    if reps.size != n:
        raise ArgumentError(f"repeat_interleave: repeats has {reps.size} entries for a dim of size {n}")
    out = xp.repeat(xp.arange(n), reps)
    if size is not None and out.size != size:
        raise ArgumentError(f"repeat_interleave: output_size {size} but the repeats add up to {out.size}")
    return (out,)


def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Each element repeated `repeats` times along `dim` (the flattened input if None)."""
    size = None if output_size is None else int(output_size)
    shapes = [("n",) if size is None else (size,)]
    if repeats is None:   # repeat_interleave(repeats): indices repeated by their counts
        return host_step(_repeat_index, [input], shapes, [_dt.int64], "repeat_interleave", n=input.shape[0],
                         size=size)[0]
    if dim is None:
        input, dim = reshape(input, (-1,)), 0
    d = normalize_dim(dim, input.ndim, "repeat_interleave")
    n = input.shape[d]
    if isinstance(repeats, (int, Sym)) and not isinstance(repeats, bool):
        # one count for all: each element's copies side by side, so a symbolic dim or count
        # (``x.repeat_interleave(n // 2, 0)``) stays symbolic
        if repeats < 0:
            raise ArgumentError(f"repeat_interleave: repeats must be non-negative, got {repeats}")
        if size is not None and size != n * repeats:
            raise ArgumentError(f"repeat_interleave: output_size {size} but {n} elements "
                                f"repeated {repeats} times make {n * repeats}")
        shape = tuple(input.shape)
        copies = expand(unsqueeze(input, d + 1), shape[:d + 1] + (repeats,) + shape[d + 1:])
        # (new memory, as PyTorch's: of an expanded input the merged dims can be a view,
        # whose one element a write would change in every copy)
        return reshape(clone(copies), shape[:d] + (n * repeats,) + shape[d + 1:])
    if isinstance(repeats, Tensor):
        (idx,) = host_step(_repeat_index, [repeats], shapes, [_dt.int64], "repeat_interleave", n=n, size=size)
    else:
        idx = tensor(_repeat_index(np, np.asarray(repeats), n, size)[0], device=input.device)
    return getitem(input, (slice(None),) * d + (idx,))


def _windows_impl(xp, a, dim: int, size: int, step: int):
    shape = a.shape[:dim] + ((a.shape[dim] - size) // step + 1,) + a.shape[dim + 1:] + (size,)
    strides = a.strides[:dim] + (a.strides[dim] * step,) + a.strides[dim + 1:] + (a.strides[dim],)
    return xp.lib.stride_tricks.as_strided(a, shape, strides)


def _windows_rule(a, dim: int, size: int, step: int):
    shape = tuple(a.shape)
    return Aval(shape[:dim] + ((shape[dim] - size) // step + 1,) + shape[dim + 1:] + (size,),
                a.dtype, a.device)


def _windows_sum_impl(xp, g, dim: int, size: int, step: int, length: int):
    """Each window's gradient added back at its elements (overlapping windows add): one
    strided add per window offset, or per window where there are fewer windows, through
    the unfold view of the result (np.add.at's per-element loop cost ~100x more)."""
    out = xp.zeros(g.shape[:dim] + (length,) + g.shape[dim + 1:-1], g.dtype)
    windows = _windows_impl(xp, out, dim, size, step)
    if size <= g.shape[dim]:
        for j in range(size):
            windows[..., j] += g[..., j]
    else:
        for i in range(g.shape[dim]):
            at = (slice(None),) * dim + (i,)
            windows[at] += g[at]
    return out


def _windows_sum_rule(g, dim: int, size: int, step: int, length: int):
    shape = tuple(g.shape)
    return Aval(shape[:dim] + (length,) + shape[dim + 1:-1], g.dtype, g.device)


WINDOWS_SUM = defprim("windows_sum", _windows_sum_impl, _windows_sum_rule,
                      lambda g, out, a, dim, size, step, length: (unfold_windows(g, dim, size, step),),
                      kind="other", save=lambda rq: ())


# (a strided view of its operand: writes into a window write into the input, as PyTorch's)
def _windows_vjp(g, out, a, dim: int, size: int, step: int):
    return (bind(WINDOWS_SUM, g, dim=dim, size=size, step=step, length=a.shape[dim]),)


UNFOLD_WINDOWS = defprim("unfold_windows", _windows_impl, _windows_rule, _windows_vjp, kind="other",
                         save=lambda rq: (), extra={"view": True, "meta": (0,)}, grad_name="UnfoldBackward0")


def unfold_windows(input, dimension: int, size: int, step: int):
    """``Tensor.unfold``: every window of `size` elements `step` apart along `dimension`, as
    a new last dim; a view of `input`."""
    size, step = as_size(size), as_size(step)
    if input.ndim == 0:
        return reshape(unfold_windows(reshape(input, (1,)), 0, size, step), (size,))
    d = normalize_dim(dimension, input.ndim, "unfold")
    for name, v in (("size", size), ("step", step)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"unfold: {name} must be an int, got {v!r}")
    if step <= 0 or size < 0:
        raise ArgumentError(f"unfold: step must be positive and size non-negative, got size={size}, step={step}")
    if size > input.shape[d]:
        raise ShapeError(f"unfold: maximum size for tensor at dimension {d} is {input.shape[d]} but "
                         f"size is {size}")
    return bind(UNFOLD_WINDOWS, input, dim=d, size=int(size), step=int(step))


def _diag_impl(xp, a, offset: int, d1: int, d2: int, n: int):
    rest = [k for k in range(a.ndim) if k not in (d1, d2)]
    corner = [slice(None)] * a.ndim
    corner[d1], corner[d2] = slice(max(0, -offset), None), slice(max(0, offset), None)
    b = a[tuple(corner)]
    return xp.lib.stride_tricks.as_strided(b, tuple(a.shape[k] for k in rest) + (n,),
                                           tuple(b.strides[k] for k in rest) + (b.strides[d1] + b.strides[d2],))


# (a strided view over the input's own strides, whatever its layout: writes reach the input)
def _diag_rule(a, offset: int, d1: int, d2: int, n: int):
    return Aval(tuple(s for k, s in enumerate(a.shape) if k not in (d1, d2)) + (n,), a.dtype, a.device)


def _diag_vjp(g, out, a, offset: int, d1: int, d2: int, n: int):
    return (zeros(tuple(a.shape), dtype=g.dtype, device=g.device).diagonal_scatter(g, offset, d1, d2),)


DIAGONAL = defprim("diagonal", _diag_impl, _diag_rule, _diag_vjp, kind="other",
                   save=lambda rq: (), extra={"view": True, "meta": (0,)}, grad_name="DiagonalBackward0")


def diagonal(input, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """The `offset` diagonal of the (dim1, dim2) planes, as the last dim; a view whatever
    `input`'s strides: writing into it (``x.diagonal().fill_(0)``) writes into `input`, as
    in PyTorch."""
    d1, d2 = normalize_dim(dim1, input.ndim, "diagonal"), normalize_dim(dim2, input.ndim, "diagonal")
    if d1 == d2:
        raise ArgumentError(f"diagonal: dim1 and dim2 cannot be the same dim, got {dim1} and {dim2}")
    rest = [d for d in range(input.ndim) if d not in (d1, d2)]
    order = tuple(rest) + (d1, d2)
    x = input if order == tuple(range(input.ndim)) else permute(input, order)
    r, c = x.shape[-2], x.shape[-1]
    n = max(0, min(r, c - offset) if offset >= 0 else min(r + offset, c))
    if n == 0:   # (an empty slice of the input: still in its autograd graph, as PyTorch's)
        return getitem(reshape(x, tuple(x.shape[:-2]) + (r * c,)), (Ellipsis, slice(0, 0)))
    if (x is not input or not input.is_contiguous()) and isinstance(n, int):
        # (the planes are not one flat run: a reshape would copy and writes would be lost)
        return bind(DIAGONAL, input, offset=int(offset), d1=d1, d2=d2, n=int(n))
    start = offset if offset >= 0 else -offset * c
    flat = reshape(x, tuple(x.shape[:-2]) + (r * c,))
    return getitem(flat, (Ellipsis, slice(start, start + (n - 1) * (c + 1) + 1, c + 1)))


_diagonal = diagonal


def diag(input, diagonal: int = 0):
    """The diagonal of a matrix, or a matrix with a vector on its diagonal."""
    if input.ndim == 1:
        n = input.shape[0] + abs(diagonal)
        return diag_embed(input, diagonal)[..., :n, :n]
    if input.ndim == 2:
        # a copy, as PyTorch's (`diagonal` is the view): later writes to `input` stay out
        return clone(_diagonal(input, diagonal))
    raise ShapeError(f"diag: expected a 1-D or 2-D input, got shape {tuple(input.shape)}")


def diag_embed(input, offset: int = 0, dim1: int = -2, dim2: int = -1):
    """A batch of matrices with `input`'s last dim on their `offset` diagonal."""
    m, lead = input.shape[-1], tuple(input.shape[:-1])
    n = m + abs(offset)
    # each value followed by n zeros puts value k at k * (n + 1) of the flat matrix, its
    # diagonal; zeros before it shift that to the offset one (placed, not multiplied by an
    # identity: an inf stays off the other entries)
    rows = reshape(cat([unsqueeze(input, -1), zeros(lead + (m, n), dtype=input.dtype, device=input.device)], -1),
                   lead + (m * (n + 1),))
    start = offset if offset >= 0 else -offset * n
    pad = [zeros(lead + (k,), dtype=input.dtype, device=input.device) for k in (start, max(0, n * n - start - m * (n + 1)))]
    out = reshape(getitem(cat([pad[0], rows, pad[1]], -1), (Ellipsis, slice(0, n * n))), lead + (n, n))
    nd = out.ndim
    d1, d2 = normalize_dim(dim1, nd, "diag_embed"), normalize_dim(dim2, nd, "diag_embed")
    # out's last two dims go to d1 and d2, the others keep their order
    order, rest = [None] * nd, iter(range(nd - 2))
    order[d1], order[d2] = nd - 2, nd - 1
    return permute(out, tuple(next(rest) if o is None else o for o in order))


@_autocast.fp32
def trace(input):
    if input.ndim != 2:
        raise ShapeError(f"trace: expected a matrix, got shape {tuple(input.shape)}")
    return _sum(_diagonal(input))


def tensordot(a, b, dims=2):
    if isinstance(dims, int):
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = dims
        da = [da] if isinstance(da, int) else list(da)
        db = [db] if isinstance(db, int) else list(db)
    da = [normalize_dim(d, a.ndim, "tensordot") for d in da]
    db = [normalize_dim(d, b.ndim, "tensordot") for d in db]
    fa = [d for d in range(a.ndim) if d not in da]
    fb = [d for d in range(b.ndim) if d not in db]
    k = int(np.prod([a.shape[d] for d in da])) if da else 1
    am = reshape(permute(a, tuple(fa + da)), (-1, k))
    bm = reshape(permute(b, tuple(db + fb)), (k, -1))
    return reshape(matmul(am, bm), tuple(a.shape[d] for d in fa) + tuple(b.shape[d] for d in fb))


def kron(a, b):
    nd = max(a.ndim, b.ndim)
    a = reshape(a, (1,) * (nd - a.ndim) + tuple(a.shape))
    b = reshape(b, (1,) * (nd - b.ndim) + tuple(b.shape))
    x = reshape(a, sum(((s, 1) for s in a.shape), ())) * reshape(b, sum(((1, s) for s in b.shape), ()))
    return reshape(x, tuple(p * q for p, q in zip(a.shape, b.shape)))


def meshgrid(*tensors, indexing: str = "ij"):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    ts = list(tensors)
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        ts[0], ts[1] = ts[1], ts[0]
    shape = tuple(t.numel() for t in ts)
    out = []
    for i, t in enumerate(ts):
        view = [1] * len(ts)
        view[i] = -1
        out.append(expand(reshape(t, tuple(view)), shape))
    if swap:
        out[0], out[1] = out[1], out[0]
    return tuple(out)


def block_diag(*tensors):
    mats = [reshape(t, (1, -1)) if t.ndim <= 1 else t for t in tensors]
    if any(m.ndim != 2 for m in mats):
        raise ShapeError("block_diag: inputs must have at most 2 dims")
    rows = sum(m.shape[0] for m in mats)
    cols = sum(m.shape[1] for m in mats)
    dtype = mats[0].dtype
    out_rows, c0 = [], 0
    for m in mats:
        parts = []
        if c0:
            parts.append(zeros((m.shape[0], c0), dtype=dtype, device=m.device))
        parts.append(m)
        rest = cols - c0 - m.shape[1]
        if rest:
            parts.append(zeros((m.shape[0], rest), dtype=dtype, device=m.device))
        out_rows.append(cat(parts, 1) if len(parts) > 1 else m)
        c0 += m.shape[1]
    return cat(out_rows, 0) if rows else zeros((0, cols), dtype=dtype)


def cartesian_prod(*tensors):
    grids = meshgrid(*tensors, indexing="ij")
    if len(grids) == 1:
        return tensors[0]
    return stack([reshape(g, (-1,)) for g in grids], 1)


def combinations(input, r: int = 2, with_replacement: bool = False):
    """The r-element combinations of a 1-D tensor's elements, as rows (itertools' order)."""
    import itertools
    if input.ndim != 1:
        raise ShapeError(f"combinations: expected a 1-D tensor, got shape {tuple(input.shape)}")
    if r < 0:
        raise ValueError(f"combinations: r must be non-negative, got {r}")
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    rows = list(pick(range(input.shape[0]), r))
    if r == 0 or not rows:
        return input[:0]
    idx = tensor(np.asarray(rows, np.int64).reshape(-1), device=input.device)
    return reshape(getitem(input, idx), (len(rows), r))


def vander(x, N=None, increasing: bool = False):
    """Columns of powers of a 1-D tensor: x**(N-1), ..., x, 1 (reversed with increasing)."""
    if x.ndim != 1:
        raise ShapeError(f"vander: expected a 1-D tensor, got shape {tuple(x.shape)}")
    n = x.shape[0] if N is None else int(N)
    if n < 0:
        raise ValueError(f"vander: N must be non-negative, got {N}")
    powers = np.arange(n) if increasing else np.arange(n - 1, -1, -1)
    x2 = x if x.dtype.is_floating_point or x.dtype.is_complex else x.to(_dt.int64)
    return unsqueeze(x2, 1) ** tensor(powers, dtype=x2.dtype, device=x.device)


def _atleast(n, tensors):
    single = len(tensors) == 1 and not isinstance(tensors[0], (list, tuple))
    ts = tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else tensors
    out = []
    for t in ts:
        if t.ndim == 0:
            t = reshape(t, (1,) * n)
        elif t.ndim == 1 and n >= 2:
            t = reshape(t, (1, -1) + ((1,) if n == 3 else ()))
        elif t.ndim == 2 and n == 3:
            t = unsqueeze(t, -1)
        out.append(t)
    return out[0] if single else tuple(out)


def atleast_1d(*tensors):
    return _atleast(1, tensors)


def atleast_2d(*tensors):
    return _atleast(2, tensors)


def atleast_3d(*tensors):
    return _atleast(3, tensors)


def hstack(tensors):
    ts = atleast_1d(*tensors) if len(tensors) > 1 else (atleast_1d(tensors[0]),)
    return cat(list(ts), 0 if ts[0].ndim == 1 else 1)


def vstack(tensors):
    return cat(list(atleast_2d(*tensors)) if len(tensors) > 1 else [atleast_2d(tensors[0])], 0)


row_stack = vstack


def dstack(tensors):
    return cat(list(atleast_3d(*tensors)) if len(tensors) > 1 else [atleast_3d(tensors[0])], 2)


def column_stack(tensors):
    cols = [reshape(t, (-1, 1)) if t.ndim <= 1 else t for t in tensors]
    return cat(cols, 1)


def tensor_split(input, indices_or_sections, dim: int = 0):
    d = normalize_dim(dim, input.ndim, "tensor_split")
    n = input.shape[d]
    indices_or_sections = as_size(indices_or_sections)   # (a 0-d tensor or numpy int: sections)
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        if k <= 0:
            raise ShapeError(f"tensor_split: the number of sections must be positive, got {k}")
        sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
        bounds = np.concatenate([[0], np.cumsum(sizes)])
    else:
        idx = [int(i) for i in (indices_or_sections.tolist() if isinstance(indices_or_sections, Tensor)
                                else indices_or_sections)]
        bounds = [0] + [min(max(i, 0), n) for i in idx] + [n]
    sizes = [int(b) - int(a) for a, b in zip(bounds[:-1], bounds[1:])]
    if records_pieces(input) and min(sizes) >= 0:   # (pieces in order: one backward node)
        return split(input, sizes, d)
    return tuple(getitem(input, (slice(None),) * d + (slice(int(a), int(max(a, b))),))
                 for a, b in zip(bounds[:-1], bounds[1:]))


def hsplit(input, indices_or_sections):
    return tensor_split(input, indices_or_sections, 0 if input.ndim == 1 else 1)


def vsplit(input, indices_or_sections):
    return tensor_split(input, indices_or_sections, 0)


def dsplit(input, indices_or_sections):
    return tensor_split(input, indices_or_sections, 2)


def fliplr(input):
    return flip(input, (1,))


def flipud(input):
    return flip(input, (0,))


def swapdims(input, dim0: int, dim1: int):
    return transpose(input, dim0, dim1)


def movedim(input, source, destination):
    """Dims `source` moved to positions `destination` (ints, or sequences of equal length),
    the others keeping their order."""
    n = input.ndim
    # (one dim: an int, a numpy int or a 0-d tensor, which normalize_dim reads)
    src = list(source) if isinstance(source, (tuple, list)) else [source]
    dst = list(destination) if isinstance(destination, (tuple, list)) else [destination]
    if len(src) != len(dst):
        raise ValueError(f"movedim: source and destination must have the same number of dims, got "
                         f"{len(src)} and {len(dst)}")
    src = [normalize_dim(s, n, "movedim") for s in src]
    dst = [normalize_dim(d, n, "movedim") for d in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError(f"movedim: repeated dim in source {tuple(source)} or destination {tuple(destination)}")
    if n == 0:   # (dim 0 or -1 of a 0-d tensor: the tensor, as PyTorch)
        return permute(input, ())
    order = [None] * n
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(i for i in range(n) if i not in src)
    return permute(input, tuple(o if o is not None else next(rest) for o in order))


moveaxis = movedim   # (numpy's name)


def triu_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None):
    _sizes("triu_indices", row, col)
    return tensor(np.stack(np.triu_indices(row, offset, col)), dtype=dtype or _dt.int64, device=device)


def tril_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None):
    _sizes("tril_indices", row, col)
    return tensor(np.stack(np.tril_indices(row, offset, col)), dtype=dtype or _dt.int64, device=device)


def _sizes(op: str, row: int, col: int) -> None:
    if row < 0 or col < 0:
        raise ArgumentError(f"{op}: row and col must be non-negative, got {row} and {col}")

