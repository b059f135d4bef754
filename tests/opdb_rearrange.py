"""Op records for tracejit/ops/rearrange.py, products.py and indexing_more.py: the
references are numpy's own reshapes, rolls, einsums and index assignments."""
from __future__ import annotations

import itertools

import numpy as np

from opdb import F, FLOATS, NUMERIC, Sample, arr, distinct, register


def _s(*arrays, **kw):
    return Sample(tuple(arrays), kw)


def _np_pixel_shuffle(x, upscale_factor):
    r = upscale_factor
    n, c, h, w = x.shape
    return x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(n, c // (r * r), h * r, w * r)


def _np_pixel_unshuffle(x, downscale_factor):
    r = downscale_factor
    n, c, h, w = x.shape
    return x.reshape(n, c, h // r, r, w // r, r).transpose(0, 1, 3, 5, 2, 4).reshape(n, c * r * r, h // r, w // r)


register("pixel_shuffle", lambda m, x, **kw: F(m).pixel_shuffle(x, **kw), _np_pixel_shuffle,
         lambda d, r: [_s(arr(r, (2, 8, 3, 2), d), upscale_factor=2)], dtypes=NUMERIC)
register("pixel_unshuffle", lambda m, x, **kw: F(m).pixel_unshuffle(x, **kw), _np_pixel_unshuffle,
         lambda d, r: [_s(arr(r, (2, 3, 4, 6), d), downscale_factor=2)], dtypes=NUMERIC)
register("channel_shuffle", lambda m, x, **kw: F(m).channel_shuffle(x, **kw),
         lambda x, groups: x.reshape(x.shape[0], groups, -1, *x.shape[2:]).swapaxes(1, 2).reshape(x.shape),
         lambda d, r: [_s(arr(r, (2, 6, 3), d), groups=3)], dtypes=NUMERIC)
register("roll", lambda m, x, **kw: m.roll(x, **kw), lambda x, shifts, dims=None: np.roll(x, shifts, dims),
         lambda d, r: [_s(arr(r, (3, 4), d), shifts=(1, -2), dims=(0, 1)), _s(arr(r, (3, 4), d), shifts=5)],
         dtypes=NUMERIC)
register("rot90", lambda m, x, **kw: m.rot90(x, **kw), lambda x, k, dims: np.rot90(x, k, dims),
         lambda d, r: [_s(arr(r, (3, 4), d), k=k, dims=(0, 1)) for k in (1, 2, 3)], dtypes=NUMERIC)
register("unflatten", lambda m, x, **kw: m.unflatten(x, **kw),
         lambda x, dim, sizes: x.reshape(x.shape[:dim] + tuple(sizes) + x.shape[dim + 1:]),
         lambda d, r: [_s(arr(r, (3, 4), d), dim=1, sizes=(2, 2))], dtypes=NUMERIC)
register("tile", lambda m, x, **kw: m.tile(x, **kw), lambda x, dims: np.tile(x, dims),
         lambda d, r: [_s(arr(r, (3, 2), d), dims=(2, 1, 3))], dtypes=NUMERIC)
register("repeat_interleave", lambda m, x, **kw: m.repeat_interleave(x, **kw),
         lambda x, repeats, dim=None: np.repeat(x, repeats, dim),
         lambda d, r: [_s(arr(r, (3, 2), d), repeats=2, dim=0), _s(arr(r, (3, 2), d), repeats=3)],
         dtypes=NUMERIC)
register("diagonal", lambda m, x, **kw: m.diagonal(x, **kw),
         lambda x, offset=0, dim1=0, dim2=1: np.diagonal(x, offset, dim1, dim2),
         lambda d, r: [_s(arr(r, (3, 4), d), offset=1), _s(arr(r, (2, 3, 4), d), offset=-1, dim1=1, dim2=2)],
         dtypes=NUMERIC)
register("diag", lambda m, x, **kw: m.diag(x, **kw), lambda x, diagonal=0: np.diag(x, diagonal),
         lambda d, r: [_s(arr(r, (4,), d), diagonal=1), _s(arr(r, (3, 4), d), diagonal=-1)], dtypes=NUMERIC)
register("diag_embed", lambda m, x: m.diag_embed(x), lambda x: x[..., :, None] * np.eye(x.shape[-1]),
         lambda d, r: [_s(arr(r, (2, 3), d))])
register("trace", lambda m, x: m.trace(x),
         lambda x: np.trace(x), lambda d, r: [_s(arr(r, (4, 4), d))])
register("tensordot", lambda m, a, b, **kw: m.tensordot(a, b, **kw), lambda a, b, dims: np.tensordot(a, b, dims),
         lambda d, r: [_s(arr(r, (2, 3, 4), d), arr(r, (3, 4, 5), d), dims=2),
                       _s(arr(r, (3, 4), d), arr(r, (4, 2), d), dims=([1], [0]))], atol=1e-4)
register("kron", lambda m, a, b: m.kron(a, b), np.kron, lambda d, r: [_s(arr(r, (2, 3), d), arr(r, (3, 2), d))])
register("block_diag", lambda m, a, b: m.block_diag(a, b),
         lambda a, b: np.block([[a, np.zeros((a.shape[0], b.shape[1]))], [np.zeros((b.shape[0], a.shape[1])), b]]),
         lambda d, r: [_s(arr(r, (2, 3), d), arr(r, (3, 1), d))])
register("hstack", lambda m, a, b: m.hstack([a, b]), lambda a, b: np.hstack([a, b]),
         lambda d, r: [_s(arr(r, (2, 3), d), arr(r, (2, 1), d))], dtypes=NUMERIC)
register("vstack", lambda m, a, b: m.vstack([a, b]), lambda a, b: np.vstack([a, b]),
         lambda d, r: [_s(arr(r, (3,), d), arr(r, (3,), d))], dtypes=NUMERIC)
register("tensor_split", lambda m, x, indices_or_sections, dim: tuple(m.tensor_split(x, indices_or_sections, dim)),
         lambda x, indices_or_sections, dim: tuple(np.array_split(x, indices_or_sections, dim)),
         lambda d, r: [_s(arr(r, (3, 7), d), indices_or_sections=3, dim=1)], dtypes=NUMERIC)

# ---------------------------------------------------------------- products
register("bilinear", lambda m, a, b, w, bias: F(m).bilinear(a, b, w, bias),
         lambda a, b, w, bias: np.einsum("ni,oij,nj->no", a, w, b) + bias,
         lambda d, r: [_s(arr(r, (4, 3), d), arr(r, (4, 2), d), arr(r, (5, 3, 2), d), arr(r, (5,), d))],
         atol=1e-4)
register("addmm", lambda m, a, b, c: m.addmm(a, b, c, beta=0.5, alpha=2.0), lambda a, b, c: 0.5 * a + 2 * b @ c,
         lambda d, r: [_s(arr(r, (3, 4), d), arr(r, (3, 2), d), arr(r, (2, 4), d))])
register("cross", lambda m, a, b: m.cross(a, b, dim=1), lambda a, b: np.cross(a, b, axis=1),
         lambda d, r: [_s(arr(r, (4, 3), d), arr(r, (4, 3), d))])
register("cdist", lambda m, a, b, **kw: m.cdist(a, b, **kw),
         lambda a, b, p: (np.abs(a[:, None] - b[None]) ** p).sum(-1) ** (1 / p),
         lambda d, r: [_s(distinct(r, (4, 3), d), distinct(r, (5, 3), d) + 0.05, p=2.0),
                       _s(distinct(r, (4, 3), d), distinct(r, (5, 3), d) + 0.05, p=3.0)], atol=1e-4)
register("pdist", lambda m, a: F(m).pdist(a),
         lambda a: np.array([np.sqrt(((a[i] - a[j]) ** 2).sum()) for i in range(len(a)) for j in range(i + 1, len(a))]),
         lambda d, r: [_s(distinct(r, (4, 3), d))])

# ---------------------------------------------------------------- indexing
_IDX = np.array([[0, 2, 1, 0], [1, 0, 2, 2]])


def _np_scatter(x, index, src, dim):
    out = x.copy()
    for i in range(index.shape[0]):
        for j in range(index.shape[1]):
            pos = (index[i, j], j) if dim == 0 else (i, index[i, j])
            out[pos] = src[i, j]
    return out


register("scatter", lambda m, x, s: m.scatter(x, 1, m.tensor(_IDX[:, :3] % 3, device=x.device), s),
         lambda x, s: _np_scatter(x, _IDX[:, :3] % 3, s, 1),
         lambda d, r: [_s(arr(r, (2, 4), d), arr(r, (2, 3), d))], dtypes=FLOATS)
register("index_add", lambda m, x, s: m.index_add(x, 0, m.tensor([2, 0, 2], device=x.device), s, alpha=0.5),
         lambda x, s: (lambda o: (np.add.at(o, [2, 0, 2], 0.5 * s), o)[1])(x.copy()),
         lambda d, r: [_s(arr(r, (3, 4), d), arr(r, (3, 4), d))])


def _np_scatter_extreme(x, index, src, dim, reduce, include_self):
    ufunc = np.maximum if reduce == "amax" else np.minimum
    out = x.copy()
    grids = list(np.indices(index.shape, sparse=True))
    grids[dim] = index
    if not include_self:
        out[tuple(grids)] = -np.inf if reduce == "amax" else np.inf
    ufunc.at(out, tuple(grids), src)
    return out


_SIDX = np.array([[0, 2, 1, 0], [1, 0, 2, 2], [2, 2, 0, 1], [1, 1, 1, 0], [0, 2, 0, 1]])
for _red in ("amax", "amin"):
    register(f"scatter_reduce_{_red}",
             lambda m, x, s, red=_red, inc=True: m.scatter_reduce(x, 0, m.tensor(_SIDX, device=x.device), s, red, include_self=inc),
             lambda x, s, red=_red, inc=True: _np_scatter_extreme(x, _SIDX, s, 0, red, inc),
             lambda d, r: [_s(distinct(r, (3, 4), d), distinct(r, (5, 4), d)),
                           _s(distinct(r, (3, 4), d), distinct(r, (5, 4), d), inc=False)], dtypes=FLOATS)
register("index_copy", lambda m, x, s: m.index_copy(x, 1, m.tensor([3, 0], device=x.device), s),
         lambda x, s: (lambda o: (o.__setitem__((slice(None), [3, 0]), s), o)[1])(x.copy()),
         lambda d, r: [_s(arr(r, (3, 4), d), arr(r, (3, 2), d))])
register("index_fill", lambda m, x: m.index_fill(x, 1, m.tensor([1, 3], device=x.device), -1.5),
         lambda x: (lambda o: (o.__setitem__((slice(None), [1, 3]), -1.5), o)[1])(x.copy()),
         lambda d, r: [_s(arr(r, (3, 4), d))])
register("take", lambda m, x: m.take(x, m.tensor([[0, 5], [11, 3]], device=x.device)), lambda x: np.take(x, [[0, 5], [11, 3]]),
         lambda d, r: [_s(arr(r, (3, 4), d))], dtypes=NUMERIC)
register("select", lambda m, x, **kw: m.select(x, **kw), lambda x, dim, index: np.take(x, index, dim),
         lambda d, r: [_s(arr(r, (3, 4), d), dim=1, index=-1)], dtypes=NUMERIC)
register("masked_select", lambda m, x: m.masked_select(x, x > 0), lambda x: x[x > 0],
         lambda d, r: [_s(arr(r, (3, 4), d))])
register("combinations", lambda m, x, **kw: m.combinations(x, **kw),
         lambda x, r=2, with_replacement=False: np.asarray(
             list((itertools.combinations_with_replacement if with_replacement else itertools.combinations)(x, r))),
         lambda d, r: [Sample((arr(r, (4,), d),), {}), Sample((arr(r, (4,), d),), {"r": 3}),
                       Sample((arr(r, (3,), d),), {"with_replacement": True})], dtypes=NUMERIC)
register("vander", lambda m, x, **kw: m.vander(x, **kw),
         lambda x, N=None, increasing=False: np.vander(x, N, increasing),
         lambda d, r: [Sample((arr(r, (4,), d),), {}), Sample((arr(r, (3,), d),), {"N": 5, "increasing": True})],
         torch=False)   # (torch.vander's own backward fails: it writes into a saved tensor)
