"""tracejit.script(module): parameters and buffers are graph inputs (never constants),
optimizer updates are seen without recapture, train/eval switches recompile."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

nn = pytest.importorskip("tracejit.nn")


class Net(nn.Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.drop = nn.Dropout(p)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x, scale: float = 1.0):
        h = self.drop(self.fc1(x).relu())
        if scale > 1.0:
            h = h * scale
        return self.fc2(h)


def _np(t):
    return t.detach().numpy()


def test_parameters_are_graph_inputs_named_after_the_module(compiler):
    tj.manual_seed(0)
    net = Net().eval()
    cnet = tj.script(net, compiler=compiler)
    x = tj.tensor(np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32))
    np.testing.assert_allclose(_np(cnet(x)), _np(net(x)), rtol=1e-5, atol=1e-6)
    g = cnet.forward.entries[0].graph
    header = g.text(False).splitlines()[0]
    # the defaulted float is a runtime input too; parameters follow, never constants
    assert header == ("Net.forward(%x: f32[4,6], %scale: f32[], %fc1_weight: f32[8,6], %fc1_bias: f32[8], "
                      "%fc2_weight: f32[3,8], %fc2_bias: f32[3]) {")
    guards = cnet.explain(x)["guards"]
    assert "<captured fc1.weight (8, 6)>: Tensor f32[8,6] on cpu, requires_grad" in guards
    assert "training flags read: drop=False;" in guards   # (Linear never reads its flag)


def test_optimizer_updates_are_seen_without_recapture(compiler):
    tj.manual_seed(0)
    net = Net().eval()
    cnet = tj.script(net, compiler=compiler)
    rng = np.random.default_rng(0)
    x = tj.tensor(rng.standard_normal((5, 6)).astype(np.float32))
    y = tj.tensor(rng.standard_normal((5, 3)).astype(np.float32))
    opt = tj.optim.SGD(net.parameters(), lr=0.1)
    losses = []
    for step in range(5):
        opt.zero_grad()
        loss = ((cnet(x) - y) ** 2).mean()
        loss.backward()
        eager = ((net(x) - y) ** 2).mean()
        np.testing.assert_allclose(loss.item(), eager.item(), rtol=1e-5)
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    with tj.no_grad():  # by hand, as optimizers do
        net.fc2.bias.sub_(1.0)
        net.fc1.weight.data = net.fc1.weight.data * 0.5
    np.testing.assert_allclose(_np(cnet(x)), _np(net(x)), rtol=1e-5, atol=1e-6)
    st = cnet.cache_stats()
    assert st["compiles"] == 1 and st["hits"] == 5


def test_grads_reach_the_parameters():
    tj.manual_seed(0)
    net, ref = Net().eval(), Net().eval()
    ref.load_state_dict(net.state_dict())
    cnet = tj.script(net, compiler="interpret")
    x = tj.tensor(np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32))
    cnet(x, 2.0).sum().backward()
    ref(x, 2.0).sum().backward()
    for (n, p), (_, q) in zip(net.named_parameters(), ref.named_parameters()):
        np.testing.assert_allclose(_np(p.grad), _np(q.grad), rtol=1e-5, atol=1e-6, err_msg=n)


def test_scalar_argument_of_forward_is_a_runtime_input():
    net = Net().eval()
    cnet = tj.script(net, compiler="interpret")
    x = tj.ones(2, 6)
    for s in (0.5, 2.0, 3.0):
        np.testing.assert_allclose(_np(cnet(x, s)), _np(net(x, s)), rtol=1e-5, atol=1e-6)
    assert cnet.cache_stats()["compiles"] == 1


def test_train_eval_switch_recompiles_and_each_mode_keeps_its_entry():
    tj.manual_seed(0)
    net = Net(p=0.5)
    cnet = tj.script(net, compiler="interpret")
    x = tj.ones(64, 6)
    train_out = cnet(x)  # dropout active: random, differs from eval
    assert cnet.eval() is cnet  # methods returning the module return the wrapper
    eval_out = cnet(x)
    np.testing.assert_allclose(_np(eval_out), _np(net(x)), rtol=1e-5, atol=1e-6)
    assert not np.allclose(_np(train_out), _np(eval_out))
    st = cnet.cache_stats()
    assert st["compiles"] == 2
    assert "module 'drop': training guard failed: True -> False" in st["recompile_reasons"]
    cnet.train()
    again = cnet(x)
    assert not np.allclose(_np(again), _np(eval_out))  # back to the dropout entry
    assert "rand" in cnet.forward.entries[0].graph.text(False)
    assert "rand" not in cnet.forward.entries[1].graph.text(False)
    assert cnet.cache_stats()["compiles"] == 2
    net.drop.eval()  # the one submodule that reads its flag: the eval entry
    np.testing.assert_allclose(_np(cnet(x)), _np(eval_out), rtol=1e-6)
    assert cnet.cache_stats()["compiles"] == 2


@pytest.mark.parametrize("layer, recaptures", [(lambda: nn.GroupNorm(2, 4), False),
                                               (lambda: nn.Dropout(0.5), True),
                                               (lambda: nn.BatchNorm1d(4), True)])
def test_eval_recaptures_only_where_a_forward_reads_training(layer, recaptures):
    tj.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 4), layer(), nn.Linear(4, 3))
    cnet = tj.compile(net, backend="interpret")
    x = tj.tensor(np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32))
    cnet(x)
    net.eval()
    np.testing.assert_allclose(_np(cnet(x)), _np(net(x)), rtol=1e-5, atol=1e-6)
    assert cnet.cache_stats()["compiles"] == 1 + recaptures


def test_freezing_a_parameter_recompiles_with_a_reason():
    net = Net().eval()
    cnet = tj.script(net, compiler="interpret")
    cnet(tj.ones(2, 6))
    net.fc1.weight.requires_grad_(False)
    cnet(tj.ones(2, 6))
    assert cnet.cache_stats()["recompile_reasons"] == [
        "input '<captured fc1.weight (8, 6)>': requires_grad guard failed: True -> False"]


def test_compiled_module_delegates_attributes():
    net = Net()
    cnet = tj.script(net, compiler="interpret")
    assert cnet.fc1 is net.fc1
    assert [p for p in cnet.parameters()] == [p for p in net.parameters()]
    cnet.extra = 3
    assert net.extra == 3
    assert repr(cnet).startswith("CompiledNet(")


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.register_buffer("offset", tj.zeros(()))

    def forward(self, x):
        if x.mean() > 0:
            y = self.a(x)
        else:
            y = -x
        return y + self.offset


def test_buffers_are_inputs_and_forward_control_flow_is_scripted():
    g = Gate()
    cg = tj.script(g, compiler="interpret")
    for v in (1.0, -1.0):
        x = tj.ones(2, 4) * v
        np.testing.assert_allclose(_np(cg(x)), _np(g(x)), rtol=1e-6)
    g.offset.add_(5.0)  # a buffer update is seen too
    np.testing.assert_allclose(_np(cg(tj.ones(2, 4))), _np(g(tj.ones(2, 4))), rtol=1e-6)
    assert cg.cache_stats()["compiles"] == 1
    header = cg.forward.entries[0].graph.text(False).splitlines()[0]
    assert header == "Gate.forward(%x: f32[2,4], %a_weight: f32[4,4], %a_bias: f32[4], %offset: f32[]) {"


def test_trace_of_a_sequential():
    seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    cs = tj.trace(seq, compiler="interpret")
    x = tj.ones(3, 4)
    np.testing.assert_allclose(_np(cs(x)), _np(seq(x)), rtol=1e-6)
    assert cs(x).shape == (3, 2) and cs.cache_stats()["hits"] == 1


@pytest.mark.parametrize("runner", ["interpret", "compiled"])
def test_a_dropout_cnn_trains_as_eager_in_float64(runner):
    """Compiled training of Conv -> ReLU -> MaxPool -> Dropout -> Linear with SGD follows the
    eager run on the same batches from the same seed: the same dropout masks (the global
    generator consumed alike), the same max-pool tie-breaking (integer-valued images give
    exact ties), the same mask arithmetic. In float64 nothing is left to tell them apart
    but rounding; in float32 a rounding-sized difference can flip a near-tie or a ReLU at
    ~1e-6 and send the two runs down different paths after a few steps, as a 1-ulp change
    of the initial weights of the eager run alone does."""
    rng = np.random.default_rng(0)
    data = rng.integers(0, 3, (8, 16, 1, 12, 12)).astype(np.float64)
    labels = rng.integers(0, 10, (8, 16))

    def train(compiled):
        tj.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(6, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                              nn.Dropout(0.25), nn.Linear(32, 10)).to(tj.float64)
        forward = {"eager": model, "interpret": tj.script(model, compiler="interpret"),
                   "compiled": tj.script(model, compile="sync")}[compiled]
        opt = tj.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        tj.manual_seed(1)
        for x, y in zip(data, labels):
            loss = nn.functional.cross_entropy(forward(tj.tensor(x)), tj.tensor(y))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return np.array(losses), [_np(p) for p in model.parameters()]

    ref_losses, ref_params = train("eager")
    losses, params = train(runner)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-12, atol=1e-13)
    for a, b in zip(params, ref_params):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12)
