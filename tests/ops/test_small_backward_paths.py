"""The short eager paths of small backward nodes give the general path's values: the
plan calls of relu_backward and two-bound clamp_backward bitwise their impls (special
values included), reshape's and sum's VJPs bound directly, and CPU ``zeros``."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.ops.elementwise import _relu_backward_impl, relu_backward
from tracejit.ops.elementwise_clamp import _clamp_backward_impl, clamp_backward

SPECIAL = [1.5, -0.0, 0.0, np.nan, np.inf, -np.inf, -2.25, 1e-40, 1e-7, 1 - 1e-7, 6.0, -1.0]


def _bits(a):
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def _pair(dtype, n, seed):
    r = np.random.default_rng(seed)
    g = np.array(SPECIAL * 4, dtype)[:n]
    y = np.array(SPECIAL * 4, dtype)[:n]
    r.shuffle(g)
    r.shuffle(y)
    return g.reshape(-1, 1) if n % 2 else g.reshape(2, -1), y.reshape(-1, 1) if n % 2 else y.reshape(2, -1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 12, 37])
def test_relu_backward_plan_is_bitwise_the_impl(dtype, n):
    g, y = _pair(dtype, n, n)
    want = _relu_backward_impl(np, g, y)
    for _ in range(3):   # the first call makes the plan, the next ones run its call
        got = relu_backward(tj.tensor(g), tj.tensor(y)).numpy()
        assert got.dtype == want.dtype and np.array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bounds", [(1e-7, 1 - 1e-7), (-1.0, 1), (0, 0), (2.0, -2.0), (float("-inf"), 6.0)])
def test_two_bound_clamp_backward_plan_is_bitwise_the_impl(dtype, bounds):
    lo, hi = bounds
    g, a = _pair(dtype, 12, 3)
    with np.errstate(invalid="ignore"):
        want = _clamp_backward_impl(np, g, a, lo, hi)
        for _ in range(3):
            got = clamp_backward(tj.tensor(g), tj.tensor(a), lo, hi).numpy()
            assert got.dtype == want.dtype and np.array_equal(_bits(got), _bits(want))


def test_two_bound_clamp_backward_broadcasts_as_the_impl():
    g = np.array([[1.0, -2.0, 3.0]], np.float32)
    a = np.array([[0.5], [-3.0]], np.float32) * np.ones((2, 3), np.float32)
    for _ in range(2):
        got = clamp_backward(tj.tensor(g), tj.tensor(a), -1.0, 1.0).numpy()
        np.testing.assert_array_equal(got, _clamp_backward_impl(np, g, a, -1.0, 1.0))


def test_probability_clamp_gradient_matches_torch():
    torch = pytest.importorskip("torch")
    p = np.array([[0.0, 0.25, 1.0, 0.75]], np.float32)
    w = np.array([[1.0, -2.0, 3.0, 0.5]], np.float32)
    eps = float(np.finfo(np.float32).eps)
    grads = []
    for m in (tj, torch):
        x = m.tensor(p, requires_grad=True)
        (x.clamp(eps, 1 - eps).log() * m.tensor(w)).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])


@pytest.mark.parametrize("grad_layout", ["contiguous", "transposed"])
def test_view_and_sum_gradients_match_torch(grad_layout):
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(0)
    x0 = r.standard_normal((3, 4)).astype(np.float32)
    w = r.standard_normal((4, 3)).astype(np.float32)
    got = []
    for m in (tj, torch):
        x = m.tensor(x0, requires_grad=True)
        wt = m.tensor(w if grad_layout == "contiguous" else np.ascontiguousarray(w.T)).t() \
            if grad_layout == "transposed" else m.tensor(w)
        # a view's gradient arrives transposed (not contiguous) in the second layout
        y = x.view(12).unsqueeze(0).view(4, 3) * wt
        s = y.sum(1) * m.tensor([1.0, 2.0, 3.0, 4.0]) + y.sum(0, keepdim=True).sum() + y.mean(1).sum()
        s.sum().backward()
        got.append(x.grad.numpy())
    np.testing.assert_allclose(got[0], got[1], rtol=1e-6, atol=1e-6)


def test_view_gradient_is_a_view_of_the_incoming_one():
    x = tj.zeros(2, 3, requires_grad=True)
    y = x.view(6)
    (g,) = tj.autograd.grad(y, x, tj.arange(6.0))
    np.testing.assert_array_equal(g.numpy(), np.arange(6.0, dtype=np.float32).reshape(2, 3))


@pytest.mark.parametrize("dtype", [None, tj.float64, tj.int64, tj.complex64, tj.bool])
def test_cpu_zeros(dtype):
    t = tj.zeros(2, 3, dtype=dtype)
    want = dtype or tj.get_default_dtype()
    assert t.dtype is want and t.device == tj.device("cpu") and tuple(t.shape) == (2, 3)
    assert not t.requires_grad and t.grad_fn is None
    np.testing.assert_array_equal(t.numpy(), np.zeros((2, 3), want.np))
    assert t.numpy().flags.writeable
    assert tj.zeros((2, 3), dtype=dtype).shape == t.shape and tj.zeros(tj.Size([2, 3])).shape == t.shape


def test_cpu_zeros_arguments():
    t = tj.zeros(4, requires_grad=True)
    assert t.requires_grad and t.is_leaf
    with pytest.raises(RuntimeError):
        tj.zeros(2, dtype=tj.int64, requires_grad=True)
    with pytest.raises(Exception):
        tj.zeros(-1)
    assert tj.zeros(2, device="cpu").device == tj.device("cpu")
    assert tj.zeros(2, dtype=tj.bfloat16).dtype is tj.bfloat16
    with tj.no_grad():
        assert tj.zeros(3, dtype=tj.float16).numpy().dtype == np.float16


@pytest.mark.parametrize("op", ["cat", "stack"])
def test_planned_cat_and_stack_match_torch(op):
    """A signature's later calls run its plan call: a key/value cache's operands (a permuted
    view beside a contiguous tensor), mixed dtypes promoted, the result C-contiguous."""
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(2)
    past = r.standard_normal((2, 3, 5, 4)).astype(np.float32)
    new = r.standard_normal((2, 5, 3, 4)).astype(np.float32)
    cases = [(past, new.transpose(0, 2, 1, 3), -2 if op == "cat" else 0),
             (past[:, :, :1], past[:, :, 1:2].astype(np.float64), 1), (past[0, 0], past[0, 1], -1)]
    for a, b, dim in cases:
        want = getattr(torch, op)((torch.tensor(a), torch.tensor(b)), dim)
        for _ in range(3):
            ja = tj.tensor(np.ascontiguousarray(a))
            jb = tj.tensor(np.ascontiguousarray(b.transpose(0, 2, 1, 3))).permute(0, 2, 1, 3) if b.ndim == 4 \
                else tj.tensor(b)
            got = getattr(tj, op)((ja, jb), dim)
            assert got.dtype.name == str(want.dtype).split(".")[-1] and got.numpy().flags.c_contiguous
            np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("case", ["many_1d", "dim1", "empty_1d_skipped", "double_backward"])
def test_cat_and_its_gradient_match_torch(case):
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(1)
    if case == "many_1d":
        parts, dim = [r.standard_normal(1 + i % 3).astype(np.float32) for i in range(50)], 0
    elif case == "dim1":
        parts, dim = [r.standard_normal((2, k)).astype(np.float32) for k in (3, 1, 4)], -1
    else:
        parts, dim = [r.standard_normal((2, 3)).astype(np.float32), np.zeros(0, np.float32),
                      r.standard_normal((1, 3)).astype(np.float32)], 0
    got = []
    for m in (tj, torch):
        xs = [m.tensor(p, requires_grad=True) for p in parts]
        y = m.cat(xs, dim)
        w = m.tensor(np.arange(y.numel(), dtype=np.float32).reshape(tuple(y.shape)))
        loss = (y * y * w).sum() if case == "double_backward" else (y * w).sum()
        if case == "double_backward":
            gs = m.autograd.grad(loss, xs[:1] + xs[2:], create_graph=True)
            sum(g.sum() for g in gs).backward()
        else:
            loss.backward()
        got.append((y.detach().numpy(), [None if x.grad is None else x.grad.numpy() for x in xs]))
    np.testing.assert_array_equal(got[0][0], got[1][0])
    for p, a, b in zip(parts, got[0][1], got[1][1]):
        if p.size == 0:   # (PyTorch gives the skipped empty tensor an empty gradient; here None)
            continue
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("create_graph", [False, True])
def test_cat_and_stack_gradients_as_views_or_recorded_match_torch(create_graph):
    """A plain backward takes cat's and stack's gradient pieces as views of the incoming
    one (0-d pieces of a stack of scalars stay arrays); create_graph records them."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 2))
    s = [1.5, -2.0, 0.25]
    w = rng.standard_normal((3, 6))
    got, want = [], []
    for lib, out in ((tj, got), (torch, want)):
        xa, xb = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
        xs = [lib.tensor(v, requires_grad=True) for v in s]
        loss = (lib.cat([xa, xb], 1) * lib.tensor(w)).pow(2).sum() + (lib.stack(xs) ** 3).sum()
        grads = lib.autograd.grad(loss, [xa, xb] + xs, create_graph=create_graph)
        out.extend(g.detach().numpy() for g in grads)
        if create_graph:
            second = lib.autograd.grad(sum(g.sum() for g in grads), [xa] + xs)
            out.extend(g.numpy() for g in second)
    assert all(type(g) is np.ndarray for g in got) and got[2].shape == ()
    for g, t in zip(got, want):
        np.testing.assert_allclose(g, t, rtol=1e-12, atol=1e-12)
