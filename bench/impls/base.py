"""What every system's runner shares: the workloads written once against a few hooks.

A runner subclass supplies the framework-specific pieces (how to make a tensor, the GELU
chain in its ops, how to compile, how to wait for a result, how to count compilations)
and the training steps, which differ too much between frameworks to share. The
workload methods return a dict of metrics (see ``bench.workloads``) plus ``check``
values that the report compares across systems, or raise ``Skip`` with a note.
"""
from __future__ import annotations

import dataclasses
import tempfile
import time

import numpy as np

from .. import workloads as W
from . import models
from ..harness import Skip, Watch, measure, run_child, step_times


class Runner:
    """Base for one system (framework x mode). ``compiled`` picks the mode."""

    def __init__(self, system):
        self.system = system
        self.compiled = system.compiled
        # what happened during each timed run (bench.harness.Watch): the worker files its
        # totals per workload as ``during_timing``
        self.watch = Watch(self.activity)

    # ---------------------------------------------------------------- hooks
    def versions(self) -> dict:
        return {}

    def asarray(self, a: np.ndarray, requires_grad: bool = False):
        raise NotImplementedError

    def tonumpy(self, t) -> np.ndarray:
        return np.asarray(t)

    def sync(self, out):
        """Wait until ``out`` is computed (asynchronous systems override)."""
        return out

    def gelu_fn(self):
        """The GELU chain ``(x, y, z) -> out`` written in this framework's ops."""
        raise NotImplementedError

    def overhead_fn(self):
        raise NotImplementedError

    def compile(self, fn):
        """Compile ``fn`` (compiled systems); eager systems return it unchanged."""
        return fn

    def settle(self) -> None:
        """Wait for background work a workload's first call started (tracejit eager: its
        kernels compiling in the compile workers), so that the timed calls are steady state."""

    def compile_count(self, compiled_fn) -> int:
        return 0

    def activity(self) -> dict:
        """Running totals of this system's own compile and load work in this process (a
        count or seconds per key, only ever growing): a `Watch` reports which grew during a
        timed run, so a figure that includes a compile or a kernel load says so. {} where the
        system has nothing in the background to report."""
        return {}

    def thread_policy(self) -> dict:
        """What an adaptive thread count read right after a timed run ({} where the system
        has none): tracejit's core-share policy decides how many threads its products use,
        so a figure is read beside the count it ran on."""
        return {}

    def timing_starts(self) -> None:
        """Called right before a training workload's first timed step (after its warm-up):
        a system notes here what `thread_policy` should say held during the timed steps."""

    def check_available(self, what: str) -> None:
        """Raise Skip when the workload ``what`` cannot run in this system yet."""

    def cache_env(self, cache_dir: str) -> dict:
        """Environment that points this system's on-disk compile cache at ``cache_dir``."""
        return {}

    # ---------------------------------------------------------------- workloads
    def run_gelu(self, cfg: W.Config) -> dict:
        self.check_available("gelu")
        xs = W.gelu_inputs(cfg.gelu_n)
        fwd = self.compile(self.gelu_fn())
        x, y, z = (self.asarray(a) for a in xs)
        out = self.sync(fwd(x, y, z))
        self.settle()
        check = {"fwd_sum": float(np.sum(self.tonumpy(out), dtype=np.float64))}
        t_fwd = measure(lambda: self.sync(fwd(x, y, z)), warmup=cfg.warmup, repeat=cfg.repeat,
                        watch=self.watch)
        step, grads = self.gelu_fwdbwd(xs)
        g = grads()
        self.settle()
        check.update({f"grad_{k}_sum": float(np.sum(self.tonumpy(v), dtype=np.float64))
                      for k, v in zip("xyz", g)})
        t_bwd = measure(step, warmup=cfg.warmup, repeat=cfg.repeat, watch=self.watch)
        b = W.gelu_bytes(cfg.gelu_n)
        # The same calls again, each right after a copy of the bound's yardstick: the ratio
        # per pair, next to the plain figures above (which the report divides by the copy
        # rate measured before the systems ran)
        paired = {"fwd": self._paired(lambda: self.sync(fwd(x, y, z)), b["fwd"], cfg.paired_rounds),
                  "fwdbwd": self._paired(step, b["fwdbwd"], cfg.paired_rounds)}
        return {"n": cfg.gelu_n, "fwd_ms": t_fwd.value(cfg.stat) * 1e3,
                "fwdbwd_ms": t_bwd.value(cfg.stat) * 1e3,
                "fwd_bytes": b["fwd"], "fwdbwd_bytes": b["fwdbwd"],
                **{f"{k}_x_paired": v["ratio_median"] for k, v in paired.items()
                   if "ratio_median" in v},
                "paired": paired,
                "timing": {"fwd": t_fwd.as_dict(), "fwdbwd": t_bwd.as_dict()}, "check": check,
                **self.thread_policy()}

    @staticmethod
    def _paired(call, nbytes: int, rounds: int) -> dict:
        """`machine.paired` of ``call``; its error instead where the copy cannot run here."""
        from .. import machine
        try:
            return machine.paired(call, nbytes, rounds)
        except Exception as exc:  # the yardstick must not fail the workload
            return {"error": f"{type(exc).__name__}: {exc}"}

    def gelu_fwdbwd(self, xs):
        """(step, grads): ``step()`` runs forward+backward of ``sum(gelu(x, y, z))`` and
        waits; ``grads()`` returns the last (dx, dy, dz). Autograd systems share this."""
        gelu = self.gelu_fn()

        def loss(x, y, z):  # a def, not a lambda: tj.script compiles from the source
            return gelu(x, y, z).sum()

        loss_fn = self.compile(loss)
        x, y, z = (self.asarray(a, requires_grad=True) for a in xs)

        def step():
            x.grad = y.grad = z.grad = None
            loss_fn(x, y, z).backward()
            return x.grad

        def grads():
            step()
            return x.grad, y.grad, z.grad

        return step, grads

    def run_mlp2(self, cfg: W.Config) -> dict:
        self.check_available("mlp2")
        res = _train_steps(*self.mlp2_step(W.mlp2_data()), cfg.mlp2_steps, cfg.mlp2_warmup, cfg.stat,
                           settle=self.settle, warmup_s=cfg.train_warmup_s, watch=self.watch,
                           timing_starts=self.timing_starts)
        return {"step_us": res.pop("step_s") * 1e6, **res, **self.thread_policy()}

    def run_mlp(self, cfg: W.Config) -> dict:
        self.check_available("mlp")
        res = _train_steps(*self.mlp_step(W.mlp_data()), cfg.mlp_steps, cfg.mlp_warmup, cfg.stat,
                           settle=self.settle, warmup_s=cfg.train_warmup_s, watch=self.watch,
                           timing_starts=self.timing_starts)
        return {"step_ms": res.pop("step_s") * 1e3, **res, **self.thread_policy()}

    def mlp2_step(self, data: dict, other: dict | None = None):
        """(step, loss): one SGD step of the two-layer net; loss() is the last loss. With
        `other`, a third: a step on other's x, y through the same compiled function."""
        raise NotImplementedError

    def mlp_step(self, data: dict):
        raise NotImplementedError

    def run_models(self, cfg: W.Config) -> dict:
        """A training step of each model in bench/impls/models.py (its own numbers per model)."""
        self.check_available("models")
        if cfg.quick and self.compiled:   # the smoke run: the first calls would compile for minutes
            raise Skip("quick run: compiled model steps are left to the full run")
        out, check = {}, {}
        for name in cfg.models:
            try:
                step = self.model_step(name)
            except NotImplementedError:   # a model this system has not written: no figure for it
                continue
            res = _train_steps(*step, cfg.models_steps, cfg.models_warmup, cfg.stat,
                               settle=self.settle, warmup_s=cfg.train_warmup_s, watch=self.watch)
            out[f"{name}_ms"] = res["step_s"] * 1e3
            out[name] = {**res, **self.thread_policy()}   # the count each model's steps ran on
            check[f"{name}_first_loss"] = res["check"]["first_loss"]
        return {**out, "check": check}

    def model_step(self, name: str, autocast=None):
        """(step, loss) of one models-workload model; raise NotImplementedError if absent."""
        raise NotImplementedError(f"the {name} model is not written for this system")

    def autocast(self):
        """A factory of this system's CPU bf16 autocast context; Skip where it has none."""
        raise Skip("no CPU autocast (bfloat16 mixed precision) in this system")

    def run_amp(self, cfg: W.Config) -> dict:
        """The MLP step and the CNN and Transformer steps (those of the config's models) in
        float32 and under bf16 autocast, in this one process, each pair one after the other
        (the speed-up is read off the same minutes)."""
        self.check_available("amp")
        ac = self.autocast()
        if cfg.quick and self.compiled:
            raise Skip("quick run: compiled autocast steps are left to the full run")
        out, check = {}, {}
        for name in ("mlp",) + tuple(m for m in ("cnn", "transformer") if m in cfg.models):
            if name == "mlp":
                make = lambda a: self.mlp_step(W.mlp_data(), autocast=a)   # noqa: E731
                steps, warmup = cfg.mlp_steps, cfg.mlp_warmup
            else:
                make = lambda a: self.model_step(name, autocast=a)         # noqa: E731
                steps, warmup = cfg.models_steps, cfg.models_warmup
            for kind, a in (("f32", None), ("bf16", ac)):
                res = _train_steps(*make(a), steps, warmup, cfg.stat, settle=self.settle,
                                   warmup_s=cfg.train_warmup_s, watch=self.watch)
                out[f"{name}_{kind}_ms"] = res["step_s"] * 1e3
                out[f"{name}_{kind}"] = {**res, **self.thread_policy()}
                check[f"{name}_{kind}_final_loss"] = res["check"]["final_loss"]
            out[f"{name}_bf16_x"] = out[f"{name}_f32_ms"] / out[f"{name}_bf16_ms"]
            # float32 training and mixed precision end at the same loss (within 1%)
            out[f"{name}_bf16_loss_rel"] = abs(check[f"{name}_bf16_final_loss"] / check[f"{name}_f32_final_loss"] - 1)
        return {**out, "check": check}

    def run_overhead(self, cfg: W.Config) -> dict:
        self.check_available("overhead")
        f = self.compile(self.overhead_fn())
        x, y, z = (self.asarray(a) for a in W.overhead_inputs())
        out = self.sync(f(x, y, z))
        t = measure(lambda: self.sync(f(x, y, z)), warmup=cfg.warmup + 50,
                    repeat=cfg.overhead_repeat, sample_s=cfg.sample_s, watch=self.watch)
        res = {"call_us": t.value(cfg.stat) * 1e6, "per_op_us": t.value(cfg.stat) * 1e6 / 5,
               "timing": t.as_dict(),
               "check": {"sum": float(np.sum(self.tonumpy(out), dtype=np.float64))}}
        # The same call recording the graph (inputs that require grad; no backward): the
        # eager autograd systems only (numpy has none, and a compiled call's recording is
        # one node, not five).
        xg, yg, zg = (self.asarray(a, requires_grad=True) for a in W.overhead_inputs())
        if not self.compiled and getattr(xg, "requires_grad", False):
            tg = measure(lambda: f(xg, yg, zg), warmup=cfg.warmup + 50,
                         repeat=cfg.overhead_repeat, sample_s=cfg.sample_s, watch=self.watch)
            res["call_grad_us"] = tg.value(cfg.stat) * 1e6
            res["timing_grad"] = tg.as_dict()
        return res

    def run_opcost(self, cfg: W.Config) -> dict:
        from ..opcost import run  # per-op eager cost (bench/opcost.py)
        return run(self, cfg)

    def _tmpdir(self, kind: str) -> tempfile.TemporaryDirectory:
        """A cache directory for child processes. Its removal ignores errors: a cold child's
        background compile workers may still be writing kernels into it."""
        return tempfile.TemporaryDirectory(prefix=f"bench-{self.system.name}-{kind}-",
                                           ignore_cleanup_errors=True)

    def run_compile(self, cfg: W.Config) -> dict:
        if not self.compiled:
            raise Skip("eager: nothing to compile")
        self.check_available("compile")
        params = {"batch": cfg.compile_batch, "new_batch": cfg.compile_new_batch,
                  "features": cfg.features}
        probes = {}
        for what in ("gelu", "step"):  # each in fresh processes: its first call pays startup
            with self._tmpdir("cache") as cache:
                env = self.cache_env(cache)  # empty for the first probe, warm for the second
                p = dict(params, what=what)
                probes[what] = [run_child(self.system.name, "compile", p, env_extra=env,
                                          timeout_s=cfg.child_timeout_s) for _ in ("cold", "warm")]
        for what in () if cfg.quick else self.compile_probes_extra():
            with self._tmpdir("cache") as cache:
                env = {**self.cache_env(cache), **self.probe_env(what)}
                p = dict(params, what=what)
                probes[what] = [run_child(self.system.name, "compile", p, env_extra=env,
                                          timeout_s=cfg.child_timeout_s * 4) for _ in ("cold", "warm")]
        (cold, warm), (scold, swarm) = probes["gelu"], probes["step"]
        extra = {}
        if "mlp" in probes:
            mcold, mwarm = probes["mlp"]
            extra.update(mlp_cold_ms=mcold["mlp_first_ms"], mlp_warm_disk_ms=mwarm["mlp_first_ms"],
                         mlp=probes["mlp"])
        if "mlp_tiers" in probes:
            bcold, bwarm = probes["mlp_tiers"]
            extra.update(mlp_bg_cold_ms=bcold["first_s"] * 1e3, mlp_bg_warm_disk_ms=bwarm["first_s"] * 1e3,
                         mlp_bg_full_speed_s=bcold["full_speed_s"], mlp_tiers=probes["mlp_tiers"])
        return {"cold_ms": cold["first_ms"], "warm_disk_ms": warm["first_ms"],
                "new_batch_ms": cold["new_batch_ms"], "steady_ms": cold["steady_ms"],
                "step_cold_ms": scold.get("step_first_ms"), "step_warm_disk_ms": swarm.get("step_first_ms"),
                "step_new_batch_ms": scold.get("step_new_batch_ms"),
                "import_s": cold["import_s"], "cold": cold, "warm": warm, **extra, **params}

    def compile_probes_extra(self) -> tuple:
        """Further first-call probes of the compile workload this system runs: ``"mlp"``
        (the MLP training step, cold and warm disk) where it has the MLP step."""
        return ("mlp",)

    def probe_env(self, what: str) -> dict:
        """Environment for a compile probe's fresh process (beyond the cache directory)."""
        return {}

    def probe_compile(self, params: dict) -> dict:
        """In a fresh process: first call, steady call, first call at a new batch size (of
        the GELU chain, or with ``what="step"`` of the two-layer training step)."""
        if params.get("what") == "mlp":   # the MLP step's first call: compiles fwd and bwd
            step, _ = self.mlp_step(W.mlp_data())
            return {"mlp_first_ms": _once(step) * 1e3}
        if params.get("what") == "step":
            # The two-layer training step (the compile benchmark's target): its first call
            # compiles forward and backward; then a batch size it has not seen.
            step, _, step2 = self.mlp2_step(W.mlp2_data(), W.mlp2_data(W.MLP2_SHAPE["n"] // 2))
            return {"step_first_ms": _once(step) * 1e3, "step_new_batch_ms": _once(step2) * 1e3}
        f = self.compile(self.gelu_fn())
        x, y, z = (self.asarray(a) for a in W.gelu_batch_inputs(params["batch"], params["features"]))
        first = _once(lambda: self.sync(f(x, y, z)))
        steady = measure(lambda: self.sync(f(x, y, z)), warmup=1, repeat=5)
        x2, y2, z2 = (self.asarray(a)
                      for a in W.gelu_batch_inputs(params["new_batch"], params["features"]))
        new_batch = _once(lambda: self.sync(f(x2, y2, z2)))
        return {"first_ms": first * 1e3, "steady_ms": steady.median_s * 1e3,
                "new_batch_ms": new_batch * 1e3, "compiles": self.compile_count(f)}

    def run_dynamic(self, cfg: W.Config) -> dict:
        self.check_available("dynamic")
        params = {"max_batch": cfg.dynamic_max_batch, "features": cfg.features}
        if not self.compiled:
            return self.probe_dynamic(params)
        with self._tmpdir("dyn") as cache:
            return run_child(self.system.name, "dynamic", params, env_extra=self.cache_env(cache),
                             timeout_s=cfg.child_timeout_s)

    def probe_dynamic(self, params: dict) -> dict:
        f = self.compile(self.gelu_fn())
        order = W.dynamic_batches(params["max_batch"])
        inputs = [[self.asarray(a) for a in W.gelu_batch_inputs(b, params["features"])]
                  for b in order]
        times = []
        for xs in inputs:
            t0 = time.perf_counter()
            self.sync(f(*xs))
            times.append(time.perf_counter() - t0)
        return {"batches": order, "compiles": self.compile_count(f),
                "total_ms": sum(times) * 1e3, "first_ms": times[0] * 1e3,
                "after_first_ms": sum(times[1:]) * 1e3,
                "slowest_ms": max(times) * 1e3}


def _train_steps(step, loss, steps: int, warmup: int, stat: str, settle=None,
                 warmup_s: float = 0.0, watch: Watch | None = None, timing_starts=None) -> dict:
    """Time ``steps`` training steps after a warm-up of ``warmup`` steps and at least
    ``warmup_s`` seconds (harness.step_times says why seconds). The cross-system check
    takes the loss after the first step (`settle` runs after it) and after ``warmup +
    steps`` steps: the same count for every system, so with ``warmup_s`` those steps run
    first, untimed, as part of the warm-up, and the timed steps come after them. `settle`
    runs again at the end of the warm-up (what the warm-up asked for is in before the
    timing: harness.step_times); `watch` sees what happened during the timed steps."""
    step()
    first = loss()
    if settle is not None:
        settle()
    if not warmup_s:
        t = step_times(step, steps, warmup - 1, settle=settle, watch=watch,
                       timing_starts=timing_starts)
        final = loss()
    else:
        t0 = time.perf_counter()
        for _ in range(warmup - 1 + steps):
            step()
        final = loss()
        t = step_times(step, steps, 0, warmup_s - (time.perf_counter() - t0), settle=settle,
                       watch=watch, timing_starts=timing_starts)
        t = dataclasses.replace(t, warmup=warmup - 1 + steps + t.warmup)
    return {"steps": steps, "step_s": t.value(stat), "timing": t.as_dict(),
            "check": {"first_loss": first, "final_loss": final}}


def _once(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
