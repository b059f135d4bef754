"""``tracejit.backends``: the flags PyTorch programs set at their first lines.

``tracejit.backends.cudnn.benchmark = True`` and friends are accepted and do nothing
(tracejit does not use cuDNN); ``tracejit.backends.cuda.matmul.allow_tf32`` and the
attention switches likewise; ``tracejit.backends.mps.is_available()`` is False (there is
no Metal backend), as are mkldnn's and mkl's.
"""
import sys as _sys

from . import cuda, cudnn, mps  # noqa: F401
from ._plain import mkl, mkldnn, openmp, opt_einsum  # noqa: F401

for _m in (mkl, mkldnn, openmp, opt_einsum):   # importable as tracejit.backends.<name> too
    _sys.modules[_m.__name__] = _m
del _m

__all__ = ["cuda", "cudnn", "mps", "mkl", "mkldnn", "openmp", "opt_einsum"]
