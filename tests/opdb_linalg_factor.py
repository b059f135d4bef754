"""Op records for tracejit/ops/linalg_factor.py and the solvers of tracejit/linalg.py
(matrix_exp, solve_triangular, LU, lu_solve, cholesky_solve/inverse,
householder_product, ormqr) and the SVD's gradient. References are independent of the
implementation: the exponential's Taylor series summed in float64, numpy's solve on the
chosen triangle, a row-by-row Doolittle loop for LU, products of the explicit
Householder matrices."""
from __future__ import annotations

import numpy as np

from opdb import Sample, register


def _s(*arrays, **kw):
    return Sample(tuple(arrays), kw)


def _cond(r, shape, d):
    n = shape[-1]
    return (r.standard_normal(shape) + 3 * np.eye(n)).astype(d.np)


def _expm_ref(a):
    out = np.broadcast_to(np.eye(a.shape[-1]), a.shape).copy()
    term = out.copy()
    for k in range(1, 60):
        term = term @ a / k
        out = out + term
    return out


register("linalg.matrix_exp", lambda m, a: m.linalg.matrix_exp(a), _expm_ref,
         lambda d, r: [_s((r.standard_normal((3, 3)) * 0.5).astype(d.np)),
                       _s((r.standard_normal((2, 4, 4)) * 1.5).astype(d.np))], atol=1e-4, rtol=1e-4)


def _tri(upper, unit):
    def ref(a, b, left=True):
        n = a.shape[-1]
        t = np.triu(a, 1 if unit else 0) if upper else np.tril(a, -1 if unit else 0)
        if unit:
            t = t + np.eye(n)
        return np.linalg.solve(t, b) if left else np.swapaxes(np.linalg.solve(np.swapaxes(t, -1, -2),
                                                                              np.swapaxes(b, -1, -2)), -1, -2)
    return ref


for _up in (True, False):
    for _unit in (False, True):
        register(f"linalg.solve_triangular.{'upper' if _up else 'lower'}{'.unit' if _unit else ''}",
                 (lambda up, unit: lambda m, a, b, left=True: m.linalg.solve_triangular(
                     a, b, upper=up, left=left, unitriangular=unit))(_up, _unit),
                 _tri(_up, _unit),
                 lambda d, r: [_s(_cond(r, (3, 3), d), r.standard_normal((3, 2)).astype(d.np)),
                               _s(_cond(r, (2, 3, 3), d), r.standard_normal((2, 4, 3)).astype(d.np), left=False)],
                 atol=1e-4)


def _doolittle(a):
    """P, L, U of one matrix by partial pivoting, row by row."""
    a = np.array(a, np.float64)
    m, n = a.shape
    k = min(m, n)
    perm = list(range(m))
    for j in range(k):
        p = j + int(np.argmax(np.abs(a[j:, j])))
        a[[j, p]] = a[[p, j]]
        perm[j], perm[p] = perm[p], perm[j]
        for i in range(j + 1, m):
            a[i, j] /= a[j, j]
            a[i, j + 1:] -= a[i, j] * a[j, j + 1:]
    lo = np.tril(a, -1)[:, :k] + np.eye(m, k)
    up = np.triu(a)[:k]
    p = np.zeros((m, m))
    p[perm, np.arange(m)] = 1
    return p, lo, up


def _lu_ref(a):
    parts = [_doolittle(x) for x in a.reshape(-1, *a.shape[-2:])]
    return tuple(np.stack([q[i] for q in parts]).reshape(a.shape[:-2] + parts[0][i].shape) for i in range(3))


register("linalg.lu", lambda m, a: tuple(m.linalg.lu(a)), _lu_ref,
         lambda d, r: [_s(_cond(r, (2, 4, 4), d))], atol=1e-4)
register("linalg.lu.rect", lambda m, a: tuple(m.linalg.lu(a))[1:], lambda a: _lu_ref(a)[1:],
         lambda d, r: [_s(r.standard_normal((4, 3)).astype(d.np)), _s(r.standard_normal((3, 5)).astype(d.np))],
         grad=False, atol=1e-4)


def _lu_solve(m, a, b, adjoint=False):
    lu, piv = m.linalg.lu_factor(a)
    return m.linalg.lu_solve(lu, piv, b, adjoint=adjoint)


register("linalg.lu_solve", _lu_solve,
         lambda a, b, adjoint=False: np.linalg.solve(np.swapaxes(a, -1, -2) if adjoint else a, b),
         lambda d, r: [_s(_cond(r, (2, 3, 3), d), r.standard_normal((2, 3, 2)).astype(d.np)),
                       _s(_cond(r, (3, 3), d), r.standard_normal((3, 1)).astype(d.np), adjoint=True)], atol=1e-4)


def _spd(r, shape, d):
    a = r.standard_normal(shape)
    return (a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(d.np)


def _chol(m, s):
    return m.linalg.cholesky(0.5 * (s + s.transpose(-1, -2)))


register("cholesky_solve", lambda m, s, b, upper=False: m.cholesky_solve(
    b, _chol(m, s).transpose(-1, -2) if upper else _chol(m, s), upper=upper),
    lambda s, b, upper=False: np.linalg.solve(0.5 * (s + np.swapaxes(s, -1, -2)), b),
    lambda d, r: [_s(_spd(r, (3, 3), d), r.standard_normal((3, 2)).astype(d.np)),
                  _s(_spd(r, (2, 3, 3), d), r.standard_normal((2, 3, 1)).astype(d.np), upper=True)], atol=1e-4)
register("cholesky_inverse", lambda m, s: m.cholesky_inverse(_chol(m, s)),
         lambda s: np.linalg.inv(0.5 * (s + np.swapaxes(s, -1, -2))),
         lambda d, r: [_s(_spd(r, (3, 3), d))], atol=1e-4)


def _householder_ref(a, tau):
    m, n = a.shape
    q = np.eye(m)
    for i in range(tau.shape[-1]):
        v = np.zeros(m)
        v[i] = 1.0
        v[i + 1:] = a[i + 1:, i]
        q = q @ (np.eye(m) - tau[i] * np.outer(v, v))
    return q[:, :n]


register("linalg.householder_product", lambda m, a, t: m.linalg.householder_product(a, t), _householder_ref,
         lambda d, r: [_s(r.standard_normal((4, 3)).astype(d.np), r.standard_normal(3).astype(d.np)),
                       _s(r.standard_normal((3, 3)).astype(d.np), r.standard_normal(2).astype(d.np))], atol=1e-4)
# the SVD's gradient, through quantities that do not depend on the singular vectors' signs
register("linalg.svdvals", lambda m, a: m.linalg.svdvals(a), lambda a: np.linalg.svd(a, compute_uv=False),
         lambda d, r: [_s(r.standard_normal((2, 4, 3)).astype(d.np)), _s(r.standard_normal((3, 5)).astype(d.np))],
         atol=1e-4)


def _projectors(m, a):
    u, s, vh = m.linalg.svd(a, full_matrices=False)
    return u @ u.transpose(-1, -2), (vh.transpose(-1, -2) * s.unsqueeze(-2)) @ vh


def _projectors_ref(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return u @ np.swapaxes(u, -1, -2), (np.swapaxes(vh, -1, -2) * s[..., None, :]) @ vh


register("linalg.svd.vectors", _projectors, _projectors_ref,
         lambda d, r: [_s(r.standard_normal((4, 3)).astype(d.np)), _s(r.standard_normal((2, 3, 4)).astype(d.np))],
         atol=1e-4)


def _ormqr_ref(a, tau, c, left=True, transpose=False):
    m = a.shape[0]
    q = np.eye(m)
    for i in range(tau.shape[-1]):
        v = np.zeros(m)
        v[i] = 1.0
        v[i + 1:] = a[i + 1:, i]
        q = q @ (np.eye(m) - tau[i] * np.outer(v, v))
    q = q.T if transpose else q
    return q @ c if left else c @ q


register("ormqr", lambda m, a, t, c, **kw: m.ormqr(a, t, c, **kw), _ormqr_ref,
         lambda d, r: [_s(r.standard_normal((4, 3)).astype(d.np), r.standard_normal(3).astype(d.np),
                          r.standard_normal((4, 2)).astype(d.np)),
                       _s(r.standard_normal((4, 2)).astype(d.np), r.standard_normal(2).astype(d.np),
                          r.standard_normal((3, 4)).astype(d.np), left=False, transpose=True)], atol=1e-4)
