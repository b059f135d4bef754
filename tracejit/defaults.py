"""Process-wide defaults PyTorch programs set at their first lines: the default device
(``set_default_device``: the CPU, the one tracejit can make the default),
print options, and the precision/determinism switches tracejit accepts (float32 matmuls are
full float32 here, and its kernels are deterministic)."""
from __future__ import annotations

import numpy as np

from .device import _DEVICE, get_default_device, set_default_device  # noqa: F401 (re-exported)

__all__ = ["set_default_device", "get_default_device", "set_printoptions",
           "set_float32_matmul_precision", "get_float32_matmul_precision", "use_deterministic_algorithms",
           "are_deterministic_algorithms_enabled", "set_flush_denormal",
           "set_warn_always", "is_warn_always_enabled", "is_anomaly_enabled", "set_anomaly_enabled",
           "is_deterministic_algorithms_warn_only_enabled", "set_deterministic_debug_mode",
           "get_deterministic_debug_mode"]

_PRECISION = ["highest"]
_DETERMINISTIC = [False, False]   # (use_deterministic_algorithms's mode, warn_only)
_WARN_ALWAYS = [False]


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None,
                     sci_mode=None) -> None:
    """Print options for tensors (numpy's, which tensors print through)."""
    if profile == "full":
        threshold = threshold or 2 ** 31
    kw = {k: v for k, v in dict(precision=precision, threshold=threshold, edgeitems=edgeitems,
                                linewidth=linewidth).items() if v is not None}
    if sci_mode is not None:
        kw["suppress"] = not sci_mode
    np.set_printoptions(**kw)


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
