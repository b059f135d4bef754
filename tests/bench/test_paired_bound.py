"""bench.machine.paired: the GELU's time and the copy's bound timed side by side, per pair.

A fake clock that only the fake copy and call advance makes every figure exact.
"""
from __future__ import annotations

import pytest

from bench import machine, report


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _fixture(monkeypatch, copy_s, call_s):
    """A copy and a call taking the next of their listed durations on each use."""
    clock = Clock()
    monkeypatch.setattr(machine.time, "perf_counter", clock)
    copies, calls = iter(copy_s), iter(call_s)

    def copy():
        clock.now += next(copies)

    def call():
        clock.now += next(calls)

    return copy, call


def test_ratio_per_pair_uses_the_round_s_fastest_copy_and_its_last_call(monkeypatch):
    moved = 2 * machine.COPY_BYTES
    nbytes = moved // 2          # a pair's bound is half its copy's time
    # warm=1: two copies and two calls per round; the first call of a round is untimed
    copy, call = _fixture(monkeypatch,
                          copy_s=[0.004, 0.002, 0.002, 0.003, 0.010, 0.004],
                          call_s=[0.100, 0.0011, 0.100, 0.0030, 0.100, 0.0010])
    p = machine.paired(call, nbytes, rounds=3, copy=copy, warm=1, warm_s=0.0)
    # bounds 1.0, 1.0, 2.0 ms; timed calls 1.1, 3.0, 1.0 ms
    assert p["bound_ms"] == [1.0, 1.0, 2.0]
    assert p["call_ms"] == [1.1, 3.0, 1.0]
    assert p["ratios"] == [1.1, 3.0, 0.5]
    assert p["ratio_median"] == pytest.approx(1.1)
    assert (p["ratio_min"], p["ratio_max"]) == (pytest.approx(0.5), pytest.approx(3.0))
    assert p["median_over_best_copy"] == pytest.approx(1.1)     # 1.1 ms over 1.0 ms
    assert p["copy_gbps_best"] == pytest.approx(moved / 0.002 / 1e9)
    assert p["copy_gbps_median"] == pytest.approx(moved / 0.002 / 1e9)
    assert p["rounds"] == 3


def test_untimed_copies_and_calls_run_for_warm_s_seconds(monkeypatch):
    # warm_s 25 ms: 3 copies (10, 10, 8 ms: the third ends past 25 ms), then 3 untimed
    # 10 ms calls and the timed one; the round's bound is its fastest copy's
    copy, call = _fixture(monkeypatch, copy_s=[0.010, 0.010, 0.008],
                          call_s=[0.010, 0.010, 0.010, 0.012])
    p = machine.paired(call, 2 * machine.COPY_BYTES, rounds=1, copy=copy, warm=1, warm_s=0.025)
    assert p["bound_ms"] == [8.0] and p["call_ms"] == [12.0]
    assert p["ratios"] == [1.5]


def test_paired_rejects_no_rounds_and_negative_warm():
    with pytest.raises(ValueError, match="rounds"):
        machine.paired(lambda: None, 1, rounds=0, copy=lambda: None)
    with pytest.raises(ValueError, match="warm=-1"):
        machine.paired(lambda: None, 1, rounds=1, copy=lambda: None, warm=-1)


def test_report_prints_the_paired_line_beside_the_table_s_ratio():
    p = {"rounds": 15, "ratio_median": 0.981, "ratio_min": 0.9, "ratio_max": 1.2,
         "median_over_best_copy": 1.04, "call_ms_median": 2.0, "bound_ms_median": 2.04,
         "copy_gbps_median": 49.3, "copy_gbps_best": 51.0}
    data = {"systems": {"tracejit_compiled": {"label": "tracejit compiled"}},
            "results": {"gelu": {"tracejit_compiled": {"paired": {"fwdbwd": p,
                                                                  "fwd": {"error": "E: x"}}}}}}
    lines = report.paired_bound(data)
    assert lines == [
        "- tracejit compiled, fwd: E: x",
        "- tracejit compiled, fwd+bwd: 0.981× [0.90-1.20] over 15 pairs; 1.040× over the best "
        "copy (call 2.000 ms, bound 2.040 ms, copy 49.3 GB/s median, 51.0 best)"]
    assert report.fmt(1.04, "x") == "1.04×" and report.fmt(12.3, "x") == "12.3×"
