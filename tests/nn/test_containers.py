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
