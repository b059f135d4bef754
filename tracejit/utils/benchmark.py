"""``torch.utils.benchmark``: ``Timer(stmt, setup, globals=...)`` and the `Measurement` its
``timeit`` / ``blocked_autorange`` / ``adaptive_autorange`` return (seconds per run: mean,
median, interquartile range), on Python's timeit. Statements run as written; a compiled
function's kernels may still be compiling in the background on its first calls
(``tracejit.compiler.wait()`` first for steady figures)."""
from __future__ import annotations

import statistics
import timeit as _timeit
from typing import Callable, Optional

__all__ = ["Timer", "Measurement"]


class Measurement:
    """Timings of `number_per_run` runs each (`raw_times`: seconds per block)."""

    def __init__(self, number_per_run: int, raw_times: list, task_spec: str = "", label=None, sub_label=None,
                 description=None) -> None:
        self.number_per_run, self.raw_times, self.task_spec = number_per_run, list(raw_times), task_spec
        self.label, self.sub_label, self.description = label, sub_label, description

    @property
    def times(self) -> list:
        """Seconds per run, one per block."""
        return [t / self.number_per_run for t in self.raw_times]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def iqr(self) -> float:
        t = sorted(self.times)
        return t[(3 * len(t)) // 4] - t[len(t) // 4] if len(t) > 1 else 0.0

    def __repr__(self) -> str:
        for unit, f in (("s", 1.0), ("ms", 1e3), ("us", 1e6), ("ns", 1e9)):
            if self.median * f >= 1 or unit == "ns":
                break
        value = self.median * f
        head = " ".join(str(x) for x in (self.label, self.sub_label, self.description) if x)
        runs = len(self.raw_times) * self.number_per_run
        return (f"<Measurement>\n{head + chr(10) if head else ''}{self.task_spec}\n  {value:.2f} {unit}\n"
                f"  {len(self.raw_times)} measurement{'s' if len(self.raw_times) > 1 else ''}, {runs} runs")


class Timer:
    """Times `stmt` after `setup` (strings of Python, run with `globals`)."""

    def __init__(self, stmt: str = "pass", setup: str = "pass", global_setup: str = "",
                 timer: Callable[[], float] = _timeit.default_timer, globals: Optional[dict] = None,  # noqa: A002
                 label: Optional[str] = None, sub_label: Optional[str] = None, description: Optional[str] = None,
                 env: Optional[str] = None, num_threads: int = 1, language="python") -> None:
        if str(getattr(language, "name", language)).lower() != "python":
            raise ValueError(f"Timer: only Python statements can be timed here, got language={language!r}")
        self.stmt, self._labels = stmt, dict(label=label, sub_label=sub_label, description=description)
        self._timer = _timeit.Timer(stmt, "\n".join(s for s in (global_setup, setup) if s), timer,
                                    dict(globals or {}))

    def _measure(self, number: int, blocks: list) -> Measurement:
        return Measurement(number, blocks, self.stmt, **self._labels)

    def timeit(self, number: int = 1000000) -> Measurement:
        self._timer.timeit(number=max(1, number // 100))   # (a warm-up, as torch's)
        return self._measure(number, [self._timer.timeit(number=number)])

    def _block_size(self, min_block: float = 0.001) -> int:
        n = 1
        while self._timer.timeit(number=n) < min_block:
            n *= 10
        return n

    def blocked_autorange(self, callback: Optional[Callable] = None, min_run_time: float = 0.2) -> Measurement:
        """Blocks of as many runs as take about a millisecond, until `min_run_time` has passed."""
        n, blocks = self._block_size(), []
        while sum(blocks) < min_run_time or len(blocks) < 2:
            blocks.append(self._timer.timeit(number=n))
            if callback is not None:
                callback(n, blocks[-1])
        return self._measure(n, blocks)

    def adaptive_autorange(self, threshold: float = 0.1, *, min_run_time: float = 0.01, max_run_time: float = 10.0,
                           callback: Optional[Callable] = None) -> Measurement:
        """Blocks until the interquartile range is within `threshold` of the median (or
        `max_run_time` has passed), after at least `min_run_time`."""
        n, blocks = self._block_size(), []
        while True:
            blocks.append(self._timer.timeit(number=n))
            if callback is not None:
                callback(n, blocks[-1])
            m, spent = self._measure(n, blocks), sum(blocks)
            if spent >= max_run_time or (spent >= min_run_time and len(blocks) >= 3
                                         and m.iqr <= threshold * m.median):
                return m
