"""A fused elementwise map writes its output into a full-shape input that dies at it
(compiler/plan.py `Plan._donor`, `_donated`): only when nothing else holds that array at run
time, only for the nested map form and the column sum, and the results are eager's."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler import plan as plan_mod
from inputs import T


pytestmark = pytest.mark.usefixtures("kernels_in_test_cache", "fixed_thread_counts")


@pytest.fixture
def fixed_thread_counts(monkeypatch):
    """numba's and BLAS's thread counts stay as they are for the test (no adaptive counts,
    tracejit/compiler/cpu/runtime/coreshare.py): these tests compare calls bit for bit, and OpenBLAS's Haswell
    (AVX2) sgemm gives other last bits on one thread than on two (this module's 2048x16 @
    16x48 product), so on a loaded AVX2 machine a count changed between two calls failed
    "a second call: the same bits" with no change in what the plan does."""
    from tracejit.compiler.cpu.runtime import coreshare
    monkeypatch.setattr(coreshare, "ENABLED", False)


@pytest.fixture
def donations(monkeypatch):
    """The arrays `_donated` handed back (None: refused) during the test."""
    seen = []
    real = plan_mod._donated

    def counted(a):
        r = real(a, callers=1)                      # this frame holds `a` too
        seen.append(r)
        return r
    monkeypatch.setattr(plan_mod, "_donated", counted)
    return seen


def bias_relu(x, w, b):
    return tj.relu(F.linear(x, w, b))


def _inference_source(cf) -> str:
    return cf._entries[-1].executor._infer.source


@pytest.mark.parametrize("rows", [8, 512], ids=["serial", "parallel"])
def test_bias_relu_writes_over_the_dying_product(rows, donations):
    # without gradients the product dies at the bias+ReLU kernel (with them it is saved)
    args = (T(rows, 16, seed=1, rg=False), T(24, 16, seed=2, rg=False), T(24, seed=3, rg=False))
    cf = tj.trace(bias_relu)
    got = cf(*args).numpy()
    want = bias_relu(*args).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
    assert "_donated(" in _inference_source(cf)
    assert any(r is not None for r in donations)
    again = cf(*args).numpy()                       # a second call: its own product again
    np.testing.assert_array_equal(again, got)


def test_no_donation_when_the_product_is_also_returned(donations):
    def f(x, w, b):
        y = x @ w
        return tj.relu(y + b), y
    args = (T(32, 16, seed=1, rg=False), T(16, 24, seed=2, rg=False), T(24, seed=3, rg=False))
    cf = tj.trace(f)
    got = [t.numpy() for t in cf(*args)]
    want = [t.numpy() for t in f(*args)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=2e-6)
    assert "_donated(" not in _inference_source(cf)
    assert all(r is None for r in donations)


def test_no_donation_for_a_flat_map_or_when_switched_off(monkeypatch, donations):
    def flat(x, w, c):                    # full-shape operands only: the flat map form
        return tj.relu(x @ w + c)
    cf = tj.trace(flat)
    cf(T(32, 16, seed=1, rg=False), T(16, 24, seed=2, rg=False), T(32, 24, seed=3, rg=False))
    assert "_donated(" not in _inference_source(cf)
    monkeypatch.setenv("TRACEJIT_DONATE", "0")
    cf = tj.trace(bias_relu)
    cf(T(32, 16, seed=4, rg=False), T(24, 16, seed=5, rg=False), T(24, seed=6, rg=False))
    assert "_donated(" not in _inference_source(cf)
    assert donations == []


def test_donated_takes_only_an_array_nothing_else_holds():
    def sole():
        a = np.ones((4, 5))
        return plan_mod._donated(a) is a
    assert sole()
    a = np.ones((4, 5))
    keep = a.T                                      # a live view holds a (its .base)
    assert plan_mod._donated(a) is None
    del keep
    other = a                                       # a second name
    assert plan_mod._donated(a) is None
    del other
    view = np.ones((4, 5))[1:]                      # not its own data
    assert plan_mod._donated(view) is None
    f_order = np.asfortranarray(np.ones((4, 5)))    # output is written in C order
    assert plan_mod._donated(f_order) is None
    ro = np.ones((4, 5))
    ro.flags.writeable = False
    assert plan_mod._donated(ro) is None


@pytest.mark.parametrize("shape", [(512, 16), (8, 64, 16), (2048, 16), (8, 256, 16)],
                         ids=["rank2", "rank3", "rank2_parallel", "rank3_parallel"])
def test_in_place_rows_read_the_donor_through_the_output(shape, monkeypatch, donations):
    """The nested map tests whether its output is its donor's array and then reads the donor
    through the output (one address for LLVM, which keeps the row loop vectorized: codegen_cpu
    `_in_place`); in place and into a buffer of its own it gives eager's bits."""
    def f(x, w, b):       # (a stacked product's output owns its memory: a donor at rank 3)
        return tj.relu(x @ w + b)
    w = T(*shape[:-2], shape[-1], 24, seed=2, rg=False)
    args = (T(*shape, seed=1, rg=False), w, T(24, seed=3, rg=False))
    want = f(*args).numpy()
    cf = tj.trace(f)
    got = cf(*args).numpy()
    assert any(r is not None for r in donations)            # it ran in place
    srcs = [s for e in cf.entries for k in e.executor._infer.kernels for s in k.sources.values()]
    assert srcs and all("if out0.ctypes.data == in0.ctypes.data:" in s and "x0 = out0[" in s for s in srcs)
    monkeypatch.setenv("TRACEJIT_DONATE", "0")
    own = tj.trace(f)(*args).numpy()                         # its own output buffer
    np.testing.assert_array_equal(got, own)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def test_only_kernels_with_a_donor_get_the_in_place_rows():
    """The second row loop costs numba compile time: a nested map whose input stays alive
    (returned here), or an eager op's kernel, renders without it."""
    def f(x, w, b):
        y = x @ w
        return tj.relu(y + b), y
    cf = tj.trace(f)
    cf(T(2048, 16, seed=1, rg=False), T(16, 24, seed=2, rg=False), T(24, seed=3, rg=False))
    srcs = [s for e in cf.entries for k in e.executor._infer.kernels for s in k.sources.values()]
    assert srcs and not any("ctypes.data" in s for s in srcs)


def _ffn(x, w1, b1, w2):
    return F.linear(tj.relu(F.linear(x, w1, b1)), w2)


def _grads(fn, rows, seed):
    args = (T(rows, 16, seed=seed, rg=False), T(48, 16, seed=seed + 1), T(48, seed=seed + 2),
            T(8, 48, seed=seed + 3))
    g = T(rows, 8, seed=seed + 4, rg=False)
    fn(*args).backward(g)
    return [a.grad.numpy().copy() for a in args[1:]]


@pytest.mark.parametrize("rows", [8, 2048], ids=["serial", "parallel"])
def test_relu_gradient_with_bias_sum_writes_over_the_dying_product(rows, monkeypatch, donations):
    """ReLU's gradient and the bias gradient (a column sum: codegen_cpu `_column_in_place`)
    write the input gradient over the product `g @ w2` that dies there, reading it through
    the output's rows; the gradients are those with an output of its own, bit for bit, and
    eager's."""
    want = _grads(_ffn, rows, 10)
    cf = tj.trace(_ffn)
    got = _grads(cf, rows, 10)
    assert any(r is not None for r in donations)            # it ran in place
    bwds = [bwd for e in cf.entries for _, bwd, _ in e.executor._train.values() if bwd is not None]
    srcs = [s for bwd in bwds for k in bwd.kernels for s in k.sources.values() if "relu_backward" in s]
    assert srcs and all("if out0.ctypes.data == in0.ctypes.data:" in s and "x0 = o0[j]" in s
                        for s in srcs)
    again = _grads(cf, rows, 10)                            # a second call: the same bits
    for a, b in zip(again, got):
        np.testing.assert_array_equal(a, b)
    monkeypatch.setenv("TRACEJIT_DONATE", "0")
    own = _grads(tj.trace(_ffn), rows, 10)                  # the input gradient into its own buffer
    for a, b in zip(got, own):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)
