"""The row-add kernel of ``index_add`` with repeated rows (an embedding's backward:
tracejit/compiler/cpu/kernels/scatter_forms.py, a scatter group) against np.add.at, bitwise (the same additions in the
same order), and against the rounds of ops/indexing.py's numpy form (TRACEJIT_EAGER_KERNELS=0)."""
import numpy as np
import pytest

from tracejit.ops import indexing
from tracejit.compiler.cpu.kernels import scatter_forms

pytest.importorskip("numba", reason="the kernel is numba code")


@pytest.fixture(autouse=True)
def _sync(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")   # load the kernel at its first call


def _index_add(monkeypatch, kernels: bool, a, v, idx):
    if kernels:
        monkeypatch.delenv("TRACEJIT_EAGER_KERNELS", raising=False)
    else:
        monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "0")
    return indexing.INDEX_ADD.run(np, a, v, idx, spec=(("t", 0),))


CASES = {
    # (table shape, index shape, strided v): an LM's embedding gradient is a transposed view
    "lm-transposed": ((64, 16), (8, 12), True),
    "1-d-index": ((10, 5), (40,), False),
    "3-d-index,trailing-dims": ((7, 3, 2), (2, 4, 5), False),
    "vector-table": ((9,), (6, 7), True),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_rows_add_as_np_add_at_does(monkeypatch, dtype, case):
    shape, ishape, strided = CASES[case]
    r = np.random.default_rng(len(case))
    idx = r.integers(-shape[0], shape[0], ishape)   # negative rows too, many repeats
    vshape = ishape + shape[1:]
    if strided:        # the same values laid out with the first two axes swapped
        v = np.ascontiguousarray(r.standard_normal((vshape[1], vshape[0]) + vshape[2:]).astype(dtype))
        v = v.swapaxes(0, 1)
        assert not v.flags.c_contiguous
    else:
        v = r.standard_normal(vshape).astype(dtype)
    a = r.standard_normal(shape).astype(dtype)
    want = a.copy()
    np.add.at(want, idx, v)
    assert scatter_forms.index_add(a, v, idx, spec=(("t", 0),)) is not None   # the kernel ran
    got = _index_add(monkeypatch, True, a, v, idx)
    assert got.dtype == a.dtype and not np.shares_memory(got, a)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(_index_add(monkeypatch, False, a, v, idx), want)


def test_out_of_range_rows_raise_as_numpy_does(monkeypatch):
    a = np.zeros((4, 3), np.float32)
    idx = np.arange(40).reshape(5, 8) % 4
    idx[3, 2] = 4
    with pytest.raises(IndexError):
        _index_add(monkeypatch, True, a, np.ones((5, 8, 3), np.float32), idx)


@pytest.mark.parametrize("layout", ["sliced-rows", "fortran-root"])
def test_contiguous_rows_of_other_layouts_add_as_np_add_at_does(monkeypatch, layout):
    # rows with unit stride read as slices of the memory they lie in: every other row of a
    # contiguous array (a view of its root at an offset), and the transpose of a
    # Fortran-ordered array (a root that is not C-contiguous)
    r = np.random.default_rng(11)
    idx = r.integers(0, 9, (6, 5))
    if layout == "sliced-rows":
        v = r.standard_normal((13, 5, 33)).astype(np.float32)[1::2]
    else:
        v = np.asfortranarray(r.standard_normal((33, 5, 6)).astype(np.float32)).T
    assert v.shape == (6, 5, 33) and v.strides[-1] == 4
    a = r.standard_normal((9, 33)).astype(np.float32)
    want = a.copy()
    np.add.at(want, idx, v)
    np.testing.assert_array_equal(_index_add(monkeypatch, True, a, v, idx), want)


@pytest.mark.parametrize("layout", ["strided-rows", "reversed-rows"])
def test_rows_not_contiguous_add_as_np_add_at_does(monkeypatch, layout):
    # rows without unit stride, or with a negative one: copied, then added as the others
    r = np.random.default_rng(12)
    idx = r.integers(0, 9, (8, 5))
    v = r.standard_normal((8, 5, 66)).astype(np.float32)
    v = v[..., ::2] if layout == "strided-rows" else v[::-1, :, :33]
    assert v.shape == (8, 5, 33)
    a = r.standard_normal((9, 33)).astype(np.float32)
    want = a.copy()
    np.add.at(want, idx, v)
    np.testing.assert_array_equal(scatter_forms.index_add(a, v, idx, spec=(("t", 0),)), want)


SCATTER_CASES = {
    # (base shape, updates): an index repeating one row number along the other dims
    "gnn-rows": ((37, 5), 41),
    "3-d-rows": ((6, 3, 2), 33),
    "rows-split-between-threads": ((5, 8200), 40),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", list(SCATTER_CASES), ids=list(SCATTER_CASES))
def test_scatter_add_of_an_expanded_index_adds_rows_as_pytorch(monkeypatch, dtype, case, thread_counts_back):
    import torch
    import tracejit as tj
    from tracejit.ops.gather_prim import SCATTER_ADD
    shape, m = SCATTER_CASES[case]
    r = np.random.default_rng(m)
    rows = r.integers(0, shape[0], m)    # repeats
    index = np.broadcast_to(rows.reshape((m,) + (1,) * (len(shape) - 1)), (m,) + shape[1:])
    src = r.standard_normal((m,) + shape[1:]).astype(dtype)[::-1]     # strided updates
    a = r.standard_normal(shape).astype(dtype)
    want = a.copy()
    np.add.at(want, rows, src)
    for n in (1, 2):
        tj.set_num_threads(n)
        got = scatter_forms.scatter_add(a, index, src, dim=0)
        assert got is not None and not np.shares_memory(got, a)   # the kernel ran
        np.testing.assert_array_equal(got, want)
    t = torch.from_numpy(a).scatter_add(0, torch.from_numpy(index.copy()), torch.from_numpy(src.copy()))
    np.testing.assert_allclose(got, t.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(SCATTER_ADD.run(np, a, index, src, dim=0), want)   # through the door
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "0")
    np.testing.assert_array_equal(SCATTER_ADD.run(np, a, index, src, dim=0), want)


@pytest.mark.parametrize("bad", [-1, 9])
def test_scatter_add_rows_out_of_range_raise_naming_the_index(bad):
    from tracejit.errors import IndexRangeError
    a = np.ones((9, 4), np.float32)
    rows = np.arange(40) % 9
    rows[7] = bad
    with pytest.raises(IndexRangeError, match=f"scatter_add: index {bad} is out of range"):
        scatter_forms.scatter_add(a, np.broadcast_to(rows[:, None], (40, 4)), np.ones((40, 4), np.float32), dim=0)
    assert (a == 1).all()


def test_scatter_add_of_other_indexes_runs_its_numpy_form():
    a = np.zeros((9, 4), np.float32)
    v = np.ones((40, 4), np.float32)
    rows = np.arange(40) % 9
    assert scatter_forms.scatter_add(a, np.broadcast_to(rows[:, None], (40, 4)).copy(), v, dim=0) is None  # rows laid out
    assert scatter_forms.scatter_add(a, np.broadcast_to(rows[:, None], (40, 3)), v[:, :3], dim=0) is None  # part rows
    assert scatter_forms.scatter_add(a[:, 0], rows, v[:, 0], dim=0) is None    # one-element rows
    assert scatter_forms.scatter_add(a, np.broadcast_to(rows[:, None], (40, 4)), v, dim=1) is None   # another dim


def test_transposed_updates_are_read_from_their_root_in_place():
    v = np.zeros((12, 8, 16), np.float32)
    assert scatter_forms._root_order(v.swapaxes(0, 1)) == (1, 0, 2)       # an LM's (T, B, D) as (B, T, D)
    assert scatter_forms._root_order(v.transpose(2, 1, 0)) is None        # rows not unit-stride: copied
    assert scatter_forms._root_order(v[:, ::2]) is None                   # no contiguous root
    assert scatter_forms._root_order(v[::-1].swapaxes(0, 1)) is None      # a negative stride


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,k", [((4, 9, 6), 7), ((3, 5, 2, 4), 8)], ids=["batched-rows", "two-trailing-dims"])
def test_scatter_add_along_a_later_dim_of_a_trailing_expanded_index_adds_rows_as_pytorch(dtype, shape, k):
    """A batched row scatter (``x.scatter_add(1, idx[..., None].expand(...), y)``): rows of
    `a` seen as (rows, inner), the numpy form's values bit for bit, PyTorch's."""
    import torch
    from tracejit.ops.gather_prim import SCATTER_ADD
    r = np.random.default_rng(k)
    lead = r.integers(0, shape[1], (shape[0], k))      # repeats within a batch
    index = np.broadcast_to(lead.reshape(lead.shape + (1,) * (len(shape) - 2)), (shape[0], k) + shape[2:])
    src = r.standard_normal(index.shape).astype(dtype)
    a = r.standard_normal(shape).astype(dtype)
    got = scatter_forms.scatter_add(a, index, src, dim=1)
    assert got is not None and got.shape == a.shape and not np.shares_memory(got, a)   # the kernel ran
    np.testing.assert_array_equal(got, SCATTER_ADD.impl(np, a, index, src, dim=1))
    t = torch.from_numpy(a).scatter_add(1, torch.from_numpy(index.copy()), torch.from_numpy(src))
    np.testing.assert_allclose(got, t.numpy(), rtol=1e-6, atol=1e-6)
    lead[1, 2] = shape[1]
    from tracejit.errors import IndexRangeError
    with pytest.raises(IndexRangeError, match=f"scatter_add: index {shape[1]} is out of range for dim 1"):
        scatter_forms.scatter_add(a, np.broadcast_to(lead.reshape(lead.shape + (1,) * (len(shape) - 2)),
                                                     index.shape), src, dim=1)
    # not expanded over the dims after it, or not spanning those before: the numpy form
    assert scatter_forms.scatter_add(a, index.copy(), src, dim=1) is None
    assert scatter_forms.scatter_add(a, index[:1], src[:1], dim=1) is None


def test_dtype_names_are_numpys_for_every_dtype():
    from tracejit.compiler.cpu.kernels.scatter_forms import _name
    for t in ("float32", "float64", "int32", "int64", ">i8", "<f4", "uint8", "bool"):
        dt = np.dtype(t)
        assert _name(dt) == dt.name and _name(dt) == dt.name   # (the second from the cache)
