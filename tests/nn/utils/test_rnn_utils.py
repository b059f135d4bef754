"""nn.utils.rnn: packing and padding as PyTorch documents them, and RNN/LSTM/GRU over a
PackedSequence: outputs, final states (caller's batch order) and every gradient equal
PyTorch's for the same weights, in one and two directions, two layers, sorted or not."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.nn.utils import rnn as R
from layer_pairs import torch_pair

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
@pytest.mark.parametrize("lengths,enforce_sorted", [([6, 2, 4, 2], False), ([6, 4, 2, 2], False),
                                                    ([6, 4, 2, 1], True), ([3, 5, 1, 6], False)])
def test_recurrent_layers_take_packed_sequences(kind, bidirectional, lengths, enforce_sorted):
    r = np.random.default_rng(1)
    x = r.standard_normal((6, 4, 3))
    m, t = torch_pair(torch, kind, 0, (3, 5), num_layers=2, bidirectional=bidirectional)
    dirs = 2 if bidirectional else 1
    h0 = r.standard_normal((2 * dirs, 4, 5))
    states_t = (torch.tensor(h0), torch.tensor(h0 * 0.5)) if kind == "LSTM" else torch.tensor(h0)
    states_j = (tj.tensor(h0), tj.tensor(h0 * 0.5)) if kind == "LSTM" else tj.tensor(h0)
    xt, xj = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    ot, ht = t(TR.pack_padded_sequence(xt, lengths, enforce_sorted=enforce_sorted), states_t)
    oj, hj = m(R.pack_padded_sequence(xj, lengths, enforce_sorted=enforce_sorted), states_j)
    np.testing.assert_allclose(oj.data.detach().numpy(), ot.data.detach().numpy(), rtol=1e-10, atol=1e-12)
    assert oj.batch_sizes.tolist() == ot.batch_sizes.tolist()
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
    m, t = torch_pair(torch, "GRU", 1, batch_first=True)
    xb = r.standard_normal((3, 5, 3))
    ot, ht = t(TR.pack_padded_sequence(torch.tensor(xb), [5, 3, 2], batch_first=True))
    oj, hj = m(R.pack_padded_sequence(tj.tensor(xb), [5, 3, 2], batch_first=True))
    np.testing.assert_allclose(oj.data.detach().numpy(), ot.data.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(hj.detach().numpy(), ht.detach().numpy(), rtol=1e-10)
    assert oj.sorted_indices is None and oj.batch_sizes.tolist() == ot.batch_sizes.tolist()


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_packed_layer_runs_one_recurrence_per_layer_and_direction(kind, monkeypatch):
    # four distinct lengths, two layers, two directions: four layer loops forward and four
    # backward, each over the whole batch with its per-step sequence counts
    from tracejit.ops import gru_prim, lstm_prim, rnn_prim
    calls = []
    for mod in (lstm_prim, gru_prim, rnn_prim):
        for name in ("LSTM_LAYER", "LSTM_LAYER_BACKWARD", "GRU_LAYER", "GRU_LAYER_BACKWARD", "RNN_LAYER",
                     "RNN_LAYER_BACKWARD"):
            prim = getattr(mod, name, None)
            if prim is not None and not hasattr(prim, "_counted"):
                run = prim.run
                monkeypatch.setattr(prim, "run", lambda xp, *a, _run=run, _n=prim.name, **p:
                                    calls.append((_n, p.get("batch_sizes"))) or _run(xp, *a, **p))
                monkeypatch.setattr(prim, "_counted", True, raising=False)
    m = getattr(tj.nn, kind)(3, 4, num_layers=2, bidirectional=True)
    x = tj.randn(5, 4, 3, requires_grad=True)
    out, _ = m(R.pack_padded_sequence(x, [2, 5, 3, 1], enforce_sorted=False))
    out.data.sum().backward()
    forward = [c for c in calls if not c[0].endswith("backward")]
    backward = [c for c in calls if c[0].endswith("backward")]
    assert len(forward) == 4 and len(backward) == 4
    assert all(bs == (4, 3, 2, 1, 1) for _, bs in forward + backward)
    # steps past a sequence's end get no gradient
    assert x.grad[2:, 0].abs().sum().item() == 0 and x.grad[1:, 3].abs().sum().item() == 0
    assert x.grad[:2, 0].abs().min().item() > 0 and x.grad[:, 1].abs().min().item() > 0


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_packed_float32_batch_first_matches_torch(kind):
    # float32 (the loop kernels' dtype: a packed layer runs the primitive's own form), batch
    # first, two layers and directions, no initial state
    r = np.random.default_rng(3)
    m, t = torch_pair(torch, kind, 2, (4, 6), "float32", num_layers=2, bidirectional=True, batch_first=True)
    x = r.standard_normal((5, 7, 4)).astype(np.float32)
    lengths = [3, 7, 1, 7, 4]
    xt, xj = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    ot, ht = t(TR.pack_padded_sequence(xt, lengths, batch_first=True, enforce_sorted=False))
    oj, hj = m(R.pack_padded_sequence(xj, lengths, batch_first=True, enforce_sorted=False))
    ht, hj = (ht[0], hj[0]) if kind == "LSTM" else (ht, hj)
    np.testing.assert_allclose(oj.data.detach().numpy(), ot.data.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hj.detach().numpy(), ht.detach().numpy(), rtol=1e-5, atol=1e-6)
    (ot.data.sin().sum() + ht.sum()).backward()
    (oj.data.sin().sum() + hj.sum()).backward()
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(m.named_parameters(), t.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def test_packed_layer_second_derivative_matches_torch():
    # create_graph through a packed LSTM: the gradient of a gradient's norm
    r = np.random.default_rng(4)
    m, t = torch_pair(torch, "LSTM", 3, (2, 3), bidirectional=True)
    x = r.standard_normal((4, 3, 2))
    grads = []
    for lib, rnn, mod in ((torch, TR, t), (tj, R, m)):
        xv = lib.tensor(x, requires_grad=True)
        out, _ = mod(rnn.pack_padded_sequence(xv, [2, 4, 3], enforce_sorted=False))
        (g,) = lib.autograd.grad(out.data.pow(2).sum(), xv, create_graph=True)
        (gg,) = lib.autograd.grad(g.pow(2).sum(), xv)
        grads.append((g.detach().numpy(), gg.numpy()))
    np.testing.assert_allclose(grads[1][0], grads[0][0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(grads[1][1], grads[0][1], rtol=1e-8, atol=1e-11)


def test_layer_primitive_checks_batch_sizes():
    from tracejit.errors import ShapeError
    from tracejit.ops.gru_prim import gru_layer
    gi, w, b, h0 = tj.zeros(3, 2, 6), tj.zeros(6, 2), tj.zeros(6), tj.zeros(2, 2)
    with pytest.raises(ShapeError, match="gru_layer: batch_sizes"):
        gru_layer(gi, w, b, h0, batch_sizes=(2, 1, 2))
    with pytest.raises(ShapeError, match="gru_layer: batch_sizes"):
        gru_layer(gi, w, b, h0, batch_sizes=(2, 1))


def test_compiled_packing_matches_pytorch_with_list_and_tensor_lengths():
    import warnings
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((4, 3, 2)).astype(np.float32)

    def f(lib, xx, ll):
        rnn = lib.nn.utils.rnn
        out, lens = rnn.pad_packed_sequence(rnn.pack_padded_sequence(xx, ll, enforce_sorted=False))
        return out * 2, lens

    by_list = tj.compile(lambda xx, ll: f(tj, xx, ll), fullgraph=True)   # captured, a graph per list
    by_tensor = tj.compile(lambda xx, ll: f(tj, xx, ll))                 # runs eagerly, one warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for lens in ([4, 2, 3], [3, 1, 2], [4, 2, 3]):
            want = f(torch, torch.tensor(x), lens)
            for got in (by_list(tj.tensor(x), lens), by_tensor(tj.tensor(x), tj.tensor(lens))):
                np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
                assert got[1].tolist() == want[1].tolist()
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 1 and "lengths tensor" in msgs[0], msgs
    assert by_list.cache_stats()["compiles"] == 2


@pytest.mark.parametrize("lengths", [[3, 1, 2], [2.5, 0.5, 3.0], [[1.0, 0.0, 2.0], [3.0, 3.0, 0.0], [0.5, 2.0, 1.0]]])
def test_unpad_sequence_selects_as_pytorch(lengths):
    torch = pytest.importorskip("torch")
    x = np.arange(18, dtype=np.float32).reshape(3, 3, 2)   # (T, B, H)
    want = torch.nn.utils.rnn.unpad_sequence(torch.tensor(x.copy()), torch.tensor(lengths))
    got = tj.nn.utils.rnn.unpad_sequence(tj.tensor(x), tj.tensor(lengths))
    assert [g.tolist() for g in got] == [w.tolist() for w in want]


def test_packed_sequence_casts_as_pytorch():
    torch = pytest.importorskip("torch")
    res = []
    for L in (torch, tj):
        p = L.nn.utils.rnn.pack_sequence([L.tensor([1.5, 2.0, 3.0]), L.tensor([4.0])], enforce_sorted=False)
        res.append([(str(q.data.dtype).split(".")[-1], q.data.tolist(), q.batch_sizes.tolist(),
                     q.unsorted_indices.tolist())
                    for q in (p.half(), p.long(), p.int(), p.short(), p.char(), p.byte(), p.double(), p.pin_memory()
                              if L is tj else p)])
    assert res[1] == res[0]
