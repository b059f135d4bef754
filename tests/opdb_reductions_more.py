"""Op records for tracejit/ops/reductions_more.py and the differentiable linear algebra of
ops/linalg_dense.py: numpy's median, partition, quantile, nan-reductions, diff, trapezoid,
and its linalg.inv/det/slogdet/solve/cholesky/eigvalsh as references."""
from __future__ import annotations

import numpy as np

from opdb import FLOATS, NUMERIC, Sample, arr, distinct, register


def _s(*arrays, **kw):
    return Sample(tuple(arrays), kw)


def _with_nans(r, shape, d):
    x = arr(r, shape, d)
    x[0, 1] = np.nan
    x[-1, 0] = np.nan
    return x


register("median.dim", lambda m, x, **kw: m.median(x, **kw)[0],
         lambda x, dim: np.take_along_axis(np.sort(x, dim), np.array([[(x.shape[dim] - 1) // 2]]).reshape(
             [1 if a != dim else 1 for a in range(x.ndim)]), dim).squeeze(dim),
         lambda d, r: [_s(distinct(r, (4, 5), d), dim=1), _s(distinct(r, (4, 6), d), dim=0)], dtypes=NUMERIC)
register("kthvalue", lambda m, x, **kw: m.kthvalue(x, **kw)[0],
         lambda x, k, dim: np.sort(x, dim).take(k - 1, dim), lambda d, r: [_s(distinct(r, (4, 5), d), k=2, dim=1)],
         dtypes=NUMERIC)
register("quantile", lambda m, x, **kw: m.quantile(x, **kw),
         lambda x, q, dim, interpolation="linear": np.quantile(x, q, axis=dim, method=interpolation),
         lambda d, r: [_s(distinct(r, (4, 5), d), q=0.3, dim=1),
                       _s(distinct(r, (4, 5), d), q=0.75, dim=0, interpolation="midpoint")])
register("nanmean", lambda m, x, **kw: m.nanmean(x, **kw), lambda x, dim: np.nanmean(x, dim),
         lambda d, r: [_s(_with_nans(r, (3, 4), d), dim=1)])
register("nansum", lambda m, x, **kw: m.nansum(x, **kw), lambda x, dim: np.nansum(x, dim),
         lambda d, r: [_s(_with_nans(r, (3, 4), d), dim=0)])
register("logcumsumexp", lambda m, x, **kw: m.logcumsumexp(x, **kw),
         lambda x, dim: np.logaddexp.accumulate(x, dim), lambda d, r: [_s(arr(r, (3, 5), d), dim=1)])
register("diff", lambda m, x, **kw: m.diff(x, **kw), lambda x, n, dim: np.diff(x, n, dim),
         lambda d, r: [_s(arr(r, (4, 5), d), n=2, dim=1)], dtypes=NUMERIC)
register("trapezoid", lambda m, y, **kw: m.trapezoid(y, **kw), lambda y, dim, dx=1.0: np.trapezoid(y, dx=dx, axis=dim),
         lambda d, r: [_s(arr(r, (3, 5), d), dim=1, dx=0.5)])
register("dist", lambda m, a, b, **kw: m.dist(a, b, **kw),
         lambda a, b, p: (np.abs(a - b) ** p).sum() ** (1 / p),
         lambda d, r: [_s(arr(r, (3, 4), d), arr(r, (3, 4), d), p=3)], atol=1e-4)
register("aminmax", lambda m, x, **kw: tuple(m.aminmax(x, **kw)), lambda x, dim: (x.min(dim), x.max(dim)),
         lambda d, r: [_s(distinct(r, (3, 4), d), dim=1)], dtypes=NUMERIC)


def _spd(r, n, d):
    a = r.standard_normal((2, n, n))
    return (a @ a.transpose(0, 2, 1) + n * np.eye(n)).astype(d.np)


def _conditioned(r, n, d):
    return (r.standard_normal((2, n, n)) + 3 * np.eye(n)).astype(d.np)


register("linalg.inv", lambda m, a: m.linalg.inv(a), np.linalg.inv, lambda d, r: [_s(_conditioned(r, 3, d))],
         dtypes=FLOATS, atol=1e-4)
register("linalg.det", lambda m, a: m.linalg.det(a), np.linalg.det, lambda d, r: [_s(_conditioned(r, 3, d))],
         dtypes=FLOATS, atol=1e-3, rtol=1e-4)
register("linalg.slogdet.logabsdet", lambda m, a: m.linalg.slogdet(a)[1], lambda a: np.linalg.slogdet(a)[1],
         lambda d, r: [_s(_conditioned(r, 3, d))], dtypes=FLOATS, atol=1e-4)
register("linalg.solve", lambda m, a, b: m.linalg.solve(a, b), np.linalg.solve,
         lambda d, r: [_s(_conditioned(r, 3, d), arr(r, (2, 3, 2), d))], dtypes=FLOATS, atol=1e-4)
# cholesky and eigvalsh read one triangle, and their gradients assume a symmetric change
# (as PyTorch's do): the records symmetrize the input first, so finite differences agree.
def _sym(a):
    return 0.5 * (a + a.transpose(-1, -2))


def _sym_np(a):
    return 0.5 * (a + np.swapaxes(a, -1, -2))


register("linalg.cholesky", lambda m, a: m.linalg.cholesky(_sym(a)), lambda a: np.linalg.cholesky(_sym_np(a)),
         lambda d, r: [_s(_spd(r, 3, d))], dtypes=FLOATS, atol=1e-4)
register("linalg.eigvalsh", lambda m, a: m.linalg.eigvalsh(_sym(a)), lambda a: np.linalg.eigvalsh(_sym_np(a)),
         lambda d, r: [_s(_spd(r, 3, d))], dtypes=FLOATS, atol=1e-4)


def _np_renorm(x, p, dim, maxnorm):
    others = tuple(i for i in range(x.ndim) if i != dim)
    norms = (np.abs(x) ** p).sum(others, keepdims=True) ** (1.0 / p)
    return x * np.where(norms > maxnorm, maxnorm / (norms + 1e-7), 1.0)


register("renorm", lambda m, x, **kw: m.renorm(x, **kw), _np_renorm,
         lambda d, r: [_s(arr(r, (3, 4), d), p=2, dim=0, maxnorm=1.5),
                       _s(arr(r, (2, 3, 4), d), p=1, dim=2, maxnorm=2.0)])
register("norm.nuc", lambda m, x: m.norm(x, p="nuc"), lambda x: np.linalg.norm(x, "nuc"),
         lambda d, r: [_s(distinct(r, (3, 4), d))], atol=1e-4)
register("mode.values", lambda m, x, **kw: m.mode(x, **kw)[0],
         lambda x, dim: np.apply_along_axis(lambda v: np.unique(v)[np.argmax(np.unique(v, return_counts=True)[1])],
                                            dim, x),
         lambda d, r: [_s(np.asarray(r.integers(0, 3, (4, 7)), d.np), dim=1),
                       _s(np.asarray(r.integers(0, 3, (5, 3)), d.np), dim=0)],
         dtypes=NUMERIC, traceable=False, grad=False)
