"""The connectionist temporal classification loss as one primitive per direction.

``ctc_nll(log_probs, targets, target_lengths, input_lengths)`` is each sequence's negative
log-likelihood of its labels, by the forward (alpha) recursion over the extended label
sequence (a blank before, between and after the labels, laid out from the targets inside
the primitive, so a compiled function holds the loss as one host call); ``ctc_grad`` its
gradient with respect to `log_probs`, by the backward (beta) recursion. Both run in
float64 with numpy, in probabilities scaled per time step, vectorized over the batch, a
Python loop over time (some ten numpy calls a step).

Why: written with tracejit ops, the recursion is some ten op calls per time step forward
and as many autograd nodes backward (100 steps of a batch of 8: ~100x PyTorch's time).

The gradient is PyTorch's: ``exp(log_probs) - posterior`` on each sequence's own time
steps (the gradient for logits behind a ``log_softmax``, which cancels the first term),
times the output gradient; where the labels cannot be emitted in the time given (an
infinite loss), ``zero_infinity`` makes it 0 and otherwise it is nan, as in PyTorch.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from .registry import Aval, defprim
from .eager import bind

__all__ = ["ctc_nll", "ctc_grad"]

_TINY = 1e-300   # a normalizer floor: a sequence whose states all reach 0 stays at 0


def _extend(lp, targets, lengths, in_len, blank):
    """(ext, skip): the extended labels (N, S) (blank, l1, blank, l2, ..., blank, then
    blanks) of padded (N, L) or concatenated (sum(lengths),) `targets`, and where state s
    may be reached from s - 2 (a label unlike the one before it)."""
    t_max, n, c = lp.shape
    tg = targets.astype(np.int64)
    if tg.ndim == 1:   # concatenated targets
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        labels = [tg[offsets[b]:offsets[b + 1]] for b in range(n)]
    else:
        labels = [tg[b, :lengths[b]] for b in range(n)]
    if in_len.size and in_len.max() > t_max:
        raise ShapeError(f"ctc_loss: input_lengths must be at most the {t_max} time steps of "
                         f"log_probs, got {in_len.max()}")
    ext = np.full((n, 2 * max([len(lab) for lab in labels] + [0]) + 1), blank, dtype=np.int64)
    skip = np.zeros(ext.shape, dtype=bool)
    for b, lab in enumerate(labels):
        ext[b, 1:2 * len(lab):2] = lab
        skip[b, 3:2 * len(lab):2] = lab[1:] != lab[:-1]
    if ext.size and (ext.min() < 0 or ext.max() >= c):
        raise ShapeError(f"ctc_loss: target labels must be in [0, {c}), got {int(ext.min())}..{int(ext.max())}")
    return ext, skip


def _setup(lp, targets, lengths, in_len, blank):
    """(emission probabilities at the extended labels (T, N, S) float64, 0 at the states
    past a sequence's own, batch indices, the extended labels, where skips are allowed)."""
    ext, skip = _extend(lp, targets, lengths, in_len, blank)
    n = ext.shape[0]
    rows = np.arange(n)[:, None]
    y = np.exp(lp[:, rows, ext].astype(np.float64))
    y *= np.arange(ext.shape[1])[None, :] < (2 * lengths[:, None] + 1)
    return y, rows, ext, skip


def _alpha(y, skip):
    """(alpha (T, N, S), c (T, N)): the probability of the label prefix ending in state s at
    time t, each time step's row normalized to sum 1 (Rabiner's scaling, so a long sequence
    never underflows), and the normalizers (their logs add up to the log-likelihood)."""
    t_max, n, s = y.shape
    alpha = np.zeros((t_max, n, s))
    c = np.ones((t_max, n))
    if t_max == 0:
        return alpha, c
    buf = np.zeros((n, s + 2))   # two leading zeros: the states before the first
    buf[:, 2:4] = y[0, :, :2]
    skipf = skip.astype(np.float64)
    for t in range(t_max):
        if t:
            a = buf[:, 2:] + buf[:, 1:-1]
            a += buf[:, :-2] * skipf
            a *= y[t]
            buf[:, 2:] = a
        a = buf[:, 2:]
        ct = a.sum(1)
        np.maximum(ct, _TINY, out=ct)
        a /= ct[:, None]
        alpha[t] = a
        c[t] = ct
    return alpha, c


def _nll(alpha, c, lengths, in_len):
    n = alpha.shape[1]
    out = np.empty(n)
    with np.errstate(divide="ignore"):
        logc = np.log(c)
        for b in range(n):
            last, steps = 2 * int(lengths[b]), int(in_len[b])
            if steps == 0:
                out[b] = 0.0 if last == 0 else np.inf
                continue
            a = alpha[steps - 1, b]
            end = a[last] + (a[last - 1] if last > 0 else 0.0)
            out[b] = -(logc[:steps, b].sum() + np.log(end))
    return out


def _nll_impl(xp, lp, targets, lengths, in_len, *, blank=0, zero_infinity=False):
    y, _, _, skip = _setup(lp, targets, lengths, in_len, blank)
    alpha, c = _alpha(y, skip)
    return _nll(alpha, c, lengths, in_len).astype(lp.dtype)


def _nll_rule(lp: Aval, targets: Aval, lengths: Aval, in_len: Aval, *, blank=0, zero_infinity=False):
    if len(lp.shape) != 3:
        raise ShapeError(f"ctc_loss: log_probs must be (T, N, C), got {tuple(lp.shape)}")
    return Aval((lp.shape[1],), lp.dtype, lp.device)


def _nll_vjp(g, out, lp, targets, lengths, in_len, *, blank=0, zero_infinity=False):
    return ctc_grad(g, lp, targets, lengths, in_len, out, blank, zero_infinity), None, None, None


def _grad_impl(xp, g, lp, targets, lengths, in_len, nll, *, blank=0, zero_infinity=False):
    y, rows, ext, skip = _setup(lp, targets, lengths, in_len, blank)
    t_max, n, s = y.shape
    alpha, _ = _alpha(y, skip)
    # beta: the probability of the rest of the labels from state s at time t (emission at t
    # included), row-normalized per step like alpha; 0 past a sequence's last step
    beta = np.zeros((t_max, n, s))
    buf = np.zeros((n, s + 2))
    skip_from = np.zeros((n, s))          # s -> s + 2 allowed where `skip` allows it at s + 2
    skip_from[:, :-2] = skip[:, 2:]
    last = 2 * lengths.astype(np.int64)
    starts: dict = {}                     # time step -> the sequences whose last step it is
    for i, e in enumerate(in_len.astype(np.int64) - 1):
        starts.setdefault(int(e), []).append(i)
    for t in range(t_max - 1, -1, -1):
        b = buf[:, :s] + buf[:, 1:s + 1]
        b += buf[:, 2:] * skip_from
        b *= y[t]
        if t in starts:                    # these sequences start here
            idx = np.array(starts[t])
            b[idx] = 0.0
            b[idx, last[idx]] = y[t, idx, last[idx]]
            ok = idx[last[idx] > 0]
            b[ok, last[ok] - 1] = y[t, ok, last[ok] - 1]
        total = b.sum(1)
        np.maximum(total, _TINY, out=total)
        b /= total[:, None]
        buf[:, :s] = b
        beta[t] = b
    # each path passes through one state at time t: alpha * beta / y summed over the states
    # is the same for every t (the likelihood, up to the scalings), so its normalization
    # per (t, sequence) is the posterior of each state
    with np.errstate(divide="ignore", invalid="ignore"):
        post = alpha * beta / np.where(y > 0, y, 1.0)
        post /= post.sum(2, keepdims=True)
    c = lp.shape[2]
    gamma = np.zeros((t_max, n, c))
    np.add.at(gamma, (slice(None), np.broadcast_to(rows, ext.shape), ext), post)
    steps = (np.arange(t_max)[:, None] < in_len[None, :])[:, :, None]
    grad = np.where(steps, np.exp(lp.astype(np.float64)) - gamma, 0.0)
    infinite = ~np.isfinite(nll.astype(np.float64))
    if infinite.any():   # no path: PyTorch's gradient is nan on its steps, or 0 with zero_infinity
        grad[:, infinite] = 0.0 if zero_infinity else np.where(steps[:, infinite], np.nan, 0.0)
    grad *= g.astype(np.float64)[None, :, None]
    return grad.astype(lp.dtype)


CTC_NLL = defprim("ctc_nll", _nll_impl, _nll_rule, _nll_vjp, kind="other", host=True,
                  save=lambda rq: (0, 1, 2, 3), save_out=True, nondiff=(1, 2, 3),
                  grad_name="CtcLossBackward0")
CTC_GRAD = defprim("ctc_grad", _grad_impl,
                   lambda g, lp, *rest, **params: Aval(lp.shape, lp.dtype, lp.device), None,
                   kind="other", host=True)


def ctc_nll(lp, targets, lengths, in_len, blank: int = 0, zero_infinity: bool = False):
    """Per-sequence negative log-likelihood (N,) of log_probs `lp` (T, N, C) for `targets`,
    padded (N, L) or concatenated, label counts `lengths` (N,) and input lengths `in_len`
    (N,); `zero_infinity` is the gradient's (0 for a sequence whose loss is infinite)."""
    return bind(CTC_NLL, lp, targets, lengths, in_len, blank=int(blank), zero_infinity=bool(zero_infinity))


def ctc_grad(g, lp, targets, lengths, in_len, nll, blank: int = 0, zero_infinity: bool = False):
    """The gradient of ``ctc_nll`` with respect to `lp` for output gradient `g` (N,)."""
    return bind(CTC_GRAD, g, lp, targets, lengths, in_len, nll, blank=int(blank),
                zero_infinity=bool(zero_infinity))
