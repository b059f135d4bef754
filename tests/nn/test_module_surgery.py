"""Model surgery as PyTorch tutorials do it (freezing, replacing and popping layers,
partial state_dict loads, buffer lookup), run on tracejit and PyTorch side by side."""
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _net(lib):
    nn = lib.nn
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    m.register_buffer("scale", lib.ones(1), persistent=False)
    return m


@pytest.mark.parametrize("lib", [torch, tj], ids=["torch", "tracejit"])
def test_surgery(lib):
    m = _net(lib)
    assert m.get_buffer("1.running_mean") is m[1].running_mean
    assert m.get_buffer("scale") is m.scale
    with pytest.raises(AttributeError):
        m.get_buffer("0.weight")
    popped = m.pop(2)
    assert type(popped).__name__ == "ReLU" and len(m) == 3
    assert [n for n, _ in m.named_children()] == ["0", "1", "2"]
    sd = m.state_dict()
    sd.pop("0.bias")
    sd["extra"] = lib.ones(1)
    r = m.load_state_dict(sd, strict=False)
    assert (type(r).__name__, r.missing_keys, r.unexpected_keys) == ("_IncompatibleKeys", ["0.bias"], ["extra"])
    assert m.share_memory() is m


def test_sequential_pop_renumbers_and_slices():
    m = tj.nn.Sequential(tj.nn.ReLU(), tj.nn.Tanh(), tj.nn.Sigmoid())
    assert type(m.pop(-1)).__name__ == "Sigmoid"
    assert [n for n, _ in m.named_children()] == ["0", "1"]
    part = m.pop(slice(0, 1))
    assert isinstance(part, tj.nn.Sequential) and len(part) == 1 and len(m) == 1


@pytest.mark.parametrize("lib", [torch, tj], ids=["torch", "tracejit"])
def test_load_state_dict_result_text(lib):
    m = lib.nn.Linear(2, 2)
    assert repr(m.load_state_dict(m.state_dict())) == "<All keys matched successfully>"
    r = m.load_state_dict({"weight": m.weight.detach()}, strict=False)
    assert str(r) == "_IncompatibleKeys(missing_keys=['bias'], unexpected_keys=[])"
