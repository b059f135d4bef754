"""tracejit.threads: the OpenMP and OpenBLAS spin settings made at import, and when they are left alone."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="libgomp is Linux-only")

_PROBE = ("import os, tracejit\n"
          "from tracejit.threads import omp_spin_tuned\n"
          "print(omp_spin_tuned(), os.environ.get('GOMP_SPINCOUNT'))\n")


def _probe(env_extra, drop=(), code=_PROBE):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "TRACEJIT_THREAD_TUNING") + drop}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120, check=True).stdout.split()


def test_set_at_import():
    assert _probe({}) == ["True", "1000"]


def test_user_settings_win():
    assert _probe({"GOMP_SPINCOUNT": "42"}) == ["False", "42"]
    assert _probe({"OMP_WAIT_POLICY": "active"}) == ["False", "None"]


def test_opt_out():
    assert _probe({"TRACEJIT_THREAD_TUNING": "0"}) == ["False", "None"]


def test_too_late_when_libgomp_is_already_loaded():
    import ctypes.util
    name = ctypes.util.find_library("gomp")
    if name is None:
        pytest.skip("no libgomp on this machine")
    code = "import ctypes; ctypes.CDLL(%r)\n" % name + _PROBE
    assert _probe({}, code=code) == ["False", "None"]


def test_too_late_is_said_once_with_the_way_out():
    import ctypes.util
    name = ctypes.util.find_library("gomp")
    if name is None:
        pytest.skip("no libgomp on this machine")
    code = "import ctypes; ctypes.CDLL(%r)\nimport tracejit\nimport tracejit.threads\n" % name
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "TRACEJIT_THREAD_TUNING")}
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120, check=True).stderr
    assert err.count("was loaded before `import tracejit`") == 1, err
    assert "GOMP_SPINCOUNT=1000" in err and "Import tracejit first" in err
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=dict(env, TRACEJIT_THREAD_TUNING="0"), timeout=120, check=True).stderr
    assert "was loaded before" not in quiet


    line = [ln for ln in err.splitlines() if "was loaded before" in ln]
    assert len(line) == 1 and "GOMP_SPINCOUNT=1000" in line[0]   # one line says it all


def test_a_wheels_own_openmp_copy_imported_first_is_no_reason_to_warn():
    # scikit-learn ships libgomp renamed (libgomp-<hash>.so.1): numba loads the system's
    # libgomp.so.1 later, which reads the setting made at import.
    pytest.importorskip("sklearn")
    code = ("import sklearn.linear_model, warnings\n"
            "maps = open('/proc/self/maps').read()\n"
            "print('vendored' if 'libgomp-' in maps else 'none')\n"
            "import os, tracejit\n"
            "print(tracejit.threads.omp_spin_tuned(), os.environ.get('GOMP_SPINCOUNT'))\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "TRACEJIT_THREAD_TUNING")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120, check=True)
    vendored, tuned, spin = r.stdout.split()
    if vendored != "vendored":
        pytest.skip("this scikit-learn loads no OpenMP copy of its own")
    assert (tuned, spin) == ("True", "1000") and "was loaded before" not in r.stderr, r.stderr


# numpy first, a product on OpenBLAS's own threads, then tracejit: the next product's jobs
# run on tracejit's worker pool (a counting wrapper around the pool's callback shows they do)
# with the bits OpenBLAS's own threads gave.
_POOL_PROBE = """
import ctypes
import numpy as np
r = np.random.default_rng(0)
a, b = r.standard_normal((700, 300)).astype(np.float32), r.standard_normal((300, 500)).astype(np.float32)
own = a @ b
import tracejit
from tracejit import threads
from tracejit.compiler.cpu.runtime import workpool
print(threads.blas_on_pool(), threads.blas_on_pool())
if not threads._on_pool[0]:
    raise SystemExit
threads.set_blas_threads(2)
path, _ = threads._blas_function(threads._BLAS_SETTERS)
lib = ctypes.CDLL(path)
install = next(getattr(lib, n) for n in threads._BLAS_CALLBACK if hasattr(lib, n))
install.argtypes = [ctypes.c_void_p]
CB = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int)
jobs = CB(workpool.pool().blas_jobs_address)
seen = []
def counted(sync, dojob, num, size, data, d):
    seen.append(num)
    jobs(sync, dojob, num, size, data, d)
wrapper = CB(counted)
install(ctypes.cast(wrapper, ctypes.c_void_p))
pooled = a @ b
install(workpool.pool().blas_jobs_address)
print(max(seen), np.array_equal(own, pooled), np.array_equal(a @ b, own))
"""


def test_openblas_runs_its_threaded_jobs_on_the_worker_pool():
    out = _probe({"OPENBLAS_NUM_THREADS": "2"}, (), _POOL_PROBE)
    if out[:2] == ["False", "False"]:
        pytest.skip("numpy's BLAS takes no threads callback (not an OpenBLAS 0.3.27 or later)")
    assert out == ["True", "True", "2", "True", "True"]
    assert _probe({"TRACEJIT_THREAD_TUNING": "0"}, (), _POOL_PROBE) == ["False", "False"]


def test_set_num_threads_caps_blas_numba_and_the_pool(thread_counts_back):
    import tracejit as tj
    from tracejit import threads
    from tracejit.compiler.cpu.runtime import coreshare, sharepool
    tj.set_num_threads(1)
    assert tj.get_num_threads() == 1
    assert threads.blas_threads() in (None, 1)
    assert sharepool.pool_threads() == 1      # chunk kernels, GEMM shares, optimizer steps
    assert coreshare.core_share.cpus == threads.usable_cpus()   # (GEMM choice keys read it)
    tj.set_num_threads(3)
    assert threads.thread_ceiling() == 3
    assert 1 <= sharepool.pool_threads() <= 3
    with pytest.raises(ValueError, match="positive integer"):
        tj.set_num_threads(0)
    assert threads.thread_ceiling() == 3      # (the bad count changed nothing)
    tj.set_num_interop_threads(2)
    assert tj.get_num_interop_threads() == 2


_OMP = ("import tracejit as tj, numba\n"
        "from tracejit import threads\n"
        "from tracejit.compiler.cpu.runtime import sharepool\n"
        "print(tj.get_num_threads(), numba.get_num_threads(), threads.thread_ceiling(), sharepool.pool_threads())\n"
        "tj.set_num_threads(2)\n"
        "print(threads.thread_ceiling())\n")


@pytest.mark.parametrize("value,want", [("1", "1"), ("1,2", "1")])
def test_omp_num_threads_caps_numba_and_the_pool_as_in_pytorch(value, want):
    got = _probe({"OMP_NUM_THREADS": value}, drop=("NUMBA_NUM_THREADS",), code=_OMP)
    assert got == [want] * 4 + ["2"]      # (set_num_threads still sets a new ceiling)


def test_a_bad_omp_num_threads_leaves_the_cpus():
    got = _probe({"OMP_NUM_THREADS": "many"}, drop=("NUMBA_NUM_THREADS",),
                 code="from tracejit import threads\nprint(threads.thread_ceiling() == threads.usable_cpus())\n")
    assert got == ["True"]


def test_get_num_threads_does_not_wait_for_numba_being_imported(monkeypatch):
    # another thread importing numba: its module is in sys.modules, still initializing
    import types
    from tracejit import threads
    half = types.ModuleType("numba")
    half.__spec__ = types.SimpleNamespace(_initializing=True)   # no get_num_threads yet
    monkeypatch.setitem(sys.modules, "numba", half)
    assert threads.get_num_threads() == (threads.blas_threads() or threads.usable_cpus())
    half.__spec__._initializing = False
    half.get_num_threads = lambda: 7                          # the import is over
    assert threads.get_num_threads() == 7
