"""matmul's gradients through the transposed-operand records (ops/linalg.py matmul_nt,
matmul_tn): eager backward binds no PERMUTE view for them, its values are bitwise those of
the PERMUTE + MATMUL pair (the same BLAS call on the same transposed view), and a traced
backward keeps the pair, the form the compiler's passes match."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.jit.autodiff import split
from tracejit.ops import eager, linalg, registry, shape

from inputs import captured_graph

# (a's shape, b's shape, b given as a transposed weight: x @ w.T)
CASES = [((8, 16), (16, 8), False), ((64, 1000), (1000, 100), False), ((7, 5, 3), (3, 4), False),
         ((2, 5, 3), (2, 3, 4), False), ((64, 300), (300, 200), True), ((4, 6, 5), (5, 7), True),
         # few rows by a wide transposed weight: both forms run it as (w @ x.T).T (gemm/products.py)
         ((5, 128), (128, 384), True), ((3, 4, 64), (64, 512), True), ((5, 384), (384, 128), False)]


def _grads(case):
    sa, sb, transposed = case
    rng = np.random.default_rng(0)
    a = tj.tensor(rng.standard_normal(sa).astype(np.float32), requires_grad=True)
    b_np = rng.standard_normal(sb).astype(np.float32)
    b = tj.tensor(b_np.T.copy() if transposed else b_np, requires_grad=True)
    ((a @ (b.mT if transposed else b)).clamp(min=0) ** 2).sum().backward()
    return a.grad.numpy(), b.grad.numpy()


def _counting(monkeypatch, prims):
    calls = {p.name: 0 for p in prims}
    for p in prims:
        monkeypatch.setattr(p, "run", lambda xp, *a, _orig=p.run, _name=p.name, **kw:
                            calls.__setitem__(_name, calls[_name] + 1) or _orig(xp, *a, **kw))
    return calls


def test_eager_backward_binds_no_permute(monkeypatch):
    calls = _counting(monkeypatch, linalg.PRODUCTS + (shape.PERMUTE,))
    a = tj.tensor(np.ones((3, 4), np.float32), requires_grad=True)
    b = tj.tensor(np.ones((4, 2), np.float32), requires_grad=True)
    loss = (a @ b).sum()
    loss.backward()
    assert calls == {"matmul": 1, "matmul_nt": 1, "matmul_tn": 1, "permute": 0}
    np.testing.assert_array_equal(a.grad.numpy(), np.full((3, 4), 2.0, np.float32))
    np.testing.assert_array_equal(b.grad.numpy(), np.full((4, 2), 3.0, np.float32))


@pytest.mark.parametrize("case", CASES, ids=[f"{a}@{b}{'.T' if t else ''}" for a, b, t in CASES])
def test_gradients_are_bitwise_those_of_the_permute_and_matmul_pair(case, monkeypatch):
    # both runs take the same product kernels: the router's choice follows the load policy's
    # thread count (other processes' load), so the policy is off
    from tracejit.compiler.cpu.runtime import coreshare
    monkeypatch.setattr(coreshare, "ENABLED", False)
    # and products run on BLAS: a measured choice stored on this machine may send the two
    # paths' products (transposed or not) to different kernels
    monkeypatch.setenv("TRACEJIT_GEMM_CHOICE", "0")
    new = _grads(case)
    # a nonzero count of active tracers (none of them this thread's) sends matmul's VJP
    # down the PERMUTE + MATMUL path while every op still runs eagerly
    monkeypatch.setattr(eager, "_tracers_active", eager._tracers_active + 1)
    old = _grads(case)
    for x, y in zip(new, old):
        assert x.flags.c_contiguous == y.flags.c_contiguous
        np.testing.assert_array_equal(x, y)


def test_traced_backward_keeps_the_permute_matmul_pair():
    def loss(a, b):
        return (a @ b).sum()
    a = tj.tensor(np.ones((3, 4), np.float32), requires_grad=True)
    b = tj.tensor(np.ones((4, 2), np.float32), requires_grad=True)
    g = captured_graph(loss, a, b)
    names = [e.prim.name for e in split(g, [True] * len(g.inputs))[1].eqns]
    assert "matmul_nt" not in names and "matmul_tn" not in names, names
    assert names.count("matmul") == 2 and "permute" in names, names


def test_a_gradient_of_a_gradient_runs_through_the_records():
    """create_graph: the records' own VJPs (written with the records and matmul) give the
    second derivative: d/da sum((a @ b) ** 2) = 2 (a @ b) b.T, differentiated along b."""
    rng = np.random.default_rng(1)
    a_np, b_np = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    a = tj.tensor(a_np, requires_grad=True)
    b = tj.tensor(b_np, requires_grad=True)
    (ga,) = tj.autograd.grad(((a @ b) ** 2).sum(), [a], create_graph=True)
    assert ga.grad_fn.name() == "MmBackward0"
    ga.sum().backward()
    # d/db of sum_ij 2 (a b b^T)_ij
    ones = np.ones((3, 4))
    want = 2 * (a_np.T @ ones @ b_np + ones.T @ a_np @ b_np)
    np.testing.assert_allclose(b.grad.numpy(), want, rtol=1e-10)


@pytest.mark.parametrize("prim,swap_a", [(linalg.MATMUL_NT, False), (linalg.MATMUL_TN, True)])
def test_the_plans_numpy_call_is_matmuls_choice_for_the_product_computed(prim, swap_a):
    """A record's plan call follows matmul's own small/BLAS rule for the product it computes
    (m, k, n of a @ b.T or a.T @ b, not of the stored operands), and leaves batches to the impl."""
    from tracejit.compiler.cpu.gemm import products
    from tracejit.compiler.cpu.runtime import coreshare
    from tracejit.ops import impls

    def fast(shapes, dtype, params):   # what an eager plan of the record calls on the CPU
        return impls.specialized(prim, shapes, dtype, params)
    small = products._tn_small if swap_a else products._nt_small
    m = k = n = 1 + round(coreshare.TINY_GEMM_MNK ** (1 / 3))
    big = ((k, m), (k, n)) if swap_a else ((m, k), (n, k))
    call = fast(big, np.float32, {})   # the choice's call site for the product computed
    assert call is not None and call is not small
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(s).astype(np.float32) for s in big)
    want = x.T @ y if swap_a else x @ y.T
    for _ in range(2):    # the first call binds the site, the second runs what it installed
        np.testing.assert_allclose(call(x, y), want, rtol=1e-5, atol=1e-4)
    # the product is m*k*n, not the stored shapes': with n = 1 and a deep k, a (2, k) @ (1, k).T
    # is 2k multiply-adds (small), where reading b as stored would count 2k*k (BLAS)
    k = 1 + coreshare.TINY_GEMM_MNK // 4
    deep = ((k, 2), (k, 1)) if swap_a else ((2, k), (1, k))
    assert fast(deep, np.float32, {}) is small
    rows = fast(((2, 3, 4), (5, 4)), np.float32, {})
    if swap_a:
        assert rows is None   # (batches: the implementation)
    else:   # an N-d a (a linear layer's input): the 2-D call over its flattened rows
        a, w = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
        np.testing.assert_array_equal(rows(a, w), prim.dispatch(np, a, w))
        np.testing.assert_allclose(rows(a, w), a @ w.T, rtol=1e-5, atol=1e-5)


# (input's shape, out features, input transposed: a non-contiguous input)
LINEAR = [((3, 4), 5, False), ((2, 3, 4), 5, False), ((4, 3), 6, True), ((0, 4), 2, False),
          ((2, 0, 4), 3, False)]


@pytest.mark.parametrize("case", LINEAR, ids=[f"{s}x{n}{'.T' if t else ''}" for s, n, t in LINEAR])
def test_linear_is_one_record_with_torchs_values_and_gradients(case, monkeypatch):
    """Eager linear binds MATMUL_NT on the weight as it is (no PERMUTE, forward or
    backward; a transposed input's own gradient is laid out as the input, one PERMUTE, as
    PyTorch's gradient layout contract); values and gradients are PyTorch's, the weight's
    gradient row-major."""
    shp, n, transposed = case
    rng = np.random.default_rng(2)
    x_np = rng.standard_normal(shp[::-1] if transposed else shp).astype(np.float32)
    x_np = x_np.T if transposed else x_np
    w_np = rng.standard_normal((n, shp[-1])).astype(np.float32)
    b_np = rng.standard_normal(n).astype(np.float32)
    calls = _counting(monkeypatch, linalg.PRODUCTS + (shape.PERMUTE,))
    x, w, b = (tj.tensor(v, requires_grad=True) for v in (x_np, w_np, b_np))
    y = tj.nn.functional.linear(x, w, b)
    assert y.grad_fn.next_functions[0][0].name() == "MmBackward0"
    (y * y).sum().backward()
    assert calls["permute"] == (1 if transposed else 0) and calls["matmul_nt"] == 1, calls
    assert w.grad.numpy().flags.c_contiguous
    torch = pytest.importorskip("torch")
    xt, wt, bt = (torch.tensor(v, requires_grad=True) for v in (x_np, w_np, b_np))
    yt = torch.nn.functional.linear(xt, wt, bt)
    (yt * yt).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    for got, want in ((x, xt), (w, wt), (b, bt)):
        np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), rtol=1e-5, atol=1e-5)
        assert got.grad.stride() == want.grad.stride() or not got.numel()   # (empty: any strides)


def test_linear_weight_gradient_of_an_input_without_one_is_one_2d_product(monkeypatch):
    """Only the weight needs a gradient (a first layer): the record gets the weight's rank
    from its shape-only stand-in and takes g.T @ x over the flattened leading dims."""
    rng = np.random.default_rng(4)
    x_np, w_np = rng.standard_normal((2, 3, 4)), rng.standard_normal((5, 4))
    shapes = []
    orig = linalg.MATMUL_TN.run
    monkeypatch.setattr(linalg.MATMUL_TN, "run",
                        lambda xp, a, b, **kw: shapes.append((a.shape, b.shape)) or orig(xp, a, b, **kw))
    w = tj.tensor(w_np, requires_grad=True)
    (tj.nn.functional.linear(tj.tensor(x_np), w) ** 2).sum().backward()
    assert shapes == [((6, 5), (6, 4))]
    y = x_np @ w_np.T
    np.testing.assert_allclose(w.grad.numpy(), 2 * y.reshape(6, 5).T @ x_np.reshape(6, 4), rtol=1e-12)


def test_mT_of_a_scalar_is_itself_with_pytorch_warning_and_refuses_a_vector():
    s = tj.tensor(3.0)
    with pytest.warns(UserWarning, match="deprecated on 0-D"):
        assert s.mT is s
    with pytest.raises(RuntimeError, match="only supported on matrices"):
        tj.tensor([1.0, 2.0]).mT
    assert tuple(tj.ones(4, 2, 3).mT.shape) == (4, 3, 2)


@pytest.mark.parametrize("sa,sb", [((512, 256), (256,)), ((256,), (256, 300)), ((40, 1), (1, 30)),
                                   ((3, 40, 1), (3, 1, 30)), ((6, 50), (50, 1))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_over_one_inner_index_or_with_an_expanded_gradient_match_pytorch(sa, sb, dtype):
    """A matrix-vector product's gradients: an outer product (one inner index: the
    broadcast product, not numpy's matmul) against a sum's expanded gradient (copied
    before BLAS). Values equal PyTorch's, eagerly and compiled."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(len(sa) + sb[-1])
    a, b = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
    got = []
    for lib, f in ((torch, lambda x, y: x @ y), (tj, lambda x, y: x @ y), (tj, tj.compile(lambda x, y: x @ y))):
        x, y = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
        out = f(x, y)
        out.sum().backward()
        got.append((out.detach().numpy(), x.grad.numpy(), y.grad.numpy()))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for mine in got[1:]:
        for m, t in zip(mine, got[0]):
            assert m.dtype == t.dtype
            np.testing.assert_allclose(m, t, rtol=tol, atol=tol)
