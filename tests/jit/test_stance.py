"""``tracejit.compiler.set_stance`` (jit/config.py): each stance does to a compiled
function what torch.compiler.set_stance does to a torch.compile'd one."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import tracejit as tj
from tracejit.jit import config

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _default_stance():
    yield
    tj.compiler.set_stance("default")
    torch.compiler.set_stance("default")


def _counted(lib):
    """A compiled function and a callable giving how many graphs it has compiled."""
    def f(x):
        return x * 2 + 1
    if lib is torch:
        from torch._dynamo.testing import CompileCounter
        torch._dynamo.reset()
        counter = CompileCounter()
        return torch.compile(f, backend=counter), lambda: counter.frame_count
    cf = tj.compile(f)
    return cf, lambda: cf.cache_stats()["compiles"]


@pytest.mark.parametrize("lib", [tj, torch], ids=["tracejit", "torch"])
def test_force_eager_as_a_call_a_block_and_a_decorator(lib):
    f, compiles = _counted(lib)
    lib.compiler.set_stance("force_eager")
    assert f(lib.ones(3)).tolist() == [3.0] * 3
    lib.compiler.set_stance("default")
    with lib.compiler.set_stance("force_eager"):
        f(lib.ones(4))

    @lib.compiler.set_stance("force_eager")
    def g(n):
        return f(lib.ones(n))
    g(5)
    assert compiles() == 0
    f(lib.ones(6))   # (the decorator set the stance only while g ran)
    assert compiles() == 1


@pytest.mark.parametrize("lib", [tj, torch], ids=["tracejit", "torch"])
def test_eager_and_fail_on_recompile(lib):
    if lib is torch:   # (after its raise torch holds one more reference to every later frame's
        # values, which tracejit's in-place reuse of sole-owner gradients reads: a child process)
        code = (f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
                f"import test_stance as t; t.eager_and_fail_on_recompile(t.torch)")
        subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    else:
        eager_and_fail_on_recompile(lib)


def eager_and_fail_on_recompile(lib):
    f, compiles = _counted(lib)
    f(lib.ones(3))
    with lib.compiler.set_stance("eager_on_recompile"):
        assert f(lib.ones(5, 2)).tolist() == [[3.0] * 2] * 5   # a new signature: eagerly
        f(lib.ones(3))   # the entry it has serves this
    assert compiles() == 1
    with lib.compiler.set_stance("fail_on_recompile"):
        f(lib.ones(3))
        with pytest.raises(RuntimeError, match="Detected recompile when torch.compile stance is "
                                               "'fail_on_recompile'"):
            f(lib.ones(7, 2))
    assert compiles() == 1


def test_fail_on_recompile_names_why_no_entry_matched():
    f, _ = _counted(tj)
    f(tj.ones(3))
    with tj.compiler.set_stance("fail_on_recompile"), pytest.raises(RuntimeError, match="'f', because") as e:
        f(tj.ones(3, dtype=tj.float64))
    assert "float64" in str(e.value)
    assert f.cache_stats()["misses"] == 1   # (the refused call counted nothing)


def test_eager_then_compile_runs_the_first_call_eagerly():
    f, compiles = _counted(tj)
    with tj.compiler.set_stance("eager_then_compile"):
        f(tj.ones(3))
        assert compiles() == 0
        assert f(tj.ones(3)).tolist() == [3.0] * 3
        f(tj.ones(3))
    assert compiles() == 1 and f.cache_stats()["hits"] == 1


def test_bad_stance_and_force_backend_are_refused_changing_nothing():
    with pytest.raises(ValueError, match="unknown stance 'fast'"):
        tj.compiler.set_stance("fast")
    with pytest.raises(RuntimeError, match="non-default stance cannot have force_backend"):
        tj.compiler.set_stance("force_eager", force_backend="eager")
    assert config.stance() == "default" and tj._dynamo.set_stance is tj.compiler.set_stance


def test_set_stance_inside_a_compiled_function_raises():
    def f(x):
        tj.compiler.set_stance("force_eager")
        return x + 1
    with pytest.raises(RuntimeError, match="inside a compiled region"):
        tj.compile(f, fullgraph=True)(tj.ones(2))
    assert config.stance() == "default"
