"""Window functions and the short-time Fourier transform, with PyTorch's names and
conventions: ``hann_window``, ``hamming_window``, ``blackman_window``, ``bartlett_window``,
``kaiser_window``, ``stft`` and ``istft``.

The windows are constants (computed in float64, then cast). ``stft`` is one gather (the
padding and the framing together: an index per frame sample into the signal) times the
window, then ``fft.rfft``/``fft.fft`` over each frame, so its gradient is theirs.
``istft`` inverts each frame, windows it and overlap-adds the frames (``index_add``), then
divides by the summed squared window, as PyTorch does.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from . import dtypes as _dt
from .errors import ArgumentError, DTypeError, ShapeError  # (RuntimeErrors, as torch's, and the Python class)
from .ops.creation import tensor
from .tensor import Tensor

__all__ = ["hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window",
           "stft", "istft"]


def _window(name: str, n: int, periodic: bool, dtype, device, requires_grad: bool, values) -> Tensor:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"{name}: window_length must be a non-negative int, got {n!r}")
    dtype = _dt.get_default_dtype() if dtype is None else _dt.as_dtype(dtype)
    if not dtype.is_floating_point:
        raise TypeError(f"{name}: expected a floating point dtype, got {dtype.name}")
    if n <= 1:
        w = np.ones(n)
    else:
        m = n + 1 if periodic else n     # a periodic window is the symmetric one of n + 1, cut
        w = values(np.arange(m, dtype=np.float64), m)[:n]
    t = tensor(np.asarray(w, dtype.np), device=device)
    return t.requires_grad_() if requires_grad else t


def hann_window(window_length: int, periodic: bool = True, *, dtype=None, device=None,
                requires_grad: bool = False, **_) -> Tensor:
    return _window("hann_window", window_length, periodic, dtype, device, requires_grad,
                   lambda k, m: 0.5 - 0.5 * np.cos(2 * np.pi * k / (m - 1)))


def hamming_window(window_length: int, periodic: bool = True, alpha: float = 0.54, beta: float = 0.46, *,
                   dtype=None, device=None, requires_grad: bool = False, **_) -> Tensor:
    return _window("hamming_window", window_length, periodic, dtype, device, requires_grad,
                   lambda k, m: alpha - beta * np.cos(2 * np.pi * k / (m - 1)))


def blackman_window(window_length: int, periodic: bool = True, *, dtype=None, device=None,
                    requires_grad: bool = False, **_) -> Tensor:
    return _window("blackman_window", window_length, periodic, dtype, device, requires_grad,
                   lambda k, m: 0.42 - 0.5 * np.cos(2 * np.pi * k / (m - 1))
                   + 0.08 * np.cos(4 * np.pi * k / (m - 1)))


def bartlett_window(window_length: int, periodic: bool = True, *, dtype=None, device=None,
                    requires_grad: bool = False, **_) -> Tensor:
    return _window("bartlett_window", window_length, periodic, dtype, device, requires_grad,
                   lambda k, m: 1 - np.abs(2 * k / (m - 1) - 1))


def kaiser_window(window_length: int, periodic: bool = True, beta: float = 12.0, *, dtype=None,
                  device=None, requires_grad: bool = False, **_) -> Tensor:
    from .ops.special_fns import bessel_i0_f64

    def values(k, m):
        r = (k - (m - 1) / 2) / ((m - 1) / 2)
        return bessel_i0_f64(beta * np.sqrt(np.clip(1 - r * r, 0.0, None))) / bessel_i0_f64(np.float64(beta))
    return _window("kaiser_window", window_length, periodic, dtype, device, requires_grad, values)


# ---------------------------------------------------------------- short-time Fourier transform
def _frame_index(length, n_fft: int, hop: int, pad: int, mode: str, dev=None):
    """(n_frames, n_fft) indices into the signal for each frame sample after padding `pad`
    on both sides by `mode`; -1 marks a zero (constant padding). numpy of a static length;
    of a symbolic one (`dev`: the signal's device) the same arithmetic traced."""
    from .ops.pooling_nd import _index
    n_frames = 1 + (length + 2 * pad - n_fft) // hop
    pos = _index(n_frames, dev)[:, None] * hop + _index(n_fft, dev)[None, :] - pad
    if mode == "reflect":   # (pad < length: |pos| < the period 2 (length - 1) or length is 1)
        period = 2 * (length - 1)
        q = abs(pos) % period if period else pos * 0
        return q + (q >= length) * (period - 2 * q)
    if mode == "replicate":
        pos = pos * (pos > 0)
        return pos + (pos > length - 1) * (length - 1 - pos)
    if mode == "circular":
        return pos % length
    if mode == "constant":
        return pos + ((pos < 0) | (pos >= length)) * (-1 - pos)
    raise ValueError(f"stft: pad_mode must be 'reflect', 'constant', 'replicate' or 'circular', got {mode!r}")


def _full_window(window, win_length: int, n_fft: int, name: str, like: Tensor):
    if window is None:
        from .ops.creation import ones
        window = ones(win_length, dtype=like.dtype.to_real() if like.dtype.is_complex else like.dtype,
                      device=like.device)
    if window.ndim != 1 or window.shape[0] != win_length:
        raise ShapeError(f"{name}: expected a 1-D window of win_length={win_length} samples, got shape "
                         f"{tuple(window.shape)}")
    if win_length < n_fft:   # centred in n_fft samples
        from .ops.spatial import pad as _pad
        left = (n_fft - win_length) // 2
        window = _pad(window, (left, n_fft - win_length - left))
    return window


def _lengths(n_fft, hop_length, win_length, name):
    if isinstance(n_fft, bool) or not isinstance(n_fft, (int, np.integer)) or n_fft <= 0:
        raise ArgumentError(f"{name}: n_fft must be a positive int, got {n_fft!r}")
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    if hop <= 0:
        raise ArgumentError(f"{name}: hop_length must be positive, got {hop}")
    if not 0 < win <= n_fft:
        raise ArgumentError(f"{name}: win_length must be in (0, n_fft={n_fft}], got {win}")
    return int(hop), int(win)


def stft(input: Tensor, n_fft: int, hop_length: Optional[int] = None, win_length: Optional[int] = None,
         window: Optional[Tensor] = None, center: bool = True, pad_mode: str = "reflect",
         normalized: bool = False, onesided: Optional[bool] = None, return_complex: Optional[bool] = None,
         align_to_window=None) -> Tensor:
    """The short-time Fourier transform of a 1-D signal or a (batch, time) batch:
    (batch?, n_freq, n_frames) complex."""
    from . import fft as _fft
    from .ops.shape import cat, reshape, transpose
    from .ops.creation import zeros
    hop, win = _lengths(n_fft, hop_length, win_length, "stft")
    if return_complex is None and not input.dtype.is_complex and (window is None or not window.dtype.is_complex):
        raise ArgumentError("stft: return_complex must be given for real inputs (return_complex=True; "
                            "return_complex=False is deprecated)")
    if input.ndim not in (1, 2):
        raise ShapeError(f"stft: expected a 1-D or 2-D (batch, time) input, got shape {tuple(input.shape)}")
    length = input.shape[-1]
    pad = n_fft // 2 if center else 0
    if center and pad_mode == "reflect" and pad >= length:
        raise ArgumentError(f"stft: reflect padding of {pad} needs a signal longer than that, got {length} samples")
    if length + 2 * pad < n_fft:
        raise ArgumentError(f"stft: n_fft={n_fft} is longer than the (padded) signal of {length + 2 * pad} samples")
    symbolic = hasattr(length, "terms")
    idx = _frame_index(length, n_fft, hop, pad, pad_mode, input.device if symbolic else None)
    x = input
    if pad and pad_mode == "constant":   # one zero sample appended, index -1 reads it
        x = cat([x, zeros(x.shape[:-1] + (1,), dtype=x.dtype, device=x.device)], -1)
    frames = x[..., idx.reshape(-1) if symbolic else tensor(idx.reshape(-1), device=x.device)]
    frames = reshape(frames, tuple(x.shape[:-1]) + tuple(idx.shape)) * _full_window(window, win, n_fft, "stft", input)
    complex_in = input.dtype.is_complex or (window is not None and window.dtype.is_complex)
    one = (not complex_in) if onesided is None else onesided
    if one and complex_in:
        raise ArgumentError("stft: onesided=True needs a real input and a real window")
    norm = "ortho" if normalized else "backward"
    spec = _fft.rfft(frames, dim=-1, norm=norm) if one else _fft.fft(frames, dim=-1, norm=norm)
    spec = transpose(spec, -1, -2)
    if return_complex is False:
        from .ops.complex_ops import view_as_real
        return view_as_real(spec)
    return spec


def istft(input: Tensor, n_fft: int, hop_length: Optional[int] = None, win_length: Optional[int] = None,
          window: Optional[Tensor] = None, center: bool = True, normalized: bool = False,
          onesided: Optional[bool] = None, length: Optional[int] = None, return_complex: bool = False) -> Tensor:
    """The inverse of `stft`: (batch?, n_freq, n_frames) complex to (batch?, time)."""
    from . import fft as _fft
    from .ops.spatial import pad as _pad
    from .ops.creation import zeros
    from .ops.indexing_more import index_add
    from .ops.shape import reshape, transpose
    hop, win = _lengths(n_fft, hop_length, win_length, "istft")
    if not input.dtype.is_complex:
        raise DTypeError(f"istft: expected a complex input (stft's return_complex=True result), got {input.dtype.name}")
    if input.ndim not in (2, 3):
        raise ShapeError(f"istft: expected a (batch?, n_freq, n_frames) input, got shape {tuple(input.shape)}")
    n_freq, n_frames = input.shape[-2], input.shape[-1]
    one = (n_freq != n_fft) if onesided is None else onesided
    if one and n_freq != n_fft // 2 + 1:
        raise ShapeError(f"istft: a onesided input needs n_fft // 2 + 1 = {n_fft // 2 + 1} frequencies, got {n_freq}")
    if not one and n_freq != n_fft:
        raise ShapeError(f"istft: a two-sided input needs n_fft = {n_fft} frequencies, got {n_freq}")
    if one and return_complex:
        raise ArgumentError("istft: return_complex=True needs onesided=False")
    w = _full_window(window, win, n_fft, "istft", input)
    norm = "ortho" if normalized else "backward"
    spec = transpose(input, -1, -2)                    # (batch?, n_frames, n_freq)
    if one:
        frames = _fft.irfft(spec, n=n_fft, dim=-1, norm=norm)
    else:
        frames = _fft.ifft(spec, n=n_fft, dim=-1, norm=norm)
        if not return_complex:
            from .ops.complex_ops import real
            frames = real(frames)
    frames = frames * w
    total = n_fft + hop * (n_frames - 1)
    pos = (np.arange(n_frames)[:, None] * hop + np.arange(n_fft)[None, :]).reshape(-1)
    lead = tuple(frames.shape[:-2])
    y = zeros(lead + (total,), dtype=frames.dtype, device=frames.device)
    y = index_add(y, -1, tensor(pos, device=frames.device), reshape(frames, lead + (n_frames * n_fft,)))
    wnp = w.detach().numpy().astype(np.float64)
    env = np.zeros(total)
    np.add.at(env, pos, np.tile(wnp * np.conj(wnp), n_frames).real)
    start = n_fft // 2 if center else 0
    end = start + length if length is not None else (total - n_fft // 2 if center else total)
    stop = min(end, total)
    env = env[start:stop]
    if env.size and np.abs(env).min() < 1e-11:
        raise ArgumentError("istft: the window's overlap-add has zeros (the window and hop_length do not "
                            "satisfy the nonzero overlap-add condition)")
    y = y[..., start:stop] / tensor(env.astype(y.dtype.to_real().np if y.dtype.is_complex else y.dtype.np),
                                    device=y.device)
    if end > total:
        y = _pad(y, (0, end - total))
    return y
