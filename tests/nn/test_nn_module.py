"""nn.Module: registration, traversal, state_dict round trips, modes, dtype moves, hooks, repr."""
import copy

import numpy as np
import pytest

import tracejit as tj
from tracejit import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 3)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(3, 2, bias=False)
        self.scale = nn.Parameter(tj.ones(2))
        self.register_buffer("running", tj.zeros(2))
        self.register_buffer("scratch", tj.zeros(5), persistent=False)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) * self.scale + self.running


def test_parameter_is_tensor_subclass_sharing_memory():
    t = tj.tensor([1.0, 2.0])
    p = nn.Parameter(t)
    assert isinstance(p, nn.Parameter) and isinstance(p, tj.Tensor)
    assert p.requires_grad and p.is_leaf
    assert p._data is t._data
    assert type(p * 2) is tj.Tensor  # op results are plain tensors
    assert repr(p).startswith("Parameter containing:\ntensor([1., 2.]")
    assert not nn.Parameter(t, requires_grad=False).requires_grad
    with pytest.raises(TypeError, match="expected a Tensor"):
        nn.Parameter([1.0, 2.0])
    with pytest.raises(tj.errors.DTypeError):
        nn.Parameter(tj.tensor([1, 2]))


def test_registration_by_attribute_assignment():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "fc1.weight", "fc1.bias", "fc2.weight"]
    assert [n for n, _ in net.named_buffers()] == ["running", "scratch"]
    assert [n for n, _ in net.named_children()] == ["fc1", "act", "fc2"]
    assert [n for n, _ in net.named_modules()] == ["", "fc1", "act", "fc2"]
    assert len(list(net.modules())) == 4 and list(net.children())[0] is net.fc1
    assert [p.shape for p in net.parameters(recurse=False)] == [(2,)]
    assert net.get_submodule("fc1") is net.fc1
    assert net.get_parameter("fc1.bias") is net.fc1.bias
    assert "fc1" in dir(net) and "running" in dir(net)
    # reassigning a plain tensor attribute, deleting and re-registering
    net.extra = tj.ones(1)
    assert "extra" not in dict(net.named_buffers())
    del net.fc2
    assert "fc2.weight" not in dict(net.named_parameters())
    net.fc2 = nn.Linear(3, 2)
    assert "fc2.bias" in dict(net.named_parameters())


def test_shared_parameters_are_listed_once():
    lin = nn.Linear(2, 2)
    seq = nn.Sequential(lin, nn.ReLU(), lin)
    assert len(list(seq.parameters())) == 2
    assert list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_assignment_errors_name_the_attribute():
    net = Net()
    with pytest.raises(TypeError, match="'fc1'"):
        net.fc1 = tj.ones(3)
    with pytest.raises(TypeError, match="'scale'"):
        net.scale = tj.ones(2)
    with pytest.raises(TypeError, match="'running'"):
        net.running = 3.0
    net.scale = None  # allowed, as in PyTorch
    assert "scale" not in dict(net.named_parameters())

    class NoInit(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(tj.ones(1))

    with pytest.raises(AttributeError, match="before Module.__init__"):
        NoInit()
    with pytest.raises(KeyError, match="contain"):
        Net().register_buffer("a.b", tj.ones(1))
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        Net().nope


def test_state_dict_contents_and_round_trip():
    tj.manual_seed(0)
    a, b = Net(), Net()
    sd = a.state_dict()
    assert list(sd) == ["scale", "running", "fc1.weight", "fc1.bias", "fc2.weight"]  # scratch: not persistent
    assert not sd["fc1.weight"].requires_grad
    assert sd["fc1.weight"]._data is a.fc1.weight._data  # shares memory, like PyTorch
    w_before = b.fc1.weight
    res = b.load_state_dict(sd)
    assert res.missing_keys == [] and res.unexpected_keys == []
    assert b.fc1.weight is w_before  # copied in place, same Parameter object
    x = tj.randn(5, 4)
    np.testing.assert_array_equal(a(x).detach().numpy(), b(x).detach().numpy())


def test_load_state_dict_strict_and_non_strict():
    net = Net()
    sd = net.state_dict()
    del sd["fc2.weight"]
    sd["bogus"] = tj.ones(1)
    with pytest.raises(RuntimeError) as e:
        Net().load_state_dict(sd)
    assert '"fc2.weight"' in str(e.value) and '"bogus"' in str(e.value)
    res = Net().load_state_dict(sd, strict=False)
    assert res.missing_keys == ["fc2.weight"] and res.unexpected_keys == ["bogus"]


def test_load_state_dict_shape_mismatch_names_key_and_changes_nothing():
    net = Net()
    before = {k: v.numpy().copy() for k, v in net.state_dict().items()}
    sd = {k: v + 1 for k, v in Net().state_dict().items()}
    sd["fc1.weight"] = tj.ones(5, 4)
    with pytest.raises(RuntimeError, match=r"size mismatch for fc1.weight.*\(5, 4\).*\(3, 4\)"):
        net.load_state_dict(sd, strict=False)
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
    sd["fc1.weight"] = "not a tensor"
    with pytest.raises(RuntimeError, match="fc1.weight.*expected a Tensor"):
        net.load_state_dict(sd)


def test_train_eval_and_dropout():
    net = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    assert net.training and net[1].training
    assert net.eval() is net
    assert not net.training and not net[1].training
    x = tj.ones(4, 3)
    np.testing.assert_array_equal(net(x).detach().numpy(), net[0](x).detach().numpy())
    net.train()
    assert net[1].training
    with pytest.raises(ValueError):
        net.train("yes")


def test_to_dtype_keeps_parameter_identity():
    net = Net()
    w = net.fc1.weight
    net.fc1.weight.grad = tj.ones(3, 4)
    out = net.to(tj.float64)
    assert out is net and net.fc1.weight is w
    assert w.dtype is tj.float64 and w.grad.dtype is tj.float64 and w.requires_grad
    assert net.running.dtype is tj.float64
    assert net(tj.randn(2, 4, dtype=tj.float64)).dtype is tj.float64
    net.float()
    assert w.dtype is tj.float32
    net.to("cpu")
    with pytest.raises(TypeError, match="floating point"):
        net.to(tj.int64)


def test_zero_grad_requires_grad_apply():
    net = Net()
    net(tj.randn(2, 4)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(float(p.grad.abs().sum()) == 0.0 for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())
    seen = []
    assert net.apply(lambda m: seen.append(type(m).__name__)) is net
    assert seen == ["Linear", "ReLU", "Linear", "Net"]  # children first, like PyTorch


def test_forward_hooks():
    lin = nn.Linear(2, 2)
    calls = []
    h1 = lin.register_forward_pre_hook(lambda m, args: (args[0] * 0,))
    h2 = lin.register_forward_hook(lambda m, args, out: calls.append(out.shape) or out + 1)
    out = lin(tj.ones(3, 2))
    np.testing.assert_allclose(out.detach().numpy(), np.broadcast_to(lin.bias.detach().numpy() + 1, (3, 2)))
    assert calls == [(3, 2)]
    h1.remove()
    h2.remove()
    out = lin(tj.ones(1, 2))
    assert calls == [(3, 2)]


def test_missing_forward_and_custom_extra_repr():
    with pytest.raises(NotImplementedError, match="forward"):
        nn.Module()(1)


def test_repr_is_nested_like_pytorch():
    net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Sequential(nn.Tanh()))
    assert repr(net) == (
        "Sequential(\n"
        "  (0): Linear(in_features=2, out_features=3, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Sequential(\n"
        "    (0): Tanh()\n"
        "  )\n"
        ")")
    assert repr(nn.GELU(approximate="tanh")) == "GELU(approximate='tanh')"


def test_deepcopy_gives_independent_parameters():
    net = Net()
    twin = copy.deepcopy(net)
    assert twin.fc1.weight is not net.fc1.weight
    assert isinstance(twin.fc1.weight, nn.Parameter)
    np.testing.assert_array_equal(twin.fc1.weight.detach().numpy(), net.fc1.weight.detach().numpy())
    with tj.no_grad():
        twin.fc1.weight.add_(1.0)
    assert not np.array_equal(twin.fc1.weight.detach().numpy(), net.fc1.weight.detach().numpy())
