"""Differential fuzzing of the random ops under ``tj.compile``: after ``manual_seed`` a
compiled function (plain, ``dynamic=True``, ``fullgraph=True``) draws exactly what the
same function draws eagerly, call after call (no sample frozen into the capture), and
the draws have PyTorch's shapes and dtypes (the streams themselves are tracejit's)."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

DRAWS = {
    "dropout": lambda lib, x: lib.nn.functional.dropout(x, 0.3),
    "rand_like": lambda lib, x: x + lib.rand_like(x),
    "randn": lambda lib, x: x * lib.randn(x.shape),
    "bernoulli": lambda lib, x: lib.bernoulli(x.sigmoid()),
    "bernoulli_p": lambda lib, x: x.clone().bernoulli_(0.3),
    "multinomial": lambda lib, x: lib.multinomial(x.softmax(-1), 2),
    "multinomial_r": lambda lib, x: lib.multinomial(x.softmax(-1), 5, replacement=True),
    "randint": lambda lib, x: lib.randint(0, 10, (3, 2)),
    "randperm": lambda lib, x: lib.randperm(x.shape[0] + 3),
    "randperm_index": lambda lib, x: x[lib.randperm(x.shape[0])] * 2,
    "randperm_float": lambda lib, x: lib.randperm(5, dtype=lib.float32) + x.sum(),
    "normal_": lambda lib, x: x.clone().normal_(),
    "uniform_": lambda lib, x: x.clone().uniform_(-1, 2),
    "exponential_": lambda lib, x: x.clone().exponential_(),
    "normal": lambda lib, x: lib.normal(x, 1.0),
    "alpha_dropout": lambda lib, x: lib.nn.functional.alpha_dropout(x, 0.3, True),
    "dropout1d": lambda lib, x: lib.nn.functional.dropout1d(x, 0.5),
    "two": lambda lib, x: lib.rand_like(x) + lib.randn_like(x) * lib.nn.functional.dropout(x, 0.5),
}


def _draws(f, seed, rows):
    tj.manual_seed(seed)
    return [f(tj.tensor(np.linspace(-1, 1, n * 4, dtype="float32").reshape(n, 4))) for n in rows]


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_compiled_random_ops_draw_what_eager_draws(name):
    op = DRAWS[name]
    r = np.random.default_rng(len(name))
    seed, rows = int(r.integers(1000)), [int(r.integers(1, 5)) for _ in range(3)]
    want = _draws(lambda x: op(tj, x), seed, rows)
    for kw in ({}, {"dynamic": True}, {"fullgraph": True}):
        got = _draws(tj.compile(lambda x: op(tj, x), **kw), seed, rows)
        for n, g, w in zip(rows, got, want):
            # (a compiled kernel may round a transform of the same draws differently)
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, err_msg=f"{name} {kw} rows={n}")
    for n, w in zip(rows, want):
        t = op(torch, torch.tensor(np.linspace(-1, 1, n * 4, dtype="float32").reshape(n, 4)))
        assert tuple(w.shape) == tuple(t.shape) and str(w.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    rows = [tj.compile(lambda x: op(tj, x))(tj.arange(12.0).reshape(3, 4) / 12).numpy() for _ in range(3)]
    assert not np.array_equal(rows[0], rows[1]) or not np.array_equal(rows[1], rows[2])


def test_a_compiled_randperm_draws_a_new_permutation_each_call():
    f = tj.compile(lambda n: tj.randperm(n))
    tj.manual_seed(0)
    draws = [f(10).tolist() for _ in range(4)]
    assert all(sorted(d) == list(range(10)) for d in draws)
    assert len({tuple(d) for d in draws}) == 4
    tj.manual_seed(0)
    assert [tj.randperm(10).tolist() for _ in range(4)] == draws
