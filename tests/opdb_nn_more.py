"""Op records for the newer nn.functional ops: 1-D/3-D pooling (pooling_nd.py), conv3d and
the transposed 1-D/3-D convolutions (conv_nd.py), activations and dropouts
(activation_more.py), losses (losses_more.py), normalizations (normalization_more.py) and
embedding_bag. The references loop over windows, taps or elements in numpy."""
from __future__ import annotations

import itertools
import math

import numpy as np

from opdb import F, Sample, arr, distinct, pos, register


def NF(m):
    import tracejit as tj
    return tj.nn.functional if m is tj else m.nn.functional


def _s(*arrays, grad=None, **kw):
    return Sample(tuple(arrays), kw, grad=grad)


# ---------------------------------------------------------------- pooling
def _np_pool(x, k, s, p, reduce, pad_value):
    """Windows of size k, stride s, zero/-inf padding p over the trailing len(k) dims."""
    n = len(k)
    widths = [(0, 0)] * (x.ndim - n) + [(q, q) for q in p]
    xp = np.pad(x, widths, constant_values=pad_value)
    spatial = xp.shape[-n:]
    outs = [(spatial[a] - k[a]) // s[a] + 1 for a in range(n)]
    out = np.empty(x.shape[:-n] + tuple(outs))
    for o in itertools.product(*[range(v) for v in outs]):
        sl = tuple(slice(o[a] * s[a], o[a] * s[a] + k[a]) for a in range(n))
        out[(Ellipsis,) + o] = reduce(xp[(Ellipsis,) + sl], axis=tuple(range(-n, 0)))
    return out


register("max_pool1d", lambda m, x: NF(m).max_pool1d(x, 3, 2, 1), lambda x: _np_pool(x, (3,), (2,), (1,), np.max, -np.inf),
         lambda d, r: [_s(distinct(r, (2, 3, 9), d))])
register("max_pool3d", lambda m, x: NF(m).max_pool3d(x, 2, 2, 1), lambda x: _np_pool(x, (2,) * 3, (2,) * 3, (1,) * 3, np.max, -np.inf),
         lambda d, r: [_s(distinct(r, (1, 2, 4, 5, 3), d))])
register("avg_pool1d", lambda m, x: NF(m).avg_pool1d(x, 3, 2, 1), lambda x: _np_pool(x, (3,), (2,), (1,), np.mean, 0.0),
         lambda d, r: [_s(arr(r, (2, 3, 9), d))])
register("avg_pool3d", lambda m, x: NF(m).avg_pool3d(x, 2), lambda x: _np_pool(x, (2,) * 3, (2,) * 3, (0,) * 3, np.mean, 0.0),
         lambda d, r: [_s(arr(r, (1, 2, 4, 4, 6), d))])
register("lp_pool2d", lambda m, x: NF(m).lp_pool2d(x, 2.0, 2),
         lambda x: _np_pool(x ** 2, (2, 2), (2, 2), (0, 0), np.sum, 0.0) ** 0.5,
         lambda d, r: [_s(pos(r, (1, 2, 4, 6), d))])


def _bins(size, out):
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def _np_adaptive(x, outs, reduce):
    n = len(outs)
    out = np.empty(x.shape[:-n] + tuple(outs))
    per = [_bins(x.shape[x.ndim - n + a], outs[a]) for a in range(n)]
    for o in itertools.product(*[range(v) for v in outs]):
        sl = tuple(slice(*per[a][o[a]]) for a in range(n))
        out[(Ellipsis,) + o] = reduce(x[(Ellipsis,) + sl], axis=tuple(range(-n, 0)))
    return out


register("adaptive_avg_pool1d", lambda m, x: NF(m).adaptive_avg_pool1d(x, 4), lambda x: _np_adaptive(x, (4,), np.mean),
         lambda d, r: [_s(arr(r, (2, 3, 9), d))])
register("adaptive_avg_pool3d", lambda m, x: NF(m).adaptive_avg_pool3d(x, (2, 3, 2)),
         lambda x: _np_adaptive(x, (2, 3, 2), np.mean), lambda d, r: [_s(arr(r, (1, 2, 5, 4, 3), d))])
register("adaptive_max_pool3d", lambda m, x: NF(m).adaptive_max_pool3d(x, (2, 3, 2)),
         lambda x: _np_adaptive(x, (2, 3, 2), np.max), lambda d, r: [_s(distinct(r, (1, 2, 5, 4, 3), d))])


# ---------------------------------------------------------------- convolution
def _np_conv3d(x, w, b, stride):
    n, c, D, H, W = x.shape
    o, _, kd, kh, kw = w.shape
    od, oh, ow = (D - kd) // stride + 1, (H - kh) // stride + 1, (W - kw) // stride + 1
    out = np.zeros((n, o, od, oh, ow))
    for i, j, k in itertools.product(range(kd), range(kh), range(kw)):
        patch = x[:, :, i:i + stride * (od - 1) + 1:stride, j:j + stride * (oh - 1) + 1:stride,
                  k:k + stride * (ow - 1) + 1:stride]
        out += np.einsum("ncdhw,oc->nodhw", patch, w[:, :, i, j, k])
    return out + b.reshape(1, -1, 1, 1, 1)


register("conv3d", lambda m, x, w, b: F(m).conv3d(x, w, b, stride=2), lambda x, w, b: _np_conv3d(x, w, b, 2),
         lambda d, r: [_s(arr(r, (2, 3, 5, 4, 5), d), arr(r, (4, 3, 2, 2, 3), d), arr(r, (4,), d))], atol=1e-4)


def _np_conv_transpose(x, w, stride):
    """Scatter of every input position times the kernel, any rank."""
    n, c = x.shape[:2]
    o, ks = w.shape[1], w.shape[2:]
    sp = x.shape[2:]
    outs = tuple((sp[a] - 1) * stride + ks[a] for a in range(len(sp)))
    out = np.zeros((n, o) + outs)
    for pos_ in itertools.product(*[range(v) for v in sp]):
        contrib = np.einsum("nc,co...->no...", x[(slice(None), slice(None)) + pos_], w)
        sl = tuple(slice(pos_[a] * stride, pos_[a] * stride + ks[a]) for a in range(len(sp)))
        out[(slice(None), slice(None)) + sl] += contrib
    return out


register("conv_transpose1d", lambda m, x, w: F(m).conv_transpose1d(x, w, stride=2),
         lambda x, w: _np_conv_transpose(x, w, 2), lambda d, r: [_s(arr(r, (2, 3, 5), d), arr(r, (3, 2, 3), d))],
         atol=1e-4)
register("conv_transpose3d", lambda m, x, w: F(m).conv_transpose3d(x, w, stride=2),
         lambda x, w: _np_conv_transpose(x, w, 2),
         lambda d, r: [_s(arr(r, (1, 2, 2, 3, 2), d), arr(r, (2, 3, 2, 2, 3), d))], atol=1e-4)

# ---------------------------------------------------------------- activations
for _name, _ref, _kw in (("glu", lambda x: x[:, :2] / (1 + np.exp(-x[:, 2:])), {"dim": 1}),
                         ("softsign", lambda x: x / (1 + np.abs(x)), {}),
                         ("tanhshrink", lambda x: x - np.tanh(x), {}),
                         ("hardshrink", lambda x: np.where(np.abs(x) > 0.5, x, 0.0), {}),
                         ("softshrink", lambda x: np.sign(x) * np.maximum(np.abs(x) - 0.5, 0), {}),
                         ("softmin", lambda x: np.exp(-x) / np.exp(-x).sum(1, keepdims=True), {"dim": 1})):
    register(_name, (lambda n, k: lambda m, x: getattr(NF(m), n)(x, **k))(_name, _kw),
             (lambda f: lambda x: f(x))(_ref),
             lambda d, r: [_s(distinct(r, (3, 4), d) * 10 + 0.07)])
register("threshold", lambda m, x: NF(m).threshold(x, 0.15, -2.0), lambda x: np.where(x > 0.15, x, -2.0),
         lambda d, r: [_s(distinct(r, (3, 4), d) * 10 + 0.07)])

# ---------------------------------------------------------------- losses
register("gaussian_nll_loss", lambda m, a, b, v: NF(m).gaussian_nll_loss(a, b, v, full=True),
         lambda a, b, v: np.mean(0.5 * (np.log(v) + (a - b) ** 2 / v) + 0.5 * math.log(2 * math.pi)),
         lambda d, r: [_s(arr(r, (3, 4), d), arr(r, (3, 4), d), pos(r, (3, 4), d))])
register("poisson_nll_loss", lambda m, a, b: NF(m).poisson_nll_loss(a, b),
         lambda a, b: np.mean(np.exp(a) - b * a), lambda d, r: [_s(arr(r, (3, 4), d), pos(r, (3, 4), d), grad=(0,))])
register("soft_margin_loss", lambda m, a, b: NF(m).soft_margin_loss(a, b),
         lambda a, b: np.mean(np.log1p(np.exp(-a * b))),
         lambda d, r: [_s(arr(r, (3, 4), d), np.sign(arr(r, (3, 4), d)) + 0.0, grad=(0,))])
register("multilabel_soft_margin_loss", lambda m, a, b: NF(m).multilabel_soft_margin_loss(a, b),
         lambda a, b: np.mean(-np.mean(b * np.log(1 / (1 + np.exp(-a))) + (1 - b) * np.log(1 / (1 + np.exp(a))), 1)),
         lambda d, r: [_s(arr(r, (3, 4), d), (arr(r, (3, 4), d) > 0).astype(d.np), grad=(0,))])


def _np_multi_margin(x, y, p=1, margin=1.0):
    out = np.zeros(len(x))
    for i in range(len(x)):
        for j in range(x.shape[1]):
            if j != y[i]:
                out[i] += max(0.0, margin - x[i, y[i]] + x[i, j]) ** p
    return np.mean(out / x.shape[1])


register("multi_margin_loss", lambda m, x, y: NF(m).multi_margin_loss(x, y, p=2, margin=0.7),
         lambda x, y: _np_multi_margin(x, y, 2, 0.7),
         lambda d, r: [_s(distinct(r, (3, 5), d), np.array([1, 0, 4]))])
register("triplet_margin_with_distance_loss", lambda m, a, p_, n: NF(m).triplet_margin_with_distance_loss(a, p_, n),
         lambda a, p_, n: np.mean(np.maximum(np.sqrt(((a - p_ + 1e-6) ** 2).sum(1)) - np.sqrt(((a - n + 1e-6) ** 2).sum(1)) + 1.0, 0)),
         lambda d, r: [_s(arr(r, (4, 3), d), arr(r, (4, 3), d), arr(r, (4, 3), d))], atol=1e-4)


def _np_ctc(lp, targets, in_len, tg_len, blank=0):
    total = 0.0
    for b in range(lp.shape[1]):
        lab = list(targets[b, :tg_len[b]])
        ext = [blank]
        for c in lab:
            ext += [c, blank]
        S, T = len(ext), in_len[b]
        alpha = np.full(S, -np.inf)
        alpha[0] = lp[0, b, ext[0]]
        if S > 1:
            alpha[1] = lp[0, b, ext[1]]
        for t in range(1, T):
            new = np.full(S, -np.inf)
            for s in range(S):
                terms = [alpha[s]] + ([alpha[s - 1]] if s >= 1 else [])
                if s >= 2 and ext[s] != blank and ext[s] != ext[s - 2]:
                    terms.append(alpha[s - 2])
                new[s] = np.logaddexp.reduce(terms) + lp[t, b, ext[s]]
            alpha = new
        nll = -np.logaddexp(alpha[-1], alpha[-2]) if S > 1 else -alpha[-1]
        total += nll / max(tg_len[b], 1)
    return total / lp.shape[1]


def _ctc_samples(d, r):
    # PyTorch's gradient of ctc_loss with respect to log_probs adds exp(log_probs) to the
    # derivative (the logits' gradient behind a log_softmax), so it is not the finite
    # difference of the value: the gradient is compared with PyTorch's only.
    lp = arr(r, (6, 2, 4), d)
    lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
    s = _s(lp, targets=np.array([[1, 2, 2], [3, 1, 0]]), in_len=[6, 5], tg_len=[3, 2])
    s.check_fd, s.gradgrad = False, False
    return [s]


register("ctc_loss", lambda m, lp, targets, in_len, tg_len: NF(m).ctc_loss(lp, m.tensor(targets), in_len, tg_len),
         lambda lp, targets, in_len, tg_len: _np_ctc(lp, targets, in_len, tg_len), _ctc_samples, atol=1e-4)

# ---------------------------------------------------------------- normalization
register("rms_norm", lambda m, x, w: NF(m).rms_norm(x, (4,), w, 1e-6),
         lambda x, w: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w,
         lambda d, r: [_s(arr(r, (3, 4), d), arr(r, (4,), d))])
register("normalize", lambda m, x: NF(m).normalize(x, dim=1),
         lambda x: x / np.maximum(np.sqrt((x * x).sum(1, keepdims=True)), 1e-12),
         lambda d, r: [_s(arr(r, (3, 4), d))])


def _np_lrn(x, size, alpha=1e-4, beta=0.75, k=1.0):
    c = x.shape[1]
    sq = x * x
    div = np.zeros_like(x)
    for i in range(c):
        lo, hi = max(0, i - size // 2), min(c, i + (size - 1) // 2 + 1)
        div[:, i] = sq[:, lo:hi].sum(1)
    return x / (k + alpha / size * div) ** beta


register("local_response_norm", lambda m, x: NF(m).local_response_norm(x, 3, 0.1, 0.75, 1.0),
         lambda x: _np_lrn(x, 3, 0.1, 0.75, 1.0), lambda d, r: [_s(arr(r, (2, 5, 3, 2), d))])

# ---------------------------------------------------------------- embedding_bag
_BAG_IDX, _BAG_OFFS = np.array([1, 2, 4, 5, 4, 3, 2, 9, 0]), np.array([0, 2, 2, 5])


def _np_bag(w, mode, psw=None, pad=None, idx=_BAG_IDX, offs=_BAG_OFFS):
    """Each bag's rows (weighted by psw, padding rows left out) reduced by mode; 0 if none."""
    out = np.zeros((len(offs), w.shape[1]))
    bounds = list(offs) + [len(idx)]
    for b in range(len(offs)):
        at = [i for i in range(bounds[b], bounds[b + 1]) if idx[i] != pad]
        rows = w[idx[at]] * (1.0 if psw is None else psw[at][:, None])
        if len(rows):
            out[b] = {"sum": rows.sum(0), "mean": rows.mean(0), "max": rows.max(0)}[mode]
    return out


def _bag_fn(mode, **kw):
    def f(m, w, *psw):
        return NF(m).embedding_bag(m.tensor(_BAG_IDX, device=w.device), w, m.tensor(_BAG_OFFS, device=w.device),
                                   mode=mode, per_sample_weights=psw[0] if psw else None, **kw)
    return f


for _mode in ("sum", "mean", "max"):
    register(f"embedding_bag.{_mode}", _bag_fn(_mode), (lambda md: lambda w: _np_bag(w, md))(_mode),
             lambda d, r: [_s(distinct(r, (10, 3), d))])
    # (a padding row, 4, twice in one bag)
    register(f"embedding_bag.{_mode}_padding", _bag_fn(_mode, padding_idx=4),
             (lambda md: lambda w: _np_bag(w, md, pad=4))(_mode), lambda d, r: [_s(distinct(r, (10, 3), d))])
register("embedding_bag.per_sample_weights", _bag_fn("sum"), lambda w, p: _np_bag(w, "sum", p),
         lambda d, r: [_s(distinct(r, (10, 3), d), arr(r, (9,), d))])
register("embedding_bag.per_sample_weights_padding", _bag_fn("sum", padding_idx=2),
         lambda w, p: _np_bag(w, "sum", p, pad=2), lambda d, r: [_s(distinct(r, (10, 3), d), arr(r, (9,), d))])
register("embedding_bag.rows_2d", lambda m, w: NF(m).embedding_bag(m.tensor(_BAG_IDX.reshape(3, 3), device=w.device),
                                                                  w, mode="max"),
         lambda w: _np_bag(w, "max", offs=[0, 3, 6]), lambda d, r: [_s(distinct(r, (10, 3), d))])
register("embedding_bag.include_last_offset",
         lambda m, w: NF(m).embedding_bag(m.tensor(_BAG_IDX, device=w.device), w,
                                          m.tensor([0, 2, 2, 5, 9], device=w.device), mode="mean",
                                          include_last_offset=True),
         lambda w: _np_bag(w, "mean"), lambda d, r: [_s(distinct(r, (10, 3), d))])
