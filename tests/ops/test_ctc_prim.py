"""CTC loss (ops/ctc_prim.py) against PyTorch's ``F.ctc_loss``: values and gradients with
respect to the logits behind a log_softmax, every reduction, padded and concatenated
targets, repeated labels, empty targets, sequences of different lengths, impossible
alignments with and without ``zero_infinity``, long sequences (no underflow)."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _both(x, targets, in_len, tg_len, **kw):
    out = []
    for lib in (torch, tj):
        xs = lib.tensor(x, requires_grad=True)
        lp = lib.nn.functional.log_softmax(xs, -1)
        loss = lib.nn.functional.ctc_loss(lp, lib.tensor(targets), lib.tensor(in_len), lib.tensor(tg_len), **kw)
        (loss * lib.tensor(np.linspace(0.5, 1.5, loss.numel()).reshape(tuple(loss.shape)), dtype=loss.dtype)
         ).sum().backward()
        out.append((loss.detach().numpy(), xs.grad.numpy()))
    return out


def _case(r, t, n, c, lengths, in_len, dtype=np.float32):
    x = r.standard_normal((t, n, c)).astype(dtype)
    targets = np.stack([np.pad(r.integers(1, c, k), (0, max(lengths) - k)) for k in lengths])
    return x, targets, np.array(in_len), np.array(lengths)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_matches_torch_for_every_reduction(reduction):
    r = np.random.default_rng(0)
    x, tg, il, tl = _case(r, 30, 5, 7, [4, 9, 1, 6, 3], [30, 24, 8, 29, 12])
    (lt, gt), (lj, gj) = _both(x, tg, il, tl, reduction=reduction)
    np.testing.assert_allclose(lj, lt, rtol=1e-5)
    np.testing.assert_allclose(gj, gt, rtol=1e-4, atol=1e-6)


def test_repeated_labels_need_a_blank_between_them():
    # "a a" needs 3 steps (a, blank, a): with 3 steps there is exactly one path
    x = np.zeros((3, 1, 3), np.float32)
    (lt, gt), (lj, gj) = _both(x, np.array([[1, 1]]), np.array([3]), np.array([2]), reduction="none")
    np.testing.assert_allclose(lj, [3 * np.log(3)], rtol=1e-6)
    np.testing.assert_allclose(lj, lt, rtol=1e-6)
    np.testing.assert_allclose(gj, gt, atol=1e-6)


def test_concatenated_targets_and_empty_targets():
    r = np.random.default_rng(1)
    x = r.standard_normal((12, 3, 5)).astype(np.float32)
    flat = np.array([1, 2, 2, 4, 3], np.int64)         # lengths 3, 0, 2
    (lt, gt), (lj, gj) = _both(x, flat, np.array([12, 10, 7]), np.array([3, 0, 2]), reduction="none")
    np.testing.assert_allclose(lj, lt, rtol=1e-5)
    np.testing.assert_allclose(gj, gt, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_impossible_alignment(zero_infinity):
    # four labels cannot be emitted in three steps: an infinite loss, a nan gradient for
    # that sequence, or 0 for both with zero_infinity; the other sequence is unaffected
    r = np.random.default_rng(2)
    x = r.standard_normal((6, 2, 5)).astype(np.float32)
    tg, il, tl = np.array([[1, 2, 3, 4], [1, 2, 0, 0]]), np.array([3, 6]), np.array([4, 2])
    (lt, gt), (lj, gj) = _both(x, tg, il, tl, reduction="none", zero_infinity=zero_infinity)
    np.testing.assert_allclose(lj, lt, rtol=1e-5)
    np.testing.assert_allclose(gj[:, 1], gt[:, 1], rtol=1e-4, atol=1e-6)
    if zero_infinity:
        np.testing.assert_array_equal(gj[:, 0], 0.0)
    else:
        assert np.isinf(lj[0])
        np.testing.assert_array_equal(np.isnan(gj), np.isnan(gt))   # nan on its 3 steps only
        assert np.isnan(gj[:3, 0]).all() and (gj[3:, 0] == 0).all()


def test_long_sequences_do_not_underflow_and_float64():
    r = np.random.default_rng(3)
    x, tg, il, tl = _case(r, 400, 2, 30, [60, 150], [400, 390], dtype=np.float64)
    (lt, gt), (lj, gj) = _both(x, tg, il, tl, reduction="sum")
    assert np.isfinite(lj) and lj > 1000
    np.testing.assert_allclose(lj, lt, rtol=1e-10)
    np.testing.assert_allclose(gj, gt, rtol=1e-8, atol=1e-12)


def test_unbatched_and_blank_elsewhere():
    r = np.random.default_rng(4)
    x = r.standard_normal((9, 6)).astype(np.float32)
    out = []
    for lib in (torch, tj):
        xs = lib.tensor(x, requires_grad=True)
        loss = lib.nn.CTCLoss(blank=5)(xs.log_softmax(-1), lib.tensor([0, 3, 3, 1]), lib.tensor(9), lib.tensor(4))
        loss.backward()
        out.append((loss.item(), xs.grad.numpy()))
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=1e-5)
    np.testing.assert_allclose(out[1][1], out[0][1], rtol=1e-4, atol=1e-6)


def test_input_length_past_the_time_steps_is_refused():
    lp = tj.zeros(4, 1, 3).log_softmax(-1)
    with pytest.raises(Exception, match="input_lengths"):
        tj.nn.functional.ctc_loss(lp, tj.tensor([[1]]), [5], [1])


def test_compiled_in_one_graph_over_changing_lengths():
    """ESPnet-style models compute the CTC loss inside their compiled forward: targets and
    lengths are tensors the graph reads at each call, so new lengths reuse the capture."""
    r = np.random.default_rng(5)
    x, tg, _, _ = _case(r, 20, 3, 6, [3, 3, 2], [20, 15, 9])

    def f(lib, x, *args):
        return lib.nn.functional.ctc_loss(x.log_softmax(-1), *args)
    cf = tj.compile(lambda *a: f(tj, *a), fullgraph=True)
    for il, tl in (([20, 15, 9], [3, 2, 1]), ([18, 20, 4], [2, 3, 2])):
        got, want = tj.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        loss = cf(got, *(tj.tensor(a) for a in (tg, il, tl)))
        ref = f(torch, want, *(torch.tensor(a) for a in (tg, il, tl)))
        loss.backward()
        ref.backward()
        np.testing.assert_allclose(loss.item(), ref.item(), rtol=1e-5)
        np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert cf.cache_stats()["compiles"] == 1
