"""numpy eager: the baseline every ratio is taken against.

No autograd here, so the backward passes are written out by hand, the way a careful
numpy user would (reusing forward temporaries, in-place updates). Float32 throughout:
Python-float constants are "weak" under numpy 2 and do not widen float32 arrays.
"""
from __future__ import annotations

import numpy as np

from .. import workloads as W
from .base import Runner

C, K = W.GELU_C, W.GELU_K


def gelu(x, y, z):
    a = x * y + z
    return 0.5 * a * (1 + np.tanh(C * (a + K * a ** 3)))


def _gelu_tanh(n):
    """GELU (tanh form) and its derivative, for the MLP."""
    t = np.tanh(C * (n + K * n * n * n))
    out = 0.5 * n * (1 + t)
    d = 0.5 * (1 + t) + 0.5 * n * (1 - t * t) * C * (1 + 3 * K * n * n)
    return out, d


def _layer_norm(z, g, b):
    mu = z.mean(-1, keepdims=True)
    d = z - mu
    rstd = 1.0 / np.sqrt((d * d).mean(-1, keepdims=True) + W.LN_EPS)
    xh = d * rstd
    return xh * g + b, (xh, rstd)


def _layer_norm_bwd(dy, g, saved):
    xh, rstd = saved
    dxh = dy * g
    dz = rstd * (dxh - dxh.mean(-1, keepdims=True) - xh * (dxh * xh).mean(-1, keepdims=True))
    return dz, (dy * xh).sum(0), dy.sum(0)


class NumpyRunner(Runner):
    def versions(self) -> dict:
        return {"numpy": np.__version__}

    def asarray(self, a, requires_grad=False):
        return a

    def gelu_fn(self):
        return gelu

    def overhead_fn(self):
        def f(x, y, z):
            a = x * y + z
            return np.tanh(a) * a - z
        return f

    def gelu_fwdbwd(self, xs):
        x, y, z = xs
        last = {}

        def step():
            a = x * y + z
            a2 = a * a
            t = np.tanh(C * (a + K * a2 * a))
            last["loss"] = (0.5 * a * (1 + t)).sum()
            da = 0.5 * (1 + t) + 0.5 * a * (1 - t * t) * C * (1 + 3 * K * a2)
            last["g"] = (da * y, da * x, da)
            return last["g"]

        return step, step

    def mlp2_step(self, data):
        x, y = data["x"], data["y"]
        w1, w2 = data["w1"].copy(), data["w2"].copy()
        lr = W.MLP2_LR
        last = {}

        def step():
            nonlocal w1, w2
            h = x.dot(w1)
            h_relu = np.maximum(h, 0)
            y_pred = h_relu.dot(w2)
            diff = y_pred - y
            last["loss"] = float(np.square(diff).sum())
            grad_y_pred = 2.0 * diff
            grad_w2 = h_relu.T.dot(grad_y_pred)
            grad_h = grad_y_pred.dot(w2.T)
            grad_h[h < 0] = 0
            grad_w1 = x.T.dot(grad_h)
            w1 -= lr * grad_w1
            w2 -= lr * grad_w2

        return step, lambda: last["loss"]

    def mlp_step(self, data):
        p = {k: data[k].copy() for k in W.mlp_param_names()}
        x, labels = data["x"], data["labels"]
        onehot = np.zeros((len(labels), W.MLP_SIZES[-1]), np.float32)
        onehot[np.arange(len(labels)), labels] = 1
        adam = _Adam(p, W.MLP_LR)
        last = {}

        def step():
            z1 = x @ p["w1"].T + p["b1"]
            n1, s1 = _layer_norm(z1, p["g1"], p["be1"])
            h1, d1 = _gelu_tanh(n1)
            z2 = h1 @ p["w2"].T + p["b2"]
            n2, s2 = _layer_norm(z2, p["g2"], p["be2"])
            h2, d2 = _gelu_tanh(n2)
            logits = h2 @ p["w3"].T + p["b3"]
            m = logits.max(-1, keepdims=True)
            e = np.exp(logits - m)
            s = e.sum(-1, keepdims=True)
            logp = logits - m - np.log(s)
            last["loss"] = float(-(logp * onehot).sum() / len(labels))
            g = {}
            dlogits = (e / s - onehot) / len(labels)
            g["w3"], g["b3"] = dlogits.T @ h2, dlogits.sum(0)
            dn2 = (dlogits @ p["w3"]) * d2
            dz2, g["g2"], g["be2"] = _layer_norm_bwd(dn2, p["g2"], s2)
            g["w2"], g["b2"] = dz2.T @ h1, dz2.sum(0)
            dn1 = (dz2 @ p["w2"]) * d1
            dz1, g["g1"], g["be1"] = _layer_norm_bwd(dn1, p["g1"], s1)
            g["w1"], g["b1"] = dz1.T @ x, dz1.sum(0)
            adam.step(g)

        return step, lambda: last["loss"]


class _Adam:
    """torch.optim.Adam's update (no weight decay), in place."""

    def __init__(self, params: dict, lr: float, betas=(0.9, 0.999), eps=1e-8):
        self.p, self.lr, self.b1, self.b2, self.eps = params, lr, betas[0], betas[1], eps
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, grads: dict) -> None:
        self.t += 1
        bc1 = 1 - self.b1 ** self.t
        bc2 = 1 - self.b2 ** self.t
        for k, g in grads.items():
            m, v = self.m[k], self.v[k]
            m *= self.b1
            m += (1 - self.b1) * g
            v *= self.b2
            v += (1 - self.b2) * (g * g)
            denom = np.sqrt(v) / np.sqrt(bc2) + self.eps
            self.p[k] -= (self.lr / bc1) * (m / denom)


def make(system):
    return NumpyRunner(system)
