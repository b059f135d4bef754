"""``tracejit.utils``: helpers outside the core (``tracejit.utils.data`` and
``tracejit.utils.checkpoint``, like ``torch.utils.data`` and ``torch.utils.checkpoint``)."""
from . import checkpoint, data  # noqa: F401
