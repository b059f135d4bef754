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
