"""Slice reads (compiler/slice_reads.py): a kernel reads static slices of an array in place
at their offsets, the getitem steps nothing else reads are dropped, and the values are the
interpreter's."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.fusion import Group
from tracejit.compiler.loopnest import Operand
from tracejit.compiler.plan import Plan
from tracejit.ops.indexing import GETITEM

pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")

R = np.random.default_rng(0)
X = R.standard_normal((7, 12)).astype(np.float64)
W = R.standard_normal((12, 20)).astype(np.float64)


def _plan(fn, *args, name="sl"):
    f = tj.trace(fn, compiler="interpret")
    f(*(tj.tensor(a) for a in args))
    return Plan(f._entries[-1].opt_graph, name)


def _getitems(plan) -> int:
    return sum(1 for it in plan.items if not isinstance(it, Group) and it.prim is GETITEM)


def _reads(plan) -> list:
    return [offs for it in plan.items if isinstance(it, Group) for _, offs in it.reads.values()]


def _gates(x, w):
    g = x @ w
    i, f, o, c = g[:, 0:5], g[:, 5:10], g[:, 10:15], g[:, 15:20]
    return tj.sigmoid(i) * tj.tanh(c) + tj.sigmoid(f) * o


def test_column_slices_of_a_product_are_read_in_place():
    plan = _plan(_gates, X, W)
    assert sorted(_reads(plan)) == [(0, 0), (0, 5), (0, 10), (0, 15)]
    assert _getitems(plan) == 0
    g = X @ W
    sig = lambda v: 1 / (1 + np.exp(-v))   # noqa: E731
    want = sig(g[:, :5]) * np.tanh(g[:, 15:]) + sig(g[:, 5:10]) * g[:, 10:15]
    np.testing.assert_allclose(plan(X, W)[0], want, rtol=1e-13, atol=1e-13)


def test_the_offsets_reach_the_kernel_index():
    op = Operand(0, None, "float64", "ndc", (0, 1), (0, 51))
    assert op.subscript() == "i0, i1 + 51"
    assert Operand(1, None, "float64", "ndc", (None, 1), ()).subscript() == "0, i1"
    # a broadcast dim of a slice reads its one element at its offset
    assert Operand(2, None, "float64", "ndc", (None, 1), (3, 2)).subscript() == "3, i1 + 2"


def test_a_slice_something_else_reads_keeps_its_step():
    def fn(x, w):
        g = x @ w
        a = g[:, 2:9]
        return tj.exp(a) + 1.0, a.sum()
    plan = _plan(fn, X, W)
    assert _reads(plan) == [(0, 2)] and _getitems(plan) == 1
    got = plan(X, W)
    g = X @ W
    np.testing.assert_allclose(got[0], np.exp(g[:, 2:9]) + 1.0, rtol=1e-13)
    np.testing.assert_allclose(got[1], g[:, 2:9].sum(), rtol=1e-12)


def test_row_and_negative_bounds_and_a_strided_parent():
    # rows 1..-1 and columns -6.. of a transposed input (strided: the "nd" variant reads it)
    def fn(x):
        t = x.t()
        return tj.tanh(t[1:-1, -6:]) * 2.0
    plan = _plan(fn, X)
    assert _reads(plan) == [(1, 1)]
    np.testing.assert_allclose(plan(X)[0], np.tanh(X.T[1:-1, -6:]) * 2.0, rtol=1e-13)


K = np.sort(R.standard_normal((12, 9)), axis=1) + np.arange(9) * 0.1


def test_broadcast_slices_and_rows_groups_read_in_place():
    # slices of a (12, 9) knot matrix broadcast over the rows of x, one of them a single
    # column (a broadcast dim read at its offset), and a rows group reading a slice
    def fn(x, k, w):
        u = x[..., None]
        b = (u - k[:, :-2]) / (k[:, 2:] - k[:, :-2]) * k[:, 3:4]
        e = tj.exp((x @ w)[:, 2:9])
        return b, e / e.sum(-1, keepdim=True)
    plan = _plan(fn, X, K, W)
    assert sorted(_reads(plan)) == [(0, 0), (0, 0), (0, 2), (0, 2), (0, 3)]
    assert _getitems(plan) == 1          # x[..., None]: no slice
    got = plan(X, K, W)
    u = X[..., None]
    np.testing.assert_allclose(got[0], (u - K[:, :-2]) / (K[:, 2:] - K[:, :-2]) * K[:, 3:4], rtol=1e-12)
    e = np.exp((X @ W)[:, 2:9])
    np.testing.assert_allclose(got[1], e / e.sum(-1, keepdims=True), rtol=1e-12)


def test_steps_and_integer_indices_stay_views():
    def fn(x):
        return tj.exp(x[:, ::2]) + tj.exp(x[1]).reshape(1, 12)[:, ::2]
    plan = _plan(fn, X)
    assert _reads(plan) == []
    want = np.exp(X[:, ::2]) + np.exp(X[1])[None, ::2]
    np.testing.assert_allclose(plan(X)[0], want, rtol=1e-13)


@pytest.mark.parametrize("mode", ["trace", "script"])
def test_an_lstm_cell_compiled_matches_eager_and_the_interpreter(mode):
    from differential import assert_compiled_matches
    tj.manual_seed(3)
    cell = tj.nn.LSTMCell(5, 7).double()

    def step(x, h, c):
        h, c = cell(x, (h, c))
        h, c = cell(x, (h, c))
        return h * c
    r = np.random.default_rng(5)
    args = [tj.tensor(r.standard_normal((3, n)), requires_grad=True) for n in (5, 7, 7)]
    assert_compiled_matches(step, *args, mode=mode, rtol=1e-10, atol=1e-12)
