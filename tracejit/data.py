"""``tracejit.data``: a short name for `tracejit.utils.data` (Dataset, TensorDataset, DataLoader, ...)."""
from .utils.data import *  # noqa: F401,F403
from .utils.data import __all__  # noqa: F401
