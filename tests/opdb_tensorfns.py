"""Op records for tril/triu, sort/argsort/topk, cumprod and einsum (tracejit/ops/tensorfns.py,
tracejit/ops/einsum.py). multinomial is random with an integer output of a new shape, which
the random-op checks here do not describe: tests/ops/test_tensorfns.py covers it."""
from __future__ import annotations

import numpy as np

from opdb import FLOATS, NUMERIC, Sample, arr, away, distinct, register


def _tri_ref(lower):
    def ref(x, diagonal=0):
        return np.tril(x, diagonal) if lower else np.triu(x, diagonal)
    return ref


def _tri_samples(d, r):
    return [Sample((arr(r, (4, 5), d),), {}), Sample((arr(r, (2, 3, 4), d),), {"diagonal": 1}),
            Sample((arr(r, (5, 3), d),), {"diagonal": -2}), Sample((arr(r, (0, 3), d),), {})]


register("tril", lambda m, x, **kw: m.tril(x, **kw), _tri_ref(True), _tri_samples, dtypes=NUMERIC)
register("triu", lambda m, x, **kw: m.triu(x, **kw), _tri_ref(False), _tri_samples, dtypes=NUMERIC)


def _np_argsort(x, dim=-1, descending=False):
    if descending:
        n = x.shape[dim]
        return (n - 1) - np.flip(np.argsort(np.flip(x, dim), axis=dim, kind="stable"), dim)
    return np.argsort(x, axis=dim, kind="stable")


def _np_sort(x, dim=-1, descending=False):
    i = _np_argsort(x, dim, descending)
    return np.take_along_axis(x, i, dim), i


def _sort_samples(d, r):
    return [Sample((distinct(r, (3, 5), d),), {}), Sample((distinct(r, (4, 3), d),), {"dim": 0}),
            Sample((distinct(r, (2, 3, 4), d),), {"dim": 1, "descending": True}),
            Sample((distinct(r, (6,), d),), {"descending": True}), Sample((distinct(r, (0, 3), d),), {})]


register("sort", lambda m, x, **kw: tuple(m.sort(x, **kw)), _np_sort, _sort_samples, dtypes=NUMERIC)
register("argsort", lambda m, x, **kw: m.argsort(x, **kw), _np_argsort, _sort_samples,
         dtypes=NUMERIC, grad=False)


def _np_topk(x, k, dim=-1, largest=True):
    i = np.take(_np_argsort(x, dim, descending=largest), np.arange(k), axis=dim)
    return np.take_along_axis(x, i, dim), i


register("topk", lambda m, x, **kw: tuple(m.topk(x, **kw)), _np_topk,
         lambda d, r: [Sample((distinct(r, (3, 6), d),), {"k": 2}),
                       Sample((distinct(r, (5, 4), d),), {"k": 3, "dim": 0, "largest": False}),
                       Sample((distinct(r, (2, 3, 4), d),), {"k": 4, "dim": -1}),
                       Sample((distinct(r, (4,), d),), {"k": 0})],
         dtypes=NUMERIC)


def _cumprod_samples(d, r):
    # Two zeros in a row: the first-order gradient is exact, but past the first zero it is
    # the constant 0, whose derivative w.r.t. the first zero is not (second order not exact).
    with_zero = away(r, (2, 5), d)
    with_zero[0, 1] = 0
    with_zero[1, 2] = 0
    with_zero[1, 4] = 0
    return [Sample((away(r, (3, 4), d),), {"dim": 1}), Sample((away(r, (3, 4), d),), {"dim": 0}),
            Sample((with_zero,), {"dim": 1}, desc="zeros", gradgrad=False), Sample((away(r, (0, 2), d),), {"dim": 0}),
            # (rows the CPU kernels take: a scan of several rows)
            Sample((away(r, (64, 8), d),), {"dim": 1}, desc="rows", gradgrad=False)]


register("cumprod", lambda m, x, dim: m.cumprod(x, dim), lambda x, dim: np.cumprod(x, axis=dim),
         _cumprod_samples, dtypes=NUMERIC)


_EINSUM = [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij->ji", [(3, 4)]), ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]), ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]), ("i,i->", [(3,), (3,)]),
    ("i,j->ij", [(3,), (4,)]), ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("ba", [(2, 3)]), ("...i->...", [(2, 3, 4)]),
    ("bi,bi->b", [(1, 3), (4, 3)]), ("ij,ij->ij", [(2, 3), (2, 3)]),
]


def _einsum(m, *xs, eq):
    return m.einsum(eq, *xs)


def _np_einsum(*xs, eq):
    return np.einsum(eq, *[np.broadcast_to(x, (4, 3)) if eq == "bi,bi->b" else x for x in xs])


register("einsum", _einsum, _np_einsum,
         lambda d, r: [Sample(tuple(arr(r, s, d) for s in shapes), {"eq": eq}, desc=eq)
                       for eq, shapes in _EINSUM],
         dtypes=FLOATS)
