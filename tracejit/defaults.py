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
           "set_warn_always", "is_warn_always_enabled", "is_anomaly_enabled", "set_anomaly_enabled"]

_PRECISION = ["highest"]
_DETERMINISTIC = [False]
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
    _DETERMINISTIC[0] = bool(mode)


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
