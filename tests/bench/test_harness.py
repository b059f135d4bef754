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

    def fake_step_times(step, steps, warmup, warmup_s=0.0, timing_starts=None):
        seen.update(warmup=warmup, warmup_s=warmup_s)
        return real(step, steps, warmup, 0.0, timing_starts=timing_starts)

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
    from tracejit import coreshare
    assert workloads.FULL.train_warmup_s >= 2 * coreshare.INTERVAL


def test_tracejit_reports_the_thread_count_beside_a_training_figure(monkeypatch):
    from bench import systems
    from tracejit import coreshare
    # (loading the runner sets TRACEJIT_COMPILE for bench's child processes: restored after)
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    runner = systems.load(systems.by_name("tracejit_eager"))
    monkeypatch.setattr(coreshare, "ENABLED", True)
    policy = runner.thread_policy()["policy"]
    assert policy["adaptive"] is True
    assert 1 <= policy["threads"] <= coreshare.core_share.cpus
    assert policy["others_cores"] >= 0.0
    from tracejit.ops import halves
    monkeypatch.setattr(halves, "_pairs", {"float64": object(), "float32": None})
    assert runner.thread_policy()["policy"]["halves"] == ["float64"]   # (None: cannot load)
    monkeypatch.setattr(coreshare, "ENABLED", False)
    assert runner.thread_policy() == {"policy": {"adaptive": False, "halves": ["float64"]}}
    # halves_ready: whether some halves were loaded when the timed steps started (read at
    # `timing_starts`; `halves` is read after them), once per timed run
    monkeypatch.setattr(halves, "_pairs", {"float32": None})
    runner.timing_starts()
    monkeypatch.setattr(halves, "_pairs", {"float32": object()})   # loaded during the run
    assert runner.thread_policy() == {"policy": {"adaptive": False, "halves": ["float32"],
                                                 "halves_ready": False}}
    runner.timing_starts()
    assert runner.thread_policy()["policy"]["halves_ready"] is True
    assert "halves_ready" not in runner.thread_policy()["policy"]
    assert systems.load(systems.by_name("numpy")).thread_policy() == {}
