"""tracejit.overrides: no __torch_function__ dispatch, so every check says no."""
import pytest

import tracejit as tj


def test_has_torch_function_is_false_for_tensors():
    x = tj.ones(2)
    assert tj.overrides.has_torch_function((x, x)) is False
    assert tj.overrides.has_torch_function_unary(x) is False
    assert tj.overrides.has_torch_function_variadic(x, 1.0) is False
    assert tj.overrides.is_tensor_like(x) and not tj.overrides.is_tensor_like([1.0])
    with pytest.raises(NotImplementedError, match="__torch_function__"):
        tj.overrides.handle_torch_function(tj.add, (x,), x, x)
