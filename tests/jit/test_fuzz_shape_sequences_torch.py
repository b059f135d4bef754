"""Differential fuzzing of one ``tj.compile``d program called with a sequence of shapes
against PyTorch: seeded random programs over (B, D), (D,) and (D, D) inputs built from
elementwise ops, reductions, views, matmuls, in-place writes, indexing and Python branches
on the sizes (``x.shape[0] > 2``, ``n == m``), called with shapes that repeat, change one
dim or both, so that entries turn symbolic and their guards decide which entry serves a
call. Every call's results and gradients equal eager PyTorch's."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _pick(r, options):
    return options[int(r.integers(len(options)))]


# each op: (kinds it takes, fn(lib, x, w) -> a value of the same kind); kinds: "BD", "DD"
OPS = {
    "tanh": lambda lib, x, w: x.tanh(), "scale": lambda lib, x, w: x * 2.5 - 1,
    "relu": lambda lib, x, w: lib.relu(x), "sq": lambda lib, x, w: x * x,
    "mm": lambda lib, x, w: x @ w, "softmax": lambda lib, x, w: x.softmax(1),
    "lse": lambda lib, x, w: x - x.logsumexp(1, keepdim=True), "var": lambda lib, x, w: x * x.var(0, correction=0),
    "flip": lambda lib, x, w: x.flip(0) + x.roll(1, 1), "gram": lambda lib, x, w: x @ (x.t() @ x) * 0.1,
    "halves": lambda lib, x, w: lib.cat([x[: x.shape[0] // 2] * 2, x[x.shape[0] // 2:]], 0),
    "big": lambda lib, x, w: x * 2 if x.shape[0] > 2 else x - 1,
    "square": lambda lib, x, w: x + lib.diag_embed(x.diagonal()) if x.shape[0] == x.shape[1] else x * 0.5,
    "not_square": lambda lib, x, w: x * 3 if x.shape[0] != x.shape[1] else x.t(),
    "arange": lambda lib, x, w: x[:, lib.arange(x.shape[1]).flip(0)] + x[lib.arange(x.shape[0]) % x.shape[0]],
    "setrow": lambda lib, x, w: _setrow(x), "mask": lambda lib, x, w: x.masked_fill(x > 0.3, 0.25),
    "sort": lambda lib, x, w: x.sort(1).values, "cumsum": lambda lib, x, w: x.cumsum(0) * 0.5,
    "view": lambda lib, x, w: x.reshape(-1).reshape(x.shape[0], -1), "norm": lambda lib, x, w: x / (x.norm(dim=1, keepdim=True) + 1),
    "where": lambda lib, x, w: lib.where(x > 0, x, x * 0.1), "mean_row": lambda lib, x, w: x - x.mean(0),
}


def _setrow(x):
    y = x.clone()
    y[0] = y[-1] + 1
    y[:, 1:] *= 0.5
    return y


def _program(r):
    ops = [_pick(r, sorted(OPS)) for _ in range(int(r.integers(2, 6)))]

    def fn(lib, a, w):
        x, outs = a, []
        for op in ops:
            x = OPS[op](lib, x, w)
            outs.append(x)
        return outs[-2:]
    return fn, ops


def _shapes(r):
    seq = [(int(r.integers(1, 5)), int(r.integers(2, 5)))]
    for _ in range(4):
        b, d = seq[-1]
        seq.append(_pick(r, [(b, d), (int(r.integers(1, 7)), d), (b, int(r.integers(2, 6))),
                             (int(r.integers(1, 7)), int(r.integers(2, 6))), (d, d)]))
    return seq


def _run(lib, f, arrays):
    xs = [lib.tensor(a, requires_grad=True) for a in arrays]
    out = f(*xs)
    sum((o * (lib.arange(o.numel(), dtype=o.dtype).reshape(tuple(o.shape)) % 3 - 1)).sum() for o in out).backward()
    return list(out) + [x.grad for x in xs]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("block", range(3))
def test_random_programs_over_shape_sequences_match_torch(block):
    for seed in range(block * 10, block * 10 + 10):
        r = np.random.default_rng(seed)
        fn, ops = _program(r)
        compiled = tj.compile(lambda a, w: fn(tj, a, w))
        for call, (b, d) in enumerate(_shapes(r)):
            arrays = [r.standard_normal((b, d)), r.standard_normal((d, d)) * 0.5]
            want = _run(torch, lambda *a: fn(torch, *a), arrays)
            got = _run(tj, compiled, arrays)
            for k, (g, t) in enumerate(zip(got, want)):
                assert (g is None) == (t is None), (seed, ops, call, k)
                if t is None:
                    continue
                assert tuple(g.shape) == tuple(t.shape), (seed, ops, call, k)
                np.testing.assert_allclose(g.detach().numpy(), t.detach().numpy(), rtol=1e-9, atol=1e-9,
                                           err_msg=f"seed {seed} {ops} call {call} shape {(b, d)} result {k}")


@pytest.mark.parametrize("op", ["==", "!="])
def test_branch_on_two_sizes_being_equal_is_guarded(op):
    # (the sizes turn symbolic after the second shape; an entry captured with n != m
    # served a square input and took the other branch)
    def f(x):
        n, m = x.shape
        return x * 2 if (n == m if op == "==" else n != m) else x - 1
    c = tj.compile(f)
    for s in [(2, 2), (4, 5), (3, 5), (3, 3), (6, 3), (4, 4), (2, 5)]:
        x = np.ones(s)
        np.testing.assert_array_equal(c(tj.tensor(x)).numpy(), f(torch.tensor(x)).numpy())


def test_single_row_step_reading_a_column_sum_compiles():
    # (with one row, x - x.mean(0) reads the column sum itself, not its quotient by n: it
    # joined the rows group that computes the sum, whose kernel failed to render)
    def f(lib, a):
        x = a - a.logsumexp(1, keepdim=True)
        return x, x * x.var(0, correction=0)
    for shape in [(1, 3), (2, 3)]:
        a = np.arange(float(np.prod(shape))).reshape(shape)
        want = _run(torch, lambda x: f(torch, x), [a])
        got = _run(tj, tj.compile(lambda x: f(tj, x)), [a])
        for g, t in zip(got, want):
            np.testing.assert_allclose(g.detach().numpy(), t.detach().numpy(), rtol=1e-9, atol=1e-12)
