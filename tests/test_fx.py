"""tracejit.fx: symbolic tracing says what to use; wrap and isinstance checks work."""
import pytest

import tracejit as tj


def test_symbolic_trace_says_what_to_use():
    with pytest.raises(NotImplementedError, match="tracejit.compile"):
        tj.fx.symbolic_trace(tj.nn.Linear(2, 2))
    with pytest.raises(NotImplementedError, match="tracejit.compile"):
        tj.fx.Tracer().trace(tj.nn.Linear(2, 2))
    with pytest.raises(NotImplementedError, match="GraphModule"):
        tj.fx.GraphModule(tj.nn.Linear(2, 2), None)


def test_wrap_and_isinstance():
    def f(x):
        return x
    assert tj.fx.wrap(f) is f and tj.fx.wrap("f") == "f"
    assert not isinstance(tj.ones(1), tj.fx.Proxy)
