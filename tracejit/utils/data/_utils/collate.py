"""``default_collate`` / ``default_convert`` at PyTorch's ``_utils.collate`` path."""
from ..dataloader import default_collate, default_convert  # noqa: F401

__all__ = ["default_collate", "default_convert"]
