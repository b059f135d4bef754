"""``torch.autograd.variable``'s path: ``Variable`` (a tensor since PyTorch 0.4)."""
from .checks import Variable

__all__ = ["Variable"]
