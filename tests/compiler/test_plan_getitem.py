"""A plan's getitem of ints, slices and None (compiler/plan.py `_basic_key_code`): indexed in
the plan's own line, with a constant key or, for symbolic bounds, one made from the call's
sizes; values as PyTorch's, index tensors still through the primitive."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tracejit as tj

pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _source(cf) -> str:
    return cf._entries[-1].executor._infer.source


def _sliced(x):
    # a select, a stepped slice, a new axis, a negative int, and an all-integer index
    return x[0] * 2, x[:, 1::2, None, -1] + 1, x[1, -1, 2] * 3


def _data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_static_basic_index_is_the_plans_own_line():
    xs = _data(3, 5, 4)
    cf = tj.script(_sliced)
    got = cf(tj.tensor(xs))
    want = _sliced(torch.from_numpy(xs))
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape)
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)
    src = _source(cf)
    assert "_getitem(" not in src and "[KEY" in src, src


def _cache_step(cache, new, pos):
    # a decoding step's pattern: a causal mask row sliced at the cache's length
    kv = (torch if isinstance(cache, torch.Tensor) else tj).cat((cache, new), dim=-2)
    t = kv.size(-2)
    return kv * pos[0, 0, t - 1:t, :t].transpose(-2, -1)


def test_symbolic_slice_bounds_follow_each_call():
    pos = _data(1, 1, 12, 12, seed=1)
    cf = tj.trace(_cache_step, dynamic=True)
    for t in (3, 5, 8):
        cache, new = _data(2, t, 4, seed=t), _data(2, 1, 4, seed=t + 10)
        got = cf(tj.tensor(cache), tj.tensor(new), tj.tensor(pos))
        want = _cache_step(torch.from_numpy(cache), torch.from_numpy(new), torch.from_numpy(pos))
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    assert len(cf._entries) == 1
    src = _source(cf)
    assert "_getitem(" not in src and "slice(" in src, src


def test_an_index_tensor_still_takes_the_primitive():
    xs, idx = _data(6, 3), np.array([4, 0, 4], np.int64)

    def pick(x, i):
        return x[i] + 1
    cf = tj.script(pick)
    got = cf(tj.tensor(xs), tj.tensor(idx))
    np.testing.assert_allclose(got.numpy(), xs[idx] + 1, rtol=1e-6)
    assert "_getitem(" in _source(cf)     # (the primitive's call: the signature's, compiler/plan.py `_table_call`)
