"""BatchNorm in a compiled training forward as per-channel sums and elementwise work
(jit/batchnorm_split.py): with the ReLU and a max pooling after it one channel group whose
last pass is the pooling, so the normalized
output is never written; the compiled step matches the step with the record kept
(``TRACEJIT_BN_SPLIT=0``: outputs, gradients, running statistics, to rounding: the sums run in
other orders); BatchNorm2d + ReLU + MaxPool2d matches PyTorch in training and eval, float32
and float64, odd sizes, padding and ceil_mode; by default every BatchNorm2d is split (a
LeakyReLU after it joins the channel group)."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.fusion import Group
from inputs import activation, training_variant

pytest.importorskip("numba")
torch = pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _net(T, dtype, pool=(2, 2, 0, False), state=None):
    """conv -> BatchNorm -> ReLU -> max-pool, twice, flattened (LeNet's shape, smaller), in
    tracejit or torch, of `dtype`; parameters and buffers from `state` when given."""
    k, s, p, ceil = pool

    class Net(T.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = T.nn.Conv2d(1, 6, 3), T.nn.BatchNorm2d(6)
            self.c2, self.b2 = T.nn.Conv2d(6, 8, 3), T.nn.BatchNorm2d(8)
            self.pool = T.nn.MaxPool2d(k, s, p, ceil_mode=ceil)

        def forward(self, x):
            x = self.pool(T.relu(self.b1(self.c1(x))))
            x = self.pool(T.relu(self.b2(self.c2(x))))
            return x.reshape(x.shape[0], -1)

    T.manual_seed(0)
    net = Net().to(getattr(T, np.dtype(dtype).name))
    if state is not None:
        with T.no_grad():
            for name, p in net.state_dict().items():
                p.copy_(T.tensor(state[name]))
    return net


def _step(T, net, x, y, call=None, calls=2):
    """`calls` training steps' (of `call`, default `net`) last output, then every gradient
    and buffer of `net`, as numpy."""
    out = None
    for _ in range(calls):
        out = (call or net)(T.tensor(x))
        ((out - T.tensor(y)) ** 2).mean().backward()
    def arr(t):   # (bf16 widens to float32 exactly: no ml_dtypes needed)
        return (t.float() if t.dtype == T.bfloat16 else t).numpy()
    return [arr(out.detach())] + [arr(p.grad) for p in net.parameters()] + [arr(b) for b in net.buffers()]


def _state(dtype):
    net = _net(torch, dtype)
    return {k: v.numpy().copy() for k, v in net.state_dict().items()}


def _compiled(monkeypatch, split: bool, dtype, x, y, pool=(2, 2, 0, False)):
    monkeypatch.setenv("TRACEJIT_BN_SPLIT", "1" if split else "0")
    net = _net(tj, dtype, pool, _state(dtype))
    net.train()
    cf = tj.script(net)
    res = _step(tj, net, x, y, cf)
    fwd, bwd = training_variant(cf.forward)[:2]
    return fwd, bwd, [r.copy() for r in res]


TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-10, atol=1e-12)}


def _channel_windows(plan) -> list:
    """The plan's groups of per-channel sums closed by a pooling (codegen_cpu_channels.py)."""
    return [it for it in plan.items if isinstance(it, Group) and it.rows and it.window is not None]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_step_fuses_and_matches_the_record(monkeypatch, dtype):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 1, 14, 14)).astype(dtype)
    y = rng.standard_normal((8, 32)).astype(dtype)
    fwd, bwd, got = _compiled(monkeypatch, True, dtype, x, y)
    names = [e.prim.name for e in fwd.graph.eqns]
    assert not {"batch_norm_stats", "batch_norm_forward", "batch_norm_values"} & set(names), names
    wins = _channel_windows(fwd)
    assert len(wins) == 2 and all(len(w.rows) == 2 for w in wins), fwd.describe()
    conv_out = {tuple(w.rows[0].inputs[0].aval.shape) for w in wins}
    assert conv_out == {(8, 6, 12, 12), (8, 8, 4, 4)}
    for w in wins:      # the normalized (N, C, H, W) value is never written
        assert all(tuple(v.aval.shape) not in conv_out for v in w.outputs)
    fwd0, _, kept = _compiled(monkeypatch, False, dtype, x, y)
    assert [e.prim.name for e in fwd0.graph.eqns].count("batch_norm_forward") == 2
    assert len(got) == len(kept) == 15
    for a, b in zip(got, kept):
        np.testing.assert_allclose(a, b, **TOL[dtype])
    # eager tracejit and PyTorch
    net = _net(tj, dtype, state=_state(dtype))
    net.train()
    for a, b in zip(got, _step(tj, net, x, y)):
        np.testing.assert_allclose(a, b, **TOL[dtype])
    tnet = _net(torch, dtype, state=_state(dtype))
    tnet.train()
    for a, b in zip(got, _step(torch, tnet, x, y)):
        np.testing.assert_allclose(a, b, **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pool", [(3, 2, 1, True), (2, 2, 0, True), (3, 1, 1, False)])
def test_odd_sizes_padding_and_ceil_mode_match_torch(monkeypatch, dtype, pool):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((5, 1, 15, 13)).astype(dtype)
    tnet = _net(torch, dtype, pool, _state(dtype))
    tnet.train()
    ref = _step(torch, tnet, x, 0.0, calls=1)
    y = rng.standard_normal(ref[0].shape).astype(dtype)
    ref = _step(torch, _reset(tnet, dtype, pool), x, y)
    fwd, _, got = _compiled(monkeypatch, True, dtype, x, y, pool)
    # (a ReLU the trace does not move after the pooling is saved for its gradient: then its
    # channel group writes it, and the pooling is a windows group of its own)
    assert len([g for g in fwd.items if isinstance(g, Group) and g.rows]) == 2, fwd.describe()
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, **TOL[dtype])
    # eval: the running statistics the two steps left, in both
    net = _net(tj, dtype, pool, state={k: v.detach().numpy() for k, v in tnet.state_dict().items()})
    net.eval()
    tnet.eval()
    cf = tj.script(net)
    for _ in range(2):
        out = cf(tj.tensor(x))
    np.testing.assert_allclose(out.detach().numpy(), tnet(torch.tensor(x)).detach().numpy(), **TOL[dtype])


def _reset(tnet, dtype, pool):
    fresh = _net(torch, dtype, pool, _state(dtype))
    fresh.train()
    return fresh


def test_normalized_output_read_elsewhere_is_still_right():
    bn = tj.nn.BatchNorm2d(3)
    bn.train()

    def f(x):
        z = bn(x)
        return F.max_pool2d(F.relu(z), 2).sum() + (z * z).mean()    # z read by the mean too

    x = tj.tensor(activation(np.random.default_rng(4), (4, 3, 6, 6), np.float32), requires_grad=True)
    cf = tj.script(f)
    cf(x).backward()
    fwd = training_variant(cf)[0]
    names = [e.prim.name for e in fwd.graph.eqns]
    assert "batch_norm_forward" not in names and any(isinstance(g, Group) and g.rows for g in fwd.items)
    g = x.grad.numpy().copy()
    stats = (bn.running_mean.numpy().copy(), bn.running_var.numpy().copy())
    tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    tbn = torch.nn.BatchNorm2d(3)
    tbn.train()
    tz = tbn(tx)
    (torch.nn.functional.max_pool2d(torch.relu(tz), 2).sum() + (tz * tz).mean()).backward()
    np.testing.assert_allclose(g, tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(stats[0], tbn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats[1], tbn.running_var.numpy(), rtol=1e-5, atol=1e-6)


def test_default_splits_every_batch_norm(monkeypatch):
    monkeypatch.delenv("TRACEJIT_BN_SPLIT", raising=False)
    bn1, bn2 = tj.nn.BatchNorm2d(3), tj.nn.BatchNorm2d(3)
    tb1, tb2 = torch.nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)

    def f(x):
        return F.max_pool2d(F.relu(bn1(x)), 2) + F.max_pool2d(F.leaky_relu(bn2(x), 0.2), 2)

    def tf(x):
        return (torch.nn.functional.max_pool2d(torch.relu(tb1(x)), 2)
                + torch.nn.functional.max_pool2d(torch.nn.functional.leaky_relu(tb2(x), 0.2), 2))

    xn = activation(np.random.default_rng(7), (4, 3, 7, 9), np.float32)
    x = tj.tensor(xn, requires_grad=True)
    cf = tj.script(f)
    (cf(x) ** 2).sum().backward()
    fwd = training_variant(cf)[0]
    names = [e.prim.name for e in fwd.graph.eqns]
    # the ReLU'd pair: one channel group closed by the pooling; the LeakyReLU (not moved
    # after the pooling): statistics, normalization and LeakyReLU one channel group (its
    # output, saved for the LeakyReLU's gradient, is written: the pooling is a group of its own)
    assert "batch_norm_forward" not in names, names
    chans = [g for g in fwd.items if isinstance(g, Group) and g.rows]
    assert len(chans) == 2 and len(_channel_windows(fwd)) == 1, fwd.describe()
    assert "leaky_relu" in [e.prim.name for g in chans if g.window is None for e in g.eqns], fwd.describe()
    tx = torch.tensor(xn, requires_grad=True)
    (tf(tx) ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    for b, tbn in ((bn1, tb1), (bn2, tb2)):
        np.testing.assert_allclose(b.running_var.numpy(), tbn.running_var.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 3])
def test_backward_is_a_channel_group_writing_the_gradient_channel_major(monkeypatch, dtype, n):
    """The training step's batch_norm_backward records are channel groups (their two sums in
    one pass, the input gradient written (C, N, H, W) by the next); the step's outputs and
    gradients match PyTorch's, a batch of one and odd sizes included."""
    rng = np.random.default_rng(8)
    pool = (3, 2, 1, True)
    x = rng.standard_normal((n, 1, 13, 11)).astype(dtype)
    tnet = _net(torch, dtype, pool, _state(dtype))
    tnet.train()
    y = rng.standard_normal(_step(torch, tnet, x, 0.0, calls=1)[0].shape).astype(dtype)
    ref = _step(torch, _reset(tnet, dtype, pool), x, y)
    _, bwd, got = _compiled(monkeypatch, True, dtype, x, y, pool)
    assert "batch_norm_backward" not in [e.prim.name for e in bwd.graph.eqns]
    chans = [g for g in bwd.items if isinstance(g, Group) and g.rows]
    assert len(chans) == 2 and all(len(g.rows) == 2 and len(g.cm_outputs) == 1 for g in chans), bwd.describe()
    assert "[i1, i0, i2, i3] =" in "".join(bwd.kernel_sources())
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, **TOL[dtype])
    monkeypatch.setenv("TRACEJIT_BN_SPLIT", "0")     # the records kept: the step's own kernels
    assert "batch_norm_backward" in [e.prim.name for e in _compiled(monkeypatch, False, dtype, x, y, pool)[1].graph.eqns]


def test_autocast_step_is_channel_groups_and_matches_eager(monkeypatch):
    """Under bf16 autocast the BatchNorms are channel groups too, each computing in float32
    on its bf16 input and closed by the pooling; the backward's BatchNorm gradient is
    rounded to bf16 in its group and read by the convolution backward with no other pass,
    and the poolings' records go over in the float32 form the forward wrote. Outputs,
    gradients and running statistics are eager autocast's bit for bit."""
    monkeypatch.delenv("TRACEJIT_BN_SPLIT", raising=False)
    from tracejit.compiler.cpu.gemm import bf16 as bf16_gemm
    from tracejit.ops.elementwise_logic import CAST
    # the products widened in the graph, as on a CPU without bf16 units (where they run on
    # the words, the backward still widens one record in a kernel of its own)
    monkeypatch.setattr(bf16_gemm, "_chosen", ["float32"])
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 1, 14, 14)).astype(np.float32)
    y = rng.standard_normal((4, 8 * 2 * 2)).astype(np.float32)
    state = _state(np.float32)
    res = []
    for compiled in (False, True):
        net = _net(tj, np.float32, state=state)
        net.train()
        cf = tj.script(net) if compiled else net
        with tj.autocast("cpu", dtype=tj.bfloat16):
            res.append(_step(tj, net, x, y, cf))
    fwd, bwd = training_variant(cf.forward)[:2]
    assert not {"batch_norm_forward", "batch_norm_backward"} & {e.prim.name for p in (fwd, bwd)
                                                                for e in p.graph.eqns}
    assert len(_channel_windows(fwd)) == 2, fwd.describe()
    # no kernel of the backward only widens a saved activation or record, or rounds the
    # BatchNorm gradient (batch dim 4; the weights' gradients are rounded on their own)
    lone_casts = [g for g in bwd.items if isinstance(g, Group) and all(e.prim is CAST for e in g.members)
                  and len(g.shape) >= 4 and 4 in g.shape[:2]]
    assert not lone_casts, bwd.describe()
    for a, b in zip(*res):
        np.testing.assert_array_equal(a, b)
