"""A batch size that changes becomes symbolic for every layer models use: a sweep of ten
sizes costs at most three captures, never runs eagerly, and every call (forward, gradients,
BatchNorm's running statistics) equals the eager module's."""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn as nn
import tracejit.nn.functional as F

SIZES = (2, 3, 5, 8, 13, 4, 7, 16, 9, 11)


class ConvBNPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.reshape(x.size(0), -1))


class Conv1dBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 4, 3)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class ConvTranspose(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(3, 2, 3, stride=2)

    def forward(self, x):
        return F.adaptive_avg_pool2d(self.conv(x), 1).flatten(1)


class Pools(nn.Module):
    """GroupNorm, InstanceNorm, average / max / adaptive pooling, Flatten, LayerNorm."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.gn, self.inorm = nn.GroupNorm(2, 4), nn.InstanceNorm2d(4)
        self.avg, self.max, self.adapt = nn.AvgPool2d(2), nn.MaxPool2d(2), nn.AdaptiveAvgPool2d((2, 2))
        self.flat, self.ln, self.fc = nn.Flatten(), nn.LayerNorm(16), nn.Linear(16, 5)

    def forward(self, x):
        x = self.conv(x)
        x = self.avg(self.gn(x)) + self.max(self.inorm(x))
        return self.fc(self.ln(self.flat(self.adapt(x))))


class Recurrent(nn.Module):
    def __init__(self, kind, batch_first, initial):
        super().__init__()
        self.kind, self.batch_first, self.initial = kind, batch_first, initial
        self.rnn = getattr(nn, kind)(4, 6, num_layers=2, batch_first=batch_first)

    def forward(self, x):
        if not self.initial:
            return self.rnn(x)[0]
        b = x.shape[0] if self.batch_first else x.shape[1]
        h = tj.zeros(2, b, 6) + 0.5
        state = (h, tj.zeros(2, b, 6) - 0.25) if self.kind == "LSTM" else h
        out, _ = self.rnn(x, state)
        return out


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x, padding):
        return self.attn(x, x, x, key_padding_mask=padding)[0]


class Encoder(nn.Module):
    def __init__(self, batch_first):
        super().__init__()
        self.batch_first = batch_first
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=batch_first)

    def forward(self, x, causal):
        return self.layer(x, src_mask=causal)


class LanguageModel(nn.Module):
    """Embedding -> LSTM -> Linear, the loss inside (reshape with -1, cross entropy)."""

    def __init__(self):
        super().__init__()
        self.emb, self.lstm, self.out = nn.Embedding(11, 6), nn.LSTM(6, 8, batch_first=True), nn.Linear(8, 11)

    def forward(self, x, y):
        h, _ = self.lstm(self.emb(x))
        return F.cross_entropy(self.out(h).reshape(-1, 11), y.reshape(-1))


def _causal():
    return tj.triu(tj.full((5, 5), float("-inf")), 1)


def _padding(b):
    mask = tj.zeros(b, 5, dtype=tj.bool_)
    mask[:, -1] = True
    return mask


CASES = {
    "conv2d-batchnorm-maxpool": (ConvBNPool, lambda b: (tj.randn(b, 3, 8, 8),)),
    "conv1d-batchnorm1d": (Conv1dBN, lambda b: (tj.randn(b, 3, 10),)),
    "convtranspose2d": (ConvTranspose, lambda b: (tj.randn(b, 3, 5, 5),)),
    "norms-and-pools": (Pools, lambda b: (tj.randn(b, 3, 8, 8),)),
    "multihead-attention-padding-mask": (Attention, lambda b: (tj.randn(b, 5, 8), _padding(b))),
    "encoder-layer-causal-mask": (lambda: Encoder(True), lambda b: (tj.randn(b, 5, 8), _causal())),
    "encoder-layer-sequence-first": (lambda: Encoder(False), lambda b: (tj.randn(5, b, 8), _causal())),
}


for _kind in ("LSTM", "GRU", "RNN"):
    for _first in (True, False):
        for _initial in (True, False):
            CASES[f"{_kind.lower()}{'-batch-first' if _first else ''}{'-initial-state' if _initial else ''}"] = (
                lambda k=_kind, f=_first, i=_initial: Recurrent(k, f, i),
                (lambda b: (tj.randn(b, 5, 4),)) if _first else (lambda b: (tj.randn(5, b, 4),)))


def _sweep(make, inputs, compiler, train):
    model = make()
    ref = copy.deepcopy(model)
    model.train(train)
    ref.train(train)
    cm = tj.trace(model, compiler=compiler)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # the recompile limit's warning
        for b in SIZES:
            args = inputs(b)
            with tj.set_grad_enabled(train):
                out, want = cm(*args), ref(*args)
            np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5,
                                       err_msg=f"batch {b}")
            if train:
                (out * out).sum().backward()
                (want * want).sum().backward()
                for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
                    np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-5,
                                               err_msg=f"batch {b}: gradient of {name}")
                    p.grad = q.grad = None
            for (name, t), (_, r) in zip(model.named_buffers(), ref.named_buffers()):
                np.testing.assert_allclose(t.numpy(), r.numpy(), rtol=1e-5, atol=1e-6,
                                           err_msg=f"batch {b}: buffer {name}")
    return cm.cache_stats()


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_batch_sweep_is_symbolic(case, train, compiler):
    st = _sweep(*CASES[case], compiler, train)
    assert st["compiles"] <= 3, st["recompile_reasons"]
    assert st["eager_fallbacks"] == 0 and st["hits"] + st["misses"] == len(SIZES)
    assert st["dynamic_dims"], "the batch dim never became symbolic"


def test_a_loss_inside_the_function_keeps_the_batch_symbolic(compiler):
    model = LanguageModel()
    ref = copy.deepcopy(model)
    cm = tj.trace(model, compiler=compiler)
    for b in SIZES:
        x, y = tj.randint(0, 11, (b, 7)), tj.randint(0, 11, (b, 7))
        loss, want = cm(x, y), ref(x, y)
        loss.backward()
        want.backward()
        np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-5)
        for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
            p.grad = q.grad = None
    st = cm.cache_stats()
    assert st["compiles"] <= 3 and st["eager_fallbacks"] == 0
    assert ("x", 0) in st["dynamic_dims"] and ("y", 0) in st["dynamic_dims"]


def _strided(nn_):
    return nn_.Sequential(nn_.Conv2d(3, 4, 3, stride=2, padding=1), nn_.BatchNorm2d(4), nn_.ReLU(),
                          nn_.MaxPool2d(2), nn_.Conv2d(4, 4, 3, stride=2), nn_.AvgPool2d(3, stride=2, padding=1),
                          nn_.ConvTranspose2d(4, 3, 4, stride=2, padding=1), nn_.Unfold(2, stride=2))


def test_image_sizes_stay_symbolic_through_strided_convs_and_pools(compiler):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tnet = _strided(torch.nn)
    net = _strided(nn)
    net.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in tnet.state_dict().items()})
    cm = tj.trace(net, dynamic=True, compiler=compiler)
    rng = np.random.default_rng(0)
    for h, w in ((100, 104), (117, 101), (110, 130), (123, 106)):   # (odd and even; quotients >= 2)
        x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
        out, want = cm(tj.tensor(x)), tnet(torch.tensor(x))
        np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)
        out.square().sum().backward()
        want.square().sum().backward()
        for (name, p), (_, q) in zip(net.named_parameters(), tnet.named_parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-3, atol=1e-4, err_msg=name)
            p.grad = q.grad = None
    assert cm.cache_stats()["compiles"] == 1, cm.cache_stats()["recompile_reasons"]


def test_a_floor_division_of_sizes_below_two_captures_again():
    cf = tj.trace(lambda x: F.max_pool2d(x, 2) * 2, dynamic=True, compiler="interpret")
    for s in (8, 9, 11, 6):
        assert cf(tj.randn(1, 1, s, s)).shape == (1, 1, s // 2, s // 2)
    assert cf.cache_stats()["compiles"] == 1
    assert cf(tj.randn(1, 1, 3, 5)).shape == (1, 1, 1, 2)   # (3 // 2 = 1: outside the guard)
    assert cf.cache_stats()["compiles"] == 2


_CEIL_POOLS = {
    "max2d": lambda F, x: F.max_pool2d(x, 3, stride=2, ceil_mode=True),
    "max2d_padded_indices": lambda F, x: F.max_pool2d(x, 2, 2, 1, ceil_mode=True, return_indices=True),
    "max1d": lambda F, x: F.max_pool1d(x[:, :, 0], 2, 3, padding=1, ceil_mode=True),
}


@pytest.mark.parametrize("name", sorted(_CEIL_POOLS))
def test_ceil_mode_max_pooling_is_one_capture_over_sizes_of_both_parities(name, compiler, monkeypatch):
    """ceil_mode's output length is one floor division of the size and its -inf margin a
    fixed bound: no guard on the last window's overhang, forward and gradient."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")   # (the kernels run from the first call)
    f = _CEIL_POOLS[name]
    cf = tj.trace(lambda x: f(F, x), dynamic=True, compiler=compiler)
    rng = np.random.default_rng(0)
    for hw in ((12, 15), (13, 16), (20, 17), (21, 30)):
        x = rng.standard_normal((1, 2) + hw).astype(np.float32)
        xt, xr = tj.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        out, want = cf(xt), f(torch.nn.functional, xr)
        for o, w in zip(*((out, want) if isinstance(want, tuple) else ((out,), (want,)))):
            np.testing.assert_array_equal(o.detach().numpy(), w.detach().numpy())
        (out[0] if isinstance(out, tuple) else out).square().sum().backward()
        (want[0] if isinstance(want, tuple) else want).square().sum().backward()
        np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]


@pytest.mark.parametrize("mode, corners", [("nearest", None), ("bilinear", False), ("bilinear", True)])
def test_interpolate_keeps_image_sizes_symbolic(mode, corners, compiler):
    torch = pytest.importorskip("torch")

    def f(x, skip, F=F):   # (an encoder-decoder's upsampling to a skip connection, and by 2)
        up = F.interpolate(x, size=skip.shape[-2:], mode=mode, align_corners=corners)
        return (up * skip).sum() + F.interpolate(x, scale_factor=2.0, mode=mode, align_corners=corners).square().sum()

    cf = tj.trace(f, dynamic=True, compiler=compiler)
    rng = np.random.default_rng(0)
    for h, w in ((9, 12), (16, 11), (13, 21)):
        x, skip = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, h // 2, w // 2), (2, 3, h, w)))
        xt, xr = tj.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        out, want = cf(xt, tj.tensor(skip)), f(xr, torch.tensor(skip), F=torch.nn.functional)
        out.backward()
        want.backward()
        np.testing.assert_allclose(out.item(), want.item(), rtol=1e-4)
        np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-4, atol=1e-4)
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]


@pytest.mark.parametrize("corners", [False, True])
def test_linear_interpolate_of_float64_keeps_its_precision(corners):
    """Symbolic sizes: a float64 image's linear weights in float64, as PyTorch's."""
    torch = pytest.importorskip("torch")

    def f(x, F=F):
        return F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=corners)

    cf = tj.trace(f, dynamic=True, compiler="interpret")
    rng = np.random.default_rng(0)
    for hw in ((6, 9), (11, 13)):
        x = rng.standard_normal((1, 2) + hw)
        np.testing.assert_allclose(cf(tj.tensor(x)).numpy(), f(torch.tensor(x), F=torch.nn.functional).numpy(),
                                   rtol=1e-12, atol=1e-12)


_SIZE_TABLED = {   # ops whose index tables follow the image size
    "adaptive_avg": lambda F, x: F.adaptive_avg_pool2d(x, (3, 4)),
    "adaptive_max": lambda F, x: F.adaptive_max_pool2d(x, 3, return_indices=True)[0],
    "adaptive_max1d": lambda F, x: F.adaptive_max_pool1d(x[:, :, 0], 4),
    "avg_ceil": lambda F, x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    "area": lambda F, x: F.interpolate(x, size=(5, 3), mode="area"),
    "bicubic": lambda F, x: F.interpolate(x, scale_factor=1.5, mode="bicubic"),
    "bicubic_corners": lambda F, x: F.interpolate(x, size=(6, 9), mode="bicubic", align_corners=True),
    "nearest_exact": lambda F, x: F.interpolate(x, scale_factor=2.0, mode="nearest-exact"),
    "antialias_bilinear": lambda F, x: F.interpolate(x, scale_factor=0.5, mode="bilinear", antialias=True),
    "antialias_bicubic": lambda F, x: F.interpolate(x, size=(5, 7), mode="bicubic", antialias=True,
                                                    align_corners=True),
}


@pytest.mark.parametrize("name", sorted(_SIZE_TABLED))
def test_size_tabled_ops_keep_image_sizes_symbolic(name):
    """Adaptive bins, ceil_mode windows and area/bicubic/nearest-exact source indices are
    computed from each call's sizes: one capture serves every size, forward and gradient."""
    torch = pytest.importorskip("torch")
    f = _SIZE_TABLED[name]
    cf = tj.trace(lambda x: f(F, x).square().sum(), dynamic=True, compiler="interpret")
    rng = np.random.default_rng(0)
    for hw in ((13, 17), (20, 22), (31, 26)):
        x = rng.standard_normal((2, 3) + hw)
        xt, xr = tj.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        out, want = cf(xt), f(torch.nn.functional, xr).square().sum()
        out.backward()
        want.backward()
        np.testing.assert_allclose(out.item(), want.item(), rtol=1e-10)
        np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]


def test_adaptive_bins_wider_than_the_bound_recompile():
    """The widest adaptive bin of a symbolic size is bounded by (size - 1) // out + 2,
    guarded >= 2: an input under twice the output size gets its own capture, still right."""
    torch = pytest.importorskip("torch")
    cf = tj.trace(lambda x: F.adaptive_max_pool2d(x, 4, return_indices=True), dynamic=True,
                  compiler="interpret")
    rng = np.random.default_rng(0)
    for s, compiles in ((13, 1), (21, 1), (7, 2), (9, 2)):
        x = rng.standard_normal((1, 2, s, s)).astype(np.float32)
        out, idx = cf(tj.tensor(x))
        want, widx = torch.nn.functional.adaptive_max_pool2d(torch.tensor(x), 4, return_indices=True)
        np.testing.assert_array_equal(out.numpy(), want.numpy())
        np.testing.assert_array_equal(idx.numpy(), widx.numpy())
        assert cf.cache_stats()["compiles"] == compiles, (s, cf.cache_stats()["recompile_reasons"])


def test_antialias_resizes_recompile_only_where_the_filter_stops_stretching(compiler, monkeypatch):
    """An antialias filter stretches with the scale while downsampling: one capture serves
    every input larger than the output, a smaller one captures again; compiled kernels."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")   # (the kernels run from the first call)

    def f(x, F=F):
        return F.interpolate(x, size=(6, 5), mode="bicubic", antialias=True)

    cf = tj.trace(f, dynamic=True, compiler=compiler)
    rng = np.random.default_rng(0)
    for hw, compiles in (((13, 17), 1), ((20, 11), 1), ((9, 26), 1), ((4, 3), 2), ((5, 4), 2)):
        x = rng.standard_normal((1, 2) + hw).astype(np.float32)
        np.testing.assert_allclose(cf(tj.tensor(x)).numpy(), f(torch.tensor(x), F=torch.nn.functional).numpy(),
                                   rtol=1e-5, atol=1e-6)
        assert cf.cache_stats()["compiles"] == compiles, (hw, cf.cache_stats()["recompile_reasons"])


def test_a_strided_conv_transpose_over_changing_image_sizes_captures_twice():
    """ConvTranspose2d of stride 2 (a decoder's upsampling) on images of a new size each
    call: its input gradient's size ``(2*s0 - 1) // 2 + 1`` is known to be ``s0``, so the
    sizes stay symbolic; values and gradients as PyTorch's."""
    torch = pytest.importorskip("torch")
    ref = torch.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1).double()
    mine = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1, dtype=tj.float64)
    mine.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    cm = tj.compile(mine)
    for h in (4, 5, 7, 9):
        v = np.random.default_rng(h).standard_normal((2, 3, h, h + 1))
        x, xt = tj.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
        y, yt = cm(x), ref(xt)
        np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
        (y ** 2).sum().backward(), (yt ** 2).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(mine.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-10)
    assert cm.cache_stats()["compiles"] == 2, cm.cache_stats()["recompile_reasons"]
