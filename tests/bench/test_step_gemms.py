"""bench/step_gemms.py: a compiled step's GEMM calls are recorded by label (a bias GEMM), repeated alone on the step's own operands with the step's bits, and
the plans are put back afterwards."""
from __future__ import annotations

import numpy as np

import tracejit as tj
from bench import breakdown, step_gemms


def _step(x, w1, b1, w2, g):
    h = x.mm(w1.t()) + b1                   # a bias GEMM (compiler/gemm_steps)
    return tj.tanh(h.mm(w2)), g.mm(w2.t()), g.t().mm(h)   # three products


def test_gemm_calls_in_the_step_and_alone(monkeypatch):
    rng = np.random.default_rng(3)
    shapes = ((16, 8), (12, 8), (12,), (12, 6), (16, 6))
    args = [tj.tensor(rng.standard_normal(s, dtype=np.float32)) for s in shapes]
    f = tj.script(_step)
    want = [o.numpy() for o in f(*args)]
    before = {id(p): (p, dict(p.fn.__globals__)) for p in breakdown._plans()}
    got = {}
    calls = []

    def run():
        calls.append(1)
        got["out"] = [o.numpy() for o in f(*args)]

    def optimizer():          # left out of the kept step: it would change what the step read
        calls.append("opt")

    rows = step_gemms.measure({"forward": run, "optimizer": optimizer}, steps=3, repeats=2,
                              sweep_bytes=1 << 20, warmup=1)
    for g_, w_ in zip(got["out"], want):                 # the wrappers change no result
        np.testing.assert_array_equal(g_, w_)
    # a warm-up step, the kept step without the optimizer, an untimed step, 3 timed steps
    assert calls == [1, "opt", 1] + [1, "opt"] * 4
    by_label = {r["label"]: r for r in rows}
    assert set(by_label) == {"16x8 @ 8x12 CF +bias", "16x12 @ 12x6 CC", "16x6 @ 6x12 CF", "6x16 @ 16x12 FC"}, \
        set(by_label)
    for r in rows:
        assert r["calls"] == 1                            # once per step
        assert len(r["step"]) == len(r["faults"]) == 3    # the timed steps' calls only
        assert all(t > 0 for t in r["step"]) and all(n >= 0 for n in r["faults"])
        assert len(r["warm"]) == len(r["swept"]) == 2 * 3   # repeats x rounds
        assert r["same"] is True                          # the alone calls ran the step's product
    table = step_gemms.report(rows, "## t")
    assert "| 16x12 @ 12x6 CC | 1 |" in table and "alone swept" in table and "| NO |" not in table
    after = {id(p): dict(p.fn.__globals__) for p in breakdown._plans()}
    for key, (plan, globs) in before.items():             # everything put back
        assert after[key] == globs, sorted(k for k in globs if after[key].get(k) is not globs[k])


def test_a_call_that_gives_other_bits_alone_is_reported():
    """`same` compares each alone call's result with the step's copy: where a later phase of
    the kept step changes an operand in place (an update not named ``optimizer``), the alone
    call reads the new values and the row says so."""
    rng = np.random.default_rng(4)
    x = tj.tensor(rng.standard_normal((8, 5), dtype=np.float32))
    w = tj.tensor(rng.standard_normal((5, 4), dtype=np.float32))
    f = tj.script(lambda x, w: x.mm(w))

    def update():
        w.numpy()[...] += 1.0

    rows = step_gemms.measure({"forward": lambda: f(x, w), "update": update}, steps=1, repeats=1,
                              sweep_bytes=1 << 16, warmup=1)
    assert [(r["label"], r["same"]) for r in rows] == [("8x5 @ 5x4 CC", False)]
    assert "| NO |" in step_gemms.report(rows, "## t")
    rows = step_gemms.measure({"forward": lambda: f(x, w)}, steps=1, repeats=1, sweep_bytes=1 << 16)
    assert [r["same"] for r in rows] == [True]


def test_the_thread_count_is_read_before_numpy_loads():
    assert step_gemms.main_threads([]) == 1
    assert step_gemms.main_threads(["--models", "lstm", "--threads", "2"]) == 2
    assert step_gemms.main_threads(["--threads=2", "--steps", "3"]) == 2
