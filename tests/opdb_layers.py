"""Op-database records for the layer functionals: activations, normalization, losses/distances.

Loaded by tests/opdb.py; each record drives forward-vs-numpy, finite-difference gradients,
the PyTorch comparison and traced/compiled runs.
"""
from __future__ import annotations

import functools

import numpy as np

from opdb import FLOATS, F, Sample, arr, away, pos, register

_SELU = (1.6732632423543772, 1.0507009873554805)


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "batchmean":
        return loss.sum() / loss.shape[0]
    return loss


def _fn(name):
    def f(m, *ts, **kw):
        return getattr(F(m), name)(*ts, **kw)
    f.__name__ = name
    return f


def _unary(shapes=((3, 4), (), (2, 1, 3), (0, 3)), **kw):
    def samples(dtype, rng):
        return [Sample((away(rng, s, dtype),), dict(kw), desc=str(s)) for s in shapes]
    return samples


# ---------------------------------------------------------------- activations
def _elu_ref(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


for _name, _ref, _kw in [
    ("elu", _elu_ref, {}),
    ("elu.alpha", _elu_ref, {"alpha": 0.5}),
    ("selu", lambda x: _SELU[1] * _elu_ref(x, _SELU[0]), {}),
    ("celu", lambda x, alpha=1.0: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0) / alpha)),
     {"alpha": 2.0}),
    ("mish", lambda x: x * np.tanh(np.log1p(np.exp(x))), {}),
    ("hardtanh", lambda x, min_val=-1.0, max_val=1.0: np.clip(x, min_val, max_val),
     {"min_val": -0.5, "max_val": 1.5}),
    ("relu6", lambda x: np.clip(x * 4, 0, 6) / 4, {}),
    ("hardsigmoid", lambda x: np.clip(x * 2 / 6 + 0.5, 0, 1), {}),
    ("hardswish", lambda x: x * 2 * np.clip(x * 2 / 6 + 0.5, 0, 1), {}),
]:
    _base = _name.split(".")[0]
    if _base == "relu6":  # spread values over both kinks (0 and 6) without touching them
        _f = lambda m, x, _b=_base, **kw: getattr(F(m), _b)(x * 4, **kw) / 4  # noqa: E731
    elif _base in ("hardsigmoid", "hardswish"):  # kinks at +-3
        _f = lambda m, x, _b=_base, **kw: getattr(F(m), _b)(x * 2, **kw)  # noqa: E731
    else:
        _f = functools.partial(lambda m, x, _b, **kw: getattr(F(m), _b)(x, **kw), _b=_base)
    register(_name, _f, _ref, _unary(**_kw), dtypes=FLOATS)


def _prelu_ref(x, w):
    wv = w.reshape((-1,) + (1,) * (x.ndim - 2)) if x.ndim >= 2 and w.size > 1 else w
    return np.where(x > 0, x, wv * x)


def _prelu_samples(dtype, rng):
    return [Sample((away(rng, (2, 3, 4), dtype), arr(rng, (3,), dtype, 0.1, 0.5)), desc="per channel"),
            Sample((away(rng, (5,), dtype), arr(rng, (1,), dtype, 0.1, 0.5)), desc="shared"),
            Sample((away(rng, (4, 3), dtype), arr(rng, (1,), dtype, 0.1, 0.5)), desc="2-D shared")]


register("prelu", _fn("prelu"), _prelu_ref, _prelu_samples)


# ---------------------------------------------------------------- normalization
def _np_bn(x, rm, rv, w, b, training=False, momentum=0.1, eps=1e-5):
    dims = (0,) + tuple(range(2, x.ndim))
    view = (1, -1) + (1,) * (x.ndim - 2)
    if training:
        mu, var = x.mean(dims, keepdims=True), x.var(dims, keepdims=True)
    else:
        mu, var = rm.reshape(view), rv.reshape(view)
    return (x - mu) / np.sqrt(var + eps) * w.reshape(view) + b.reshape(view)


def _bn_samples(dtype, rng):
    out = []
    for shape in ((4, 3), (2, 3, 5), (2, 3, 2, 2)):
        for training in (False, True):
            ins = (arr(rng, shape, dtype), arr(rng, (3,), dtype), pos(rng, (3,), dtype),
                   pos(rng, (3,), dtype), arr(rng, (3,), dtype))
            out.append(Sample(ins, {"training": training}, grad=(0, 3, 4),
                              desc=f"{shape} training={training}"))
    return out


register("batch_norm", _fn("batch_norm"), _np_bn, _bn_samples)


def _np_gn(x, w, b, num_groups, eps=1e-5):
    g = x.reshape(x.shape[0], num_groups, -1)
    y = ((g - g.mean(2, keepdims=True)) / np.sqrt(g.var(2, keepdims=True) + eps)).reshape(x.shape)
    view = (1, -1) + (1,) * (x.ndim - 2)
    return y * w.reshape(view) + b.reshape(view)


def _gn_samples(dtype, rng):
    return [Sample((arr(rng, s, dtype), pos(rng, (6,), dtype), arr(rng, (6,), dtype)), {"num_groups": g},
                   desc=f"{s} groups={g}") for s, g in (((2, 6, 4), 3), ((3, 6), 2), ((1, 6, 2, 2), 1))]


register("group_norm", lambda m, x, w, b, num_groups: F(m).group_norm(x, num_groups, w, b), _np_gn,
         _gn_samples)


def _np_in(x, w, b, eps=1e-5):
    dims = tuple(range(2, x.ndim))
    view = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - x.mean(dims, keepdims=True)) / np.sqrt(x.var(dims, keepdims=True) + eps)
    return y * w.reshape(view) + b.reshape(view)


def _in_samples(dtype, rng):
    return [Sample((arr(rng, s, dtype), pos(rng, (3,), dtype), arr(rng, (3,), dtype)), desc=str(s))
            for s in ((2, 3, 5), (2, 3, 2, 3))]


register("instance_norm", lambda m, x, w, b: F(m).instance_norm(x, weight=w, bias=b), _np_in, _in_samples)


# ---------------------------------------------------------------- losses and distances
def _pair_samples(options, shapes=((4, 3), (5,)), offset=0.0):
    def samples(dtype, rng):
        return [Sample((arr(rng, s, dtype), arr(rng, s, dtype) + offset), dict(kw), desc=f"{s} {kw}")
                for s in shapes for kw in options]
    return samples


def _np_smooth_l1(a, b, reduction="mean", beta=1.0):
    d = np.abs(a - b)
    loss = d if beta == 0 else np.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)
    return _reduce(loss, reduction)


def _np_huber(a, b, reduction="mean", delta=1.0):
    d = np.abs(a - b)
    return _reduce(np.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


register("smooth_l1_loss", _fn("smooth_l1_loss"), _np_smooth_l1,
         _pair_samples([{"reduction": "mean"}, {"reduction": "sum", "beta": 0.5},
                        {"reduction": "none", "beta": 2.0}]))
register("smooth_l1_loss.l1", _fn("smooth_l1_loss"), _np_smooth_l1,
         _pair_samples([{"beta": 0.0}], offset=5.0))
register("huber_loss", _fn("huber_loss"), _np_huber,
         _pair_samples([{"reduction": "mean"}, {"reduction": "none", "delta": 0.5},
                        {"reduction": "sum", "delta": 2.0}]))


def _np_kl(x, t, reduction="mean", log_target=False):
    if log_target:
        loss = np.exp(t) * (t - x)
    else:
        loss = np.where(t > 0, t * np.log(np.where(t > 0, t, 1)), 0) - t * x
    return _reduce(loss, reduction)


def _kl_samples(dtype, rng):
    out = []
    for red in ("batchmean", "sum", "none"):
        x = np.log(rng.dirichlet(np.ones(5), 3)).astype(dtype.np)
        t = rng.dirichlet(np.ones(5), 3).astype(dtype.np)
        out.append(Sample((x, t), {"reduction": red}, desc=red))
        out.append(Sample((x, np.log(t)), {"reduction": red, "log_target": True}, desc=red + " log_target"))
    t0 = rng.dirichlet(np.ones(4), 2).astype(dtype.np)
    t0[0, 1] = 0.0  # a zero target probability contributes 0 (not nan)
    out.append(Sample((np.log(rng.dirichlet(np.ones(4), 2)).astype(dtype.np), t0), {"reduction": "sum"},
                      grad=(0,), desc="zero target"))
    return out


register("kl_div", _fn("kl_div"), _np_kl, _kl_samples)


def _np_cos(a, b, dim=1, eps=1e-8):
    na = np.maximum(np.sqrt((a * a).sum(dim, keepdims=True)), eps)
    nb = np.maximum(np.sqrt((b * b).sum(dim, keepdims=True)), eps)
    return ((a / na) * (b / nb)).sum(dim)


def _cos_samples(dtype, rng):
    return [Sample((away(rng, (4, 3), dtype), away(rng, (4, 3), dtype)), desc="dim 1"),
            Sample((away(rng, (2, 3, 4), dtype), away(rng, (3, 4), dtype)), {"dim": -1}, desc="broadcast"),
            Sample((away(rng, (5, 2), dtype), away(rng, (5, 2), dtype)), {"dim": 0}, desc="dim 0")]


register("cosine_similarity", _fn("cosine_similarity"), _np_cos, _cos_samples)


def _np_pdist(a, b, p=2.0, eps=1e-6, keepdim=False):
    return (np.abs(a - b + eps) ** p).sum(-1, keepdims=keepdim) ** (1.0 / p)


register("pairwise_distance", _fn("pairwise_distance"), _np_pdist,
         _pair_samples([{}, {"p": 1.0}, {"p": 3.0, "keepdim": True}]))


def _signs(rng, shape, dtype):
    return np.where(rng.random(shape) > 0.5, 1.0, -1.0).astype(dtype.np)


def _np_margin_ranking(a, b, y, margin=0.0, reduction="mean"):
    return _reduce(np.maximum(0, -y * (a - b) + margin), reduction)


def _margin_samples(dtype, rng):
    return [Sample((away(rng, (6,), dtype), away(rng, (6,), dtype), _signs(rng, (6,), dtype)),
                   {"margin": m, "reduction": r}, grad=(0, 1), desc=f"{m} {r}")
            for m, r in ((0.0, "mean"), (0.3, "sum"), (0.1, "none"))]


register("margin_ranking_loss", _fn("margin_ranking_loss"), _np_margin_ranking, _margin_samples)


def _np_triplet(a, p_, n, margin=1.0, p=2, eps=1e-6, swap=False, reduction="mean"):
    d_ap, d_an = _np_pdist(a, p_, p, eps), _np_pdist(a, n, p, eps)
    if swap:
        d_an = np.minimum(d_an, _np_pdist(p_, n, p, eps))
    return _reduce(np.maximum(d_ap - d_an + margin, 0), reduction)


def _triplet_samples(dtype, rng):
    mk = lambda s: arr(rng, s, dtype)  # noqa: E731
    return [Sample((mk((5, 3)), mk((5, 3)), mk((5, 3))), {"margin": 1.0}, desc="default"),
            Sample((mk((5, 3)), mk((5, 3)), mk((5, 3))), {"margin": 0.5, "swap": True, "reduction": "sum"},
                   desc="swap"),
            Sample((mk((4,)), mk((4,)), mk((4,))), {"p": 1, "reduction": "none", "margin": 2.0}, desc="1-D p=1")]


register("triplet_margin_loss", _fn("triplet_margin_loss"), _np_triplet, _triplet_samples)


def _np_hinge(x, y, margin=1.0, reduction="mean"):
    return _reduce(np.where(y != 1, np.maximum(0, margin - x), 0) + np.where(y != -1, x, 0), reduction)


def _hinge_samples(dtype, rng):
    return [Sample((away(rng, (4, 3), dtype), _signs(rng, (4, 3), dtype)), {"margin": m, "reduction": r},
                   grad=(0,), desc=f"{m} {r}") for m, r in ((1.0, "mean"), (0.5, "none"))]


register("hinge_embedding_loss", _fn("hinge_embedding_loss"), _np_hinge, _hinge_samples)


def _np_cos_emb(a, b, y, margin=0.0, reduction="mean"):
    dim = a.ndim - 1
    cos = (a * b).sum(dim) / np.sqrt(((a * a).sum(dim) + 1e-12) * ((b * b).sum(dim) + 1e-12))
    return _reduce(np.where(y == 1, 1 - cos, 0) + np.where(y == -1, np.maximum(0, cos - margin), 0), reduction)


def _cos_emb_samples(dtype, rng):
    return [Sample((away(rng, (5, 3), dtype), away(rng, (5, 3), dtype), _signs(rng, (5,), dtype)),
                   {"margin": m, "reduction": r}, grad=(0, 1), desc=f"{m} {r}")
            for m, r in ((0.0, "mean"), (-0.5, "none"))]


register("cosine_embedding_loss", _fn("cosine_embedding_loss"), _np_cos_emb, _cos_emb_samples)
