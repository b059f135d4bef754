"""argmax/argmin and topk over the last dim as a fused group's epilogue (codegen_cpu_loops
`_arg_rows`, `_top_rows`): one kernel with the elementwise work before it, PyTorch's values
and indices (the first extreme, the first NaN where a row has one; topk: PyTorch's stable
sort's first k) over odd sizes, rows of one, ties, NaN, signed zeros, strided inputs, float
and integer dtypes and thread counts; eager's kernel is the same lowering."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.cpu.kernels import row_forms
from tracejit.compiler.fusion import Group

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _fn(x, y):
    z = x * 2 - y
    v, i = z.max(dim=-1)
    return v, i, (x + y).argmin(dim=-1, keepdim=True)


def _inputs(shape, dtype, seed):
    r = np.random.default_rng(seed)
    x = r.integers(-3, 3, shape).astype(dtype)    # many ties
    y = r.integers(-3, 3, shape).astype(dtype)
    if x.dtype.kind == "f":
        x.flat[::7] += r.standard_normal(x.size)[::7].astype(dtype)
        x.flat[5::11] = np.nan                        # rows with one NaN, some with two
        x.flat[3::13] = -np.inf
    return x, y


def _check(cf, x, y):
    got = cf(tj.tensor(x), tj.tensor(y))
    want = _fn(torch.tensor(x), torch.tensor(y))
    for g, w in zip(got, want):
        assert g.shape == tuple(w.shape) and str(g.dtype).split(".")[-1] == str(w.dtype).split(".")[-1]
        np.testing.assert_array_equal(g.numpy(), w.numpy())


def _signed_zeros(dtype):
    """Rows past one block whose extreme is +0.0 and -0.0 (equal: the first wins), -0.0 first
    in the rows `_fn`'s max reads, +0.0 first in those its argmin reads."""
    x = np.ones((2, 3, 129), dtype)
    x[0] = -1.0
    x[0, :, 3], x[0, :, 100] = -0.0, 0.0
    x[1, :, 3], x[1, :, 100] = 0.0, -0.0
    return x, np.zeros_like(x)


# (rows of one element are a capture of their own: int64's only)
_SHAPES = {"float32": [(2, 37, 13), (3, 5, 129)], "float64": [(3, 5, 129)],
           "int64": [(2, 37, 13), (3, 5, 129), (4, 9, 1)]}


@pytest.mark.parametrize("dtype", sorted(_SHAPES))
def test_fused_extremum_and_index_match_pytorch(dtype):
    cf = tj.trace(_fn, compile="sync", dynamic=True)
    for k, shape in enumerate(_SHAPES[dtype]):
        _check(cf, *_inputs(shape, dtype, k))
    if dtype != "int64":
        _check(cf, *_signed_zeros(dtype))
    if dtype == "float32":
        x, y = _inputs((3, 17, 40), dtype, 5)
        _check(cf, x.transpose(0, 2, 1), y.transpose(0, 2, 1))   # rows read with a stride
    groups = [it for it in cf._entries[-1].executor.infer_plan().items if isinstance(it, Group)]
    assert sorted(g.reduction.prim.name for g in groups) == ["argmax", "argmin"]   # no step


def test_argmax_closes_the_group_of_its_producers():
    from tracejit.compiler.cpu.kernels.loader import one_group
    graph, g = one_group(lambda x, y: (x * y + 1).argmax(dim=-1), [((4, 6), "float32")] * 2, "argmax")
    assert [e.prim.name for e in g.eqns] == ["mul", "add"] and g.reduction.prim.name == "argmax"


def test_eager_kernel_is_the_same_lowering(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")   # load the kernel at its first call
    monkeypatch.delenv("TRACEJIT_EAGER_KERNELS", raising=False)
    x, _ = _inputs((64, 3, 40), "float64", 7)
    for fn, ref, dim in ((row_forms.argmax, torch.argmax, 2), (row_forms.argmin, torch.argmin, 1)):
        got = fn(x, dim, False)
        assert got is not None
        np.testing.assert_array_equal(got, ref(torch.tensor(x), dim=dim).numpy())
    assert row_forms.argmax(np.zeros((65, 40)), 0, False) is None   # a long row: numpy's scan


def _top(x, z):
    a, b = x * 2 - 1, z + 1
    return (*a.topk(3, dim=-1), *(x + 1).topk(3, dim=-1, largest=False), *(x * 3).topk(1, dim=-1),
            *b.topk(1, dim=-1, largest=False), *(b * 2).topk(1, dim=-1))


def _check_top(cf, x, z):
    """Values as PyTorch's topk, indices as its stable sort's first k (its topk orders
    ties as its partial sort leaves them)."""
    got = cf(tj.tensor(x), tj.tensor(z))
    tx, tz = torch.tensor(x), torch.tensor(z)
    want = []
    for a, k, largest in ((tx * 2 - 1, 3, True), (tx + 1, 3, False), (tx * 3, 1, True),
                          (tz + 1, 1, False), ((tz + 1) * 2, 1, True)):
        order = a.sort(dim=-1, descending=largest, stable=True)[1]
        want += [a.topk(k, dim=-1, largest=largest)[0], order[..., :k]]
    for g, w in zip(got, want):
        assert g.shape == tuple(w.shape)
        np.testing.assert_array_equal(g.numpy(), w.numpy())


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_fused_topk_matches_pytorch(dtype):
    cf = tj.trace(_top, compile="sync", dynamic=True)
    floats = dtype != "int32"
    # rows of 3 (k the row's length), odd ones; the rows of z: of one element, then more
    cases = [((2, 5, 3), (2, 5, 1)), ((3, 7, 13), (3, 7, 5)), ((2, 3, 129), (2, 3, 129))]
    for k, (xs, zs) in enumerate(cases):
        x, z = _inputs(xs, dtype, k)[0], _inputs(zs, dtype, k + 3)[0]
        if floats and xs[-1] > 3:
            x[0, 0, :6] = [0.0, -0.0, np.nan, -0.0, 0.0, np.nan]   # signed zeros tie; NaN the largest
            z[0, 0, :3] = [-0.5, -0.0, 0.0]
        _check_top(cf, x, z)
    if floats:
        x, z = _inputs((3, 17, 40), dtype, 5)[0], _inputs((3, 17, 40), dtype, 6)[0]
        _check_top(cf, x.transpose(0, 2, 1), z.transpose(0, 2, 1))   # rows read with a stride
    groups = [it for it in cf._entries[-1].executor.infer_plan().items if isinstance(it, Group)]
    tops = [g for g in groups if g.reduction is not None and g.reduction.prim.name == "argsort"]
    assert len(tops) == 3   # (and the two largest firsts: argmax steps)


def test_fused_topk_is_the_same_on_one_and_two_threads(thread_counts_back):
    x = _inputs((64, 300), "float32", 9)[0]   # (past PARALLEL_MIN: the parallel variant)
    f = tj.trace(lambda x: (x * 2).topk(5, dim=-1), compile="sync")
    got = []
    for n in (1, 2):
        tj.set_num_threads(n)
        got.append([t.numpy() for t in f(tj.tensor(x))])
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)
    want = torch.tensor(x * 2).sort(dim=-1, descending=True, stable=True)[1][:, :5]
    np.testing.assert_array_equal(got[0][1], want.numpy())
    groups = [it for it in f._entries[-1].executor.infer_plan().items if isinstance(it, Group)]
    assert [g.reduction.prim.name for g in groups] == ["argsort"]   # (the kernel ran)


def test_topk_of_a_symbolic_count_runs_as_a_step():
    # (k = n // 4 of a symbolic n: the epilogue's buffer of k has a constant size)
    f = tj.trace(lambda x: (x * 2).topk(x.shape[-1] // 4, dim=-1), compile="sync", dynamic=True)
    for n in (8, 20):
        x = _inputs((3, n), "float32", n)[0]
        got = f(tj.tensor(x))
        want = torch.tensor(x * 2).sort(dim=-1, descending=True, stable=True)
        np.testing.assert_array_equal(got[0].numpy(), want[0][:, :n // 4].numpy())
        np.testing.assert_array_equal(got[1].numpy(), want[1][:, :n // 4].numpy())
    assert len(f._entries) == 1
