"""The autocast weight cache across contexts (ops/autocast.py's `_Kept`): a weight's bf16
cast made in one training step's context serves the next step's while the weight is
unchanged, and never once it has changed."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import tracejit as tj
from tracejit.ops import autocast as policy

F = tj.nn.functional


@pytest.fixture
def float32_way():
    """Products computed in float32 on bf16 values (the way of a CPU without bf16 units)."""
    from tracejit.compiler.cpu.gemm import bf16 as bf16_gemm
    prev = bf16_gemm.force("float32")
    yield
    bf16_gemm.force(prev)


def _words(t):
    return np.asarray(t.detach().float().numpy(), np.float32).view(np.uint32) >> 16


def _linear(seed=0, n=16):
    r = np.random.default_rng(seed)
    lin = tj.nn.Linear(n, n)
    with tj.no_grad():
        lin.weight.copy_(tj.tensor(r.standard_normal((n, n)).astype(np.float32)))
    x = tj.tensor(r.standard_normal((5, n)).astype(np.float32))
    return lin, x


def _reference(lin, x):
    """The bf16 product from casts made now, outside autocast (no cache)."""
    return F.linear(x.bfloat16(), lin.weight.detach().bfloat16(), lin.bias.detach().bfloat16())


def test_a_weight_cast_serves_later_contexts_until_the_optimizer_changes_it(bf16_gemm_way, monkeypatch, cast_calls):
    """Step 2's context casts no weight step 1's cast; an optimizer step bumps the weights'
    versions, so step 3 casts them again and its product is the new weights' rounding."""
    calls = cast_calls
    lin, x = _linear()
    opt = tj.optim.SGD(lin.parameters(), lr=0.5)

    def weight_casts():
        return sum(1 for t in calls if t is lin.weight or t is lin.bias)
    with tj.autocast("cpu"):
        lin(x)
    assert weight_casts() == 2
    with tj.autocast("cpu"):
        y = lin(x)
    assert weight_casts() == 2                       # (kept from the first context)
    np.testing.assert_array_equal(_words(y), _words(_reference(lin, x)))
    y.float().square().sum().backward()
    before = _words(lin.weight)
    opt.step()
    assert not np.array_equal(_words(lin.weight), before)
    with tj.autocast("cpu"):
        y = lin(x)
    assert weight_casts() == 4                       # (recast after the update)
    np.testing.assert_array_equal(_words(y), _words(_reference(lin, x)))


@pytest.mark.parametrize("change", ["mul_", "view_mul_", "data_mul_", "copy_", "data_assign", "load_state_dict"])
def test_no_kept_cast_outlives_a_change_to_its_weight(float32_way, change):
    """Every way of changing a weight in place (or its memory) between two contexts makes
    the second context's product use the changed weight."""
    lin, x = _linear(1)
    with tj.autocast("cpu"):
        lin(x)
    new = np.random.default_rng(2).standard_normal((16, 16)).astype(np.float32)
    with tj.no_grad():
        if change == "mul_":
            lin.weight.mul_(-3.0)
        elif change == "view_mul_":
            lin.weight[1:4].mul_(-3.0)
        elif change == "data_mul_":
            lin.weight.data.mul_(-3.0)
        elif change == "copy_":
            lin.weight.copy_(tj.tensor(new))
        elif change == "data_assign":
            lin.weight.data = tj.tensor(new)
        else:
            lin.load_state_dict({"weight": tj.tensor(new), "bias": lin.bias.detach() + 1})
    with tj.autocast("cpu"):
        y = lin(x)
    np.testing.assert_array_equal(_words(y), _words(_reference(lin, x)))


def test_gradients_through_a_kept_cast_equal_those_through_a_fresh_one(bf16_gemm_way):
    """The second context's cast comes from kept values with its own autograd node: the
    float32 master weights get the gradients a fresh cast gives, bit for bit."""
    lin, x = _linear(3)
    grads = []
    for clear in (False, True):
        for _ in range(2):
            if clear:
                tj.clear_autocast_cache()
            lin.zero_grad()
            with tj.autocast("cpu"):
                loss = (lin(lin(x)).float() ** 2).sum()
            loss.backward()
        grads.append((lin.weight.grad.numpy().copy(), lin.bias.grad.numpy().copy()))
        assert lin.weight.grad.dtype is tj.float32
    np.testing.assert_array_equal(grads[0][0], grads[1][0])
    np.testing.assert_array_equal(grads[0][1], grads[1][1])
    assert np.abs(grads[0][0]).sum() > 0


def test_clearing_and_turning_off_the_cache_stop_the_reuse(float32_way, monkeypatch, cast_calls):
    calls = cast_calls
    lin, x = _linear(4)

    def weight_casts():
        return sum(1 for t in calls if t is lin.weight)
    with tj.autocast("cpu"):
        lin(x)
    tj.clear_autocast_cache()
    with tj.autocast("cpu"):
        lin(x)
    assert weight_casts() == 2
    with tj.autocast("cpu", cache_enabled=False):
        lin(x)
    assert weight_casts() == 3
    tj.set_autocast_cache_enabled(False)
    try:
        with tj.autocast("cpu"):
            lin(x)
    finally:
        tj.set_autocast_cache_enabled(True)
    assert weight_casts() == 4
    with tj.autocast("cpu"):
        lin(x)
    assert weight_casts() == 4                       # (the first context's cast, kept)


def test_kept_casts_die_with_their_weights(bf16_gemm_way):
    """The cache holds a weight weakly: dropping the model frees the weight and its entries."""
    tj.clear_autocast_cache()
    lin, x = _linear(5)
    with tj.autocast("cpu"):
        lin(x).float().sum().backward()
    assert len(policy.STATE.kept) >= 2
    ref = weakref.ref(lin.weight)
    del lin
    gc.collect()
    assert ref() is None
    assert not policy.STATE.kept
