"""RNN / LSTM / GRU and their cells against PyTorch (weights copied by state_dict name)."""
import numpy as np
import pytest

import tracejit as tj
from tracejit import nn
from tracejit.errors import ShapeError

torch = pytest.importorskip("torch", reason="the recurrent layers are checked against PyTorch")

KINDS = {"rnn_tanh": (nn.RNN, torch.nn.RNN, {"nonlinearity": "tanh"}),
         "rnn_relu": (nn.RNN, torch.nn.RNN, {"nonlinearity": "relu"}),
         "lstm": (nn.LSTM, torch.nn.LSTM, {}),
         "gru": (nn.GRU, torch.nn.GRU, {})}

# A compact covering of the options: every value of every option appears with every kind.
OPTIONS = [  # num_layers, bias, batch_first, bidirectional, initial_state, batched
    (1, True, False, False, False, True),
    (2, False, True, True, True, True),
    (2, True, False, True, False, False),
    (3, True, True, False, True, True),
    (1, False, False, False, True, False),
]


def _copy(tj_mod, t_mod):
    tj_mod.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in t_mod.state_dict().items()})


def _np(t):
    return t.detach().numpy()


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: "L{}-b{:d}-bf{:d}-bi{:d}-h0{:d}-B{:d}".format(*o))
@pytest.mark.parametrize("L", [6, 1])   # 1: a decoder's one-step call (the cells' one node)
def test_layer_matches_torch(kind, opts, L):
    layers, bias, batch_first, bidir, with_state, batched = opts
    ours, theirs, extra = KINDS[kind]
    torch.manual_seed(0)
    t = theirs(5, 4, num_layers=layers, bias=bias, batch_first=batch_first, bidirectional=bidir,
               **extra).double()
    m = ours(5, 4, num_layers=layers, bias=bias, batch_first=batch_first, bidirectional=bidir,
             dtype="float64", **extra)
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in t.named_parameters()]
    _copy(m, t)
    rng = np.random.default_rng(1)
    N, D = 3, 2 if bidir else 1
    xshape = ((N, L, 5) if batch_first else (L, N, 5)) if batched else (L, 5)
    x = rng.standard_normal(xshape)
    sshape = (layers * D, N, 4) if batched else (layers * D, 4)
    states = [rng.standard_normal(sshape) for _ in range(2 if kind == "lstm" else 1)]
    xt = torch.tensor(x, requires_grad=True)
    xj = tj.tensor(x, requires_grad=True)
    st_t = [torch.tensor(s, requires_grad=True) for s in states]
    st_j = [tj.tensor(s, requires_grad=True) for s in states]
    if with_state:
        hx_t = tuple(st_t) if kind == "lstm" else st_t[0]
        hx_j = tuple(st_j) if kind == "lstm" else st_j[0]
        out_t, fin_t = t(xt, hx_t)
        out_j, fin_j = m(xj, hx_j)
    else:
        out_t, fin_t = t(xt)
        out_j, fin_j = m(xj)
    fin_t = fin_t if kind == "lstm" else (fin_t,)
    fin_j = fin_j if kind == "lstm" else (fin_j,)
    np.testing.assert_allclose(_np(out_j), _np(out_t), rtol=1e-10, atol=1e-12)
    for a, b in zip(fin_j, fin_t):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-10, atol=1e-12)
    # A loss touching the output and every final state: gradients of all parameters.
    w = rng.standard_normal(out_t.shape)
    loss_t = (out_t * torch.tensor(w)).sum() + sum((f ** 2).sum() for f in fin_t)
    loss_j = (out_j * tj.tensor(w)).sum() + sum((f ** 2).sum() for f in fin_j)
    loss_t.backward()
    loss_j.backward()
    tp = dict(t.named_parameters())
    for name, p in m.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), tp[name].grad.numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=name)
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-12)
    if with_state:
        for a, b in zip(st_j, st_t):
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_state_dict_keys_and_init():
    m = nn.LSTM(3, 8, num_layers=2, bidirectional=True)
    t = torch.nn.LSTM(3, 8, num_layers=2, bidirectional=True)
    assert list(m.state_dict()) == list(t.state_dict())
    for k, v in m.state_dict().items():
        assert tuple(v.shape) == tuple(t.state_dict()[k].shape), k
        a = v.numpy()
        assert np.abs(a).max() <= 1 / np.sqrt(8) and a.std() > 0.1, k


@pytest.mark.parametrize("lib", [torch, tj], ids=["torch", "tracejit"])
def test_weight_lists_repr_and_one_layer_dropout_warning_as_pytorch(lib):
    """``all_weights`` and ``_flat_weights_names`` (weight-drop wrappers read them) list each
    layer and direction's parameters in PyTorch's order; the repr and the warning too."""
    m = lib.nn.LSTM(2, 3, num_layers=2, bidirectional=True, proj_size=1, bias=False)
    assert [[w is getattr(m, n) for w, n in zip(ws, names)] for ws, names in zip(m.all_weights, m._all_weights)] \
        == [[True] * 3] * 4
    assert m._flat_weights_names == ["weight_ih_l0", "weight_hh_l0", "weight_hr_l0",
                                     "weight_ih_l0_reverse", "weight_hh_l0_reverse", "weight_hr_l0_reverse",
                                     "weight_ih_l1", "weight_hh_l1", "weight_hr_l1",
                                     "weight_ih_l1_reverse", "weight_hh_l1_reverse", "weight_hr_l1_reverse"]
    assert [tuple(w.shape) for w in m._flat_weights[:3]] == [(12, 2), (12, 1), (1, 3)]
    assert repr(m) == "LSTM(2, 3, proj_size=1, num_layers=2, bias=False, bidirectional=True)"
    assert len(lib.nn.GRU(2, 3, bias=True).all_weights[0]) == 4
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        lib.nn.GRU(2, 3, dropout=0.2)


def test_flatten_parameters_keeps_the_layer_as_pytorchs():
    """Tacotron's encoder calls ``self.lstm.flatten_parameters()`` before each forward."""
    t = torch.nn.LSTM(3, 4, batch_first=True, bidirectional=True)
    m = nn.LSTM(3, 4, batch_first=True, bidirectional=True)
    _copy(m, t)
    assert m.flatten_parameters() is None and t.flatten_parameters() is None
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    np.testing.assert_allclose(_np(m(tj.tensor(x))[0]), _np(t(torch.from_numpy(x))[0]), rtol=1e-5, atol=1e-6)


def test_dropout_between_layers():
    m = nn.GRU(4, 6, num_layers=3, dropout=0.5)
    x = tj.randn(5, 2, 4)
    m.eval()
    a, _ = m(x)
    b, _ = m(x)
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())   # no dropout in eval
    m.train()
    outs = {m(x)[0].detach().numpy().tobytes() for _ in range(3)}
    assert len(outs) > 1                                   # dropout in training
    # dropout never applies after the last layer: with one layer, train == eval.
    one = nn.GRU(4, 6, num_layers=1, dropout=0.5)
    o1 = one(x)[0].detach().numpy()
    one.eval()
    np.testing.assert_array_equal(o1, one(x)[0].detach().numpy())


@pytest.mark.parametrize("cell,tcell,nstate", [(nn.RNNCell, torch.nn.RNNCell, 1),
                                               (nn.LSTMCell, torch.nn.LSTMCell, 2),
                                               (nn.GRUCell, torch.nn.GRUCell, 1)])
@pytest.mark.parametrize("bias,batched,with_state", [(True, True, True), (False, False, True),
                                                     (True, True, False)])
def test_cells_match_torch(cell, tcell, nstate, bias, batched, with_state):
    torch.manual_seed(0)
    t = tcell(5, 3, bias=bias).double()
    m = cell(5, 3, bias=bias, dtype="float64")
    assert list(m.state_dict()) == list(t.state_dict())
    _copy(m, t)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 5) if batched else (5,))
    s = [rng.standard_normal((4, 3) if batched else (3,)) for _ in range(nstate)]
    xt, xj = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    if with_state:
        hx_t = tuple(torch.tensor(v) for v in s) if nstate == 2 else torch.tensor(s[0])
        hx_j = tuple(tj.tensor(v) for v in s) if nstate == 2 else tj.tensor(s[0])
        out_t, out_j = t(xt, hx_t), m(xj, hx_j)
    else:
        out_t, out_j = t(xt), m(xj)
    out_t = out_t if nstate == 2 else (out_t,)
    out_j = out_j if nstate == 2 else (out_j,)
    for a, b in zip(out_j, out_t):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-10, atol=1e-12)
    sum(((o * (i + 1)) ** 2).sum() for i, o in enumerate(out_t)).backward()
    sum(((o * (i + 1)) ** 2).sum() for i, o in enumerate(out_j)).backward()
    tp = dict(t.named_parameters())
    for name, p in m.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), tp[name].grad.numpy(), rtol=1e-9, err_msg=name)
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-9)


def test_errors_name_layer_and_shapes():
    m = nn.LSTM(5, 4, num_layers=2)
    with pytest.raises(ShapeError, match=r"LSTM: .*Expected 5, got 7"):
        m(tj.randn(3, 2, 7))
    with pytest.raises(ShapeError, match=r"LSTM: expected a 2-D .* got 4-D input of shape \(1, 3, 2, 5\)"):
        m(tj.randn(1, 3, 2, 5))
    h = tj.zeros(2, 2, 4)
    with pytest.raises(ShapeError, match=r"expected c_0 of shape \(2, 2, 4\), got \(1, 2, 4\)"):
        m(tj.randn(3, 2, 5), (h, tj.zeros(1, 2, 4)))
    with pytest.raises(ShapeError, match=r"expected h_0 of shape \(2, 2, 4\), got \(2, 3, 4\)"):
        m(tj.randn(3, 2, 5), (tj.zeros(2, 3, 4), h))
    with pytest.raises(ShapeError, match=r"GRU: expected h_0 of shape \(2, 4\), got \(2, 1, 4\)"):
        nn.GRU(5, 4, num_layers=2)(tj.randn(3, 5), tj.zeros(2, 1, 4))
    with pytest.raises(ShapeError, match=r"LSTMCell: expected c_0 of shape \(2, 4\), got \(2, 5\)"):
        nn.LSTMCell(5, 4)(tj.randn(2, 5), (tj.zeros(2, 4), tj.zeros(2, 5)))
    with pytest.raises(ShapeError, match=r"GRUCell: input has 3 features"):
        nn.GRUCell(5, 4)(tj.randn(2, 3))
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(3, 3, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="dropout"):
        nn.LSTM(3, 3, dropout=1.5)


def _compiled_matches_eager(capture, rnn_cls, seq_len, **kw):
    """A recurrent layer + head under tj.trace / tj.script: same loss and parameter grads as eager."""
    rng = np.random.default_rng(3)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = rnn_cls(4, 5, batch_first=True, **kw)
            self.head = nn.Linear(10 if kw.get("bidirectional") else 5, 3)

        def forward(self, x):
            out, state = self.rnn(x)
            h = state[0] * state[1] if isinstance(state, tuple) else state
            return self.head(out).sum() + h.sum()

    m = Model()
    compiled = getattr(tj, capture)(m)
    x = tj.tensor(rng.standard_normal((2, seq_len, 4)).astype("float32"))
    ref = m(x)
    ref.backward()
    grads = {n: p.grad.numpy().copy() for n, p in m.named_parameters()}
    m.zero_grad()
    got = compiled(x)
    got.backward()
    np.testing.assert_allclose(got.item(), ref.item(), rtol=1e-5)
    for n, p in m.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), grads[n], rtol=1e-4, atol=1e-6, err_msg=n)


def test_lstm_scripts():
    _compiled_matches_eager("script", nn.LSTM, 3)


# Cold (empty kernel cache) these compile 1-2 minutes of numba kernels on 2 cores.
@pytest.mark.slow
@pytest.mark.parametrize("capture", ["trace", "script"])
@pytest.mark.parametrize("rnn_cls", [nn.LSTM, nn.GRU, nn.RNN], ids=["lstm", "gru", "rnn"])
def test_stacked_bidirectional_compiles(capture, rnn_cls):
    _compiled_matches_eager(capture, rnn_cls, 4, num_layers=2, bidirectional=True)


@pytest.mark.parametrize("cell,tcell", [(nn.LSTMCell, torch.nn.LSTMCell), (nn.RNNCell, torch.nn.RNNCell)],
                         ids=["lstm", "rnn"])
def test_a_compiled_cell_loop_matches_torch_with_one_product_a_step(cell, tcell):
    """A cell stepped by a Python loop, compiled: PyTorch's outputs and gradients, and each
    step's two projections captured as one product on [x | h] (the weights' concatenation
    once for the loop)."""
    torch.manual_seed(0)
    t = tcell(3, 4).double()
    m = cell(3, 4, dtype="float64")
    _copy(m, t)
    lstm = cell is nn.LSTMCell

    def run(mod, x, T):
        h = T.zeros(2, 4, dtype=T.float64)
        c = T.zeros(2, 4, dtype=T.float64)
        outs = []
        for xt in x.split(1, dim=1):
            if lstm:
                h, c = mod(xt.squeeze(1), (h, c))
            else:
                h = mod(xt.squeeze(1), h)
            outs.append(h)
        return T.stack(outs, 1)

    class Loop(nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = m

        def forward(self, x):
            return run(self.cell, x, tj)

    x = np.random.default_rng(4).standard_normal((2, 3, 3))
    f = tj.compile(Loop())
    out_j = f(tj.tensor(x))
    out_t = run(t, torch.tensor(x), torch)
    np.testing.assert_allclose(_np(out_j), _np(out_t), rtol=1e-10, atol=1e-12)
    (out_j ** 2).sum().backward()
    (out_t ** 2).sum().backward()
    tp = dict(t.named_parameters())
    for name, p in m.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), tp[name].grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)
    graph = str(f.explain(tj.tensor(x))["optimized graph"])
    # concatenations: [x | h] at each of the 3 steps and the weights once; the outputs'
    # stack is its own op
    concats = [ln for ln in graph.splitlines() if " concat[" in ln]
    stacks = [ln for ln in graph.splitlines() if " stack[" in ln]
    assert graph.count(" matmul ") == 3 and len(concats) == 4 and len(stacks) == 1, graph


def test_bad_state_dict_lists_keys_and_changes_nothing():
    m = nn.LSTM(3, 4)
    before = {k: v.numpy().copy() for k, v in m.state_dict().items()}
    sd = {k: v.clone() for k, v in m.state_dict().items()}
    del sd["bias_ih_l0"]
    sd["weight_hh_l0"] = tj.zeros(4, 4)
    sd["weight_ih_l0"] = tj.zeros(16, 3)
    sd["weight_ih_l1"] = tj.zeros(16, 4)
    with pytest.raises(RuntimeError, match=r'(?s)Missing key.*"bias_ih_l0".*Unexpected key.*"weight_ih_l1"'
                                           r'.*size mismatch for weight_hh_l0.*\(4, 4\).*\(16, 4\)'):
        m.load_state_dict(sd)
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)



@pytest.mark.parametrize("kind", ["rnn_tanh", "lstm", "gru"])
@pytest.mark.parametrize("bf16_input", [False, True])
def test_layers_run_under_autocast_in_pytorchs_dtypes(kind, bf16_input):
    """Under CPU autocast an LSTM's and an Elman RNN's layers run in bf16 (their weights
    cast), a GRU in its input's dtype; values within bf16's rounding of PyTorch's."""
    ours, theirs, kw = KINDS[kind]
    t_mod = theirs(3, 5, num_layers=2, bidirectional=True, batch_first=True, **kw)
    mod = ours(3, 5, num_layers=2, bidirectional=True, batch_first=True, **kw)
    _copy(mod, t_mod)
    x = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)
    xt = tj.tensor(x, requires_grad=True)
    with tj.autocast("cpu", dtype=tj.bfloat16):
        out, _ = mod(xt.bfloat16() if bf16_input else xt)
    want = tj.float32 if kind == "gru" and not bf16_input else tj.bfloat16
    assert out.dtype is want
    out.float().pow(2).sum().backward()
    assert xt.grad.dtype is tj.float32 and mod.weight_hh_l1.grad.dtype is tj.float32
    if kind == "lstm" and not bf16_input:
        return      # (PyTorch's runs through oneDNN, which some CPUs refuse in bf16)
    x_t = torch.tensor(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref, _ = t_mod(x_t.bfloat16() if bf16_input else x_t)
    assert str(ref.dtype) == "torch." + want.name
    np.testing.assert_allclose(out.float().detach().numpy(), ref.float().detach().numpy(), atol=0.03)


def _checks(L):
    """What a subclass of nn.LSTM / nn.GRU with its own forward calls."""
    out = []
    for m in (L.nn.LSTM(3, 4, 2, proj_size=2, bidirectional=True), L.nn.GRU(3, 4, batch_first=True)):
        x = L.ones(5, 2, 3)
        out.append((m.get_expected_hidden_size(x, None), m.get_expected_hidden_size(x, L.tensor([3, 1]))))
        good = (L.ones(4, 2, 2), L.ones(4, 2, 4)) if isinstance(m, L.nn.LSTM) else L.ones(1, 5, 4)
        bad = (L.ones(4, 2, 2), L.ones(2, 2, 4)) if isinstance(m, L.nn.LSTM) else L.ones(1, 2, 4)
        out.append(m.check_forward_args(x, good, None))
        for call in (lambda: m.check_forward_args(x, bad, None), lambda: m.check_input(x.double(), None),
                     lambda: m.check_input(x, L.tensor([2, 1])), lambda: m.check_input(L.ones(5, 2, 2), None)):
            with pytest.raises((RuntimeError, ValueError)) as err:
                call()
            out.append((err.type.__name__, str(err.value).replace("torch.", "").replace("tracejit.", "")))
        hx = (L.arange(8.0).reshape(2, 2, 2),) * 2 if isinstance(m, L.nn.LSTM) else L.arange(8.0).reshape(2, 2, 2)
        p = m.permute_hidden(hx, L.tensor([1, 0]))
        out.append([t.tolist() for t in (p if isinstance(p, tuple) else (p,))])
    return out


def test_pytorchs_checking_helpers_for_subclass_forwards():
    assert _checks(tj) == _checks(torch)
