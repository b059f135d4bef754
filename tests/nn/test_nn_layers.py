"""Layers and containers: shapes, default initialisation, forward values (vs numpy, and vs PyTorch when installed)."""
import math
from collections import OrderedDict

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit import nn


def arr(t):
    return t.detach().numpy()


def test_linear_shapes_init_and_forward():
    tj.manual_seed(0)
    lin = nn.Linear(50, 20)
    assert lin.weight.shape == (20, 50) and lin.bias.shape == (20,)
    bound = 1 / math.sqrt(50)
    w, b = arr(lin.weight), arr(lin.bias)
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert np.abs(w).max() > 0.9 * bound  # uniform over the whole range, not a narrower one
    assert abs(w.std() - bound / math.sqrt(3)) < 0.1 * bound  # std of U(-b, b)
    x = tj.randn(7, 50)
    np.testing.assert_allclose(arr(lin(x)), arr(x) @ w.T + b, rtol=1e-5, atol=1e-6)
    assert nn.Linear(3, 2, bias=False).bias is None
    assert lin.weight.dtype is tj.float32
    assert nn.Linear(3, 2, dtype=tj.float64).weight.dtype is tj.float64
    with pytest.raises(ValueError, match="in_features"):
        nn.Linear(-1, 3)


def test_linear_init_is_reproducible_with_manual_seed():
    tj.manual_seed(123)
    a = arr(nn.Linear(4, 4).weight)
    tj.manual_seed(123)
    np.testing.assert_array_equal(a, arr(nn.Linear(4, 4).weight))


def test_conv2d_and_pools_shapes_and_values():
    tj.manual_seed(0)
    conv = nn.Conv2d(3, 8, kernel_size=3, stride=1, padding=1)
    assert conv.weight.shape == (8, 3, 3, 3)
    assert np.abs(arr(conv.weight)).max() <= 1 / math.sqrt(27)
    x = tj.randn(2, 3, 10, 10)
    assert conv(x).shape == (2, 8, 10, 10)
    assert nn.Conv2d(3, 4, (3, 5), stride=2)(x).shape == (2, 4, 4, 3)
    assert repr(conv) == "Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))"
    mp = nn.MaxPool2d(2)(x)
    ap = nn.AvgPool2d(2)(x)
    xn = arr(x).reshape(2, 3, 5, 2, 5, 2)
    np.testing.assert_allclose(arr(mp), xn.max(axis=(3, 5)), rtol=1e-6)
    np.testing.assert_allclose(arr(ap), xn.mean(axis=(3, 5)), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)


def test_activations_match_numpy():
    x = tj.tensor([[-2.0, -0.5, 0.0, 0.5, 3.0]])
    xn = arr(x)
    np.testing.assert_allclose(arr(nn.ReLU()(x)), np.maximum(xn, 0))
    np.testing.assert_allclose(arr(nn.Tanh()(x)), np.tanh(xn), rtol=1e-6)
    np.testing.assert_allclose(arr(nn.Sigmoid()(x)), 1 / (1 + np.exp(-xn)), rtol=1e-6)
    np.testing.assert_allclose(arr(nn.SiLU()(x)), xn / (1 + np.exp(-xn)), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(arr(nn.LeakyReLU(0.1)(x)), np.where(xn > 0, xn, 0.1 * xn), rtol=1e-6)
    np.testing.assert_allclose(arr(nn.Softplus()(x)), np.log1p(np.exp(xn)), rtol=1e-6)
    gelu_tanh = 0.5 * xn * (1 + np.tanh(math.sqrt(2 / math.pi) * (xn + 0.044715 * xn ** 3)))
    np.testing.assert_allclose(arr(nn.GELU(approximate="tanh")(x)), gelu_tanh, rtol=1e-5, atol=1e-6)
    sm = np.exp(xn) / np.exp(xn).sum(1, keepdims=True)
    np.testing.assert_allclose(arr(nn.Softmax(dim=1)(x)), sm, rtol=1e-6)
    np.testing.assert_allclose(arr(nn.LogSoftmax(dim=-1)(x)), np.log(sm), rtol=1e-5)
    with pytest.warns(UserWarning, match="Implicit dimension"):
        nn.Softmax()(x)
    with pytest.raises(ValueError, match="approximate"):
        nn.GELU(approximate="fast")


def test_layernorm_embedding_flatten_identity_dropout():
    x = tj.randn(4, 6)
    ln = nn.LayerNorm(6)
    xn = arr(x)
    ref = (xn - xn.mean(1, keepdims=True)) / np.sqrt(xn.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(arr(ln(x)), ref, rtol=1e-4, atol=1e-5)
    assert arr(ln.weight).tolist() == [1.0] * 6 and arr(ln.bias).tolist() == [0.0] * 6

    emb = nn.Embedding(10, 3, padding_idx=0)
    assert emb.weight.shape == (10, 3) and arr(emb.weight)[0].tolist() == [0.0, 0.0, 0.0]
    idx = tj.tensor([[1, 2], [0, 9]])
    np.testing.assert_array_equal(arr(emb(idx)), arr(emb.weight)[arr(idx)])

    assert nn.Flatten()(tj.ones(2, 3, 4)).shape == (2, 12)
    assert nn.Flatten(0, 1)(tj.ones(2, 3, 4)).shape == (6, 4)
    assert nn.Identity(5, foo=1)(x) is x

    tj.manual_seed(0)
    d = nn.Dropout(0.25)
    y = arr(d(tj.ones(1000)))
    assert set(np.unique(y).tolist()) <= {0.0, float(np.float32(1 / 0.75))}
    assert 0.2 < (y == 0).mean() < 0.3
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)


def test_losses_match_functional_and_numpy():
    tj.manual_seed(0)
    logits = tj.randn(5, 4)
    target = tj.tensor([0, 3, 1, 1, 2])
    ln = arr(logits)
    logp = ln - np.log(np.exp(ln).sum(1, keepdims=True))
    ce = -logp[np.arange(5), arr(target)].mean()
    assert nn.CrossEntropyLoss()(logits, target).item() == pytest.approx(ce, rel=1e-5)
    assert nn.NLLLoss()(F.log_softmax(logits, 1), target).item() == pytest.approx(ce, rel=1e-5)
    a, b = tj.randn(3, 2), tj.randn(3, 2)
    assert nn.MSELoss()(a, b).item() == pytest.approx(((arr(a) - arr(b)) ** 2).mean(), rel=1e-5)
    assert nn.MSELoss(reduction="sum")(a, b).item() == pytest.approx(((arr(a) - arr(b)) ** 2).sum(), rel=1e-5)
    assert nn.L1Loss()(a, b).item() == pytest.approx(np.abs(arr(a) - arr(b)).mean(), rel=1e-5)
    p = tj.sigmoid(a)
    t = tj.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    pn, tn = arr(p), arr(t)
    bce = -(tn * np.log(pn) + (1 - tn) * np.log(1 - pn)).mean()
    assert nn.BCELoss()(p, t).item() == pytest.approx(bce, rel=1e-5)
    assert nn.BCEWithLogitsLoss()(a, t).item() == pytest.approx(bce, rel=1e-5)
    w = tj.tensor([1.0, 2.0, 0.5, 1.0])
    assert "weight" in dict(nn.CrossEntropyLoss(weight=w).named_buffers())
    with pytest.raises(ValueError, match="reduction"):
        nn.MSELoss(reduction="avg")


def test_sequential_indexing_len_iter_append_slice():
    a, b, c = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    seq = nn.Sequential(a, b)
    assert len(seq) == 2 and seq[0] is a and seq[-1] is b and list(seq) == [a, b]
    seq.append(c)
    assert len(seq) == 3 and seq[2] is c
    assert seq(tj.ones(4, 2)).shape == (4, 1)
    head = seq[:2]
    assert isinstance(head, nn.Sequential) and list(head) == [a, b]
    with pytest.raises(IndexError, match="out of range"):
        seq[5]
    del seq[1]
    assert list(seq) == [a, c] and [k for k, _ in seq.named_children()] == ["0", "1"]
    named = nn.Sequential(OrderedDict([("fc", nn.Linear(2, 2)), ("act", nn.Tanh())]))
    assert isinstance(named.fc, nn.Linear) and named[1] is named.act
    with pytest.raises(TypeError, match="not a Module"):
        nn.Sequential(nn.ReLU(), lambda x: x)


def test_sequential_and_modulelist_insert_like_pytorch():
    a, b, t = nn.Identity(), nn.ReLU(), nn.Tanh()
    seq = nn.Sequential(a, b)
    seq.insert(-1, t)                              # before the last element, as PyTorch does
    assert list(seq) == [a, t, b] and [k for k, _ in seq.named_children()] == ["0", "1", "2"]
    seq.insert(3, nn.Sigmoid())
    assert isinstance(seq[3], nn.Sigmoid)
    with pytest.raises(IndexError, match="out of range"):
        seq.insert(9, nn.ReLU())
    ml = nn.ModuleList([a, b])
    ml.insert(1, t)
    assert list(ml) == [a, t, b] and [k for k, _ in ml.named_children()] == ["0", "1", "2"]
    with pytest.raises(TypeError, match="expected a Module"):
        ml.insert(0, lambda x: x)
    assert list(ml) == [a, t, b]                    # nothing changed
    del ml[0]
    assert list(ml) == [t, b] and [k for k, _ in ml.named_children()] == ["0", "1"]


def test_modulelist_moduledict_parameterlist():
    ml = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert len(ml) == 3 and len(list(ml.parameters())) == 6
    ml.append(nn.ReLU())
    assert isinstance(ml[-1], nn.ReLU)
    md = nn.ModuleDict({"enc": nn.Linear(2, 4), "dec": nn.Linear(4, 2)})
    assert list(md.keys()) == ["enc", "dec"] and "enc" in md
    assert [n for n, _ in md.named_parameters()] == ["enc.weight", "enc.bias", "dec.weight", "dec.bias"]
    pl = nn.ParameterList([nn.Parameter(tj.ones(2)), tj.zeros(3)])
    assert len(pl) == 2 and isinstance(pl[1], nn.Parameter)
    assert [n for n, _ in pl.named_parameters()] == ["0", "1"]


# ---------------------------------------------------------------- vs PyTorch
def _torch():
    return pytest.importorskip("torch")


def _copy_params(src_torch, dst):
    for (n, tp), (m, p) in zip(src_torch.named_parameters(), dst.named_parameters()):
        assert n == m
        with tj.no_grad():
            p.copy_(tj.tensor(tp.detach().numpy()))


@pytest.mark.parametrize("make", [
    lambda nn_: nn_.Linear(5, 3),
    lambda nn_: nn_.LayerNorm(5),
    lambda nn_: nn_.Sequential(nn_.Linear(5, 8), nn_.GELU(), nn_.Linear(8, 2), nn_.LogSoftmax(dim=1)),
    lambda nn_: nn_.Sequential(nn_.Linear(5, 8), nn_.SiLU(), nn_.LeakyReLU(0.2), nn_.Softplus()),
])
def test_forward_and_grads_match_pytorch(make):
    torch = _torch()
    tm = make(torch.nn)
    m = make(nn)
    _copy_params(tm, m)
    xn = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    out_t = tm(torch.tensor(xn))
    out = m(tj.tensor(xn))
    np.testing.assert_allclose(arr(out), out_t.detach().numpy(), rtol=1e-5, atol=1e-6)
    (out_t * out_t).sum().backward()
    (out * out).sum().backward()
    for (n, tp), (_, p) in zip(tm.named_parameters(), m.named_parameters()):
        np.testing.assert_allclose(arr(p.grad), tp.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=n)


def test_conv_net_matches_pytorch():
    torch = _torch()

    def make(nn_):
        return nn_.Sequential(nn_.Conv2d(2, 4, 3, padding=1), nn_.ReLU(), nn_.MaxPool2d(2),
                              nn_.Conv2d(4, 3, 3, stride=2, padding=1), nn_.AvgPool2d(2), nn_.Flatten())
    tm, m = make(torch.nn), make(nn)
    _copy_params(tm, m)
    xn = np.random.default_rng(1).standard_normal((2, 2, 8, 8)).astype(np.float32)
    out_t, out = tm(torch.tensor(xn)), m(tj.tensor(xn))
    np.testing.assert_allclose(arr(out), out_t.detach().numpy(), rtol=1e-5, atol=1e-5)
    out_t.sum().backward()
    out.sum().backward()
    np.testing.assert_allclose(arr(m[0].weight.grad), tm[0].weight.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_losses_match_pytorch():
    torch = _torch()
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((6, 4)).astype(np.float32)
    target = np.array([0, 3, 1, 1, 2, 3])
    w = np.array([1.0, 2.0, 0.5, 1.5], dtype=np.float32)
    cases = [{"weight": w}, {"weight": w, "reduction": "sum"}, {"label_smoothing": 0.1},
             {"label_smoothing": 0.1, "reduction": "sum"}, {"ignore_index": 3}]
    for kw in cases:
        ours = nn.CrossEntropyLoss(**{k: tj.tensor(v) if k == "weight" else v for k, v in kw.items()})
        ref = torch.nn.CrossEntropyLoss(**{k: torch.tensor(v) if k == "weight" else v for k, v in kw.items()})
        got = ours(tj.tensor(logits), tj.tensor(target)).item()
        assert got == pytest.approx(ref(torch.tensor(logits), torch.tensor(target)).item(), rel=1e-5), kw
    y = rng.random((6, 4)).astype(np.float32)
    pw = np.array([1.0, 3.0, 0.5, 2.0], dtype=np.float32)
    ours = nn.BCEWithLogitsLoss(pos_weight=tj.tensor(pw))(tj.tensor(logits), tj.tensor(y))
    ref = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(pw))(torch.tensor(logits), torch.tensor(y))
    assert ours.item() == pytest.approx(ref.item(), rel=1e-5)


def test_embedding_options_match_pytorch():
    torch = pytest.importorskip("torch")
    idx = [[1, 2, 2], [3, 1, 9]]
    for kw in ({"max_norm": 1.0}, {"max_norm": 0.5, "norm_type": 1.0}, {"scale_grad_by_freq": True},
               {"padding_idx": 2, "sparse": True}):
        ref = torch.nn.Embedding(10, 4, **kw)
        got = tj.nn.Embedding(10, 4, **kw)
        got.load_state_dict({"weight": tj.tensor(ref.weight.detach().numpy().copy())})
        a, b = ref(torch.tensor(idx)), got(tj.tensor(idx))
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got.weight.detach().numpy(), ref.weight.detach().numpy(), rtol=1e-5, atol=1e-6)
        (a ** 2).sum().backward()
        (b ** 2).sum().backward()
        want = ref.weight.grad.to_dense() if ref.weight.grad.is_sparse else ref.weight.grad
        np.testing.assert_allclose(got.weight.grad.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows,lookups,pad", [(50, (4, 6), 3), (50, (4, 6), -47), (5, (8, 9), 3), (5, (8, 9), -1)])
def test_embedding_padding_row_takes_no_gradient_as_pytorch(rows, lookups, pad):
    """Fewer lookups than rows mask the rows looked up, more mask the table: the same
    values and the same weight gradient (the padding row's zero) either way."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(rows)
    w = rng.standard_normal((rows, 3)).astype(np.float32)
    idx = rng.integers(0, rows, lookups)
    idx[0, :2] = pad % rows
    g = rng.standard_normal(lookups + (3,)).astype(np.float32)
    got = []
    for lib in (torch, tj):
        weight = lib.tensor(w, requires_grad=True)
        out = lib.nn.functional.embedding(lib.tensor(idx), weight, padding_idx=pad)
        out.backward(lib.tensor(g))
        got.append((out.detach().numpy(), weight.grad.numpy()))
    np.testing.assert_array_equal(got[1][0], got[0][0])
    np.testing.assert_allclose(got[1][1], got[0][1], rtol=1e-6, atol=1e-6)
    assert not got[1][1][pad % rows].any()


def test_embedding_from_pretrained_freezes_by_default():
    w = tj.arange(12.0).reshape(4, 3)
    e = tj.nn.Embedding.from_pretrained(w)
    assert not e.weight.requires_grad and e(tj.tensor([2])).tolist() == [[6.0, 7.0, 8.0]]
    assert tj.nn.Embedding.from_pretrained(w, freeze=False, padding_idx=0).weight.requires_grad
    with pytest.raises(ValueError, match="embeddings must be 2-D"):
        tj.nn.Embedding.from_pretrained(tj.ones(3))


def test_layer_sizes_may_be_numpy_integers():
    """Layer sizes read from a numpy array of sizes (DLRM's ``ln_emb``) are accepted and stored
    as Python ints; a float or bool size still fails naming the argument."""
    sizes = np.array([7, 3])
    for layer in (tj.nn.Embedding(sizes[0], sizes[1]), tj.nn.EmbeddingBag(sizes[0], sizes[1], mode="sum")):
        assert type(layer.num_embeddings) is int and layer.weight.shape == (7, 3)
    assert tj.nn.Linear(np.int32(4), np.int64(2)).weight.shape == (2, 4)
    with pytest.raises(ValueError, match="num_embeddings must be a positive int, got 7.0"):
        tj.nn.EmbeddingBag(7.0, 3)
    with pytest.raises(ValueError, match="embedding_dim must be a positive int, got True"):
        tj.nn.Embedding(7, True)


def test_embedding_reprs_show_their_options_as_pytorch():
    torch = pytest.importorskip("torch")
    for L in (torch, tj):
        made = [L.nn.Embedding(3, 2, padding_idx=1, max_norm=1.0, norm_type=1.0, scale_grad_by_freq=True,
                               sparse=True),
                L.nn.Embedding(3, 2),
                L.nn.EmbeddingBag(6, 3, max_norm=2.0, scale_grad_by_freq=True, mode="max", padding_idx=1),
                L.nn.EmbeddingBag(6, 3, mode="sum")]
        if L is torch:
            want = [repr(m) for m in made]
    assert [repr(m) for m in made] == want


def test_embedding_subclasses_zero_the_padding_row_as_pytorch():
    torch = pytest.importorskip("torch")
    for L in (torch, tj):
        for cls in (L.nn.Embedding, L.nn.EmbeddingBag):
            class Custom(cls):
                def reset_parameters(self):
                    L.nn.init.constant_(self.weight, 2.0)
                    self._fill_padding_idx_with_zero()
            m = Custom(4, 2, padding_idx=1)
            assert m.weight.tolist() == [[2.0, 2.0], [0.0, 0.0], [2.0, 2.0], [2.0, 2.0]], (L.__name__, cls)
