"""``tracejit.utils``: helpers outside the core (``tracejit.utils.data``, like ``torch.utils.data``)."""
from . import data  # noqa: F401
