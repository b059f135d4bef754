"""compiler/workers.py: the queue's order for a job that loads another job's module."""
import threading
import time

from tracejit.compiler import workers


def test_a_job_waits_for_the_job_whose_module_it_loads():
    pool = workers.CompilePool(0)    # no dispatcher threads: we play one
    kernel = workers.Job(1, "kernel", "k", ())
    pair = workers.Job(2, "pair", "k_pair", (), after=kernel)
    other = workers.Job(3, "other", "o", ())
    pool.jobs.put((workers.FIRST, 3, other))
    # the pair's kernel is compiling elsewhere: the next job goes first, the pair back
    assert pool._unblocked((workers.FIRST, 2, pair))[2] is other
    item = pool.jobs.get_nowait()
    assert item[2] is pair and pool.jobs.empty()
    # nothing else queued: the pair waits for its kernel, then goes
    threading.Timer(0.2, kernel._finish, (True,)).start()
    t0 = time.monotonic()
    assert pool._unblocked(item)[2] is pair and kernel.done()
    assert time.monotonic() - t0 > 0.1
    # a finished prerequisite (or one lost by a fork) holds nothing back
    assert not pair.blocked()
    assert pool._unblocked((workers.FIRST, 2, pair))[2] is pair
