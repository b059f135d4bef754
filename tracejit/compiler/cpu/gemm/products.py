"""The CPU backend's implementations of the matrix products (ops/linalg.py's MATMUL,
MATMUL_NT, MATMUL_TN): each runs as the measured choice for its key makes it, on the GEMM
template or on numpy's BLAS. For an eager plan's signature the call is chosen once
(`matmul_call`)."""
from __future__ import annotations

import math

import numpy as np

from ....ops.linalg import _nt_small, _swap, _tn_small, dense_matmul, matmul_rows
from ..runtime import coreshare
from . import blas_gemm, choice, template

__all__ = ["matmul", "matmul_nt", "matmul_tn", "matmul_call", "nt_call", "tn_call", "plan_matmul", "product_into",
           "TEMPLATE_MIN_MNK"]

# Products below this many multiply-adds always run on BLAS: the template's launch (8-35 us)
# costs more than such a product takes.
TEMPLATE_MIN_MNK = coreshare.TINY_GEMM_MNK
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


# Multiply-adds from which `product_into` may take the template: its launch costs a caller's
# one-thread products in a row more than a race of single products shows (a chosen 64x32x512
# ran 15% slower than BLAS in place).
INTO_MIN_MNK = 8 * TEMPLATE_MIN_MNK


def product_into(a, b, out=None, threads: int = 0):
    """``a @ b`` into `out` (a new array where None) for a caller that runs its own blocks:
    a (m, k) by b (k, n), a (m, k) by each of b's (nb, k, n), or batches of equal dims; the
    template's configuration the choice made for the key on `threads` threads (0: those the
    machine gives now) where it is loaded, else numpy's matmul. Either operand may be a
    strided view. The route is resolved once per operand signature (key, choice and kernel
    lookups: ~10 us a call of a YOLO step's ~300 convolution products)."""
    sig = (a.shape, b.shape, a.strides, b.strides, a.dtype, b.dtype, threads)
    cell = _into.get(sig)
    if cell is None:
        if len(_into) >= _CALLS_MAX:
            _into.clear()
        cell = _into[sig] = [_blas_into]
        if (a.ndim in (2, b.ndim) and b.ndim in (2, 3)
                and a.shape[-2] * a.shape[-1] * b.shape[-1] >= INTO_MIN_MNK):
            aa = np.broadcast_to(a, b.shape[:1] + a.shape) if a.ndim < b.ndim else a
            if _eligible(aa, b):
                key = choice.key_for(aa, b, threads or coreshare.core_share.cpus)
                choice.bind(key, lambda c: cell.__setitem__(0, _into_call(c, key.dtype)) or cell[0])
    if out is not None and not out.flags.c_contiguous:
        return np.matmul(a, b, out=out)
    return cell[0](a, b, out, threads)


def _blas_into(a, b, out, threads):
    return np.matmul(a, b, out=out)


def _into_call(c, dtype: str):
    """`product_into`'s call for the choice `c` (BLAS, a template configuration, or a call
    made by `choice.bind`)."""
    if c is choice.BLAS:
        return _blas_into
    if callable(c):
        return c
    kern = template.kernel_for(dtype, c)

    def into(a, b, out, threads):
        fn = kern.get()
        if fn is not None:
            aa = np.broadcast_to(a, b.shape[:1] + a.shape) if a.ndim < b.ndim else a
            res = template.run(fn, c, aa, b, out=out,
                               threads=threads or coreshare.adapt() or coreshare.core_share.cpus)
            if res is not None:
                return res
        return np.matmul(a, b, out=out)
    return into


def blas_matmul(a, b):
    # on the BLAS threads the machine gives now: a 2-thread GEMM waits for a thread stuck
    # behind another process (eager LSTM LM step: 5-14 s against 1.3 s)
    return blas_gemm.matmul(a, b, True)   # (blas_only)


def _eligible(a, b) -> bool:
    """Whether the choice may run ``a @ b`` on the template: float32/64 operands of one
    dtype, batch dims equal or b's absent, enough multiply-adds to pay for a launch."""
    return (a.ndim >= 2 and b.ndim >= 2 and a.dtype == b.dtype and a.dtype in _FLOATS
            and (b.ndim == 2 or a.shape[:-2] == b.shape[:-2])
            and a.shape[-2] * a.shape[-1] * b.shape[-1] >= TEMPLATE_MIN_MNK)


def _launcher(cfg, dtype: str, fallback):
    """The call that runs products on the template's configuration `cfg`: `fallback` while
    its kernel is not loaded or the operands' layout does not fit."""
    kern = template.kernel_for(dtype, cfg)
    run = template.run
    cpus = coreshare.core_share.cpus

    def call(a, b):
        fn = kern.fn
        if fn is not None:
            out = run(fn, cfg, a, b, threads=coreshare.adapt() or cpus)
            if out is not None:
                return out
        else:
            kern.get()
        return fallback(a, b)
    return call


def bind_site(a, b, routed, install, launch):
    """A call site's binding to the key of ``a @ b``: installs `routed` (the BLAS side) or
    ``launch(config, dtype)`` as the choice decides, again on a later measurement, and
    returns what it installed now. Operands the template does not take keep `routed`."""
    if not _eligible(a, b):
        install(routed)
        return routed
    key = choice.key_for(a, b, coreshare.core_share.cpus)

    def put(c):
        f = routed if c is choice.BLAS else c if callable(c) else launch(c, key.dtype)
        install(f)
        return f
    return choice.bind(key, put)


def _site(routed, install):
    """The first call of a call site the choice decides (`bind_site`, from this call's
    operands), with `routed` or the template's launch."""
    def first(a, b):
        return bind_site(a, b, routed, install, lambda c, dt: _launcher(c, dt, routed))(a, b)
    return first


# Calls of the implementation by the operands' shapes, strides and dtypes: a one-element
# list holding the call the site installed; bounded by `_CALLS_MAX`.
_calls: dict = {}
_into: dict = {}    # (`product_into`'s, by its operands' signature and threads)
_CALLS_MAX = 4096


def matmul(a, b):
    """``a @ b`` as the choice decides it (products of N-d a and 2-D b: one product over a's
    flattened leading dims, ops/linalg.py `matmul_rows`): one dict lookup a call."""
    sig = (a.shape, b.shape, a.strides, b.strides, a.dtype, b.dtype)
    cell = _calls.get(sig)
    if cell is None:
        if len(_calls) >= _CALLS_MAX:
            _calls.clear()
        cell = _calls[sig] = [None]
        if a.ndim > 2 and b.ndim == 2:
            cell[0] = _rows
        elif (a.ndim == 2 and b.ndim == 2 and b.flags.f_contiguous and not b.flags.c_contiguous
              and a.dtype == b.dtype and few_rows_nt(a.shape[0], a.shape[1], b.shape[1], a.dtype)):
            cell[0] = _rows_first_of_view   # (as the plans' call: `matmul_call`)
        else:
            cell[0] = _site(blas_matmul, lambda f: cell.__setitem__(0, f))
    return cell[0](a, b)


def _rows_first_of_view(a, b):
    return _BLAS_ROWS_FIRST(a, b.T)


def forget() -> None:
    """Drop the calls `matmul` and `product_into` installed (with choice.forget: tests)."""
    _calls.clear()
    _into.clear()


def _rows(a, b):
    return matmul_rows(matmul, a, b)


def plan_matmul(routed):
    """The callable a compiled plan's 2-D product of static shapes starts with: ``install``
    puts the chosen callable in the plan's namespace."""
    def make(install):
        return _site(routed, install)
    return make


def matmul_nt(a, b):
    return matmul(a, _swap(b))


def matmul_tn(a, b):
    return matmul(_swap(a), b)


def _cell_call(routed, swap: int):
    """An eager plan's call for one signature: the site's installed call through a cell
    (the plan holds this function), of a @ b, a @ b.T (`swap` 2) or a.T @ b (1)."""
    cell = [None]
    cell[0] = _site(routed, lambda f: cell.__setitem__(0, f))
    if swap == 2:
        return lambda a, b: cell[0](a, b.T)
    if swap == 1:
        return lambda a, b: cell[0](a.T, b)
    return lambda a, b: cell[0](a, b)


def matmul_call(shapes, dtype, params):
    """An eager plan's call for one signature: below `TEMPLATE_MIN_MNK` numpy's matmul
    (`dense_matmul`), larger ones the choice's call site; N-d by 2-D the 2-D call over the rows."""
    sa, sb = shapes
    if len(sa) > 2 and len(sb) == 2:
        return _over_rows(matmul_call, shapes, dtype, params, sb[-1])
    routed = _route(sa, sb, dtype)
    if routed is not np.multiply and len(sa) == 2 and few_rows_nt(sa[0], sa[1], sb[1], dtype):
        # (x @ w.t() by a transposed view: as the transposed-operand record's product)
        rows_first = _SMALL_ROWS_FIRST if routed is dense_matmul else _BLAS_ROWS_FIRST

        def call(a, b):
            if b.flags.f_contiguous and not b.flags.c_contiguous:
                return rows_first(a, b.T)
            return routed(a, b)
        return call
    return routed


def _route(sa, sb, dtype):
    """`matmul_call`'s call for 2-D (or batched) shapes, before any layout's own route."""
    if sa[-1] == 1 and np.dtype(dtype) in _FLOATS:
        return np.multiply   # (an outer product: see `_outer`)
    if sa[-2] * sa[-1] * sb[-1] < TEMPLATE_MIN_MNK:
        return dense_matmul
    return _cell_call(blas_matmul, 0)


def _over_rows(plan, shapes, dtype, params, n: int):
    """The call for an N-d first operand by 2-D `b`: `plan`'s call for the one 2-D product
    over its flattened leading dims, shaped back with `n` columns (ops/linalg.py
    `matmul_rows`)."""
    sa, sb = shapes
    rows = (math.prod(sa[:-1]), sa[-1])
    call = plan((rows, sb), dtype, params)
    out = (*sa[:-1], n)
    return lambda a, b: call(a.reshape(rows), b).reshape(out)


# x @ w.T with few rows in x and many in w (a linear layer on a few tokens) runs slowly on
# OpenBLAS: its small-matrix kernel for that transpose refuses outputs over 1200 elements
# (kernel/x86_64/sgemm_small_kernel_permit_skylakex.c), and its general path packs w
# transposed for each call. The same product as (w @ x.T).T, x.T and the result copied
# (m rows each), runs on its untransposed path: 5 x 128 by 128 x 384, float32, one thread,
# 36 -> 12 us. Rows from which the two copies cost more than that path saves:
FEW_ROWS_NT = 32


def few_rows_nt(m: int, k: int, n: int, dtype) -> bool:
    """Whether an (m, k) @ (n, k).T product runs as (w @ x.T).T (`_rows_first`): numpy's
    BLAS is OpenBLAS, float32 (float64 up to 2**20 multiply-adds: beyond, its own
    transposed path wins), 2 to `FEW_ROWS_NT` rows, an inner dim of 32 or more (below, the
    small kernel takes either form) and an output over OpenBLAS's 1200 elements."""
    dt = np.dtype(dtype)
    return (2 <= m <= FEW_ROWS_NT and k >= 32 and m * n > 1200 and dt in _FLOATS
            and (dt.itemsize == 4 or m * k * n <= 1 << 20) and _openblas())


_blas_name: list = []


def _openblas() -> bool:
    """Whether numpy's BLAS is OpenBLAS (looked up once)."""
    if not _blas_name:
        from ....threads import _BLAS_GETTERS, _blas_function
        path, _ = _blas_function(_BLAS_GETTERS)
        _blas_name.append("openblas" in (path or "").lower())
    return _blas_name[0]


def _rows_first(mul):
    """``a @ w.T`` for `a` (m, k) and `w` (n, k) as ``(w @ a.T).T`` by `mul`, both copies
    C-contiguous (`few_rows_nt`)."""
    def call(a, w):
        return np.ascontiguousarray(mul(w, np.ascontiguousarray(a.T)).T)
    return call


_SMALL_ROWS_FIRST = _rows_first(dense_matmul)
_BLAS_ROWS_FIRST = _rows_first(blas_matmul)


def _transposed_call(small, swap):
    """The plan call of a transposed-operand record (2-D `b`; `a` 2-D, or N-d for a @ b.T):
    `matmul_call`'s choice for the product it computes (m, k, n of a @ b.T or a.T @ b, not
    of the stored operands)."""
    def call(shapes, dtype, params):
        sa, sb = shapes
        if len(sb) != 2 or len(sa) < 2 or (len(sa) > 2 and swap != 2):
            return None   # batches: the implementation
        if len(sa) > 2:   # (x @ w.T of a linear layer over N-d x: one product over the rows)
            return _over_rows(call, shapes, dtype, params, sb[0])
        product = ((sa[1], sa[0]), sb) if swap == 1 else (sa, (sb[1], sb[0]))
        routed = _route(*product, dtype)
        if routed is np.multiply:
            return _outer(swap)
        if swap == 2 and few_rows_nt(sa[0], sa[1], sb[0], dtype):
            return _SMALL_ROWS_FIRST if routed is dense_matmul else _BLAS_ROWS_FIRST
        return small if routed is dense_matmul else _cell_call(blas_matmul, swap)
    return call


def _outer(swap: int):
    """A product over one inner index (a matrix-vector product's gradient ``g @ v.T``) as
    the broadcast product of the column by the row: numpy's matmul takes 4x as long for it
    (512 x 1 by 1 x 256: 190 us against 46). Each element is the one product either way."""
    if swap == 2:
        return lambda a, b: np.multiply(a, b.T)
    return lambda a, b: np.multiply(a.T, b)


nt_call = _transposed_call(_nt_small, 2)
tn_call = _transposed_call(_tn_small, 1)
