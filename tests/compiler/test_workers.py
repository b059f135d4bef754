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


def test_shutdown_finishes_the_jobs_it_leaves_queued():
    # A module's preparation thread waits on its job's event: a job still queued when the
    # pool shuts down is never taken, and must not leave that thread (and the module) waiting.
    pool = workers.CompilePool(0)
    job = workers.Job(1, "source", "k", ())
    pool.jobs.put((workers.EAGER, 1, job))
    pool.shutdown()
    assert job.done() and not job.ok and job.error == workers.SHUT_DOWN


def test_a_module_job_the_pool_never_ran_is_started_again(monkeypatch, tmp_path):
    # tiers.module_job keeps one job per module; one that failed only because the pool was
    # shut down before it ran is prepared again (a new pool takes it), not kept failed.
    from tracejit.compiler import tiers
    monkeypatch.setenv("TRACEJIT_COMPILE", "background")
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tiers, "_module_jobs", {})
    made = []

    def prepare(source, name_hint, llvm_options, rank, after):
        job = workers.Job(len(made) + 1, source, name_hint, llvm_options)
        made.append(job)
        return job
    monkeypatch.setattr(tiers, "_prepare_module", prepare)
    first = tiers.module_job("src", "m")
    first._finish(False, workers.SHUT_DOWN)
    again = tiers.module_job("src", "m")
    assert again is not first and len(made) == 2
    again._finish(False, "a real compile error")
    assert tiers.module_job("src", "m") is again    # a real failure stays failed
