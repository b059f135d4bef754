"""embedding_bag (ops/embedding_bag.py) at its edges and its argument checks: no bags at all
(PyTorch gives a (0, D) result there, and crashes on its backward, so the expected values are
written out); what PyTorch refuses (offsets not starting at 0, float indices) is refused with a
message naming the argument; int32 indices and offsets work as PyTorch's do."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import DTypeError


@pytest.mark.parametrize("offsets,last", [([0], True), ([], False)])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_of_no_bags_is_empty(offsets, last, mode):
    """Offsets that make no bag give a (0, D) result connected to the weight; the indices are
    not read (they made an index-add into zero bags raise)."""
    wt = tj.tensor(np.arange(10.0).reshape(5, 2), requires_grad=True)
    y = tj.nn.functional.embedding_bag(tj.tensor([4, 3, 2, 1]), wt, tj.tensor(offsets, dtype=tj.int64),
                                       mode=mode, include_last_offset=last)
    assert tuple(y.shape) == (0, 2) and y.requires_grad
    y.sum().backward()
    np.testing.assert_array_equal(wt.grad.numpy(), np.zeros((5, 2)))


def test_embedding_bag_last_offset_without_offsets_says_so():
    with pytest.raises(ValueError, match="at least one offset"):
        tj.nn.functional.embedding_bag(tj.tensor([1, 2]), tj.ones(3, 2), tj.tensor([], dtype=tj.int64),
                                       include_last_offset=True)


W = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)


def _bag():
    m = tj.nn.EmbeddingBag(10, 4, mode="sum")
    m.load_state_dict({"weight": tj.tensor(W)})
    return m


def test_int32_indices_and_offsets_sum_bags():
    got = _bag()(tj.tensor([1, 2, 3, 4], dtype=tj.int32), tj.tensor([0, 2], dtype=tj.int32))
    np.testing.assert_allclose(got.detach().numpy(), [W[1] + W[2], W[3] + W[4]], rtol=1e-6)


@pytest.mark.parametrize("ids,offsets,error,match", [
    ([1, 2, 3, 4], [1, 2], ValueError, "offsets\\[0\\] must be 0 .* got 1"),
    ([1.0, 2.0], [0], DTypeError, "input must be an integer tensor of indices, got float32"),
    ([1, 2], [0.0], DTypeError, "offsets must be an integer tensor, got float32"),
])
def test_bad_indices_and_offsets_are_refused(ids, offsets, error, match):
    with pytest.raises(error, match=match):
        _bag()(tj.tensor(ids), tj.tensor(offsets))


def _both(mode, ids, offsets, w, **kw):
    """(tracejit's, PyTorch's) bag values and weight gradients for the same call."""
    import torch
    out = []
    for lib in (tj, torch):
        wt = lib.tensor(w, requires_grad=True)
        y = lib.nn.functional.embedding_bag(lib.tensor(ids), wt, lib.tensor(offsets), mode=mode, **kw)
        (y * lib.tensor(np.arange(1, y.numel() + 1, dtype=np.float32).reshape(tuple(y.shape)))).sum().backward()
        out.append((y.detach().numpy(), wt.grad.numpy()))
    return out


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_bag_of_padding_rows_only_is_zero_like_pytorch(mode):
    pytest.importorskip("torch")
    (y, gw), (ty, tgw) = _both(mode, [2, 2, 1, 2, 3], [0, 2, 2], W, padding_idx=2)
    np.testing.assert_allclose(y, ty, rtol=1e-6)
    np.testing.assert_array_equal(y[0], 0.0)
    np.testing.assert_allclose(gw, tgw, rtol=1e-6)


def test_max_gradient_goes_to_the_first_maximum_like_pytorch():
    """Two equal rows in a bag: PyTorch's arg-max is the first, and only it gets gradient."""
    pytest.importorskip("torch")
    w = np.array([[1.0, 5.0], [3.0, 2.0], [3.0, 5.0]], np.float32)
    (y, gw), (ty, tgw) = _both("max", [0, 1, 2], [0], w)
    np.testing.assert_array_equal(y, ty)
    np.testing.assert_array_equal(gw, tgw)
    np.testing.assert_array_equal(gw, [[0.0, 2.0], [1.0, 0.0], [0.0, 0.0]])


def test_decreasing_offsets_are_refused():
    with pytest.raises(ValueError, match="non-decreasing"):
        _bag()(tj.tensor([1, 2, 3, 4]), tj.tensor([0, 3, 1]))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_a_last_offset_past_the_indices_is_refused_as_pytorch(mode):
    torch = pytest.importorskip("torch")
    for lib in (torch, tj):
        with pytest.raises(RuntimeError, match="offsets"):
            lib.nn.functional.embedding_bag(lib.tensor([1, 2, 3]), lib.tensor(W), lib.tensor([0, 1, 4]),
                                            mode=mode, include_last_offset=True)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_a_last_offset_before_the_end_ends_the_last_sum_as_pytorch(weighted, compiled):
    """CSR bags (``include_last_offset``) whose last offset stops short of the indices: a
    sum's last bag ends there, as PyTorch's (DLRM's weighted sums); the rest get no gradient."""
    torch = pytest.importorskip("torch")
    w = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    ids, offsets = [1, 2, 4, 5, 4, 3, 2, 0], [0, 2, 2, 5]
    res = []
    for L in (torch, tj):
        wt = L.tensor(w, requires_grad=True)
        psw = (L.arange(8.0) / 8).requires_grad_()

        def f(wt, psw):
            return L.nn.functional.embedding_bag(L.tensor(ids), wt, L.tensor(offsets), mode="sum",
                                                 include_last_offset=True,
                                                 per_sample_weights=psw if weighted else None)
        y = (tj.compile(f) if compiled and L is tj else f)(wt, psw)
        (y * y).sum().backward()
        res.append([y.detach().numpy(), wt.grad.numpy()] + ([psw.grad.numpy()] if weighted else []))
    # PyTorch's gradients here read uninitialized memory now and then where no bag reaches
    # (1e17 in the weight's rows, small values in the weights past the end): the gradients
    # are checked against the sums written out, and against PyTorch only inside the bags
    y, gw = res[1][0], res[1][1]
    psw = np.arange(8.0) / 8 if weighted else np.ones(8)
    want, want_psw = np.zeros_like(w), np.zeros(8, np.float32)
    for b in range(len(offsets) - 1):
        for p in range(offsets[b], offsets[b + 1]):
            want[ids[p]] += 2 * y[b] * psw[p]
            want_psw[p] = 2 * y[b] @ w[ids[p]]
    np.testing.assert_allclose(gw, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=1e-5, atol=1e-6)
    if weighted:
        np.testing.assert_allclose(res[1][2], want_psw, rtol=1e-5, atol=1e-5)
        end = offsets[-1]
        np.testing.assert_allclose(res[1][2][:end], res[0][2][:end], rtol=1e-5, atol=1e-6)
    assert not gw[0].any() and not gw[3].any()   # (indices 3 and 0 come after the end)


def test_the_old_argument_order_is_swapped_with_a_warning_as_pytorch():
    torch = pytest.importorskip("torch")
    w = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    res = []
    for L in (torch, tj):
        with pytest.warns(UserWarning, match="Argument order of nn.functional.embedding_bag was changed") as rec:
            y = L.nn.functional.embedding_bag(L.tensor(w), L.tensor([1, 2, 4, 5]), L.tensor([0, 2]))
        assert rec[0].filename == __file__
        res.append(y.numpy())
    np.testing.assert_allclose(res[1], res[0], rtol=1e-6)


def test_max_bags_refuse_frequency_scaling_as_pytorch():
    torch = pytest.importorskip("torch")
    for L in (torch, tj):
        with pytest.raises(ValueError, match="max mode does not support scaling the gradient by the frequency"):
            L.nn.functional.embedding_bag(L.tensor([1, 2]), L.ones(3, 2), L.tensor([0]), mode="max",
                                          scale_grad_by_freq=True)
