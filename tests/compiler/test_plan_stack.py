"""A plan's dim-0 stack of concats (compiler/plan.py `_stacked_concats`): each concat writes
its slot of the stack's result, values as PyTorch's; a concat the plan returns, or a stack
along another dim, keeps its own array."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tracejit as tj

pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _source(cf) -> str:
    return cf._entries[-1].executor._infer.source


def _lib(x):
    return torch if isinstance(x, torch.Tensor) else tj


def _data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _kv_step(past, k, v):
    # GPT-2's cache: both halves grown along time, stacked as the next call's past
    lib = _lib(past)
    key = lib.cat((past[0], k.transpose(1, 2)), dim=-2)
    value = lib.cat((past[1], v.transpose(1, 2)), dim=-2)
    return lib.stack((key, value)), (key * 2).sum(-1) + value.sum(-1)


def test_a_stack_of_concats_is_written_in_place():
    cf = tj.trace(_kv_step, dynamic=True)
    for t in (3, 4, 6):
        past, k, v = _data(2, 2, 3, t, 4, seed=t), _data(2, 1, 3, 4, seed=t + 1), _data(2, 1, 3, 4, seed=t + 2)
        got = cf(tj.tensor(past), tj.tensor(k), tj.tensor(v))
        want = _kv_step(*(torch.from_numpy(a) for a in (past, k, v)))
        for g, w in zip(got, want):
            assert tuple(g.shape) == tuple(w.shape)
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)
    src = _source(cf)
    assert "_stack(" not in src and "_concat(" not in src and "out=" in src, src


def _returns_a_half(a, b, c):
    lib = _lib(a)
    key = lib.cat((a, b), dim=0)
    return lib.stack((key, lib.cat((a, c), dim=0))), key


def test_a_returned_concat_keeps_its_own_array():
    a, b, c = _data(2, 3), _data(1, 3, seed=1), _data(1, 3, seed=2)
    cf = tj.script(_returns_a_half)
    stacked, key = cf(tj.tensor(a), tj.tensor(b), tj.tensor(c))
    want = _returns_a_half(*(torch.from_numpy(x) for x in (a, b, c)))
    np.testing.assert_allclose(stacked.numpy(), want[0].numpy())
    np.testing.assert_allclose(key.numpy(), want[1].numpy())
    assert not np.shares_memory(stacked.numpy(), key.numpy())
    assert "_stack(" in _source(cf)     # (the primitive: its signature's call, compiler/plan.py `_table_call`)


def _along_one(a, b, c):
    lib = _lib(a)
    return lib.stack((lib.cat((a, b), dim=0), lib.cat((a, c), dim=0)), dim=1) + 1


def test_a_stack_along_another_dim_takes_the_primitive():
    a, b, c = _data(2, 3), _data(1, 3, seed=1), _data(1, 3, seed=2)
    cf = tj.script(_along_one)
    got = cf(tj.tensor(a), tj.tensor(b), tj.tensor(c))
    np.testing.assert_allclose(got.numpy(), _along_one(*(torch.from_numpy(x) for x in (a, b, c))).numpy())
    assert "_stack(" in _source(cf)     # (the primitive: its signature's call, compiler/plan.py `_table_call`)
