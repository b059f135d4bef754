"""Going on with the survivors (ULFM): rank 2 of 3 is SIGKILLed at step 3; the survivors
catch ProcessFailedError, shrink(), re-shard and finish, with the parameters of a fresh
2-rank run from the checkpoint of step 3 (bitwise). Needs Open MPI with ULFM
(``pip install 'tracejit[ulfm]'`` in an environment of its own): the test uses this
Python's MPI when it is one, else the Python named by TRACEJIT_ULFM_PYTHON; otherwise it
is skipped with the reason. MPICH's ch4 device, which the ``dist`` extra installs, has
no usable ULFM."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tracejit as tj

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parent / "workers" / "ulfm_worker.py"
PROBE = "from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0]); print(hasattr(MPI.Comm, 'Shrink'))"


def _mpi_of(python):
    try:
        p = subprocess.run([python, "-c", PROBE], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or len(lines) < 2:
        return None, p.stdout.strip()[-300:]
    return lines[-2], lines[-1] == "True"


@pytest.fixture(scope="module")
def ulfm_python():
    here, ok = _mpi_of(sys.executable)
    if here and "Open MPI" in here and ok:
        return sys.executable
    other = os.environ.get("TRACEJIT_ULFM_PYTHON")
    if not other:
        pytest.skip(f"no MPI with ULFM: this Python's is {here or 'missing'} (MPICH's ch4 device has no "
                    f"usable ULFM); set TRACEJIT_ULFM_PYTHON to a Python whose environment has "
                    f"tracejit[ulfm] (the Open MPI wheel)")
    lib, ok = _mpi_of(other)
    if not (lib and "Open MPI" in lib and ok):
        pytest.skip(f"TRACEJIT_ULFM_PYTHON={other} has no Open MPI with Comm.Shrink ({lib})")
    return other


def run(python, n, *args):
    mpiexec = str(Path(python).parent / "mpiexec")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run([mpiexec, "--with-ft", "ulfm", "--oversubscribe", "-n", str(n), python, str(WORKER),
                        *map(str, args)], env=env, cwd=str(ROOT), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=180)
    return p.returncode, p.stdout


def test_survivors_shrink_and_finish_as_a_run_on_two_ranks(ulfm_python, tmp_path):
    ckpt = tmp_path / "step3.ckpt"
    rc, out = run(ulfm_python, 3, ckpt, tmp_path / "survivors.out", "fail")
    assert rc == 0, out[-6000:]
    assert "rank 2 died" in out, out[-6000:]
    for r in (0, 1):
        assert f"rank {r}: step 3: ProcessFailedError" in out, out[-6000:]
        assert f"rank {r}/2 after shrink: repeating step 3 from sample 36" in out, out[-6000:]
        assert f"rank {r}/2: fail finished 6 steps, 60 samples" in out, out[-6000:]
    rc, out = run(ulfm_python, 2, ckpt, tmp_path / "fresh.out", "resume")
    assert rc == 0, out[-6000:]
    want, got = tj.load(tmp_path / "fresh.out"), tj.load(tmp_path / "survivors.out")
    for k in want:
        np.testing.assert_array_equal(got[k].numpy(), want[k].numpy(), err_msg=k)


def test_fault_tolerance_refused_without_ulfm(mpirun):
    """With MPICH (the dist extra) init_process_group(fault_tolerant=True) says what to install."""
    code = ("import tracejit.distributed as d\n"
            "try:\n    d.init_process_group(fault_tolerant=True)\n"
            "except RuntimeError as e:\n    print('refused:', e)\n")
    p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    here, _ = _mpi_of(sys.executable)
    if "Open MPI" in (here or ""):
        pytest.skip("this Python's MPI is Open MPI")
    assert "refused: init_process_group(fault_tolerant=True): the MPI here (MPICH" in p.stdout, p.stdout
    assert "tracejit[ulfm]" in p.stdout and "--with-ft ulfm" in p.stdout
