"""Op records for tracejit/ops/spatial.py: conv1d, conv_transpose2d, adaptive pools, pooling
options, interpolate and pad modes. The numpy references loop over kernel taps / output
positions (slow and obvious), independent of the matmul/fold formulations under test."""
from __future__ import annotations

import math

import numpy as np

import tracejit as tj
from opdb import F, Sample, _np_conv2d, arr, distinct, register


def NF(m):
    """nn.functional of either library (interpolate and pad are not top-level names)."""
    return tj.nn.functional if m is tj else m.nn.functional


def _np_conv1d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    return _np_conv2d(x[:, :, None], w[:, :, None], b, (1, stride), (0, padding), (1, dilation),
                      groups)[:, :, 0]


register("conv1d", lambda m, x, w, b=None, **kw: F(m).conv1d(x, w, b, **kw), _np_conv1d,
         lambda d, r: [Sample((arr(r, (2, 4, 9), d), arr(r, (6, 2, 3), d), arr(r, (6,), d)),
                              {"stride": 2, "padding": 1, "dilation": 2, "groups": 2}),
                       Sample((arr(r, (1, 3, 7), d), arr(r, (2, 3, 2), d)), {})],
         atol=1e-4, rtol=1e-4)


def _np_same(conv, x, w, *b, dilation=1, **kw):
    """padding='same' by hand: dilation * (k - 1) in all per spatial dim, the odd one on the
    right (bottom), then a plain convolution."""
    dl = (dilation,) * (w.ndim - 2) if isinstance(dilation, int) else tuple(dilation)
    widths = [(0, 0), (0, 0)]
    for k, d in zip(w.shape[2:], dl):
        total = d * (k - 1)
        widths.append((total // 2, total - total // 2))
    return conv(np.pad(x, widths), w, *b, dilation=dilation if isinstance(dilation, int) else dl, **kw)


# even kernels and dilations whose total padding is odd: PyTorch pads one more on the right
register("conv2d.same", lambda m, x, w, b=None, **kw: F(m).conv2d(x, w, b, padding="same", **kw),
         lambda x, w, *b, **kw: _np_same(_np_conv2d, x, w, *b, **kw),
         lambda d, r: [Sample((arr(r, (1, 3, 8, 9), d), arr(r, (2, 3, 3, 2), d), arr(r, (2,), d)), {},
                              desc="(3, 2) kernel"),
                       Sample((arr(r, (2, 2, 7, 8), d), arr(r, (3, 2, 2, 2), d)), {}, desc="(2, 2) kernel"),
                       Sample((arr(r, (1, 3, 8, 9), d), arr(r, (3, 3, 1, 2), d)), {"dilation": (2, 1)},
                              desc="(1, 2) kernel, dilation (2, 1)"),
                       Sample((arr(r, (1, 4, 6, 7), d), arr(r, (4, 2, 4, 3), d)), {"dilation": (1, 2), "groups": 2},
                              desc="(4, 3) kernel, dilation (1, 2), groups")],
         atol=1e-4, rtol=1e-4)
register("conv1d.same", lambda m, x, w, b=None, **kw: F(m).conv1d(x, w, b, padding="same", **kw),
         lambda x, w, *b, **kw: _np_same(_np_conv1d, x, w, *b, **kw),
         lambda d, r: [Sample((arr(r, (2, 3, 9), d), arr(r, (2, 3, 4), d), arr(r, (2,), d)), {}, desc="k=4"),
                       Sample((arr(r, (1, 2, 8), d), arr(r, (3, 2, 2), d)), {"dilation": 3}, desc="k=2 dilation 3")],
         atol=1e-4, rtol=1e-4)


def _np_conv_transpose2d(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    p2 = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
    s, p, op, dl = p2(stride), p2(padding), p2(output_padding), p2(dilation)
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    cg = c // groups
    oh = (h - 1) * s[0] - 2 * p[0] + dl[0] * (kh - 1) + op[0] + 1
    ow = (wd - 1) * s[1] - 2 * p[1] + dl[1] * (kw - 1) + op[1] + 1
    full = np.zeros((n, og * groups, oh + 2 * p[0] + s[0], ow + 2 * p[1] + s[1]))
    for g in range(groups):
        xs, ws = x[:, g * cg:(g + 1) * cg], w[g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                contrib = np.einsum("nchw,co->nohw", xs, ws[:, :, i, j])
                full[:, g * og:(g + 1) * og, i * dl[0]: i * dl[0] + s[0] * h: s[0],
                     j * dl[1]: j * dl[1] + s[1] * wd: s[1]] += contrib
    out = full[:, :, p[0]: p[0] + oh, p[1]: p[1] + ow]
    return out + (0 if b is None else b.reshape(1, -1, 1, 1))


register("conv_transpose2d", lambda m, x, w, b=None, **kw: F(m).conv_transpose2d(x, w, b, **kw),
         _np_conv_transpose2d,
         lambda d, r: [Sample((arr(r, (2, 3, 4, 5), d), arr(r, (3, 2, 3, 3), d), arr(r, (2,), d)), {}),
                       Sample((arr(r, (1, 4, 3, 3), d), arr(r, (4, 1, 3, 2), d)),
                              {"stride": (2, 3), "padding": (1, 0), "output_padding": (1, 2),
                               "groups": 2, "dilation": (1, 2)})],
         atol=1e-4, rtol=1e-4)
# output_padding of a stride or more, which PyTorch allows below the dilation
register("conv_transpose2d.output_padding", lambda m, x, w, b=None, **kw: F(m).conv_transpose2d(x, w, b, **kw),
         _np_conv_transpose2d,
         lambda d, r: [Sample((arr(r, (1, 2, 3, 4), d), arr(r, (2, 3, 2, 2), d), arr(r, (3,), d)),
                              {"output_padding": 1, "dilation": 2}, desc="stride 1, dilation 2"),
                       Sample((arr(r, (2, 2, 3, 3), d), arr(r, (2, 1, 3, 2), d)),
                              {"stride": (2, 1), "padding": (2, 1), "output_padding": (2, 1), "dilation": 3},
                              desc="padding above output_padding"),
                       Sample((arr(r, (1, 4, 3, 2), d), arr(r, (4, 1, 2, 3), d)),
                              {"stride": 1, "padding": (0, 1), "output_padding": (2, 1), "dilation": (3, 2),
                               "groups": 2}, desc="groups")],
         atol=1e-4, rtol=1e-4)


def _bins(size, out):
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def _np_adaptive(x, output_size, reduce):
    oh, ow = (output_size, output_size) if isinstance(output_size, int) else output_size
    out = np.empty(x.shape[:2] + (oh, ow))
    for i, (h0, h1) in enumerate(_bins(x.shape[2], oh)):
        for j, (w0, w1) in enumerate(_bins(x.shape[3], ow)):
            out[:, :, i, j] = reduce(x[:, :, h0:h1, w0:w1], axis=(2, 3))
    return out


register("adaptive_avg_pool2d", lambda m, x, **kw: F(m).adaptive_avg_pool2d(x, **kw),
         lambda x, output_size: _np_adaptive(x, output_size, np.mean),
         lambda d, r: [Sample((arr(r, (2, 3, 7, 10), d),), {"output_size": (3, 4)}),
                       Sample((arr(r, (1, 2, 6, 4), d),), {"output_size": 2})])
register("adaptive_max_pool2d", lambda m, x, **kw: F(m).adaptive_max_pool2d(x, **kw),
         lambda x, output_size: _np_adaptive(x, output_size, np.max),
         lambda d, r: [Sample((distinct(r, (2, 3, 7, 10), d),), {"output_size": (3, 4)}),
                       Sample((distinct(r, (1, 2, 6, 4), d),), {"output_size": 2})])


def _np_adaptive_indices(x, output_size):
    """(max, flat H*W index of each bin's first maximum, row-major), PyTorch's indices."""
    oh, ow = (output_size, output_size) if isinstance(output_size, int) else output_size
    n, c, h, w = x.shape
    vals, idx = np.empty((n, c, oh, ow)), np.empty((n, c, oh, ow), np.int64)
    for i, (h0, h1) in enumerate(_bins(h, oh)):
        for j, (w0, w1) in enumerate(_bins(w, ow)):
            flat = (np.arange(h0, h1)[:, None] * w + np.arange(w0, w1)[None, :]).reshape(-1)
            win = x.reshape(n, c, h * w)[:, :, flat]
            first = np.argmax(win, axis=2)
            vals[:, :, i, j] = np.take_along_axis(win, first[:, :, None], 2)[:, :, 0]
            idx[:, :, i, j] = flat[first]
    return vals, idx


def _ties(rng, shape, dtype):
    return rng.integers(0, 3, shape).astype(dtype.np)


register("adaptive_max_pool2d.indices", lambda m, x, **kw: F(m).adaptive_max_pool2d(x, return_indices=True, **kw),
         _np_adaptive_indices,
         lambda d, r: [Sample((_ties(r, (2, 3, 7, 10), d),), {"output_size": (3, 4)}, desc="uneven bins, ties"),
                       Sample((_ties(r, (1, 2, 6, 4), d),), {"output_size": 2}, desc="even bins, ties"),
                       Sample((distinct(r, (1, 2, 5, 7), d),), {"output_size": (4, 3)}, desc="overlapping bins")],
         grad=False)


def _np_avg_pool(x, kernel_size, stride, padding=0, ceil_mode=False, count_include_pad=True):
    n, c, h, w = x.shape
    k, s, p = kernel_size, stride, padding

    def length(size):
        o = (-(-(size + 2 * p - k) // s) if ceil_mode else (size + 2 * p - k) // s) + 1
        return o - 1 if ceil_mode and (o - 1) * s >= size + p else o
    oh, ow = length(h), length(w)
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * s - p, j * s - p
            h1, w1 = min(h0 + k, h + p), min(w0 + k, w + p)
            win = x[:, :, max(h0, 0):min(h1, h), max(w0, 0):min(w1, w)]
            div = (h1 - h0) * (w1 - w0) if count_include_pad else win.shape[2] * win.shape[3]
            out[:, :, i, j] = win.sum(axis=(2, 3)) / div
    return out


register("avg_pool2d.options", lambda m, x, **kw: F(m).avg_pool2d(x, **kw), _np_avg_pool,
         lambda d, r: [Sample((arr(r, (2, 2, 7, 8), d),), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
                       Sample((arr(r, (1, 2, 6, 7), d),), {"kernel_size": 3, "stride": 2, "padding": 1,
                                                           "count_include_pad": False, "ceil_mode": True})])


def _np_interp_axis(x, axis, out, mode, align_corners, scale):
    size = x.shape[axis]
    dst = np.arange(out, dtype=np.float64)
    if mode == "nearest":
        idx = np.minimum(np.floor(dst * scale).astype(int), size - 1)
        return np.take(x, idx, axis=axis)
    src = dst * (size - 1) / (out - 1) if align_corners else np.maximum((dst + 0.5) * scale - 0.5, 0)
    lo = np.minimum(np.floor(src).astype(int), size - 1)
    hi = np.minimum(lo + 1, size - 1)
    t = (src - lo).reshape([-1 if a == axis else 1 for a in range(x.ndim)])
    return np.take(x, lo, axis=axis) * (1 - t) + np.take(x, hi, axis=axis) * t


def _np_interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None):
    out = x
    for a in range(2, x.ndim):
        n = size[a - 2] if size is not None else int(math.floor(x.shape[a] * scale_factor))
        sc = x.shape[a] / n if size is not None else 1.0 / scale_factor
        out = _np_interp_axis(out, a, n, "nearest" if mode == "nearest" else "linear",
                              bool(align_corners), sc)
    return out


register("interpolate", lambda m, x, **kw: NF(m).interpolate(x, **kw), _np_interpolate,
         lambda d, r: [Sample((arr(r, (2, 2, 4, 5), d),), {"scale_factor": 2}),
                       Sample((arr(r, (1, 2, 5, 3), d),), {"size": (7, 4)}),
                       Sample((arr(r, (1, 2, 4, 5), d),), {"size": (7, 3), "mode": "bilinear",
                                                           "align_corners": False}),
                       Sample((arr(r, (1, 2, 4, 5), d),), {"scale_factor": 2, "mode": "bilinear",
                                                           "align_corners": True}),
                       Sample((arr(r, (2, 3, 6), d),), {"size": (9,), "mode": "linear",
                                                        "align_corners": False})])


def _np_pad(x, pad, mode="constant", value=0.0):
    widths = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        widths[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if mode == "constant":
        return np.pad(x, widths, constant_values=value)
    return np.pad(x, widths, mode={"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode])


register("pad.modes", lambda m, x, **kw: NF(m).pad(x, **kw), _np_pad,
         lambda d, r: [Sample((arr(r, (2, 3, 4, 5), d),), {"pad": (2, 1, 0, 3), "mode": mode})
                       for mode in ("reflect", "replicate", "circular")]
         + [Sample((arr(r, (2, 6), d),), {"pad": (1, 2), "mode": "constant", "value": 0.5})])
