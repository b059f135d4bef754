"""Differential fuzzing of nn.functional against PyTorch: seeded random arguments for the
conv (padding modes through ``pad``, stride, dilation, groups), transposed conv, pooling
(ceil_mode, padding, dilation, count_include_pad, divisor_override, return_indices),
adaptive pooling, norm (batch in train and eval with running stats, layer, group,
instance, local response, normalize), activation (their parameters), loss (reduction=
variants, weights, pos_weight, log_target, margins), class-index loss (ignore_index,
weight, label smoothing, (N, C, d) input) and padding families, run eagerly and captured
(``tj.trace`` with the IR interpreter): outputs (a batch norm's running statistics too)
and the gradients of every float input. Tolerances: float32 1e-4, float64 1e-9 (values;
gradients 10x)."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _a(r, *shape):
    return r.standard_normal(shape)


def _i(r, lo, hi):
    return int(r.integers(lo, hi))


def _pick(r, options):
    return options[int(r.integers(len(options)))]


# name -> case(rng) -> (fn(lib, *tensors), [arrays, each a float input], its arguments)
CASES = {}


def case(f):
    CASES[f.__name__] = f
    return f


@case
def conv2d(r):
    cin = _pick(r, [1, 2, 4])
    groups = _pick(r, [g for g in (1, 2) if cin % g == 0])
    cout, k = groups * _i(r, 1, 3), _i(r, 1, 4)
    h, w = _i(r, k, 7), _i(r, k, 7)
    stride, dil, mode = _i(r, 1, 3), _i(r, 1, 3), _pick(r, ["zeros", "reflect", "replicate", "circular"])
    pad = _i(r, 0, min(k, h, w))
    if min(h, w) + 2 * pad - dil * (k - 1) - 1 < 0:
        dil = 1
    ins = [_a(r, _i(r, 1, 3), cin, h, w), _a(r, cout, cin // groups, k, k)] + ([_a(r, cout)] if r.integers(2) else [])

    def fn(lib, x, wt, *b):
        F, p = lib.nn.functional, pad
        if mode != "zeros" and pad:   # (the padding modes as the Conv2d layer applies them)
            x, p = F.pad(x, (pad,) * 4, mode=mode), 0
        return F.conv2d(x, wt, b[0] if b else None, stride, p, dil, groups)
    return fn, ins, dict(mode=mode, pad=pad, stride=stride, dil=dil, groups=groups)


@case
def conv1d(r):
    cin = _pick(r, [1, 2, 4])
    groups = _pick(r, [g for g in (1, 2, 4) if cin % g == 0])
    cout, k = groups * _i(r, 1, 3), _i(r, 1, 4)
    n = _i(r, k + 2, 9)
    stride, dil, pad = _i(r, 1, 3), _i(r, 1, 3), _pick(r, ["valid", "same", 0, 1])
    stride = 1 if pad == "same" else stride
    dil = 1 if dil * (k - 1) + 1 > n else dil
    ins = [_a(r, 2, cin, n), _a(r, cout, cin // groups, k), _a(r, cout)]
    return (lambda lib, x, w, b: lib.nn.functional.conv1d(x, w, b, stride, pad, dil, groups)), ins, \
        dict(pad=pad, stride=stride, dil=dil, groups=groups)


@case
def conv_transpose2d(r):
    cin, cout, k, s = _pick(r, [1, 2]), _pick(r, [1, 3]), _i(r, 1, 4), _i(r, 1, 3)
    p, d = _i(r, 0, k), _i(r, 1, 3)
    op = _i(r, 0, s) if s > 1 else 0
    ins = [_a(r, 2, cin, 4, 3), _a(r, cin, cout, k, k), _a(r, cout)]
    return (lambda lib, x, w, b: lib.nn.functional.conv_transpose2d(x, w, b, s, p, op, 1, d)), ins, \
        dict(k=k, s=s, p=p, op=op, d=d)


@case
def max_pool2d(r):
    k, s, d = _i(r, 1, 4), _i(r, 1, 3), _i(r, 1, 3)
    p, ceil, indices = _i(r, 0, k // 2 + 1), bool(r.integers(2)), bool(r.integers(2))
    h = _i(r, d * (k - 1) + 1, 8)

    def fn(lib, x):
        out = lib.nn.functional.max_pool2d(x, k, s, p, d, ceil_mode=ceil, return_indices=indices)
        return tuple(out) if indices else out
    return fn, [_a(r, 2, 3, h, h + 1)], dict(k=k, s=s, p=p, d=d, ceil=ceil, indices=indices)


@case
def max_pool1d(r):
    k, s, d = _i(r, 1, 4), _i(r, 1, 3), _i(r, 1, 3)
    p, ceil = _i(r, 0, k // 2 + 1), bool(r.integers(2))
    n = _i(r, d * (k - 1) + 1, 9)
    return (lambda lib, x: lib.nn.functional.max_pool1d(x, k, s, p, d, ceil_mode=ceil)), [_a(r, 2, 3, n)], \
        dict(k=k, s=s, p=p, d=d, ceil=ceil)


@case
def avg_pool2d(r):
    k, s = _i(r, 1, 4), _i(r, 1, 3)
    p, ceil, include = _i(r, 0, k // 2 + 1), bool(r.integers(2)), bool(r.integers(2))
    divisor = _pick(r, [None, 2])
    h = _i(r, k, 8)
    return (lambda lib, x: lib.nn.functional.avg_pool2d(x, k, s, p, ceil, include, divisor)), \
        [_a(r, 2, 2, h, h + 2)], dict(k=k, s=s, p=p, ceil=ceil, include=include, divisor=divisor)


@case
def avg_pool1d(r):
    k, s = _i(r, 1, 4), _i(r, 1, 3)
    p, ceil, include = _i(r, 0, k // 2 + 1), bool(r.integers(2)), bool(r.integers(2))
    return (lambda lib, x: lib.nn.functional.avg_pool1d(x, k, s, p, ceil, include)), [_a(r, 2, 2, _i(r, k, 9))], \
        dict(k=k, s=s, p=p, ceil=ceil, include=include)


@case
def adaptive_pool(r):
    size = (_i(r, 1, 5), _i(r, 1, 5))
    name = _pick(r, ["adaptive_max_pool2d", "adaptive_avg_pool2d"])
    return (lambda lib, x: getattr(lib.nn.functional, name)(x, size)), [_a(r, 2, 3, _i(r, 1, 8), _i(r, 1, 8))], \
        dict(size=size, name=name)


@case
def norms(r):
    kind = _pick(r, ["batch", "layer", "group", "instance", "lrn", "normalize"])
    c, train, affine = _pick(r, [2, 4]), bool(r.integers(2)), bool(r.integers(2))
    eps, momentum = _pick(r, [1e-5, 1e-3]), _pick(r, [0.1, 0.5])
    mean, var = _a(r, c), np.abs(_a(r, c)) + 0.5

    def fn(lib, x, *wb):
        F = lib.nn.functional
        w, b = wb if affine else (None, None)
        if kind == "batch":   # (the running statistics it updates are outputs too)
            m, v = lib.tensor(mean), lib.tensor(var)
            return F.batch_norm(x, m, v, w, b, training=train, momentum=momentum, eps=eps), m, v
        if kind == "layer":
            return F.layer_norm(x, (4, 2), None if w is None else w.repeat(2).reshape(4, 2), eps=eps)
        if kind == "group":
            return F.group_norm(x, 2, w, b, eps=eps)
        if kind == "instance":
            return F.instance_norm(x, None, None, w, b, eps=eps)
        if kind == "lrn":
            return F.local_response_norm(x, 3)
        return F.normalize(x, dim=1)
    return fn, [_a(r, 3, c, 4, 2)] + ([_a(r, c), _a(r, c)] if affine else []), \
        dict(kind=kind, train=train, eps=eps, momentum=momentum, affine=affine)


def _act(r):
    """(name, call(F, x)) with the activation's parameters drawn now."""
    name = _pick(r, ["gelu", "elu", "celu", "selu", "leaky_relu", "softplus", "hardtanh", "relu6", "silu", "mish",
                     "logsigmoid", "softsign", "threshold", "hardshrink", "softshrink", "tanhshrink", "glu",
                     "hardsigmoid", "hardswish", "softmin", "log_softmax", "rrelu"])
    a, b = _pick(r, [1.0, 0.5, 2.0, 0.1]), _pick(r, [20.0, 1.0, 0.3, -0.5])
    approximate, dim = _pick(r, ["none", "tanh"]), _pick(r, [0, 1, -1])
    calls = {
        "gelu": lambda F, x: F.gelu(x, approximate=approximate), "elu": lambda F, x: F.elu(x, alpha=a),
        "celu": lambda F, x: F.celu(x, alpha=a), "leaky_relu": lambda F, x: F.leaky_relu(x, a - 0.5),
        "softplus": lambda F, x: F.softplus(x, beta=a, threshold=b), "hardtanh": lambda F, x: F.hardtanh(x, -a, a + 0.3),
        "threshold": lambda F, x: F.threshold(x, b / 10, a), "hardshrink": lambda F, x: F.hardshrink(x, a / 2),
        "softshrink": lambda F, x: F.softshrink(x, a / 2), "glu": lambda F, x: F.glu(x, dim),
        "softmin": lambda F, x: F.softmin(x, dim), "log_softmax": lambda F, x: F.log_softmax(x, dim),
        "rrelu": lambda F, x: F.rrelu(x, training=False)}
    return name, calls.get(name, lambda F, x: getattr(F, name)(x))


@case
def activation(r):
    name, call = _act(r)
    return (lambda lib, x: call(lib.nn.functional, x)), [_a(r, 4, 6) * 3], dict(name=name)


def _loss(name, reduction, beta, flag, lib, x, y, *w):
    F = lib.nn.functional
    w = w[0] if w else None
    if name in ("mse", "l1", "soft_margin"):
        t = lib.sign(y).detach() if name == "soft_margin" else y
        return getattr(F, {"mse": "mse_loss", "l1": "l1_loss"}.get(name, "soft_margin_loss"))(x, t, reduction=reduction)
    if name == "smooth_l1":
        return F.smooth_l1_loss(x, y, reduction=reduction, beta=beta)
    if name == "huber":
        return F.huber_loss(x, y, reduction=reduction, delta=beta + 0.5)
    if name == "bce":
        return F.binary_cross_entropy(x.sigmoid(), y.sigmoid(), weight=w, reduction=reduction)
    if name == "bce_logits":
        return F.binary_cross_entropy_with_logits(x, y.sigmoid(), weight=w, reduction=reduction,
                                                  pos_weight=None if w is None or not flag else w[0].abs())
    if name == "kl_div":
        return F.kl_div(x.log_softmax(1), y.log_softmax(1) if flag else y.softmax(1),
                        reduction="batchmean" if reduction == "mean" else reduction, log_target=flag)
    if name == "poisson":
        return F.poisson_nll_loss(x, y.abs(), log_input=flag, full=not flag, reduction=reduction)
    if name == "gaussian":
        return F.gaussian_nll_loss(x, y, w + 0.1 if w is not None else x.detach().abs() + 0.5, full=flag,
                                   reduction=reduction)
    if name == "margin_ranking":
        return F.margin_ranking_loss(x[:, 0], y[:, 0], lib.sign(x[:, 1]).detach(), margin=beta, reduction=reduction)
    if name == "hinge":
        return F.hinge_embedding_loss(x, lib.sign(y).detach(), margin=beta, reduction=reduction)
    if name == "multilabel_soft_margin":
        return F.multilabel_soft_margin_loss(x, (y > 0).to(x.dtype), weight=None if w is None else w[0],
                                             reduction=reduction)
    if name == "multi_margin":
        return F.multi_margin_loss(x, lib.tensor([0, 2, 1, 1]), p=1 if flag else 2, margin=beta + 0.5,
                                   reduction=reduction)
    if name == "cosine_embedding":
        return F.cosine_embedding_loss(x, y, lib.tensor([1.0, -1.0, 1.0, -1.0]).to(x.dtype), margin=beta * 0.3,
                                       reduction=reduction)
    return F.triplet_margin_loss(x, y, x.flip(0), margin=beta + 0.5, p=2.0, swap=flag, reduction=reduction)


@case
def losses(r):
    name = _pick(r, ["mse", "l1", "smooth_l1", "huber", "bce", "bce_logits", "kl_div", "poisson", "gaussian",
                     "margin_ranking", "hinge", "soft_margin", "multilabel_soft_margin", "multi_margin",
                     "cosine_embedding", "triplet"])
    reduction, beta, flag = _pick(r, ["mean", "sum", "none"]), _pick(r, [1.0, 0.5, 0.0]), bool(r.integers(2))
    weighted = bool(r.integers(2)) and name in ("bce", "bce_logits", "gaussian", "multilabel_soft_margin")
    ins = [_a(r, 4, 3), _a(r, 4, 3)] + ([np.abs(_a(r, 4, 3)) + 0.1] if weighted else [])
    return (lambda lib, *a: _loss(name, reduction, beta, flag, lib, *a)), ins, \
        dict(name=name, reduction=reduction, beta=beta, flag=flag, weighted=weighted)


@case
def class_losses(r):
    """cross_entropy / nll_loss over class indices; the logits are then written in place
    before backward(), which PyTorch allows (its gradient reads log_softmax's result)."""
    n, c, d = _i(r, 1, 6), _i(r, 1, 5), _pick(r, [0, 0, 3])
    shape = (n, c) if not d else (n, c, d)
    t = r.integers(0, c, (n,) if not d else (n, d))
    ignore = _pick(r, [-100, 0, 1])
    if r.integers(2):
        t.flat[0] = ignore
    reduction, smoothing, name = _pick(r, ["mean", "sum", "none"]), _pick(r, [0.0, 0.0, 0.1, 0.5]), _pick(r, ["ce", "nll"])
    weighted = bool(r.integers(2))

    def fn(lib, x, *w):
        F, tt = lib.nn.functional, lib.tensor(t)
        x = x * 1.0
        if name == "ce":
            out = F.cross_entropy(x, tt, weight=w[0] if w else None, ignore_index=ignore, reduction=reduction,
                                  label_smoothing=smoothing)
        else:
            out = F.nll_loss(x.log_softmax(1), tt, weight=w[0] if w else None, ignore_index=ignore,
                             reduction=reduction)
        x.mul_(2.0)
        return out
    return fn, [_a(r, *shape)] + ([np.abs(_a(r, c)) + 0.1] if weighted else []), \
        dict(shape=shape, t=t.tolist(), ignore=ignore, reduction=reduction, smoothing=smoothing, name=name,
             weighted=weighted)


@case
def pad(r):
    mode, nd = _pick(r, ["constant", "reflect", "replicate", "circular"]), _pick(r, [1, 2])
    p = tuple(int(v) for v in r.integers(-1 if mode == "constant" else 0, 3, 2 * nd))
    kw = {"value": _pick(r, [0.0, 1.5])} if mode == "constant" else {}
    return (lambda lib, x: lib.nn.functional.pad(x, p, mode=mode, **kw)), [_a(r, 2, 2, *([5] * nd))], \
        dict(mode=mode, p=p, **kw)


@case
def resampling(r):
    name = _pick(r, ["interpolate", "pixel_shuffle", "unfold", "cosine_similarity", "pairwise_distance", "embedding"])
    mode = _pick(r, ["nearest", "bilinear", "bicubic", "nearest-exact", "area"])
    flag, scale = bool(r.integers(2)), _pick(r, [2.0, 0.5, 1.5])
    corners = flag if mode in ("bilinear", "bicubic") else None

    def fn(lib, x):
        F = lib.nn.functional
        if name == "interpolate":
            return F.interpolate(x, scale_factor=scale, mode=mode, align_corners=corners)
        if name == "pixel_shuffle":
            return F.pixel_shuffle(x, 2)
        if name == "unfold":
            return F.unfold(x, (2, 3), padding=1, stride=(2, 1))
        if name == "cosine_similarity":
            return F.cosine_similarity(x, x.flip(-1), dim=1)
        if name == "pairwise_distance":
            return F.pairwise_distance(x[0, 0], x[0, 1], p=scale, keepdim=flag)
        return F.embedding(lib.tensor([[0, 2, 3], [1, 1, 0]]), x[0, 0] * 2.0, padding_idx=1 if flag else None)
    return fn, [_a(r, 1, 4, 4, 6)], dict(name=name, mode=mode, corners=corners, scale=scale, flag=flag)


def _to(lib, a, dtype):
    return lib.tensor(a.astype(dtype)).requires_grad_(True)


def _weighted(lib, outs):
    return sum((o * (lib.arange(o.numel(), dtype=o.dtype).reshape(tuple(o.shape)) % 3 - 1)).sum() for o in outs)


def _close(got, want, tol, what):
    g, w = got.detach().numpy(), want.detach().numpy()
    assert g.shape == w.shape and str(g.dtype) == str(w.dtype), (what, g.shape, w.shape, g.dtype, w.dtype)
    np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True, err_msg=what)


def _check(seed):
    r = np.random.default_rng(seed)
    name = _NAMES[int(r.integers(len(_NAMES)))]
    fn, arrays, info = CASES[name](r)
    dtype = str(r.choice(["float32", "float64"]))
    tol = 1e-4 if dtype == "float32" else 1e-9
    tx = [_to(torch, a, dtype) for a in arrays]
    try:
        want = fn(torch, *tx)
    except (RuntimeError, ValueError):
        return   # (arguments PyTorch refuses)
    want = want if isinstance(want, tuple) else (want,)
    wf = [o for o in want if o.requires_grad]
    if wf:
        _weighted(torch, wf).backward()
    for captured in (False, True):
        what = f"seed {seed} {name} {dtype} {info} captured={captured}"
        jx = [_to(tj, a, dtype) for a in arrays]
        f = tj.trace(lambda *a: fn(tj, *a), compiler="interpret") if captured else (lambda *a: fn(tj, *a))
        got = f(*jx)
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(want), what
        for k, (g, w) in enumerate(zip(got, want)):
            _close(g, w, tol, f"{what}: output {k}")
        gf = [o for o in got if o.requires_grad]
        assert len(gf) == len(wf), what
        if wf:
            _weighted(tj, gf).backward()
            for k, (a, b) in enumerate(zip(jx, tx)):
                assert (a.grad is None) == (b.grad is None), f"{what}: gradient {k}"
                if b.grad is not None:
                    _close(a.grad, b.grad, tol * 10, f"{what}: gradient {k}")


_NAMES = sorted(CASES)


@pytest.mark.parametrize("block", range(4))
def test_random_nn_functional_calls_match_torch(block):
    for seed in range(block * 60, block * 60 + 60):
        _check(seed)


def test_embedding_padding_row_of_a_computed_weight_gets_no_gradient_when_captured():
    """The padding row is taken from a detached copy also when the weight is a value of the
    captured function (its tracer does not say it requires grad)."""
    w0 = np.arange(12.0).reshape(4, 3)
    grads = []
    for lib, captured in ((torch, False), (tj, False), (tj, True)):
        w = lib.tensor(w0, requires_grad=True)

        def f(w):
            return lib.nn.functional.embedding(lib.tensor([[0, 2, 3], [1, 1, 0]]), w * 2.0, padding_idx=1)
        out = (tj.trace(f, compiler="interpret") if captured else f)(w)
        _weighted(lib, [out]).backward()
        grads.append(w.grad.numpy())
    np.testing.assert_array_equal(grads[1], grads[0])
    np.testing.assert_array_equal(grads[2], grads[0])
