"""``tracejit.testing.assert_close``: torch.testing.assert_close's checks and message.

Two values are close when they have the same structure (sequences and mappings are
compared item by item), the same shape, dtype (``check_dtype``) and device
(``check_device``), and every element satisfies ``|a - e| <= atol + rtol * |e|``, with
nan equal to nan only under ``equal_nan``. Without ``rtol``/``atol`` the tolerances are
PyTorch's defaults for the dtype (float32: 1.3e-6 and 1e-5; integers and bools: exact).
``make_tensor`` draws the test tensors torch.testing's helper does.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Callable, Optional, Union

import numpy as np

from .tensor import Tensor

__all__ = ["assert_close", "DEFAULT_TOLERANCES", "make_tensor"]

#: (rtol, atol) by dtype name, PyTorch's defaults; other dtypes compare exactly
DEFAULT_TOLERANCES = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
                      "float64": (1e-7, 1e-7), "complex64": (1.3e-6, 1e-5),
                      "complex128": (1e-7, 1e-7)}


def _dtype_name(x) -> str:
    return x.dtype.name if isinstance(x, Tensor) else np.asarray(x).dtype.name


def _shape(x) -> str:
    return repr(x.shape) if isinstance(x, Tensor) else repr(tuple(np.shape(x)))


def _fail(msg: Optional[Union[str, Callable[[str], str]]], text: str, path: str):
    if path:
        text = f"{text}\n\nThe failure occurred for item {path}"
    if callable(msg):
        text = msg(text)
    elif msg is not None:
        text = msg
    raise AssertionError(text)


def _array(x) -> np.ndarray:
    if isinstance(x, Tensor):
        a = x.detach().numpy()
        return a.astype(np.float32) if a.dtype.name == "bfloat16" else a
    return np.asarray(x)


def _compare_leaf(actual, expected, rtol, atol, equal_nan, check_device, check_dtype, msg, path):
    if isinstance(actual, Tensor) != isinstance(expected, Tensor):
        _fail(msg, f"Type mismatch: {type(actual).__name__} and {type(expected).__name__}", path)
    scalar = not isinstance(actual, Tensor)
    if check_dtype and (_dtype_name(actual) != _dtype_name(expected)) and not scalar:
        _fail(msg, f"The values for attribute 'dtype' do not match: {actual.dtype} != {expected.dtype}.",
              path)
    if check_device and not scalar and actual.device != expected.device:
        _fail(msg, f"The values for attribute 'device' do not match: {actual.device} != "
                   f"{expected.device}.", path)
    a, e = _array(actual), _array(expected)
    if a.shape != e.shape:
        _fail(msg, f"The values for attribute 'shape' do not match: {_shape(actual)} != "
                   f"{_shape(expected)}.", path)
    if rtol is None:
        pairs = [DEFAULT_TOLERANCES.get(_dtype_name(v), (0.0, 0.0)) for v in (actual, expected)]
        rtol, atol = max(p[0] for p in pairs), max(p[1] for p in pairs)
    if a.dtype.kind in "biu" and e.dtype.kind in "biu":
        a, e = a.astype(np.int64), e.astype(np.int64)
        bad = a != e
        diff = np.abs(a - e)
    else:
        wide = np.complex128 if "c" in (a.dtype.kind, e.dtype.kind) else np.float64
        a, e = a.astype(wide), e.astype(wide)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(a - e)
            ok = (a == e) | (diff <= atol + rtol * np.abs(e))
        if equal_nan:
            ok |= np.isnan(a) & np.isnan(e)
        bad = ~ok
    if not bad.any():
        return
    n, total = int(bad.sum()), bad.size
    exact = rtol == 0 and atol == 0
    name, verb = ("Scalars" if a.ndim == 0 else "Tensor-likes"), ("equal" if exact else "close")
    flat = np.where(bad.reshape(-1), np.nan_to_num(diff.reshape(-1).real, nan=np.inf), -1.0)
    i = int(np.argmax(flat))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = float(diff.reshape(-1)[i] / np.abs(e.reshape(-1)[i]))
    absd = diff.reshape(-1)[i]
    allowed_a, allowed_r = ("", "") if exact else (f" (up to {atol} allowed)", f" (up to {rtol} allowed)")
    if a.ndim == 0:
        text = (f"{name} are not {verb}!\n\nExpected {e.item()} but got {a.item()}.\n"
                f"Absolute difference: {absd}{allowed_a}\nRelative difference: {rel}{allowed_r}")
    else:
        where = f" at index {tuple(int(j) for j in np.unravel_index(i, a.shape))}"
        text = (f"{name} are not {verb}!\n\nMismatched elements: {n} / {total} ({100.0 * n / total:.1f}%)\n"
                f"Greatest absolute difference: {absd}{where}{allowed_a}\n"
                f"Greatest relative difference: {rel}{where}{allowed_r}")
    _fail(msg, text, path)


def assert_close(actual: Any, expected: Any, *, allow_subclasses: bool = True, rtol: Optional[float] = None,
                 atol: Optional[float] = None, equal_nan: bool = False, check_device: bool = True,
                 check_dtype: bool = True, check_layout: bool = True, check_stride: bool = False,
                 msg: Optional[Union[str, Callable[[str], str]]] = None) -> None:
    """Raise an AssertionError naming the mismatch unless `actual` and `expected` are close
    (``torch.testing.assert_close``; see the module docstring)."""
    if (rtol is None) != (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but got no "
                         f"{'rtol' if rtol is None else 'atol'}.")
    _walk(actual, expected, rtol, atol, equal_nan, check_device, check_dtype, msg, "")


def _walk(actual, expected, rtol, atol, equal_nan, check_device, check_dtype, msg, path):
    leafy = (Tensor, np.ndarray, str, bytes)
    if isinstance(expected, Mapping) and not isinstance(expected, leafy):
        if not isinstance(actual, Mapping) or set(actual) != set(expected):
            _fail(msg, f"The keys of the mappings do not match: {sorted(map(str, actual))} != "
                       f"{sorted(map(str, expected))}" if isinstance(actual, Mapping)
                  else f"Type mismatch: {type(actual).__name__} and {type(expected).__name__}", path)
        for k in expected:
            _walk(actual[k], expected[k], rtol, atol, equal_nan, check_device, check_dtype, msg,
                  f"{path}[{k!r}]")
        return
    if isinstance(expected, Sequence) and not isinstance(expected, leafy):
        if not isinstance(actual, Sequence) or len(actual) != len(expected):
            _fail(msg, f"The length of the sequences mismatch: {len(actual)} != {len(expected)}"
                  if isinstance(actual, Sequence)
                  else f"Type mismatch: {type(actual).__name__} and {type(expected).__name__}", path)
        for i, (a, e) in enumerate(zip(actual, expected)):
            _walk(a, e, rtol, atol, equal_nan, check_device, check_dtype, msg, f"{path}[{i}]")
        return
    if actual is None or expected is None:
        if actual is not expected:
            _fail(msg, f"None mismatch: {actual!r} is not {expected!r}", path)
        return
    _compare_leaf(actual, expected, rtol, atol, equal_nan, check_device, check_dtype, msg, path)


def make_tensor(*shape, dtype, device, low: Optional[float] = None, high: Optional[float] = None,
                requires_grad: bool = False, noncontiguous: bool = False, exclude_zero: bool = False,
                memory_format=None) -> Tensor:
    """``torch.testing.make_tensor``: uniform values in [low, high) (defaults: [-9, 9] for
    floating point, [-9, 10) for integers, within the dtype's range), bools at random;
    `noncontiguous`: a strided view of a buffer twice as long in its last dim."""
    from . import dtypes as _dt
    from .ops import rand, randint
    shape = tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape
    dt = _dt.as_dtype(dtype)
    if low is not None and high is not None and low >= high:
        raise ValueError(f"`low` must be less than `high`, but got {low} >= {high}")
    if dt is _dt.bool_:
        t = randint(0, 2, shape, device=device).to(dt)
    elif dt.is_floating_point or dt.is_complex:   # (tracejit's generator: manual_seed repeats it)
        lo, hi = -9.0 if low is None else low, 9.0 if high is None else high
        t = (rand(shape, dtype=_dt.float64, device=device) * (hi - lo) + lo).to(dt)
        if exclude_zero:
            t = t.masked_fill(t == 0, float(np.finfo(np.float32).eps))
    else:
        info = np.iinfo(dt.np)
        lo, hi = max(-9 if low is None else int(low), info.min), min(10 if high is None else int(high), info.max)
        t = randint(lo, hi, shape, device=device).to(dt)
        if exclude_zero:
            t = t.masked_fill(t == 0, 1 if hi > 1 else -1)
    if noncontiguous and t.numel() > 1:
        from .ops import repeat_interleave
        t = repeat_interleave(t, 2, dim=-1)[..., ::2]
    if memory_format is not None:
        t = t.contiguous(memory_format=memory_format)
    return t.requires_grad_(requires_grad) if requires_grad else t
