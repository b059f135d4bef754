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
