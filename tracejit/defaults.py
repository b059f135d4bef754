"""Process-wide defaults PyTorch programs set at their first lines: the default device
(``set_default_device``: the CPU, the one tracejit can make the default),
print options, and the precision/determinism switches tracejit accepts (float32 matmuls are
full float32 here, and its kernels are deterministic)."""
from __future__ import annotations

from typing import Optional

from .device import _DEVICE, get_default_device, set_default_device  # noqa: F401 (re-exported)
from .tensor_repr import PRINT, PRINT_PROFILES as _PRINT_PROFILES

__all__ = ["set_default_device", "get_default_device", "set_printoptions",
           "set_float32_matmul_precision", "get_float32_matmul_precision", "use_deterministic_algorithms",
           "are_deterministic_algorithms_enabled", "set_flush_denormal",
           "set_warn_always", "is_warn_always_enabled", "is_anomaly_enabled", "set_anomaly_enabled",
           "is_deterministic_algorithms_warn_only_enabled", "set_deterministic_debug_mode",
           "get_deterministic_debug_mode"]

_PRECISION = ["highest"]
_DETERMINISTIC = [False, False]   # (use_deterministic_algorithms's mode, warn_only)
_WARN_ALWAYS = [False]


def set_printoptions(precision: Optional[int] = None, threshold: Optional[int] = None,
                     edgeitems: Optional[int] = None, linewidth: Optional[int] = None,
                     profile: Optional[str] = None, sci_mode: Optional[bool] = None) -> None:
    """How tensors print, as PyTorch's: digits after the point (`precision`), the element
    count past which a tensor prints summarized (`threshold`) with `edgeitems` at each end,
    the line width, a `profile` ("default", "short", "full") that sets all four, and
    `sci_mode` (True: always scientific, False: never, None: PyTorch's choice)."""
    if profile is not None and profile not in _PRINT_PROFILES:
        raise ValueError(f"set_printoptions: profile must be one of {', '.join(map(repr, _PRINT_PROFILES))}, "
                         f"got {profile!r}")
    given = dict(precision=precision, threshold=threshold, edgeitems=edgeitems, linewidth=linewidth)
    for name, value in given.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"set_printoptions: {name} must be a non-negative int, got {value!r}")
    new = dict(PRINT, **(_PRINT_PROFILES[profile] if profile is not None else {}))
    new.update({k: v for k, v in given.items() if v is not None})
    new["sci_mode"] = sci_mode   # (PyTorch's: every call sets it, None when not given)
    PRINT.update(new)


def set_float32_matmul_precision(precision: str) -> None:
    if precision not in ("highest", "high", "medium"):
        raise ValueError(f"set_float32_matmul_precision: expected highest, high or medium, got {precision!r}")
    _PRECISION[0] = precision


def get_float32_matmul_precision() -> str:
    return _PRECISION[0]


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    _DETERMINISTIC[:] = [bool(mode), bool(warn_only)]


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return _DETERMINISTIC[1]


_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def set_deterministic_debug_mode(debug_mode) -> None:
    """0/"default": off; 1/"warn": deterministic, warn only; 2/"error": deterministic."""
    if isinstance(debug_mode, str):
        if debug_mode not in _DEBUG_MODES:
            raise RuntimeError(f"invalid value of debug_mode, expected one of `default`, `warn`, `error`, "
                               f"but got {debug_mode}")
        debug_mode = _DEBUG_MODES[debug_mode]
    if isinstance(debug_mode, bool) or not isinstance(debug_mode, int) or debug_mode not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode, expected 0, 1, or 2, but got {debug_mode}")
    use_deterministic_algorithms(debug_mode > 0, warn_only=debug_mode == 1)


def get_deterministic_debug_mode() -> int:
    return (1 if _DETERMINISTIC[1] else 2) if _DETERMINISTIC[0] else 0


def are_deterministic_algorithms_enabled() -> bool:
    return _DETERMINISTIC[0]


def set_flush_denormal(mode: bool) -> bool:
    """PyTorch's switch for flushing denormal floats to zero; numpy's arithmetic keeps
    denormals, so this reports False (not supported), as PyTorch does on such CPUs."""
    return False


def set_warn_always(b: bool) -> None:
    _WARN_ALWAYS[0] = bool(b)


def is_warn_always_enabled() -> bool:
    return _WARN_ALWAYS[0]


def is_anomaly_enabled() -> bool:
    from .autograd.checks import is_anomaly_enabled as enabled
    return enabled()


def set_anomaly_enabled(enabled: bool, check_nan: bool = True) -> None:
    from .autograd.checks import set_detect_anomaly
    set_detect_anomaly(enabled, check_nan)
