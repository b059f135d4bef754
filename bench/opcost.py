"""The ``opcost`` workload: what one eager op costs, small and large, with and without autograd.

Eager mode is what users debug in and what runs everything outside a compiled function, so
its per-op cost is tracked on its own (the target: PyTorch eager's speed):

- small (16 float32 elements, where the time is all overhead): a chain of 100 elementwise ops
  (``y * 1.001`` and ``y + 0.5`` alternating), timed without gradients, with graph recording
  (inputs that require grad), and with ``.sum().backward()`` after it; the backward's
  per-node cost is (fwd+bwd - fwd with recording) / 101 nodes;
- large (1M float32 elements, 256K with ``--quick``): a chain of 10 such ops, forward only
  and forward+backward, per op.

Every figure is per op (or per node), in microseconds. Systems without eager autograd
(numpy, JAX) report the forward figures only; compiled systems are skipped (the chain is
eager code whichever mode a system is in).
"""
from __future__ import annotations

import numpy as np

from . import workloads as W
from .harness import Skip, measure

SMALL_N = 16
SMALL_CHAIN = 100
LARGE_CHAIN = 10


def _chain(x, n: int):
    y = x
    for i in range(n):
        y = y * 1.001 if i % 2 else y + 0.5
    return y


def _has_autograd(t) -> bool:
    return hasattr(t, "backward") and hasattr(t, "requires_grad")


def run(runner, cfg: W.Config) -> dict:
    if runner.compiled:
        raise Skip("per-op cost of eager code: run in the eager systems")
    runner.check_available("opcost")
    large_n = 256 * 1024 if cfg.quick else 1024 * 1024
    r = np.random.default_rng(7)
    small = r.standard_normal(SMALL_N, dtype=np.float32)
    large = r.standard_normal(large_n, dtype=np.float32)
    out: dict = {"small_n": SMALL_N, "large_n": large_n, "timing": {}}
    sync = runner.sync

    def per_op(key, fn, ops, **kw):
        t = measure(fn, warmup=kw.get("warmup", cfg.warmup), repeat=kw.get("repeat", cfg.overhead_repeat),
                    sample_s=kw.get("sample_s", cfg.sample_s), watch=getattr(runner, "watch", None))
        out[key] = t.value(cfg.stat) * 1e6 / ops
        out["timing"][key] = t.as_dict()

    xs = runner.asarray(small)
    per_op("small_op_us", lambda: sync(_chain(xs, SMALL_CHAIN)), SMALL_CHAIN)
    xl = runner.asarray(large)
    sync(_chain(xl, LARGE_CHAIN))
    runner.settle()   # tracejit eager: the large ops' kernels, compiled in the background
    per_op("large_op_us", lambda: sync(_chain(xl, LARGE_CHAIN)), LARGE_CHAIN,
           repeat=cfg.repeat, sample_s=0.0)
    check = {"small_sum": float(np.sum(runner.tonumpy(_chain(xs, SMALL_CHAIN)), dtype=np.float64))}

    xg = runner.asarray(small, requires_grad=True)
    if _has_autograd(xg):
        per_op("small_op_grad_us", lambda: _chain(xg, SMALL_CHAIN), SMALL_CHAIN)

        def fwdbwd(x, n):
            def step():
                _chain(x, n).sum().backward()
                x.grad = None
            return step
        per_op("small_fwdbwd_us", fwdbwd(xg, SMALL_CHAIN), SMALL_CHAIN)
        out["small_node_bwd_us"] = (out["small_fwdbwd_us"] - out["small_op_grad_us"]) * SMALL_CHAIN \
            / (SMALL_CHAIN + 1)
        xlg = runner.asarray(large, requires_grad=True)
        fwdbwd(xlg, LARGE_CHAIN)()
        runner.settle()
        per_op("large_fwdbwd_us", fwdbwd(xlg, LARGE_CHAIN), LARGE_CHAIN, repeat=cfg.repeat, sample_s=0.0)
        _chain(xg, SMALL_CHAIN).sum().backward()
        check["small_grad_sum"] = float(np.sum(runner.tonumpy(xg.grad), dtype=np.float64))
    out["check"] = check
    # the thread count the large rows ran on (tracejit: coreshare's; their kernels split
    # over it, and its arithmetic goes to numpy at one), read right after them
    out.update(runner.thread_policy())
    return out
