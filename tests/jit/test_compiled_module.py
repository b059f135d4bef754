"""A compiled ``nn.Module`` (``tracejit.compile(m)``, ``trace``/``script`` of a module) is an
``nn.Module`` that is the wrapped module in everything but its call; ``m.compile()``
compiles a module in place."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn as nn
import tracejit.nn.functional as F
from tracejit.jit import CompiledFunction


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3)
        self.bn = nn.BatchNorm2d(3)
        self.fc = nn.Linear(3 * 4 * 4, 5)
        self.frozen_calls = 0

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.reshape(x.shape[0], -1))

    def train(self, mode: bool = True):   # a subclass's override runs through the wrapper
        self.frozen_calls += 1
        return super().train(mode)

    def scale_(self, k: float):
        with tj.no_grad():
            self.fc.weight.mul_(k)
        return self


def _x(b=2):
    return tj.randn(b, 1, 10, 10)


def test_is_a_module_with_the_same_state_dict_keys_and_tensors():
    net = Net()
    c = tj.compile(net)
    assert isinstance(c, nn.Module)
    assert list(c.state_dict()) == list(net.state_dict()) == [
        "conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var",
        "bn.num_batches_tracked", "fc.weight", "fc.bias"]
    assert all(a is b for a, b in zip(c.parameters(), net.parameters()))
    assert [n for n, _ in c.named_modules()][1:] == ["conv", "bn", "fc"]
    other = Net()
    other.load_state_dict(c.state_dict())
    c.eval(), other.eval()
    x = _x()
    np.testing.assert_allclose(c(x).detach().numpy(), other(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_matches_pytorch_with_the_same_weights_by_state_dict_name():
    torch = pytest.importorskip("torch")
    tnet = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    seq = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    c = tj.compile(seq)
    c.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in tnet.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(c(tj.tensor(x)).detach().numpy(),
                               tnet(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert list(c.state_dict()) == list(tnet.state_dict())


def test_indexing_len_iteration_and_attributes_are_the_wrapped_modules():
    seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    c = tj.compile(seq)
    assert c[0] is seq[0] and c[-1] is seq[2] and len(c) == 3
    assert [type(m).__name__ for m in c] == ["Linear", "ReLU", "Linear"]
    assert isinstance(c[1:], nn.Sequential) and len(c[1:]) == 2
    assert c[2].out_features == 2 and bool(c)
    c.tag = "v1"
    assert seq.tag == "v1" and c.tag == "v1"
    net = tj.compile(Net())
    with pytest.raises(TypeError, match="'Net' object is not subscriptable"):
        net[0]
    with pytest.raises(AttributeError, match="'Net' object has no attribute 'nope'"):
        net.nope
    assert bool(net)   # a module without __len__ is still true


def test_methods_run_on_the_wrapped_module_and_return_the_wrapper():
    net = Net()
    c = tj.compile(net)
    assert c.eval() is c and not net.training and not net.bn.training
    assert net.frozen_calls == 1              # Net.train (the override), not Module.train
    assert c.train() is c and net.training and net.frozen_calls == 2
    assert c.scale_(2.0) is c                 # a method of the subclass returning self
    assert c.to(tj.float32) is c and c.requires_grad_(True) is c


def test_the_forward_is_compiled_and_hooks_run_around_it():
    net = Net()
    c = tj.compile(net, backend="eager")
    seen = []
    handle = c.register_forward_hook(lambda m, args, out: seen.append(out.shape))
    out = c(_x(3))
    assert seen == [(3, 5)] and c.cache_stats()["compiles"] == 1
    handle.remove()
    c(_x(3))
    assert seen == [(3, 5)] and c.cache_stats()["hits"] == 1
    c.register_forward_pre_hook(lambda m, args: (args[0] * 0,))
    np.testing.assert_allclose(c(_x(3)).detach().numpy(), net(tj.zeros(3, 1, 10, 10)).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert out.shape == (3, 5)


def test_a_compiled_module_inside_a_model_keeps_its_names():
    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = tj.compile(nn.Linear(4, 4))
            self.head = nn.Linear(4, 1)

        def forward(self, x):
            return self.head(self.body(x).relu())

    o = Outer()
    assert list(o.state_dict()) == ["body.weight", "body.bias", "head.weight", "head.bias"]
    co = tj.compile(o, backend="eager")
    x = tj.randn(2, 4)
    np.testing.assert_allclose(co(x).detach().numpy(), o(x).detach().numpy(), rtol=1e-6)
    o.eval()
    assert not o.body.training


def test_a_compiled_child_loads_its_parents_state_dict():
    torch = pytest.importorskip("torch")
    tnet = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    net = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    net[0], net[1] = tj.compile(net[0]), tj.compile(net[1])
    net.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in tnet.state_dict().items()})
    np.testing.assert_array_equal(net[0].weight.detach().numpy(), tnet[0].weight.detach().numpy())
    with pytest.raises(RuntimeError, match="Missing key.*1.running_var"):
        net.load_state_dict({k: v for k, v in net.state_dict().items() if k != "1.running_var"})


def test_trace_and_script_of_a_module_are_modules_too():
    seq = nn.Sequential(nn.Linear(4, 2))
    for c in (tj.trace(seq), tj.script(seq), tj.jit.trace(seq, tj.ones(1, 4))):
        assert isinstance(c, nn.Module) and c[0] is seq[0]


def test_compiling_a_compiled_module_compiles_the_module_afresh():
    net = Net()
    c = tj.compile(tj.compile(net), backend="eager")
    assert c._orig_mod is net and c.cache_stats()["compiles"] == 0


def test_module_compile_compiles_in_place():
    net = Net()
    keys = list(net.state_dict())
    assert net.compile(backend="eager") is None
    assert type(net) is Net and isinstance(net.forward, CompiledFunction)
    assert list(net.state_dict()) == keys
    net.eval()
    x = _x(4)
    y = net(x)
    assert net.forward.cache_stats()["compiles"] == 1
    np.testing.assert_allclose(y.detach().numpy(), Net.forward(net, x).detach().numpy(), rtol=1e-6)
    net(x)
    assert net.forward.cache_stats()["hits"] == 1


def test_module_compile_with_example_inputs_compiles_them_now():
    net = Net().eval()
    net.compile(_x(2), mode="max-autotune")
    st = net.forward.cache_stats()
    assert st["compiles"] == 1 and st["tiers"] == ["compiled"] and st["hits"] == 0


def test_module_compile_with_a_bad_setting_changes_nothing():
    net = Net()
    with pytest.raises(ValueError, match="unknown mode 'fast'"):
        net.compile(mode="fast")
    with pytest.raises(TypeError, match=r"Net.compile\(\) got unexpected keyword arguments \['dynamo'\]"):
        net.compile(dynamo=True)
    assert "forward" not in vars(net)
    net.compile(disable=True)
    assert "forward" not in vars(net)


def test_reset_forgets_every_compiled_entry():
    net = tj.compile(Net(), backend="eager")
    f = tj.compile(lambda x: x + 1, backend="eager")
    net(_x()), f(tj.ones(2))
    tj.compiler.reset()
    assert net.cache_stats()["entries"] == 0 and f.cache_stats()["entries"] == 0
    net(_x())
    assert net.cache_stats()["compiles"] == 1


def test_deepcopy_gives_an_independent_compiled_copy():
    net = tj.compile(Net(), backend="eager")
    net.eval()
    x = _x()
    net(x)
    twin = copy.deepcopy(net)
    assert isinstance(twin, nn.Module) and twin._orig_mod is not net._orig_mod
    assert twin.forward._bound_self is twin._orig_mod and twin.cache_stats()["entries"] == 0
    with tj.no_grad():
        twin.fc.bias.add_(1.0)             # the copy's own parameters: the original is unchanged
    np.testing.assert_allclose((twin(x) - net(x)).detach().numpy(), np.ones((2, 5), np.float32), rtol=1e-5)
    inplace = Net()
    inplace.compile(backend="eager")
    other = copy.deepcopy(inplace)
    assert other.forward._bound_self is other and other.forward is not inplace.forward
