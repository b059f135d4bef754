"""Differential fuzzing of the losses against PyTorch (the harness: tests/fn_fuzz.py), eagerly
and through ``tj.compile``, float32 and float64, values and input gradients:
cross_entropy (class indices and class probabilities, weight, ignore_index, label
smoothing, (N, C, d...) and unbatched inputs, batches with every target ignored), nll_loss
(weights of 0, 4-D inputs), binary cross entropy with and without logits (weight,
pos_weight, saturated logits), kl_div (log_target, batchmean), huber / smooth_l1 (beta 0),
poisson and gaussian nll (full, eps, variances of fewer dims), the margin losses and
ctc_loss (blank, zero_infinity, concatenated and unbatched targets)."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from fn_fuzz import check, draw, normal, pick

torch = pytest.importorskip("torch")

RED = ["none", "mean", "sum"]


def _dtype(r):
    return pick(r, ["float32", "float64"])


def class_index(r):
    c, n, extra = draw(r, 1, 5), draw(r, 1, 4), [draw(r, 1, 4) for _ in range(draw(r, 0, 3))]
    unbatched = extra == [] and not r.integers(4)
    shape = ([c] if unbatched else [n, c]) + extra
    dt, red, ce = _dtype(r), pick(r, RED), bool(r.integers(2))
    w = np.abs(normal(r, c, dtype=dt)) + 0.1 if r.integers(2) else None
    if w is not None and not r.integers(4):
        w[0] = 0.0
    ign = pick(r, [-100, 0, c - 1])
    ls = pick(r, [0.0, 0.0, 0.2, 1.0]) if ce else 0.0
    probs = ce and not r.integers(3)
    if probs:
        t = np.exp(normal(r, *shape, dtype=dt))
        t = t / t.sum(axis=0 if unbatched else 1, keepdims=True)
        ign = -100
    else:
        t = r.integers(0, c, size=shape[:0 if unbatched else 1] + extra)
        if not r.integers(3):
            t[...] = ign   # (every target ignored: PyTorch's nan for a mean)
        elif t.size:
            t.flat[0] = ign

    def fn(lib, x):
        F, wt = lib.nn.functional, None if w is None else lib.tensor(w)
        if ce:
            return F.cross_entropy(x, lib.tensor(t), weight=wt, ignore_index=ign, reduction=red, label_smoothing=ls)
        return F.nll_loss(F.log_softmax(x, 1 if x.ndim > 1 else 0), lib.tensor(t), weight=wt, ignore_index=ign,
                          reduction=red)
    return fn, [normal(r, *shape, dtype=dt)], dict(ce=ce, probs=probs, shape=shape, red=red, w=w, ign=ign, ls=ls)


def binary(r):
    shape = [draw(r, 1, 4) for _ in range(draw(r, 0, 4))]
    dt, red, logits = _dtype(r), pick(r, RED), bool(r.integers(2))
    x = normal(r, *shape, dtype=dt) * pick(r, [1.0, 60.0])   # (60: saturated sigmoids)
    y = (1 / (1 + np.exp(-normal(r, *shape, dtype=dt)))).astype(dt)
    w = np.abs(normal(r, *shape[draw(r, 0, len(shape) + 1):], dtype=dt)) if r.integers(2) else None
    pw = np.abs(normal(r, *shape[len(shape) - draw(r, 0, min(len(shape), 1) + 1):], dtype=dt)) + 0.1 \
        if logits and r.integers(2) else None

    def fn(lib, x):
        F, wt = lib.nn.functional, None if w is None else lib.tensor(w)
        if logits:
            return F.binary_cross_entropy_with_logits(x, lib.tensor(y), weight=wt, reduction=red,
                                                      pos_weight=None if pw is None else lib.tensor(pw))
        return F.binary_cross_entropy(lib.sigmoid(x), lib.tensor(y), weight=wt, reduction=red)
    return fn, [x], dict(shape=shape, red=red, logits=logits, w=w is not None, pw=pw is not None)


def pointwise(r):
    name = pick(r, ["kl_div", "huber", "smooth_l1", "soft_margin", "poisson", "gaussian"])
    shape = [draw(r, 1, 4) for _ in range(draw(r, 1, 3))]
    dt, red = _dtype(r), pick(r, RED + (["batchmean"] if name == "kl_div" else []))
    x, y = normal(r, *shape, dtype=dt), normal(r, *shape, dtype=dt)
    y.flat[0] = x.flat[0] if name in ("huber", "smooth_l1") else y.flat[0]   # (a tie)
    beta, flag, eps = pick(r, [0.0, 0.5, 2.0]), bool(r.integers(2)), pick(r, [1e-6, 0.5])
    v = np.abs(normal(r, *pick(r, [shape, shape[:-1] + [1]]), dtype=dt)) * pick(r, [1.0, 1e-9])

    def fn(lib, x):
        F, t = lib.nn.functional, lib.tensor(y)
        if name == "kl_div":
            return F.kl_div(x, t if flag else t.abs(), reduction=red, log_target=flag)
        if name == "huber":
            return F.huber_loss(x, t, reduction=red, delta=beta or 1.0)
        if name == "smooth_l1":
            return F.smooth_l1_loss(x, t, reduction=red, beta=beta)
        if name == "soft_margin":
            return F.soft_margin_loss(x, lib.sign(t), reduction=red)
        if name == "poisson":
            return F.poisson_nll_loss(x if flag else x.abs(), (t * 3).abs().floor(), log_input=flag,
                                      full=beta > 0, eps=eps, reduction=red)
        return F.gaussian_nll_loss(x, t, lib.tensor(v), full=flag, eps=eps, reduction=red)
    return fn, [x], dict(name=name, shape=shape, red=red, beta=beta, flag=flag, eps=eps)


def margin(r):
    name = pick(r, ["ranking", "hinge", "multi", "multilabel", "cosine", "triplet"])
    dt, red, m = _dtype(r), pick(r, RED), pick(r, [0.0, 0.5, 2.0])
    n, c = draw(r, 1, 4), draw(r, 1, 5)
    x, x2 = normal(r, n, c, dtype=dt), normal(r, n, c, dtype=dt)
    sign = np.sign(normal(r, n, c)).astype(dt)
    t = r.integers(0, c, size=n)
    tl = r.integers(-1, c, size=(n, c))
    p = pick(r, [1, 2])
    w = np.abs(normal(r, c, dtype=dt)) if r.integers(2) else None

    def fn(lib, a, b):
        F = lib.nn.functional
        if name == "ranking":
            return F.margin_ranking_loss(a[:, 0], b[:, 0], lib.tensor(sign[:, 0]), margin=m, reduction=red)
        if name == "hinge":
            return F.hinge_embedding_loss(a, lib.tensor(sign), margin=m, reduction=red)
        if name == "multi":
            return F.multi_margin_loss(a, lib.tensor(t), p=p, margin=m, reduction=red,
                                       weight=None if w is None else lib.tensor(w))
        if name == "multilabel":
            return F.multilabel_margin_loss(a, lib.tensor(tl), reduction=red)
        if name == "cosine":
            return F.cosine_embedding_loss(a, b, lib.tensor(sign[:, 0]), margin=m * 0.4, reduction=red)
        return F.triplet_margin_loss(a, b, a.flip(0), margin=m, p=float(p), swap=bool(c % 2), reduction=red)
    return fn, [x, x2], dict(name=name, red=red, m=m, p=p, n=n, c=c, w=w is not None)


def ctc(r):
    dt, red, zero_inf = _dtype(r), pick(r, RED), bool(r.integers(2))
    t_max, c, n = draw(r, 1, 7), draw(r, 2, 5), draw(r, 1, 4)
    blank = draw(r, 0, c)
    labels = [k for k in range(c) if k != blank]
    il = r.integers(1, t_max + 1, size=n)
    s = draw(r, 1, t_max + 2)
    tl = r.integers(0, s + 1, size=n)
    concat = bool(r.integers(2))
    tg = np.array([pick(r, labels) for _ in range(int(tl.sum()) if concat else n * s)], np.int64)
    tg = tg if concat else tg.reshape(n, s)

    def fn(lib, x):
        return lib.nn.functional.ctc_loss(x.log_softmax(-1), lib.tensor(tg), lib.tensor(il), lib.tensor(tl),
                                          blank=blank, reduction=red, zero_infinity=zero_inf)
    return fn, [normal(r, t_max, n, c, dtype=dt)], dict(red=red, zero_inf=zero_inf, il=il, tl=tl, blank=blank,
                                                         concat=concat)


CASES = [class_index, binary, pointwise, margin, ctc]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_random_losses_match_torch(case):
    for seed in range(60):
        check(torch, case, seed, compiled=False)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_random_compiled_losses_match_torch(case):
    for seed in range(6):
        check(torch, case, seed, compiled=True)


@pytest.mark.parametrize("shape, target", [((3, 2, 1), (2, 1)), ((4, 3, 2), (4, 3)), ((2, 3, 2), (2, 1))])
def test_class_index_target_of_another_shape_raises(shape, target):
    # (gather reads a smaller index silently: (3, 2, 1) logits against (2, 1) targets
    # gave a number)
    x, t = np.zeros(shape), np.zeros(target, np.int64)
    for f in ("cross_entropy", "nll_loss"):
        with pytest.raises((ValueError, RuntimeError)):
            getattr(torch.nn.functional, f)(torch.tensor(x), torch.tensor(t))
        with pytest.raises(ValueError, match=r"target \(N, \.\.\.\)"):
            getattr(tj.nn.functional, f)(tj.tensor(x), tj.tensor(t))
