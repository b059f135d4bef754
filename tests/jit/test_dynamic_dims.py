"""Which dims of a compiled function's next capture are symbolic, and which share a symbol
(jit/dynamic_dims.py)."""
from __future__ import annotations

import os

import numpy as np
import tracejit as tj


def test_dims_equal_by_chance_at_first_keep_their_own_symbols(monkeypatch):
    # (sequences of several lengths, as pad_sequence's: equal at one call, different later)
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")

    def f(a, b):
        return a.sum(0) * 2 + b.sum(0)

    cf = tj.compile(f, dynamic=True)
    for n in (3, 4, 6, 8, 11):
        rng = np.random.default_rng(n)
        a, b = (rng.standard_normal((k, 3)).astype(np.float32) for k in (n, n // 2 + 1))
        np.testing.assert_allclose(cf(tj.tensor(a), tj.tensor(b)).numpy(), a.sum(0) * 2 + b.sum(0),
                                   rtol=1e-5, err_msg=f"{n}")
    # (3, 3) ties a's dims, then (4, 3) and (3, 3) tie b's to a's last: one capture more
    assert cf.cache_stats()["compiles"] == 2, cf.cache_stats()["recompile_reasons"]



def test_a_recompile_names_the_values_the_symbolic_entry_specialized(monkeypatch):
    """An int argument that turned symbolic but whose values the code needs: the reason names
    those values (from the symbolic entry), not the first entry captured for one value."""
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")

    def f(x, n):
        return x * int(n) + int(n + 1)

    cf = tj.compile(f)
    for n in (3, 4, 5):
        np.testing.assert_array_equal(cf(tj.arange(3), n).numpy(), np.arange(3) * n + n + 1)
    where = f"int(tensor) at {os.path.basename(__file__)}:{f.__code__.co_firstlineno + 1}"
    assert cf.cache_stats()["recompile_reasons"][1:] == [f"{where} specialized n to 4, now 5",
                                                         f"{where} specialized n + 1 to 5, now 6"]
