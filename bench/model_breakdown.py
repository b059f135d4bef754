"""Where a compiled model step's time goes, per kind of call: the CNN, LSTM and Transformer.

    python -m bench.model_breakdown [--models cnn,lstm,transformer] [--steps N] [--eager]
                                    [--torch] [--embedding-rewrite off]
    python -m bench.model_breakdown --program mamba [--steps N]

The steps are ``bench/impls/models.py``'s (the ``models`` workload of ``python -m bench`` and
``bench/bench_models.py``), run by phase (forward = the compiled module, loss, backward,
optimizer step, zero_grad) on one thread (BLAS, numba; set before numpy loads) and timed in
CPU time (``time.thread_time``: another process on the cores does not count). While the
instrumented steps run, every call a compiled plan makes is timed (``bench.breakdown``'s
machinery): each GEMM by shape and operand layouts, each fused kernel by its ops, each
non-fused primitive by its name. What forward + backward spend outside those calls is
Python (plan lines, guards, autograd, allocation). With ``--torch`` the same step of
PyTorch eager (one thread) is timed in the same process, alternating with tracejit's, for
the ratio.

``--program NAME`` does the same for a program of ``bench/programs`` (tracejit in place of
torch, its compile hook on, as ``python -m bench.programs``' tracejit_compiled): whole
steps, as a program's step is one function, with the per-call table.

The figures are per step: the minimum over the steps for the step and phase totals, the
mean for the per-call table and the forward+backward split (a call's minimum over steps would
undercount calls that vary).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict

PHASES = ("zero_grad", "forward", "loss", "backward", "optimizer")


def _single_thread() -> None:
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = "1"
    os.environ.setdefault("TRACEJIT_ADAPTIVE_THREADS", "0")
    os.environ.setdefault("TRACEJIT_COMPILE", "sync")


def _phased_step(T, compiled: bool, name: str):
    """({phase: fn}, loss()) for model `name` (the bench's step, split by phase)."""
    from .impls import models
    if hasattr(T, "manual_seed"):
        T.manual_seed(0)
    net, xspec, tspec = models.build(T, name)
    models.load_shared_params(T, net, name)
    net.train()
    x, y = models.batch(T, name, xspec, tspec)
    opt = T.optim.SGD(net.parameters(), lr=0.01)
    fwd = T.script(net) if compiled else net
    F = T.nn.functional
    st: dict = {}

    def forward():
        st["out"] = fwd(x)

    def loss():
        st["loss"] = F.cross_entropy(st.pop("out"), y)

    def backward():
        st["loss"].backward()

    phases = {"zero_grad": opt.zero_grad, "forward": forward, "loss": loss,
              "backward": backward, "optimizer": opt.step}
    return phases, lambda: float(st["loss"].item())


def _run(phases: dict) -> dict:
    out = {}
    for p, fn in phases.items():
        t0 = time.thread_time()
        fn()
        out[p] = time.thread_time() - t0
    return out


class OpTimers:
    """Seconds and calls per call label ("gemm MxKxN LL", "kernel (ops)", "op name")."""

    def __init__(self):
        self.sec: dict = defaultdict(float)
        self.calls: dict = defaultdict(int)

    def wrap(self, label: str, fn):
        sec, calls = self.sec, self.calls

        def call(*args, **kwargs):
            t0 = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                sec[label] += time.thread_time() - t0
                calls[label] += 1
        return call


def _gemm_label(a, b) -> str:
    from .breakdown import _layout
    sa, sb = getattr(a, "shape", ()), getattr(b, "shape", ())
    return f"gemm {'x'.join(map(str, sa))} @ {'x'.join(map(str, sb))} {_layout(a)}{_layout(b)}"


def _unwrap_xp(impl, stand_in: type):
    """`impl` called with the real array module (impls with hand-written kernels check
    ``xp is numpy`` and would otherwise time their numpy forms)."""
    def call(xp, *args, **kwargs):
        return impl(xp._xp if type(xp) is stand_in else xp, *args, **kwargs)
    return call


def _kernel_label(family, fallback: str = "?") -> str:
    """"kernel (op, op, ...)": the fused group's ops (the first six)."""
    from tracejit.compiler.kernel_errors import group_parts
    ops = group_parts(family.group)[0] if hasattr(family, "group") else [fallback]
    return "kernel (" + ", ".join(ops[:6]) + (", ..." if len(ops) > 6 else "") + ")"


class _Family:
    """Stands in for a kernel family (``K<n>``, whose ``get`` picks a variant): the variant
    it returns is timed under the family's label."""

    def __init__(self, family, label: str, timers: OpTimers):
        self._family, self._label, self._timers = family, label, timers

    def get(self, *args, **kwargs):
        return self._timers.wrap(self._label, self._family.get(*args, **kwargs))

    def ready(self, *args, **kwargs):
        # plans ask `ready` for a strided operand's variant (None: not loaded yet)
        fn = self._family.ready(*args, **kwargs)
        return None if fn is None else self._timers.wrap(self._label, fn)

    def __getattr__(self, name):
        return getattr(self._family, name)


def _bias_gemm(timers: OpTimers, fn, stand_in: type):
    """epilogue.py's ``matmul_bias(xp, x, w, b)`` timed under its GEMM's label (+ bias)."""
    def call(xp, x, w, b):
        label = _gemm_label(x.reshape(-1, x.shape[-1]) if x.ndim > 2 else x, w) + " +bias"
        t0 = time.thread_time()
        try:
            return fn(xp._xp if type(xp) is stand_in else xp, x, w, b)
        finally:
            timers.sec[label] += time.thread_time() - t0
            timers.calls[label] += 1
    return call


def _instrument(timers: OpTimers) -> list:
    """Swap every CPU plan's calls for timed ones; returns what to put back."""
    from .breakdown import _plans, _KERNEL
    saved = []

    def timed_matmul(fn):
        def call(a, b, *args, **kwargs):
            t0 = time.thread_time()
            try:
                return fn(a, b, *args, **kwargs)
            finally:
                label = _gemm_label(a, b)
                timers.sec[label] += time.thread_time() - t0
                timers.calls[label] += 1
        return call

    class XP:
        def __init__(self, xp):
            self._xp = xp
            self.matmul = timed_matmul(xp.matmul)

        def __getattr__(self, name):
            return getattr(self._xp, name)

    from tracejit.compiler.plan import PRODUCT_NAME, SIGNATURE_CALL
    for plan in _plans():
        g = getattr(plan.fn, "__globals__", None)
        if g is None or getattr(plan.backend, "name", plan.backend) != "cpu":
            continue
        for name, value in list(g.items()):
            if name == "xp":
                new = XP(value)
            elif PRODUCT_NAME.match(name):     # MATMUL, or a product's own MATMUL_<n>
                new = timed_matmul(value)
            elif name == "MATMUL_ROWS":
                continue             # the MATMUL it is given is timed
            elif _KERNEL.match(name) and hasattr(value, "group"):
                new = _Family(value, _kernel_label(value), timers)
            elif _KERNEL.match(name) and callable(value):
                new = timers.wrap(_kernel_label(g.get(name.rstrip("ps")), name), value)
            elif name == "I_matmul_bias":        # compiler/gemm_steps: x @ w + b as one GEMM
                new = _bias_gemm(timers, value, XP)
            elif name.startswith("I_") and callable(value):
                new = timers.wrap("op " + name[2:], _unwrap_xp(value, XP))
            elif SIGNATURE_CALL.match(name) and callable(value):
                new = timers.wrap("op " + SIGNATURE_CALL.match(name).group(1), value)
            else:
                continue
            saved.append((g, name, value))
            g[name] = new
    return saved


def breakdown(name: str, steps: int = 6, compiled: bool = True, with_torch: bool = False) -> str:
    import tracejit as tj
    phases, loss = _phased_step(tj, compiled, name)
    tsteps = None
    if with_torch:
        import torch
        torch.set_num_threads(1)
        tphases, _ = _phased_step(torch, False, name)
        tsteps = []
    for _ in range(2):
        _run(phases)
        if tsteps is not None:
            _run(tphases)
    plain = []
    for _ in range(steps):
        plain.append(_run(phases))
        if tsteps is not None:
            tsteps.append(sum(_run(tphases).values()))
    timers = OpTimers()
    saved = _instrument(timers)
    try:
        inst = [_run(phases) for _ in range(steps)]
    finally:
        for g, n, v in reversed(saved):
            g[n] = v
    total = min(sum(r.values()) for r in plain)
    lines = [f"## {name} ({'compiled' if compiled else 'eager'}), one thread, CPU time, "
             f"load {os.getloadavg()[0]:.2f}, loss {loss():.5f}",
             f"step min {total * 1e3:.2f} ms (instrumented {min(sum(r.values()) for r in inst) * 1e3:.2f})"
             + (f"; torch eager min {min(tsteps) * 1e3:.2f} ms ({total / min(tsteps):.2f}x)" if tsteps else ""),
             "phases (min): " + ", ".join(f"{p} {min(r[p] for r in plain) * 1e3:.2f}" for p in PHASES)]
    per = {k: v / steps * 1e3 for k, v in timers.sec.items()}
    gemm = sum(v for k, v in per.items() if k.startswith("gemm"))
    kern = sum(v for k, v in per.items() if k.startswith("kernel"))
    ops = sum(v for k, v in per.items() if k.startswith("op "))
    # the mean, as the per-call figures are (the min would make "rest" negative)
    fb = sum(r["forward"] + r["backward"] for r in inst) / steps * 1e3
    lines.append(f"forward+backward {fb:.2f} ms: GEMM {gemm:.2f}, kernels {kern:.2f}, "
                 f"primitives {ops:.2f}, rest (Python/plan/autograd) {fb - gemm - kern - ops:.2f}")
    lines.append("")
    lines.append("| call | per step | ms per step |")
    lines.append("|---|---:|---:|")
    for k, v in sorted(per.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {k} | {timers.calls[k] / steps:.0f} | {v:.3f} |")
    return "\n".join(lines)


def program_breakdown(name: str, steps: int = 6) -> str:
    """The per-call table of `name`'s compiled step (``--program``)."""
    import importlib
    from .programs import torchswap
    torchswap.install()
    import torch
    torch.set_num_threads(1)
    prog = importlib.import_module(f"{__package__}.programs.{name}").Program(torch.compile)
    for _ in range(3):
        prog.step()

    def run() -> float:
        t0 = time.thread_time()
        prog.step()
        return time.thread_time() - t0
    plain = [run() for _ in range(steps)]
    timers = OpTimers()
    saved = _instrument(timers)
    try:
        inst = [run() for _ in range(steps)]
    finally:
        for g, n, v in reversed(saved):
            g[n] = v
    per = {k: v / steps * 1e3 for k, v in timers.sec.items()}
    mean = sum(inst) / steps * 1e3
    lines = [f"## program {name} (compiled), one thread, CPU time, load {os.getloadavg()[0]:.2f}",
             f"step min {min(plain) * 1e3:.2f} ms; instrumented mean {mean:.2f} ms: timed calls "
             f"{sum(per.values()):.2f}, rest (Python/plan/autograd/optimizer) {mean - sum(per.values()):.2f}",
             "", "| call | per step | ms per step |", "|---|---:|---:|"]
    for k, v in sorted(per.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {k} | {timers.calls[k] / steps:.0f} | {v:.3f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.model_breakdown", description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="cnn,lstm,transformer")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--eager", action="store_true", help="tracejit eager instead of tj.script")
    ap.add_argument("--torch", action="store_true", help="also time PyTorch eager (one thread) in this process")
    ap.add_argument("--embedding-rewrite", choices=("on", "off"), default="on",
                    help="off: compile without the embedding-gradient rewrite (the general LSTM LM step; "
                         "bench/bench_models.py's option)")
    ap.add_argument("--program", help="a program of bench/programs (mamba, gpt, ...) instead of the models")
    args = ap.parse_args(argv)
    if args.program:
        print(program_breakdown(args.program, args.steps))
        return 0
    before = os.environ.get("TRACEJIT_SCATTER_PRODUCTS")
    os.environ["TRACEJIT_SCATTER_PRODUCTS"] = "1" if args.embedding_rewrite == "on" else "0"
    try:
        for m in args.models.split(","):
            print(breakdown(m, args.steps, not args.eager, args.torch))
            print()
    finally:
        if before is None:
            del os.environ["TRACEJIT_SCATTER_PRODUCTS"]
        else:
            os.environ["TRACEJIT_SCATTER_PRODUCTS"] = before
    return 0


if __name__ == "__main__":
    _single_thread()
    sys.exit(main())
