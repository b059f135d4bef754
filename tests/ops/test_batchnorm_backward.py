"""Batch norm's backward as one primitive (ops/batchnorm_prim.py ``batch_norm_backward``): the
record (C*N*L + 2*C,) equals the two-pass form (backward_reduce, then backward_input), its
input gradient is channel-major, eager and compiled training use it, and its VJP (the
chain rule through the two-pass primitives' VJPs) gives second derivatives in every part."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.cpu.kernels import channel_forms as CF
from tracejit.ops import batchnorm_prim as B
from tracejit.compiler.cpu.kernels import loader as native
from inputs import activation

pytest.importorskip("numba")
SEED = 0


def _inputs(shape, dtype, channel_major, seed=0):
    rng = np.random.default_rng(seed)
    x = activation(rng, shape, dtype, channel_major)
    c = shape[1]
    g = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal(c).astype(dtype)
    return x, g, w


def _parts(rec, shape):
    c = shape[1]
    count = (rec.shape[0] - 2 * c) // c
    gx = rec[:c * count].reshape((c, shape[0]) + tuple(shape[2:])).swapaxes(0, 1)
    return gx, rec[c * count:].reshape(2, c)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,channel_major", [((8, 3, 5, 6), False), ((8, 3, 5, 6), True),
                                                 ((7, 4), False), ((5, 3, 9), True)])
def test_record_equals_the_two_pass_form(monkeypatch, dtype, shape, channel_major):
    x, g, w = _inputs(shape, dtype, channel_major)
    st = B.BATCH_NORM_STATS.run(np, x)
    rec = B.BN_BACKWARD.run(np, g, x, st, w, 1e-5)
    assert rec.shape == (int(np.prod(shape)) + 2 * shape[1],) and rec.dtype == dtype
    red = B.BN_BACKWARD_REDUCE.run(np, g, x, st, 1e-5)
    want = (B.BN_BACKWARD_INPUT.run(np, g, x, st, w, red, 1e-5), red)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for got, exp, name in zip(_parts(rec, shape), want, ("gx", "reduce")):
        np.testing.assert_allclose(got, exp, rtol=tol, atol=tol * 10, err_msg=name)
    monkeypatch.setattr(CF, "_run", lambda *a: False)     # the numpy forms
    rec_np = B.BN_BACKWARD.run(np, g, x, st, w, 1e-5)
    np.testing.assert_allclose(rec, rec_np, rtol=tol, atol=tol * 10)
    # against the formula, float64
    x64, g64, w64 = (a.astype(np.float64) for a in (x, g, w))
    dims = (0,) + tuple(range(2, len(shape)))
    view = (1, -1) + (1,) * (len(shape) - 2)
    n = x.size // shape[1]
    xhat = (x64 - x64.mean(dims, keepdims=True)) / np.sqrt(x64.var(dims, keepdims=True) + 1e-5)
    sg, sgx = g64.sum(dims, keepdims=True), (g64 * xhat).sum(dims, keepdims=True)
    gx = w64.reshape(view) / np.sqrt(x64.var(dims, keepdims=True) + 1e-5) * (g64 - sg / n - xhat * sgx / n)
    np.testing.assert_allclose(_parts(rec, shape)[0], gx, rtol=tol * 50, atol=tol * 50)
    np.testing.assert_allclose(_parts(rec, shape)[1], np.stack([sg.ravel(), sgx.ravel()]),
                               rtol=tol * 50, atol=tol * 50)


def test_the_kernel_ran_and_the_input_gradient_is_channel_major():
    x, g, w = _inputs((4, 3, 5, 5), np.float32, False)
    X, W = tj.tensor(x, requires_grad=True), tj.tensor(w, requires_grad=True)
    y = tj.nn.functional.batch_norm(X, None, None, W, tj.zeros(3), True)
    y.backward(tj.tensor(g))
    loaded = {k[1] for k, v in native._kernels.items() if k[0] == "channels" and v.fn is not None}
    assert "backward" in loaded
    gx = _parts(B.BN_BACKWARD.run(np, g, x, B.BATCH_NORM_STATS.run(np, x), w, 1e-5), x.shape)[0]
    # (C, N, H, W) memory: a C-contiguous (C, N, H, W) block at the record's start
    assert np.swapaxes(gx, 0, 1).flags.c_contiguous
    np.testing.assert_allclose(X.grad.numpy(), gx, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("channel_major", [False, True])
def test_later_calls_of_a_signature_take_its_bound_kernel(monkeypatch, channel_major):
    """After a signature's first kernel call its later calls skip the lookup (channel_forms
    `_bound`): new values, the numpy form's results."""
    shape = (6, 5, 3, 2)
    outs = []
    for seed in (1, 2, 3):
        x, g, w = _inputs(shape, np.float32, channel_major, seed)
        st = B.BATCH_NORM_STATS.run(np, x)
        outs.append((B.BN_BACKWARD.run(np, g, x, st, w, 1e-5), (g, x, st, w)))
    assert any(k[0] == "backward" and k[1] == shape for k in CF._bound)
    monkeypatch.setattr(CF, "_run", lambda *a: False)     # the numpy forms
    for rec, args in outs:
        np.testing.assert_allclose(rec, B.BN_BACKWARD.run(np, *args, 1e-5), rtol=2e-5, atol=2e-4)


def test_record_shape_rule_error():
    with pytest.raises(ValueError, match=r"batch_norm_backward: gradient \(4, 3\) and input \(4, 3, 2\)"):
        B.BN_BACKWARD.rule(tj.zeros(4, 3), tj.zeros(4, 3, 2), tj.zeros(2, 3), tj.ones(3), eps=1e-5)


def test_second_derivatives_through_every_part_match_torch():
    """grad of (gx, gw, gb) with create_graph: the record's VJP, vs PyTorch."""
    torch = pytest.importorskip("torch")
    x, g, w = _inputs((5, 3, 4), np.float64, True, seed=7)
    b = np.linspace(-1, 1, 3)
    c = np.random.default_rng(1).standard_normal(3)

    def run(lib, tensor, fn):
        X, W, Bb = (tensor(a, requires_grad=True) for a in (x, w, b))
        y = fn(X, None, None, W, Bb, True)
        gx, gw, gb = lib.autograd.grad((y * tensor(g)).sum(), [X, W, Bb], create_graph=True)
        loss = (gx * gx * gx).sum() + (gw * tensor(c)).sum() + (gb * gw).sum()
        return [t.detach().numpy() for t in lib.autograd.grad(loss, [X, W])]

    got = run(tj, tj.tensor, tj.nn.functional.batch_norm)
    want = run(torch, torch.tensor, torch.nn.functional.batch_norm)
    for a, e in zip(got, want):
        np.testing.assert_allclose(a, e, rtol=1e-8, atol=1e-10)
        assert np.abs(e).max() > 1e-3


@pytest.mark.parametrize("compiled", [False, True])
def test_conv_bn_relu_pool_block_matches_torch(compiled):
    """The CNN block the record serves (its input gradient feeds the convolution's backward
    GEMM as a strided view): values and every gradient vs PyTorch by state_dict."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 2, 10, 10)).astype(np.float32)

    def block(nn):
        return nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(4, 5, 3), nn.BatchNorm2d(5), nn.ReLU())

    tm = block(torch.nn)
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for p in tm.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    m = block(tj.nn)
    m.load_state_dict({k: tj.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    fwd = tj.script(m) if compiled else m
    X = tj.tensor(x, requires_grad=True)
    Xt = torch.tensor(x, requires_grad=True)
    for _ in range(2):   # a compiled module's second call runs its compiled plan
        for p in m.parameters():
            p.grad = None
        tm.zero_grad()
        X.grad = None
        Xt.grad = None
        y = fwd(X)
        (y * y).sum().backward()
        yt = tm(Xt)
        (yt * yt).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(X.grad.numpy(), Xt.grad.numpy(), rtol=1e-3, atol=1e-3)
    tp = dict(tm.named_parameters())
    for name, p in m.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), tp[name].grad.numpy(), rtol=1e-3, atol=1e-3,
                                   err_msg=name)
    tb = dict(tm.named_buffers())
    for name, buf in m.named_buffers():
        np.testing.assert_allclose(buf.numpy(), tb[name].numpy(), rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("x_cm,g_cm", [(True, False), (False, True), (True, True), (False, False)])
def test_numpy_form_of_two_memory_orders_gives_the_bits_of_the_two_pass_form(monkeypatch, x_cm, g_cm):
    # A conv's channel-major activation against pooling's C-contiguous gradient: the numpy
    # form copies g into x's order (np.copyto: one layout for its elementwise ops and sums);
    # the record must still be bitwise the two-pass form's (its reduce copies g into x's
    # order too).
    shape = (6, 5, 7, 4)
    x, _, w = _inputs(shape, np.float32, x_cm, seed=3)
    g = activation(np.random.default_rng(4), shape, np.float32, g_cm) - 5
    monkeypatch.setattr(CF, "_run", lambda *a: False)     # the numpy forms
    st = B.BATCH_NORM_STATS.run(np, x)
    copies, real_copyto = [], np.copyto
    monkeypatch.setattr(B.np, "copyto", lambda *a, **k: copies.append(1) or real_copyto(*a, **k))
    rec = B.BN_BACKWARD.run(np, g, x, st, w, 1e-5)
    monkeypatch.setattr(B.np, "copyto", real_copyto)
    assert len(copies) == (g_cm != x_cm)
    red = B.BN_BACKWARD_REDUCE.run(np, g, x, st, 1e-5)
    gx = B.BN_BACKWARD_INPUT.run(np, g, x, st, w, red, 1e-5)
    np.testing.assert_array_equal(_parts(rec, shape)[1], red)
    np.testing.assert_array_equal(_parts(rec, shape)[0], gx)
    assert np.abs(gx).max() > 0.1
