"""Variants recorded for a graph (compiler/tierhints.py `add_variant`): the next process's
background compile plans them too (compiler/tiers_work.py), but a record that no kernel
of this tracejit can render is skipped, never a reason to stay on tier 0."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler import tierhints, workers
from tracejit.testing import kernel_cache_at

WAIT_S = 240  # generous: the machine may be shared


@pytest.fixture(autouse=True, scope="module")
def _module_cache(tmp_path_factory):
    with kernel_cache_at(tmp_path_factory.mktemp("tiers-variants")):
        yield
    workers.shutdown()


def _step(x, w):
    return ((x @ w).tanh() * 1.625 + x.sum(1, keepdim=True)).pow(2).mean()


def _loss_and_grad(fn, x, w):
    w.grad = None
    loss = fn(x, w)
    loss.backward()
    return float(loss), w.grad.numpy().copy()


def test_a_recorded_variant_that_fits_no_kernel_is_skipped():
    rng = np.random.default_rng(0)
    x = tj.tensor(rng.standard_normal((16, 8)).astype(np.float32))
    w = tj.tensor(rng.standard_normal((8, 8)).astype(np.float32), requires_grad=True)
    eager = _loss_and_grad(_step, x, w)
    first = tj.trace(_step, compile="background")
    _loss_and_grad(first, x, w)
    executor = first.entry_for(x, w).executor      # the tiered one, until it switches
    assert tj.compiler.wait(first, timeout=WAIT_S)
    kern = next(k for k, _, _ in executor.variants if len(k.group.inputs) >= 1)
    # layouts for one input more than the kernel has, as a run whose fusion grouped this
    # graph otherwise would have recorded under the same label
    bad = ("nd",) * (len(kern.group.inputs) + 1)
    tierhints.add_variant(executor._graph_key(), kern.label, bad, False)
    assert (kern.label, bad, False) in tierhints.variants(executor._graph_key())

    again = tj.trace(_step, compile="background")     # the same graph: the record applies
    _loss_and_grad(again, x, w)
    later = again.entry_for(x, w).executor
    assert tj.compiler.wait(again, timeout=WAIT_S)
    st = again.cache_stats()
    assert st["tiers"] == ["compiled"] and st["kernels_done"] >= 1
    assert later._graph_key() == executor._graph_key()
    assert all(len(layouts) == len(k.group.inputs) for k, layouts, _ in later.variants
               if k.label == kern.label and layouts)
    loss, grad = _loss_and_grad(again, x, w)
    assert loss == pytest.approx(eager[0], rel=1e-5)
    np.testing.assert_allclose(grad, eager[1], rtol=1e-4, atol=1e-5)
