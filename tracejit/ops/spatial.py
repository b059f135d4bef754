"""Spatial composites beyond conv2d: conv1d, conv_transpose2d, adaptive pooling,
interpolation, padding modes, average pooling with ceil_mode / count_include_pad.

Everything here is written with primitives that already have VJPs:

- ``conv1d`` is conv2d over a height-1 image; ``conv_transpose2d`` is a matmul with the
  weight followed by ``fold`` (col2im), which is exactly the gradient of conv2d with
  respect to its input, so it goes through BLAS like conv2d does;
- adaptive average pooling and linear interpolation are separable linear maps:
  ``out = A_h @ x @ A_w^T`` with small constant matrices built in numpy, so there is
  no per-element Python and the gradient is two matmuls;
- nearest interpolation, reflect/replicate/circular padding and adaptive max pooling
  are gathers with constant index vectors (getitem with an integer tensor).
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ..errors import ArgumentError, ShapeError
from ..shapes import Sym
from .composite import check_conv_args, conv2d, max_pool2d, string_padding
from .conv import _ntuple, _pair, fold, unfold
from .conv_gemm import conv2d_xgrad
from .creation import tensor
from .elementwise import cast
from .indexing import getitem
from .interpolate import interpolate  # noqa: F401  (re-exported: F.interpolate's old home)
from .linalg import matmul
from .pooling_nd import _avg_matrix, _batched, _bins, _out_sizes, widened
from .reductions import amax, argmax
from .reductions import sum as _sum
from .shape import cat, permute, reshape, squeeze, transpose, unsqueeze
from . import autocast as _autocast
from .dtype_checks import takes

__all__ = ["conv1d", "conv_transpose2d", "adaptive_avg_pool2d", "adaptive_max_pool2d",
           "interpolate", "pad", "avg_pool2d_ext", "max_pool2d_ext"]


# ---------------------------------------------------------------- convolution
@_autocast.lower
def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """1-D convolution of (N, C, L) (or unbatched (C, L)) with weight (O, C/groups, k)."""
    if x.ndim == 2 and weight.ndim == 3:
        return squeeze(conv1d(unsqueeze(x, 0), weight, bias, stride, padding, dilation, groups), 0)
    if x.ndim != 3 or weight.ndim != 3:
        raise ShapeError(f"conv1d: expected 3-D input (N, C, L) and weight (O, C/groups, k), got "
                         f"{tuple(x.shape)} and {tuple(weight.shape)}")
    check_conv_args("conv1d", x, weight, bias, stride, padding, dilation, groups)
    (stride,), (dilation,) = _ntuple(stride, 1, "stride", "conv1d"), _ntuple(dilation, 1, "dilation", "conv1d")
    if isinstance(padding, str):
        x, padding = string_padding("conv1d", x, padding, (weight.shape[2],), stride != 1, (dilation,))
    (padding,) = _ntuple(padding, 1, "padding", "conv1d")
    out = conv2d(unsqueeze(x, 2), unsqueeze(weight, 2), bias, (1, stride), (0, padding),
                 (1, dilation), groups)
    return squeeze(out, 2)


@_autocast.lower
def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1,
                     dilation=1):
    """Transposed 2-D convolution; weight (C_in, C_out/groups, kh, kw) as in PyTorch."""
    if x.ndim == 3 and weight.ndim == 4:
        return squeeze(conv_transpose2d(unsqueeze(x, 0), weight, bias, stride, padding,
                                        output_padding, groups, dilation), 0)
    if x.ndim != 4 or weight.ndim != 4:
        raise ShapeError(f"conv_transpose2d: expected 4-D input and weight, got {tuple(x.shape)} "
                         f"and {tuple(weight.shape)}")
    n, c, h, w = x.shape
    ci, og, kh, kw = weight.shape
    if groups < 1 or c != ci or c % groups:
        raise ShapeError(f"conv_transpose2d: input of shape {tuple(x.shape)} has {c} channels but "
                         f"weight {tuple(weight.shape)} expects {ci} (groups={groups}, which must "
                         f"divide the input channels)")
    o = og * groups
    if bias is not None and tuple(bias.shape) != (o,):
        raise ShapeError(f"conv_transpose2d: bias of shape {tuple(bias.shape)} should be ({o},)")
    s, p, op, d = _pair(stride), _pair(padding), _pair(output_padding), _pair(dilation)
    for name, v, least in (("stride", s, 1), ("dilation", d, 1), ("padding", p, 0),
                           ("output_padding", op, 0)):
        if min(v) < least:
            raise ValueError(f"conv_transpose2d: {name} must be {'positive' if least else 'non-negative'}, "
                             f"got {v}")
    if op[0] >= max(s[0], d[0]) or op[1] >= max(s[1], d[1]):
        raise ValueError(f"conv_transpose2d: output_padding {op} must be smaller than stride {s} "
                         f"or dilation {d}")
    oh = (h - 1) * s[0] - 2 * p[0] + d[0] * (kh - 1) + op[0] + 1
    ow = (w - 1) * s[1] - 2 * p[1] + d[1] * (kw - 1) + op[1] + 1
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"conv_transpose2d: output size ({oh}, {ow}) is not positive")
    cg = c // groups
    # The columns in conv2d's GEMM layout [O*kh*kw, N*H*W]: one product over the whole
    # batch per group, then col2im (a weight broadcast against [N, ...] ran N thin products)
    if groups == 1 and op[0] < s[0] and op[1] < s[1]:
        # the input gradient of conv2d with this weight (ops/conv_gemm.py), run by blocks
        out = conv2d_xgrad(x, weight, (oh, ow), s, p, d)
        return out if bias is None else out + reshape(bias, (1, o, 1, 1))
    xc = permute(x, (1, 0, 2, 3))
    if groups == 1:   # 2-D operands: numpy's stacked matmul leaves BLAS for a transposed one
        cols = matmul(transpose(reshape(weight, (c, o * kh * kw)), 0, 1), reshape(xc, (c, n * h * w)))
    else:
        xs = reshape(xc, (groups, cg, n * h * w))
        wg = reshape(weight, (groups, cg, og * kh * kw))
        cols = reshape(matmul(transpose(wg, 1, 2), xs), (o * kh * kw, n * h * w))
    if op[0] < s[0] and op[1] < s[1]:
        out = fold(cols, (oh, ow), (kh, kw), s, p, d, layout="gemm")
    else:
        # output_padding of a stride or more (allowed below the dilation): fold's output size
        # fixes its window count, which would grow by one; fold the whole unpadded result
        # (windows at i * stride) and crop `padding` before and after, less output_padding
        # after (zero rows past its end, where no window reaches).
        fh, fw = (h - 1) * s[0] + d[0] * (kh - 1) + 1, (w - 1) * s[1] + d[1] * (kw - 1) + 1
        out = pad(fold(cols, (fh, fw), (kh, kw), s, (0, 0), d, layout="gemm"),
                  (-p[1], op[1] - p[1], -p[0], op[0] - p[0]))
    if bias is not None:
        out = out + reshape(bias, (1, o, 1, 1))
    return out


# ---------------------------------------------------------------- pooling
def global_mean_other_rank(x, n: int, output_size):
    """PyTorch's adaptive_avg_pool{n}d of an output of all ones is the mean over the last `n`
    dims, taken before its rank and size checks: an input of a rank other than n+1 or n+2,
    or with an empty dim, gives that mean with such an output (nan where empty). None
    otherwise; then an empty non-batch dim is refused, as there."""
    if x.ndim in (n + 1, n + 2) and all(d != 0 for d in x.shape[x.ndim - n:]):
        return None
    if isinstance(output_size, int):
        sizes = (output_size,) * n
    else:
        sizes = tuple(output_size)
        if len(sizes) != n or x.ndim <= n:
            return None   # (the rank check below names the problem)
        sizes = tuple(x.shape[x.ndim - n + i] if s is None else s for i, s in enumerate(sizes))
    if x.ndim < n or any(s != 1 for s in sizes):
        if x.ndim in (n + 1, n + 2) and not all(d != 0 for d in x.shape[-(n + 1) if x.ndim == n + 2 else 0:]):
            raise ShapeError(f"adaptive_avg_pool{n}d: expected input to have non-zero size for non-batch "
                             f"dims, got shape {tuple(x.shape)}")
        return None
    from .reductions import mean
    return mean(x, tuple(range(-n, 0)), keepdim=True)


@takes("x:input")
def adaptive_avg_pool2d(x, output_size):
    if (out := widened(adaptive_avg_pool2d, x, output_size)) is not None:
        return out
    out = global_mean_other_rank(x, 2, output_size)
    if out is not None:
        return out
    x4, unbatched = _batched(x, 2, "adaptive_avg_pool2d")
    h, w = x4.shape[2], x4.shape[3]
    oh, ow = _out_sizes(output_size, (h, w), "adaptive_avg_pool2d")
    if oh == 0 or ow == 0:           # an empty output, as PyTorch gives
        out = getitem(x4, (slice(None), slice(None), slice(0, oh), slice(0, ow)))
    elif h % oh == 0 and w % ow == 0:  # equal bins: one unfold + mean, like avg_pool2d
        out = avg_pool2d_ext(x4, (h // oh, w // ow))
    else:
        ah, aw = (tensor(_avg_matrix(i, o), dtype=x4.dtype, device=x4.device) for i, o in ((h, oh), (w, ow)))
        out = matmul(matmul(ah, x4), transpose(aw, 0, 1))
    return squeeze(out, 0) if unbatched else out


def _bin_index(size: int, out: int, device):
    """(out, kmax) indices covering each bin; short bins repeat their last index (harmless
    for a max)."""
    start, end = _bins(size, out)
    kmax = int((end - start).max())
    idx = np.minimum(start[:, None] + np.arange(kmax), end[:, None] - 1)
    return tensor(idx.reshape(-1), device=device), kmax


@takes("x:input")
def adaptive_max_pool2d(x, output_size, return_indices: bool = False):
    """Max over PyTorch's adaptive bins; with `return_indices` also each bin's first maximum
    (row-major) as a flat index into the input's H*W, as PyTorch gives it."""
    x4, unbatched = _batched(x, 2, "adaptive_max_pool2d")
    n, c, h, w = x4.shape
    oh, ow = _out_sizes(output_size, (h, w), "adaptive_max_pool2d")
    idx = None
    if oh == 0 or ow == 0:           # an empty output, as PyTorch gives
        out = getitem(x4, (slice(None), slice(None), slice(0, oh), slice(0, ow)))
        if return_indices:
            idx = cast(out, _dt.int64)
    elif h % oh == 0 and w % ow == 0:
        out = max_pool2d(x4, (h // oh, w // ow), return_indices=return_indices)
        if return_indices:
            out, idx = out
    else:
        ih, kh = _bin_index(h, oh, x4.device)
        iw, kw = _bin_index(w, ow, x4.device)
        rows = getitem(x4, (slice(None), slice(None), ih))
        out = amax(reshape(getitem(amax(reshape(rows, (n, c, oh, kh, w)), 3), (Ellipsis, iw)),
                           (n, c, oh, ow, kw)), 4)
        if return_indices:
            idx = _bin_argmax(reshape(getitem(rows, (Ellipsis, iw)), (n, c, oh, kh, ow, kw)), h, w, oh, ow, kw,
                              x4.device)
    if unbatched:
        out = squeeze(out, 0)
        idx = None if idx is None else squeeze(idx, 0)
    return (out, idx) if return_indices else out


def _bin_argmax(bins, h: int, w: int, oh: int, ow: int, kw: int, device):
    """The flat H*W index of each bin's first maximum from the bins (N, C, OH, KH, OW, KW)
    of `_bin_index`. A short bin's repeated last entries equal an earlier one, so the
    first maximum is always a real entry."""
    n, c = bins.shape[0], bins.shape[1]
    off = argmax(reshape(permute(bins, (0, 1, 2, 4, 3, 5)), (n, c, oh, ow, -1)), 4)  # (N, C, OH, OW)
    start_h, start_w = _bins(h, oh)[0], _bins(w, ow)[0]
    base = tensor((start_h[:, None] * w + start_w[None, :]).astype(np.int64), device=device)
    return base + (off // kw) * w + off % kw


def _pool_geometry(size, k, s, p, ceil_mode):
    """Output length and the extra right padding ceil_mode needs (PyTorch's rule: the last
    window must start inside the input or the left padding)."""
    if ceil_mode:
        out = -(-(size + 2 * p - k) // s) + 1
        if (out - 1) * s >= size + p:
            out -= 1
    else:
        out = (size + 2 * p - k) // s + 1
    extra = max(0, (out - 1) * s + k - (size + 2 * p))
    return out, extra


def _counts(size, k, s, p, out, include_pad):
    """Divisor per output position: window cells inside the input (or the padded input)."""
    start = np.arange(out) * s - p
    end = np.minimum(start + k, size + p)
    if include_pad:
        return (end - start).astype(np.float64)
    return (np.minimum(end, size) - np.maximum(start, 0)).astype(np.float64)


def avg_pool2d_ext(x, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                   count_include_pad: bool = True, divisor_override=None):
    """avg_pool2d with PyTorch's ceil_mode, count_include_pad and divisor_override."""
    x4, unbatched = _batched(x, 2, "avg_pool2d")
    k = _pair(kernel_size)
    s = k if stride is None or stride == [] else _pair(stride)
    p = _pair(padding)
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise ValueError(f"avg_pool2d: padding {p} should be at most half of kernel size {k}")
    n, c, h, w = x4.shape
    oh, eh = _pool_geometry(h, k[0], s[0], p[0], ceil_mode)
    ow, ew = _pool_geometry(w, k[1], s[1], p[1], ceil_mode)
    if eh or ew:
        x4 = pad(x4, (0, ew, 0, eh))
    cols = reshape(unfold(x4, k, s, p), (n, c, k[0] * k[1], oh * ow))
    total = reshape(_sum(cols, 2), (n, c, oh, ow))
    if divisor_override is not None:
        out = total / float(divisor_override)
    else:
        div = np.outer(_counts(h, k[0], s[0], p[0], oh, count_include_pad),
                       _counts(w, k[1], s[1], p[1], ow, count_include_pad))
        out = total * tensor((1.0 / div), dtype=x4.dtype, device=x4.device)
    return squeeze(out, 0) if unbatched else out


def max_pool2d_ext(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
                   return_indices: bool = False):
    """max_pool2d with ceil_mode (the extra windows see -inf past the input); indices count
    in the input's H*W, not the padded one's."""
    x4, unbatched = _batched(x, 2, "max_pool2d")
    k, d = _pair(kernel_size), _pair(dilation)
    s = k if stride is None or stride == [] else _pair(stride)
    p = _pair(padding)
    ke = (d[0] * (k[0] - 1) + 1, d[1] * (k[1] - 1) + 1)
    w = x4.shape[3]
    oh, eh = _pool_geometry(x4.shape[2], ke[0], s[0], p[0], ceil_mode)
    ow, ew = _pool_geometry(w, ke[1], s[1], p[1], ceil_mode)
    if eh or ew:
        x4 = pad(x4, (0, ew, 0, eh), value=-math.inf)
    out = max_pool2d(x4, k, s, p, d, return_indices=return_indices)
    if return_indices:
        out, idx = out
        if ew:   # every window holds an input element: its maximum is never in the -inf margin
            idx = (idx // (w + ew)) * w + idx % (w + ew)
        return (squeeze(out, 0), squeeze(idx, 0)) if unbatched else (out, idx)
    return squeeze(out, 0) if unbatched else out


# ---------------------------------------------------------------- padding
def _pad_index(size: int, before: int, after: int, mode: str):
    j = np.arange(-before, size + after)
    if mode == "replicate":
        return np.clip(j, 0, size - 1)
    if mode == "circular":
        return np.mod(j, size)
    # reflect: mirror without repeating the edge
    period = 2 * (size - 1)
    j = np.mod(j, period) if period else np.zeros_like(j)
    return np.where(j >= size, period - j, j)


def pad(input, pad, mode: str = "constant", value=None):
    """PyTorch's F.pad: ``pad`` lists (before, after) pairs starting from the last dim;
    modes constant (negative values crop), reflect, replicate, circular."""
    # (a symbolic amount, ``8 - x.shape[1]``, stays one: its sign is guarded, not its value)
    pad = tuple(p if isinstance(p, Sym) else int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ArgumentError(f"pad: padding length must be even and at most 2 * input.ndim "
                         f"({2 * input.ndim}), got {len(pad)}")
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError(f"pad: mode {mode!r} is not supported (constant, reflect, "
                                  f"replicate, circular)")
    if mode != "constant" and value not in (None, 0, 0.0):
        raise ValueError(f"pad: value= only applies to mode='constant', got mode={mode!r}")
    from .creation import full
    out = input
    for i in range(len(pad) // 2):
        dim = input.ndim - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        size = out.shape[dim]
        if mode == "constant":
            if before < 0 or after < 0:  # negative padding crops
                out = getitem(out, (slice(None),) * dim + (slice(max(-before, 0),
                                                                 size - max(-after, 0)),))
                before, after = max(before, 0), max(after, 0)
            parts = []
            for k in (before, None, after):
                if k is None:
                    parts.append(out)
                elif k > 0:
                    shape = list(out.shape)
                    shape[dim] = k
                    parts.append(full(tuple(shape), 0.0 if value is None else value,
                                      dtype=out.dtype, device=out.device))
            if len(parts) > 1:
                out = cat(parts, dim)
            continue
        if mode == "reflect" and (before >= size or after >= size):
            raise ValueError(f"pad: reflect padding ({before}, {after}) must be smaller than the "
                             f"padded dim {dim} of size {size}")
        if mode == "circular" and (before > size or after > size):
            raise ValueError(f"pad: circular padding ({before}, {after}) must be at most the size "
                             f"{size} of dim {dim}")
        if before or after:
            idx = tensor(_pad_index(size, before, after, mode), device=out.device)
            out = getitem(out, (slice(None),) * dim + (idx,))
    return input.clone() if out is input else out   # (no padding: new memory, as PyTorch's)

