"""nn.utils.rnn: packing and padding as PyTorch documents them, and RNN/LSTM/GRU over a
PackedSequence: outputs, final states (caller's batch order) and every gradient equal
PyTorch's for the same weights, in one and two directions, two layers, sorted or not."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.nn.utils import rnn as R

torch = pytest.importorskip("torch", reason="compares with PyTorch")
TR = torch.nn.utils.rnn


def test_pack_and_pad_by_the_documented_layout():
    # Three sequences of lengths 3, 2, 1: the packed rows go time step by time step.
    x = tj.tensor([[1.0, 4.0, 6.0], [2.0, 5.0, 0.0], [3.0, 0.0, 0.0]])       # (T=3, B=3)
    p = R.pack_padded_sequence(x, [3, 2, 1])
    assert p.data.tolist() == [1.0, 4.0, 6.0, 2.0, 5.0, 3.0]
    assert p.batch_sizes.tolist() == [3, 2, 1] and p.sorted_indices is None
    padded, lengths = R.pad_packed_sequence(p, batch_first=True, padding_value=-1.0)
    assert padded.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, -1.0], [6.0, -1.0, -1.0]]
    assert lengths.tolist() == [3, 2, 1]


def test_unsorted_lengths_need_enforce_sorted_false():
    x = tj.randn(4, 2, 3)
    with pytest.raises(RuntimeError, match="enforce_sorted"):
        R.pack_padded_sequence(x, [2, 4])
    p = R.pack_padded_sequence(x, [2, 4], enforce_sorted=False)
    assert p.sorted_indices.tolist() == [1, 0] and p.unsorted_indices.tolist() == [1, 0]
    back, lengths = R.pad_packed_sequence(p, total_length=5)
    assert tuple(back.shape) == (5, 2, 3) and lengths.tolist() == [2, 4]
    np.testing.assert_array_equal(back[:4, 1].numpy(), x[:, 1].numpy())
    np.testing.assert_array_equal(back[2:, 0].numpy(), np.zeros((3, 3), np.float32))


def test_pad_sequence_and_pack_sequence_match_torch():
    r = np.random.default_rng(0)
    seqs = [r.standard_normal((n, 2)) for n in (3, 5, 1)]
    for side in ("right", "left"):
        a = TR.pad_sequence([torch.tensor(s) for s in seqs], True, -1.0, side)
        b = R.pad_sequence([tj.tensor(s) for s in seqs], True, -1.0, side)
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    pt = TR.pack_sequence([torch.tensor(s) for s in seqs], enforce_sorted=False)
    pj = R.pack_sequence([tj.tensor(s) for s in seqs], enforce_sorted=False)
    np.testing.assert_array_equal(pt.data.numpy(), pj.data.numpy())
    assert [tuple(u.shape) for u in R.unpack_sequence(pj)] == [(3, 2), (5, 2), (1, 2)]


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("lengths", [[6, 2, 4, 2], [6, 4, 2, 2]])
def test_recurrent_layers_take_packed_sequences(kind, bidirectional, lengths):
    r = np.random.default_rng(1)
    x = r.standard_normal((6, 4, 3))
    torch.manual_seed(0)
    t = getattr(torch.nn, kind)(3, 5, num_layers=2, bidirectional=bidirectional).double()
    m = getattr(tj.nn, kind)(3, 5, num_layers=2, bidirectional=bidirectional, dtype="float64")
    m.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    dirs = 2 if bidirectional else 1
    h0 = r.standard_normal((2 * dirs, 4, 5))
    states_t = (torch.tensor(h0), torch.tensor(h0 * 0.5)) if kind == "LSTM" else torch.tensor(h0)
    states_j = (tj.tensor(h0), tj.tensor(h0 * 0.5)) if kind == "LSTM" else tj.tensor(h0)
    xt, xj = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    ot, ht = t(TR.pack_padded_sequence(xt, lengths, enforce_sorted=False), states_t)
    oj, hj = m(R.pack_padded_sequence(xj, lengths, enforce_sorted=False), states_j)
    yt, _ = TR.pad_packed_sequence(ot)
    yj, _ = R.pad_packed_sequence(oj)
    hts, hjs = (ht, hj) if kind == "LSTM" else ((ht,), (hj,))
    np.testing.assert_allclose(yj.detach().numpy(), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    for a, b in zip(hjs, hts):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)
    (yt.pow(2).sum() + sum(h.sum() for h in hts)).backward()
    (yj.pow(2).sum() + sum(h.sum() for h in hjs)).backward()
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-11)
    for p, q in zip(m.parameters(), t.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-9, atol=1e-11)


def test_packed_batch_first_layer():
    r = np.random.default_rng(2)
    torch.manual_seed(1)
    t = torch.nn.GRU(3, 4, batch_first=True).double()
    m = tj.nn.GRU(3, 4, batch_first=True, dtype="float64")
    m.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    xb = r.standard_normal((3, 5, 3))
    ot, ht = t(TR.pack_padded_sequence(torch.tensor(xb), [5, 3, 2], batch_first=True))
    oj, hj = m(R.pack_padded_sequence(tj.tensor(xb), [5, 3, 2], batch_first=True))
    np.testing.assert_allclose(oj.data.detach().numpy(), ot.data.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(hj.detach().numpy(), ht.detach().numpy(), rtol=1e-10)
    assert oj.sorted_indices is None and oj.batch_sizes.tolist() == ot.batch_sizes.tolist()
