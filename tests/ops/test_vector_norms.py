"""torch.norm, linalg.vector_norm and F.normalize share reductions.norm: every p against
PyTorch, and a zero vector's gradient is 0 (not NaN), as PyTorch's; cdist and pdist too."""
import math

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F

torch = pytest.importorskip("torch")

PS = [1, 2, 3, 0.5, -1, 0, math.inf, -math.inf]


def _x():
    x = np.random.default_rng(0).standard_normal((4, 5)).astype("float32")
    x[1, 2] = 0.0
    return x


@pytest.mark.parametrize("p", PS)
def test_norm_matches_torch_for_every_p(p):
    x = _x()
    np.testing.assert_allclose(tj.norm(tj.tensor(x), p=p, dim=1).numpy(),
                               torch.norm(torch.tensor(x), p=p, dim=1).numpy(), rtol=1e-5)
    np.testing.assert_allclose(tj.linalg.vector_norm(tj.tensor(x), ord=p).numpy(),
                               torch.linalg.vector_norm(torch.tensor(x), ord=p).numpy(), rtol=1e-5)
    got = tj.linalg.vector_norm(tj.tensor(x), ord=p, dim=(0, 1), keepdim=True)
    assert tuple(got.shape) == (1, 1)


@pytest.mark.parametrize("p", [1, 2, 3, math.inf, -math.inf, 0])
def test_normalize_matches_torch_for_every_p(p):
    x = _x()
    np.testing.assert_allclose(F.normalize(tj.tensor(x), p=p, dim=1).numpy(),
                               torch.nn.functional.normalize(torch.tensor(x), p=p, dim=1).numpy(),
                               rtol=1e-5)


@pytest.mark.parametrize("p", [2, 3])
def test_zero_vector_norm_gradient_is_zero(p):
    z = tj.zeros(3, requires_grad=True)
    tj.linalg.vector_norm(z, ord=p).backward()
    np.testing.assert_array_equal(z.grad.numpy(), np.zeros(3, "float32"))


def test_normalize_of_zero_rows_has_pytorchs_gradient():
    x = np.zeros((2, 3), "float32")
    x[1] = [1.0, -2.0, 0.5]
    a = tj.tensor(x, requires_grad=True)
    b = torch.tensor(x, requires_grad=True)
    (F.normalize(a, dim=1) * tj.arange(3.0)).sum().backward()
    (torch.nn.functional.normalize(b, dim=1) * torch.arange(3.0)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5)
    assert np.isfinite(a.grad.numpy()).all()


def test_compiled_norm_gradient_matches_eager():
    x = _x()

    def f(t):
        return tj.linalg.vector_norm(t, dim=1).sum()

    a = tj.tensor(x, requires_grad=True)
    f(a).backward()
    b = tj.tensor(x, requires_grad=True)
    tj.compile(f)(b).backward()
    np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-5)


@pytest.mark.parametrize("form", ["norm", "vector_norm_p3", "normalize"])
def test_compiled_zero_row_gradients_match_torch(form):
    """Captured, the traced sum carries no requires_grad flag: the guarded root is still used."""
    x = np.zeros((3, 4), "float32")
    x[1] = [1.0, 2.0, 3.0, 4.0]
    fns = {"norm": lambda m, t: m.norm(t, dim=1), "vector_norm_p3": lambda m, t: m.linalg.vector_norm(t, 3, dim=1),
           "normalize": lambda m, t: m.nn.functional.normalize(t, dim=1)}
    b = torch.tensor(x, requires_grad=True)
    (fns[form](torch, b) * 2).sum().backward()
    a = tj.tensor(x, requires_grad=True)
    tj.compile(lambda t: (fns[form](tj, t) * 2).sum())(a).backward()
    assert np.isfinite(a.grad.numpy()).all()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5)


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("compiled", [False, True])
def test_cdist_and_pdist_of_coincident_rows_have_pytorchs_gradient(p, compiled):
    """A set's distances to itself (a kernel matrix's) are 0 on the diagonal: 0 gradient there."""
    x = np.array([[0.0, 1.0], [2.0, 3.0], [0.0, 1.0], [-1.0, 2.0]], "float32")

    def f(m, t):
        return (m.cdist(t, t, p=p).pow(2) * 0.5).sum() + m.nn.functional.pdist(t, p=p).sum()
    b = torch.tensor(x, requires_grad=True)
    f(torch, b).backward()
    a = tj.tensor(x, requires_grad=True)
    (tj.compile(lambda t: f(tj, t)) if compiled else lambda t: f(tj, t))(a).backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_std_of_a_constant_has_zero_gradient():
    a = tj.tensor([[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]], requires_grad=True)
    b = torch.tensor([[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]], requires_grad=True)
    a.std(1).sum().backward()
    b.std(1).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5)
    assert np.isfinite(a.grad.numpy()).all()


def test_compiled_std_of_a_constant_has_zero_gradient():
    import warnings
    x = tj.tensor([[2.0], [2.0], [2.0]], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g, = tj.autograd.grad(tj.compile(lambda a: a.std(), fullgraph=True)(x), [x])
    np.testing.assert_array_equal(g.numpy(), np.zeros((3, 1), "float32"))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_big_arrays_2_norm_streams_it_and_matches_torch(dtype):
    # chunk by chunk, no full-size square (the norm2 primitive)
    import tracemalloc
    rng = np.random.default_rng(3)
    g = (rng.standard_normal((4099, 257)) * 1e-3).astype(dtype)
    # (torch's float32 sum is off by ~1e-5 here; the chunks' float64 sum is not)
    want = np.sqrt(np.sum(g.astype(np.float64) ** 2))
    np.testing.assert_allclose(torch.linalg.vector_norm(torch.tensor(g)).item(), want, rtol=1e-4)
    x = tj.tensor(g)
    tracemalloc.start()
    try:
        got = tj.norm(x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < g.nbytes // 8   # (a * a: the size of g)
    for got in (got, tj.linalg.vector_norm(x)):
        assert got.shape == () and got.dtype.name == dtype
        np.testing.assert_allclose(got.item(), want, rtol=1e-6)
    kept = tj.norm(tj.tensor(g), keepdim=True)
    assert kept.shape == (1, 1)
    np.testing.assert_allclose(kept.numpy(), [[want]], rtol=1e-6)
    strided = np.sqrt(np.sum(g[:, ::2].astype(np.float64) ** 2))
    np.testing.assert_allclose(tj.norm(tj.tensor(g)[:, ::2]).item(), strided, rtol=1e-6)
    x, xt = tj.tensor(g, requires_grad=True), torch.tensor(g, requires_grad=True)
    tj.norm(x).backward()
    torch.linalg.vector_norm(xt).backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-9)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_whole_2_norm_is_one_primitive_eager_and_compiled_agree(dtype, keepdim):
    # eager, traced and compiled run the same norm2 primitive: same values, same gradients,
    # and a zero array's gradient is 0 (not NaN), as PyTorch's
    rng = np.random.default_rng(5)
    g = rng.standard_normal((70000, 3)).astype(dtype)   # (more than one 65536-element chunk)

    def f(t):
        return tj.norm(t, keepdim=keepdim) * 3

    from tracejit.jit.tracer import trace_graph
    from tracejit.ops.registry import Aval
    ctx, _ = trace_graph(f, [Aval(g.shape, getattr(tj, dtype))])
    assert {e.prim.name for e in ctx.eqns} == {"norm2", "mul"}
    for data in (g, np.zeros((5, 2), dtype)):
        a, b = tj.tensor(data, requires_grad=True), tj.tensor(data, requires_grad=True)
        t = torch.tensor(data, requires_grad=True)
        ea, cb = f(a), tj.compile(f)(b)
        (torch.linalg.vector_norm(t, keepdim=keepdim) * 3).backward()
        assert ea.shape == cb.shape == ((1, 1) if keepdim else ())
        np.testing.assert_array_equal(cb.detach().numpy(), ea.detach().numpy())
        np.testing.assert_allclose(ea.detach().numpy(), np.sqrt(np.sum(data.astype(np.float64) ** 2)) * 3
                                   * np.ones(ea.shape), rtol=1e-6)
        ea.sum().backward()
        cb.sum().backward()
        np.testing.assert_array_equal(b.grad.numpy(), a.grad.numpy())
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("p", [0.5, 0.25, -1, -2.5])
def test_a_norm_below_1_has_a_zero_gradient_at_zero_elements(p):
    """|x|^p's slope is infinite at 0: PyTorch's gradient is 0 there (and, for p < 0, whose
    norm is then 0, everywhere); 0 * inf was NaN."""
    a = np.array([0.0, 2.0, -3.0])
    res = []
    for m in (torch, tj):
        x = m.tensor(a, requires_grad=True)
        y = m.linalg.vector_norm(x * 1.0, p)
        y.backward()
        res.append((y.detach().numpy(), x.grad.numpy()))
    for got, want in zip(res[1], res[0]):
        np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("compiled", [False, True])
def test_the_zero_norm_requires_grad_and_leaves_its_inputs_gradient_undefined(compiled):
    """ord 0 (the count of nonzeros) of a tensor that requires grad: a result that requires
    grad, whose backward leaves the input's gradient undefined, as PyTorch's (it raised
    "does not require grad")."""
    for m in (torch, tj):
        x = m.tensor([0.0, 1.5, -2.0, 0.0, 4.0], requires_grad=True)
        f = tj.compile(lambda t: tj.linalg.vector_norm(t, ord=0) + t.sum() * 0.0) if compiled and m is tj \
            else (lambda t: m.linalg.vector_norm(t, ord=0) + t.sum() * 0.0)
        y = f(x)
        assert y.item() == 3.0 and y.requires_grad
        y.backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.zeros(5, "float32"))
        z = m.tensor([0.0, 1.5, float("nan")], requires_grad=True)
        n = m.linalg.vector_norm(z, ord=0)
        n.backward()
        assert n.item() == 2.0 and z.grad is None


@pytest.mark.parametrize("p", [math.inf, -math.inf, 0, 0.5, 3])
def test_pairwise_distance_takes_every_p_of_pytorch(p):
    x, y = _x(), _x()[::-1].copy()
    want = torch.nn.functional.pairwise_distance(torch.tensor(x), torch.tensor(y), p=p, keepdim=True).numpy()
    # (compiled for two p only: each is a kernel compile, and every p is one composite)
    for run in (F.pairwise_distance,) + ((tj.compile(F.pairwise_distance),) if p in (0, -math.inf) else ()):
        np.testing.assert_allclose(run(tj.tensor(x), tj.tensor(y), p=p, keepdim=True).numpy(), want, rtol=1e-5)


@pytest.mark.parametrize("mode", ["use_mm_for_euclid_dist_if_necessary", "donot_use_mm_for_euclid_dist",
                                  "use_mm_for_euclid_dist"])
def test_cdist_follows_compute_mode_as_pytorch(mode):
    """A few rows' distances to themselves are exactly 0 unless the mode asks for the product."""
    x = np.random.default_rng(1).standard_normal((30, 3)).astype("float32") * 10
    for n in (25, 30):
        want = torch.cdist(torch.tensor(x[:n]), torch.tensor(x[:n]), compute_mode=mode).numpy()
        got = tj.cdist(tj.tensor(x[:n]), tj.tensor(x[:n]), compute_mode=mode).numpy()
        assert (np.diagonal(got) == 0).all() == (np.diagonal(want) == 0).all()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-2)


def test_negative_p_and_an_unknown_mode_are_refused_as_pytorch():
    x = _x()
    for m in (torch, tj):
        for call in (lambda: m.cdist(m.tensor(x), m.tensor(x), p=-1.0), lambda: m.pdist(m.tensor(x), p=-math.inf),
                     lambda: m.cdist(m.tensor(x), m.tensor(x), compute_mode="fast")):
            with pytest.raises((RuntimeError, ValueError)):
                call()


def test_zero_norm_distances_give_zero_gradients_as_pytorch():
    x = np.array([[1.0, 0.0, -2.0], [0.0, np.inf, 0.0], [3.0, 1.0, np.nan]])
    got = []
    for m in (torch, tj):
        a = m.tensor(x, requires_grad=True)
        d = m.cdist(a, a.detach() * 2, p=0).sum() + m.pdist(a, p=0).sum()
        d.backward()
        got.append((d.detach().numpy(), a.grad.numpy()))
    for g, w in zip(*got):
        np.testing.assert_array_equal(g, w)
