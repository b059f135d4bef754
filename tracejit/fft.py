"""``tracejit.fft``: discrete Fourier transforms (numpy.fft's), their sample frequencies
and the zero-frequency shifts.

The transforms return complex tensors, which run eagerly (ops/complex_ops.py). Three
primitives carry them all, each with its gradient in PyTorch's convention: complex to
complex (`fftn`/`ifftn` and their 1-d and 2-d forms), real to complex (`rfftn`) and
complex to real (`irfftn`); `hfft` and `ihfft` are compositions of those. A transform's
adjoint is the opposite transform with the opposite normalization ("backward" and
"forward" swap, "ortho" stays), followed by the adjoint of the zero-padding or cropping
that ``n``/``s`` asked for.
"""
from __future__ import annotations

import functools
from typing import Optional, Sequence

import numpy as np

from . import dtypes as _dt
from .exactcall import specialize
from .errors import ArgumentError, DTypeError
from .ops.creation import tensor, zeros
from .ops.rearrange import roll
from .ops.shape import cat
from .ops.registry import Aval, defprim
from .ops.eager import bind
from .shapes import as_dim, normalize_dim
from .tensor import Tensor

__all__ = ["fftfreq", "rfftfreq", "fftshift", "ifftshift", "fft", "ifft", "rfft", "irfft", "fft2",
           "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn", "hfft", "ihfft", "hfft2", "ihfft2",
           "hfftn", "ihfftn"]

_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def fftfreq(n: int, d: float = 1.0, *, dtype=None, device=None, requires_grad: bool = False):
    t = tensor(np.fft.fftfreq(n, d).astype(np.float32 if dtype is None else dtype.np), device=device)
    return t.requires_grad_() if requires_grad else t


def rfftfreq(n: int, d: float = 1.0, *, dtype=None, device=None, requires_grad: bool = False):
    t = tensor(np.fft.rfftfreq(n, d).astype(np.float32 if dtype is None else dtype.np), device=device)
    return t.requires_grad_() if requires_grad else t


def _dims(x, dim):
    if dim is None:
        return tuple(range(x.ndim))
    return (dim,) if isinstance(dim, int) else tuple(dim)


def fftshift(input, dim=None):
    dims = _dims(input, dim)
    return roll(input, tuple(input.shape[d] // 2 for d in dims), dims)


def ifftshift(input, dim=None):
    dims = _dims(input, dim)
    return roll(input, tuple(-(input.shape[d] // 2) for d in dims), dims)


# ---------------------------------------------------------------- the primitives
def _out_shape(shape, s, dims, last=None):
    out = list(shape)
    for n, d in zip(s, dims):
        out[d] = n
    if last is not None:
        out[dims[-1]] = last
    return tuple(out)


def _c2c_rule(x, s, dims, norm, inverse):
    return Aval(_out_shape(x.shape, s, dims), x.dtype, x.device)


def _c2c_impl(xp, x, s, dims, norm, inverse):
    return (np.fft.ifftn if inverse else np.fft.fftn)(x, s=s, axes=dims, norm=norm)


def _c2c_vjp(g, out, x, s, dims, norm, inverse):
    gx = bind(FFT_C2C, g, s=s, dims=dims, norm=_SWAP[norm], inverse=not inverse)
    return (_fit(gx, x.shape, dims),)


def _r2c_rule(x, s, dims, norm):
    return Aval(_out_shape(x.shape, s, dims, s[-1] // 2 + 1), x.dtype.to_complex(), x.device)


def _r2c_vjp(g, out, x, s, dims, norm):
    full = _fit(g, _out_shape(g.shape, s, dims), dims[-1:])   # the other half's entries: zeros
    gx = bind(FFT_C2C, full, s=s, dims=dims, norm=_SWAP[norm], inverse=True).real
    return (_fit(gx, x.shape, dims),)


def _c2r_rule(x, s, dims, norm):
    return Aval(_out_shape(x.shape, s, dims), x.dtype.to_real(), x.device)


def _c2r_vjp(g, out, x, s, dims, norm):
    # the half spectrum stands for itself and its conjugate mirror: the entries whose
    # mirror lies outside it (1 .. n - (n//2 + 1)) get both gradients
    gx = bind(FFT_R2C, g, s=s, dims=dims, norm=_SWAP[norm])
    n, m = s[-1], s[-1] // 2 + 1
    if n - m > 0:   # (by slices, no constant tensor: a backward trace takes none)
        d, parts = dims[-1], [gx.narrow(dims[-1], 0, 1), gx.narrow(dims[-1], 1, n - m) * 2.0]
        gx = cat(parts + ([gx.narrow(d, n - m + 1, 2 * m - n - 1)] if 2 * m - n - 1 else []), d)
    return (_fit(gx, x.shape, dims),)


FFT_C2C = defprim("fft_c2c", _c2c_impl, _c2c_rule, _c2c_vjp, kind="complex", save=lambda rq: (),
                  extra={"meta": (0,)}, grad_name="FftC2CBackward0")
FFT_R2C = defprim("fft_r2c", lambda xp, x, s, dims, norm: np.fft.rfftn(x, s=s, axes=dims, norm=norm),
                  _r2c_rule, _r2c_vjp, kind="complex", save=lambda rq: (), extra={"meta": (0,)},
                  grad_name="FftR2CBackward0")
FFT_C2R = defprim("fft_c2r", lambda xp, x, s, dims, norm: np.fft.irfftn(x, s=s, axes=dims, norm=norm),
                  _c2r_rule, _c2r_vjp, kind="complex", save=lambda rq: (), extra={"meta": (0,)},
                  grad_name="FftC2RBackward0")


def _fit(t: Tensor, shape, dims) -> Tensor:
    """`t` cropped or zero-padded at the end of each of `dims` to `shape`'s sizes (the
    adjoint of the padding or cropping a transform's ``n``/``s`` did)."""
    from .ops import cat, narrow
    for d in dims:
        have, want = t.shape[d], shape[d]
        if have > want:
            t = narrow(t, d, 0, want)
        elif have < want:
            pad = list(t.shape)
            pad[d] = want - have
            t = cat([t, zeros(tuple(pad), dtype=t.dtype, device=t.device)], d)
    return t


# ---------------------------------------------------------------- the public transforms
def _norm(norm: Optional[str], name: str) -> str:
    if norm is None:
        return "backward"
    if norm not in _SWAP:
        raise ArgumentError(f"fft.{name}: norm must be 'backward', 'forward' or 'ortho', got {norm!r}")
    return norm


def _plan(x: Tensor, s, dim, name: str, default_all: bool):
    """(s, dims) as tuples of ints: PyTorch's defaults (the last len(s) dims when only `s`
    is given; every dim, or the last one or two, when neither is)."""
    nd = x.ndim
    if dim is None:
        if s is None:
            dims = tuple(range(nd)) if default_all else tuple(range(nd))[-default_all:]
        else:
            dims = tuple(range(nd - len(s), nd))
    else:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
    dims = tuple(normalize_dim(d, nd, f"fft.{name}") for d in dims)
    if len(set(dims)) != len(dims):
        raise ArgumentError(f"fft.{name}: dims must be distinct, got {dims}")
    if s is not None:
        s = (s,) if isinstance(s, int) else tuple(s)
        if len(s) != len(dims):
            raise ArgumentError(f"fft.{name}: s has {len(s)} sizes for {len(dims)} dims")
        s = tuple(x.shape[d] if n == -1 else as_dim(n) for n, d in zip(s, dims))
    else:
        s = tuple(x.shape[d] for d in dims)
    if any(n < 1 for n in s):
        raise ArgumentError(f"fft.{name}: invalid number of data points {s} specified")
    return s, dims


def _as_complex(x: Tensor) -> Tensor:
    if x.dtype.is_complex:
        return x
    dt = x.dtype if x.dtype.is_floating_point else _dt.get_default_dtype()
    return x.to(dt.to_complex())


def _as_real(x: Tensor, name: str) -> Tensor:
    if x.dtype.is_complex:
        raise DTypeError(f"fft.{name} expects a real input tensor, but got {x.dtype.name}")
    return x if x.dtype in (_dt.float32, _dt.float64) else x.to(_dt.float32 if x.dtype.is_floating_point
                                                             else _dt.get_default_dtype())


def _c2c(x, s, dim, norm, name, default_all, inverse=False):
    s, dims = _plan(x, s, dim, name, default_all)
    return bind(FFT_C2C, _as_complex(x), s=s, dims=dims, norm=_norm(norm, name), inverse=inverse)


def _r2c(x, s, dim, norm, name, default_all):
    x = _as_real(x, name)
    s, dims = _plan(x, s, dim, name, default_all)
    return bind(FFT_R2C, x, s=s, dims=dims, norm=_norm(norm, name))


def _c2r(x, s, dim, norm, name, default_all):
    x = _as_complex(x)
    given = s
    s, dims = _plan(x, s, dim, name, default_all)
    if given is None or (not isinstance(given, int) and list(given)[-1] == -1):
        s = s[:-1] + (2 * (x.shape[dims[-1]] - 1),)
    if s[-1] < 1:
        raise ArgumentError(f"fft.{name}: invalid number of data points ({s[-1]}) specified")
    return bind(FFT_C2R, x, s=s, dims=dims, norm=_norm(norm, name))


# The public transforms' three signatures (one dim, two, any); `run` is the transform.
def _one_dim(input: Tensor, n: Optional[int] = None, dim: int = -1, norm: Optional[str] = None, *,
             run, name) -> Tensor:
    return run(input, None if n is None else (n,), dim, norm, name, 1)


def _two_dims(input: Tensor, s: Optional[Sequence[int]] = None, dim=(-2, -1), norm: Optional[str] = None, *,
              run, name) -> Tensor:
    return run(input, s, dim, norm, name, 2)


def _n_dims(input: Tensor, s: Optional[Sequence[int]] = None, dim=None, norm: Optional[str] = None, *,
            run, name) -> Tensor:
    return run(input, s, dim, norm, name, 0)


def _h2r(x, s, dim, norm, name, default_all):
    """The real spectrum of a Hermitian signal given by its half (numpy's hfft)."""
    from .ops.complex_ops import conj
    return _c2r(conj(_as_complex(x)), s, dim, _SWAP[_norm(norm, name)], name, default_all)


def _r2h(x, s, dim, norm, name, default_all):
    from .ops.complex_ops import conj
    return conj(_r2c(x, s, dim, _SWAP[_norm(norm, name)], name, default_all))


_RUNS = (_c2c, functools.partial(_c2c, inverse=True), _r2c, _c2r, _h2r, _r2h)
_NAMES = ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")
fft, ifft, rfft, irfft, hfft, ihfft = (specialize(_one_dim, n, run=r, name=n) for n, r in zip(_NAMES, _RUNS))
fft2, ifft2, rfft2, irfft2, hfft2, ihfft2 = (specialize(_two_dims, n + "2", run=r, name=n + "2")
                                             for n, r in zip(_NAMES, _RUNS))
fftn, ifftn, rfftn, irfftn, hfftn, ihfftn = (specialize(_n_dims, n + "n", run=r, name=n + "n")
                                             for n, r in zip(_NAMES, _RUNS))


def _give_out() -> None:
    """PyTorch's transforms take ``out=``, as tracejit's namespace functions do (outarg.py)."""
    from .outarg import with_out
    for base in _NAMES:
        for name in (base, base + "2", base + "n"):
            globals()[name] = with_out(globals()[name], "fft." + name)


_give_out()
