"""Parameter subclasses written as PyTorch's are (``__new__`` calling ``super().__new__``
with arguments of their own), against PyTorch."""
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("lib", [torch, tj], ids=["torch", "tracejit"])
def test_parameter_subclass_with_its_own_new(lib):
    class Tagged(lib.nn.Parameter):
        def __new__(cls, data, requires_grad=True, tag=None):
            p = super().__new__(cls, data, requires_grad)
            p.tag = tag
            return p

    m = lib.nn.Linear(2, 2)
    m.extra = Tagged(lib.ones(3), tag="x")
    assert type(m.extra) is Tagged and m.extra.tag == "x" and m.extra.requires_grad
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias", "extra"]
    frozen = Tagged(lib.zeros(2), requires_grad=False)
    assert not frozen.requires_grad and frozen.tolist() == [0.0, 0.0]
