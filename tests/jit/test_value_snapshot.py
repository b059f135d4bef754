"""A concrete tensor's value read as a Python number during a capture (``scale.item()``,
``float(self.t)``, ``if self.flag:``) is guarded: changed in place later, the next call
captures again with the new value, as eager code would read it, and says why."""
import numpy as np

import tracejit as tj

SCALE = tj.tensor(2.0)


def _scaled(x):
    return x * SCALE.item()


class _Buffers(tj.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("t", tj.tensor(1.0))
        self.register_buffer("on", tj.tensor(True))

    def forward(self, x):
        return x / float(self.t) if self.on else x - 1.0


def test_a_global_tensor_read_as_a_number_is_not_stale():
    f = tj.compile(_scaled)
    np.testing.assert_array_equal(f(tj.ones(2)).numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(f(tj.ones(2)).numpy(), [2.0, 2.0])
    assert f.cache_stats()["compiles"] == 1   # unchanged: a hit
    try:
        SCALE.fill_(3.0)
        np.testing.assert_array_equal(f(tj.ones(2)).numpy(), [3.0, 3.0])   # was 2.0: stale
        st = f.cache_stats()
        assert st["compiles"] == 2
        assert st["recompile_reasons"] == [
            f"the value of the tensor read as a Python number at {__file__}:12 changed: 2.0 -> 3.0"]
    finally:
        SCALE.fill_(2.0)


def test_a_buffer_read_as_a_number_or_a_truth_value_is_not_stale():
    m = _Buffers()
    c = tj.compile(m)
    x = tj.ones(2)
    np.testing.assert_array_equal(c(x).numpy(), [1.0, 1.0])
    with tj.no_grad():
        m.t.fill_(4.0)
    np.testing.assert_array_equal(c(x).numpy(), m(x).numpy())
    np.testing.assert_array_equal(c(x).numpy(), [0.25, 0.25])
    with tj.no_grad():
        m.on.fill_(False)
    np.testing.assert_array_equal(c(x).numpy(), [0.0, 0.0])
    assert "changed: True -> False" in c.cache_stats()["recompile_reasons"][-1]
    assert c.cache_stats()["compiles"] == 3


def test_a_small_tensor_holding_nan_captures_once():
    state = tj.tensor([float("nan"), 1.0])   # read whole as an array; nan equals nan here
    g = tj.compile(lambda x: x * 2 if state.isnan().any() else x)
    for _ in range(3):
        np.testing.assert_array_equal(g(tj.ones(2)).numpy(), [2.0, 2.0])
    assert g.cache_stats()["compiles"] == 1


def test_a_constant_made_inside_the_function_captures_once():
    g = tj.compile(lambda x: x * tj.tensor(3.0).item())
    for _ in range(3):
        np.testing.assert_array_equal(g(tj.ones(2)).numpy(), [3.0, 3.0])
    assert g.cache_stats()["compiles"] == 1


def test_library_plain_objects_exclude_callables_and_builtin_objects():
    import functools
    import types

    from tracejit.jit.value_snapshot import plain_object

    class _Callable:
        def __call__(self):
            return 1

    class _Config:
        pass

    for v in (functools.partial(print, 1), types.SimpleNamespace(a=1), _Callable(), ValueError("x")):
        assert not plain_object(v, library=True), v
    assert plain_object(_Config(), library=True)


class _CopiesWeight(tj.nn.Module):
    """Reads its own weight through numpy() and tolist(), as code converting to numpy does."""

    def __init__(self):
        super().__init__()
        self.lin = tj.nn.Linear(3, 3)

    def forward(self, x):
        w = tj.tensor(self.lin.weight.detach().numpy())
        b = tj.tensor(self.lin.bias.detach().tolist())
        return x @ w.t() + b


def test_a_weight_read_through_numpy_is_guarded_and_not_shared_by_a_sibling():
    x = tj.randn(2, 3)
    a, b = _CopiesWeight(), _CopiesWeight()
    ca, cb = tj.compile(a), tj.compile(b)
    np.testing.assert_allclose(ca(x).numpy(), a(x).detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(cb(x).numpy(), b(x).detach().numpy(), rtol=1e-6)   # not a's weight
    with tj.no_grad():
        a.lin.weight.mul_(2.0)
        a.lin.bias.add_(1.0)
    np.testing.assert_allclose(ca(x).numpy(), a(x).detach().numpy(), rtol=1e-6)   # not stale
    assert "read by Python" in ca.cache_stats()["recompile_reasons"][-1]
