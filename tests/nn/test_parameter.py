"""nn.Parameter: a leaf sharing its tensor's memory; refused, by name, inside a trace."""
import warnings

import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import TraceError


def test_parameter_shares_memory_and_is_a_leaf():
    t = tj.ones(3)
    p = tj.nn.Parameter(t * 2.0)
    assert p.requires_grad and p.grad_fn is None and p.is_leaf
    q = tj.nn.Parameter(t)
    t.add_(1.0)
    np.testing.assert_array_equal(q.detach().numpy(), [2.0, 2.0, 2.0])


def test_module_built_inside_a_compiled_function_says_so():
    def build_and_call(x):
        return tj.nn.Linear(4, 3)(x)

    with pytest.raises(TraceError, match="created inside a compiled function"):
        tj.compile(build_and_call, fullgraph=True)(tj.randn(2, 4))
    f = tj.compile(build_and_call)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert tuple(f(tj.randn(2, 4)).shape) == (2, 3)   # (eagerly, as the warning says)
        with pytest.raises(Exception, match="does not match weight of shape"):
            f(tj.randn(2, 5))


@pytest.mark.parametrize("lib_name", ["torch", "tracejit"])
def test_parameter_subclass_with_its_own_new(lib_name):
    """A subclass whose __new__ calls super().__new__ with arguments of its own, as PyTorch's."""
    lib = pytest.importorskip("torch") if lib_name == "torch" else tj

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
