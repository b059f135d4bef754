"""``tracejit.compile`` (torch.compile's entry point), ``tracejit.jit.trace(model, x)``
(torch.jit.trace's form) and ``tracejit.compiler`` as a package attribute."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn as nn
from tracejit.jit import CompiledFunction


def _mlp():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_a_function_is_compiled_and_matches_eager():
    def f(x, y):
        return (x * y).tanh().sum(1)

    cf = tj.compile(f)
    assert isinstance(cf, CompiledFunction) and cf.__name__ == "f"
    x, y = tj.randn(3, 5), tj.randn(3, 5)
    np.testing.assert_allclose(cf(x, y).numpy(), f(x, y).numpy(), rtol=1e-6)
    assert cf.cache_stats()["compiles"] == 1


def test_decorator_forms():
    @tj.compile
    def a(x):
        return x * 2

    @tj.compile()
    def b(x):
        return x * 3

    @tj.compile(mode="max-autotune", dynamic=True)
    def c(x):
        return x * 4

    x = tj.ones(2, 3)
    assert [f(x).sum().item() for f in (a, b, c)] == [12.0, 18.0, 24.0]
    assert all(isinstance(f, CompiledFunction) for f in (a, b, c))
    assert c.entries[0].descs[0].shape == ("s0", "s1")   # dynamic=True: symbolic at once


@pytest.mark.parametrize("mode,compile_mode", [(None, None), ("default", None), ("reduce-overhead", None),
                                               ("max-autotune", "sync"),
                                               ("max-autotune-no-cudagraphs", "sync")])
def test_modes_map_to_compile_modes(mode, compile_mode):
    cf = tj.compile(lambda x: x + 1, mode=mode)
    assert cf._compile_mode == compile_mode


@pytest.mark.parametrize("backend,compiler", [(None, "numba"), ("inductor", "numba"), ("numba", "numba"),
                                              ("eager", "interpret"), ("aot_eager", "interpret"),
                                              ("interpret", "interpret")])
def test_backends_map_to_compilers(backend, compiler):
    cf = tj.compile(lambda x: x + 1, backend=backend)
    assert cf._compiler == compiler
    assert cf(tj.ones(2)).tolist() == [2.0, 2.0]
    assert cf.cache_stats()["tiers"] == (["interpret"] if compiler == "interpret" else ["compiled"])


def test_options_reach_the_compiled_function():
    cf = tj.compile(lambda x: x.sum(), options={"recompile_limit": 2, "check": True, "compile": "sync"})
    assert (cf._limit, cf._check, cf._compile_mode) == (2, True, "sync")
    scripted = tj.compile(lambda x: x * 2, options={"capture": "script"})
    assert scripted._mode == "script"


@pytest.mark.parametrize("kwargs,message", [
    ({"mode": "fastest"}, "unknown mode 'fastest'; choose one of 'default', 'reduce-overhead', 'max-autotune'"),
    ({"backend": "tvm"}, "unknown backend 'tvm'; choose one of 'inductor', 'numba', 'eager', 'aot_eager'"),
    ({"backend": print}, "backend must be a name, got the callable"),
    ({"options": {"colour": True}}, "unknown option 'colour'; the options are "
                                                "'recompile_limit', 'check', 'capture', 'compile'"),
    ({"options": {"recompile_limit": 0}}, "option 'recompile_limit' must be a int >= 1, got 0"),
    ({"options": {"capture": "jit"}}, "option 'capture' must be one of 'trace', 'script', got 'jit'"),
    ({"mode": "default", "options": {"check": True}}, "pass mode or options, not both"),
])
def test_bad_settings_raise_naming_the_value_and_the_choices(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")) as info:
        tj.compile(lambda x: x, **kwargs)
    assert isinstance(info.value, RuntimeError)   # (torch.compile's class for each of these)


@pytest.mark.parametrize("kwargs,message", [({"dynamic": "yes"}, "dynamic must be None, True or False"),
                                            ({"fullgraph": 1}, "fullgraph must be True or False"),
                                            ({"options": [("check", True)]}, "options must be a dict")])
def test_bad_types_raise(kwargs, message):
    with pytest.raises(TypeError, match=message):
        tj.compile(lambda x: x, **kwargs)


def test_a_bad_setting_as_a_decorator_raises_at_once():
    with pytest.raises(ValueError, match="unknown mode"):
        tj.compile(mode="turbo")


def test_not_callable_and_disable():
    with pytest.raises(TypeError, match="expects a function or an nn.Module, got int"):
        tj.compile(3)
    m = _mlp()
    assert tj.compile(m, disable=True) is m
    assert tj.compile(fullgraph=True)(m)(tj.ones(1, 4)).shape == (1, 2)


def test_jit_trace_with_example_inputs_captures_without_running():
    calls = []

    class Counting(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x, scale=1.0):
            calls.append(1)
            return self.fc(x) * scale

    m = Counting()
    x = tj.randn(3, 4)
    traced = tj.jit.trace(m, x)
    assert isinstance(traced, nn.Module) and traced.cache_stats()["compiles"] == 1
    assert len(calls) == 1            # traced once, on tracers: no eager call
    np.testing.assert_allclose(traced(x).detach().numpy(), m.fc(x).detach().numpy(), rtol=1e-6)
    st = traced.cache_stats()
    assert st["compiles"] == 1 and st["hits"] == 1
    f = tj.jit.trace(lambda a, b: a @ b, (x, tj.randn(4, 5)))
    assert f.cache_stats()["compiles"] == 1
    k = tj.jit.trace(m, example_kwarg_inputs={"x": x, "scale": 2.0})
    assert k.cache_stats()["entries"] == 1   # (the capture `traced` made of m: reused)
    with pytest.raises(TypeError, match="example inputs were given without the function"):
        tj.jit.trace(None, x)


def test_compiler_is_a_package_attribute_after_import_tracejit():
    code = ("import sys, tracejit as tj\n"
            "assert 'numba' not in sys.modules\n"      # the backend loads at the first compile
            "assert 'compiler' in dir(tj)\n"
            "assert tj.compiler.wait() is True\n"
            "assert tj.compiler.reset and tj.compiler.cache_info\n"
            "try:\n    tj.not_a_thing\nexcept AttributeError as e:\n    print(e)\n")
    root = os.path.dirname(os.path.dirname(tj.__file__))   # this tree's tracejit, not another
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "module 'tracejit' has no attribute 'not_a_thing'"


def _data_dependent(x):
    if x.sum() > 0:          # a Python branch on a tensor's value: not one graph
        return x * 2.0
    return x - 1.0


def test_what_cannot_be_one_graph_runs_eagerly_with_one_warning():
    f = tj.compile(_data_dependent)
    pos, neg = tj.tensor([1.0, 2.0]), tj.tensor([-3.0, 1.0])
    with pytest.warns(RuntimeWarning, match=r"_data_dependent cannot be captured.*bool\(tensor\)"):
        np.testing.assert_array_equal(f(pos).numpy(), [2.0, 4.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # no second warning, no second capture
        np.testing.assert_array_equal(f(neg).numpy(), [-4.0, 0.0])
    stats = f.cache_stats()
    assert stats["eager_fallbacks"] == 1 and stats["entries"] == 0


def test_fullgraph_and_trace_raise_what_cannot_be_one_graph():
    from tracejit.errors import TraceError
    with pytest.raises(TraceError, match="bool"):
        tj.compile(_data_dependent, fullgraph=True)(tj.tensor([1.0]))
    with pytest.raises(TraceError, match="bool"):
        tj.trace(_data_dependent)(tj.tensor([1.0]))


def test_a_module_that_falls_back_keeps_its_state_as_eager():
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn, self.lin = nn.BatchNorm1d(3), nn.Linear(3, 2)

        def forward(self, x):
            y = self.lin(self.bn(x))
            return y * 2.0 if y.abs().max().item() < 1e9 else y

    tj.manual_seed(0)
    a, b = Branchy(), Branchy()
    b.load_state_dict(a.state_dict())
    cb = tj.compile(b)
    x = tj.tensor(np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32))
    with pytest.warns(RuntimeWarning, match="item"):
        cb(x)
    a(x)
    for _ in range(2):
        ya, yb = a(x), cb(x)
    # (its submodules run compiled: fused kernels, equal to eager's up to rounding)
    np.testing.assert_allclose(ya.detach().numpy(), yb.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(a.bn.running_mean.numpy(), b.bn.running_mean.numpy(), rtol=1e-6, atol=1e-7)
    assert int(b.bn.num_batches_tracked) == 3
    assert sorted(cb.cache_stats()["submodules"]) == ["bn", "lin"]
