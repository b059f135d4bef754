"""The row-form kernels (compiler/cpu/kernels/row_forms.py): a call whose kernel is still
compiling plans once, and the calls until it is loaded reuse that plan; the selections
(topk's first k, argmax, argmin) give PyTorch's indices, ties, NaN and signed zeros included,
and decline what numpy's forms run faster."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

import tracejit as tj  # noqa: E402
from tracejit.compiler.cpu.kernels import row_forms  # noqa: E402
from tracejit.ops import softmax_prim  # noqa: E402


class _Compiling:
    """A kernel that stays unloaded for `pending` asks, then gives the real one's entry."""

    def __init__(self, real, pending: int):
        self.real, self.pending, self.asks = real, pending, 0

    def get(self):
        self.asks += 1
        return None if self.asks <= self.pending else self.real.get()


def test_a_compiling_kernel_is_planned_once(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")
    plans, kernels = [], []
    real_plan, real_kernel = row_forms._plan, row_forms._kernel

    def kernel(key, make):
        kernels.append(_Compiling(real_kernel(key, make), pending=4))
        return kernels[-1]

    def plan(*args):
        plans.append(args)
        return real_plan(*args)
    monkeypatch.setattr(row_forms, "_kernel", kernel)
    monkeypatch.setattr(row_forms, "_plan", plan)
    monkeypatch.setattr(row_forms, "_calls", {})
    monkeypatch.setattr(row_forms, "_waiting", {})
    x = np.random.default_rng(0).standard_normal((6, 37)).astype(np.float32)
    ref = softmax_prim._softmax_impl(np, x, dim=1)
    # four calls while the kernel compiles: the numpy form runs (None), one plan
    assert [row_forms.softmax(x, dim=1) for _ in range(4)] == [None] * 4
    assert len(plans) == 1 and len(kernels) == 1 and kernels[0].asks == 4
    # then it lands: the kernel's result, still from the one plan, and no plan after it
    for _ in range(3):
        y = row_forms.softmax(x, dim=1)
        assert y is not None
        np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-30)
    assert len(plans) == 1 and kernels[0].asks == 5 and not row_forms._waiting
    # another shape is another plan
    assert row_forms.softmax(x[:3], dim=1) is None and len(plans) == 2


@pytest.fixture
def _sync(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")   # load the kernels at their first call
    monkeypatch.delenv("TRACEJIT_EAGER_KERNELS", raising=False)


def _with_ties(shape, dtype, seed):
    r = np.random.default_rng(seed)
    a = r.integers(-20, 20, shape).astype(dtype)      # many equal values
    a.flat[::5] = r.standard_normal(a.size)[::5]
    return a


# (each past PARALLEL_MIN: one variant a kernel)
SHAPES = [((8, 64, 64), 2), ((4, 16, 64, 16), 3), ((4, 16, 64, 16), 1), ((300, 60), 0)]


@pytest.mark.usefixtures("_sync")
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_topk_gives_the_stable_sorts_first_k(dtype):
    torch = pytest.importorskip("torch")
    for n, (shape, dim) in enumerate(SHAPES):
        a = _with_ties(shape, dtype, n)
        if dtype != "int64":
            a.flat[3::97] = np.nan                       # NaN the largest, in input order
            a.flat[5::89], a.flat[6::89] = -0.0, 0.0     # equal: input order
        k = 3   # (one k, one kernel a direction: its insertion pays on each dim, `_insertion_pays`)
        for largest in (True, False):
            got = row_forms.topk_indices(a, dim, largest, True, k)
            assert got is not None           # the loop ran
            want = torch.tensor(a).sort(dim=dim, descending=largest, stable=True)[1].numpy()
            np.testing.assert_array_equal(got, np.take(want, np.arange(k), axis=dim))


@pytest.mark.usefixtures("_sync")
@pytest.mark.parametrize("shape,dim", [((16, 5000), 1), ((16, 5000), -1), ((4, 300, 8), 1)])
def test_topk_plan_call_is_the_stable_sorts_first_k(shape, dim):
    torch = pytest.importorskip("torch")
    a = _with_ties(shape, "float32", 3)
    a.flat[7::501] = np.nan
    for largest in (True, False):
        params = {"dim": dim, "descending": largest, "stable": True, "k": 4}
        call = row_forms.topk_call((shape,), np.float32, params)
        want = torch.tensor(a).sort(dim=dim, descending=largest, stable=True)[1].numpy()
        for _ in range(2):   # (the first call loads the kernel, the second runs the kept one)
            got = call(a)
            assert got.dtype == np.int64 and got.flags.c_contiguous
            np.testing.assert_array_equal(got, np.take(want, np.arange(4), axis=dim))
        # a float64 array under the float32 signature: the numpy form, the same order
        np.testing.assert_array_equal(call(a.astype(np.float64)), np.take(want, np.arange(4), axis=dim))


def test_topk_plan_call_declines_by_signature():
    small = {"dim": 1, "descending": True, "stable": True, "k": 4}
    a = np.random.default_rng(0).standard_normal((4, 50)).astype(np.float32)
    call = row_forms.topk_call(((4, 50),), np.float32, small)       # too small: the numpy form
    np.testing.assert_array_equal(call(a), np.argsort(-a, axis=1, kind="stable")[:, :4])
    full = dict(small, k=None)                                      # a whole argsort: numpy's
    np.testing.assert_array_equal(row_forms.topk_call(((4, 50),), np.float32, full)(a),
                                  np.argsort(-a, axis=1, kind="stable"))
    assert row_forms.topk_call((None,), np.float32, small) is None  # no fixed shape: per call


@pytest.mark.usefixtures("_sync")
def test_eager_topk_matches_torch_through_the_plan():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(5).standard_normal((16, 5000)).astype(np.float32)
    a[:, 100:] = -np.inf                                            # ties of -inf past the best
    for _ in range(3):
        v, i = tj.tensor(a).topk(5, dim=1)
        tv, ti = torch.tensor(a).topk(5, dim=1)
        np.testing.assert_array_equal(i.numpy(), ti.numpy())
        np.testing.assert_array_equal(v.numpy(), tv.numpy())


# rows of the last dim (a 2-d kernel) and of a middle one (3-d: float32 only, the slower compile)
ARG_SHAPES = [(d, s, a) for d in ("float32", "float64") for s, a in SHAPES[:3] + [((300, 40, 2), 1)]
              if d == "float32" or a == len(s) - 1]


@pytest.mark.usefixtures("_sync")
@pytest.mark.parametrize("dtype,shape,dim", ARG_SHAPES, ids=[f"{d}-{s}-{a}" for d, s, a in ARG_SHAPES])
@pytest.mark.parametrize("largest", [True, False])
def test_arg_extremum_is_numpys(dtype, shape, dim, largest):
    a = _with_ties(shape, dtype, 7 + dim)
    a.flat[11] = a.flat[400] = np.nan                  # two NaN: the first is the answer
    f, ref = (row_forms.argmax, np.argmax) if largest else (row_forms.argmin, np.argmin)
    for keepdim in (False, True):
        got = f(a, dim, keepdim)
        assert got is not None and got.dtype == np.int64
        np.testing.assert_array_equal(got, ref(a, axis=dim, keepdims=keepdim))


@pytest.mark.usefixtures("_sync")
def test_declines_what_the_numpy_form_runs():
    a = np.random.default_rng(0).standard_normal((64, 100)).astype(np.float32)
    assert row_forms.topk_indices(a, 1, True, True, 30) is None          # k not a small part of the dim
    b = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)
    assert row_forms.topk_indices(b, 1, True, True, 32) is None          # the partial sort costs less
    assert row_forms.topk_indices(b, 1, True, True, 16) is not None      # insertion costs less
    assert row_forms.topk_indices(b, 1, True, True, 17) is None          # k past TOPK_MAX
    assert row_forms.topk_indices(a.astype(np.int8), 1, True, True, 5) is None
    assert row_forms.argmax(a, None, False) is None                      # over the flattened tensor
    assert row_forms.argmax(a[:4, :4], 1, False) is None                 # too small to gain
    assert row_forms.argmax(a, 1, False) is None                         # numpy's vectorized scan gains


@pytest.mark.usefixtures("_sync")
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
