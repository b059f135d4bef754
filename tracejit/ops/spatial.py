"""Spatial composites beyond conv2d: conv1d, conv_transpose2d, 2-D adaptive max pooling,
max pooling with ceil_mode, padding modes (adaptive_avg_pool2d is ops/pooling_nd.py's).

Everything here is written with primitives that already have VJPs:

- ``conv1d`` is conv2d's primitive on 3-D operands (one record, run as a height-1 image); ``conv_transpose2d`` is a matmul with the
  weight followed by ``fold`` (col2im), which is exactly the gradient of conv2d with
  respect to its input, so it goes through BLAS like conv2d does;
- adaptive max pooling over equal bins is max_pool2d; other bins are ops/pooling_nd.py's
  gathered windows;
- reflect/replicate/circular padding are gathers with constant index vectors (getitem
  with an integer tensor).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ArgumentError, ShapeError
from ..shapes import Sym
from .composite import check_conv_args, checked_conv2d, max_pool2d, string_padding
from .conv import _ntuple, _pair, unbatched
from .conv_gemm import conv2d_xgrad
from .creation import tensor
from .indexing import getitem
from .interpolate import interpolate  # noqa: F401  (re-exported: F.interpolate's old home)
from .pooling_nd import _adaptive_max2d, _batched, _equal_bins, _out_sizes, adaptive_avg_pool2d, pool_geometry
from .shape import cat, expand, flip, narrow, reshape, squeeze, unsqueeze
from . import autocast as _autocast
from .dtype_checks import takes
from .eager import trace_hooks

__all__ = ["conv1d", "conv_transpose2d", "adaptive_avg_pool2d", "adaptive_max_pool2d",
           "interpolate", "pad", "max_pool2d_ext"]


# ---------------------------------------------------------------- convolution
@_autocast.lower
def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """1-D convolution of (N, C, L) (or unbatched (C, L)) with weight (O, C/groups, k)."""
    if unbatched("conv1d", x, weight, 1, "3-D input (N, C, L) and weight (O, C/groups, k)"):
        return squeeze(conv1d(unsqueeze(x, 0), weight, bias, stride, padding, dilation, groups), 0)
    check_conv_args("conv1d", x, weight, bias, stride, padding, dilation, groups)
    stride, dilation = _ntuple(stride, 1, "stride", "conv1d"), _ntuple(dilation, 1, "dilation", "conv1d")
    if isinstance(padding, str):
        x, padding = string_padding("conv1d", x, padding, (weight.shape[2],), stride != (1,), dilation)
    return checked_conv2d(x, weight, bias, stride, _ntuple(padding, 1, "padding", "conv1d"), dilation, groups)


@_autocast.lower
def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1,
                     dilation=1):
    """Transposed 2-D convolution; weight (C_in, C_out/groups, kh, kw) as in PyTorch."""
    if unbatched("conv_transpose2d", x, weight, 2, "4-D input and weight"):
        return squeeze(conv_transpose2d(unsqueeze(x, 0), weight, bias, stride, padding,
                                        output_padding, groups, dilation), 0)
    c, h, w = x.shape[1:]
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
    # the input gradient of conv2d with this weight (ops/conv_gemm.py), run by blocks
    if op[0] < s[0] and op[1] < s[1]:
        out = conv2d_xgrad(x, weight, (oh, ow), s, p, d, groups)
    else:
        # output_padding of a stride or more (allowed below the dilation): the output size
        # fixes the window count, which would grow by one; take the whole unpadded result
        # (windows at i * stride) and crop `padding` before and after, less output_padding
        # after (zero rows past its end, where no window reaches).
        fh, fw = (h - 1) * s[0] + d[0] * (kh - 1) + 1, (w - 1) * s[1] + d[1] * (kw - 1) + 1
        out = pad(conv2d_xgrad(x, weight, (fh, fw), s, (0, 0), d, groups),
                  (-p[1], op[1] - p[1], -p[0], op[0] - p[0]))
    if bias is not None:
        out = out + reshape(bias, (1, o, 1, 1))
    return out


# ---------------------------------------------------------------- pooling
@takes("x:input")
def adaptive_max_pool2d(x, output_size, return_indices: bool = False):
    """Max over PyTorch's adaptive bins; with `return_indices` also each bin's first maximum
    (row-major) as a flat index into the input's H*W, as PyTorch gives it."""
    if x.ndim in (3, 4):
        h, w = x.shape[-2], x.shape[-1]
        oh, ow = _out_sizes(output_size, (h, w), "adaptive_max_pool2d")
        if isinstance(h, int) and isinstance(w, int) and _equal_bins(h, oh) and _equal_bins(w, ow):
            return max_pool2d(x, (h // oh, w // ow), return_indices=return_indices)
    return _adaptive_max2d(x, output_size, return_indices)


def max_pool2d_ext(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
                   return_indices: bool = False):
    """max_pool2d with ceil_mode (the extra windows see -inf past the input); indices count
    in the input's H*W, not the padded one's."""
    x4, unbatched = _batched(x, 2, "max_pool2d")
    k, d = _pair(kernel_size), _pair(dilation)
    s = k if stride is None or stride == [] else _pair(stride)
    p = _pair(padding)
    w = x4.shape[3]
    (oh, eh), (ow, ew) = (pool_geometry(x4.shape[2 + a], d[a] * (k[a] - 1) + 1, s[a], p[a],
                                        ceil_mode) for a in (0, 1))
    if eh or ew:
        x4 = pad(x4, (0, ew, 0, eh), value=-math.inf)
    out = max_pool2d(x4, k, s, p, d, return_indices=return_indices)
    if isinstance(oh, Sym) or isinstance(ow, Sym):
        out = tuple(r[:, :, :oh, :ow] for r in out) if return_indices else out[:, :, :oh, :ow]
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
    if mode == "circular":   # (PyTorch crops the negative amounts first, then wraps)
        lo, hi = max(-before, 0), size - max(-after, 0)
        return lo + np.mod(j + before - max(before, 0), hi - lo)
    # reflect: mirror without repeating the edge
    period = 2 * (size - 1)
    j = np.mod(j, period) if period else np.zeros_like(j)
    return np.where(j >= size, period - j, j)


def pad(input, pad, mode: str = "constant", value=None):
    """PyTorch's F.pad: ``pad`` lists (before, after) pairs starting from the last dim;
    modes constant (negative values crop), reflect, replicate, circular."""
    # (a symbolic amount, ``8 - x.shape[1]`` or a changing int argument, stays one: its sign
    # is guarded, not its value)
    pad = tuple(p if isinstance(p, Sym) else trace_hooks.size_of(p) if getattr(p, "_trace", None) is not None
                else int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ArgumentError(f"pad: padding length must be even and at most 2 * input.ndim "
                         f"({2 * input.ndim}), got {len(pad)}")
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError(f"pad: mode {mode!r} is not supported (constant, reflect, "
                                  f"replicate, circular)")
    n = len(pad) // 2   # (PyTorch's reflect, replicate and circular pad 1-3 dims after a channel dim)
    if mode != "constant" and not (n <= 3 and input.ndim in (n + 1, n + 2)):
        raise NotImplementedError(f"pad: mode {mode!r} pads the last 1-3 dims of an (N, C, ...) or (C, ...) "
                                  f"input: a padding of length {len(pad)} needs a {n + 1}-D or {n + 2}-D "
                                  f"input, got {input.ndim}-D")
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
                if all(type(v) is int for v in (size, before, after)) and size + min(before, 0) + min(after, 0) < 0:
                    raise ShapeError(f"pad: padding ({before}, {after}) crops more than the {size} "
                                     f"elements of dim {dim}")
                out = getitem(out, (slice(None),) * dim + (slice(max(-before, 0),
                                                                 size - max(-after, 0)),))
                before, after = max(before, 0), max(after, 0)
            parts = []
            for k in (before, None, after):
                if k is None:
                    parts.append(out)
                # (an amount never below 0, a remainder: its block, empty or not, spares a guard)
                elif isinstance(k, Sym) and k.lower_bound() == 0 or k > 0:
                    shape = list(out.shape)
                    shape[dim] = k
                    parts.append(full(tuple(shape), 0.0 if value is None else value,
                                      dtype=out.dtype, device=out.device))
            if len(parts) > 1:
                out = cat(parts, dim)
            continue
        if mode == "reflect" and (before >= size or after >= size):
            raise ArgumentError(f"pad: reflect padding ({before}, {after}) must be smaller than the "
                                f"padded dim {dim} of size {size}")
        kept = size - max(-before, 0) - max(-after, 0)   # (circular wraps what cropping keeps)
        if mode == "circular" and (before > kept or after > kept):
            raise ArgumentError(f"pad: circular padding ({before}, {after}) must be at most the size "
                                f"{kept} of dim {dim} after cropping")
        if any(isinstance(v, Sym) for v in (size, before, after)):
            if not (before < 0 or after < 0):   # (a symbolic amount's sign: guarded)
                out = _pad_by_slices(out, dim, size, before, after, mode)
                continue
            size, before, after = int(size), int(before), int(after)
        if before or after:
            idx = tensor(_pad_index(size, before, after, mode), device=out.device)
            out = getitem(out, (slice(None),) * dim + (idx,))
    return input.clone() if out is input else out   # (no padding: new memory, as PyTorch's)


def _pad_by_slices(x, dim: int, size, before, after, mode: str):
    """`pad`'s reflect, replicate or circular padding of `dim` by amounts >= 0 where a size or
    amount is symbolic (a changing length): slices of `x` beside it, so one capture serves
    every length, where `_pad_index`'s constant index vector would fix the size."""
    def piece(k, at_start: bool):
        if mode == "reflect":   # (the mirror leaves out the edge element)
            return flip(narrow(x, dim, 1 if at_start else size - 1 - k, k), dim)
        if mode == "replicate":
            edge = narrow(x, dim, 0 if at_start else size - 1, 1)
            return expand(edge, tuple(k if i == dim else -1 for i in range(x.ndim)))
        return narrow(x, dim, size - k if at_start else 0, k)   # circular: the other end
    parts = [piece(before, True)] if isinstance(before, Sym) or before > 0 else []
    parts.append(x)
    if isinstance(after, Sym) or after > 0:
        parts.append(piece(after, False))
    return cat(parts, dim) if len(parts) > 1 else x
