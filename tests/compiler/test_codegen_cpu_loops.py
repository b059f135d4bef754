"""argmax/argmin over the last dim as a fused group's epilogue (codegen_cpu_loops `_arg_rows`):
one kernel with the elementwise work before it, PyTorch's values and indices (the first
extreme, the first NaN where a row has one) over odd sizes, rows of one, ties, NaN, strided
inputs and float and integer dtypes; eager's kernel is the same lowering."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.cpu.kernels import select_kernels
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
    for fn, ref, dim in ((select_kernels.argmax, torch.argmax, 2), (select_kernels.argmin, torch.argmin, 1)):
        got = fn(x, dim, False)
        assert got is not None
        np.testing.assert_array_equal(got, ref(torch.tensor(x), dim=dim).numpy())
    assert select_kernels.argmax(np.zeros((65, 40)), 0, False) is None   # a long row: numpy's scan
