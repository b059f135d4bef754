"""``torch.autograd.gradcheck``'s path: ``gradcheck``, ``gradgradcheck`` and the error
they raise (``raise_exception=True``) on a mismatch."""
from .checks import GradcheckError, gradcheck, gradgradcheck

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError"]
