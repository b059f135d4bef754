"""``python -m tracejit.distributed.run``: a job whose rank is SIGKILLed restarts from its last
checkpoint and ends with the parameters of a run never interrupted (bitwise); a job out of
restarts fails with the failed rank named (the training script is workers/resume_worker.py)."""
import os
import subprocess
import sys

import numpy as np

import tracejit as tj

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def launch(mpirun, tmp_path, name, *args, restarts=0):
    p = mpirun.launcher("resume_worker.py", 2, tmp_path / f"{name}.ckpt", tmp_path / f"{name}.out", *args,
                        restarts=restarts)
    return p, p.out


def test_sigkilled_rank_restarts_and_resumes_exactly(mpirun, tmp_path):
    ref, _ = launch(mpirun, tmp_path, "ref")
    assert ref.returncode == 0, ref.stdout
    assert "rank 0: finished 15 steps on attempt 0" in ref.stdout, ref.stdout
    p, _ = launch(mpirun, tmp_path, "killed", "kill", restarts=1)
    assert p.returncode == 0, p.stdout
    assert "[tracejit.distributed.run] attempt 1 failed" in p.stdout, p.stdout
    assert "rank 1 (pid" in p.stdout and "exit code 9, Killed (signal 9)); restarting (1 restart left)" in p.stdout, \
        p.stdout
    assert "attempt 2 failed" not in p.stdout
    assert "rank 1: attempt 1 resumes at epoch 1 step 2" in p.stdout, p.stdout
    assert "rank 0: finished 15 steps on attempt 1" in p.stdout, p.stdout
    want, got = tj.load(tmp_path / "ref.out"), tj.load(tmp_path / "killed.out")
    assert list(want) == list(got)
    for k in want:
        np.testing.assert_array_equal(got[k].numpy(), want[k].numpy(), err_msg=k)


def test_out_of_restarts_fails_naming_the_rank(mpirun, tmp_path):
    p, _ = launch(mpirun, tmp_path, "fail", "kill", restarts=0)
    assert p.returncode != 0
    assert "attempt 1 failed" in p.stdout and "rank 1 (pid" in p.stdout and "Killed (signal 9)" in p.stdout, p.stdout
    assert "no restarts left" in p.stdout
    assert not (tmp_path / "fail.out").exists()


def test_launcher_refuses_bad_arguments(tmp_path):
    for args, msg in ((["-n", "0", "x.py"], "-n must be >= 1"),
                      (["-n", "2", str(tmp_path / "missing.py")], "no such script"),
                      (["-n", "2", "--max-restarts", "-1", "x.py"], "--max-restarts must be >= 0")):
        env = dict(os.environ, PYTHONPATH=ROOT)
        p = subprocess.run([sys.executable, "-m", "tracejit.distributed.run", *args], env=env, cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        assert p.returncode == 2 and msg in p.stdout, p.stdout
