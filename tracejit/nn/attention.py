"""``torch.nn.attention``: ``SDPBackend`` and the ``sdpa_kernel`` context manager.

Programs pick scaled_dot_product_attention's kernel with ``with sdpa_kernel(
SDPBackend.FLASH_ATTENTION):``. tracejit has one attention implementation, so the
choice is recorded (``torch.backends.cuda.flash_sdp_enabled()`` and the others read it
inside the block) and changes no result.
"""
from __future__ import annotations

import contextlib
import enum

from ..backends import cuda as _cuda

__all__ = ["SDPBackend", "sdpa_kernel"]


class SDPBackend(enum.IntEnum):
    """PyTorch's scaled dot-product attention backends (its values)."""
    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


_SWITCH = {SDPBackend.MATH: "math", SDPBackend.FLASH_ATTENTION: "flash",
           SDPBackend.EFFICIENT_ATTENTION: "mem_efficient", SDPBackend.CUDNN_ATTENTION: "cudnn"}


@contextlib.contextmanager
def sdpa_kernel(backends, set_priority: bool = False):
    """Only `backends` (one `SDPBackend` or a list) enabled inside the block."""
    chosen = [backends] if isinstance(backends, SDPBackend) else list(backends)
    for b in chosen:
        if not isinstance(b, SDPBackend):
            raise TypeError(f"sdpa_kernel: expected SDPBackend values, got {b!r}")
    saved = dict(_cuda._SDP)
    _cuda._SDP.update({name: b in chosen for b, name in _SWITCH.items()})
    try:
        yield
    finally:
        _cuda._SDP.clear()
        _cuda._SDP.update(saved)
