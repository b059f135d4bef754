"""Op records for conv2d's bias through the GEMM (ops/conv.py "gemm_bias", ops/composite.py
conv2d): biased convolutions over strides, padding, dilation and an unbatched input, whose
bias gradient comes from the weight-gradient GEMM; and floating max-pooling's record path
(ops/pool_offsets.py) on integer inputs (the other path) and on NaN windows (forward)."""
from __future__ import annotations

import numpy as np

from opdb import FLOATS, INTS, F, Sample, _conv2d, _np_conv2d, _np_pool, arr, register


def _np_conv2d_any(x, w, b=None, **kw):
    if x.ndim == 3:   # unbatched (C, H, W)
        return _np_conv2d(x[None], w, b, **kw)[0]
    return _np_conv2d(x, w, b, **kw)


register("conv2d.bias_gemm", _conv2d, _np_conv2d_any,
         lambda d, r: [Sample((arr(r, (2, 3, 7, 6), d), arr(r, (4, 3, 3, 2), d), arr(r, (4,), d)),
                              {"stride": (2, 1), "padding": 1}),
                       Sample((arr(r, (1, 2, 8, 8), d), arr(r, (3, 2, 3, 3), d), arr(r, (3,), d)),
                              {"dilation": 2, "padding": (2, 1)}),
                       Sample((arr(r, (2, 7, 7), d), arr(r, (2, 2, 1, 1), d), arr(r, (2,), d)), {},
                              desc="unbatched")],
         dtypes=FLOATS)


def _nan_windows(rng, shape, dtype):
    x = rng.standard_normal(shape).astype(dtype.np)
    x[0, 0, 0, 1] = x[0, 1, 2, 2] = x[0, 1, 3, 3] = np.nan
    return x


register("max_pool2d.nan_windows", lambda m, x, **kw: F(m).max_pool2d(x, **kw), _np_pool,
         lambda d, r: [Sample((_nan_windows(r, (1, 2, 6, 6), d),), {"kernel_size": 2}),
                       Sample((_nan_windows(r, (1, 2, 6, 6), d),),
                              {"kernel_size": 3, "stride": 2, "padding": 1})],
         dtypes=FLOATS, grad=False)

def _np_pool_ints(x, **kw):
    return _np_pool(x.astype(np.float64), **kw).astype(x.dtype)   # -inf padding needs floats


register("max_pool2d.integers", lambda m, x, **kw: F(m).max_pool2d(x, **kw), _np_pool_ints,
         lambda d, r: [Sample((arr(r, (2, 3, 6, 6), d, -50, 50),), {"kernel_size": 2}),
                       Sample((arr(r, (1, 2, 7, 7), d, -50, 50),), {"kernel_size": 3, "stride": 2, "padding": 1})],
         dtypes=INTS, grad=False)
