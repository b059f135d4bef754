"""What users debug with: eager mode (env, context manager, decorator flag), check mode,
logging topics, and explain()."""
from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import CheckMismatchError
from tracejit.jit import config
from tracejit.jit.backend import Executor


def printing(x, n):
    print("inside", type(x).__name__, n if isinstance(n, int) else type(n).__name__)
    if x.sum() > 0:
        y = x * n
    else:
        y = x - n
    return y


def _lines(capsys):
    return [s for s in capsys.readouterr().out.splitlines() if s.startswith("inside")]


# --------------------------------------------------------------------------- eager mode
def test_compiled_calls_do_not_run_python(capsys):
    cf = tj.script(printing, compiler="interpret")
    for _ in range(3):
        cf(tj.ones(2), 2)
    assert _lines(capsys) == ["inside Tracer Tracer"]  # only while capturing



class _Fake(Executor):
    """A stand-in for a backend's executor that runs `fn` (a broken "kernel")."""

    tier = "compiled"

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, ins):
        return self.fn(ins)


def test_an_entry_refuses_an_executor_that_does_not_declare_the_interface():
    cf = tj.trace(lambda x: x * 2, compiler="interpret")
    cf(tj.ones(2))
    (e,) = cf.entries
    with pytest.raises(TypeError, match="Executor"):
        e.set_executor(lambda ins: ins)

def test_env_disable_runs_plain_python(capsys, monkeypatch):
    cf = tj.script(printing, compiler="interpret")
    monkeypatch.setenv("TRACEJIT_DISABLE", "1")
    outs = [cf(tj.tensor(v), 2).tolist() for v in ([1.0, 2.0], [-1.0, -2.0], [3.0, 0.0])]
    assert _lines(capsys) == ["inside Tensor 2"] * 3
    assert outs == [[2.0, 4.0], [-3.0, -4.0], [6.0, 0.0]]
    assert cf.cache_stats()["compiles"] == 0
    monkeypatch.setenv("TRACEJIT_DISABLE", "0")
    assert cf(tj.tensor([1.0, 2.0]), 2).tolist() == [2.0, 4.0]
    assert cf.cache_stats()["compiles"] == 1


def test_eager_context_manager_runs_plain_python(capsys):
    cf = tj.trace(lambda_free_square, compiler="interpret")
    cf(tj.ones(2))
    capsys.readouterr()
    with tj.eager():
        with tj.eager():  # nests
            r1 = cf(tj.ones(2) * 3)
        r2 = cf(tj.ones(2) * 4)
    assert _lines(capsys) == ["inside Tensor", "inside Tensor"]
    assert r1.tolist() == [9.0, 9.0] and r2.tolist() == [16.0, 16.0]
    cf(tj.ones(2))
    assert _lines(capsys) == []  # compiled again after the block
    assert cf.cache_stats()["hits"] == 1


def lambda_free_square(x):
    print("inside", type(x).__name__)
    return x * x


def test_script_eager_flag_runs_plain_python(capsys):
    cf = tj.script(printing, eager=True)
    outs = [cf(tj.tensor([1.0, -3.0]), k).tolist() for k in (1, 2, 3)]
    assert _lines(capsys) == ["inside Tensor 1", "inside Tensor 2", "inside Tensor 3"]
    assert outs == [[0.0, -4.0], [-1.0, -5.0], [-2.0, -6.0]]
    assert cf.cache_stats()["compiles"] == 0


def test_eager_results_equal_compiled_results():
    cf = tj.script(printing, compiler="interpret")
    for v in ([1.0, 2.0], [-1.0, -2.0]):
        got = cf(tj.tensor(v), 3)
        with tj.eager():
            exp = cf(tj.tensor(v), 3)
        assert got.tolist() == exp.tolist()


# --------------------------------------------------------------------------- check mode
def test_check_mode_passes_for_correct_functions(compiler):
    def f(x, w, n: int):
        h = x @ w
        for i in range(2):
            h = h.tanh() + 1
        if n > 1:
            h = h * n
        return h.sum(), h

    cf = tj.script(f, check=True, compiler=compiler)
    x = tj.tensor(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))
    w = tj.tensor(np.ones((4, 2), np.float32), requires_grad=True)
    s, h = cf(x, w, 2)
    s2, _ = cf(x, w, 2)  # the hit path is checked too
    assert abs(s.item() - f(x, w, 2)[0].item()) < 1e-4 and cf.cache_stats()["hits"] == 1


def test_check_mode_gradients_of_two_outputs(compiler):
    def f(x, w):
        h = (x @ w).tanh()
        return h.sum(), h

    cf = tj.trace(f, check=True, compiler=compiler)
    x = tj.tensor(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))
    s, h = cf(x, tj.ones(4, 2, requires_grad=True))
    assert s.requires_grad and h.requires_grad


SETTINGS = np.array([2.0])  # an array's element: the guard compares the array by identity only
SCALE = 2.0                 # a global number: watched (jit/python_refs.py)


def uses_global(x):
    y = x + 1
    return (y * float(SETTINGS[0])).sin()


def uses_global_number(x):
    return (x * SCALE).sin()


def test_check_mode_names_the_equation_a_stale_capture_gets_wrong():
    cf = tj.trace(uses_global, check=True, compiler="interpret")
    x = tj.tensor([0.5, 1.5])
    cf(x)
    SETTINGS[0] = 3.0  # the trace baked 2.0 in
    try:
        with pytest.raises(CheckMismatchError) as ei:
            cf(x)
    finally:
        SETTINGS[0] = 2.0
    msg = str(ei.value)
    line = inspect.getsourcelines(uses_global)[1] + 2
    assert f"`%1: f32[2] = mul %0 2.0` (from {os.path.basename(__file__)}:{line})" in msg
    assert "captured now it is `%1: f32[2] = mul %0 3.0`" in msg


def test_a_changed_global_number_is_no_stale_capture():
    global SCALE
    cf = tj.trace(uses_global_number, check=True, compiler="interpret")
    x = tj.tensor([0.5, 1.5])
    cf(x)
    SCALE = 3.0
    try:
        np.testing.assert_allclose(cf(x).numpy(), np.sin(np.array([0.5, 1.5]) * 3.0), rtol=1e-6)
    finally:
        SCALE = 2.0
    assert cf.cache_stats()["compiles"] == 2


def test_check_mode_names_the_equation_a_wrong_backend_computes():
    def f(x):
        y = x.exp()
        return y * 2, x.sum()

    cf = tj.trace(f, check=True, compiler="interpret")
    x = tj.tensor([0.5, 1.5])
    cf(x)
    (e,) = cf.entries
    good = e.executor
    e.set_executor(_Fake(lambda ins: [good(ins)[0] + 1e-2, good(ins)[1]]))  # a broken "kernel"
    with pytest.raises(CheckMismatchError) as ei:
        cf(x)
    line = inspect.getsourcelines(f)[1] + 2
    assert "output 0" in str(ei.value)
    assert f"`%1: f32[2] = mul %0 2.0` (from {os.path.basename(__file__)}:{line})" in str(ei.value)


def test_check_mode_uses_the_executors_intermediate_values_when_it_has_them():
    def f(x):
        a = x.exp()
        b = a + 1
        return b * 2

    cf = tj.trace(f, check=True, compiler="interpret")
    x = tj.tensor([0.5, 1.5])
    cf(x)
    (e,) = cf.entries
    from tracejit.jit.interpreter import interpret

    class Broken(Executor):
        """An executor whose `add` is wrong, and that can report per-equation values."""

        tier = "compiled"

        def __call__(self, ins):
            return [interpret(e.opt_graph, ins)[0] + 2.0]

        def debug_values(self, ins):
            vals = {}

            def rec(eqn, outs):
                for o, v in zip(eqn.outs, outs):
                    vals[o] = v + 1.0 if eqn.prim.name == "add" else v
            interpret(e.opt_graph, ins, record=rec)
            return vals

    e.set_executor(Broken())
    with pytest.raises(CheckMismatchError, match=r"at IR equation `%1: f32\[2\] = add %0 1.0`"):
        cf(x)


def test_check_mode_compares_gradients():
    class BadGrad(tj.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    def f(x):
        return BadGrad.apply(x).sum()

    cf = tj.trace(f, check=True, compiler="interpret")
    x = tj.ones(2, requires_grad=True)
    cf(x)  # same custom backward on both sides: passes
    (e,) = cf.entries
    # the right value, the wrong derivative (3 instead of the custom backward's 2)
    e.set_executor(_Fake(lambda ins: [(ins[0] * 2).sum() + (ins[0] - ins[0].detach()).sum()]))
    with pytest.raises(CheckMismatchError, match="gradient of input 'x' differs"):
        cf(x)


def test_check_env_var_enables_check_mode(monkeypatch):
    cf = tj.trace(uses_global, compiler="interpret")
    x = tj.tensor([0.5])
    cf(x)
    (e,) = cf.entries
    good = e.executor
    e.set_executor(_Fake(lambda ins: [good(ins)[0] * 0.5]))
    assert cf(x).item() != uses_global(x).item()  # unchecked: wrong silently
    monkeypatch.setenv("TRACEJIT_CHECK", "1")
    with pytest.raises(CheckMismatchError):
        cf(x)


# --------------------------------------------------------------------------- logging
def test_logging_topics_produce_records(caplog):
    config.configure_logging("recompiles,graphs,guards")
    cf = tj.trace(lambda_free_square, compiler="interpret")
    cf(tj.ones(2))
    cf(tj.ones(3))
    by = {}
    for r in caplog.records:
        by.setdefault(r.name, []).append(r.getMessage())
    assert any(m.startswith("captured lambda_free_square:\nlambda_free_square(%x: f32[2])")
               for m in by["tracejit.graphs"])
    assert any("def guard(L, C, gm):" in m for m in by["tracejit.guards"])
    assert "recompiling lambda_free_square: input 'x': size guard failed: dim 0 was 2, now 3" \
        in by["tracejit.recompiles"]


def test_logging_topics_from_environment(monkeypatch, caplog):
    monkeypatch.setenv("TRACEJIT_LOG", "recompiles")
    config.configure_logging()
    cf = tj.trace(lambda_free_square, compiler="interpret")
    cf(tj.ones(2))
    cf(tj.ones(3))
    names = {r.name for r in caplog.records}
    assert "tracejit.recompiles" in names and "tracejit.graphs" not in names


def test_logging_without_application_handlers_prints_to_stderr(capfd):
    import subprocess
    import sys

    code = ("import tracejit as tj\n"
            "f = tj.trace(lambda x: x + 1, compiler='interpret')\n"
            "f(tj.ones(2)); f(tj.ones(3))\n")
    env = dict(os.environ, TRACEJIT_LOG="recompiles")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert "[tracejit.recompiles] recompiling <lambda>: input 'x': size guard failed" in r.stderr


# --------------------------------------------------------------------------- explain
def test_explain_shows_guards_and_ir():
    def f(x, n: int):
        if n > 1:
            return x * n
        return x

    cf = tj.script(f, compiler="interpret")
    ex = cf.explain(tj.ones(2, 3), 2)
    text = str(ex)
    for section in ("== status ==", "== guards ==", "== graph ==", "== optimized graph =="):
        assert section in text
    assert ex["guards"] == ("x: Tensor f32[2,3] on cpu\n"
                            "n: any int (runtime input)\n"
                            "grad mode is on")
    assert "cond" in ex["graph"] and ex["graph"].startswith("f(%x: f32[2,3], %n: i64[])")
    assert "captured now" in ex["status"]
    ex2 = tj.explain(cf, tj.ones(2, 3), 5)
    assert "cache hit" in ex2["status"]
    ex3 = tj.explain(cf, tj.ones(4, 3), n=5)
    assert "recompile reasons" in str(ex3)
    assert "size guard failed: dim 0 was 2, now 4" in ex3["recompile reasons"]


def test_explain_requires_a_compiled_function():
    with pytest.raises(TypeError, match="explain expects"):
        tj.explain(lambda_free_square, tj.ones(1))


def test_explain_says_why_a_call_ran_eagerly():
    def branchy(x):
        if x.sum() > 0:
            return x * 2
        return x

    f = tj.compile(branchy)
    with pytest.warns(RuntimeWarning):
        text = tj.explain(f, tj.ones(3))["status"]
    assert "ran eagerly" in text and "bool(tensor)" in text and "fullgraph=True" in text
    with tj.eager():
        g = tj.compile(lambda x: x + 1)
        assert "eager mode is on" in tj.explain(g, tj.ones(3))["status"]
