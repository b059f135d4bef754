"""BatchNorm's numpy forms for a channel-major input (a convolution's output), block by
block of channels: each block's passes stay in cache (ops/batchnorm_prim.py's
`_forward_impl` and `_backward_impl` run them first and fall back to the whole-array
forms). The same operations in the same dtypes as the whole-array forms, so the same
values."""
from __future__ import annotations

import numpy as np

from . import batchnorm_prim as _bn

__all__: list = []   # (the forms are batchnorm_prim's)


def _backward_blocks(g, x, stats, weight, eps, out) -> bool:
    """batch_norm_backward's numpy form for a channel-major x, block by block of channels
    (`_channel_blocks`, `_NP_BLOCK_BACKWARD`), into the record `out`; False (the
    whole-array form runs) for any other x, or a channel-major g whose channel runs are not
    contiguous. The same operations in the same dtypes as `_reduce_impl` then
    `_input_impl`. A g in the other layout is copied into x's order a block at a time,
    into the block's output rows, so the block's passes stay in cache (LeNet's BatchNorm
    backward: 3.5 -> 2.1 ms)."""
    xr = _channel_rows(x)
    if xr is None or not x.size or tuple(g.shape) != tuple(x.shape):
        return False
    n, c, l = _bn._ncl_shape(x)
    count = n * l
    g3 = g.reshape(n, c, l)
    gr = _channel_rows(g)
    if gr is None and g3.strides[1] > g3.strides[0]:
        return False   # `_g_like_x` copies such a g whole: the whole-array form does it once
    dt = x.dtype
    mean = stats[0].astype(np.float64)
    rstd = 1.0 / np.sqrt(stats[1].astype(np.float64) + eps)
    mean_x = mean.astype(dt)
    w = _bn._channels(weight, np, c)
    rows = out[:c * count].reshape(c, count)
    red = out[c * count:].reshape(2, c)
    blocks, k = _bn._channel_blocks(c, count, _bn._NP_BLOCK_BACKWARD)
    t_all = np.empty((k, count), dt)
    # the coefficients' parts that need no sums, for every channel at once (~6 small numpy
    # calls a block fewer, of which LeNet's first BatchNorm has 16)
    a, neg_a, neg_a_rstd = _bn._sum_free_parts(w, rstd)
    a_dt = a.astype(dt)[:, None]
    red64 = np.empty((2, c))
    for c0, c1 in blocks:
        xb, t, ob = xr[c0:c1], t_all[:c1 - c0], rows[c0:c1]
        if gr is not None:
            gb = gr[c0:c1]
        else:
            # g's block in x's order goes into the block's output rows, which the products
            # below then overwrite in place (each element read before it is written): the
            # copy is the rows' one write from memory, and no scratch for it (LeNet's first
            # BatchNorm backward 2.36-2.54 -> 2.16-2.17 ms warm, second 0.85-0.87 -> 0.77)
            gb = ob
            gb.reshape(c1 - c0, n, l)[...] = g3[:, c0:c1].transpose(1, 0, 2)
        np.subtract(xb, mean_x[c0:c1, None], out=t)
        red[0, c0:c1] = _bn._row_sums(gb)                 # rounded to dt as by astype
        red[1, c0:c1] = _bn._row_dots(t, gb) * rstd[c0:c1]
        rb = red64[:, c0:c1]
        rb[...] = red[:, c0:c1]
        b, d = _bn._summed_parts((None, neg_a[c0:c1], neg_a_rstd[c0:c1]), mean[c0:c1], rb[0], rb[1], count)
        np.multiply(gb, a_dt[c0:c1], out=ob)
        np.add(ob, np.multiply(xb, b.astype(dt)[:, None], out=t), out=ob)
        np.add(ob, d.astype(dt)[:, None], out=ob)
    return True


def _channel_rows(x):
    """x's (C, N*L) rows when x is channel-major with contiguous channel runs (the conv
    GEMM's output), else None."""
    n, c, l = _bn._ncl_shape(x)
    x3 = x.reshape(n, c, l)
    if n < 2 or c < 2 or not x3.strides[1] > x3.strides[0]:
        return None
    rows = x3.transpose(1, 0, 2)
    return rows.reshape(c, n * l) if rows.flags.c_contiguous else None


def _forward_blocks(x, weight, bias, eps, rec) -> bool:
    """batch_norm_forward's numpy form for a channel-major x, block by block of channels
    (`_channel_blocks`); False (the whole-array form runs) for any other x. The same
    operations in the same dtypes as `_stats_impl`, `_train_impl`. The affine runs on the
    block's rows in x's order into a scratch block, then one copy puts them in the
    C-contiguous output, so passes stay in cache (LeNet's first BatchNorm: 2.6 -> 2.0 ms)."""
    rows = _channel_rows(x)
    if rows is None or not x.size:
        return False
    n, c, l = _bn._ncl_shape(x)
    count = n * l
    out = rec[:x.size].reshape(n, c, l)
    stats = rec[x.size:].reshape(2, c)
    w, b = _bn._channels(weight, np, c), _bn._channels(bias, np, c)
    blocks, k = _bn._channel_blocks(c, count, _bn._NP_BLOCK)
    scratch = np.empty((k, count), x.dtype)
    for c0, c1 in blocks:
        xb, d = rows[c0:c1], scratch[:c1 - c0]
        mu = (_bn._row_sums(xb) / count).astype(x.dtype)
        np.subtract(xb, mu[:, None], out=d)
        var = (_bn._row_dots(d, d) / count).astype(x.dtype)
        stats[0, c0:c1], stats[1, c0:c1] = mu, var
        a, shift = _bn._scale_shift(np, w[c0:c1], b[c0:c1], mu.astype(np.float64),
                                var.astype(np.float64), eps)
        np.multiply(xb, a.astype(x.dtype)[:, None], out=d)
        np.add(d, shift.astype(x.dtype)[:, None], out=d)
        out[:, c0:c1] = d.reshape(c1 - c0, n, l).transpose(1, 0, 2)
    return True


