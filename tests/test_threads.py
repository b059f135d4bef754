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


_BLAS_PROBE = ("{first}import os, tracejit\n"
               "print(tracejit.threads.tune_blas_spin.applied, os.environ.get('OPENBLAS_THREAD_TIMEOUT'))\n")


def test_openblas_spin_timeout_set_before_numpy_loads_it():
    # set when tracejit comes first; left alone when the user set it or opted out
    drop = ("OPENBLAS_THREAD_TIMEOUT",)
    assert _probe({}, drop, _BLAS_PROBE.format(first="")) == ["True", "20"]
    assert _probe({"OPENBLAS_THREAD_TIMEOUT": "7"}, (), _BLAS_PROBE.format(first="")) == ["False", "7"]
    assert _probe({"TRACEJIT_THREAD_TUNING": "0"}, drop, _BLAS_PROBE.format(first="")) == ["False", "None"]
    assert _probe({"TRACEJIT_THREAD_TUNING": "0"}, drop, _BLAS_PROBE.format(first="import numpy\n")) \
        == ["False", "None"]


# numpy first: OpenBLAS has read its environment; tracejit makes it read it again and restarts
# its pool. Prints what OpenBLAS itself read before and after, and whether a product large
# enough for its threads still comes out right after the restart.
_LATE_PROBE = """
import ctypes, os
import numpy as np
a = np.random.default_rng(0).standard_normal((512, 512))
a @ a                                   # OpenBLAS's pool has run
paths = [line.split()[-1] for line in open("/proc/self/maps") if "openblas" in line.lower()]
lib = ctypes.CDLL(paths[0]) if paths else None
if lib is None or not hasattr(lib, "openblas_thread_timeout"):
    print("skip")
    raise SystemExit
lib.openblas_thread_timeout.restype = ctypes.c_uint
before = lib.openblas_thread_timeout()
import tracejit
from tracejit.threads import blas_threads, openblas_pthreads
if not openblas_pthreads(lib):
    print("skip")
    raise SystemExit
ok = np.allclose(a @ a.T, np.einsum("ik,jk->ij", a, a))
print(tracejit.threads.tune_blas_spin.applied, before, lib.openblas_thread_timeout(), ok)
"""


def test_openblas_spin_timeout_reaches_openblas_loaded_before_tracejit():
    out = _probe({}, ("OPENBLAS_THREAD_TIMEOUT",), _LATE_PROBE)
    if out == ["skip"]:
        pytest.skip("numpy's BLAS is not a pthreads OpenBLAS exporting openblas_thread_timeout")
    assert out == ["True", "0", "20", "True"]


def test_thread_flag_is_per_thread_and_nests():
    import threading as _threading
    from tracejit.threads import ThreadFlag
    flag = ThreadFlag()
    seen = []
    assert not flag
    with flag.setting():
        with flag.setting():
            assert flag
        assert flag                      # the inner block restores the outer's value
        t = _threading.Thread(target=lambda: seen.append(bool(flag)))
        t.start()
        t.join()
    assert not flag and seen == [False]  # another thread never saw it on


def test_set_num_threads_caps_blas_and_numba():
    import tracejit as tj
    import numba
    from tracejit import threads
    before_blas, before_numba = threads.blas_threads(), numba.get_num_threads()
    try:
        tj.set_num_threads(1)
        assert tj.get_num_threads() == 1
        assert threads.blas_threads() in (None, 1)
    finally:
        if before_blas:
            threads.set_blas_threads(before_blas)
        numba.set_num_threads(before_numba)
    with pytest.raises(ValueError, match="positive integer"):
        tj.set_num_threads(0)
    tj.set_num_interop_threads(2)
    assert tj.get_num_interop_threads() == 2


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
