"""Worker-thread waiting policy: numba's OpenMP workers stop spinning soon after a kernel.

Why: after a parallel kernel, libgomp's workers busy-wait for the next one (a millisecond
or more by default), and numpy's OpenBLAS keeps spinning workers of its own; a training
step alternates between the two, so on few cores each library's spinning takes the cores
the other needs (the MLP compiled step on 2 cores: 61-85 ms, 40 ms with
``GOMP_SPINCOUNT=1000``).

What: ``import tracejit`` sets ``GOMP_SPINCOUNT=1000`` unless ``GOMP_SPINCOUNT`` or
``OMP_WAIT_POLICY`` is already set (yours wins). libgomp reads it once, when loaded, so it
does nothing if numba's libgomp is already in the process: `omp_spin_tuned` says whether
it was made in time, and a one-line RuntimeWarning says so once when it was not.

numpy's OpenBLAS is handed tracejit's worker pool for its multi-threaded calls through its
public ``openblas_set_threads_callback_function`` (`blas_on_pool`): one set of threads runs
BLAS's jobs and our kernels' shares alike. OpenBLAS splits a call exactly as before, so
results are the same bits. ``TRACEJIT_THREAD_TUNING=0`` turns both off.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings

from .envflags import ProcessTuning

__all__ = ["SPINCOUNT", "tune_omp_spin", "omp_spin_tuned", "blas_on_pool", "blas_threads", "set_blas_threads",
           "blas_threads_set", "blas_count_lock", "PARALLEL_MIN", "WAKE_WORK", "parallel_work", "parallel_work_min", "usable_cpus", "thread_ceiling", "set_num_threads", "get_num_threads",
           "set_num_interop_threads", "get_num_interop_threads"]


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; the machine's count where the
    platform has no mask)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1

SPINCOUNT = "1000"


def _libgomp_loaded() -> str:
    """The path of a libgomp already in this process that numba's OpenMP layer would use
    (``libgomp.so.1`` among the loaded libraries), or "". A wheel's renamed copy
    (``libgomp-<hash>.so.1``) is another library and does not count. Nothing where numba is
    told to use another threading layer."""
    if os.environ.get("NUMBA_THREADING_LAYER", "").lower() in ("tbb", "workqueue"):
        return ""
    with contextlib.suppress(OSError):
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if os.path.basename(path).startswith("libgomp.so"):
                    return path
    return ""


def _set_spincount() -> bool:
    if "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ:
        return False
    loaded = _libgomp_loaded()
    if loaded:
        # Too late to apply, and it matters (compiled steps measured 10x slower when numba's
        # workers spin against BLAS): say so once, in one line, with the two ways out.
        warnings.warn(
            f"tracejit: {os.path.basename(loaded)} was loaded before `import tracejit`, so "
            f"numba's OpenMP workers keep their default spin-wait (parallel kernels may run "
            f"much slower beside BLAS). Import tracejit first, or start Python with "
            f"GOMP_SPINCOUNT=1000 (TRACEJIT_THREAD_TUNING=0 silences this).",
            RuntimeWarning, stacklevel=4)
        return False
    os.environ["GOMP_SPINCOUNT"] = SPINCOUNT
    return True


tune_omp_spin = ProcessTuning("TRACEJIT_THREAD_TUNING", _set_spincount,
                              "Set ``GOMP_SPINCOUNT`` as described above; True if it was set "
                              "in time to apply.")


def omp_spin_tuned() -> bool:
    """Whether `tune_omp_spin` set ``GOMP_SPINCOUNT`` before libgomp was loaded."""
    return tune_omp_spin.applied


# ---------------------------------------------------------------- BLAS threads
# numpy's BLAS and the functions that report or set its thread count, by library: the
# OpenBLAS builds numpy wheels ship (scipy-openblas, 64-bit integers, symbols suffixed),
# a system OpenBLAS, MKL.
_BLAS_GETTERS = {
    "openblas": ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
                 "openblas_get_num_threads64_", "openblas_get_num_threads"),
    "mkl_rt": ("MKL_Get_Max_Threads",),
}
_BLAS_SETTERS = {
    "openblas": ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
                 "openblas_set_num_threads64_", "openblas_set_num_threads"),
    "mkl_rt": ("MKL_Set_Num_Threads",),
}
_BLAS_CALLBACK = ("scipy_openblas_set_threads_callback_function64_", "scipy_openblas_set_threads_callback_function",
                  "openblas_set_threads_callback_function64_", "openblas_set_threads_callback_function")
_on_pool: list = []   # [True / False] once `blas_on_pool` has run


def blas_on_pool() -> bool:
    """Have numpy's OpenBLAS (0.3.27 or later) run the jobs of its multi-threaded calls on
    tracejit's worker pool (workpool.py's ``blas_jobs``) rather than on threads of its own;
    True where it does. Done once, at the first use of BLAS's thread count; nothing where
    the BLAS is another one, the pool cannot start, or ``TRACEJIT_THREAD_TUNING=0``."""
    if _on_pool:
        return _on_pool[0]
    ok = False
    try:
        if not _tuning_off():
            ok = _route_blas()
    finally:
        _on_pool.append(ok)
    return ok


def _tuning_off() -> bool:
    from .envflags import is_off
    return is_off("TRACEJIT_THREAD_TUNING")


def _route_blas() -> bool:
    import ctypes
    path, setter = _blas_function(_BLAS_SETTERS)
    if setter is None or "openblas" not in os.path.basename(path).lower():
        return False
    lib = ctypes.CDLL(path)
    install = next((getattr(lib, n) for n in _BLAS_CALLBACK if hasattr(lib, n)), None)
    if install is None:
        return False
    try:
        from .compiler.cpu.runtime import workpool
        jobs = workpool.pool().blas_jobs_address
    except Exception:   # (no llvmlite, no futex here: OpenBLAS keeps its threads)
        return False
    install.argtypes = [ctypes.c_void_p]
    install.restype = None
    install(jobs)
    return True


_found: dict = {}


def _blas_function(table: dict):
    """(library path, function) of the first loaded BLAS with one of `table`'s symbols
    (looked up once: the BLAS numpy loaded stays for the life of the process)."""
    key = id(table)
    if key not in _found or _found[key][1] is None:
        _found[key] = _find_blas_function(table)
    return _found[key]


_blas_paths: list = []   # the mapped shared libraries a BLAS was found among


def _mapped_libraries() -> list:
    """Shared libraries mapped into this process. The list a BLAS was found in is kept:
    the getter and the setter are looked up from one scan of /proc/self/maps (1-3 ms)."""
    if _blas_paths:
        return _blas_paths
    try:
        with open("/proc/self/maps") as f:
            return list(dict.fromkeys(line.split()[-1] for line in f if ".so" in line))
    except OSError:
        return []


def _find_blas_function(table: dict):
    import ctypes
    paths = _mapped_libraries()
    for path in paths:
        base = os.path.basename(path).lower()
        for key, symbols in table.items():
            if key not in base:
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for sym in symbols:
                fn = getattr(lib, sym, None)
                if fn is not None:
                    fn.restype = ctypes.c_int
                    if "set" in sym.lower():
                        fn.argtypes = [ctypes.c_int]
                        fn.restype = None
                    if not _blas_paths:
                        _blas_paths.extend(paths)
                    return path, fn
    return None, None


def blas_threads() -> int | None:
    """Threads numpy's BLAS (OpenBLAS or MKL) will use for a large product; None when
    no such library is loaded or it cannot say (Linux only)."""
    if _getset:     # (the functions found: no lookup, no import statement)
        return int(_getset[0]())
    import numpy  # noqa: F401  (loads the BLAS)
    _, fn = _blas_function(_BLAS_GETTERS)
    if fn is None:
        return None
    blas_on_pool()
    return int(fn())


# Held while BLAS's count must not change: every change made here takes it, and a launch
# that runs BLAS products on the worker pool's threads with the count at one holds it
# throughout. The count is process-wide: a share that read another thread's count of two
# would run its jobs on extra threads and take its core twice.
blas_count_lock = threading.Lock()


def set_blas_threads(n: int) -> bool:
    """Set the threads numpy's BLAS uses (process-wide, like ``OPENBLAS_NUM_THREADS`` at
    start-up); False when no known BLAS is loaded. Waits while a launch holds the count
    (`blas_count_lock`)."""
    if int(n) < 1:
        raise ValueError(f"set_blas_threads: need at least 1 thread, got {n}")
    fns = _getset or _blas_getset()
    if fns is None:
        import numpy  # noqa: F401  (loads the BLAS)
        _, fn = _blas_function(_BLAS_SETTERS)   # (a setter without a getter: still set)
        if fn is None:
            return False
    else:
        fn = fns[1]
    with blas_count_lock:
        fn(int(n))
    return True


_getset: tuple = ()   # (getter, setter) of numpy's BLAS thread count, once both are found


def _blas_getset():
    """(getter, setter) ctypes functions of numpy's BLAS thread count, or None."""
    global _getset
    if not _getset:
        import numpy  # noqa: F401  (loads the BLAS)
        get, put = _blas_function(_BLAS_GETTERS)[1], _blas_function(_BLAS_SETTERS)[1]
        if get is None or put is None:
            return None
        blas_on_pool()
        _getset = (get, put)
    return _getset


class blas_threads_set:
    """``with blas_threads_set(n):`` numpy's BLAS on `n` threads inside the block and on its
    count before after it (nothing changes where no known BLAS is loaded or the count
    already is `n`). A class, not a generator context manager: compiled plans enter it
    around every product split, on cold caches, where contextlib's frames cost tens of us."""

    __slots__ = ("n", "before")

    def __init__(self, n: int):
        self.n = int(n)
        self.before = None

    def __enter__(self) -> None:
        fns = _blas_getset()
        if fns is None:
            return
        before = int(fns[0]())
        if before != self.n:
            set_blas_threads(self.n)   # (its check of n, on the functions found above)
            self.before = before

    def __exit__(self, *exc) -> None:
        if self.before is not None:
            with blas_count_lock:
                _getset[1](self.before)
            self.before = None


# Below this many elements a kernel runs serially: waking the thread pool costs tens of
# microseconds here, more than the work itself. The one definition: compiled plans pick
# their serial or parallel kernel by it, fused Adam too, and Adam's default ``fused=None``
# fuses exactly the parameters whose kernel would run parallel (optim.FUSED_MIN).
PARALLEL_MIN = 1 << 14


# The work (elements x passes) that waking numba's worker threads costs, in serial
# row-kernel time: a caller doing Python work between calls finds them asleep (softmax over
# 256x64 on 2 threads: 17-19 us against 14 serial).
WAKE_WORK = 1 << 18


def parallel_work_min(threads: int) -> int:
    """The work from which a rows kernel runs its parallel variant on `threads` threads:
    WAKE_WORK over (T - 1) / T; never on one thread."""
    if threads <= 1:
        return 1 << 62
    return WAKE_WORK * threads // (threads - 1)


def parallel_work(work: int, threads: int = 0) -> bool:
    """Whether a rows kernel call doing `work` (elements times passes) runs the parallel
    variant (`threads`: numba's count when 0, not asked below WAKE_WORK: ~1 us)."""
    if work < WAKE_WORK:
        return False
    threads = threads or get_num_threads()
    return work >= parallel_work_min(threads)


_interop = [0]   # 0: not set, the CPU count
_set = [0]       # the count `set_num_threads` set last (or ``OMP_NUM_THREADS``'s); 0: none


def thread_ceiling() -> int:
    """The threads one op may use: the count `set_num_threads` set last, else the CPUs this
    process may use. tracejit's worker-pool launches never take more (runtime/coreshare.py)."""
    return _set[0] or usable_cpus()


def set_num_threads(n: int) -> None:
    """``torch.set_num_threads``: the threads one op may use, numpy's BLAS, numba's parallel
    kernels and tracejit's worker pool alike. The adaptive policy (tracejit/compiler/cpu/runtime/coreshare.py) takes a count set
    here as its ceiling and only ever lowers it for a busy machine."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads: expected a positive integer, got {n!r}")
    _set[0] = n
    set_blas_threads(n)
    share = sys.modules.get("tracejit.compiler.cpu.runtime.coreshare")
    if share is not None:
        share.user_set()      # (the load policy takes the counts as its ceilings)
    _numba_count(n, replace=True)


def _numba_count(n: int, replace: bool) -> None:
    """numba's kernels to `n` threads: its count where numba is loaded, else the size of the
    pool it makes when it loads (kept where set unless `replace`)."""
    if "numba" in sys.modules:
        import numba    # waits while another thread is still importing it
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    elif replace:
        os.environ["NUMBA_NUM_THREADS"] = str(n)
    else:
        os.environ.setdefault("NUMBA_NUM_THREADS", str(n))


def _ceiling_from_env() -> None:
    """``OMP_NUM_THREADS=n`` at import caps tracejit's threads as ``set_num_threads(n)`` would,
    as it caps PyTorch's and OpenBLAS's, so that numba's parallel kernels and the worker pool
    do not take every CPU of the process beside a BLAS held to n (a job given n cores).
    ``NUMBA_NUM_THREADS`` where set stays numba's count; a list (``4,2``) gives its first."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if not first.isdigit() or int(first) < 1:
        return
    _set[0] = int(first)
    _numba_count(int(first), replace=False)


_ceiling_from_env()


def get_num_threads() -> int:
    """The threads one op may use (numba's count where numba is loaded, else BLAS's)."""
    if _numba_loaded():
        import numba
        return int(numba.get_num_threads())
    return blas_threads() or usable_cpus()


def _numba_loaded() -> bool:
    """Whether numba is imported and its import is over: while another thread imports it,
    ``import numba`` here would wait for the whole import (~0.2 s). Until then the count
    is BLAS's."""
    mod = sys.modules.get("numba")
    return mod is not None and not getattr(getattr(mod, "__spec__", None), "_initializing", False)


def set_num_interop_threads(n: int) -> None:
    """Accepted for PyTorch programs: ops do not run side by side, so the count is kept
    only for `get_num_interop_threads`."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_interop_threads: expected a positive integer, got {n!r}")
    _interop[0] = n


def get_num_interop_threads() -> int:
    return _interop[0] or usable_cpus()
