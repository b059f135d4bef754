"""``tracejit.utils.data._utils``: where PyTorch keeps collation and worker helpers, for
programs that import them from there (``_utils.collate.default_collate``)."""
from . import collate  # noqa: F401
