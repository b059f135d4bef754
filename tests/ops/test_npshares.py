"""ops/npshares.py: numpy forms' parts run at once on tracejit's pool threads, one
contiguous part per core given, each index once; one part here when the machine gives one
core, the work is small, BLAS is kept on one thread, or another launch holds the pool."""
from __future__ import annotations

import threading

import pytest

from tracejit import coreshare, sharepool
from tracejit.ops import npshares


def _record(parts):
    lock = threading.Lock()

    def fn(lo, hi):
        with lock:
            parts.append((lo, hi, threading.get_ident()))
    return fn


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr(sharepool, "pool_threads", lambda: 2)
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 2)


def test_two_parts_at_once_cover_the_range(two_cores):
    parts = []
    npshares.halves(_record(parts), 11, sharepool.SPLIT_MIN_WORK)
    assert sorted(p[:2] for p in parts) == [(0, 5), (5, 11)]
    assert len({p[2] for p in parts}) == 2 and threading.get_ident() in {p[2] for p in parts}


@pytest.mark.parametrize("why", ["small", "one core", "blas on one", "launch held", "one index"])
def test_one_part_here_otherwise(monkeypatch, two_cores, why):
    work, n = sharepool.SPLIT_MIN_WORK, 9
    if why == "small":
        work -= 1
    elif why == "one core":
        monkeypatch.setattr(sharepool, "pool_threads", lambda: 1)
    elif why == "blas on one":
        monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 1)
    elif why == "one index":
        n = 1
    held = why == "launch held" and sharepool.try_launch()
    try:
        parts = []
        npshares.halves(_record(parts), n, work)
    finally:
        if held:
            sharepool.end_launch()
    assert parts == [(0, n, threading.get_ident())]


def test_an_error_in_the_other_part_is_raised_here(two_cores):
    def fn(lo, hi):
        if lo:
            raise ValueError("part two")
    with pytest.raises(ValueError, match="part two"):
        npshares.halves(fn, 4, sharepool.SPLIT_MIN_WORK)
    parts = []   # the pool is free again
    npshares.halves(_record(parts), 4, sharepool.SPLIT_MIN_WORK)
    assert len(parts) == 2
