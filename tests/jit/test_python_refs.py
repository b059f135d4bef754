"""A compiled function is guarded on the numbers and strings it reads from its globals
and closure (jit/python_refs.py): a change captures again, nothing else does."""
import numpy as np

import tracejit as tj

SCALE = 3.0
MODE = "double"


def _scaled(x):
    y = x * SCALE
    return y * 2.0 if MODE == "double" else y


def test_a_changed_global_number_or_string_captures_again():
    global SCALE, MODE
    f = tj.compile(_scaled)
    x = tj.ones(2)
    try:
        assert f(x).tolist() == [6.0, 6.0]
        SCALE = 5.0
        assert f(x).tolist() == [10.0, 10.0]
        MODE = "single"
        assert f(x).tolist() == [5.0, 5.0]
        SCALE = 3.0
        MODE = "double"
        assert f(x).tolist() == [6.0, 6.0]          # the first capture serves again
        stats = f.cache_stats()
        assert stats["compiles"] == 3
        assert any("global 'SCALE' changed: 3.0 -> 5.0" in r for r in stats["recompile_reasons"])
    finally:
        SCALE, MODE = 3.0, "double"


def test_closure_numbers_are_guarded_and_unread_globals_are_not():
    k = 2.0

    def f(x):
        return x * k

    cf = tj.compile(f)
    x = tj.ones(3)
    assert cf(x).tolist() == [2.0] * 3
    k = 4.0
    assert cf(x).tolist() == [4.0] * 3
    assert cf.cache_stats()["compiles"] == 2
    g = tj.compile(lambda t: t + 1.0)               # reads no global: no guard at all
    g(x)
    assert g._extra_guard is None


def test_numbers_as_arguments_keep_their_own_guard():
    f = tj.compile(lambda x, s: x * s)
    x = tj.tensor(np.ones(2, np.float32))
    assert f(x, 2.0).tolist() == [2.0, 2.0] and f(x, 3.0).tolist() == [3.0, 3.0]
