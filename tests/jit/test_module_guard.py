"""A compiled module's captures are guarded on the module state they read
(jit/module_guard.py): changed attributes recapture, rebound tensors are followed, and
nothing is looked at again while no module changed."""
import numpy as np
import pytest

import tracejit as tj
import tracejit.nn as nn
from tracejit.jit import module_guard


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.temp, self.use_bias, self.steps = 1.0, True, 0
        self.mask = tj.ones(2)

    def forward(self, x):
        y = self.lin(x) / self.temp * self.mask
        return y + 1.0 if self.use_bias else y


def _pair():
    tj.manual_seed(0)
    m = Scaled()
    return m, tj.compile(m), tj.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))


def _same(cm, m, x):
    np.testing.assert_array_equal(cm(x).detach().numpy(), m(x).detach().numpy())


@pytest.mark.parametrize("attr,value", [("temp", 2.0), ("use_bias", False)])
def test_a_read_attribute_that_changes_captures_again(attr, value):
    m, cm, x = _pair()
    _same(cm, m, x)
    setattr(m, attr, value)
    _same(cm, m, x)
    stats = cm.cache_stats()
    assert stats["compiles"] == 2
    assert any(f"attribute {attr!r} changed" in r for r in stats["recompile_reasons"])


def test_an_attribute_the_forward_never_reads_changes_freely():
    m, cm, x = _pair()
    cm(x)
    for i in range(5):
        m.steps = i
        _same(cm, m, x)
    assert cm.cache_stats()["compiles"] == 1


def test_rebound_tensors_are_followed_without_capturing_again():
    m, cm, x = _pair()
    cm(x)
    m.lin.weight = nn.Parameter(tj.ones(2, 3))
    _same(cm, m, x)
    m.mask = tj.tensor([0.0, 2.0])
    _same(cm, m, x)
    assert cm.cache_stats()["compiles"] == 1
    m.lin.weight = nn.Parameter(tj.full((2, 3), 0.5), requires_grad=False)   # a new capture
    _same(cm, m, x)
    assert cm.cache_stats()["compiles"] == 2


def test_a_swapped_submodule_is_a_new_capture():
    m, cm, x = _pair()
    cm(x)
    m.lin = nn.Linear(3, 2)
    _same(cm, m, x)
    assert cm.cache_stats()["compiles"] == 2
    assert any("submodules changed" in r for r in cm.cache_stats()["recompile_reasons"])


def test_legacy_weight_norm_trains_compiled_as_eager():
    tj.manual_seed(1)
    a = nn.utils.weight_norm(nn.Linear(3, 2))
    b = nn.utils.weight_norm(nn.Linear(3, 2))
    b.load_state_dict(a.state_dict())
    cb = tj.compile(b)
    oa, ob = tj.optim.SGD(a.parameters(), lr=0.5), tj.optim.SGD(b.parameters(), lr=0.5)
    x = tj.ones(4, 3)
    for _ in range(3):
        ya, yb = a(x), cb(x)
        np.testing.assert_allclose(yb.detach().numpy(), ya.detach().numpy(), rtol=1e-6, atol=1e-7)
        for y, o in ((ya, oa), (yb, ob)):
            (y * y).sum().backward()
            o.step()
            o.zero_grad()
    np.testing.assert_allclose(b.weight_v.detach().numpy(), a.weight_v.detach().numpy(), rtol=1e-6)
    assert cb.cache_stats()["compiles"] == 1


def test_no_module_change_means_no_second_look(monkeypatch):
    m, cm, x = _pair()
    cm(x)
    cm(x)
    looks = []
    monkeypatch.setattr(module_guard._StateCheck, "_look", lambda self: looks.append(1) or True)
    for _ in range(3):
        cm(x)
    assert looks == []
    m.steps = 7
    cm(x)
    assert looks == [1]


def test_reads_are_noted_only_while_capturing():
    assert "__getattribute__" not in vars(nn.Module)
    with module_guard.recording() as read:
        m = Scaled()
        m.temp
        assert "__getattribute__" in vars(nn.Module)
    assert (id(m), "temp") in read and "__getattribute__" not in vars(nn.Module)


def test_a_module_passed_as_an_argument_is_guarded_like_a_compiled_module():
    m, _, x = _pair()
    f = tj.compile(lambda mod, inp: mod(inp).sum())
    assert float(f(m, x)) == float(m(x).sum())
    m.lin.weight = nn.Parameter(m.lin.weight.detach() * 2)      # rebound: followed, no recapture
    assert float(f(m, x)) == float(m(x).sum())
    m.mask = tj.zeros(2)                                           # a rebound tensor attribute
    assert float(f(m, x)) == float(m(x).sum())
    m.temp = 4.0                                                   # a read attribute: captures again
    assert float(f(m, x)) == float(m(x).sum())
    m.eval()
    assert float(f(m, x)) == float(m(x).sum())
    assert any("temp" in r for r in f.cache_stats()["recompile_reasons"])


@pytest.mark.parametrize("kind", ["forward", "forward_pre"])
def test_hook_registered_after_compiling_runs_in_the_compiled_module(kind):
    """A forward (pre-)hook registered on a submodule after the first compiled call runs on
    later calls, and removing it brings back the first capture."""
    tj.manual_seed(0)
    m = tj.nn.Sequential(tj.nn.Linear(3, 3), tj.nn.ReLU())
    cm = tj.compile(m)
    x = tj.randn(4, 3)
    np.testing.assert_allclose(cm(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-6)
    if kind == "forward":
        h = m[0].register_forward_hook(lambda mod, args, out: out * 0.0 + 1.0)
    else:
        h = m[0].register_forward_pre_hook(lambda mod, args: (args[0] * 0.0,))
    np.testing.assert_allclose(cm(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-6)
    assert "hooks changed" in cm.cache_stats()["recompile_reasons"][-1]
    h.remove()
    np.testing.assert_allclose(cm(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-6)
    assert cm.cache_stats()["compiles"] == 2


def test_tensors_rebound_without_setattr_are_followed():
    # functional_call, load_state_dict(assign=True) and Module._apply put tensors in a
    # module's tables directly; the compiled forward must read the tensors there now,
    # as PyTorch's functional_call and assign documentation say the module then uses
    from tracejit.func import functional_call

    class Shifted(Scaled):
        def __init__(self):
            super().__init__()
            self.register_buffer("shift", tj.ones(2))

        def forward(self, x):
            return super().forward(x) + self.shift
    _, _, x = _pair()
    m = Shifted()
    cm = tj.compile(m)
    _same(cm, m, x)
    for k in (2.0, 3.0):   # the adapted weights of a meta-learning inner step
        params = {n: p * k for n, p in m.named_parameters()}
        np.testing.assert_allclose(functional_call(cm, params, (x,)).detach().numpy(),
                                   functional_call(m, params, (x,)).detach().numpy(), rtol=1e-6)
    _same(cm, m, x)   # the module's own tensors are back in place
    state = dict(m.state_dict(), shift=tj.full((2,), 5.0))
    m.load_state_dict(state, assign=True)
    np.testing.assert_allclose(cm(x).detach().numpy(), (Scaled.forward(m, x) + 5.0).detach().numpy())
    assert cm.cache_stats()["compiles"] == 1   # followed, not captured again


def _grads(m) -> list:
    return [p.grad.numpy().copy() for p in m.parameters()]


def test_a_sibling_module_runs_the_first_ones_capture_on_its_own_tensors():
    m, cm, x = _pair()
    tj.manual_seed(1)
    other = Scaled()
    other.mask = tj.tensor([2.0, -1.0])
    twin = Scaled()
    twin.load_state_dict(other.state_dict())
    twin.mask = other.mask
    co = tj.compile(other)
    _same(cm, m, x)
    y = co(x)   # the first's capture, on the sibling's weights and mask
    np.testing.assert_allclose(y.detach().numpy(), twin(x).detach().numpy(), rtol=1e-6)
    assert co.cache_stats()["compiles"] == 0 and co.cache_stats()["entries"] == 1
    y.sum().backward()
    twin(x).sum().backward()
    for got, want in zip(_grads(other), _grads(twin)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert m.lin.weight.grad is None
    tj.compiler.wait()
    assert co.cache_stats()["tiers"] == cm.cache_stats()["tiers"] == ["compiled"]
    _same(co, twin, x)


class Listed(nn.Module):
    def __init__(self, scale, act=None):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.scales = [tj.tensor([scale])]
        self.act = act or nn.ReLU()

    def forward(self, x):
        return self.act(self.lin(x)) * self.scales[0]


@pytest.mark.parametrize("change", ["temp", "bias", "hook", "list", "act", "eval", "tied", "untied"])
def test_a_sibling_whose_state_differs_captures_its_own(change):
    tj.manual_seed(0)
    if change in ("list", "act"):   # a tensor in a list attribute; another activation module
        a, b = Listed(2.0), Listed(3.0 if change == "list" else 2.0, nn.Tanh() if change == "act" else None)
    else:
        a, b = Scaled(), Scaled()
    if change == "temp":
        b.temp = 2.0
    elif change == "bias":
        b.lin = nn.Linear(3, 2, bias=False)
    elif change == "hook":
        b.lin.register_forward_hook(lambda mod, args, out: out * 3.0)
    elif change == "eval":   # Dropout reads its flag: eval's capture is not training's
        a.lin, b.lin = (nn.Sequential(nn.Linear(3, 2), nn.Dropout(0.5)) for _ in range(2))
        b.eval()
    elif change in ("tied", "untied"):   # one weight twice in one tree, two in the other
        for m in (a, b):
            m.lin = nn.Sequential(nn.Linear(3, 3, bias=False), nn.Linear(3, 3, bias=False), nn.Linear(3, 2))
        tied = a if change == "tied" else b
        tied.lin[1].weight = tied.lin[0].weight
    x = tj.randn(2, 3)
    ca, cb = tj.compile(a, backend="interpret"), tj.compile(b, backend="interpret")
    ca(x)
    np.testing.assert_allclose(cb(x).detach().numpy(), b(x).detach().numpy(), rtol=1e-6)
    assert cb.cache_stats()["compiles"] == 1


def test_a_sibling_writes_its_own_running_statistics():
    nets = [nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)) for _ in range(3)]
    nets[2].load_state_dict(nets[1].state_dict())
    ca, cb = (tj.compile(n, backend="interpret") for n in nets[:2])
    x = tj.randn(5, 3)
    ca(x)
    before = nets[0][1].running_mean.numpy().copy()
    np.testing.assert_allclose(cb(x * 2).detach().numpy(), nets[2](x * 2).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert cb.cache_stats()["compiles"] == 0
    np.testing.assert_allclose(nets[1][1].running_mean.numpy(), nets[2][1].running_mean.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(nets[0][1].running_mean.numpy(), before)


def test_a_none_buffer_set_to_a_tensor_captures_again():
    """A forward that branches on a buffer registered as None: setting it later (outside
    the call, or by the call itself) must not keep running the capture that saw None."""
    class Lazy(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", None)

        def forward(self, x):
            return x * 0 if self.b is None else x + self.b

    m = Lazy()
    f = tj.compile(m)
    assert f(tj.ones(2)).tolist() == [0.0, 0.0]
    m.b = tj.full((2,), 3.0)
    assert f(tj.ones(2)).tolist() == [4.0, 4.0]
    assert "b" in m._buffers
