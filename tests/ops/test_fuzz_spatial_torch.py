"""Differential fuzzing of the functional spatial ops against PyTorch on inputs of every
layout (the harness: tests/fn_fuzz.py): channels_last, transposed strides and a batch of 1
expanded, eagerly and through ``tj.compile``, values and the gradients of input, weight and
bias: conv1d/2d/3d (groups, dilation, stride and padding ints or tuples, 'same', 'valid',
reflect / replicate / circular padding through pad) and conv_transpose (output_padding),
max pooling with indices and max_unpool (output_size), avg pooling (ceil_mode,
count_include_pad, divisor_override), lp and adaptive pooling, interpolate (every mode,
scale_factor or size, align_corners, recompute_scale_factor), pad with negative amounts,
unfold / fold, pixel_shuffle / unshuffle, and batch / instance / group / layer / rms /
local response norm."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from fn_fuzz import check, draw, normal, pick

torch = pytest.importorskip("torch")


def _layout(r, rank):
    return pick(r, ["plain", "transposed", "expanded"] + ["channels_last"] * 2 * (rank in (4, 5)))


def _relayout(lib, x, kind):
    if kind == "channels_last":
        return x.contiguous(memory_format=lib.channels_last if x.ndim == 4 else lib.channels_last_3d)
    if kind == "transposed":
        return x.transpose(0, -1).contiguous().transpose(0, -1)
    return x.expand(3, *x.shape[1:]) if kind == "expanded" else x


def _input(r, c, size, dt):
    lay = _layout(r, len(size) + 2)
    return normal(r, 1 if lay == "expanded" else draw(r, 1, 3), c, *size, dtype=dt), lay


def conv(r):
    nd, dt, transposed = draw(r, 1, 4), pick(r, ["float32", "float64"]), not r.integers(3)
    cin = pick(r, [1, 2, 4])
    groups = pick(r, [g for g in (1, 2, 4) if cin % g == 0])
    cout = groups * draw(r, 1, 3)
    k = tuple(draw(r, 1, 4) for _ in range(nd))
    stride = tuple(draw(r, 1, 3) for _ in range(nd)) if r.integers(2) else draw(r, 1, 3)
    dil = tuple(draw(r, 1, 3) for _ in range(nd)) if r.integers(2) else draw(r, 1, 3)
    dd = dil if isinstance(dil, tuple) else (dil,) * nd
    x, lay = _input(r, cin, [draw(r, k[i] * dd[i], k[i] * dd[i] + 4) for i in range(nd)], dt)
    b = [normal(r, cout, dtype=dt)] if r.integers(2) else []
    if transposed:
        ss = stride if isinstance(stride, tuple) else (stride,) * nd
        pad, op = draw(r, 0, 2), tuple(draw(r, 0, max(ss[i], dd[i])) for i in range(nd))
        w = normal(r, cin, cout // groups, *k, dtype=dt) * 0.5

        def fn(lib, x, w, *b):
            return getattr(lib.nn.functional, f"conv_transpose{nd}d")(
                _relayout(lib, x, lay), w, *b, stride=stride, padding=pad, output_padding=op, groups=groups,
                dilation=dil)
        return fn, [x, w] + b, dict(transposed=True, k=k, stride=stride, pad=pad, op=op, dil=dil, groups=groups,
                                    lay=lay, shape=x.shape)
    pad = pick(r, [0, 1, "same", "valid", tuple(draw(r, 0, 3) for _ in range(nd))])
    stride = 1 if pad == "same" else stride
    mode = pick(r, ["zeros", "zeros", "reflect", "replicate", "circular"])
    w = normal(r, cout, cin // groups, *k, dtype=dt) * 0.5

    def fn(lib, x, w, *b):
        x, p = _relayout(lib, x, lay), pad
        pp = (pad,) * nd if isinstance(pad, int) else pad
        if mode != "zeros" and isinstance(pad, (int, tuple)) and all(pp[i] < x.shape[2 + i] for i in range(nd)):
            x, p = lib.nn.functional.pad(x, tuple(q for v in reversed(pp) for q in (v, v)), mode=mode), 0
        return getattr(lib.nn.functional, f"conv{nd}d")(x, w, *b, stride=stride, padding=p, dilation=dil,
                                                        groups=groups)
    return fn, [x, w] + b, dict(k=k, stride=stride, pad=pad, mode=mode, dil=dil, groups=groups, lay=lay,
                                shape=x.shape)


def pool(r):
    nd, dt = draw(r, 1, 4), pick(r, ["float32", "float64"])
    kind = pick(r, ["max", "avg", "lp", "unpool", "adaptive_avg", "adaptive_max"])
    k = tuple(draw(r, 1, 4) for _ in range(nd)) if r.integers(2) and kind != "lp" else draw(r, 1, 4)
    kk = k if isinstance(k, tuple) else (k,) * nd
    stride, pad, ceil = pick(r, [None, 1, 2, 3]), draw(r, 0, min(kk) // 2 + 1), bool(r.integers(2))
    x, lay = _input(r, 3, [draw(r, kk[i] + 1, kk[i] + 7) for i in range(nd)], dt)
    info = dict(kind=kind, k=k, stride=stride, pad=pad, ceil=ceil, lay=lay, shape=x.shape)
    dil, cip, div, p = draw(r, 1, 3), bool(r.integers(2)), pick(r, [None, 1, 3]), pick(r, [1.0, 2.0, 3.0])
    out = tuple(pick(r, [None, 1, 2, 3, 5]) for _ in range(nd)) if nd > 1 and r.integers(2) else draw(r, 1, 8)
    osz = bool(r.integers(2))
    if kind == "lp":
        x = np.abs(x) + 0.1

    def fn(lib, x):
        F, x = lib.nn.functional, _relayout(lib, x, lay)
        if kind in ("max", "unpool"):
            y, i = getattr(F, f"max_pool{nd}d")(x, k, stride, pad, dil if kind == "max" else 1, ceil_mode=ceil,
                                                return_indices=True)
            if kind == "max":
                return y, i
            return getattr(F, f"max_unpool{nd}d")(y, i, k, stride, pad, output_size=x.shape[-nd:] if osz else None)
        if kind == "avg":
            return getattr(F, f"avg_pool{nd}d")(x, k, stride, pad, ceil, cip,
                                                **(dict(divisor_override=div) if nd > 1 and div else {}))
        if kind == "lp":
            return getattr(F, f"lp_pool{nd}d")(x, p, k, stride, ceil)
        f = getattr(F, f"{kind}_pool{nd}d")
        return f(x, out, return_indices=True) if kind == "adaptive_max" else f(x, out)
    return fn, [x], dict(info, dil=dil, cip=cip, div=div, p=p, out=out, osz=osz)


def resample(r):
    dt = pick(r, ["float32", "float64"])
    kind = pick(r, ["interpolate", "interpolate", "pad", "unfold", "fold", "pixel_shuffle", "pixel_unshuffle"])
    nd = draw(r, 1, 4) if kind in ("interpolate", "pad") else 2
    if kind == "interpolate":
        mode = pick(r, {1: ["nearest", "linear", "nearest-exact", "area"],
                        2: ["nearest", "bilinear", "bicubic", "nearest-exact", "area"],
                        3: ["nearest", "trilinear", "nearest-exact", "area"]}[nd])
        kw = dict(mode=mode)
        if r.integers(2):
            kw["size"] = tuple(draw(r, 1, 10) for _ in range(nd)) if r.integers(2) else draw(r, 1, 10)
        else:
            kw["scale_factor"] = pick(r, [0.5, 1.5, 2, 2.3, 0.7, 3, 1.0]) if r.integers(2) else \
                tuple(pick(r, [0.5, 1.5, 2, 1.7, 1.0]) for _ in range(nd))
            # (nearest with a scale and no recompute: PyTorch's backward reads other source
            # indices than its forward)
            kw["recompute_scale_factor"] = pick(r, [None, True, False]) if mode != "nearest" else True
        if mode in ("linear", "bilinear", "bicubic", "trilinear"):
            kw["align_corners"] = pick(r, [None, False, True])
        x, lay = _input(r, 2, [draw(r, 2, 7) for _ in range(nd)], dt)   # (no empty output)
        return (lambda lib, x: lib.nn.functional.interpolate(_relayout(lib, x, lay), **kw)), [x], \
            dict(kw, lay=lay, shape=x.shape)
    if kind == "pad":
        mode = pick(r, ["constant", "reflect", "replicate", "circular"])
        npad = nd if mode != "constant" else draw(r, 1, nd + 2)
        # (circular: at most what cropping keeps; PyTorch reads past the input beyond)
        pad = tuple(draw(r, -2, 3) if mode in ("constant", "replicate") else draw(r, -1, 2) for _ in range(2 * npad))
        x, lay = _input(r, 2, [draw(r, 3, 6) for _ in range(nd)], dt)
        val = pick(r, [0.0, 1.5]) if mode == "constant" else None
        return (lambda lib, x: lib.nn.functional.pad(_relayout(lib, x, lay), pad, mode=mode, value=val)), [x], \
            dict(mode=mode, pad=pad, lay=lay, shape=x.shape)
    if kind in ("unfold", "fold"):
        k, d, p, s = pick(r, [1, 2, 3, (2, 1)]), pick(r, [1, 2, (1, 2)]), pick(r, [0, 1, (1, 0)]), pick(r, [1, 2, (2, 1)])
        kk, dd, pp, ss = ((v, v) if isinstance(v, int) else v for v in (k, d, p, s))
        h, w = draw(r, kk[0] * dd[0], kk[0] * dd[0] + 5), draw(r, kk[1] * dd[1], kk[1] * dd[1] + 5)
        info = dict(kind=kind, k=k, d=d, p=p, s=s, h=h, w=w)
        if kind == "unfold":
            x, lay = _input(r, 3, [h, w], dt)
            return (lambda lib, x: lib.nn.functional.unfold(_relayout(lib, x, lay), k, d, p, s)), [x], \
                dict(info, lay=lay)
        n_blocks = ((h + 2 * pp[0] - dd[0] * (kk[0] - 1) - 1) // ss[0] + 1) * \
            ((w + 2 * pp[1] - dd[1] * (kk[1] - 1) - 1) // ss[1] + 1)
        x = normal(r, draw(r, 1, 3), 3 * kk[0] * kk[1], n_blocks, dtype=dt)
        lay = pick(r, ["plain", "transposed"])
        return (lambda lib, x: lib.nn.functional.fold(_relayout(lib, x, lay), (h, w), k, d, p, s)), [x], \
            dict(info, lay=lay)
    f = draw(r, 1, 4)
    if kind == "pixel_shuffle":
        x, lay = _input(r, 2 * f * f, [draw(r, 1, 4), draw(r, 1, 4)], dt)
    else:
        x, lay = _input(r, 2, [f * draw(r, 1, 3), f * draw(r, 1, 3)], dt)
    return (lambda lib, x: getattr(lib.nn.functional, kind)(_relayout(lib, x, lay), f)), [x], \
        dict(kind=kind, f=f, lay=lay, shape=x.shape)


def norm(r):
    dt, kind = pick(r, ["float32", "float64"]), pick(r, ["batch", "instance", "group", "layer", "rms", "lrn"])
    c = pick(r, [1, 2, 3, 4, 6])
    size = [draw(r, 1, 5) for _ in range(draw(r, 1 if kind in ("lrn", "instance") else 0, 4))]
    if kind == "instance" and int(np.prod(size)) == 1:
        size[-1] = 2
    x, lay = _input(r, c, size, dt)
    x = x * 2 + 1
    wb = [normal(r, c, dtype=dt), normal(r, c, dtype=dt)] if r.integers(2) else []
    training, rs = bool(r.integers(2)), bool(r.integers(2))
    if kind == "batch" and training and x.shape[0] * int(np.prod(size)) == 1:
        training = False
    rs = rs or not training
    # (PyTorch's eval-mode batch_norm backward of a (N, C, 1, W) input with transposed
    # strides reads the gradient in the wrong order; lrn views its input)
    lay = "plain" if kind == "batch" and not training and lay == "transposed" or kind == "lrn" and lay == "transposed" \
        else lay
    mom, sz, g = pick(r, [0.1, 0.5, 0.0, 1.0]), draw(r, 1, 6), pick(r, [d for d in range(1, c + 1) if c % d == 0])
    rm, rv = normal(r, c, dtype=dt), np.abs(normal(r, c, dtype=dt)) + 0.5
    shape = list(x.shape)
    ns = tuple(shape[-draw(r, 1, len(shape)):])
    affine = [normal(r, *ns, dtype=dt) for _ in range(draw(r, 0, 3 if kind == "layer" else 2))]
    eps = pick(r, [None, 1e-6, 0.1]) if kind == "rms" else pick(r, [1e-5, 0.1])
    info = dict(kind=kind, lay=lay, shape=shape, wb=len(wb), training=training, rs=rs, mom=mom, g=g, ns=ns,
                affine=len(affine), eps=eps)

    def fn(lib, x, *w):
        F, x = lib.nn.functional, _relayout(lib, x, lay)
        m, v = (lib.tensor(rm), lib.tensor(rv)) if rs else (None, None)
        if kind == "batch":
            y = F.batch_norm(x, m, v, *(w or (None, None)), training=training, momentum=mom)
            return (y, m, v) if rs else y
        if kind == "instance":
            y = F.instance_norm(x, m, v, *(w or (None, None)), use_input_stats=True, momentum=mom)
            return (y, m, v) if rs else y
        if kind == "group":
            return F.group_norm(x, g, *(w or (None, None)), eps=eps)
        if kind == "lrn":
            return F.local_response_norm(x, sz, alpha=0.3, beta=0.75, k=2.0)
        if kind == "layer":
            return F.layer_norm(x, ns, *w, eps=eps)
        return F.rms_norm(x, ns, *w, eps=eps)
    return fn, [x] + (affine if kind in ("layer", "rms") else wb if kind not in ("lrn",) else []), info


CASES = [conv, pool, resample, norm]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("block", range(2))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_random_spatial_calls_match_torch(case, block):
    for seed in range(block * 15, block * 15 + 15):
        check(torch, case, seed, compiled=False, tol=2e-4)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_random_compiled_spatial_calls_match_torch(case):
    for seed in range(4):
        check(torch, case, seed, compiled=True, tol=2e-4)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("pad", [(2, -1), (-1, 1), (1, -2), (-2, 1, 1, -1), (-1, -1, 0, 2)])
def test_circular_pad_wraps_what_a_negative_amount_keeps(pad, compiled):
    # PyTorch crops first, then wraps the cropped tensor ((2, -1) of 0..4: 2 3 0 1 2 3)
    x = np.arange(20.0).reshape((1, 4, 5) if len(pad) == 2 else (1, 1, 4, 5))
    want = torch.nn.functional.pad(torch.tensor(x), pad, mode="circular")
    f = lambda t: tj.nn.functional.pad(t, pad, mode="circular")   # noqa: E731
    got = (tj.compile(f) if compiled else f)(tj.tensor(x))
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pad", [((2, 3, 5, 4), (1, 2)), ((2, 3, 4), (1, 1, 1, 1, 1, 1)),
                                       ((1, 2, 3, 4, 4), (1, 0, 1, 2))])
def test_non_constant_pad_of_a_dim_count_pytorch_refuses_raises(mode, shape, pad):
    torch = pytest.importorskip("torch")
    x = np.ones(shape, np.float32)
    for m in (torch, tj):
        with pytest.raises(NotImplementedError):
            m.nn.functional.pad(m.tensor(x), pad, mode=mode)


def test_constant_pad_cropping_past_the_dim_raises_as_pytorch():
    torch = pytest.importorskip("torch")
    for pad in [(-2, -2), (1, -4)]:
        for m in (torch, tj):
            with pytest.raises(RuntimeError):
                m.nn.functional.pad(m.ones(2, 3), pad)
    assert tuple(tj.nn.functional.pad(tj.ones(2, 3), (-2, -1)).shape) == (2, 0)
