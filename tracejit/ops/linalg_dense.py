"""Dense linear algebra primitives (LAPACK through numpy's linalg): inverse, determinant,
sign/log-determinant, solve, Cholesky, symmetric eigendecomposition, QR, SVD, pinv.

Each works on the last two dims (batched over the others) and has PyTorch's gradient
where PyTorch documents one for real inputs: inv (-A^-T g A^-T), det (g det A^-T), slogdet
(g A^-T), solve (the solve of A^T against g for B; minus that times X^T for A), cholesky
(PyTorch's phi formula: L^-T phi(L^T gL) L^-1, symmetrized), eigh (V (diag(gw) + skew(V^T
gV) / (w_j - w_i)) V^T), svd (PyTorch's svd_backward, each of U, S, Vh on its own), qr and
pinv. Each takes complex input too (complex_ops.py lists them), with PyTorch's complex
gradients: the transposes above become conjugate transposes.
"""
from __future__ import annotations

from collections import namedtuple

from ..errors import ShapeError
from ..tensor import Tensor
from ..typeinfo import finfo
from .complex_ops import conj
from .linalg import _mT, _swap
from .registry import Aval, batch_leading, bind, defprim
from . import autocast as _autocast

__all__ = ["inv", "det", "slogdet", "solve", "cholesky", "eigh", "qr", "svd", "pinv", "INV", "DET"]

_SlogDet = namedtuple("slogdet", ["sign", "logabsdet"])
_Eigh = namedtuple("eigh", ["eigenvalues", "eigenvectors"])
_QR = namedtuple("qr", ["Q", "R"])
_SVD = namedtuple("svd", ["U", "S", "Vh"])


def _square(op):
    def rule(a, **kw):
        if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
            raise ShapeError(f"{op}: expected a batch of square matrices, got shape {a.shape}")
        if not (a.dtype.is_floating_point or a.dtype.is_complex):
            raise TypeError(f"{op}: expected a floating point or complex input, got {a.dtype.name}")
        return Aval(a.shape, a.dtype, a.device)
    return rule


def _no_grad(op):
    def vjp(*args, **kw):
        raise NotImplementedError(f"{op}: gradients through {op} are not supported; detach() its "
                                  f"input or use a differentiable alternative")
    return vjp


# ---------------------------------------------------------------- inverse and determinant
INV = defprim("linalg_inv", lambda xp, a: xp.linalg.inv(a), _square("linalg.inv"),
              lambda g, out, a: (-(_mT(out) @ g @ _mT(out)),), kind="other",
              save=lambda rq: (), save_out=True, extra={"batch": batch_leading})


def _det_rule(a):
    _square("linalg.det")(a)
    return Aval(a.shape[:-2], a.dtype, a.device)


def _cofactor_impl(xp, a):
    """det(A) A^-T, also where A is singular: det(U) det(Vh) U diag(prod_{j!=i} s_j) Vh from
    A's SVD (the cofactor matrix, continuous in A; no s_j is divided by)."""
    if a.shape[-1] == 0:
        return xp.zeros_like(a)
    u, s, vh = xp.linalg.svd(a)
    ones = xp.ones_like(s[..., :1])
    before = xp.cumprod(xp.concatenate([ones, s[..., :-1]], -1), -1)
    after = xp.cumprod(xp.concatenate([ones, s[..., :0:-1]], -1), -1)[..., ::-1]
    sign = xp.linalg.det(u) * xp.linalg.det(vh)   # (A^-T = conj(U) S^-1 conj(Vh))
    return (u.conj() * (before * after * sign[..., None])[..., None, :]) @ vh.conj()


def _cofactor_vjp(g, out, a):
    # d(det A^-T) = det tr(A^-1 dA) A^-T - det A^-T dA^T A^-T, for an invertible A
    if a.shape[-1] <= _PAIRWISE_MAX and not a.dtype.is_complex:   # (also where A is singular)
        return (bind(COFACTOR_VJP, g, a),)
    bt = _mT(inv(a))
    return (out * (g * bt).sum((-2, -1), keepdim=True) - bt @ _mT(g) @ out,)


_PAIRWISE_MAX = 64   # (n^3 products per matrix)


def _cofactor_vjp_impl(xp, g, a):
    """`_cofactor_vjp`'s formula in A's SVD basis (A = U S Vh, Gh = U^T G Vh^T), where each
    1 / (s_i s_j) times det is the product of the other singular values P_ij: entry (i, j)
    of the middle factor is -P_ij Gh_ji off the diagonal, sum_{k != i} P_ik Gh_kk on it."""
    u, s, vh = xp.linalg.svd(a)
    gh = _swap(u) @ g @ _swap(vh)
    n = s.shape[-1]
    eye = xp.eye(n, dtype=bool)
    p = xp.where(eye[:, None, :] | eye[None, :, :], 1, s[..., None, None, :]).prod(-1) * ~eye
    m = -_swap(gh) * p
    k = xp.arange(n)
    m[..., k, k] = (p @ gh[..., k, k][..., None])[..., 0]
    return u @ (m * (xp.linalg.det(u) * xp.linalg.det(vh))[..., None, None]) @ vh


COFACTOR_VJP = defprim("linalg_cofactor_vjp", _cofactor_vjp_impl, lambda g, a: a, _no_grad("det's third derivative"),
                       kind="other", save=lambda rq: ())


# det's gradient (g times the cofactor matrix) as a primitive of its own, so a singular A
# has one (PyTorch's under create_graph) rather than failing to invert
COFACTOR = defprim("linalg_cofactor", _cofactor_impl, _square("linalg.det"), _cofactor_vjp, kind="other",
                   save=lambda rq: (0,), save_out=True)


def _det_vjp(g, out, a):
    from .shape import unsqueeze
    return (unsqueeze(unsqueeze(g, -1), -1) * bind(COFACTOR, a),)


DET = defprim("linalg_det", lambda xp, a: xp.linalg.det(a), _det_rule, _det_vjp, kind="other",
              save=lambda rq: (0,), extra={"batch": batch_leading})


def _logabsdet_vjp(g, out, a):
    from .shape import unsqueeze
    return (unsqueeze(unsqueeze(g, -1), -1) * _mT(inv(a)),)


def _logabsdet_rule(a):
    out = _det_rule(a)
    return Aval(out.shape, a.dtype.to_real(), a.device)


def signdet_complex_vjp(g, out, a):
    """The sign's gradient for a complex A (a real one's sign has none): d sign = i sign
    Im(tr(A^-1 dA)), so gA = -i Im(conj(g) sign) A^-H."""
    from .complex_ops import imag
    from .shape import unsqueeze
    c = unsqueeze(unsqueeze(imag(conj(g) * out), -1), -1)
    return (c * -1j * _mH(inv(a)),)


def _mH(x):
    return _mT(conj(x))   # (conj: a real tensor itself)


LOGABSDET = defprim("linalg_logabsdet", lambda xp, a: xp.linalg.slogdet(a)[1], _logabsdet_rule,
                    _logabsdet_vjp, kind="other", save=lambda rq: (0,))
# A real A's sign is piecewise constant: it requires grad as PyTorch's, and sends A no
# gradient (None, as PyTorch's undefined one: A.grad stays None; complex_ops has A complex's)
SIGNDET = defprim("linalg_signdet", lambda xp, a: xp.linalg.slogdet(a)[0], _det_rule,
                  lambda g, out, a: (None,), kind="other", save=lambda rq: (0,), save_out=True)


@_autocast.fp32
def inv(A):
    return bind(INV, A)


def det(A):
    return bind(DET, A)


def slogdet(A):
    return _SlogDet(bind(SIGNDET, A), bind(LOGABSDET, A))


# ---------------------------------------------------------------- solve
def _solve_rule(a, b):
    _square("linalg.solve")(a)
    if b.ndim < 1 or b.shape[-2 if b.ndim >= 2 else -1] != a.shape[-1]:
        raise ShapeError(f"linalg.solve: A of shape {a.shape} and B of shape {b.shape} do not match")
    if b.dtype is not a.dtype:
        raise TypeError(f"linalg.solve: A ({a.dtype.name}) and B ({b.dtype.name}) must have the same dtype")
    from ..shapes import broadcast_shapes
    batch = broadcast_shapes("linalg.solve", a.shape[:-2], b.shape[:-2])
    return Aval(tuple(batch) + tuple(b.shape[-2:]), a.dtype, a.device)


def _solve_vjp(g, out, a, b):
    gb = solve(_mT(a), g)
    return (-(gb @ _mT(out)), gb)


SOLVE = defprim("linalg_solve", lambda xp, a, b: xp.linalg.solve(a, b), _solve_rule, _solve_vjp,
                kind="other", save=lambda rq: (0,), save_out=True)


@_autocast.fp32
def solve(A, B, *, left: bool = True):
    if not left:   # X A = B  <=>  A^T X^T = B^T
        return _mT(solve(_mT(A), _mT(B)))
    if B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1])):
        from .shape import squeeze, unsqueeze
        return squeeze(bind(SOLVE, A, unsqueeze(B, -1)), -1)
    return bind(SOLVE, A, B)


# ---------------------------------------------------------------- Cholesky
def _cholesky_vjp(g, out, a):
    from .tensorfns import tril
    lo = out
    x = _mH(lo) @ g
    p = 0.5 * (tril(x) + tril(x, -1))       # phi: the lower triangle, its diagonal halved
    li = inv(lo)
    ga = _mH(li) @ p @ li
    return (0.5 * (ga + _mH(ga)),)


CHOLESKY = defprim("linalg_cholesky", lambda xp, a: xp.linalg.cholesky(a),
                   _square("linalg.cholesky"), _cholesky_vjp, kind="other",
                   save=lambda rq: (), save_out=True)


@_autocast.fp32
def cholesky(A, *, upper: bool = False):
    lo = bind(CHOLESKY, A)
    return _mH(lo) if upper else lo


# ---------------------------------------------------------------- symmetric eigendecomposition
def _eigh_rule(a, part, uplo="L"):
    _square("linalg.eigh")(a)
    if part == "values":
        return Aval(a.shape[:-1], a.dtype.to_real(), a.device)
    return Aval(a.shape, a.dtype, a.device)


def _eigh_impl(xp, a, part, uplo="L"):
    w, v = xp.linalg.eigh(a, UPLO=uplo)
    return w if part == "values" else v


def _eigh_values_vjp(g, out, a, part, uplo):
    from .shape import unsqueeze
    v = bind(EIGH, a, part="vectors", uplo=uplo)
    return ((v * unsqueeze(g, -2)) @ _mH(v),)


def _eigh_vectors_vjp(g, out, a, part, uplo):
    from .elementwise import where
    from .shape import unsqueeze
    from .tensorfns import tril, triu
    w = bind(EIGH, a, part="values", uplo=uplo)
    v = out
    m = _mH(v) @ g
    m = 0.5 * (m - _mH(m))
    e = unsqueeze(w, -2) - unsqueeze(w, -1)          # e[i, j] = w_j - w_i
    q = m / where(e == 0, 1.0, e)
    inner = tril(q, -1) + triu(q, 1)                 # off the diagonal only
    return (v @ inner @ _mH(v),)


EIGH = defprim("linalg_eigh", _eigh_impl, _eigh_rule,
               lambda g, out, a, part, uplo="L": (_eigh_values_vjp if part == "values" else _eigh_vectors_vjp)(
                   g, out, a, part, uplo), kind="other", save=lambda rq: (0,), save_out=True)


@_autocast.fp32
def eigh(A, UPLO: str = "L"):
    if UPLO not in ("L", "U"):
        raise ValueError(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    return _Eigh(bind(EIGH, A, part="values", uplo=UPLO), bind(EIGH, A, part="vectors", uplo=UPLO))


# ---------------------------------------------------------------- QR, SVD, pinv
def _qr_rule(a, mode, part):
    if a.ndim < 2:
        raise ShapeError(f"linalg.qr: expected a batch of matrices, got shape {a.shape}")
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    if part == "Q":
        shape = a.shape[:-1] + ((m,) if mode == "complete" else (k,))
    else:
        shape = a.shape[:-2] + ((m if mode == "complete" else k), n)
    return Aval(shape, a.dtype, a.device)


def _qr_vjp(g, out, a, mode, part):
    """PyTorch's linalg_qr_backward. A wide A = [X | Y] (m < n) has Q R = [Q U | Q V] with
    X = Q U square and V = Q^H Y: V's gradient reaches Y as Q gV and Q as Y gV^H, and X's
    follows the square case."""
    m, n = a.shape[-2], a.shape[-1]
    if mode == "complete" and m > n:
        raise NotImplementedError(f"linalg.qr: the gradient is not defined in mode 'complete' for a tall "
                                  f"input (got shape {tuple(a.shape)}): use mode 'reduced'")
    q, r = (bind(QR, a, mode=mode, part=p) for p in ("Q", "R"))
    if m >= n:
        return (_qr_tall_grad(q, r, g if part == "Q" else None, g if part == "R" else None),)
    from .shape import cat
    u, y = r[..., :m], a[..., m:]
    if part == "Q":
        return (cat([_qr_tall_grad(q, u, g, None), y * 0], -1),)
    gu, gv = g[..., :m], g[..., m:]
    return (cat([_qr_tall_grad(q, u, y @ _mH(gv), gu), q @ gv], -1),)


def _qr_tall_grad(q, r, gq, gr):
    """A's gradient for a tall or square A = Q R from gQ and gR (either None): with
    M = gR R^H - Q^H gQ, (gQ + Q copyltu(triu(M))) R^-H, copyltu mirroring the upper
    triangle (conjugated) and keeping the diagonal's real part."""
    from .tensorfns import triu
    t = triu(gr @ _mH(r) - _mH(q) @ gq if gr is not None and gq is not None
             else gr @ _mH(r) if gr is not None else -(_mH(q) @ gq))
    inner = t + _mH(triu(t, 1))
    if t.dtype.is_complex:   # (the diagonal's real part: the inverse of X -> X + X^H on triangles)
        from .complex_ops import imag
        from .rearrange import diag_embed, diagonal
        inner = inner - diag_embed(imag(diagonal(t, 0, -2, -1)) * 1j)
    ga = q @ inner
    if gq is not None:
        ga = ga + gq
    return ga @ _mH(inv(r))


QR = defprim("linalg_qr", lambda xp, a, mode, part: xp.linalg.qr(a, mode=mode)[0 if part == "Q" else 1],
             _qr_rule, _qr_vjp, kind="other", save=lambda rq: (0,))


@_autocast.fp32
def qr(A, mode: str = "reduced"):
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"linalg.qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    np_mode = "complete" if mode == "complete" else "reduced"
    r = bind(QR, A, mode=np_mode, part="R")
    if mode == "r":
        from .creation import empty
        return _QR(empty(0, dtype=A.dtype, device=A.device), r)
    return _QR(bind(QR, A, mode=np_mode, part="Q"), r)


def _svd_rule(a, full, part):
    if a.ndim < 2:
        raise ShapeError(f"linalg.svd: expected a batch of matrices, got shape {a.shape}")
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    lead = a.shape[:-2]
    if part == "S":
        return Aval(lead + (k,), a.dtype.to_real(), a.device)
    if part == "U":
        return Aval(lead + (m, m if full else k), a.dtype, a.device)
    return Aval(lead + (n if full else k, n), a.dtype, a.device)


def _svd_impl(xp, a, full, part):
    u, s, vh = xp.linalg.svd(a, full_matrices=full)
    return {"U": u, "S": s, "Vh": vh}[part]


def _svd_vjp(g, out, a, full, part):
    """PyTorch's svd_backward, for the one factor `part` whose gradient is `g` (the formula
    is linear in gU, gS, gVh: autograd sums the three). With full_matrices, the columns of
    U (rows of Vh) past min(m, n) do not enter. A complex U's part adds i Im(diag(U^H gU)) / S
    on the diagonal (right for a loss that ignores the singular vectors' phases, as
    PyTorch's)."""
    from .elementwise import where
    from .shape import unsqueeze
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    u, vh = (bind(SVD, a, full=False, part=p) for p in ("U", "Vh"))
    if part == "S":
        return ((u * unsqueeze(g, -2)) @ vh,)
    s = bind(SVD, a, full=False, part="S")
    s2 = s * s
    e = unsqueeze(s2, -2) - unsqueeze(s2, -1)
    e = where(e == 0, 1.0, e)   # (the diagonal's numerators are 0; distinct values assumed)
    if part == "U":
        gu = g[..., :k] if full and m != k else g
        uhgu = _mH(u) @ gu
        inner = _off_diagonal(uhgu - _mH(uhgu)) / e * unsqueeze(s, -2)
        if u.dtype.is_complex:
            from .complex_ops import imag
            from .rearrange import diag_embed, diagonal
            inner = inner + diag_embed(imag(diagonal(uhgu, 0, -2, -1)) / s * 1j)
        ga = u @ inner
        if m > k:
            gus = gu / unsqueeze(s, -2)
            ga = ga + gus - u @ (_mH(u) @ gus)
        return (ga @ vh,)
    gvh = g[..., :k, :] if full and n != k else g
    vhgv = vh @ _mH(gvh)
    ga = (unsqueeze(s, -1) * (_off_diagonal(vhgv - _mH(vhgv)) / e)) @ vh
    if n > k:
        sgv = gvh / unsqueeze(s, -1)
        ga = ga + sgv - (sgv @ _mH(vh)) @ vh
    return (u @ ga,)


def _off_diagonal(x):
    """`x` without its diagonal: a complex skew-Hermitian matrix's is imaginary, a real
    skew-symmetric one's already 0."""
    if not x.dtype.is_complex:
        return x
    from .tensorfns import tril, triu
    return tril(x, -1) + triu(x, 1)


SVD = defprim("linalg_svd", _svd_impl, _svd_rule, _svd_vjp, kind="other", save=lambda rq: (0,))


@_autocast.fp32
def svdvals(A, *, driver=None):
    """The singular values alone: one record (svd's three factors are three records, each
    a decomposition of its own)."""
    check_svd_driver(A, driver, "svd")   # (PyTorch names svd here too)
    return bind(SVD, A, full=False, part="S")


@_autocast.fp32
def svd(A, full_matrices: bool = True, *, driver=None):
    check_svd_driver(A, driver, "svd")
    return _SVD(*(bind(SVD, A, full=full_matrices, part=p) for p in ("U", "S", "Vh")))


def check_svd_driver(A, driver, name: str) -> None:
    """PyTorch's ``driver=`` picks a cuSOLVER method (here every one gives the same
    factors); it is refused for CPU tensors, as there."""
    if driver is None:
        return
    if A.device.type != "cuda":
        raise RuntimeError(f"torch.linalg.{name}: keyword argument `driver=` is only supported on CUDA "
                           f"inputs with cuSOLVER backend.")
    if driver not in ("gesvd", "gesvdj", "gesvda"):
        raise ValueError(f"torch.linalg.{name}: driver must be one of 'gesvd', 'gesvdj', 'gesvda', got {driver!r}")


def _pinv_impl(xp, a, rtol, hermitian, atol=0.0):
    """V diag(1/s) U^H over the singular values above max(atol, rtol * largest) (the
    eigenvalues' magnitudes for a Hermitian input), the others taken as zero, as PyTorch's."""
    if 0 in a.shape[-2:]:
        return xp.zeros(a.shape[:-2] + (a.shape[-1], a.shape[-2]), dtype=a.dtype)
    if hermitian:
        w, v = xp.linalg.eigh(a)
        s, left, right = xp.abs(w), v, v
    else:
        left, s, right = xp.linalg.svd(a, full_matrices=False)
        right = xp.conj(xp.swapaxes(right, -1, -2))
    cut = xp.maximum(atol, rtol * s.max(-1, keepdims=True))
    keep = s > cut
    scale = xp.where(keep, 1 / xp.where(keep, w if hermitian else s, 1), 0)
    return ((right * scale[..., None, :].astype(right.dtype)) @ xp.conj(xp.swapaxes(left, -1, -2))).astype(a.dtype)


def _pinv_rule(a, rtol, hermitian, atol=0.0):
    if a.ndim < 2:
        raise ShapeError(f"linalg.pinv: expected a batch of matrices, got shape {a.shape}")
    return Aval(a.shape[:-2] + (a.shape[-1], a.shape[-2]), a.dtype, a.device)


def _pinv_vjp(g, out, a, rtol, hermitian, atol=0.0):
    # PyTorch's pinv_backward (real matrices), its products kept to the smaller side
    p, ph, gh = out, _mH(out), _mH(g)
    if a.shape[-2] <= a.shape[-1]:
        k = gh @ p
        kph = k @ ph
        return (-_mH(p @ k) + kph - (a @ p) @ kph + (ph @ p) @ (gh - k @ a),)
    k = p @ gh
    phk = ph @ k
    return (-_mH(k @ p) + ((gh - a @ k) @ p) @ ph + phk - (phk @ p) @ a,)


PINV = defprim("linalg_pinv", _pinv_impl, _pinv_rule, _pinv_vjp, kind="other", save=lambda rq: (0,), save_out=True,
               extra={"batch": batch_leading})


def pinv(A, *, atol=None, rtol=None, hermitian: bool = False):
    """Singular values at or below max(atol, rtol * the largest) count as zero; rtol's
    default is max(m, n) * eps when atol is not given, else 0, as PyTorch's."""
    if rtol is None:
        rtol = max(A.shape[-2:]) * float(finfo(A.dtype).eps) if atol is None or _number(atol) <= 0 else 0.0
    return bind(PINV, A, rtol=_number(rtol), hermitian=bool(hermitian), atol=_number(atol or 0.0))


def _number(tol) -> float:
    """A tolerance as a float (a 0-d tensor's value; one per matrix is not supported)."""
    if isinstance(tol, Tensor):
        if tol.numel() != 1:
            raise NotImplementedError("linalg.pinv: a tolerance per matrix (a tensor atol/rtol with more "
                                      "than one element) is not supported; pass a float")
        return float(tol.item())
    return float(tol)
