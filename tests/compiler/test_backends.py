"""The backend object (compiler/backends.py): plans and executors ask it, not the device type."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler import backends
from tracejit.compiler.plan import Plan


pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _graph(fn, *args):
    f = tj.trace(fn, compiler="interpret")
    f(*args)
    return f._entries[-1].opt_graph


def test_lookup_and_graph_backend():
    assert backends.get("cpu") is backends.BACKENDS["cpu"] and backends.get(backends.BACKENDS["cuda"]).name == "cuda"
    with pytest.raises(ValueError, match="no backend 'tpu'"):
        backends.get("tpu")
    g = _graph(lambda x: x * 2.0, tj.ones(3))
    assert backends.for_graph(g).name == "cpu"
    assert backends.BACKENDS["cpu"].sequential_sums and not backends.BACKENDS["cuda"].sequential_sums


class _Recording(backends.CpuBackend):
    """The CPU backend, recording what the plan asks of it."""

    name = "recording"

    def __init__(self):
        self.rendered, self.loaded, self.modules = [], [], 0

    def array_module(self):
        self.modules += 1
        return np

    def render(self, nest, parallel):
        self.rendered.append((nest.layouts, parallel, nest.reduction.acc_dtype if nest.reduction else None))
        return super().render(nest, parallel)

    def load(self, spec, label, parallel):
        self.loaded.append(spec.form)
        return super().load(spec, label, parallel)


def test_a_plan_asks_its_backend_object_for_everything_device_specific():
    x = np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal(5).astype(np.float32)
    g = _graph(lambda x, b: ((x - b) ** 2).sum(0), tj.tensor(x), tj.tensor(b))
    rec = _Recording()
    plan = Plan(g, "rec", backend=rec)
    assert plan.backend is rec and rec.modules == 1
    # the source was rendered at capture (errors surface there), from the float64-summing nest
    assert rec.rendered == [(("flat", "ndc"), False, "float64")] and rec.loaded == []
    (got,) = plan(x, b)
    np.testing.assert_allclose(got, ((x.astype(np.float64) - b) ** 2).sum(0), rtol=1e-6)
    assert rec.loaded == ["column_blocks"]
    # a strided operand takes the 'nd' variant through the same object
    plan(np.asfortranarray(x), b)
    assert rec.rendered[-1][0] == ("nd", "ndc") and len(rec.loaded) == 2


def test_a_backend_without_a_serial_twin_gets_one_kernel_for_every_size():
    class OneKernel(_Recording):
        serial_twin = False

    g = _graph(lambda x: tj.tanh(x) * 2.0, tj.ones(16))
    one = OneKernel()
    plan = Plan(g, "one", backend=one)
    assert "K0s" not in plan.source and "if 16 >= PARALLEL_MIN" not in plan.source  # no twin
    x = np.linspace(-2, 2, 16, dtype=np.float32)
    np.testing.assert_allclose(plan(x)[0], np.tanh(x) * 2, rtol=1e-6)
    assert [p for _, p, _ in one.rendered] == [False]  # the one variant (backend.variant)
