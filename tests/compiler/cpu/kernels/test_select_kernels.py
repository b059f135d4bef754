"""topk's selection loop and argmax/argmin's generated kernels
(tracejit/compiler/cpu/kernels/select_kernels.py) give the numpy forms' indices exactly, ties and NaN included, and PyTorch's topk, max and
argmin values and indices through the eager ops."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.cpu.kernels import select_kernels as S
from tracejit.ops.tensorfns import _argsort_impl

pytest.importorskip("numba", reason="the kernels are numba code")


@pytest.fixture(autouse=True)
def _sync(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")   # load the kernels at their first call
    monkeypatch.delenv("TRACEJIT_EAGER_KERNELS", raising=False)


def _with_ties(shape, dtype, seed):
    r = np.random.default_rng(seed)
    a = r.integers(-20, 20, shape).astype(dtype)      # many equal values
    a.flat[::5] = r.standard_normal(a.size)[::5]
    return a


SHAPES = [((8, 64, 64), 2), ((4, 16, 64, 16), 3), ((4, 16, 64, 16), 1), ((300, 40), 0)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,dim", SHAPES, ids=[f"{s}-{d}" for s, d in SHAPES])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_gives_the_stable_orders_first_k(dtype, shape, dim, largest):
    a = _with_ties(shape, dtype, len(shape) + dim)
    k = min(8, max(2, a.shape[dim] // 10))   # (a k whose insertion pays: `_insertion_pays`)
    got = S.topk_indices(a, dim, largest, True, k)
    assert got is not None           # the loop ran
    want = np.take(_argsort_impl(np, a, dim, largest, True), np.arange(k), axis=dim)
    np.testing.assert_array_equal(got, want)


ARG_SHAPES = SHAPES[:3] + [((300, 40, 2), 1)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,dim", ARG_SHAPES, ids=[f"{s}-{d}" for s, d in ARG_SHAPES])
@pytest.mark.parametrize("largest", [True, False])
def test_arg_extremum_is_numpys(dtype, shape, dim, largest):
    a = _with_ties(shape, dtype, 7 + dim)
    a.flat[11] = a.flat[400] = np.nan                  # two NaN: the first is the answer
    f, ref = (S.argmax, np.argmax) if largest else (S.argmin, np.argmin)
    for keepdim in (False, True):
        got = f(a, dim, keepdim)
        assert got is not None and got.dtype == np.int64
        np.testing.assert_array_equal(got, ref(a, axis=dim, keepdims=keepdim))


def test_declines_what_the_numpy_form_runs():
    a = np.random.default_rng(0).standard_normal((64, 100)).astype(np.float32)
    assert S.topk_indices(a, 1, True, True, 30) is None          # k not a small part of the dim
    b = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)
    assert S.topk_indices(b, 1, True, True, 32) is None          # the partial sort costs less
    assert S.topk_indices(b, 1, True, True, 16) is not None      # insertion costs less
    assert S.topk_indices(a.astype(np.int64), 1, True, True, 5) is None
    assert S.argmax(a, None, False) is None                      # over the flattened tensor
    assert S.argmax(a[:4, :4], 1, False) is None                 # too small to gain
    assert S.argmax(a, 1, False) is None                         # numpy's vectorized scan gains
    a[3, 5] = np.nan
    assert S.topk_indices(a, 1, True, True, 5) is None           # NaN: the numpy form orders it


def test_topk_max_argmin_match_pytorch():
    """(PyTorch orders topk's ties as it likes: its indices are compared where there are
    none; max and argmin document the first extremum's index.)"""
    torch = pytest.importorskip("torch")
    a = _with_ties((4, 128, 32), "float32", 3)
    a[1, 7, 3] = np.nan
    distinct = np.random.default_rng(4).permutation(128 * 32).reshape(128, 32).astype(np.float32)
    out = {}
    for lib in (torch, tj):
        t = lib.tensor(a)
        vals, idx = lib.tensor(distinct).topk(6, dim=0, largest=False)
        mv, mi = t.max(dim=-1)
        out[lib] = [vals.numpy(), idx.numpy(), t.topk(5, dim=1)[0].numpy(), mv.numpy(), mi.numpy(),
                    t.argmin(dim=1).numpy()]
    for got, want in zip(out[tj], out[torch]):
        np.testing.assert_array_equal(got, want)
