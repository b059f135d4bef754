"""Backends: what a plan needs from a device, as one object per device type.

A plan and the executor never ask which device they run on; they ask their `Backend`: its
array module, how a step's result is normalized, how a group's `loopnest.LoopNest` is
rendered, compiled, loaded and called, and whether it folds reductions in long sequential
runs (`Backend.sequential_sums`).

To add a backend: a renderer of `LoopNest` (like codegen_cpu.py / codegen_cuda.py) that
writes steps with `emitter.render_steps` and an `emitter.Emitter` subclass (and a column of
`mathnames.MATH`); a `Backend` subclass that loads what it renders into a callable taking
`LoopNest.arguments`; and an entry in `BACKENDS` keyed by ``Device.type``. Ops need nothing
per backend: their ``scalar`` rules are written against the emitter.
"""
from __future__ import annotations

import logging
import time

import numpy as np

from .loopnest import LoopNest, lower

__all__ = ["Backend", "CpuBackend", "CudaBackend", "BACKENDS", "get", "for_graph"]

compile_log = logging.getLogger("tracejit.compile")  # TRACEJIT_LOG=compile: time per kernel


class Backend:
    """The device-specific part of running a compiled graph (see the module docstring)."""

    name = "?"
    #: folds long sequential runs (CPU) rather than trees of short ones (GPU)
    sequential_sums = True
    #: small sizes get a serial twin of each kernel (see plan.PARALLEL_MIN)
    serial_twin = False
    #: the kernels beyond fused groups it runs, which the plan stage's patterns ask for
    #: (compiler/plan_patterns.py): row kernels, GEMM epilogues, attention pairs, GEMM pairs
    capabilities: frozenset = frozenset()

    def array_module(self):
        raise NotImplementedError

    def fix(self, v, dt):
        """`v` (a step's result) as an array of the array module with dtype `dt`."""
        raise NotImplementedError

    def lower(self, group, layouts: tuple, name: str = "kernel") -> LoopNest:
        return lower(group, layouts, name, sequential_sums=self.sequential_sums)

    def render(self, nest: LoopNest, parallel: bool):
        """The kernel's spec (``.source``, ``.llvm_options``) for `nest`."""
        raise NotImplementedError

    def variant(self, parallel: bool) -> bool:
        """The variant a call of this size class uses (without a serial twin: one for all)."""
        return parallel if self.serial_twin else False

    def load(self, spec, label: str, parallel: bool):
        """Compile (or load from the disk cache) `spec`: a callable taking the nest's
        calling convention."""
        raise NotImplementedError

    def fast_entry(self, fn):
        """The cheapest callable for `fn` once loaded (skipping dispatch where safe)."""
        return fn

    def matmul(self):
        """The function a plan calls for a matrix product (the array module's by default)."""
        return self.array_module().matmul

    def matmul_for(self, a_shape: tuple, b_shape: tuple, dtype, install=None):
        """The function a plan calls for one product of fixed shapes and dtype; ``install(fn)``
        puts another in the plan's place later (a choice decided later)."""
        return self.matmul()

    def __repr__(self) -> str:
        return f"<{self.name} backend>"


def _fix_numpy(v, dt):
    """numpy returns scalars for 0-d results and may pick another dtype: normalize."""
    if type(v) is not np.ndarray or v.dtype != dt:
        v = np.asarray(v, dtype=dt)
    return v


def _fix_cupy(v, dt):
    import cupy
    if type(v) is not cupy.ndarray or v.dtype != dt:
        v = cupy.asarray(v, dtype=dt)
    return v


def _entry_point(kernel):
    """The compiled function behind a one-signature numba CPU dispatcher: it skips the
    per-call type resolution (~0.2 us). Safe as the plan only calls it with the declared
    dtypes and ranks, after checking the declared contiguity."""
    overloads = getattr(kernel, "overloads", None)
    if overloads is None or len(overloads) != 1 or getattr(kernel, "_can_compile", False):
        return kernel
    return next(iter(overloads.values())).entry_point


class CpuBackend(Backend):
    """numba CPU kernels (codegen_cpu.py), numpy arrays, BLAS through numpy."""

    name = "cpu"
    serial_twin = True
    capabilities = frozenset(("gemm_epilogue",))

    fix = staticmethod(_fix_numpy)  # a plain function: plans call it per step

    def array_module(self):
        return np

    def render(self, nest: LoopNest, parallel: bool):
        from .codegen_cpu import render
        if parallel:
            from . import codegen_chunks
            # TRACEJIT_PARALLEL=chunks: no parfor pass; else chunk kernels where the shares
            # can run GIL-free on the worker pool (codegen_chunks.paired)
            chunks = codegen_chunks.enabled()
            if chunks or codegen_chunks.paired(nest):
                spec = codegen_chunks.render(nest)
                # (parfor for a nested form without a table form; a windows nest's whole
                # planes are long enough for a Python launch)
                if spec is not None and (chunks or nest.flat or spec.pair or nest.window is not None):
                    return spec
        return render(nest, parallel)

    def load(self, spec, label: str, parallel: bool):
        from . import diskcache
        from .cpu.runtime.coreshare import guard_parallel
        t0 = time.perf_counter()
        before = diskcache.stats()["compiles"]
        pair, source = None, spec.source
        if spec.chunked and parallel and getattr(spec, "pair", ""):
            pair, source = self._pair(spec, label)
        mod = diskcache.load_module(source, name_hint=label, llvm_options=spec.llvm_options)
        if compile_log.isEnabledFor(logging.INFO):
            how = "compiled" if diskcache.stats()["compiles"] > before else "loaded"
            compile_log.info("%s %s %s%s in-process in %.3f s", how, label, "/".join(spec.nest.layouts),
                             " parallel" if parallel else "", time.perf_counter() - t0)
        fn = mod.kernel
        if spec.chunked:  # a chunk kernel: launched by cshares.ChunkKernel
            from .cpu.runtime.cshares import ChunkKernel, Ready
            if pair is None and source is not spec.source:
                pair = Ready(fn, self.fast_entry)
            return ChunkKernel(fn, _entry_point(fn), spec.partial_dtype, serial=not parallel,
                               partial_size=spec.partial_size, pair=pair)
        if parallel:
            fn = guard_parallel(fn)  # numba's workqueue layer aborts on concurrent launches
        return fn

    def fast_entry(self, fn):
        return _entry_point(fn)

    def _pair(self, spec, label: str) -> tuple:
        """(the pair's cshares.Pending or None, the source to load) for a flat chunk kernel
        with a GIL-free pair: in background mode a module of its own built after the
        kernel's; in sync mode one module with the kernel, unless the kernel alone is on
        disk already (it must load without a compile; its pair only where that is too)."""
        from . import diskcache
        from .cpu.runtime import cshares
        from .prepare import compile_mode
        both = spec.source + spec.pair
        if compile_mode(None) == "background":
            return cshares.Pending(spec.source, spec.pair, label, spec.llvm_options, self.fast_entry), spec.source
        if diskcache.is_cached(both, spec.llvm_options) or not diskcache.is_cached(spec.source, spec.llvm_options):
            return None, both       # (its `Ready` once loaded: `load`)
        own = cshares.module_source(spec.source, spec.pair, spec.llvm_options)
        if diskcache.is_cached(own, spec.llvm_options):
            return cshares.Pending(spec.source, spec.pair, label, spec.llvm_options, self.fast_entry), spec.source
        return None, spec.source

    def matmul(self):
        # the measured choice between the GEMM template and BLAS (compiler/cpu/gemm/
        # products.py), BLAS on the thread policy's count (compiler/cpu/runtime/coreshare.py)
        from .cpu.gemm.products import matmul
        return matmul

    def matmul_for(self, a_shape: tuple, b_shape: tuple, dtype, install=None):
        # a 2-D product of static shapes: numpy's matmul for a tiny one, else the GEMM
        # choice's BLAS side, which `install` may replace by the template's launch (rows
        # first for a transposed `b` where products.rows_first says so)
        if (len(a_shape) == 2 and len(b_shape) == 2 and a_shape[1] == b_shape[0]
                and all(type(d) is int for d in (*a_shape, *b_shape))):
            from .cpu.gemm import blas_gemm, products
            if a_shape[0] * a_shape[1] * b_shape[1] < products.TEMPLATE_MIN_MNK:
                return np.matmul
            if install is None:
                return blas_gemm.matmul
            return products.plan_call(a_shape, b_shape, dtype, blas_gemm.matmul, install)
        return self.matmul()


class CudaBackend(Backend):
    """numba CUDA kernels (codegen_cuda.py, cuda_launch.py), cupy arrays."""

    name = "cuda"
    sequential_sums = False

    def array_module(self):
        from ..device import cupy_module
        return cupy_module()

    fix = staticmethod(_fix_cupy)

    def render(self, nest: LoopNest, parallel: bool):
        from .codegen_cuda import render
        return render(nest)

    def load(self, spec, label: str, parallel: bool):
        from .cuda_launch import load
        return load(spec, hint=label)


BACKENDS: dict = {"cpu": CpuBackend(), "cuda": CudaBackend()}


def get(backend) -> Backend:
    """The `Backend` for a name ("cpu", "cuda") or a `Backend` itself."""
    if isinstance(backend, Backend):
        return backend
    try:
        return BACKENDS[backend]
    except KeyError:
        raise ValueError(f"no backend {backend!r} (known: {', '.join(BACKENDS)})") from None


def for_graph(graph) -> Backend:
    """The backend of the device the graph's values live on (the first non-CPU one seen)."""
    for v in list(graph.inputs) + [o for e in graph.eqns for o in e.outs]:
        t = v.aval.device.type
        if t != "cpu" and t in BACKENDS:
            return BACKENDS[t]
    return BACKENDS["cpu"]
