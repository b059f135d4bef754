"""``tracejit.backends.cuda``: PyTorch's CUDA backend switches, accepted as plain settings.

``matmul.allow_tf32`` and friends are attributes programs read and set; the scaled
dot-product attention switches (``enable_flash_sdp`` ...) and ``sdp_kernel`` record what
was asked. tracejit's GPU path (cupy) uses full float32 products and its own attention,
so none of them changes a result. `is_built` says whether CUDA support can load (cupy).
"""
from __future__ import annotations

import contextlib

__all__ = ["matmul", "cufft_plan_cache", "is_built", "enable_flash_sdp", "flash_sdp_enabled",
           "enable_mem_efficient_sdp", "mem_efficient_sdp_enabled", "enable_math_sdp",
           "math_sdp_enabled", "enable_cudnn_sdp", "cudnn_sdp_enabled", "sdp_kernel",
           "preferred_linalg_library"]


class _Matmul:
    allow_tf32: bool = False
    allow_fp16_reduced_precision_reduction: bool = True
    allow_bf16_reduced_precision_reduction: bool = True
    fp32_precision: str = "ieee"


class _PlanCache:
    max_size: int = 4096
    size: int = 0

    def clear(self) -> None:
        self.size = 0


matmul = _Matmul()
cufft_plan_cache = _PlanCache()
_SDP = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def is_built() -> bool:
    """Whether tracejit's CUDA support can load here (cupy importable)."""
    try:
        import cupy  # noqa: F401
    except Exception:  # noqa: BLE001  (any import failure means no)
        return False
    return True


def _sdp_switch(kind: str):
    """``enable_<kind>_sdp(enabled)`` and ``<kind>_sdp_enabled()``: set and read one switch."""
    def enable(enabled: bool) -> None:
        _SDP[kind] = bool(enabled)

    def is_enabled() -> bool:
        return _SDP[kind]
    enable.__name__ = enable.__qualname__ = f"enable_{kind}_sdp"
    is_enabled.__name__ = is_enabled.__qualname__ = f"{kind}_sdp_enabled"
    return enable, is_enabled


enable_flash_sdp, flash_sdp_enabled = _sdp_switch("flash")
enable_mem_efficient_sdp, mem_efficient_sdp_enabled = _sdp_switch("mem_efficient")
enable_math_sdp, math_sdp_enabled = _sdp_switch("math")
enable_cudnn_sdp, cudnn_sdp_enabled = _sdp_switch("cudnn")


@contextlib.contextmanager
def sdp_kernel(enable_flash: bool = True, enable_math: bool = True, enable_mem_efficient: bool = True,
               enable_cudnn: bool = True):
    saved = dict(_SDP)
    _SDP.update(flash=enable_flash, math=enable_math, mem_efficient=enable_mem_efficient, cudnn=enable_cudnn)
    try:
        yield
    finally:
        _SDP.clear()
        _SDP.update(saved)


def preferred_linalg_library(backend=None) -> str:
    return "default"
