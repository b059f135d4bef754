"""Faults: a rank that raises ends the whole job quickly, non-zero, with its error named."""
import time


def test_raising_rank_aborts_every_rank(mpirun):
    t0 = time.monotonic()
    p = mpirun("fault_worker.py", 3, check=False, timeout=60)
    elapsed = time.monotonic() - t0
    assert p.returncode != 0, p.out
    assert "ValueError: boom from rank 2" in p.out, p.out
    assert "aborting all 3 ranks" in p.out, p.out
    assert "unreachable" not in p.out
    assert elapsed < 45, f"the job took {elapsed:.1f} s to end"
