"""bench/harness.py's step timing: the warm-up counts steps and seconds (with a fake clock,
so nothing here depends on how fast the machine is)."""
from __future__ import annotations

import pytest

from bench import harness, workloads
from bench.impls import base


class _Clock:
    """A clock that advances `tick` seconds each time a step runs."""

    def __init__(self, tick: float):
        self.now, self.tick, self.steps = 0.0, tick, 0

    def __call__(self) -> float:
        return self.now

    def step(self) -> None:
        self.steps += 1
        self.now += self.tick


@pytest.mark.parametrize("warmup, warmup_s, tick, expected", [
    (5, 0.0, 0.01, 5),       # steps alone
    (5, 0.6, 0.01, 60),      # the seconds outlast the steps: 60 steps of 10 ms reach 0.6 s
    (20, 0.05, 0.01, 20),    # the steps outlast the seconds
    (0, 0.0, 0.01, 0),
])
def test_step_times_warms_up_for_steps_and_seconds(warmup, warmup_s, tick, expected):
    clock = _Clock(tick)
    t = harness.step_times(clock.step, steps=7, warmup=warmup, warmup_s=warmup_s, clock=clock)
    assert clock.steps == expected + 7
    assert t.warmup == expected and t.samples == 7
    assert t.as_dict()["warmup"] == expected


@pytest.mark.parametrize("warmup_s", [0.0, 0.6])
def test_timing_starts_runs_after_the_warm_up_before_the_first_timed_step(warmup_s):
    tr = _Training()
    at = []
    res = base._train_steps(tr.step, tr.loss, steps=4, warmup=3, stat="median", warmup_s=warmup_s,
                            timing_starts=lambda: at.append(tr.n))
    assert at == [tr.n - 4]   # once, with the 4 timed steps still to run
    assert at[0] == 1 + res["timing"]["warmup"]   # the first step and every warm-up step ran


def test_measure_timing_has_no_warmup_count():
    t = harness.measure(lambda: None, warmup=2, repeat=3)
    assert t.warmup is None and "warmup" not in t.as_dict()


class _Training:
    """A step that counts itself; its loss is the count of steps so far."""

    def __init__(self):
        self.n = 0

    def step(self) -> None:
        self.n += 1

    def loss(self) -> float:
        return float(self.n)


@pytest.mark.parametrize("warmup_s", [0.0, 0.6])
def test_train_steps_checks_the_loss_after_the_same_steps(monkeypatch, warmup_s):
    # with or without seconds of warm-up, the check's losses are those after the first
    # step and after warmup + steps steps, whatever the machine's speed
    seen = {}
    real = harness.step_times

    def fake_step_times(step, steps, warmup, warmup_s=0.0, **kw):
        seen.update(warmup=warmup, warmup_s=warmup_s)
        return real(step, steps, warmup, 0.0, **kw)

    monkeypatch.setattr(base, "step_times", fake_step_times)
    tr = _Training()
    res = base._train_steps(tr.step, tr.loss, steps=4, warmup=3, stat="median", warmup_s=warmup_s)
    assert res["check"] == {"first_loss": 1.0, "final_loss": 7.0}
    if warmup_s:
        # the check's 6 steps ran first as warm-up; the rest of the seconds go to step_times
        assert seen["warmup"] == 0 and 0.0 < seen["warmup_s"] <= 0.6
        assert tr.n == 1 + 6 + 4 and res["timing"]["warmup"] == 6
    else:
        assert seen == {"warmup": 2, "warmup_s": 0.0}
        assert tr.n == 1 + 2 + 4 and res["timing"]["warmup"] == 2


def test_full_run_warms_training_up_past_two_policy_samples():
    from tracejit.compiler.cpu.runtime import coreshare
    assert workloads.FULL.train_warmup_s >= 2 * coreshare.INTERVAL


def test_tracejit_reports_the_thread_count_beside_a_training_figure(monkeypatch):
    from bench import systems
    from tracejit.compiler.cpu.runtime import coreshare
    # (loading the runner sets TRACEJIT_COMPILE for bench's child processes: restored after)
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    runner = systems.load(systems.by_name("tracejit_eager"))
    monkeypatch.setattr(coreshare, "ENABLED", True)
    policy = runner.thread_policy()["policy"]
    assert policy["adaptive"] is True
    assert 1 <= policy["threads"] <= coreshare.core_share.cpus
    assert policy["others_cores"] >= 0.0
    monkeypatch.setattr(coreshare, "ENABLED", False)
    assert runner.thread_policy() == {"policy": {"adaptive": False}}
    assert systems.load(systems.by_name("numpy")).thread_policy() == {}


class _Background:
    """A system whose kernel loads are counted: `settle` loads what the steps asked for;
    a step may ask for one more kernel (at the steps listed in `asks_at`)."""

    def __init__(self, asks_at=()):
        self.n, self.asks_at, self.asked, self.loads = 0, set(asks_at), 0, 0

    def step(self) -> None:
        self.n += 1
        if self.n in self.asks_at:
            self.asked += 1

    def settle(self) -> None:
        self.loads += self.asked
        self.asked = 0

    def counters(self) -> dict:
        return {"kernel_loads": self.loads}


def test_step_times_settles_after_the_warmup_and_warms_up_again_after_a_load():
    # a kernel first asked for in the warm-up (step 2) loads in the settle after it, then
    # the warm-up runs again before the timing: nothing loads inside the timed steps
    bg = _Background(asks_at={2})
    clock = _Clock(0.25)   # (a step of 0.25 s: the re-warm-up's seconds end before its steps)

    def step():
        bg.step()
        clock.step()
    watch = harness.Watch(bg.counters)
    t = harness.step_times(step, steps=4, warmup=3, settle=bg.settle, watch=watch, clock=clock)
    assert bg.loads == 1
    assert harness.REWARM_STEPS * 0.25 >= harness.REWARM_S
    assert t.warmup == 3 + harness.REWARM_STEPS and bg.n == t.warmup + 4
    assert "kernel_loads" not in t.during and watch.take().get("kernel_loads") is None


def test_a_load_inside_the_timed_steps_is_reported():
    # a kernel asked for at the second timed step and loaded at once (a system that loads
    # in the call) shows in the timing's `during` and in the workload's totals
    loads = []

    def step():
        loads.append(1) if len(loads) == 0 and step.n == 5 else None
        step.n += 1
    step.n = 0
    watch = harness.Watch(lambda: {"kernel_loads": len(loads)})
    t = harness.step_times(step, steps=4, warmup=3, watch=watch)
    assert t.during["kernel_loads"] == 1 and t.as_dict()["during"]["kernel_loads"] == 1
    assert watch.take()["kernel_loads"] == 1 and watch.take() == {}


def test_watch_counts_other_processes_cpu_not_ours(monkeypatch):
    # scripted /proc/stat readings: over 1 s the machine was busy 1.5 s, we used 0.5 s and
    # our compile workers 0.25 s: others 0.75 cores
    readings = iter([(100.0, 10.0), (101.5, 10.5)])
    clock = iter([0.0, 1.0])
    monkeypatch.setattr(harness, "cpu_seconds", lambda: next(readings))
    monkeypatch.setattr(harness.time, "perf_counter", lambda: next(clock))
    # and our threads switched 7 times voluntarily, 2 involuntarily
    switches = iter([(100, 40), (107, 42)])
    monkeypatch.setattr(harness, "thread_switches", lambda: next(switches))
    counters = iter([{"worker_cpu_s": 2.0}, {"worker_cpu_s": 2.25}])
    watch = harness.Watch(lambda: next(counters))
    watch.start()
    seen = watch.stop()
    assert seen == {"worker_cpu_s": 0.25, "others_cores": 0.75, "own_cores": 0.5,
                    "switches": [7, 2]}
    # the switches and own cores are the timing's own: not in the workload's totals, and
    # not "work"
    assert watch.take() == {"worker_cpu_s": 0.25, "others_cores_max": 0.75}
    assert not harness._work({"others_cores": 0.75, "own_cores": 0.5, "switches": [7, 2]})
    assert harness._work({"kernel_loads": 1, "switches": [0, 0]})


def test_thread_switches_counts_a_thread_that_blocked():
    import threading
    import time
    if harness.thread_switches() is None:
        pytest.skip("no /proc/self/task here")
    slept, release = threading.Event(), threading.Event()

    def worker():
        for _ in range(3):
            time.sleep(0.001)      # nanosleep blocks: one voluntary switch each time
        slept.set()
        release.wait()             # alive while the test reads the counts

    th = threading.Thread(target=worker)
    th.start()
    slept.wait()
    with open(f"/proc/self/task/{th.native_id}/status") as f:
        own = next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
    total = harness.thread_switches()
    release.set()
    th.join()
    # the sum over live threads holds the worker's own count (other threads may come and
    # go meanwhile, so the sum is compared with the worker's count, not with an earlier sum)
    assert own >= 3 and total[0] >= own


def test_cpu_seconds_reads_the_machine_and_this_process():
    r = harness.cpu_seconds()
    if r is None:
        pytest.skip("no /proc/stat here")
    busy, own = r
    assert busy > 0 and 0 <= own <= busy + 1


def test_leftovers_stops_what_a_finished_child_left_in_its_group(tmp_path):
    # a child that starts a grandchild and exits: the grandchild is found by the child's
    # process group and killed
    import subprocess, sys, time
    if not harness.os.path.isdir("/proc"):
        pytest.skip("no /proc here")
    script = ("import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
              "'import time; time.sleep(60)'])")
    proc = subprocess.Popen([sys.executable, "-c", script], process_group=0)   # as harness._run
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    left = []
    while not left and time.monotonic() < deadline:   # the grandchild may still be starting
        left = harness._leftovers(proc.pid)
    assert len(left) == 1 and "time.sleep(60)" in left[0]
    assert harness._leftovers(proc.pid) == []


def test_step_times_stops_settling_after_its_rounds():
    # a settle that loads something every time: the warm-up reruns SETTLE_ROUNDS times in
    # all, then the timing starts whatever comes (and what loads in it is reported)
    clock = _Clock(0.25)
    loads = []

    def settle():
        loads.append(1)
    watch = harness.Watch(lambda: {"kernel_loads": len(loads)})
    t = harness.step_times(clock.step, steps=2, warmup=1, settle=settle, watch=watch, clock=clock)
    assert len(loads) == harness.SETTLE_ROUNDS
    assert t.warmup == 1 + (harness.SETTLE_ROUNDS - 1) * harness.REWARM_STEPS


def test_train_steps_settles_after_the_first_step_and_after_the_warmup():
    tr = _Training()
    settled_at = []
    res = base._train_steps(tr.step, tr.loss, steps=4, warmup=3, stat="median",
                            settle=lambda: settled_at.append(tr.n), watch=harness.Watch())
    assert settled_at == [1, 3]   # after the check's first step; after the warm-up's 2 more
    assert tr.n == 1 + 2 + 4 and res["timing"]["during"].keys() <= {
        "others_cores", "own_cores", "switches"}


def test_process_cpu_s_reads_a_live_process_and_none_for_a_gone_one():
    import os
    import subprocess
    import sys
    if not os.path.exists(f"/proc/{os.getpid()}/stat"):
        pytest.skip("no /proc here")
    t0 = harness.process_cpu_s(os.getpid())
    x = 0
    while harness.process_cpu_s(os.getpid()) <= t0:   # (a tick of CPU: 10 ms at most)
        x += sum(range(10000))
    assert harness.process_cpu_s(os.getpid()) > t0 >= 0.0
    r = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                       text=True, check=True)
    assert harness.process_cpu_s(int(r.stdout)) is None      # exited and reaped
