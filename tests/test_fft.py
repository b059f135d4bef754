"""tracejit.fft: transforms' values, dtypes and gradients against PyTorch's."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _data(shape, cplx, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    if cplx:
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(np.result_type(dtype, np.complex64) if cplx else dtype)


def _loss(y, lib):
    """A real loss reading every real and imaginary part with its own weight."""
    if y.is_complex():
        y = lib.view_as_real(y.resolve_conj())
    return (y * lib.arange(y.numel(), dtype=y.dtype).reshape(y.shape).cos()).sum()


def _check(name, shape, cplx, dtype=np.float32, **kw):
    a = _data(shape, cplx, dtype)
    xt = torch.tensor(a, requires_grad=True)
    xj = tj.tensor(a, requires_grad=True)
    yt = getattr(torch.fft, name)(xt, **kw)
    yj = getattr(tj.fft, name)(xj, **kw)
    assert yj.dtype.name == str(yt.dtype).split(".")[1]
    assert tuple(yj.shape) == tuple(yt.shape)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(yj.detach().numpy(), yt.detach().resolve_conj().numpy(), atol=tol, rtol=tol)
    _loss(yt, torch).backward()
    _loss(yj, tj).backward()
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.resolve_conj().numpy(), atol=tol, rtol=tol)


@pytest.mark.parametrize("kw", [{}, {"n": 4}, {"n": 9, "norm": "ortho"}, {"dim": 0, "norm": "forward"}])
@pytest.mark.parametrize("name", ["fft", "ifft"])
@pytest.mark.parametrize("cplx", [True, False])
def test_c2c_1d(name, kw, cplx):
    _check(name, (4, 6), cplx, **kw)


@pytest.mark.parametrize("kw", [{}, {"n": 4}, {"n": 7}, {"n": 9, "norm": "ortho"}, {"dim": 0, "norm": "forward"}])
def test_rfft(kw):
    _check("rfft", (4, 6), False, **kw)


@pytest.mark.parametrize("kw", [{}, {"n": 4}, {"n": 7}, {"n": 10}, {"n": 9, "norm": "ortho"},
                                {"dim": 0, "norm": "forward"}])
def test_irfft(kw):
    _check("irfft", (4, 6), True, **kw)


@pytest.mark.parametrize("name,cplx", [("fft2", True), ("ifft2", True), ("fftn", True), ("ifftn", True),
                                       ("rfft2", False), ("rfftn", False), ("irfft2", True), ("irfftn", True)])
@pytest.mark.parametrize("kw", [{}, {"s": (3, 7), "norm": "ortho"}, {"s": (5, 6)}])
def test_nd(name, cplx, kw):
    _check(name, (3, 4, 5), cplx, **kw)


@pytest.mark.parametrize("name,cplx,kw", [("hfft", True, {}), ("hfft", True, {"n": 7}), ("ihfft", False, {}),
                                          ("ihfft", False, {"n": 5, "norm": "ortho"})])
def test_hermitian(name, cplx, kw):
    _check(name, (4, 6), cplx, **kw)


def test_float64_and_noncontiguous():
    _check("rfft", (5, 8), False, dtype=np.float64)
    _check("fft2", (5, 8), True, dtype=np.float64)
    a = _data((6, 4), False)
    got = tj.fft.rfft(tj.tensor(a).t(), dim=0)
    np.testing.assert_allclose(got.numpy(), np.fft.rfft(a.T, axis=0), atol=1e-5)


def test_integer_input_and_errors():
    y = tj.fft.fft(tj.arange(4))
    assert y.dtype is tj.complex64
    np.testing.assert_allclose(y.numpy(), np.fft.fft(np.arange(4)), atol=1e-6)
    with pytest.raises(tj.errors.DTypeError, match="rfft expects a real input"):
        tj.fft.rfft(tj.ones(4, dtype=tj.cfloat))
    with pytest.raises(ValueError, match="norm"):
        tj.fft.fft(tj.ones(4), norm="half")
    with pytest.raises(ValueError, match="invalid number of data points"):
        tj.fft.irfft(tj.ones(1, dtype=tj.cfloat))


def test_compiled_transforms_run_in_the_graph_with_their_gradient():
    def f(x):
        return tj.fft.rfft(x).abs().sum()
    x = tj.randn(8)
    cf = tj.compile(f, fullgraph=True)
    for _ in range(2):
        got = cf(x)
        assert float(got) == pytest.approx(float(np.abs(np.fft.rfft(x.numpy())).sum()), rel=1e-5)
    assert cf.cache_stats()["compiles"] == 1
    xg = tj.randn(8, requires_grad=True)
    got = tj.compile(f, fullgraph=True)(xg)
    got.backward()
    want = tj.tensor(xg.detach().numpy(), requires_grad=True)
    f(want).backward()
    np.testing.assert_allclose(xg.grad.numpy(), want.grad.numpy(), rtol=1e-6)


def test_compiled_irfft2_gradient_matches_pytorch():
    """irfft's gradient doubles the mirrored bins of the half spectrum inside the
    compiled backward (no constant tensor in the backward graph)."""
    torch = pytest.importorskip("torch")
    rs = np.random.RandomState(0)
    xa, wa = rs.randn(2, 3, 8, 8).astype(np.float32), rs.randn(8, 5).astype(np.float32)

    def f(fw, x, w):
        return (fw.fft.irfft2(fw.fft.rfft2(x) * w, s=x.shape[-2:]) ** 2).sum()
    x, w = tj.tensor(xa, requires_grad=True), tj.tensor(wa, requires_grad=True)
    tj.compile(lambda x, w: f(tj, x, w))(x, w).backward()
    xt, wt = torch.tensor(xa, requires_grad=True), torch.tensor(wa, requires_grad=True)
    f(torch, xt, wt).backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-3)


def test_a_transform_length_from_a_dynamic_size_stays_dynamic():
    """``rfft(u, n=2 * L)`` / ``irfft(..., n=2 * L)`` (an FFT convolution) with L a dynamic
    length: one capture serves every length, with the eager values and gradients."""
    def f(u, k):
        L = u.shape[-1]
        uf, kf = tj.fft.rfft(u, n=2 * L), tj.fft.rfft(k, n=2 * L) / (2 * L)
        return (tj.fft.irfft(uf * kf, n=2 * L, norm="forward")[..., :L] + u).pow(2).sum()
    cf = tj.compile(f, dynamic=True)
    rs = np.random.RandomState(0)
    for L in (8, 9, 11):
        ua, ka = rs.randn(2, 3, L).astype(np.float32), rs.randn(3, L).astype(np.float32)
        got = []
        for g in (f, cf):
            u, k = tj.tensor(ua, requires_grad=True), tj.tensor(ka, requires_grad=True)
            y = g(u, k)
            y.backward()
            got.append((y.item(), u.grad.numpy(), k.grad.numpy()))
        assert got[1][0] == pytest.approx(got[0][0], rel=1e-5)
        np.testing.assert_allclose(got[1][1], got[0][1], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got[1][2], got[0][2], rtol=1e-4, atol=1e-5)
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]


@pytest.mark.parametrize("name", ["hfft2", "ihfft2", "hfftn", "ihfftn"])
@pytest.mark.parametrize("s, dim, norm", [(None, (-2, -1), None), ((3, 7), (0, 2), "ortho"), ((2, 3), (1, 0), "forward")])
def test_hermitian_transforms_of_several_dims_match_pytorch(name, s, dim, norm):
    r = np.random.default_rng(0)
    x = r.standard_normal((3, 5, 4)) + (1j * r.standard_normal((3, 5, 4)) if name.startswith("h") else 0)
    got, want = [getattr(m.fft, name)(m.tensor(x), s=s, dim=dim, norm=norm) for m in (tj, torch)]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name, shape, dtype", [("rfft", (4, 3), "complex64"), ("fft2", (4, 5), "complex64"),
                                                ("irfftn", (4, 8), "float32"), ("ihfft", (4, 3), "complex64")])
def test_transforms_write_into_out_as_torch(name, shape, dtype):
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    got = {}
    for m in (torch, tj):
        src = m.tensor(x) if name != "irfftn" else m.fft.rfftn(m.tensor(x))
        out = m.empty(shape, dtype=getattr(m, dtype))
        r = getattr(m.fft, name)(src, out=out)
        assert r is out
        got[m] = out.resolve_conj().numpy() if m is torch else out.numpy()
    np.testing.assert_allclose(got[tj], got[torch], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("call", [lambda m, x: m.fft.fft(x, norm="foo"), lambda m, x: m.fft.fft(x, n=0),
                                  lambda m, x: m.fft.fftn(x, s=(3, 4), dim=(0,)),
                                  lambda m, x: m.fft.fftn(x, dim=(0, 0)), lambda m, x: m.fft.irfft(x, n=0),
                                  lambda m, x: m.fft.rfft(m.zeros(0))])
def test_bad_transform_arguments_raise_runtime_errors_as_torch(call):
    """PyTorch's transforms raise RuntimeError for these (ours are ValueErrors too)."""
    for m in (torch, tj):
        with pytest.raises(RuntimeError):
            call(m, m.ones(4, 5))
