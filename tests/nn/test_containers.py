"""Container mutations that remove submodules (del, pop, clear) after a module was
compiled: the compiled module follows the new tree, as eager calls do."""
import numpy as np
import pytest

import tracejit as tj
from tracejit import nn


class Chain(nn.Module):
    def __init__(self):
        super().__init__()
        self.d = nn.ModuleDict({"a": nn.Linear(2, 2), "b": nn.Tanh()})

    def forward(self, x):
        for k in self.d:
            x = self.d[k](x)
        return x


@pytest.mark.parametrize("change", [
    lambda m: m.__delitem__(1), lambda m: m.pop(1), lambda m: m.__delitem__(slice(1, None))],
    ids=["del", "pop", "del slice"])
def test_a_compiled_sequential_follows_a_removed_layer(change):
    model = nn.Sequential(nn.Linear(2, 3), nn.Tanh())
    compiled = tj.compile(model)
    x = tj.randn(4, 2)
    compiled(x)
    compiled(x)
    change(model)
    np.testing.assert_array_equal(compiled(x).detach().numpy(), model(x).detach().numpy())


@pytest.mark.parametrize("change", [lambda d: d.__delitem__("b"), lambda d: d.pop("b"),
                                    lambda d: d.clear()], ids=["del", "pop", "clear"])
def test_a_compiled_module_follows_a_module_dict_that_lost_an_entry(change):
    model = Chain()
    compiled = tj.compile(model)
    x = tj.randn(3, 2)
    compiled(x)
    compiled(x)
    change(model.d)
    np.testing.assert_array_equal(compiled(x).detach().numpy(), model(x).detach().numpy())


def test_parameter_dict_orders_a_plain_dict_by_key_as_pytorch():
    """The order sets parameters(), so an optimizer's saved state indexes the same
    parameters in both; an OrderedDict, pairs and ModuleDict keep their order."""
    torch = pytest.importorskip("torch", reason="compares with PyTorch")
    from collections import OrderedDict

    def names(m):
        made = [m.nn.ParameterDict({"z": m.nn.Parameter(m.ones(1)), "b": m.nn.Parameter(m.ones(2))}),
                m.nn.ParameterDict(OrderedDict(z=m.nn.Parameter(m.ones(1)), b=m.nn.Parameter(m.ones(2)))),
                m.nn.ParameterDict([("z", m.nn.Parameter(m.ones(1))), ("b", m.nn.Parameter(m.ones(2)))]),
                m.nn.ModuleDict({"z": m.nn.Linear(1, 1), "b": m.nn.Linear(1, 1)})]
        made[0].update({"y": m.nn.Parameter(m.ones(1)), "a": m.nn.Parameter(m.ones(1))})
        return [[n for n, _ in d.named_parameters()] for d in made]
    assert names(tj) == names(torch)
    assert names(tj)[0] == ["b", "z", "a", "y"]


def _kinds(ms):
    return [type(m).__name__ for m in ms]


def _sequence_operators(m):
    nn_ = m.nn
    a, b = nn_.Sequential(nn_.ReLU(), nn_.Tanh()), nn_.Sequential(nn_.ELU())
    out = {"add": _kinds(a + b), "mul": _kinds(a * 2), "rmul": _kinds(2 * a), "shared": (a * 2)[0] is (a * 2)[2]}
    a += b
    a *= 2
    out["inplace"] = (_kinds(a), list(a._modules))
    for bad in (lambda: a + nn_.ModuleList([nn_.ReLU()]), lambda: a * 0, lambda: a * 1.5):
        with pytest.raises((ValueError, TypeError)) as err:
            bad()
        out.setdefault("errors", []).append(err.type.__name__)
    ml = nn_.ModuleList([nn_.ReLU(), nn_.Tanh(), nn_.ELU()])
    out["ml add"] = (type(ml + [nn_.GELU()]).__name__, _kinds(ml + nn_.ModuleList([nn_.GELU()])))
    out["ml pop"] = (type(ml.pop(0)).__name__, type(ml.pop(-1)).__name__, _kinds(ml), list(ml._modules))
    out["ml repr"] = repr(nn_.ModuleList([nn_.Linear(1, 1) for _ in range(3)] + [nn_.ReLU(), nn_.ReLU()]))
    pl = nn_.ParameterList([nn_.Parameter(m.ones(n)) for n in (1, 2, 3)])
    out["pl slice"] = (type(pl[1:]).__name__, [tuple(p.shape) for p in pl[::2]])
    pd = nn_.ParameterDict({"b": nn_.Parameter(m.ones(1)), "a": nn_.Parameter(m.ones(2))})
    out["pd setdefault"] = (tuple(pd.setdefault("c", nn_.Parameter(m.ones(3))).shape),
                            tuple(pd.setdefault("a", nn_.Parameter(m.ones(9))).shape))
    out["pd popitem"] = pd.popitem()[0], list(pd)
    cp = pd.copy()
    out["pd copy"] = type(cp).__name__, list(cp), cp["a"] is pd["a"]
    other = nn_.ParameterDict({"z": nn_.Parameter(m.ones(1))})
    out["pd or"] = list(pd | other), list(reversed(pd | other)), list({"y": nn_.Parameter(m.ones(1))} | pd)
    pd |= other
    out["pd ior"] = list(pd)
    return out


def test_container_operators_as_pytorch():
    torch = pytest.importorskip("torch", reason="compares with PyTorch")
    want, got = _sequence_operators(torch), _sequence_operators(tj)
    assert got == want
    assert "(0-2): 3 x Linear" in got["ml repr"] and "(3-4): 2 x ReLU()" in got["ml repr"]
