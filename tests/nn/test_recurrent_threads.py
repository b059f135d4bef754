"""The recurrent layers on any thread count: `tracejit.set_num_threads(n)` for n = 1 .. 4 gives
the same bits of LSTM / GRU / RNN outputs and gradients (the LSTM's whole-loop kernels split
into n shares by hidden units, compiler/cpu/kernels/loop_split.py; more shares than this
machine's cores run too), and PyTorch's values (weights copied by state_dict name)."""
import numpy as np
import pytest

import tracejit as tj
from tracejit import nn

torch = pytest.importorskip("torch", reason="the recurrent layers are checked against PyTorch")
pytest.importorskip("numba", reason="the whole-loop kernels are numba code")

KINDS = {"lstm": (nn.LSTM, torch.nn.LSTM), "gru": (nn.GRU, torch.nn.GRU), "rnn": (nn.RNN, torch.nn.RNN)}
H = 64       # four shares of whole 16-unit quanta


@pytest.fixture
def counts(monkeypatch, thread_counts_back):
    """Set the thread count (`thread_counts_back` restores it). The loops' stall bench is
    fresh (a loaded machine's history does not lower the count) and the split loops' share
    counts are recorded."""
    from tracejit.compiler.cpu.kernels import lstm_kernels, loop_split
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")          # the kernels load at their first call
    for name in ("forward_layer", "backward_layer"):
        assert getattr(lstm_kernels, name)("float64") is not None
    monkeypatch.setattr(loop_split, "stalls", loop_split.Stalls())
    shares = []
    real = loop_split.run
    monkeypatch.setattr(loop_split, "run", lambda kernel, args, nth: (shares.append(nth), real(kernel, args, nth)))
    yield shares


def _run(kind, t, x, h0, w):
    """Output, final state and every gradient of a loss over both, as numpy arrays."""
    ours = KINDS[kind][0](8, H, num_layers=2, bidirectional=True, dtype="float64")
    ours.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    xj = tj.tensor(x, requires_grad=True)
    states = [tj.tensor(s, requires_grad=True) for s in h0]
    out, fin = ours(xj, tuple(states) if kind == "lstm" else states[0])
    fin = fin if kind == "lstm" else (fin,)
    loss = (out * tj.tensor(w)).sum() + sum((f * f).sum() for f in fin)
    loss.backward()
    return ([out.detach().numpy()] + [f.detach().numpy() for f in fin] + [xj.grad.numpy()]
            + [s.grad.numpy() for s in states] + [p.grad.numpy() for _, p in ours.named_parameters()])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_thread_count_gives_the_same_bits_and_torchs_values(counts, kind):
    torch.manual_seed(0)
    t = KINDS[kind][1](8, H, num_layers=2, bidirectional=True).double()
    rng = np.random.default_rng(2)
    L, N = 16, 16       # (work enough for the split: loop_split.MIN_WORK)
    x = rng.standard_normal((L, N, 8))
    h0 = [rng.standard_normal((4, N, H)) for _ in range(2 if kind == "lstm" else 1)]
    w = rng.standard_normal((L, N, 2 * H))
    results = {}
    for n in (1, 2, 3, 4):
        tj.set_num_threads(n)
        counts.clear()
        results[n] = _run(kind, t, x, h0, w)
        if kind == "lstm":      # 4 layer-directions, each forward and backward
            assert counts and set(counts) <= {n}, (n, counts)
    for n in (2, 3, 4):
        for got, want in zip(results[n], results[1]):
            np.testing.assert_array_equal(got, want, err_msg=f"{kind}, {n} threads")
    xt = torch.tensor(x, requires_grad=True)
    st = [torch.tensor(s, requires_grad=True) for s in h0]
    out, fin = t(xt, tuple(st) if kind == "lstm" else st[0])
    fin = fin if kind == "lstm" else (fin,)
    ((out * torch.tensor(w)).sum() + sum((f * f).sum() for f in fin)).backward()
    want = ([out.detach().numpy()] + [f.detach().numpy() for f in fin] + [xt.grad.numpy()]
            + [s.grad.numpy() for s in st] + [p.grad.numpy() for _, p in t.named_parameters()])
    assert len(want) == len(results[1])
    for got, ref in zip(results[1], want):
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-10)
