"""A captured LSTM runs its loop feature-major (nn/recurrent.py `_lstm_feature_major`):
gate blocks are contiguous row blocks, one GEMM and one fused gate kernel per step, the
gate gradients one concat, the weight gradients hoisted; gradients equal PyTorch's."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.jit.autodiff import split
from tracejit.testing import kernel_cache_at

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True, scope="module")
def _kernels_in_session_tmp(tmp_path_factory):
    with kernel_cache_at(tmp_path_factory.getbasetemp() / "tracejit-kernels"):
        yield


def _loss(lib, m, x):
    out, state = m(x)
    h, c = state if isinstance(state, tuple) else (state, state * 0.5)
    return (out * out).sum() + (h * 1.5).sum() + (c * c).sum()


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("cfg", [dict(num_layers=2, batch_first=True), dict(bidirectional=True),
                                 dict(bias=False)], ids=["2-layers,batch_first", "bidirectional", "no-bias"])
def test_compiled_lstm_and_gru_gradients_match_torch(cfg, kind):
    tm = getattr(torch.nn, kind)(5, 4, **cfg)
    m = getattr(tj.nn, kind)(5, 4, **cfg)
    m.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    x0 = np.random.default_rng(3).standard_normal((3, 7, 5)).astype(np.float32)
    tx = torch.tensor(x0, requires_grad=True)
    _loss(torch, tm, tx).backward()
    f = tj.script(lambda x: _loss(tj, m, x))
    for _ in range(2):                        # capture, then the cached program
        for p in m.parameters():
            p.grad = None
        x = tj.tensor(x0, requires_grad=True)
        loss = f(x)
        loss.backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
        for (name, p), tp in zip(m.named_parameters(), tm.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def test_compiled_lstm_step_is_one_gemm_and_one_kernel_each_way():
    m = tj.nn.LSTM(5, 4)
    cf = tj.trace(lambda x: _loss(tj, m, x))
    cf(tj.tensor(np.ones((6, 2, 5), np.float32), requires_grad=True))
    g = cf.entries[0].graph
    fwd, bwd, _ = split(g, [True] * len(g.inputs))
    (fscan,) = [e for e in fwd.eqns if e.prim.name == "scan"]
    (rscan,) = [e for e in bwd.eqns if e.prim.name == "scan"]
    fbody, rbody = fscan.params["body_graph"], rscan.params["body_graph"]
    names = [e.prim.name for e in rbody.eqns]
    assert [e.prim.name for e in fbody.eqns].count("matmul") == 1       # W_hh @ h^T
    assert names.count("matmul") == 1                                  # dh only: dW_hh hoisted
    assert names.count("concat") == 1 and "index_add" not in names     # gate gradients
    assert rscan.params["n_carry"] == 2                                # dh, dc: no accumulators
    assert sum(e.prim.name == "matmul" for e in bwd.eqns) >= 2         # dW_hh, dW_ih after the loop
