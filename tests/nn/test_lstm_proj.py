"""nn.LSTM with ``proj_size`` against PyTorch: parameter names and shapes, outputs, final
states and every gradient, eager (batched, unbatched, packed) and under tracejit.compile."""
import numpy as np
import pytest

import tracejit as tj
from tracejit import nn

torch = pytest.importorskip("torch")


def _pair(layers: int, bidir: bool, batch_first: bool):
    torch.manual_seed(0)
    t = torch.nn.LSTM(5, 6, num_layers=layers, batch_first=batch_first, bidirectional=bidir,
                      proj_size=3).double()
    m = nn.LSTM(5, 6, num_layers=layers, batch_first=batch_first, bidirectional=bidir, proj_size=3,
                dtype="float64")
    assert [(n, tuple(p.shape)) for n, p in m.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in t.named_parameters()]
    m.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    return t, m


def _run(lib, mod, x, h, c, with_state: bool, lengths, batch_first: bool, compiled: bool):
    xx, hh, cc = (lib.tensor(a, requires_grad=True) for a in (x, h, c))

    def loss_of(xx, hh, cc):
        inp = xx if lengths is None else lib.nn.utils.rnn.pack_padded_sequence(
            xx, lengths, batch_first=batch_first, enforce_sorted=False)
        out, (hn, cn) = mod(inp, (hh, cc)) if with_state else mod(inp)
        if lengths is not None:
            out = lib.nn.utils.rnn.pad_packed_sequence(out, batch_first=batch_first)[0]
        return (out * out).sum() + (hn * 1.5).sum() + (cn * cn).sum(), out, hn, cn

    f = tj.compile(loss_of) if compiled else loss_of
    loss, out, hn, cn = f(xx, hh, cc)
    loss.backward()
    got = [out, hn, cn, xx.grad] + ([hh.grad, cc.grad] if with_state else [])
    return [g.detach().numpy() for g in got] + [p.grad.numpy() for p in mod.parameters()]


@pytest.mark.parametrize("layers,bidir,batch_first,batched,with_state,L,packed,compiled", [
    (1, False, False, True, False, 5, False, False),
    (2, True, True, True, True, 5, False, False),
    (2, True, False, False, True, 4, False, False),
    (3, False, True, True, True, 1, False, False),
    (2, True, True, True, True, 5, True, False),
    (1, False, False, True, False, 5, True, False),
    (2, True, True, True, True, 4, False, True),
])
def test_projected_lstm_matches_torch(layers, bidir, batch_first, batched, with_state, L, packed,
                                      compiled):
    t, m = _pair(layers, bidir, batch_first)
    rng = np.random.default_rng(1)
    N, D = 3, 2 if bidir else 1
    x = rng.standard_normal(((N, L, 5) if batch_first else (L, N, 5)) if batched else (L, 5))
    lead = (layers * D, N) if batched else (layers * D,)
    h, c = rng.standard_normal(lead + (3,)), rng.standard_normal(lead + (6,))
    lengths = [L, 3, 2] if packed else None
    want = _run(torch, t, x, h, c, with_state, lengths, batch_first, False)
    got = _run(tj, m, x, h, c, with_state, lengths, batch_first, compiled)
    assert got[0].shape[-1] == 3 * D and got[1].shape[-1] == 3 and got[2].shape[-1] == 6
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)


def test_projected_lstm_checks_its_arguments_and_states():
    with pytest.raises(ValueError, match="smaller than hidden_size"):
        nn.LSTM(5, 4, proj_size=4)
    with pytest.raises(ValueError, match="proj_size"):
        nn.LSTM(5, 4, proj_size=-1)
    m = nn.LSTM(5, 6, proj_size=3)
    assert repr(m) == "LSTM(5, 6, proj_size=3)"
    x = tj.zeros(2, 1, 5)
    with pytest.raises(Exception, match=r"h_0 of shape \(1, 1, 3\)"):
        m(x, (tj.zeros(1, 1, 6), tj.zeros(1, 1, 6)))
