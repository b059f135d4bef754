"""``tracejit.amp``: automatic mixed precision, as ``torch.amp``.

`autocast` with ``enabled=False`` is a context manager (and decorator) that changes
nothing, so programs that switch mixed precision off -- or ask for it on CUDA on a machine
without a GPU, which PyTorch turns off with a warning -- run unchanged. Mixed precision
itself (bfloat16 / float16 autocast) is not supported yet: ``enabled=True`` raises an
error saying so. `GradScaler` scales the loss and unscales the gradients, skipping steps
whose gradients are not finite, as PyTorch's does; with float32 gradients it changes no
result, and ``enabled=False`` makes every call a pass-through.
"""
from .autocast_mode import autocast, custom_bwd, custom_fwd, is_autocast_available  # noqa: F401
from .grad_scaler import GradScaler  # noqa: F401

__all__ = ["autocast", "GradScaler", "custom_fwd", "custom_bwd", "is_autocast_available"]
