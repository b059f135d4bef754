"""Donated operands (ops/donation.py): ``x.index_add_``, ``x[i] = v`` and a gather's
gradient write their target's memory instead of a copy of it, with PyTorch's values,
versions and gradients."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import tracejit as tj

torch = pytest.importorskip("torch")

_MB = 1 << 20


def _peak(fn) -> int:
    """The most bytes `fn` held at once beyond what it started with."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_index_add_in_place_writes_the_target_and_matches_torch():
    rng = np.random.default_rng(0)
    base = rng.standard_normal((1024, 512)).astype(np.float32)   # 2 MB
    rows = rng.integers(0, 1024, 64)
    src = rng.standard_normal((64, 512)).astype(np.float32)
    x, xt = tj.tensor(base), torch.tensor(base)
    data, version = x._data, x._version
    x.index_add_(0, tj.tensor(rows), tj.tensor(src))           # (first call: plans made)
    xt.index_add_(0, torch.tensor(rows), torch.tensor(src))
    peak = _peak(lambda: x.index_add_(0, tj.tensor(rows), tj.tensor(src), alpha=2))
    xt.index_add_(0, torch.tensor(rows), torch.tensor(src), alpha=2)
    assert x._data is data and x._version == version + 2
    np.testing.assert_allclose(x.numpy(), xt.numpy(), rtol=1e-6, atol=1e-6)
    assert peak < _MB   # (a copy of the target: 2 MB)


def test_index_add_in_place_gradients_match_torch():
    rng = np.random.default_rng(1)
    src = rng.standard_normal((6, 3)).astype(np.float32)
    rows = [0, 2, 2, 5, 1, 2]
    s, st = tj.tensor(src, requires_grad=True), torch.tensor(src, requires_grad=True)
    out, outt = tj.zeros(7, 3), torch.zeros(7, 3)
    out.index_add_(0, tj.tensor(rows), s * 2)
    outt.index_add_(0, torch.tensor(rows), st * 2)
    w = rng.standard_normal((7, 3)).astype(np.float32)
    (out * tj.tensor(w)).sum().backward()
    (outt * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), outt.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(s.grad.numpy(), st.grad.numpy(), rtol=1e-6)


def test_a_source_sharing_the_target_and_a_leaf_are_as_in_torch():
    z, zt = tj.ones(4, 3), torch.ones(4, 3)
    for t, i in ((z, tj.tensor([0, 1, 2, 3])), (zt, torch.tensor([0, 1, 2, 3]))):
        with pytest.raises(RuntimeError, match="single memory location"):
            t.index_add_(0, i, t)   # the source would be read while the target is written
    np.testing.assert_array_equal(z.numpy(), zt.numpy())   # unchanged: ones
    z.index_add_(0, tj.tensor([0, 1, 2, 3]), z.clone())
    zt.index_add_(0, torch.tensor([0, 1, 2, 3]), zt.clone())
    np.testing.assert_array_equal(z.numpy(), zt.numpy())
    w = tj.zeros(5, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        w.index_add_(0, tj.tensor([1]), tj.ones(1, 2))
    wt = torch.zeros(5, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        wt.index_add_(0, torch.tensor([1]), torch.ones(1, 2))
    assert not w.detach().numpy().any()   # unchanged


def test_a_version_bump_still_stops_a_backward_that_saved_the_target():
    x = tj.ones(4, 2, requires_grad=True)
    y = x * 1.0
    z = y * y                     # saves y
    y.index_add_(0, tj.tensor([1]), tj.ones(1, 2))
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        z.sum().backward()


def test_the_gradient_of_a_gather_adds_into_its_zeros():
    rng = np.random.default_rng(2)
    table = rng.standard_normal((4096, 256)).astype(np.float32)   # 4 MB
    rows = rng.integers(0, 4096, 128)
    w, wt = tj.tensor(table, requires_grad=True), torch.tensor(table, requires_grad=True)
    loss = (w[tj.tensor(rows)] ** 2).sum()
    peak = _peak(loss.backward)
    (wt[torch.tensor(rows)] ** 2).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert peak < 6 * _MB   # the gradient itself (4 MB), not a copy of its zeros too


def test_a_compiled_index_add_writes_the_zeros_it_made():
    rng = np.random.default_rng(3)
    rows = tj.tensor(rng.integers(0, 4096, 128))
    src = tj.tensor(rng.standard_normal((128, 256)).astype(np.float32))

    def f(rows, src):
        out = tj.zeros(4096, 256)
        out.index_add_(0, rows, src)
        return out

    cf = tj.trace(f, compiler="numba", compile="sync")
    cf(rows, src)
    peak = _peak(lambda: cf(rows, src))
    expect = np.zeros((4096, 256), np.float32)
    np.add.at(expect, rows.numpy(), src.numpy())
    np.testing.assert_array_equal(cf(rows, src).numpy(), expect)
    assert peak < 6 * _MB   # one 4 MB result, not a second for the copy


def test_setitem_writes_the_target_once_and_matches_torch():
    rng = np.random.default_rng(2)
    base = rng.standard_normal((1024, 512)).astype(np.float32)   # 2 MB
    rows = rng.permutation(1024)[:64]
    src = rng.standard_normal((64, 512)).astype(np.float32)
    x, xt = tj.tensor(base), torch.tensor(base)
    data, version = x._data, x._version
    x[tj.tensor(rows)] = tj.tensor(src)                         # (first call: plans made)
    xt[torch.tensor(rows)] = torch.tensor(src)
    peak = _peak(lambda: x.index_put_((tj.tensor(rows[:8]),), tj.tensor(src[:8]) * 2, accumulate=True))
    xt.index_put_((torch.tensor(rows[:8]),), torch.tensor(src[:8]) * 2, accumulate=True)
    assert peak < _MB   # (a copy of the target: 2 MB)
    peak = _peak(lambda: x.__setitem__((slice(3, 9), 0), 7.0))
    xt[3:9, 0] = 7.0
    assert peak < _MB
    assert x._data is data and x._version == version + 3
    np.testing.assert_array_equal(x.numpy(), xt.numpy())


def test_setitem_reading_its_target_or_refused_is_as_in_torch():
    y, yt = tj.arange(6.0), torch.arange(6.0)
    y[tj.tensor([1, 2])] = y[tj.tensor([3, 4])]
    yt[torch.tensor([1, 2])] = yt[torch.tensor([3, 4])]
    with pytest.raises(RuntimeError, match="single memory location"):
        y[1:4] = y[2:5]   # a value partly overlapping its target is refused, as in torch
    with pytest.raises(RuntimeError, match="single memory location"):
        yt[1:4] = yt[2:5]
    y[1:4] = y[2:5].clone()
    yt[1:4] = yt[2:5].clone()
    np.testing.assert_array_equal(y.numpy(), yt.numpy())
    w = tj.zeros(4)
    with pytest.raises(IndexError):
        w[tj.tensor([1, 9])] = 1.0
    with pytest.raises(tj.errors.ShapeError, match="index_put"):
        w[tj.tensor([1, 2])] = tj.ones(3)
    assert not w.numpy().any()   # unchanged
    a = tj.ones(4, requires_grad=True)
    h = a.exp()                   # saves its output
    h[1] = 0.0
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        h.sum().backward()
    v, vt = tj.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    q, qt = tj.zeros(4), torch.zeros(4)
    q[tj.tensor([0, 3])] = v * 5
    qt[torch.tensor([0, 3])] = vt * 5
    (q * tj.arange(4.0)).sum().backward()
    (qt * torch.arange(4.0)).sum().backward()
    np.testing.assert_array_equal(v.grad.numpy(), vt.grad.numpy())
