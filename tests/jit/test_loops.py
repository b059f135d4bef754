"""Loops of ``@script`` functions whose body fills a Python container (jit/loops.py): run
as Python, as they would eagerly, or refused with an error naming the container."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import ScriptError


def test_a_counted_loop_appending_to_a_list_runs_as_python():
    @tj.script
    def f(x, n: int):
        out = []
        for i in range(n):
            out.append(x * i)
        return tj.stack(out).sum(0)

    for n in (1, 2, 3, 5):
        np.testing.assert_array_equal(f(tj.ones(2), n).numpy(), np.full(2, n * (n - 1) / 2))


def test_a_while_loop_filling_a_dict_by_an_int_bound_runs_as_python():
    @tj.script
    def f(x, n: int):
        acc = {}
        i = 0
        while i < n:
            acc[i] = x * i
            i += 1
        return tj.stack(list(acc.values())).sum(0)

    for n in (1, 3, 4):
        np.testing.assert_array_equal(f(tj.ones(2), n).numpy(), np.full(2, n * (n - 1) / 2))


def test_a_data_dependent_while_loop_appending_to_a_list_names_the_list():
    @tj.script
    def f(x):
        seen = []
        while x.sum() < 10:
            seen.append(x)
            x = x * 2
        return x

    with pytest.raises(ScriptError, match=r"while loop at .*test_loops.py:\d+: its condition depends "
                                          r"on tensor values.*Python list 'seen'"):
        f(tj.ones(2))
