"""Worker-thread waiting policy: numba's OpenMP workers stop spinning soon after a kernel.

Why: numba's usual threading layer is OpenMP (GNU libgomp). After a parallel kernel its
worker threads busy-wait for the next one, by default for 300,000 spin iterations (a
millisecond or more). numpy's BLAS (OpenBLAS) keeps worker threads of its own. A training
step alternates between the two (matmul, fused kernel, matmul, ...), and on a machine with
few cores each library's spinning workers take the cores the other one needs. Measured on
the MLP benchmark step (256x784 -> 1024 -> 1024 -> 10, LayerNorm, GELU, Adam; 2 cores):
61-85 ms per compiled step with libgomp's default, 40 ms with ``GOMP_SPINCOUNT=1000``
(tracejit eager: 41 ms). Back-to-back kernels of 32K-1M elements took the same time either
way: the workers are still spinning when the next kernel comes.

What: ``import tracejit`` sets ``GOMP_SPINCOUNT=1000`` in the environment unless
``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` is already set (yours wins). libgomp reads it once,
when it is loaded (numba loads it at the first parallel kernel), so the setting does
nothing if libgomp is already in the process (a library imported before tracejit may have
loaded it): `omp_spin_tuned` says whether it was made in time, and a RuntimeWarning says
so once when it was not (import order matters; the warning names the way out). OpenMP libraries loaded
later in the same process see the same setting. ``TRACEJIT_THREAD_TUNING=0`` turns it off.
"""
from __future__ import annotations

import os
import warnings

from .envflags import ProcessTuning

__all__ = ["SPINCOUNT", "tune_omp_spin", "omp_spin_tuned", "PARALLEL_MIN"]

SPINCOUNT = "1000"


def _libgomp_loaded() -> str:
    """The path of a libgomp already mapped into this process, or ""."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libgomp" in line:
                    return line.split()[-1]
    except OSError:
        pass
    return ""


def _set_spincount() -> bool:
    if "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ:
        return False
    loaded = _libgomp_loaded()
    if loaded:
        # Too late to apply, and it matters (compiled steps measured 10x slower when numba's
        # workers spin against BLAS): say so once, with the two ways out.
        warnings.warn(
            f"tracejit: an OpenMP runtime ({os.path.basename(loaded)}) was loaded before "
            f"`import tracejit` (by a library imported earlier, e.g. scikit-learn or torch), so "
            f"tracejit cannot shorten its workers' spin-waiting; compiled code may run much "
            f"slower while they compete with BLAS threads. Import tracejit first, or start "
            f"Python with GOMP_SPINCOUNT=1000 in the environment (TRACEJIT_THREAD_TUNING=0 "
            f"silences this).", RuntimeWarning, stacklevel=4)
        return False
    os.environ["GOMP_SPINCOUNT"] = SPINCOUNT
    return True


tune_omp_spin = ProcessTuning("TRACEJIT_THREAD_TUNING", _set_spincount,
                              "Set ``GOMP_SPINCOUNT`` as described above; True if it was set "
                              "in time to apply.")


def omp_spin_tuned() -> bool:
    """Whether `tune_omp_spin` set ``GOMP_SPINCOUNT`` before libgomp was loaded."""
    return tune_omp_spin.applied

# Below this many elements a kernel runs serially: waking the thread pool costs tens of
# microseconds here, more than the work itself. The one definition: compiled plans pick
# their serial or parallel kernel by it, fused Adam too, and Adam's default ``fused=None``
# fuses exactly the parameters whose kernel would run parallel (optim.FUSED_MIN).
PARALLEL_MIN = 1 << 14
