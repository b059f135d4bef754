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


def make(system):
    return JaxRunner(system)
