"""A compiled function's guard on the Python values it reads outside its arguments: a
change to any of them captures again instead of replaying a stale graph."""
import argparse
import warnings

import numpy as np
import pytest

import tracejit as tj

K = [1.0]
D = {"a": 1.0}
T = [tj.ones(2)]
ARGS = argparse.Namespace(scale=2.0, act="relu")
NET = tj.nn.Linear(2, 2)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _eq(a, b):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6)


def test_global_list_dict_and_tensor_entries_are_guarded():
    f1 = tj.compile(lambda x: x + K[0])
    f2 = tj.compile(lambda x: x * D["a"])
    f3 = tj.compile(lambda x: x * T[0])
    x = tj.ones(2)
    f1(x), f2(x), f3(x)
    K[0], D["a"], T[0] = 4.0, 3.0, tj.full((2,), 5.0)
    try:
        _eq(f1(x), x + 4), _eq(f2(x), x * 3), _eq(f3(x), x * 5)
    finally:
        K[0], D["a"], T[0] = 1.0, 1.0, tj.ones(2)


def test_config_object_attributes_are_guarded_and_named():
    def g(x):
        return (tj.relu(x) if ARGS.act == "relu" else tj.tanh(x)) * ARGS.scale

    cf = tj.compile(g)
    x = -tj.ones(2)
    _eq(cf(x), tj.zeros(2))
    ARGS.act, ARGS.scale = "tanh", 3.0
    try:
        _eq(cf(x), tj.tanh(x) * 3)
        assert cf.cache_stats()["compiles"] == 2
        reasons = " ".join(cf.cache_stats()["recompile_reasons"])
        assert "global 'ARGS' changed" in reasons and ".scale" in reasons
    finally:
        ARGS.act, ARGS.scale = "relu", 2.0


def test_closure_containers_and_objects_are_guarded():
    class Cfg:
        pass

    c, d = Cfg(), {"t": 1.0}
    c.w = 1.0
    cf = tj.compile(lambda x: x * c.w * d["t"])
    x = tj.ones(2)
    _eq(cf(x), x)
    c.w, d["t"] = 7.0, 2.0
    _eq(cf(x), x * 14)


def test_a_global_module_rebound_or_replaced_is_seen():
    global NET
    x = tj.ones(1, 2)
    cf = tj.compile(lambda x: NET(x))
    _eq(cf(x), NET(x))
    NET.weight = tj.nn.Parameter(tj.zeros(2, 2))
    _eq(cf(x), NET(x))
    old, NET = NET, tj.nn.Linear(2, 2)
    try:
        _eq(cf(x), NET(x))
    finally:
        NET = old


def test_module_attribute_containers_are_guarded():
    class M(tj.nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg, self.lst = {"s": 1.0}, [1.0]

        def forward(self, x):
            return x * self.cfg["s"] * self.lst[0]

    m = M()
    cm = tj.compile(m)
    x = tj.ones(2)
    _eq(cm(x), x)
    m.cfg["s"] = 2.0
    _eq(cm(x), x * 2)
    m.lst[0] = 3.0
    _eq(cm(x), x * 6)
    assert "attribute 'lst' changed" in " ".join(cm.forward.cache_stats()["recompile_reasons"])


def test_forward_reading_a_global_container_is_guarded():
    class M(tj.nn.Module):
        def forward(self, x):
            return x * K[0]

    cm = tj.compile(M())
    x = tj.ones(2)
    _eq(cm(x), x)
    K[0] = 5.0
    try:
        _eq(cm(x), x * 5)
    finally:
        K[0] = 1.0


def test_a_list_the_function_appends_to_is_a_log_not_a_constant():
    seen = []

    def f(x):
        seen.append(1)
        return x * 2

    cf = tj.trace(f)
    x = tj.ones(2)
    for _ in range(4):
        _eq(cf(x), x * 2)
    assert cf.cache_stats()["compiles"] == 1


def test_unchanged_values_hit_the_cache():
    cf = tj.compile(lambda x: x * D["a"] + K[0] + ARGS.scale)
    x = tj.ones(2)
    for _ in range(5):
        cf(x)
    st = cf.cache_stats()
    assert st["compiles"] == 1 and st["hits"] == 4


def test_an_optimizers_learning_rate_read_inside_is_guarded():
    """A hand-written update reading ``opt.param_groups[0]["lr"]`` (set by a schedule):
    the optimizer is a library object; its param_groups are walked like a config object's
    attributes, so a new rate captures again."""
    lin = tj.nn.Linear(2, 2)
    opt = tj.optim.SGD(lin.parameters(), lr=0.1)

    class Holder(tj.nn.Module):
        def __init__(self):
            super().__init__()
            self.opt = opt

        def forward(self, p, g):
            return p - self.opt.param_groups[0]["lr"] * g

    f = tj.compile(lambda p, g: p - opt.param_groups[0]["lr"] * g)
    cm = tj.compile(Holder())
    p, g = tj.ones(2), tj.full((2,), 2.0)
    for lr in (0.1, 0.5, 0.25):
        opt.param_groups[0]["lr"] = lr
        _eq(f(p, g), p - lr * 2.0)
        _eq(cm(p, g), p - lr * 2.0)
    assert "['lr']: 0.1 -> 0.5" in " ".join(f.cache_stats()["recompile_reasons"])


step = 0   # a global named like the module attribute below


def test_an_attribute_named_like_a_global_is_not_guarded_as_that_global():
    global step

    class Scaled(tj.nn.Module):
        def __init__(self):
            super().__init__()
            self.step = tj.nn.Parameter(tj.full((2,), 3.0))

        def forward(self, x):
            return x * self.step

    m = tj.compile(Scaled())
    x = tj.ones(2)
    try:
        for step in range(3):
            _eq(m(x), x * 3)
    finally:
        step = 0
    assert m.cache_stats()["compiles"] == 1, m.cache_stats()["recompile_reasons"]
