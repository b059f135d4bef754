"""``F.interpolate``: nearest, nearest-exact, (bi/tri)linear, bicubic, lanczos and area resizing
of (N, C, L), (N, C, H, W) and (N, C, D, H, W) inputs.

Every mode but nearest is separable: each spatial axis is multiplied by a small constant
(out, in) matrix built in numpy, so resizing is a few matmuls and its gradient is the
transposed matmuls. The matrices follow PyTorch's index arithmetic: the source
coordinate of an output index, clamping at the borders, and for bicubic the cubic
convolution with A = -0.75 over four taps whose indices are clamped to the input.
Nearest modes are gathers with constant index vectors. Of symbolic sizes each axis is
instead a sum of gathers of its taps, indices and weights traced (`_traced_axis`). With ``antialias=True`` the
bilinear and bicubic matrices are PyTorch's (and PIL's) filters: when downsampling, the
triangle or cubic (A = -0.5) kernel is stretched by the scale, so each output averages
every input it covers; the taps inside the input are weighted and normalized to sum 1.
uint8 bilinear and bicubic are PyTorch's fixed-point passes: the weights rounded to int16
at the largest precision that fits, the last axis first, each pass rounded and clamped.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ..errors import ShapeError, UnsupportedDTypeError
from ..shapes import Sym, as_dim
from .creation import arange, tensor
from .elementwise import cast, clamp, floor
from .indexing import getitem, index_select
from .linalg import matmul
from .math_more import sinc as _sinc
from .pooling_nd import _index, avg_weights
from .sampling import _cubic
from .shape import clone, reshape, transpose
from .dtype_checks import takes
from . import autocast as _autocast

__all__ = ["interpolate"]

_SEPARABLE = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3, "lanczos": 2}
_HALF_WIDTH = {"bilinear": 1.0, "bicubic": 2.0, "lanczos": 3.0}   # antialias filters at scale 1
_MODES = ("nearest", "nearest-exact", "area") + tuple(_SEPARABLE)


def _source(outsize: int, insize: int, align_corners: bool, scale: float, clamp: bool):
    dst = np.arange(outsize, dtype=np.float64)
    if align_corners:
        return dst * ((insize - 1) / (outsize - 1)) if outsize > 1 else np.zeros(outsize)
    src = (dst + 0.5) * scale - 0.5
    return np.maximum(src, 0.0) if clamp else src


def _linear_matrix(insize: int, outsize: int, align_corners: bool, scale: float) -> np.ndarray:
    src = _source(outsize, insize, align_corners, scale, clamp=True)
    i0 = np.minimum(np.floor(src).astype(np.int64), insize - 1)
    i1 = np.minimum(i0 + 1, insize - 1)
    frac = src - i0
    m = np.zeros((outsize, insize))
    rows = np.arange(outsize)
    np.add.at(m, (rows, i0), 1.0 - frac)
    np.add.at(m, (rows, i1), frac)
    return m


def _cubic_matrix(insize: int, outsize: int, align_corners: bool, scale: float) -> np.ndarray:
    src = _source(outsize, insize, align_corners, scale, clamp=False)
    base = np.floor(src)
    m = np.zeros((outsize, insize))
    rows = np.arange(outsize)
    for tap, (w, *_) in enumerate(_cubic(src - base)):
        idx = np.clip(base.astype(np.int64) - 1 + tap, 0, insize - 1)
        np.add.at(m, (rows, idx), w)
    return m


def _antialias_matrix(insize, outsize, align_corners: bool, scale, mode: str, dev=None):
    """The (out, in) matrix of PyTorch's antialias filter: row r weighs the inputs whose
    centres lie within the support around its centre, normalized to sum 1. numpy of static
    sizes (over each row's band of columns); of symbolic ones (`dev`: the input's device)
    the same arithmetic traced in float64 over every column, from the sizes of each call."""
    if align_corners:
        scale = (insize - 1) / (outsize - 1) if outsize != 1 else 0.0
    # (downsampling, scale >= 1: of symbolic sizes a guarded comparison of the sizes)
    down = scale >= 1.0 if isinstance(scale, float) else insize >= outsize
    half = _HALF_WIDTH[mode]
    support, invscale = (half * scale, 1.0 / scale) if down else (half, 1.0)
    center = scale * (_as(_index(outsize, dev), _dt.float64) + 0.5)
    lo = _as(center - support + 0.5, _dt.int64).clip(min=0)   # (C's truncation)
    hi = _as(center + support + 0.5, _dt.int64)
    if dev is None:   # (static: only the band of columns a row's support can reach)
        col = lo[:, None] + np.arange(int(math.ceil(support)) * 2 + 1)
        hi = np.minimum(hi, insize)
    else:
        col = _index(insize, dev)[None, :]
    x = abs((col - center[:, None] + 0.5) * invscale)
    if mode == "lanczos":   # Lanczos-3: sinc(x) sinc(x / 3)
        sinc_ = np.sinc if dev is None else _sinc
        w = sinc_(x) * sinc_(x / 3) * (x < 3)
    elif mode == "bicubic":
        a = -0.5
        w = (((a + 2) * x - (a + 3)) * x * x + 1) * (x < 1) + \
            ((((a * x - 5 * a) * x + 8 * a) * x - 4 * a) * ((x >= 1) & (x < 2)))
    else:
        w = (1.0 - x).clip(min=0.0)
    w = w * ((col >= lo[:, None]) & (col < hi[:, None]))
    total = w.sum(1)[:, None]
    w = w / (total + (total == 0))
    if dev is not None:
        return w
    m = np.zeros((outsize, insize))
    np.add.at(m, (np.repeat(np.arange(outsize), col.shape[1]), np.minimum(col, insize - 1).reshape(-1)),
              w.reshape(-1))
    return m


def _as(v, dtype):
    """`v` (a numpy array or a tensor) cast to `dtype`, truncating toward zero as C's."""
    return v.astype(dtype.np) if isinstance(v, np.ndarray) else cast(v, dtype)


def _output_size(input, size, scale_factor, nsp: int, least: int = 1):
    insz = [as_dim(v) for v in input.shape[2:]]   # (symbolic sizes stay symbolic: `_traced_axis`)
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    sf = None
    if size is not None:
        # one number for every dim: an int or a 0-d tensor (a size computed from a buffer)
        outsz = [as_dim(size)] * nsp if isinstance(size, Sym) or np.ndim(size) == 0 else [as_dim(v) for v in size]
        if len(outsz) != nsp:
            raise ValueError(f"interpolate: size {tuple(size)} should have one entry per spatial dim of "
                             f"input {tuple(input.shape)} ({nsp})")
    else:
        sf = [float(scale_factor)] * nsp if isinstance(scale_factor, (int, float)) else \
            [float(v) for v in scale_factor]
        if len(sf) != nsp or not min(sf) > 0:
            raise ValueError(f"interpolate: scale_factor {scale_factor!r} should give one positive factor "
                             f"per spatial dim of input {tuple(input.shape)}")
        outsz = [_scaled(i, f) for i, f in zip(insz, sf)]
    if len(outsz) != nsp or any(o < least for o in outsz) or any(i <= 0 for i in insz):   # (no min: of sizes)
        raise ValueError(f"interpolate: input and output sizes should be greater than 0, got input "
                         f"{tuple(input.shape)} and output size {tuple(outsz)}")
    return insz, outsz, sf


def _scaled(i, f: float):
    """PyTorch's ``floor(i * f)`` in float64; of a symbolic `i` the floor division it equals
    exactly (``f`` = p / 2^k with ``i * p`` below 2^53), else of its value."""
    p, q = f.as_integer_ratio()
    if isinstance(i, Sym) and p < 1 << 24 and q < 1 << 24:
        return i * p // q
    return int(math.floor(int(i) * f))


@_autocast.unlisted
@takes("input", also=(_dt.uint8,))
def interpolate(input, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                recompute_scale_factor=None, antialias: bool = False):
    """Resize the spatial dims of a 3-D, 4-D or 5-D (N, C, ...) input, as PyTorch's
    ``F.interpolate``: modes nearest, nearest-exact, linear (3-D), bilinear and bicubic
    (4-D, with or without antialias), lanczos (4-D, antialias), trilinear (5-D) and area."""
    nsp = input.ndim - 2
    if nsp not in (1, 2, 3):
        raise ShapeError(f"interpolate: expected a 3-D, 4-D or 5-D input, got shape {tuple(input.shape)}")
    if mode not in _MODES:
        raise NotImplementedError(f"interpolate: mode {mode!r} is not supported ({', '.join(_MODES)})")
    if mode in _SEPARABLE and _SEPARABLE[mode] != nsp:
        raise ValueError(f"interpolate: mode {mode!r} expects a {_SEPARABLE[mode] + 2}-D input, got "
                         f"shape {tuple(input.shape)}")
    if mode not in _SEPARABLE and align_corners is not None:
        raise ValueError("interpolate: align_corners only applies to the linear, bilinear, bicubic "
                         "and trilinear modes")
    if antialias and (mode not in _HALF_WIDTH or nsp != 2):
        raise ValueError("interpolate: anti-alias is restricted to the bilinear, bicubic and lanczos "
                         "modes and a 4-D input")
    if mode == "lanczos" and (align_corners or not antialias):
        raise ValueError("interpolate: lanczos mode requires antialias=True and align_corners=False")
    u8 = input.dtype is _dt.uint8 and not mode.startswith("nearest")
    if u8 and mode not in ("bilinear", "bicubic"):
        raise UnsupportedDTypeError(f"interpolate: mode {mode!r} takes a floating point input; uint8 "
                                    f"only with the nearest, nearest-exact, bilinear and bicubic modes")
    # (area is PyTorch's adaptive average pool, which gives an empty output for size 0)
    insz, outsz, sf = _output_size(input, size, scale_factor, nsp, 0 if mode == "area" else 1)
    if sf is None or recompute_scale_factor:
        scales = [i / o if o else 0.0 for i, o in zip(insz, outsz)]   # (o = 0: area, no outputs)
    else:
        scales = [1.0 / f for f in sf]
    # bf16/f16 interpolate in float32 and round once, as PyTorch's CPU kernels: rounding
    # between the separable passes (and the weights) would put ~15% of outputs an ulp off
    low = input.dtype in (_dt.bfloat16, _dt.float16) and not mode.startswith("nearest")
    out = input.to(_dt.float32) if low else input.to(_dt.float64) if u8 else input
    axes = list(enumerate(zip(insz, outsz, scales)))
    for axis, (i, o, sc) in (axes[::-1] if u8 else axes):
        dim = 2 + axis
        symbolic = isinstance(i, Sym) or isinstance(o, Sym)
        if symbolic and mode != "area" and not (antialias or u8):
            out = _traced_axis(out, dim, i, o, sc, mode, bool(align_corners))
            continue
        if mode.startswith("nearest"):
            idx = tensor(_nearest_source(i, o, sc, mode == "nearest-exact", nsp == 2), device=input.device)
            out = getitem(out, (slice(None),) * dim + (idx,))
            continue
        if isinstance(i, Sym) == isinstance(o, Sym) and i == o and (antialias or mode != "bicubic"):
            continue   # PyTorch's linear and antialias kernels copy an axis of unchanged size
        if mode == "area":   # (adaptive average pooling's)
            mt = avg_weights(i, o, out.dtype, input.device)
        else:
            if antialias:   # (uint8's fixed-point weights need the values: static sizes)
                m = _antialias_matrix(int(i) if u8 else i, int(o) if u8 else o, bool(align_corners),
                                      sc, mode, input.device if symbolic and not u8 else None)
            elif mode == "bicubic":
                m = _cubic_matrix(i, o, bool(align_corners), sc)
            else:
                m = _linear_matrix(i, o, bool(align_corners), sc)
            if u8:
                out = _fixed_point_pass(out, m, dim)
                continue
            mt = tensor(np.ascontiguousarray(m.T), dtype=out.dtype, device=input.device) \
                if isinstance(m, np.ndarray) else transpose(cast(m, out.dtype), 0, 1)
        out = transpose(matmul(transpose(out, dim, -1), mt), dim, -1)    # the axis last, times M^T
    if out is input:   # (every axis unchanged: a new tensor still, as PyTorch's)
        return clone(input)
    return out.to(input.dtype) if low or u8 else out


def _traced_axis(x, dim: int, i, o, sc, mode: str, align_corners: bool):
    """Resize axis `dim` of `x` from `i` to `o` (either symbolic: the constant matrices and
    gathers need sizes) by the same index arithmetic, traced: computed from the sizes of
    each call, as a sum of gathers of the taps, their indices clamped into the input. As
    PyTorch's CPU kernels: nearest's index in float32, the others' in float64 for a float64
    input, else in float32."""
    nearest = mode.startswith("nearest")
    dt = _dt.float64 if x.dtype is _dt.float64 and not nearest else _dt.float32
    dst = arange(o, dtype=dt, device=x.device)
    if align_corners and not nearest:
        sc = (i - 1) / (o - 1) if o != 1 else 0.0
    if nearest or align_corners:
        src = (dst + 0.5) * sc if mode == "nearest-exact" else dst * sc
    else:
        src = (dst + 0.5) * sc - 0.5
        src = src if mode == "bicubic" else clamp(src, min=0.0)
    base = floor(src)
    i0 = cast(base, _dt.int64)
    if nearest:
        return index_select(x, dim, i0 if mode == "nearest" else i0 - cast(i0 >= i, _dt.int64))
    if mode == "bicubic":   # (taps outside the input read its edge)
        taps = [(i0 + (k - 1), w) for k, (w, *_) in enumerate(_cubic(src - base))]
        taps = [(j * cast(j > 0, _dt.int64) - (j - i + 1) * cast(j >= i, _dt.int64), w) for j, w in taps]
    else:
        lam = src - base
        taps = [(i0, 1.0 - lam), (i0 + cast(i0 < i - 1, _dt.int64), lam)]
    out = None
    for idx, w in taps:
        w = reshape(cast(w, x.dtype), (-1,) + (1,) * (x.ndim - 1 - dim))
        term = index_select(x, dim, idx) * w
        out = term if out is None else out + term
    return out


def _nearest_source(i: int, o: int, sc: float, exact: bool, shortcuts: bool) -> np.ndarray:
    """Source index of each of `o` outputs, PyTorch's: the floor of the float32 product; its
    plain nearest 2-D kernel copies an unchanged size and halves at twice the size."""
    dst = np.arange(o, dtype=np.int64)
    if shortcuts and not exact and o == i:
        return dst
    if shortcuts and not exact and o == 2 * i:
        return dst >> 1
    f = dst.astype(np.float32) + np.float32(0.5) if exact else dst.astype(np.float32)
    return np.minimum(np.floor(f * np.float32(sc)).astype(np.int64), i - 1)


def _fixed_point_pass(x, m: np.ndarray, dim: int):
    """One uint8 pass along `dim` of float64 `x` holding integers: PyTorch's int16 weights
    at precision p, then (sum + 2^(p-1)) >> p clamped to [0, 255] (exact in float64)."""
    p = 0
    while p < 22 and int(0.5 + m.max() * (1 << (p + 1))) < (1 << 15):
        p += 1
    v = m * (1 << p)
    q = np.where(v < 0, np.ceil(v - 0.5), np.floor(v + 0.5))   # C's (int16)(v -+ 0.5)
    y = matmul(transpose(x, dim, -1), tensor(np.ascontiguousarray(q.T), dtype=_dt.float64, device=x.device))
    y = clamp(floor((y + float(1 << (p - 1))) * (1.0 / (1 << p))), 0.0, 255.0)
    return transpose(y, dim, -1)
