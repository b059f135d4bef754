"""The gradient of a value cut into blocks (chunk, split, unbind, slices) is one concat
of the blocks' gradients in captured programs (jit/slice_grads.py), and equals eager's."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.jit.autodiff import split
from differential import assert_compiled_matches
from inputs import T


pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _backward(fn, *ts):
    cf = tj.trace(fn)
    cf(*ts)
    g = cf.entries[0].graph
    return split(g, [True] * len(g.inputs))[1]


def _count(graph, name):
    return sum(e.prim.name == name for e in graph.eqns)


def gates(x, w):
    g = x @ w
    i, f, c, o = g.chunk(4, -1)
    return (tj.sigmoid(i) * tj.tanh(c) + tj.sigmoid(f) * o).sum()


def test_chunked_value_gets_one_concat_and_no_index_add():
    x, w = T(5, 6, seed=1, rg=True), T(6, 8, seed=2, rg=True)
    assert_compiled_matches(gates, x, w)
    bwd = _backward(gates, x, w)
    assert _count(bwd, "concat") == 1
    assert _count(bwd, "index_add") == 0


def pieces(x):
    a, b = x[:, 1:3], x[:, 4:]              # a gap (0, 3) and an unused column: zeros
    rows = tj.unbind(x, 0)                  # int selects along another axis: not tiled
    return (a * a).sum() + (b * 3.0).sum() + rows[1].sum() * 2.0


def overlapping(x):
    return (x[:, 0:3] * x[:, 2:5]).sum() + x[1:, :].sum()


@pytest.mark.parametrize("fn", [pieces, overlapping], ids=["gaps-and-mixed-axes", "overlapping"])
def test_gaps_mixed_axes_and_overlaps_match_eager(fn):
    assert_compiled_matches(fn, T(4, 6, seed=3, rg=True))


def unbound(x):
    r0, r1, r2 = tj.unbind(x, 1)
    return (r0 * r1 - r2 * 2.0).sum()


def test_unbind_gradient_is_one_concat_of_the_selected_rows():
    x = T(3, 3, 4, seed=4, rg=True)
    assert_compiled_matches(unbound, x)
    bwd = _backward(unbound, x)
    assert _count(bwd, "concat") == 1 and _count(bwd, "index_add") == 0


def shared(x, y):
    a1, a2 = x.chunk(2, 0)
    b1, b2 = y.chunk(2, 0)
    return (tj.tanh(a1 + b1) * (a2 + b2)).sum()


def test_values_cut_alike_with_equal_block_gradients_share_one_concat():
    x, y = T(4, 3, seed=5, rg=True), T(4, 3, seed=6, rg=True)
    assert_compiled_matches(shared, x, y)
    assert _count(_backward(shared, x, y), "concat") == 1


def one_block(x):
    h = x[:, :3]                             # only one block has a gradient (an LSTM's h, not c)
    return (h * h).sum()


def one_row(x):
    return (tj.unbind(x, 0)[1] * 3.0).sum()


@pytest.mark.parametrize("fn", [one_block, one_row], ids=["slice", "int-select"])
def test_a_lone_block_is_a_concat_with_zero_gaps_not_an_index_add(fn):
    x = T(4, 6, seed=7, rg=True)
    assert_compiled_matches(fn, x)
    bwd = _backward(fn, x)
    assert _count(bwd, "concat") == 1 and _count(bwd, "index_add") == 0
    cf = tj.trace(fn)
    xs = tj.tensor(x.detach().numpy(), requires_grad=True)
    cf(xs).backward()
    want = np.zeros((4, 6), np.float32)
    if fn is one_block:
        want[:, :3] = 2.0 * x.detach().numpy()[:, :3]
    else:
        want[1] = 3.0
    np.testing.assert_allclose(xs.grad.numpy(), want, rtol=1e-6)


def neighbours(x):
    # a B-spline recursion's step: each basis from its two overlapping neighbours
    return (x[:, :, :-1] * 0.5 + x[:, :, 1:] * 2.0).pow(2).sum() + x[:, :, 1:3].sum()


def test_overlapping_blocks_are_one_concat_per_tiling_run_not_index_adds():
    x = T(3, 2, 5, seed=8, rg=True)
    assert_compiled_matches(neighbours, x)
    bwd = _backward(neighbours, x)
    assert _count(bwd, "concat") == 3 and _count(bwd, "index_add") == 0
