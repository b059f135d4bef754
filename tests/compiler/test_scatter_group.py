"""Scatter groups (scatters.py, loopnest.Scatter, codegen_cpu_loops.render_scatter): an add of
rows by index, alone and fused with the elementwise work computing its updates, equal to
PyTorch and bitwise to np.add.at, over odd sizes, repeated and negative indices, one and
no update, strided updates, float32 and float64, on one thread or two."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tracejit as tj
from tracejit.compiler.fusion import Group, partition
from tracejit.compiler.kernel_errors import group_label

from tests.cuda.kernel_cases import graph_of

pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _fused(a, idx, x):
    return a.index_add(0, idx, (x * 2.0).exp())


def test_an_updates_producer_and_its_row_add_are_one_group():
    r = np.random.default_rng(0)
    arrays = [r.standard_normal((7, 5)).astype(np.float32), r.integers(0, 7, 9),
              r.standard_normal((9, 5)).astype(np.float32)]
    items = partition(graph_of(_fused, arrays))
    groups = [g for g in items if isinstance(g, Group) and g.scatter is not None]
    assert len(groups) == 1 and [e.prim.name for e in groups[0].eqns] == ["mul", "exp"]
    assert "index_add (scatter)" in group_label(groups[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows,shape", [((13, 300), (37,)), ((5,), (4, 3)), ((6, 3, 2), (1,)), ((9, 4), (0,))],
                         ids=["wide-rows", "scalar-rows,2-d-index", "one-update", "no-update"])
def test_row_adds_match_pytorch_bitwise_np_add_at(dtype, rows, shape):
    r = np.random.default_rng(len(shape))
    a = r.standard_normal(rows).astype(dtype)
    idx = r.integers(-rows[0], rows[0], shape)      # negative rows, repeats
    x = r.standard_normal(shape + rows[1:]).astype(dtype)
    f = tj.compile(lambda a, i, x: tj.zeros_like(a).index_put_((i,), x * 3.0 - 1.0, accumulate=True) + a)
    want = np.zeros_like(a)
    np.add.at(want, idx, x * dtype(3.0) - dtype(1.0))
    t = torch.zeros(rows, dtype=torch.from_numpy(a).dtype).index_put_((torch.tensor(idx),), torch.tensor(x) * 3.0 - 1.0,
                                                                      accumulate=True)
    for _ in range(2):
        got = f(tj.tensor(a), tj.tensor(idx), tj.tensor(x)).numpy()
        np.testing.assert_array_equal(got, want + a)
        np.testing.assert_allclose(got, t.numpy() + a, rtol=1e-6 if dtype == np.float32 else 1e-13, atol=1e-6)


def test_strided_updates_on_any_thread_count(thread_counts_back):
    r = np.random.default_rng(3)
    a = r.standard_normal((11, 8200)).astype(np.float32)     # (rows split between threads)
    idx = r.integers(0, 11, 20)
    x = np.ascontiguousarray(r.standard_normal((8200, 20)).astype(np.float32)).T     # strided updates
    f = tj.compile(lambda a, i, x: a.index_add(0, i, x * 3.0))
    want = a.copy()
    np.add.at(want, idx, x * np.float32(3.0))
    for n in (1, 2):
        tj.set_num_threads(n)
        np.testing.assert_array_equal(f(tj.tensor(a), tj.tensor(idx), tj.tensor(x)).numpy(), want)


def test_an_index_out_of_range_raises_and_leaves_the_base():
    a = np.ones((4, 3), np.float32)
    f = tj.compile(lambda a, i, x: a.index_add(0, i, x.exp()))
    f(tj.tensor(a), tj.tensor(np.arange(5) % 4), tj.tensor(np.zeros((5, 3), np.float32)))
    with pytest.raises(tj.errors.IndexRangeError, match="index_add: index 4 is out of range for size 4"):
        f(tj.tensor(a), tj.tensor(np.array([0, 1, 4, 2, 3])), tj.tensor(np.zeros((5, 3), np.float32)))
    assert (a == 1).all()


def _expanded(a, idx, x):
    return tj.zeros_like(a).scatter_add(0, idx.view(-1, 1, 1).expand(-1, a.shape[1], a.shape[2]), x * 3.0 - 1.0) + a


def test_scatter_add_of_an_expanded_index_is_a_row_add_as_pytorch(thread_counts_back):
    dtype = np.float32   # (the loop form is one per dtype: test_row_adds_match_pytorch_bitwise_np_add_at)
    r = np.random.default_rng(5)
    a = r.standard_normal((7, 3, 5)).astype(dtype)
    idx = r.integers(0, 7, 41)                       # repeats
    x = r.standard_normal((41, 3, 5)).astype(dtype)
    groups = [g for g in partition(graph_of(_expanded, [a, idx, x])) if isinstance(g, Group) and g.scatter is not None]
    assert len(groups) == 1 and [e.prim.name for e in groups[0].eqns] == ["mul", "sub"]
    want = np.zeros_like(a)
    np.add.at(want, idx, x * dtype(3.0) - dtype(1.0))
    t = torch.zeros(a.shape, dtype=torch.from_numpy(a).dtype).scatter_add(
        0, torch.tensor(idx).view(-1, 1, 1).expand(-1, 3, 5), torch.tensor(x) * 3.0 - 1.0) + torch.tensor(a)
    f = tj.compile(_expanded)
    for n in (1, 2):
        tj.set_num_threads(n)
        got = f(tj.tensor(a), tj.tensor(idx), tj.tensor(x)).numpy()
        np.testing.assert_array_equal(got, want + a)
    np.testing.assert_allclose(got, t.numpy(), rtol=1e-5, atol=1e-5)
    idx[4] = -1                                      # PyTorch refuses a negative index here
    with pytest.raises(tj.errors.IndexRangeError, match="scatter_add: index -1 is out of range for dim 0 of size 7") as got:
        f(tj.tensor(a), tj.tensor(idx), tj.tensor(x))
    assert got.traceback[-1].name == "_expanded"     # (raised from the user's line, as eager)


def test_the_graph_holds_an_expanded_scatter_add_as_a_row_add_refusing_negative_rows():
    from tracejit.jit.interpreter import interpret
    r = np.random.default_rng(6)
    a, idx, x = r.standard_normal((7, 3, 5)), r.integers(0, 7, 41), r.standard_normal((41, 3, 5))
    g = graph_of(_expanded, [a, idx, x])
    adds = [e for e in g.eqns if e.prim.name in ("index_add", "scatter_add")]
    assert [(e.prim.name, e.params.get("nonneg")) for e in adds] == [("index_add", True)]
    want = np.zeros_like(a)
    np.add.at(want, idx, x * 3.0 - 1.0)
    np.testing.assert_array_equal(interpret(g, [tj.tensor(a), tj.tensor(idx), tj.tensor(x)])[0].numpy(), want + a)
    idx[4] = -1
    with pytest.raises(tj.errors.IndexRangeError, match="scatter_add: index -1 is out of range for dim 0 of size 7"):
        interpret(g, [tj.tensor(a), tj.tensor(idx), tj.tensor(x)])
