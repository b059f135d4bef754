"""tracejit: PyTorch-style eager tensors and autograd, plus a tracing JIT to numba kernels.

``import tracejit as tj`` where you wrote ``import torch``.
"""
from __future__ import annotations

__version__ = "0.1.0"

# threads first: its tuning is an environment variable libgomp reads when it loads
from .threads import tune_omp_spin as _tune_omp_spin

_tune_omp_spin()   # numba's OpenMP workers stop spinning soon (see tracejit/threads.py)

from .memory import tune_allocator as _tune_allocator  # noqa: E402

_tune_allocator()  # keep freed array memory for reuse (see tracejit/memory.py)

import warnings as _warnings  # noqa: E402

# log(0), 1/0, sqrt(-1), exp overflow give inf/nan silently in PyTorch, where numpy's
# ufuncs warn ("divide by zero encountered in log"). The warning is ignored where the
# ufunc's caller is tracejit's own code (eager ops, their gradients, compiled plans'
# library calls); the program's own numpy calls still warn. A filter costs nothing until
# a warning is raised: numpy's error state set around each eager op cost ~12% of a small
# op's time. (A filter added by `warnings.simplefilter` later, or inside a
# `catch_warnings` block that imported tracejit, takes precedence.)
_warnings.filterwarnings("ignore", r"(divide by zero|invalid value|overflow|underflow) encountered",
                         RuntimeWarning, r"tracejit(\.|$)")

from . import dtypes as _dtypes
from .dtypes import (DType, bfloat16, bool_, complex64, complex128, float16, float32, float64, get_default_dtype,
                     int8, int16, int32, int64, promote_types, set_default_dtype, uint8)
from .dtypes import DType as dtype  # noqa: E402,F401  (torch.dtype: the class of every dtype)
from .device import device
from .tensor import Tensor  # first: it closes the tensor/ops/autograd import cycle (see its end)
from . import tensor_inplace, tensor_operators, tensor_compat  # noqa: E402,F401  (Tensor's method groups)

from .ops import *  # noqa: E402,F401,F403
from .ops import true_divide, divide, multiply, subtract, negative, broadcast_to  # noqa: E402,F401
from .ops import random  # noqa: E402  (``torch.random``: seeds, rng states, fork_rng)
__import__("sys").modules[__name__ + ".random"] = random   # (``from torch.random import fork_rng``)
from . import autograd  # noqa: E402
from .autograd import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled  # noqa: E402,F401
from .autograd.grad_mode import is_inference_mode_enabled  # noqa: E402,F401
from .loss_functions import *  # noqa: E402,F401,F403  (torch's integer-reduction spellings)

bool = bool_  # noqa: A001  (tracejit.bool, like torch.bool)
float = float32  # noqa: A001
double = float64
half = float16
long = int64
short = int16
int = int32  # noqa: A001
cfloat = complex64
cdouble = complex128

from .size import Size  # noqa: E402
from .formats import (channels_last, channels_last_3d, contiguous_format, layout,  # noqa: E402,F401
                      legacy_contiguous_format, memory_format, preserve_format, strided)


def is_tensor(x) -> "builtins.bool":  # noqa: F821
    return isinstance(x, Tensor)


def numel(x: Tensor):
    return x.numel()


def is_floating_point(x: Tensor) -> "builtins.bool":  # noqa: F821
    return x.is_floating_point()


from .outarg import OUT_FUNCTIONS as _OUT_FUNCTIONS, OUT_FUNCTIONS_VARARGS as _OUT_VARARGS  # noqa: E402
from .outarg import with_out as _with_out  # noqa: E402
for _name in _OUT_FUNCTIONS + _OUT_VARARGS:  # the out= keyword on tracejit.<fn> (tensor methods stay as they are)
    globals()[_name] = _with_out(globals()[_name], _name)
del _name

from .threads import (get_num_interop_threads, get_num_threads, set_num_interop_threads,  # noqa: E402,F401
                      set_num_threads)
from .jit import compile, eager, explain, script  # noqa: E402,F401,A004
from .jit import trace as _jit_trace  # noqa: E402
from .jit.torchscript import _assert, _C, ScriptFunction, ScriptModule  # noqa: E402,F401


def trace(fn=None, *args, **kwargs):
    """``tracejit.trace(f)``: compile `f` by tracing it (see `tracejit.jit.trace`). Given a
    tensor, it is PyTorch's ``torch.trace``: the sum of a matrix's diagonal."""
    if isinstance(fn, Tensor):
        from .ops.rearrange import trace as _matrix_trace
        return _matrix_trace(fn)
    return _jit_trace(fn, *args, **kwargs)


# the CPU backend's implementations of primitives join the table (ops/impls.py)
from .compiler.cpu import implementations as _cpu_implementations  # noqa: E402,F401
from . import errors  # noqa: E402,F401
from . import nn, optim, data, utils  # noqa: E402,F401
from .serialization import load, save  # noqa: E402,F401
from . import cuda  # noqa: E402,F401
from . import distributed  # noqa: E402,F401
from . import accelerator, backends, onnx  # noqa: E402,F401
from . import fx, hub, overrides  # noqa: E402,F401
from ._path_modules import path_module as _path_module  # noqa: E402
version = _path_module(__name__ + ".version", "``torch.version``: what this build is.",
                       {"__version__": __version__, "cuda": None, "hip": None, "debug": False, "git_version": ""})
from .top_compat import *  # noqa: E402,F401,F403
from .amp import GradScaler  # noqa: E402,F401
from . import amp, cpu, distributions, fft, linalg, multiprocessing, special  # noqa: E402,F401
from .generator import Generator, default_generator  # noqa: E402,F401
from .defaults import (are_deterministic_algorithms_enabled, get_default_device,  # noqa: E402,F401
                       get_float32_matmul_precision, is_anomaly_enabled, is_warn_always_enabled,
                       set_anomaly_enabled, set_default_device, set_float32_matmul_precision, set_flush_denormal,
                       set_printoptions, set_warn_always, use_deterministic_algorithms,
                       is_deterministic_algorithms_warn_only_enabled, set_deterministic_debug_mode,
                       get_deterministic_debug_mode)
from . import tensor_compat as _tensor_compat  # noqa: E402
from .tensor_compat import top_level_inplace as _top_level_inplace  # noqa: E402
globals().update({_k: _v for _k, _v in _top_level_inplace().items() if _k not in globals()})
from .linalg import cholesky_legacy as cholesky, inverse, logdet, matrix_power, pinverse  # noqa: E402,F401
from .linalg import qr_legacy as qr, svd_legacy as svd  # noqa: E402,F401
from .lowrank import pca_lowrank, svd_lowrank  # noqa: E402,F401
from .linalg import (cholesky_inverse, cholesky_solve, frobenius_norm, householder_product as orgqr,  # noqa: E402,F401
                     lu_legacy as lu, lu_solve_legacy as lu_solve, lu_unpack, matrix_exp, nuclear_norm, ormqr,
                     triangular_solve)
from .signal import (bartlett_window, blackman_window, hamming_window, hann_window, istft,  # noqa: E402,F401
                     kaiser_window, stft)
from .amp import (autocast, clear_autocast_cache, is_autocast_cache_enabled,  # noqa: E402,F401
                  set_autocast_cache_enabled)
from .legacy_types import (BoolTensor, ByteTensor, CharTensor, DoubleTensor, FloatTensor,  # noqa: E402,F401
                           HalfTensor, IntTensor, LongTensor, ShortTensor, set_default_tensor_type, typename)
from math import e, inf, nan, pi  # noqa: E402,F401  (torch.pi and friends are Python floats)
from . import func  # noqa: E402,F401
from .func import cond, vmap  # noqa: E402,F401
from . import sparse  # noqa: E402,F401
from .typeinfo import finfo, iinfo  # noqa: E402,F401
from .sparse import sparse_coo, sparse_coo_tensor, spmm  # noqa: E402,F401
from .exactcall import with_numpy_names as _with_numpy_names  # noqa: E402
for _k, _v in list(globals().items()):   # tracejit.gather(x, axis=1, index=i), as PyTorch's functions
    if not _k.startswith("_") and type(_v) is type(is_tensor):
        globals()[_k] = _with_numpy_names(_v, __name__, _k)
del _k, _v


def __getattr__(name: str):
    """``tracejit.compiler`` (wait, reset, the cache commands), ``tracejit.testing``,
    ``tracejit.library`` and ``tracejit.profiler`` on first use: ``import tracejit`` leaves loading the backend to the first compiled call,
    and a program reaches ``torch.testing.assert_close`` without importing it; the
    ``_foreach_*`` list functions (tensor_compat.foreach)."""
    if name in ("compiler", "testing", "profiler", "_dynamo", "_inductor", "library"):
        import importlib
        return importlib.import_module("." + name, __name__)
    fn = _tensor_compat.foreach(name)
    if fn is not None:
        return fn
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"compiler"})
