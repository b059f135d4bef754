"""``F.interpolate``: nearest, nearest-exact, (bi/tri)linear, bicubic, lanczos and area resizing
of (N, C, L), (N, C, H, W) and (N, C, D, H, W) inputs.

Every mode is separable, resizing one axis at a time by its taps (`_taps`): per output,
PyTorch's source indices and weights -- the source coordinate of an output index,
clamping at the borders, and for bicubic the cubic convolution with A = -0.75 over four
taps whose indices are clamped to the input. One definition serves every size: numpy
constants of static sizes, traced from each call's sizes for symbolic ones. Nearest
modes, and every mode of symbolic sizes, gather the taps and sum them weighted; the
others of static sizes sum the taps into a small constant (out, in) matrix, so resizing
is a few matmuls and its gradient the transposed matmuls. With ``antialias=True`` the
bilinear and bicubic matrices are PyTorch's (and PIL's) filters: when downsampling, the
triangle or cubic (A = -0.5) kernel is stretched by the scale, so each output averages
every input it covers; the taps inside the input are weighted and normalized to sum 1.
uint8 bilinear and bicubic are PyTorch's fixed-point passes: the weights rounded to int16
at the largest precision that fits, the last axis first, each pass rounded and clamped.
"""
from __future__ import annotations

import fractions
import functools
import math

import numpy as np

from .. import dtypes as _dt
from ..errors import ShapeError, UnsupportedDTypeError
from ..shapes import Sym, as_dim, facts_hooks
from .creation import tensor
from .elementwise import cast, clamp, floor
from .indexing import getitem
from .linalg import matmul
from .math_more import sinc as _sinc
from .pooling_nd import _index, avg_weights
from .sampling import _cubic
from .shape import clone, reshape, transpose
from .shape_params import size_arg
from .dtype_checks import takes
from . import autocast as _autocast

__all__ = ["interpolate"]

_SEPARABLE = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3, "lanczos": 2}
_HALF_WIDTH = {"bilinear": 1.0, "bicubic": 2.0, "lanczos": 3.0}   # antialias filters at scale 1
_MODES = ("nearest", "nearest-exact", "area") + tuple(_SEPARABLE)


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
    insz = [as_dim(v) for v in input.shape[2:]]   # (symbolic sizes stay symbolic: `_taps`)
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    sf = None
    if size is not None:
        # one number for every dim: an int or a 0-d tensor (a size computed from a buffer)
        # (a tuple first: np.ndim of one holding a traced int would read its value)
        outsz = [as_dim(size_arg(v)) for v in size] if isinstance(size, (tuple, list)) else \
            [as_dim(size_arg(size))] * nsp if isinstance(size, Sym) or np.ndim(size) == 0 else \
            [as_dim(v) for v in size]
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
        raise ShapeError(f"interpolate: input and output sizes should be greater than 0, got input "
                         f"{tuple(input.shape)} and output size {tuple(outsz)}")
    return insz, outsz, sf


def _scaled(i, f: float):
    """PyTorch's ``floor(i * f)`` in float64; of a symbolic `i` the floor division it equals
    exactly: ``i * p // q`` for ``f`` = p / 2^k with ``i * p`` below 2^53, or for a small
    fraction p / q whose floors agree with the float's for every size below a bound (0.6 as
    3 / 5, below 2^16), guarded below it; else of its value."""
    p, q = f.as_integer_ratio()
    if isinstance(i, Sym) and not (p < 1 << 24 and q < 1 << 24):
        p, q, bound = _near_fraction(f)
        if not facts_hooks.assume(bound - 1 - i, "a size scaled by a float", dims=True):
            q = 1 << 24
    if isinstance(i, Sym) and p < 1 << 24 and q < 1 << 24:
        return i * p // q
    return int(math.floor(int(i) * f))


@functools.lru_cache(maxsize=64)
def _near_fraction(f: float) -> tuple:
    """(p, q, bound): ``floor(n * f) == n * p // q`` in float64 for every n below bound."""
    r = fractions.Fraction(f).limit_denominator(1 << 10)
    n = np.arange(1 << 16, dtype=np.int64)
    bad = np.flatnonzero(np.floor(n * f).astype(np.int64) != n * r.numerator // r.denominator)
    return r.numerator, r.denominator, int(bad[0]) if bad.size else 1 << 16


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
    if recompute_scale_factor and size is not None:
        raise ValueError("interpolate: recompute_scale_factor is not meaningful with an explicit size")
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
        dev = input.device if symbolic and not u8 else None   # (uint8's weights: static sizes)
        taps = None if mode == "area" or antialias else \
            _taps(i, o, sc, mode, bool(align_corners), out.dtype, nsp == 2, dev)
        if taps is not None and (dev is not None or mode.startswith("nearest")):
            out = _gathered_axis(out, dim, taps)
            continue
        if isinstance(i, Sym) == isinstance(o, Sym) and i == o and (antialias or mode != "bicubic"):
            continue   # PyTorch's linear and antialias kernels copy an axis of unchanged size
        if mode == "area":   # (adaptive average pooling's)
            mt = avg_weights(i, o, out.dtype, input.device)
        else:
            if antialias:
                m = _antialias_matrix(int(i) if u8 else i, int(o) if u8 else o, bool(align_corners), sc, mode, dev)
            else:   # (the taps' weights summed into a constant matrix)
                m = np.zeros((int(o), int(i)))
                for idx, w in taps:
                    np.add.at(m, (np.arange(len(idx)), idx), w)
            if u8:
                out = _fixed_point_pass(out, m, dim)
                continue
            mt = tensor(np.ascontiguousarray(m.T), dtype=out.dtype, device=input.device) \
                if isinstance(m, np.ndarray) else transpose(cast(m, out.dtype), 0, 1)
        out = transpose(matmul(transpose(out, dim, -1), mt), dim, -1)    # the axis last, times M^T
    if out is input:   # (every axis unchanged: a new tensor still, as PyTorch's)
        return clone(input)
    return out.to(input.dtype) if low or u8 else out


def _taps(i, o, sc, mode: str, align_corners: bool, dtype, shortcuts: bool, dev=None) -> list:
    """The taps [(source index, weight or None)] of `o` outputs along an axis of `i` inputs,
    by PyTorch's index arithmetic: the source coordinate of an output index (clamped at 0
    but for bicubic's), its floor and the taps' indices clamped into the input. numpy
    arrays of static sizes; of symbolic ones (`dev`: the input's device) traced, from the
    sizes of each call. As PyTorch's CPU kernels: nearest's coordinate in float32, the
    others' in float64 for a float64 input, else in float32; its nearest 2-D kernel copies
    an unchanged size and halves at twice the size."""
    nearest = mode.startswith("nearest")
    dt = _dt.float64 if dtype is _dt.float64 and not nearest else _dt.float32
    if nearest and shortcuts and mode == "nearest" and dev is None and o in (i, 2 * i):
        return [(np.arange(o) >> (o != i), None)]
    dst = _as(_index(o, dev), dt)
    if align_corners and not nearest:
        sc = (i - 1) / (o - 1) if o != 1 else 0.0
    if nearest or align_corners:
        src = (dst + 0.5) * sc if mode == "nearest-exact" else dst * sc
    else:
        src = (dst + 0.5) * sc - 0.5
        src = src if mode == "bicubic" else src.clip(min=0.0)
    base = np.floor(src) if dev is None else floor(src)
    i0 = _as(base, _dt.int64)
    if nearest:
        return [(i0 - _as(i0 >= i, _dt.int64), None)]
    if mode == "bicubic":   # (taps outside the input read its edge)
        taps = [(i0 + (k - 1), w) for k, (w, *_) in enumerate(_cubic(src - base))]
        return [(j * _as(j > 0, _dt.int64) - (j - i + 1) * _as(j >= i, _dt.int64), w) for j, w in taps]
    lam = src - base
    return [(i0, 1.0 - lam), (i0 + _as(i0 < i - 1, _dt.int64), lam)]


def _gathered_axis(x, dim: int, taps: list):
    """Axis `dim` of `x` resized as the sum of its taps' gathers, each times its weight."""
    out = None
    for idx, w in taps:
        idx = tensor(idx, device=x.device) if isinstance(idx, np.ndarray) else idx
        term = getitem(x, (slice(None),) * dim + (idx,))
        if w is not None:
            w = tensor(w, dtype=x.dtype, device=x.device) if isinstance(w, np.ndarray) else cast(w, x.dtype)
            term = term * reshape(w, (-1,) + (1,) * (x.ndim - 1 - dim))
        out = term if out is None else out + term
    return out


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
