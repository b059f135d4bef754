"""Adam/AdamW's and SGD's update of all parameters in one pass over memory: numba kernels.

The array-at-a-time update is eleven numpy passes, most allocating a temporary; here one
launch per group ("multi-tensor", as PyTorch's fused Adam) reads p, g, m, v and writes p,
m, v once. Parameters are split into chunks of at most CHUNK elements, claimed from a
counter by shares that `sharepool.run_shares` runs: the update is memory bound, so a
second core is the lever. SGD (`sgd_update_many`) is the same launch over p, g and the
momentum buffers.

`_adam_element` performs the numpy path's operations in the same order and dtype, and
numba contracts no multiply-add without fastmath, so the update is bitwise the numpy one.
The kernels are source text loaded through `compiler.diskcache` like generated ones.
"""
from __future__ import annotations

import numpy as np

from ..compiler.cpu.runtime import sharepool
from ..compiler import diskcache
from ..threads import PARALLEL_MIN  # below it the serial kernel runs, as for fused groups

__all__ = ["adam_update_many", "sgd_update_many", "chunk_table", "address_table"]

# The kernels' modules: this header, then one optimizer's update (`_BODIES`)
_HEADER = '''\
# tracejit's fused {what} update for {dtype}, {count} tensors in one launch, in shares (tracejit/optim/fused.py)
import numpy as np
from numba import njit

from tracejit.compiler.cpu.runtime.voidptr import claim

_JIT = dict(cache=CACHE, nogil=True, error_model="numpy")
ITEM = np.dtype(np.{dtype}).itemsize   # (a global: a constant in the compiled code)


# arrays: {count} 1-D arrays (the run's gradients, or the parameters, ...); table: the
# kernel's address table (`address_table`), whose column `col` gets their addresses (numba
# reads an array's address in its unboxing, ~0.1 us; Python's __array_interface__ took ~1 us
# an array)
@njit("void(UniTuple(Array({dtype}, 1, 'C', readonly=True), {count}), int64[:, ::1], int64)", cache=CACHE)
def addresses(arrays, table, col):
    for t in range(len(arrays)):
        table[t, col] = arrays[t].ctypes.data
'''

_ADAM = '''

# inlined into the loop by numba (so nothing of its own to cache)
@njit(inline="always", nogil=True, error_model="numpy")
def _adam_element(pi, gi, mi, vi, vm, maximize, coupled_wd, decay, wd, lerp_small, w, one_minus_w,
                  beta2, one_minus_beta2, amsgrad, bc2_sqrt, eps, neg_step_size):
    # adam._apply_blocks, one element at a time; the operation order is PyTorch's.
    if maximize:
        gi = -gi
    if decay:
        pi = pi * wd                       # AdamW: p *= 1 - lr * weight_decay
    elif coupled_wd:
        gi = gi + wd * pi                  # Adam: g = g + weight_decay * p
    if lerp_small:
        mi = mi + w * (gi - mi)
    else:
        mi = gi - (gi - mi) * one_minus_w
    vi = vi * beta2
    vi = vi + one_minus_beta2 * gi * gi
    vd = vi
    if amsgrad:
        vm = vm if (vm >= vi or vm != vm) else vi   # np.maximum: a nan wins
        vd = vm
    denom = np.sqrt(vd)
    denom = denom / bc2_sqrt
    denom = denom + eps
    upd = neg_step_size * mi
    upd = upd / denom
    return pi + upd, mi, vi, vm


from tracejit.compiler.cpu.runtime.voidptr import carray_at

# arrays: one row per tensor, the addresses of its flat p, g (read only), m, v and vmax
# (`address_table`); chunks: rows of (tensor, start, stop); next_chunk: the
# launch's counter (one int64, zeroed): each share claims chunks from it until none is left;
# then maximize, coupled_wd, decay, wd, lerp_small, w, one_minus_w, beta2, one_minus_beta2,
# amsgrad, bc2_sqrt, eps, neg_step_size; share, shares (the launch convention,
# sharepool.launch; which chunks a share updates is decided by the counter alone)
SIGNATURE = ("void(Array(int64, 2, 'C', readonly=True), Array(int64, 2, 'C', readonly=True), int64[::1], "
             "boolean, boolean, boolean, {dtype}, boolean, {dtype}, {dtype}, "
             "{dtype}, {dtype}, boolean, {dtype}, {dtype}, {dtype}, int64, int64)")


# (no CPython wrapper: only the kernel calls it; its wrapper, unboxing five arrays, was
# 0.09 s of the module's 0.48 s compile. Called from Python it would crash.)
@njit(nogil=True, error_model="numpy", no_cpython_wrapper=True)
def _update_range(p, g, m, v, vmax, maximize, coupled_wd, decay, wd, lerp_small, w, one_minus_w,
                  beta2, one_minus_beta2, amsgrad, bc2_sqrt, eps, neg_step_size):
    # One chunk: 1-D views indexed from 0, a function of its own. Indexing the tuples'
    # arrays inside the chunk loop instead kept LLVM from vectorizing it (4x slower).
    for i in range(p.size):
        vm = vmax[i] if amsgrad else vmax[0]
        p[i], m[i], v[i], vm = _adam_element(p[i], g[i], m[i], v[i], vm, maximize, coupled_wd, decay, wd,
                                             lerp_small, w, one_minus_w, beta2, one_minus_beta2, amsgrad,
                                             bc2_sqrt, eps, neg_step_size)
        if amsgrad:
            vmax[i] = vm


@njit(SIGNATURE, **_JIT)
def kernel(arrays, chunks, next_chunk, maximize, coupled_wd, decay, wd, lerp_small, w,
           one_minus_w, beta2, one_minus_beta2, amsgrad, bc2_sqrt, eps, neg_step_size, share, shares):
    while True:
        c = claim(next_chunk)
        if c >= chunks.shape[0]:
            return
        t, lo, hi = chunks[c, 0], chunks[c, 1], chunks[c, 2]
        vlo, vhi = (lo, hi) if amsgrad else (0, 1)
        # the chunk's elements of each array, by address (not a slice of the whole array's
        # view: numba's slice lowering, five of them, was ~0.03 s of the module's compile)
        k = hi - lo
        o = lo * ITEM
        _update_range(carray_at(arrays[t, 0] + o, k, np.{dtype}), carray_at(arrays[t, 1] + o, k, np.{dtype}),
                      carray_at(arrays[t, 2] + o, k, np.{dtype}), carray_at(arrays[t, 3] + o, k, np.{dtype}),
                      carray_at(arrays[t, 4] + vlo * ITEM, vhi - vlo, np.{dtype}), maximize,
                      coupled_wd, decay, wd, lerp_small, w, one_minus_w, beta2, one_minus_beta2, amsgrad,
                      bc2_sqrt, eps, neg_step_size)
'''

_SGD = '''

from tracejit.compiler.cpu.runtime.voidptr import carray_at

# SGD's update, one pass: arrays: one row per tensor, the addresses of its flat p, g (read
# only) and momentum buffer (p's when momentum is 0: then never read or written)
# (`address_table`); chunks, next_chunk as Adam's; then maximize, wd, momentum,
# one_minus_dampening, nesterov, first (the buffers are new: they take the gradient), lr;
# share, shares. Addresses, not tuples of arrays, as Adam's kernel (`address_table`): with
# three tuples of {count} arrays the kernel's CPython wrapper unboxed them all and each
# tuple's item at a run-time index was a switch over its {count} arrays (10 tensors: 0.33 s
# of the module's 0.45 s compile, 14 tensors: 0.48 of 0.59)
SIGNATURE = ("void(Array(int64, 2, 'C', readonly=True), Array(int64, 2, 'C', readonly=True), int64[::1], "
             "boolean, {dtype}, {dtype}, {dtype}, boolean, boolean, {dtype}, int64, int64)")


# (no CPython wrapper: only the kernel calls it, as Adam's `_update_range`)
@njit(nogil=True, error_model="numpy", no_cpython_wrapper=True)
def _sgd_range(p, g, buf, maximize, wd, momentum, one_minus_dampening, nesterov, first, lr):
    # sgd.SGD's array path, one element at a time, in its order and dtype; flags are the
    # same in every iteration (LLVM moves their tests out of the loop)
    for i in range(p.size):
        gi = g[i]
        if maximize:
            gi = -gi
        if wd != 0:
            gi = gi + wd * p[i]
        if momentum != 0:
            if first:
                bi = gi
            else:
                bi = buf[i] * momentum
                bi = bi + one_minus_dampening * gi
            buf[i] = bi
            gi = gi + momentum * bi if nesterov else bi
        p[i] = p[i] - lr * gi


@njit(SIGNATURE, **_JIT)
def kernel(arrays, chunks, next_chunk, maximize, wd, momentum, one_minus_dampening, nesterov,
           first, lr, share, shares):
    while True:
        c = claim(next_chunk)
        if c >= chunks.shape[0]:
            return
        t, lo, hi = chunks[c, 0], chunks[c, 1], chunks[c, 2]
        k = hi - lo      # (the chunk by address, as Adam's kernel: 0.40 -> 0.34 s of compile for 14 tensors)
        o = lo * ITEM
        _sgd_range(carray_at(arrays[t, 0] + o, k, np.{dtype}), carray_at(arrays[t, 1] + o, k, np.{dtype}),
                   carray_at(arrays[t, 2] + o, k, np.{dtype}), maximize, wd, momentum,
                   one_minus_dampening, nesterov, first, lr)
'''

# Elements per chunk of the multi-tensor kernel: a few chunks per thread for the big
# tensors (the threads share the work), few enough rows that the table costs nothing.
CHUNK = 1 << 16

_BODIES = {"adam": ("Adam/AdamW", _ADAM), "sgd": ("SGD", _SGD)}
_modules: dict = {}       # (kind, dtype, count) -> the kernel's module
_launchers: dict = {}     # (kind, dtype, count, parallel) -> its _Launch
_chunk_tables: dict = {}


def _kernel(dtype: np.dtype, parallel: bool, count: int, wait: bool = True, kind: str = "adam"):
    """The `kind` ("adam" or "sgd") kernel for `count` tensors of `dtype` (float32 or
    float64), compiled or loaded on first use, as a launcher (`_Launch`): ``parallel`` runs
    its shares on as many cores as other processes leave, else one share. One module per
    dtype and count, serial code (numba's ``prange`` variant compiles in ~2.8x the time and
    the shares gain what a parfor would). Each chunk is updated by whichever share claims
    it, the same way: the same results on any number of threads.
    ``wait=False`` (background compile mode): None while a compile worker builds it."""
    module = _modules.get((kind, dtype, count))
    if module is None:
        what, body = _BODIES[kind]
        fill = {"{what}": what, "{dtype}": dtype.name, "{count}": str(count)}
        source = _HEADER + body
        for k, v in fill.items():
            source = source.replace(k, v)
        hint = f"{kind}_{dtype.name}_x{count}"
        if wait:
            module = diskcache.load_module(source, name_hint=hint)
        else:
            from ..compiler.prepare import module_when_ready
            module = module_when_ready(source, hint)
            if module is None:
                return None
        _modules[(kind, dtype, count)] = module
    launcher = _launchers.get((kind, dtype, count, parallel))
    if launcher is None or launcher.kernel is not module.kernel:
        launcher = _launchers[(kind, dtype, count, parallel)] = _Launch(module.kernel, not parallel,
                                                                       module.addresses)
    return launcher


class _Launch:
    """The kernel as a launcher: its shares on the cores other processes leave
    (`sharepool.launch`: with two, share 1 on the worker pool's thread), or one share (``serial``)."""

    __slots__ = ("kernel", "entry", "serial", "addresses")

    def __init__(self, kernel, serial: bool, addresses):
        self.kernel = kernel            # the numba dispatcher
        self.entry = kernel
        self.serial = serial
        self.addresses = addresses      # its module's (`_HEADER`): an address table's column

    def __call__(self, *args):
        sharepool.launch(self.entry, args, 1 if self.serial else sharepool.pool_threads())


def chunk_table(sizes: tuple) -> np.ndarray:
    """Rows (tensor, start, stop) covering tensors of `sizes` elements in pieces of at
    most CHUNK (memoized: a model's parameters keep their sizes)."""
    table = _chunk_tables.get(sizes)
    if table is None:
        rows = [(t, lo, min(lo + CHUNK, n)) for t, n in enumerate(sizes) for lo in range(0, n, CHUNK)]
        table = _chunk_tables[sizes] = np.array(rows, np.int64).reshape(-1, 3)
    return table


def _hyper(dtype: np.dtype, amsgrad: bool, *, maximize: bool, weight_decay: float, decoupled: bool,
           lr: float, w: float, beta2: float, bc2_sqrt: float, eps: float, step_size: float) -> tuple:
    """The kernels' arguments after the arrays, each number converted to the parameters'
    dtype first (as numpy converts a Python float next to an array of that dtype)."""
    t = dtype.type
    decay = decoupled and weight_decay != 0
    coupled = not decoupled and weight_decay != 0
    wd = t(1 - lr * weight_decay) if decay else t(weight_decay)
    return (bool(maximize), coupled, decay, wd, abs(w) < 0.5, t(w), t(1 - w), t(beta2), t(1 - beta2),
            amsgrad, t(bc2_sqrt), t(eps), t(-step_size))


def adam_update_many(ps: list, gs: list, ms: list, vs: list, vmaxs: list | None, *, maximize: bool,
                     weight_decay: float, decoupled: bool, lr: float, w: float, beta2: float, bc2_sqrt: float,
                     eps: float, step_size: float, wait: bool = True) -> bool:
    """One Adam/AdamW step of several parameters in one launch, in place: lists of
    C-contiguous float arrays of one dtype (p, g, m, v and amsgrad's vmax of each parameter
    of one shape; the parameters of any shapes), all at the same step. Returns False,
    changing nothing, when ``wait=False`` and the kernel is still compiling in the
    background (the caller runs the array path: same results).

    `vmaxs` are amsgrad's running maxima (None without amsgrad); `w` is the lerp weight
    ``1 - beta1``; `bc2_sqrt` is ``sqrt(1 - beta2**t)``; `step_size` is ``lr / (1 - beta1**t)``.
    """
    dtype = ps[0].dtype
    flat_p, flat_m, flat_v = (tuple(a.reshape(-1) for a in arrays) for arrays in (ps, ms, vs))
    sizes = tuple(a.size for a in flat_p)
    flat_g = _flat_gradients(gs, dtype, sizes)
    kernel = _kernel(dtype, sum(sizes) >= PARALLEL_MIN, len(sizes), wait)
    if kernel is None:
        return False
    # without amsgrad only vmax[0] is read (and ignored), never written
    vm = tuple(a.reshape(-1) for a in vmaxs) if vmaxs is not None else flat_p
    table = address_table(kernel, flat_p, flat_g, flat_m, flat_v, vm)
    kernel(table, chunk_table(sizes), np.zeros(1, np.int64),
           *_hyper(dtype, vmaxs is not None, maximize=maximize, weight_decay=weight_decay, decoupled=decoupled,
                   lr=lr, w=w, beta2=beta2, bc2_sqrt=bc2_sqrt, eps=eps, step_size=step_size))
    return True


def address_table(kernel: _Launch, *columns) -> np.ndarray:
    """A fused kernel's first argument: a row per tensor, a column per tuple of `columns`
    (1-D C-contiguous arrays of the kernel's dtype, kept alive by the caller) holding their
    addresses. Addresses, because unboxing tuples of arrays made the kernels' CPython
    wrappers most of their compile time."""
    table = np.empty((len(columns[0]), len(columns)), np.int64)
    for col, arrays in enumerate(columns):
        kernel.addresses(tuple(arrays), table, col)
    return table


def _flat_gradients(gs, dtype: np.dtype, sizes: tuple) -> tuple:
    """`gs` as 1-D C-contiguous arrays (views, or copies of non-contiguous ones), checked
    against the parameters' dtype and sizes: the kernel reads them by address."""
    flat = [g.reshape(-1) for g in gs]
    if len(flat) != len(sizes):
        raise ValueError(f"fused Adam: {len(flat)} gradients for {len(sizes)} parameters")
    for i, (g, n) in enumerate(zip(flat, sizes)):
        if g.dtype != dtype or g.size != n:
            raise ValueError(f"fused Adam: gradient {i} is {g.dtype}[{g.size}], its parameter {dtype}[{n}]")
        if not g.flags.c_contiguous:      # (reshape keeps a strided 1-D view as it is)
            flat[i] = np.ascontiguousarray(g)
    return tuple(flat)


# SGD's update moves 12 bytes per float32 element and computes next to nothing: below this
# many elements one thread is faster than a two-share launch.
SGD_PARALLEL_MIN = 1 << 22


def sgd_update_many(ps: list, gs: list, bufs: list | None, *, maximize: bool, weight_decay: float,
                    momentum: float, dampening: float, nesterov: bool, first: bool, lr: float,
                    wait: bool = True) -> bool:
    """One SGD step of several parameters in one launch, in place: lists of C-contiguous
    float arrays of one dtype (p, g and the momentum buffer of each parameter of one shape).
    `bufs`: the momentum buffers (None when momentum is 0); ``first``: they are new and take
    the gradient (PyTorch's first step) instead of being updated. Returns False, changing
    nothing, when ``wait=False`` and the kernel is still compiling (the caller runs the
    array path: same results)."""
    dtype = ps[0].dtype
    t = dtype.type
    flat_p = tuple(a.reshape(-1) for a in ps)
    flat_g = tuple(a.reshape(-1) for a in gs)
    # without momentum the buffers are never touched: p's views stand in for them
    flat_b = flat_p if bufs is None else tuple(a.reshape(-1) for a in bufs)
    sizes = tuple(a.size for a in flat_p)
    # the kernel reads g and the buffer by address over p's size (`addresses` checks their
    # dtype and layout): a shorter one would be read past its end
    for name, arrays in (("gradient", flat_g), ("momentum buffer", flat_b)):
        if len(arrays) != len(sizes):
            raise ValueError(f"fused SGD: {len(arrays)} {name}s for {len(sizes)} parameters")
        for i, (a, n) in enumerate(zip(arrays, sizes)):
            if a.size != n:
                raise ValueError(f"fused SGD: {name} {i} has {a.size} elements, its parameter {n}")
    kernel = _kernel(dtype, sum(sizes) >= SGD_PARALLEL_MIN, len(sizes), wait, kind="sgd")
    if kernel is None:
        return False
    table = address_table(kernel, flat_p, flat_g, flat_b)
    # (flat_p, flat_g, flat_b hold the arrays whose addresses the table has until it returns)
    kernel(table, chunk_table(sizes), np.zeros(1, np.int64), bool(maximize),
           t(weight_decay), t(momentum if bufs is not None else 0), t(1 - dampening), bool(nesterov),
           bool(first), t(lr))
    return True
