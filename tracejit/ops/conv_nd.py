"""Convolutions in three dimensions and the transposed ones in one and three, as composites
of the 2-D ops (composite.py's conv2d, spatial.py's conv_transpose2d):

- ``conv3d``: one conv2d per kernel depth tap over every output depth at once (the depth
  slices the tap reads, strided, stacked into the batch), summed; a kernel over depth
  alone is one conv2d over (depth, H*W) planes;
- ``conv_transpose3d``: one conv_transpose2d per kernel depth tap, each result spread to
  the output depths that tap writes (input depth times stride, plus the tap's offset),
  summed, then cropped by the padding;
- ``conv_transpose1d`` is conv_transpose2d over a height-1 image; ``conv_tbc`` is conv1d on
  a (time, batch, channel) input.
"""
from __future__ import annotations

from ..errors import ShapeError
from .composite import conv2d, string_padding
from .conv import _ntuple, unbatched
from .shape import cat, permute, reshape, squeeze, unsqueeze
from .spatial import conv1d, conv_transpose2d, pad
from . import autocast as _autocast

__all__ = ["conv3d", "conv_transpose1d", "conv_transpose3d", "conv_tbc"]


@_autocast.lower
def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """3-D convolution of (N, C, D, H, W) (or unbatched (C, D, H, W)) with weight
    (O, C/groups, kd, kh, kw)."""
    if unbatched("conv3d", input, weight, 3, "5-D input (N, C, D, H, W) and weight"):
        return squeeze(conv3d(unsqueeze(input, 0), weight, bias, stride, padding, dilation, groups), 0)
    s, d = _ntuple(stride, 3, "stride", "conv3d"), _ntuple(dilation, 3, "dilation", "conv3d")
    kd, kh, kw = weight.shape[2:]
    if isinstance(padding, str):
        input, padding = string_padding("conv3d", input, padding, (kd, kh, kw), s != (1, 1, 1), d)
    p = _ntuple(padding, 3, "padding", "conv3d")
    n, c, depth = input.shape[0], input.shape[1], input.shape[2]
    if c != weight.shape[1] * groups:
        raise ShapeError(f"conv3d: input of shape {tuple(input.shape)} has {c} channels but weight "
                         f"{tuple(weight.shape)} with groups={groups} expects {weight.shape[1] * groups}")
    if kh == kw == 1 and s[1:] == (1, 1) and p[1:] == (0, 0) and all(type(v) is int for v in input.shape):
        # a kernel over depth alone (R(2+1)D's (3, 1, 1)): one conv2d over (depth, H*W)
        # planes, padding included, its result already (N, O, OD, H, W) row-major
        h, w = input.shape[3], input.shape[4]
        y = conv2d(reshape(input, (n, c, depth, h * w)), reshape(weight, tuple(weight.shape[:3]) + (1,)),
                   bias, (s[0], 1), (p[0], 0), (d[0], 1), groups)
        return reshape(y, tuple(y.shape[:3]) + (h, w))
    if p[0]:
        input = pad(input, (0, 0, 0, 0, p[0], p[0]))
        depth += 2 * p[0]
    od = (depth - d[0] * (kd - 1) - 1) // s[0] + 1
    if od <= 0:
        raise ShapeError(f"conv3d: input depth {depth} is too small for kernel depth {kd}")
    out = None
    for t in range(kd):
        start = t * d[0]
        slab = input[:, :, start:start + s[0] * (od - 1) + 1:s[0]]          # (N, C, OD, H, W)
        slab = reshape(permute(slab, (0, 2, 1, 3, 4)), (n * od, c) + tuple(slab.shape[3:]))
        y = conv2d(slab, weight[:, :, t], None, s[1:], p[1:], d[1:], groups)
        out = y if out is None else out + y
    o, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    out = permute(reshape(out, (n, od, o, oh, ow)), (0, 2, 1, 3, 4))
    if bias is not None:
        out = out + reshape(bias, (1, o, 1, 1, 1))
    return out


@_autocast.lower
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1,
                     dilation=1):
    """Transposed 1-D convolution; weight (C_in, C_out/groups, k)."""
    if unbatched("conv_transpose1d", input, weight, 1, "3-D input and weight"):
        return squeeze(conv_transpose1d(unsqueeze(input, 0), weight, bias, stride, padding,
                                        output_padding, groups, dilation), 0)
    (s,), (p,), (op,), (d,) = (_ntuple(v, 1, what, "conv_transpose1d") for v, what in (
        (stride, "stride"), (padding, "padding"), (output_padding, "output_padding"), (dilation, "dilation")))
    out = conv_transpose2d(unsqueeze(input, 2), unsqueeze(weight, 2), bias, (1, s), (0, p), (0, op), groups, (1, d))
    return squeeze(out, 2)


@_autocast.lower
def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1,
                     dilation=1):
    """Transposed 3-D convolution; weight (C_in, C_out/groups, kd, kh, kw)."""
    if unbatched("conv_transpose3d", input, weight, 3, "5-D input and weight"):
        return squeeze(conv_transpose3d(unsqueeze(input, 0), weight, bias, stride, padding,
                                        output_padding, groups, dilation), 0)
    s, p = _ntuple(stride, 3, "stride", "conv_transpose3d"), _ntuple(padding, 3, "padding", "conv_transpose3d")
    op, d = (_ntuple(output_padding, 3, "output_padding", "conv_transpose3d"),
             _ntuple(dilation, 3, "dilation", "conv_transpose3d"))
    n, c, depth, h, w = input.shape
    kd = weight.shape[2]
    full = (depth - 1) * s[0] + d[0] * (kd - 1) + 1 + op[0]     # before cropping the padding
    size = tuple((i - 1) * st - 2 * pd + dl * (k - 1) + 1 + o
                 for i, st, pd, dl, k, o in zip((depth, h, w), s, p, d, weight.shape[2:], op))
    if min(size) <= 0:
        raise ShapeError(f"conv_transpose3d: output size {size} is not positive (input size "
                         f"{(depth, h, w)}): the padding removes more than the kernel adds")
    slices = reshape(permute(input, (0, 2, 1, 3, 4)), (n * depth, c, h, w))
    out = None
    for t in range(kd):
        y = conv_transpose2d(slices, weight[:, :, t], None, s[1:], p[1:], op[1:], groups, d[1:])
        o, oh, ow = y.shape[1], y.shape[2], y.shape[3]
        y = permute(reshape(y, (n, depth, o, oh, ow)), (0, 2, 1, 3, 4))    # (N, O, D, oh, ow)
        if s[0] > 1:   # input depth i lands at i * stride: zeros between
            y = unsqueeze(y, 3)
            gap = y * 0.0
            y = cat([y] + [gap] * (s[0] - 1), 3)
            y = reshape(y, (n, o, depth * s[0], oh, ow))[:, :, :(depth - 1) * s[0] + 1]
        before = t * d[0]
        after = full - before - y.shape[2]
        y = pad(y, (0, 0, 0, 0, before, after))
        out = y if out is None else out + y
    if p[0]:
        out = out[:, :, p[0]:full - p[0]]
    if bias is not None:
        out = out + reshape(bias, (1, -1, 1, 1, 1))
    return out


def conv_tbc(input, weight, bias, pad: int = 0):
    """1-D convolution of a (time, batch, channel) input with weight (k, C_in, C_out)."""
    if input.ndim != 3 or weight.ndim != 3:
        raise ShapeError(f"conv_tbc: expected 3-D input and weight, got {tuple(input.shape)} and "
                         f"{tuple(weight.shape)}")
    x = permute(input, (1, 2, 0))                       # (B, C, T)
    w = permute(weight, (2, 1, 0))                      # (O, C, k)
    return permute(conv1d(x, w, bias, 1, pad), (2, 0, 1))
