"""bench/coldstart.py: the figures made from a cold process's step times."""
from bench import coldstart


def test_summarize_reads_first_worst_and_slow_span():
    # first step 1 s, then two slow steps (40, 50 ms), then steps at the warm 10 ms
    cold = [1.0, 0.04, 0.05, 0.011, 0.012, 0.01, 0.01, 0.01]
    warm = [0.02, 0.02, 0.01, 0.01, 0.01]
    s = coldstart.summarize(cold, warm, settle_s=0.5)
    assert s["first_s"] == 1.0 and s["second_s"] == 0.04
    assert s["warm_s"] == 0.01                      # median after the warm phase's first two
    assert abs(s["worst_over_warm"] - 5.0) < 1e-9   # 50 ms over 10 ms
    assert abs(s["to_slow_end_s"] - 1.09) < 1e-9    # the slow steps ended 1.09 s in
    assert s["cold_end_s"] == 0.01 and s["settle_s"] == 0.5


def test_summarize_without_slow_steps():
    s = coldstart.summarize([0.2, 0.01, 0.01], [0.01, 0.01, 0.01], settle_s=0.0)
    assert s["to_slow_end_s"] == 0.0 and s["worst_over_warm"] == 1.0


def test_table_has_a_row_per_program_and_system():
    s = coldstart.summarize([0.2, 0.01, 0.01], [0.01, 0.01, 0.01], settle_s=0.0)
    text = coldstart.table({"vae": {"tracejit_eager": s, "tracejit_compiled": {"error": "boom"}}})
    rows = text.splitlines()
    assert len(rows) == 4 and "| vae | tracejit_eager | 0.20 |" in rows[2] and "boom" in rows[3]
