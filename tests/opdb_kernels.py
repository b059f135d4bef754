"""Op records that reach the CPU backend's registered implementations (ops/impls.py) the
other records do not: BatchNorm's pass primitives and the fused BatchNorm + max-pooling
records (which compiled plans bind), the window-offset pooling primitive on floats, and
sizes the kernels take (a ReLU over 64K elements: its backward's select; an embedding
gradient of many rows: index_add's row loop; topk's and argmax's selection loops).
tests/ops/test_impls.py holds every
implementation against its primitive's numpy form over these samples too."""
from __future__ import annotations

import numpy as np

from opdb import FLOATS, F, Sample, _np_pool, arr, distinct, idx, register

EPS = 1e-5


def _moments(x):
    axes = (0,) + tuple(range(2, x.ndim))
    return x.mean(axis=axes), x.var(axis=axes), axes


def _view(v, x):
    return v.reshape((1, -1) + (1,) * (x.ndim - 2))


def _np_normalized(x, w, b):
    mu, var, _ = _moments(x)
    return (x - _view(mu, x)) / np.sqrt(_view(var, x) + EPS) * _view(w, x) + _view(b, x)


def _bn_inputs(r, shape, d):
    c = shape[1]
    return arr(r, shape, d), arr(r, (c,), d, 0.5, 1.5), arr(r, (c,), d)


# ---------------------------------------------------------------- BatchNorm's passes
def _stats(m, x):
    from tracejit.ops import batchnorm_prim as B
    return B.batch_norm_stats(x)


def _np_stats(x):
    mu, var, _ = _moments(x)
    return np.stack([mu, var])


def _train(m, x, w, b):
    if m.__name__ == "torch":
        return m.nn.functional.batch_norm(x, None, None, w, b, training=True, eps=EPS)
    from tracejit.ops import batchnorm_prim as B
    return B.batch_norm_train(x, B.batch_norm_stats(x), w, b, EPS)


def _grad_parts(g, x):
    """(sum g, sum g * xhat) per channel, xhat the normalized x."""
    mu, var, axes = _moments(x)
    xhat = (x - _view(mu, x)) / np.sqrt(_view(var, x) + EPS)
    return np.stack([g.sum(axis=axes), (g * xhat).sum(axis=axes)]), xhat


def _reduce(m, g, x):
    from tracejit.ops import batchnorm_prim as B
    from tracejit.ops.eager import bind
    return bind(B.BN_BACKWARD_REDUCE, g, x, B.batch_norm_stats(x), eps=EPS)


def _input(m, g, x, w):
    from tracejit.ops import batchnorm_prim as B
    from tracejit.ops.eager import bind
    stats = B.batch_norm_stats(x)
    red = bind(B.BN_BACKWARD_REDUCE, g, x, stats, eps=EPS)
    return bind(B.BN_BACKWARD_INPUT, g, x, stats, w, red, eps=EPS)


def _np_input(g, x, w):
    red, xhat = _grad_parts(g, x)
    _, var, axes = _moments(x)
    n = x.size // x.shape[1]
    rstd = 1.0 / np.sqrt(_view(var, x) + EPS)
    return _view(w, x) * rstd * (g - _view(red[0], x) / n - xhat * _view(red[1], x) / n)


_BN_SHAPES = [(4, 3, 5, 6), (6, 4), (3, 5, 7)]
register("batch_norm_stats", _stats, _np_stats,
         lambda d, r: [Sample((arr(r, s, d),)) for s in _BN_SHAPES], grad=False, torch=False)
register("batch_norm_train", _train, _np_normalized,
         lambda d, r: [Sample(_bn_inputs(r, s, d)) for s in _BN_SHAPES], atol=1e-4, rtol=1e-4)
register("batch_norm_backward_reduce", _reduce, lambda g, x: _grad_parts(g, x)[0],
         lambda d, r: [Sample((arr(r, s, d), arr(r, s, d))) for s in _BN_SHAPES], grad=False,
         torch=False, atol=1e-4, rtol=1e-4)
register("batch_norm_backward_input", _input, _np_input,
         lambda d, r: [Sample((arr(r, s, d), arr(r, s, d), arr(r, (s[1],), d, 0.5, 1.5)))
                       for s in _BN_SHAPES], grad=False, torch=False, atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------- the window-offset pooling primitive
def _pool(m, x, kernel_size, stride, padding=0):
    if m.__name__ == "torch":
        return m.nn.functional.max_pool2d(x, kernel_size, stride, padding)
    from tracejit.ops import pooling_prim
    pair = lambda v: (v, v)  # noqa: E731
    return pooling_prim.max_pool2d(x, pair(kernel_size), pair(stride), pair(padding))


register("max_pool2d.window_prim", _pool, _np_pool,
         lambda d, r: [Sample((distinct(r, (2, 3, 6, 6), d),), {"kernel_size": 2, "stride": 2}),
                       Sample((distinct(r, (1, 2, 7, 7), d),), {"kernel_size": 3, "stride": 2, "padding": 1})],
         dtypes=FLOATS)


# ---------------------------------------------------------------- sizes the kernels take
register("relu.large", lambda m, x: F(m).relu(x), lambda x: np.maximum(x, 0),
         lambda d, r: [Sample((arr(r, (256, 256), d),), desc="64K elements: the backward's kernel")])
register("embedding.rows", lambda m, i, w: F(m).embedding(i, w), lambda i, w: w[i],
         lambda d, r: [Sample((idx(r, (8, 12), 10), arr(r, (10, 6), d)), grad=(1,),
                              desc="96 row updates: the backward's row loop")])
register("topk.rows", lambda m, x, **kw: tuple(m.topk(x, **kw)),
         lambda x, k, dim=-1, largest=True: _np_topk(x, k, dim, largest),
         lambda d, r: [Sample((distinct(r, (32, 128), d),), {"k": 8, "largest": False},
                              desc="4096 elements: the insertion loop"),
                       Sample((distinct(r, (64, 4, 16), d),), {"k": 3, "dim": 0})])
register("argmax.rows", lambda m, x, **kw: m.argmax(x, **kw), lambda x, dim: np.argmax(x, axis=dim),
         lambda d, r: [Sample((distinct(r, (256, 16), d),), {"dim": -1}, desc="a row scan"),
                       Sample((distinct(r, (16, 8, 32), d),), {"dim": 1})], grad=False)
register("argmin.rows", lambda m, x, **kw: m.argmin(x, **kw), lambda x, dim: np.argmin(x, axis=dim),
         lambda d, r: [Sample((distinct(r, (256, 16), d),), {"dim": 1})], grad=False)


def _np_topk(x, k, dim, largest):
    order = np.argsort(-x if largest else x, axis=dim, kind="stable")
    i = np.take(order, np.arange(k), axis=dim)
    return np.take_along_axis(x, i, dim), i
