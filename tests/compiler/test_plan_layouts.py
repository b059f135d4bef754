"""The plan's operand layouts (compiler/plan.py `_strided`): an operand the plan itself makes
strided, a permuted view of a fresh array, takes the "nd" variant from the start (the one
the call would ask for at run time); others keep the contiguous guess and its check."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.plan import Plan


pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")

X = np.random.default_rng(0).standard_normal((6, 40, 24)).astype(np.float32)


def _plan(fn, name):
    f = tj.trace(fn, compiler="interpret")
    f(tj.tensor(X))
    return Plan(f._entries[-1].opt_graph, name)


def _layouts(plan):
    return {k.label: (lay, par) for k, lay, par in plan.first_variants}


def _asked(plan, monkeypatch):
    """The variants the plan's calls ask for at run time (`_Kernel.ready`)."""
    from tracejit.compiler import plan as plan_mod
    asked, ready = [], plan_mod._Kernel.ready

    def rec(self, layouts, parallel=False):
        asked.append((self.label, layouts))
        return ready(self, layouts, parallel)
    monkeypatch.setattr(plan_mod._Kernel, "ready", rec)
    return asked


def test_a_permuted_fresh_array_takes_the_strided_variant_at_once(monkeypatch):
    plan = _plan(lambda x: (x * 3.0).permute(0, 2, 1) * 2.0, "perm")
    assert _layouts(plan) == {"perm_g0": (("flat",), False), "perm_g1": (("nd",), False)}
    assert "K1.ready" not in plan.source and "K1p" not in plan.source   # no contiguous variant
    asked = _asked(plan, monkeypatch)
    (got,) = plan(X)
    want = (X * np.float32(3.0)).transpose(0, 2, 1) * np.float32(2.0)
    assert got.shape == (6, 24, 40) and np.array_equal(got, want)
    assert asked == []


def test_a_permuted_fresh_array_feeding_math_is_copied_to_c_order(monkeypatch):
    # strides keep the math call from vectorizing: the contiguous variant runs on a copy
    plan = _plan(lambda x: (x * 3.0).permute(0, 2, 1).sigmoid() * 2.0, "permmath")
    assert _layouts(plan)["permmath_g1"] == (("flat",), False)
    asked = _asked(plan, monkeypatch)
    (got,) = plan(X)
    want = 2.0 / (1.0 + np.exp(-(X.astype(np.float64) * 3.0).transpose(0, 2, 1)))
    assert got.shape == (6, 24, 40) and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert asked == []


def test_a_permuted_slice_of_a_fresh_array_is_strided_too():
    plan = _plan(lambda x: (x * 3.0)[:, :20].permute(0, 2, 1) * 2.0, "sl")
    assert _layouts(plan)["sl_g1"] == (("nd",), False)
    want = (X * np.float32(3.0))[:, :20].transpose(0, 2, 1) * np.float32(2.0)
    assert np.array_equal(plan(X)[0], want)


def test_unknown_strides_keep_the_contiguous_guess_and_its_check(monkeypatch):
    # a permuted plan input (the caller's array may have any strides), and a permute that
    # moves only a size-1 dim: the contiguous variant, checked before the call
    inp = _plan(lambda x: x.permute(0, 2, 1) * 2.0, "inp")
    one = _plan(lambda x: (x * 3.0)[:, :1].permute(0, 2, 1) * 2.0, "one")
    assert _layouts(inp) == {"inp_g0": (("flat",), False)}
    assert _layouts(one)["one_g1"] == (("flat",), False)
    assert "c_contiguous" in inp.source and "c_contiguous" in one.source
    asked = _asked(inp, monkeypatch)
    assert np.array_equal(inp(X)[0], X.transpose(0, 2, 1) * np.float32(2.0))
    assert asked == [("inp_g0", ("nd",))]     # strided after all: asked at run time, as before
    assert np.array_equal(one(X)[0], (X * np.float32(3.0))[:, :1].transpose(0, 2, 1) * np.float32(2.0))


def test_the_lstm_layers_outputs_are_planned_strided(monkeypatch):
    # nn/recurrent.py's (L, H, N) -> (L, N, H) rows and the batch-first (N, L, H) copy: the
    # same values as with the contiguous guess (copies of the strided views at run time)
    from tracejit.compiler import plan as plan_mod
    tj.manual_seed(0)
    lstm = tj.nn.LSTM(8, 16, num_layers=2, batch_first=True)
    x = tj.tensor(np.random.default_rng(1).standard_normal((3, 5, 8)).astype(np.float32))
    f = tj.trace(lambda x: lstm(x)[0], compiler="interpret")
    f(x)
    g = f._entries[-1].opt_graph
    plan = Plan(g, "lstm")
    strided = [lay for k, lay, par in plan.first_variants if "nd" in lay]
    assert strided == [("nd",)] * 3
    ins = _values(f, x)
    got = plan(*ins)[0]
    monkeypatch.setattr(plan_mod.Plan, "_strided", lambda self, v: False)
    before = Plan(g, "lstm_before")
    # (the biases' adds keep their checks: plan inputs)
    assert before.source.count(".ready(") == plan.source.count(".ready(") + 3
    assert np.array_equal(got, before(*ins)[0])
    assert np.allclose(got, lstm(x)[0].detach().numpy(), rtol=1e-5, atol=1e-6)


def _values(f, x):
    """The graph's input arrays for a call with x: x, then the tensors the capture lifted
    (the module's parameters), as `Entry.run` passes them."""
    e = f._entries[-1]
    return [x._data] + [t._data for t in e.const_tensors]


# Column slices of a product (an LSTM cell's gates): strided views the plan cannot see as
# contiguous, checked at run time.
def _gates(x, w, c):
    i, f, g, o = (x @ w).chunk(4, 1)
    c2 = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c2.tanh(), c2


def _gate_values(dtype, n=7, h=13):
    r = np.random.default_rng(2)
    return [r.standard_normal(s).astype(dtype) for s in ((n, 5), (5, 4 * h), (n, h))]


def _gate_plan(fn, ins, name):
    f = tj.trace(fn, compiler="interpret")
    want = [t.numpy() for t in f(*map(tj.tensor, ins))]
    return Plan(f._entries[-1].opt_graph, name), want


def _kernels_run(plan, monkeypatch):
    """The (label, layouts) of every kernel variant the plan's calls load."""
    from tracejit.compiler import plan as plan_mod
    got, get = [], plan_mod._Kernel.get

    def rec(self, layouts, parallel=False):
        got.append((self.label, layouts))
        return get(self, layouts, parallel)
    monkeypatch.setattr(plan_mod._Kernel, "get", rec)
    return got


@pytest.mark.parametrize("dtype, tol", [(np.float32, 1e-5), (np.float64, 1e-12)])
def test_strided_slices_of_a_math_kernel_run_its_contiguous_variant(monkeypatch, dtype, tol):
    ins = _gate_values(dtype)
    plan, want = _gate_plan(_gates, ins, f"gates_{np.dtype(dtype).name}")
    asked = _asked(plan, monkeypatch)
    loaded = _kernels_run(plan, monkeypatch)
    for _ in range(2):
        got = plan(*ins)
        assert len(got) == 2
        for g, w in zip(got, want):
            assert g.dtype == dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    # only contiguous variants ever ran (the same slices without math calls ask for the
    # "nd" variant: the test below)
    assert asked == []
    assert loaded and all("nd" not in lay for _, lay in loaded)
    assert all("nd" not in lay for k in plan.kernels for lay, _ in k.variants)


def _sums(x, w, c):
    a, b = (x @ w).chunk(2, 1)
    return (a + b * c,)


def test_strided_slices_of_a_kernel_without_math_are_read_in_place(monkeypatch):
    # the kernel reads the product's columns at their offsets (compiler/slice_reads.py):
    # its contiguous variant, no copies, no "nd" variant asked for
    ins = _gate_values(np.float64, h=13)
    ins[1] = ins[1][:, :26]
    plan, want = _gate_plan(_sums, ins, "sums")
    asked = _asked(plan, monkeypatch)
    (got,) = plan(*ins)
    np.testing.assert_allclose(got, want[0], rtol=1e-12, atol=1e-12)
    assert asked == []
    (grp,) = [k.group for k in plan.kernels]
    assert sorted(offs for _, offs in grp.reads.values()) == [(0, 0), (0, 13)]


def test_a_per_row_statistic_a_map_group_also_outputs_keeps_its_own_shape():
    # A 1-D normalize: the (1,)-shaped norm is computed at each of the 3 indices of the
    # group and also needed later in its own shape.
    import warnings
    x = tj.tensor([0.3, -1.2, 2.0], dtype=tj.float64, requires_grad=True)

    def f(c):
        n = c / (c * c).sum(-1, keepdim=True).sqrt()
        return n.mean() / (n.abs() + 1)

    want, = tj.autograd.grad(f(x).sum(), [x])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got, = tj.autograd.grad(tj.compile(f, fullgraph=True)(x).sum(), [x])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_compiled_round_keeps_the_sign_of_zero():
    x = tj.tensor([-0.3, 0.3, -0.5, 0.5, -2.5, 1.5, -0.0], dtype=tj.float32)
    got = tj.compile(lambda a: a.round(), fullgraph=True)(x).numpy()
    want = np.round(x.numpy())
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))



@pytest.mark.parametrize("norm", ["group_norm", "instance_norm", "rows"])
def test_a_per_row_value_a_map_group_outputs_is_read_contiguous_by_the_next(norm):
    """An (N, 1) value a kernel computes at every index of its (N, L) iteration (rsqrt of a
    saved statistic) is a column slice of that buffer, row stride L; the next kernel reads
    kernel values as C-contiguous, so it took row i's value from element i of the buffer
    (GroupNorm and InstanceNorm of batch 1 with affine weights: wrong input gradients)."""
    torch = pytest.importorskip("torch")
    x0 = np.random.default_rng(0).standard_normal((1, 2, 5))
    w0 = np.array([1.5, -0.7])

    def f(lib, x, w):
        if norm == "rows":
            x = x[0]
            return x * (x * x).sum(-1, keepdim=True).rsqrt() * w.reshape(2, 1)
        return getattr(lib.nn.functional, norm)(x, 2, w) if norm == "group_norm" else \
            lib.nn.functional.instance_norm(x, weight=w)
    grads = []
    for lib, compiled in ((torch, False), (tj, True)):
        x, w = lib.tensor(x0, requires_grad=True), lib.tensor(w0, requires_grad=True)
        g = (lambda a, b: f(tj, a, b)) if lib is tj else (lambda a, b: f(torch, a, b))
        y = (tj.compile(g) if compiled else g)(x, w)
        (y * (lib.arange(10.0, dtype=y.dtype).reshape(y.shape) % 3)).sum().backward()
        grads.append((x.grad.numpy(), w.grad.numpy()))
    for a, b in zip(grads[1], grads[0]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
