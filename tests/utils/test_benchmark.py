"""tracejit.utils.benchmark: Timer's measurements hold what was timed (runs per block,
seconds per run) with torch's attribute names; only Python statements are taken."""
import pytest

import tracejit as tj
from tracejit.utils.benchmark import Measurement, Timer


def test_timer_measurements_have_torchs_fields():
    x = tj.ones(8)
    t = Timer("x * 2", setup="y = 1", globals={"x": x}, label="mul", description="8 floats")
    m = t.timeit(50)
    assert m.number_per_run == 50 and len(m.raw_times) == 1 and m.times[0] == m.raw_times[0] / 50 > 0
    assert "x * 2" in repr(m) and "mul 8 floats" in repr(m)
    seen = []
    b = t.blocked_autorange(callback=lambda n, s: seen.append(n), min_run_time=0.01)
    assert len(b.raw_times) >= 2 and sum(b.raw_times) >= 0.01 and seen == [b.number_per_run] * len(b.raw_times)
    a = t.adaptive_autorange(threshold=10.0, min_run_time=0.005, max_run_time=60.0)
    assert len(a.raw_times) >= 3 and a.iqr <= 10.0 * a.median and a.mean > 0


def test_measurement_statistics_and_bad_language():
    m = Measurement(10, [1.0, 2.0, 3.0, 4.0], "stmt")
    assert m.times == [0.1, 0.2, 0.3, 0.4] and m.median == pytest.approx(0.25) and m.iqr == pytest.approx(0.2)
    assert "250.00 ms" in repr(m)
    with pytest.raises(ValueError, match="only Python statements"):
        Timer("x", language="c++")
    assert tj.utils.benchmark.Timer is Timer
