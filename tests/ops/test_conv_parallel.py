"""The im2col / col2im kernels (ops/conv.py) split channels over numba's threads from
PARALLEL_MIN elements: the same per-channel loops, so the same columns and images as the
serial kernels, bitwise, with and without padding."""
from __future__ import annotations

import numpy as np
import pytest

from tracejit.ops import conv as C
from tracejit.ops import native

pytest.importorskip("numba")


@pytest.mark.parametrize("padding", [(0, 0), (1, 1)])
def test_parallel_im2col_and_col2im_equal_the_serial_kernels(monkeypatch, padding):
    import tracejit.threads as threads
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 7, 6)).astype(np.float32)
    geom = ((3, 3), (1, 1), padding, (1, 1))
    oh = C.conv_out_size(7, 3, 1, padding[0], 1)
    ow = C.conv_out_size(6, 3, 1, padding[1], 1)
    results = []
    for minimum in (1 << 40, 1):
        monkeypatch.setattr(threads, "PARALLEL_MIN", minimum)
        cols = C._im2col_native(np, x, *geom, 0.0, oh, ow, ones=True)
        img = C._col2im_native(np, np.ascontiguousarray(cols[:-1]), 3, 4, (7, 6), *geom)
        assert cols is not None and img is not None
        results.append((cols, img))
    for serial, parallel in zip(*results):
        np.testing.assert_array_equal(parallel, serial)
    # the serial columns are im2col's: x's window values, ones in the last row
    assert np.all(results[0][0][-1] == 1)
    par = {k[0] for k, v in native._kernels.items() if k[-1] == "parallel" and v.fn is not None}
    assert par >= {"im2col", "col2im"}
