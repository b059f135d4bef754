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


def test_measure_timing_has_no_warmup_count():
    t = harness.measure(lambda: None, warmup=2, repeat=3)
    assert t.warmup is None and "warmup" not in t.as_dict()


def test_train_steps_passes_the_warmup_seconds(monkeypatch):
    seen = {}

    def fake_step_times(step, steps, warmup, warmup_s=0.0):
        seen.update(steps=steps, warmup=warmup, warmup_s=warmup_s)
        return harness.Timing(1.0, 0.5, steps, 1, warmup=warmup)

    monkeypatch.setattr(base, "step_times", fake_step_times)
    losses = iter([3.0, 2.0])
    res = base._train_steps(lambda: None, lambda: next(losses), steps=4, warmup=3, stat="median",
                            warmup_s=0.6)
    # the first step (the first loss) counts as one of the warm-up steps
    assert seen == {"steps": 4, "warmup": 2, "warmup_s": 0.6}
    assert res["check"] == {"first_loss": 3.0, "final_loss": 2.0}


def test_full_run_warms_training_up_past_two_policy_samples():
    from tracejit import coreshare
    assert workloads.FULL.train_warmup_s >= 2 * coreshare.INTERVAL
