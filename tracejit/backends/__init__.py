"""``tracejit.backends``: the flags PyTorch programs set at their first lines.

``tracejit.backends.cudnn.benchmark = True`` and friends are accepted and do nothing
(tracejit does not use cuDNN); ``tracejit.backends.mps.is_available()`` is False
(there is no Metal backend).
"""
from . import cudnn, mps  # noqa: F401

__all__ = ["cudnn", "mps"]
