"""index_add's rows with repeats (ops/indexing.py `_add_rows`, and the CPU's row loop): an embedding's backward, bitwise
np.add.at, as one flat np.add.at (TRACEJIT_EAGER_KERNELS=0) and with the numba loop of
compiler/cpu/kernels/scatter_forms.py (tests/compiler/cpu/kernels/test_scatter_forms.py checks it further)."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.ops.indexing import _add_rows


@pytest.mark.parametrize("shape,n,negative", [((2048,), 64, False), ((32, 64), 64, True),
                                              ((33,), 40, False), ((8, 5), 40, True)])
@pytest.mark.parametrize("base", ["zeros", "values"])
@pytest.mark.parametrize("kernels", [False, True], ids=["rounds", "kernel"])
def test_rounds_give_np_add_at_bitwise(monkeypatch, shape, n, negative, base, kernels):
    _kernels(monkeypatch, kernels)
    rng = np.random.default_rng(n)
    idx = rng.integers(0, n, shape)
    if negative:
        idx = np.where(rng.random(shape) < 0.5, idx - n, idx)
    v = rng.standard_normal(shape + (7,)).astype(np.float32)
    a = np.zeros((n, 7), np.float32) if base == "zeros" else rng.standard_normal((n, 7)).astype(np.float32)
    want = a.copy()
    np.add.at(want, (idx,), v)
    assert np.array_equal(_added(a, idx, v, kernels), want)


def _added(a, idx, v, kernel: bool):
    """``a[idx] += v`` by the numpy form's flat add (in place), or by the CPU's row loop (its
    registered implementation of index_add: a new array)."""
    if kernel:
        from tracejit.compiler.cpu.kernels import scatter_forms
        got = scatter_forms.index_add(a, v, idx, spec=(("t", 0),))
        assert got is not None     # the loop ran
        return got
    assert _add_rows(a, (idx,), v)
    return a


def _kernels(monkeypatch, on: bool):
    if on:
        pytest.importorskip("numba", reason="the kernel is numba code")
        monkeypatch.setenv("TRACEJIT_COMPILE", "sync")      # load it at the first call
        monkeypatch.delenv("TRACEJIT_EAGER_KERNELS", raising=False)
    else:
        monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "0")


def test_other_indices_are_left_to_np_add_at(monkeypatch):
    _kernels(monkeypatch, False)
    a = np.zeros((4, 3), np.float32)
    v = np.ones((40, 3), np.float32)
    assert not _add_rows(a, (np.arange(40) % 5,), v)                        # row 4 out of range
    assert not _add_rows(a, (np.arange(40) % 4,), np.ones(3, np.float32))  # broadcast update
    assert not _add_rows(a, (np.arange(40) % 4 > 1,), v)                    # a mask
    assert not _add_rows(a.T, (np.arange(40) % 3,), v[:, :4])               # rows not contiguous
    assert not a.any()


@pytest.mark.parametrize("ishape", [(40,), (8, 5)])
def test_index_arrays_on_leading_dims_add_as_one_flat_index(monkeypatch, ishape):
    # ``x.index_put_((i, j), v, accumulate=True)``: negative and repeated positions, a row
    # each, in np.add.at's order
    _kernels(monkeypatch, False)
    rng = np.random.default_rng(len(ishape))
    a = rng.standard_normal((4, 3, 5)).astype(np.float32)
    i, j = rng.integers(-4, 4, ishape), rng.integers(-3, 3, ishape[-1:])   # (broadcast together)
    v = rng.standard_normal(ishape + (5,)).astype(np.float32)
    want = a.copy()
    np.add.at(want, (i, j), v)
    assert _add_rows(a, (i, j), v)
    assert np.array_equal(a, want)


def test_the_kernel_also_takes_one_row_repeated(monkeypatch):
    _kernels(monkeypatch, True)
    a = np.zeros((4, 3), np.float32)
    v = np.random.default_rng(3).standard_normal((40, 3)).astype(np.float32)
    idx = np.zeros(40, np.int64)
    want = a.copy()
    np.add.at(want, (idx,), v)
    assert np.array_equal(_added(a, idx, v, True), want)


def test_embedding_gradient_equals_a_one_hot_product():
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 50, (16, 12))
    emb = tj.nn.Embedding(50, 8)
    g = rng.standard_normal((16, 12, 8)).astype(np.float32)
    (emb(tj.tensor(ids)) * tj.tensor(g)).sum().backward()
    onehot = np.eye(50, dtype=np.float64)[ids.reshape(-1)]
    np.testing.assert_allclose(emb.weight.grad.numpy(), onehot.T @ g.reshape(-1, 8).astype(np.float64),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernels", [False, True], ids=["rounds", "kernel"])
def test_trailing_whole_slices_add_the_same_rows(monkeypatch, kernels):
    """``x[idx, :]`` (a point cloud's neighbour gather) adds whole rows as ``x[idx]`` does:
    its backward takes the row adds too, not np.add.at's per-element loop."""
    _kernels(monkeypatch, kernels)
    rng = np.random.default_rng(5)
    idx = rng.integers(0, 48, (64, 4))
    v = rng.standard_normal((64, 4, 6)).astype(np.float32)
    a = rng.standard_normal((48, 6)).astype(np.float32)
    want = a.copy()
    np.add.at(want, (idx, slice(None)), v)
    if kernels:
        from tracejit.compiler.cpu.kernels import scatter_forms
        got = scatter_forms.index_add(a, v, idx, spec=(("t", 0), ("s", None, None, None)))
        assert got is not None     # the loop ran
    else:
        got = a
        assert _add_rows(a, (idx, slice(None)), v)
    assert np.array_equal(got, want)


def test_row_gather_with_a_trailing_slice_matches_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    x = rng.standard_normal((30, 5)).astype(np.float32)
    idx = rng.integers(0, 30, 200)
    g = rng.standard_normal((200, 5)).astype(np.float32)
    grads = []
    for lib in (torch, tj):
        t = lib.tensor(x, requires_grad=True)
        t[lib.tensor(idx), :].backward(lib.tensor(g))
        grads.append(t.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [32, 4096], ids=["few", "many"])
def test_two_array_index_gradient_accumulates_repeats_as_pytorch(n):
    # w[rows, cols]'s backward (a CRF's transition scores): a few elements go to np.add.at
    # directly, many through the distinct-position check first; both sum every repeat
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(n)
    w0 = rng.standard_normal((9, 9)).astype(np.float32)
    rows, cols = rng.integers(0, 9, n), rng.integers(-9, 9, n)
    g = rng.standard_normal(n).astype(np.float32)
    w = tj.tensor(w0, requires_grad=True)
    (w[tj.tensor(rows), tj.tensor(cols)] * tj.tensor(g)).sum().backward()
    tw = torch.tensor(w0, requires_grad=True)
    (tw[torch.tensor(rows), torch.tensor(cols)] * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-5)
    assert w.grad.numpy()[rows[0], cols[0]] != 0.0
