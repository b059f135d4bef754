"""Gradients of ops/linalg_dense.py against PyTorch where they need care: det at singular
matrices, pinv's and QR's VJPs."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _det_grads(lib, a, create):
    x = lib.tensor(a, dtype=lib.float64, requires_grad=True)
    (g,) = lib.autograd.grad(lib.linalg.det(x).sum(), x, create_graph=create)
    if not create or abs(np.linalg.det(np.array(a))).min() < 0.5:
        return [g.detach().numpy()]
    w = lib.arange(float(g.numel()), dtype=lib.float64).reshape(g.shape)
    return [g.detach().numpy(), lib.autograd.grad((g * w).sum(), x)[0].numpy()]


@pytest.mark.parametrize("a", [[[1.0, 0.0], [0.0, 0.0]], [[1.0, 2.0], [2.0, 4.0]], [[0.0, 0.0], [0.0, 0.0]],
                               [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]],
                               [[[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 2.0]], [[2.0, -1.0, 0.5], [0.0, 1.0, 3.0], [1.0, 1.0, -2.0]]],
                               [[2.0, -1.0, 0.5], [0.0, 1.0, 3.0], [1.0, 1.0, -2.0]]])
def test_det_gradient_at_a_singular_matrix_is_the_cofactor_matrix(a):
    """det's gradient is the cofactor matrix, also where A has no inverse (PyTorch's with
    create_graph); it raised numpy's LinAlgError there. An invertible A's second derivative
    equals PyTorch's too."""
    want = _det_grads(torch, a, True)
    for create in (False, True):
        got = _det_grads(tj, a, create)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 4), (2, 3, 4)])
def test_pinv_gradient_matches_pytorch(shape):
    """pinv's VJP (PyTorch's pinv_backward) on wide, tall, square and batched matrices, as
    Lagrangian networks take it of a Hessian."""
    a = np.random.default_rng(0).standard_normal(shape)
    w = np.random.default_rng(1).standard_normal(shape[:-2] + (shape[-1], shape[-2]))
    grads = []
    for m in (torch, tj):
        x = m.tensor(a, requires_grad=True)
        (m.linalg.pinv(x) * m.tensor(w)).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-10, atol=1e-12)


_H = np.random.default_rng(2).standard_normal((4, 4))


@pytest.mark.parametrize("a", [np.diag([1.0, 1e-3, 1e-9]), np.random.default_rng(3).standard_normal((2, 3, 5)),
                               _H + _H.T, np.zeros((0, 3))])
@pytest.mark.parametrize("tols", [{}, {"atol": 1e-2}, {"rtol": 1e-2}, {"atol": 0.5, "rtol": 1e-6}, {"atol": 0.0},
                                  {"hermitian": True}, {"hermitian": True, "atol": 1.0}])
def test_pinv_tolerances_match_pytorch(a, tols):
    """Singular values (eigenvalue magnitudes when hermitian) at or below max(atol,
    rtol * largest) count as zero; atol was ignored."""
    if tols.get("hermitian") and not (a.ndim == 2 and a.shape[0] == a.shape[1] and np.allclose(a, a.T)):
        pytest.skip("hermitian=True needs a symmetric matrix")
    got = []
    for m in (torch, tj):
        x = m.tensor(a, requires_grad=a.size > 0)
        p = m.linalg.pinv(x, **tols)
        grad = m.autograd.grad((p * p).sum(), x)[0].numpy() if a.size else None
        got.append((p.detach().numpy(), grad))
    np.testing.assert_allclose(got[1][0], got[0][0], rtol=1e-9, atol=1e-12)
    if a.size:
        np.testing.assert_allclose(got[1][1], got[0][1], rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("shape,mode", [((5, 3), "reduced"), ((4, 4), "reduced"), ((4, 4), "complete"),
                                        ((2, 6, 3), "reduced")])
def test_qr_gradient_matches_pytorch(shape, mode):
    """QR's VJP (PyTorch's linalg_qr_backward) through Q and R together, as an
    orthogonalization trained through (a Stiefel layer, QR-based orthogonal features) takes it."""
    a = np.random.default_rng(0).standard_normal(shape)
    wq, wr = (np.random.default_rng(s).standard_normal(shape[:-2] + (shape[-2], shape[-1])) for s in (1, 2))
    grads = []
    for m in (torch, tj):
        x = m.tensor(a, requires_grad=True)
        q, r = m.linalg.qr(x, mode=mode)
        ((q * m.tensor(wq)).sum() + (r * m.tensor(wr[..., :r.shape[-2], :])).sum()).backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("shape,mode", [((3, 5), "reduced"), ((3, 5), "complete"), ((2, 3, 6), "reduced"),
                                        ((3, 4), "reduced")])
@pytest.mark.parametrize("through", ["Q", "R", "both"])
def test_qr_gradient_of_a_wide_input_matches_pytorch(shape, mode, through):
    """A wide A = [X | Y] (m < n): Q R = [Q U | Q V], V = Q^H Y (it raised)."""
    a = np.random.default_rng(0).standard_normal(shape)
    wq = np.random.default_rng(1).standard_normal(shape[:-1] + (shape[-2],))
    wr = np.random.default_rng(2).standard_normal(shape)
    grads = []
    for m in (torch, tj):
        x = m.tensor(a, requires_grad=True)
        q, r = m.linalg.qr(x, mode=mode)
        loss = (q * m.tensor(wq)).sum() if through != "R" else 0
        loss = loss + (r * m.tensor(wr)).sum() if through != "Q" else loss
        loss.backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-9, atol=1e-10)


def test_qr_gradient_of_a_tall_input_in_complete_mode_names_the_case():
    x = tj.randn(5, 3, requires_grad=True)
    with pytest.raises(NotImplementedError, match=r"linalg.qr: the gradient .* \(got shape \(5, 3\)"):
        tj.linalg.qr(x, mode="complete")[0].sum().backward()


_COMPLEX_CALLS = {
    "inv": lambda m, a, b: [m.linalg.inv(a)],
    "solve": lambda m, a, b: [m.linalg.solve(a, b)],
    "det": lambda m, a, b: [m.linalg.det(a)],
    "slogdet": lambda m, a, b: list(m.linalg.slogdet(a)),
    "eigvals": lambda m, a, b: [m.linalg.eigvals(a)],
    "svd": lambda m, a, b: [m.linalg.svdvals(a)] + [u @ vh for u, s, vh in [m.linalg.svd(b, full_matrices=False)]],
    "qr": lambda m, a, b: list(m.linalg.qr(a)) + list(m.linalg.qr(b)),
    "cholesky": lambda m, a, b: [m.cholesky_solve(b, m.linalg.cholesky(a @ a.mH + m.eye(3), upper=True), upper=True)],
    "eigh": lambda m, a, b: [(lambda w, v: (v * w[..., None, :]) @ v.mH)(*m.linalg.eigh(a + a.mH))],
    "pinv": lambda m, a, b: [m.linalg.pinv(b), m.linalg.lstsq(a, b).solution],
    "matrix_exp": lambda m, a, b: [m.linalg.matrix_exp(a)],
    "lu": lambda m, a, b: list(m.linalg.lu(a)) + [m.linalg.lu_solve(*m.linalg.lu_factor(a), b)],
}


@pytest.mark.parametrize("name", list(_COMPLEX_CALLS))
def test_complex_values_and_gradients_match_pytorch(name):
    """(svd, eigh: products that a singular vector's or eigenvector's phase leaves unchanged, as
    PyTorch's gradient asks)"""
    r = np.random.default_rng(3)
    a, b = (r.standard_normal(s) + 1j * r.standard_normal(s) for s in ((2, 3, 3), (2, 3, 2)))
    got = []
    for m in (torch, tj):
        ta, tb = m.tensor(a, requires_grad=True), m.tensor(b, requires_grad=True)
        outs = _COMPLEX_CALLS[name](m, ta, tb)
        loss = 0
        for k, o in enumerate(outs):
            w = np.random.default_rng(k).standard_normal(tuple(o.shape) + (2,))
            parts = m.view_as_real(o) if o.dtype.is_complex else o[..., None]
            loss = loss + (parts * m.tensor(w[..., :parts.shape[-1]])).sum()
        loss.backward()
        got.append([o.detach().numpy() for o in outs] + [ta.grad.numpy(), tb.grad.numpy() if tb.grad is not None else 0])
    for g, w in zip(*got):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(g, w, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("fn", ["svd", "svdvals"])
def test_svd_takes_pytorchs_driver_keyword(fn):
    """driver=None is accepted; a cuSOLVER driver on a CPU tensor raises, as PyTorch's."""
    a = np.random.default_rng(0).standard_normal((3, 2))
    got = [getattr(m.linalg, fn)(m.tensor(a), driver=None) for m in (torch, tj)]
    s = [g if fn == "svdvals" else g[1] for g in got]
    np.testing.assert_allclose(s[1].numpy(), s[0].numpy(), rtol=1e-12)
    for m in (torch, tj):
        with pytest.raises(RuntimeError, match="only supported on CUDA"):
            getattr(m.linalg, fn)(m.tensor(a), driver="gesvd")


def _slogdet_sign(lib):
    a = np.array([[2.0, 1.0, 0.0], [1.0, -3.0, 1.0], [0.0, 1.0, 1.5]])
    x = lib.tensor(a, requires_grad=True)
    s = lib.linalg.slogdet(x)
    got = [s.sign.requires_grad, lib.slogdet(x).sign.requires_grad]
    s.sign.sum().backward(retain_graph=True)
    got.append(x.grad)                                   # no gradient reaches A: stays None
    got.append(lib.autograd.grad(s.sign.sum(), x, allow_unused=True, retain_graph=True)[0])
    got.append(lib.autograd.grad(s.sign.sum(), x, allow_unused=True, materialize_grads=True,
                                 retain_graph=True)[0].numpy())
    (s.sign * 3 + s.logabsdet).sum().backward()
    return got + [x.grad.numpy()]


def test_slogdet_sign_requires_grad_and_sends_no_gradient_as_torch():
    want, got = _slogdet_sign(torch), _slogdet_sign(tj)
    assert got[:4] == want[:4] == [True, True, None, None]
    for g, w in zip(got[4:], want[4:]):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    with pytest.raises(RuntimeError, match="appear"):
        x = tj.eye(3, requires_grad=True)
        tj.autograd.grad(tj.linalg.slogdet(x).sign.sum(), x)


@pytest.mark.parametrize("shape", [(5, 4, 4), (3, 6, 4), (2, 4, 7)])
@pytest.mark.parametrize("factors", ["S", "USVh"])
def test_svdvals_and_svd_gradients_match_pytorch(shape, factors):
    """svdvals is one record (the values' gradient reads U and Vh only); svd's factors
    keep PyTorch's gradients, each factor's and their sum."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(sum(shape))
    a = rng.standard_normal(shape)
    w = [rng.standard_normal(s) for s in ((shape[0], min(shape[1:])),)]
    got = []
    for lib in (torch, tj):
        x = lib.tensor(a, requires_grad=True)
        if factors == "S":
            s = lib.linalg.svdvals(x)
            loss = (s * lib.tensor(w[0])).sum()
            vals = s
        else:
            u, s, vh = lib.linalg.svd(x, full_matrices=False)
            # (sign-invariant in the vectors: the first singular pair's outer product)
            outer = u[..., :, :1] @ vh[..., :1, :]
            loss = (s * lib.tensor(w[0])).sum() + (outer * lib.tensor(np.linspace(-1, 1, a[0].size).reshape(a.shape[1:]))).sum()
            vals = s
        loss.backward()
        got.append((vals.detach().numpy(), x.grad.numpy()))
    np.testing.assert_allclose(got[1][0], got[0][0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[1][1], got[0][1], rtol=1e-8, atol=1e-10)
