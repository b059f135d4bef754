"""The Elman RNN layer's whole-loop numba kernels (tracejit/compiler/cpu/kernels/rnn_kernels.py) against the layer
primitives' numpy forms (ops/rnn_prim.py, TRACEJIT_EAGER_KERNELS=0): forward and backward, tanh
and relu, both directions, float32 and float64, hidden sizes with and without a rest after the
register tiles, batches below and above the vector width."""
import numpy as np
import pytest

from tracejit.ops import rnn_prim
from tracejit.compiler.cpu.kernels import rnn_kernels

pytest.importorskip("numba", reason="the kernels are numba code")


@pytest.fixture(autouse=True)
def _sync(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")   # load the kernels at their first call


def _run(monkeypatch, kernels: bool, fn, *a, **kw):
    if kernels:
        monkeypatch.delenv("TRACEJIT_EAGER_KERNELS", raising=False)
    else:
        monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "0")
    return fn(np, *a, **kw)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
@pytest.mark.parametrize("H", [16, 21], ids=["H=16", "H=21"])
@pytest.mark.parametrize("N", [3, 61])   # 61: the packed GEMM's vector tiles and register transposes too
def test_kernels_equal_the_numpy_forms(monkeypatch, dtype, reverse, nonlinearity, H, N):
    assert rnn_kernels.forward_layer(dtype) is not None and rnn_kernels.backward_layer(dtype) is not None
    r = np.random.default_rng(9)
    L = 6
    a = lambda *s: r.standard_normal(s).astype(dtype)   # noqa: E731
    gi, w, b = a(L, N, H), a(H, H) * 0.4, a(H)
    h0 = a(N, H).T                       # a transposed view, as the layer passes it
    kw = dict(reverse=reverse, nonlinearity=nonlinearity)
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-13)
    hk = _run(monkeypatch, True, rnn_prim.RNN_LAYER.run, gi, w, b, h0, **kw)
    hn = _run(monkeypatch, False, rnn_prim.RNN_LAYER.run, gi, w, b, h0, **kw)
    assert np.isfinite(hk).all()
    if nonlinearity == "relu":
        assert (hn == 0).any() and (hn > 0).any()      # both sides of the kink are reached
    np.testing.assert_allclose(hk, hn, **tol)
    args = (a(L, H, N), gi, w, b, h0, hn)
    rk = _run(monkeypatch, True, rnn_prim.RNN_LAYER_BACKWARD.run, *args, **kw)
    rn = _run(monkeypatch, False, rnn_prim.RNN_LAYER_BACKWARD.run, *args, **kw)
    np.testing.assert_allclose(rk, rn, rtol=tol["rtol"], atol=tol["atol"] * np.abs(rn).max())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_loops_call_the_shared_product_module_by_address(dtype, monkeypatch):
    """Both loops call the packed product and packing of the GEMM template's panel module
    (compiler/cpu/gemm/template_panels.py) and the register transposes by address (as the GRU's and LSTM's loops do), not inlined copies of their own:
    the same five addresses as the GRU loop's, and the kernels still run."""
    from tracejit.compiler import diskcache
    from tracejit.compiler.cpu.kernels import lstm_kernels
    from tracejit.compiler.cpu.kernels import loader as native
    # All three loaded afresh (from the disk cache): an earlier test that cleared the
    # in-memory module cache (tests/ops/test_lstm_kernels.py) leaves loop kernels it loaded
    # holding the product module of their time, and this test failed after it
    monkeypatch.setattr(native, "_kernels", {})
    diskcache.clear_memory_cache()
    fwd, bwd = rnn_kernels.forward_layer(dtype), rnn_kernels.backward_layer(dtype)
    gru = lstm_kernels.gru_forward_layer(dtype)
    want = list(gru.__globals__["_FNS"])
    assert len(want) == 5 and all(want)
    assert list(fwd.__globals__["_FNS"]) == want and list(bwd.__globals__["_FNS"]) == want
    H, N, L = 5, 2, 3
    w = np.eye(H, dtype=dtype)           # h_t = tanh(h_{t-1} + gi_t + b), exact steps to compare
    gi = np.full((L, N, H), 0.25, dtype)
    b = np.zeros(H, dtype)
    h0 = np.zeros((H, N), dtype)
    hs = rnn_prim.RNN_LAYER.run(np, gi, w, b, h0)
    h = np.zeros((H, N))
    for t in range(L):
        h = np.tanh(h + 0.25)
        np.testing.assert_allclose(hs[t], h, rtol=1e-6 if dtype == "float32" else 1e-14)
