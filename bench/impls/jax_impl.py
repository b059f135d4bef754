"""``jax.jit`` on CPU, written the way JAX is used: pure functions, the whole training
step (gradients and update) under one ``jit``.

JAX dispatches asynchronously, so every timed call blocks on its result. Traces are
counted with a Python side effect in the traced function (it runs once per trace, i.e.
once per new input shape). The persistent compilation cache is switched on only when
``BENCH_JAX_CACHE_DIR`` is set (the compile-latency probes set it).
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from .. import workloads as W
from .base import Runner


def _configure_cache() -> None:
    cache_dir = os.environ.get("BENCH_JAX_CACHE_DIR")
    if cache_dir:
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


def _gelu_chain(x, y, z):
    a = x * y + z
    return 0.5 * a * (1 + jnp.tanh(W.GELU_C * (a + W.GELU_K * a ** 3)))


def _layer_norm(h, g, b):
    mu = h.mean(-1, keepdims=True)
    var = ((h - mu) ** 2).mean(-1, keepdims=True)
    return (h - mu) * jax.lax.rsqrt(var + W.LN_EPS) * g + b


class JaxRunner(Runner):
    def __init__(self, system):
        super().__init__(system)
        _configure_cache()
        self.traces = 0

    def versions(self) -> dict:
        import jaxlib
        return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "backend": jax.default_backend()}

    def asarray(self, a, requires_grad=False):
        return jax.device_put(np.array(a))

    def sync(self, out):
        return jax.block_until_ready(out)

    def gelu_fn(self):
        def gelu(x, y, z):
            self.traces += 1  # runs at trace time only
            return _gelu_chain(x, y, z)
        return gelu

    def overhead_fn(self):
        def f(x, y, z):
            a = x * y + z
            return jnp.tanh(a) * a - z
        return f

    def compile(self, fn):
        return jax.jit(fn)

    def compile_count(self, compiled_fn) -> int:
        return self.traces

    def activity(self) -> dict:
        return {"compiles": self.traces}   # traces so far (a retrace inside a timed run shows)

    def cache_env(self, cache_dir):
        return {"BENCH_JAX_CACHE_DIR": cache_dir}

    def gelu_fwdbwd(self, xs):
        grad = jax.jit(jax.grad(lambda x, y, z: _gelu_chain(x, y, z).sum(), argnums=(0, 1, 2)))
        x, y, z = (self.asarray(a) for a in xs)

        def step():
            return jax.block_until_ready(grad(x, y, z))

        return step, step

    def mlp2_step(self, data, other=None):
        x, y = self.asarray(data["x"]), self.asarray(data["y"])
        lr = W.MLP2_LR

        def loss_fn(w1, w2, x, y):
            y_pred = jnp.maximum(x @ w1, 0) @ w2
            return jnp.sum((y_pred - y) ** 2)

        @jax.jit
        def train(w1, w2, x, y):
            loss, (g1, g2) = jax.value_and_grad(loss_fn, argnums=(0, 1))(w1, w2, x, y)
            return w1 - lr * g1, w2 - lr * g2, loss

        state = {"w": (self.asarray(data["w1"]), self.asarray(data["w2"]))}

        def step(x=x, y=y):
            w1, w2, loss = jax.block_until_ready(train(*state["w"], x, y))
            state["w"], state["loss"] = (w1, w2), loss

        if other is not None:
            x2, y2 = self.asarray(other["x"]), self.asarray(other["y"])
            return step, lambda: float(state["loss"]), lambda: step(x2, y2)
        return step, lambda: float(state["loss"])

    def mlp_step(self, data):
        names = W.mlp_param_names()
        params = {k: self.asarray(data[k]) for k in names}
        x, labels = self.asarray(data["x"]), jnp.asarray(data["labels"].astype(np.int32))
        b1, b2, eps, lr = 0.9, 0.999, 1e-8, W.MLP_LR

        def loss_fn(p, x, labels):
            h = jax.nn.gelu(_layer_norm(x @ p["w1"].T + p["b1"], p["g1"], p["be1"]), approximate=True)
            h = jax.nn.gelu(_layer_norm(h @ p["w2"].T + p["b2"], p["g2"], p["be2"]), approximate=True)
            logits = h @ p["w3"].T + p["b3"]
            logp = jax.nn.log_softmax(logits)
            return -jnp.take_along_axis(logp, labels[:, None], axis=1).mean()

        @jax.jit
        def train(p, m, v, t, x, labels):
            loss, g = jax.value_and_grad(loss_fn)(p, x, labels)
            t = t + 1
            bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
            m = {k: b1 * m[k] + (1 - b1) * g[k] for k in p}
            v = {k: b2 * v[k] + (1 - b2) * g[k] * g[k] for k in p}
            p = {k: p[k] - (lr / bc1) * m[k] / (jnp.sqrt(v[k]) / jnp.sqrt(bc2) + eps) for k in p}
            return p, m, v, t, loss

        zeros = {k: jnp.zeros_like(v) for k, v in params.items()}
        state = {"s": (params, zeros, dict(zeros), jnp.float32(0))}

        def step():
            p, m, v, t, loss = jax.block_until_ready(train(*state["s"], x, labels))
            state["s"], state["loss"] = (p, m, v, t), loss

        return step, lambda: float(state["loss"])

    def model_step(self, name):
        if name not in _MODEL_SHAPES:
            raise NotImplementedError(f"the {name} model is not written for jax")
        return _model_step(self, name)


# ---------------------------------------------------------------- models workload
# The models of bench/impls/models.py as pure functions over a dict of parameters named
# and shaped as PyTorch's state_dict (so `workloads.model_param` gives every system the
# same values); the whole step (forward, loss, gradients, SGD) is one jax.jit.
_MODEL_SHAPES = {
    "cnn": {"c1.weight": (32, 1, 3, 3), "c1.bias": (32,), "b1.weight": (32,), "b1.bias": (32,),
            "c2.weight": (64, 32, 3, 3), "c2.bias": (64,), "b2.weight": (64,), "b2.bias": (64,),
            "fc.weight": (10, 1600), "fc.bias": (10,)},
    "lstm": {"emb.weight": (64, 256),
             **{f"rnn.{w}_l{layer}": shape for layer in (0, 1)
                for w, shape in (("weight_ih", (1024, 256)), ("weight_hh", (1024, 256)),
                                 ("bias_ih", (1024,)), ("bias_hh", (1024,)))},
             "head.weight": (64, 256), "head.bias": (64,)},
    "transformer": {"layer.self_attn.in_proj_weight": (768, 256), "layer.self_attn.in_proj_bias": (768,),
                    "layer.self_attn.out_proj.weight": (256, 256), "layer.self_attn.out_proj.bias": (256,),
                    "layer.linear1.weight": (1024, 256), "layer.linear1.bias": (1024,),
                    "layer.linear2.weight": (256, 1024), "layer.linear2.bias": (256,),
                    "layer.norm1.weight": (256,), "layer.norm1.bias": (256,),
                    "layer.norm2.weight": (256,), "layer.norm2.bias": (256,),
                    "head.weight": (10, 256), "head.bias": (10,)},
}


def _conv_bn_relu_pool(p, x, conv, bn):
    y = jax.lax.conv_general_dilated(x, p[f"{conv}.weight"], (1, 1), "VALID",
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
    y = y + p[f"{conv}.bias"][None, :, None, None]
    mu = y.mean((0, 2, 3), keepdims=True)                      # BatchNorm, training mode
    var = ((y - mu) ** 2).mean((0, 2, 3), keepdims=True)
    y = (y - mu) * jax.lax.rsqrt(var + 1e-5) * p[f"{bn}.weight"][None, :, None, None] \
        + p[f"{bn}.bias"][None, :, None, None]
    y = jnp.maximum(y, 0)
    return jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def _lstm_layer(p, x, layer):
    """x: (T, B, I) -> (T, B, H); gates in PyTorch's order i, f, g, o."""
    wih, whh = p[f"rnn.weight_ih_l{layer}"], p[f"rnn.weight_hh_l{layer}"]
    b = p[f"rnn.bias_ih_l{layer}"] + p[f"rnn.bias_hh_l{layer}"]
    xw = x @ wih.T + b
    hidden = whh.shape[1]

    def cell(carry, xw_t):
        h, c = carry
        i, f, g, o = jnp.split(xw_t + h @ whh.T, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    zeros = jnp.zeros((x.shape[1], hidden), x.dtype)
    _, hs = jax.lax.scan(cell, (zeros, zeros), xw)
    return hs


def _ln(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * w + b


def _encoder_layer(p, x, heads=4):
    """nn.TransformerEncoderLayer(256, 4, 1024, dropout=0, batch_first=True), post-norm, ReLU."""
    B, T, D = x.shape
    pre = "layer.self_attn."
    qkv = x @ p[pre + "in_proj_weight"].T + p[pre + "in_proj_bias"]
    q, k, v = (t.reshape(B, T, heads, D // heads).transpose(0, 2, 1, 3) for t in jnp.split(qkv, 3, -1))
    att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // heads), axis=-1)
    a = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
    a = a @ p[pre + "out_proj.weight"].T + p[pre + "out_proj.bias"]
    x = _ln(x + a, p["layer.norm1.weight"], p["layer.norm1.bias"])
    ff = jnp.maximum(x @ p["layer.linear1.weight"].T + p["layer.linear1.bias"], 0)
    ff = ff @ p["layer.linear2.weight"].T + p["layer.linear2.bias"]
    return _ln(x + ff, p["layer.norm2.weight"], p["layer.norm2.bias"])


def _model_logits(name, p, x):
    if name == "cnn":
        h = _conv_bn_relu_pool(p, x, "c1", "b1")
        h = _conv_bn_relu_pool(p, h, "c2", "b2")
        return h.reshape(h.shape[0], -1) @ p["fc.weight"].T + p["fc.bias"]
    if name == "lstm":
        h = p["emb.weight"][x].transpose(1, 0, 2)          # (T, B, 256)
        h = _lstm_layer(p, _lstm_layer(p, h, 0), 1).transpose(1, 0, 2)
        return (h @ p["head.weight"].T + p["head.bias"]).reshape(-1, 64)
    h = _encoder_layer(p, x)
    return (h @ p["head.weight"].T + p["head.bias"]).reshape(-1, 10)


def _model_step(runner, name):
    from . import models
    shapes = _MODEL_SHAPES[name]
    params = {k: runner.asarray(W.model_param(name, k, s)) for k, s in shapes.items()}
    xspec, tspec = models.SPECS[name]
    xa, ya = W.model_batch(name, xspec, tspec)
    x, y = runner.asarray(xa.astype(np.int32) if xa.dtype.kind == "i" else xa), jnp.asarray(ya.astype(np.int32))

    def loss_fn(p, x, y):
        logp = jax.nn.log_softmax(_model_logits(name, p, x))
        return -jnp.take_along_axis(logp, y[:, None], axis=1).mean()

    @jax.jit
    def train(p, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        return {k: p[k] - 0.01 * g[k] for k in p}, loss

    state = {"p": params}

    def step():
        p, loss = jax.block_until_ready(train(state["p"], x, y))
        state["p"], state["loss"] = p, loss

    return step, lambda: float(state["loss"])


def make(system):
    return JaxRunner(system)
