"""The CPU backend's implementations of the matrix products (ops/linalg.py's MATMUL,
MATMUL_NT, MATMUL_TN): each runs as the measured choice for its key makes it, on the GEMM
template or on numpy's BLAS. For an eager plan's signature the call is chosen once
(`matmul_call`)."""
from __future__ import annotations

import math

import numpy as np

from ....ops.linalg import _nt_small, _swap, _tn_small, dense_matmul, matmul_cols, matmul_rows
from ..runtime import coreshare
from . import blas_gemm, choice, template

__all__ = ["matmul", "matmul_nt", "matmul_tn", "matmul_call", "nt_call", "tn_call", "plan_matmul", "product_into",
           "rows_first", "plan_call", "TEMPLATE_MIN_MNK"]

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
        elif a.ndim == 2 and b.ndim > 2 and b.shape[-1] == 1:
            cell[0] = _cols
        elif (a.ndim == 2 and b.ndim == 2 and b.flags.f_contiguous and not b.flags.c_contiguous
              and a.dtype == b.dtype and rows_first(a.shape[0], a.shape[1], b.shape[1], a.dtype)):
            cell[0] = _of_view(None, _rows_first(_cell_call(blas_matmul, 0)))   # (as `matmul_call`)
        else:
            cell[0] = _site(blas_matmul, lambda f: cell.__setitem__(0, f))
    return cell[0](a, b)


def forget() -> None:
    """Drop the calls `matmul` and `product_into` installed (with choice.forget: tests)."""
    _calls.clear()
    _into.clear()


def _rows(a, b):
    return matmul_rows(matmul, a, b)


def _cols(a, b):
    return matmul_cols(matmul, a, b)


def plan_matmul(routed):
    """The callable a compiled plan's 2-D product of static shapes starts with: ``install``
    puts the chosen callable in the plan's namespace."""
    def make(install):
        return _site(routed, install)
    return make


def plan_call(a_shape: tuple, b_shape: tuple, dtype, routed, install):
    """A compiled plan's call for a 2-D product of static shapes beyond tiny: the choice's
    call site (`plan_matmul`), or, where `rows_first` takes the shapes, a call that runs
    the product rows first whenever `b` comes as a transposed view (its layout is known
    only at the call: a traced ``g @ b.T`` is a PERMUTE then this MATMUL)."""
    if not rows_first(a_shape[0], a_shape[1], b_shape[1], dtype):
        return plan_matmul(routed)(install)
    return _of_view(_cell_call(routed, 0), _rows_first(_cell_call(routed, 0)))


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
    if len(sa) == 2 and len(sb) > 2 and sb[-1] == 1:
        return _over_cols(matmul_call, shapes, dtype, params)
    routed = _route(sa, sb, dtype)
    if routed is not np.multiply and len(sa) == 2 and rows_first(sa[0], sa[1], sb[1], dtype):
        # (x @ w.t() by a transposed view: as the transposed-operand record's product)
        return _of_view(routed, _rows_first_call(routed))
    return routed


def _of_view(routed, by_rows):
    """``a @ b``: `by_rows` (a @ w.T of w) where `b` is a transposed view, else `routed`
    (None: `b` always is one)."""
    if routed is None:
        return lambda a, b: by_rows(a, b.T)

    def call(a, b):
        if b.flags.f_contiguous and not b.flags.c_contiguous:
            return by_rows(a, b.T)
        return routed(a, b)
    return call


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


def _over_cols(plan, shapes, dtype, params):
    """The call for a 2-D first operand by a batch of single columns: `plan`'s call for
    the one 2-D product of the columns as rows by the transposed matrix, shaped back
    (ops/linalg.py `matmul_cols`)."""
    sa, sb = shapes
    rows = (math.prod(sb[:-2]), sb[-2])
    call = plan((rows, (sa[1], sa[0])), dtype, params)
    out = (*sb[:-2], sa[0], 1)
    return lambda a, b: call(b.reshape(rows), a.T).reshape(out)


# ---------------------------------------------------------------- which side is BLAS's M
# An NT product x @ w.T (x (m, k), w (n, k), both row-major) with fewer rows in x than in
# w runs slowly on OpenBLAS: its small-matrix kernel for that transpose refuses outputs
# over 1200 elements (kernel/x86_64/sgemm_small_kernel_permit_skylakex.c), and its general
# path runs best with M the longer side. The same product as (w @ x.T).T, the result copied
# row-major, has M the longer side: a linear layer on a few tokens, a convolution's weight
# gradient (g (64, 7744) by LeNet's (289, 7744) columns). bench/nt_forms.py times the forms
# over rows 1-512, inner 16-4096, cols 16-1024 on one thread; over the float32 shapes
# `rows_first` takes they run at 0.58x of x @ w.T's time (geometric mean), none slower
# than it by over 2%.
RULE_MIN_MNK = 1 << 20       # from here the swap pays whatever the output's size
F64_MAX_MNK = 1 << 20        # float64 beyond: its own transposed path holds up
COPY_ROWS_MAX = 2048         # x of at most this many elements: copied transposed first


def rows_first(m, k: int, n: int, dtype) -> bool:
    """Whether ``x @ w.T`` of x (m, k) and w (n, k) runs as ``(w @ x.T).T`` (`_rows_first`):
    the one rule for which side of an NT product is BLAS's M, asked by every route that
    computes one (eager plans, compiled plans, the implementation; matmul's VJP writes
    ``g @ b.T`` and leaves the side to this). Yes where numpy's BLAS is OpenBLAS, float32
    or float64 (float64 up to `F64_MAX_MNK` multiply-adds), x has 2 or more rows and fewer
    than w (one row is a matrix-vector product; the other way round the swap loses, up to
    2x), an inner dim at least 4x x's rows (the result's copy is 1/k of the product; for
    many rows the swap saves less than a shallow product's copy costs) and either an output
    over OpenBLAS's 1200 elements or `RULE_MIN_MNK` multiply-adds. Symbolic dims: no."""
    if not (type(m) is int and type(k) is int and type(n) is int and 2 <= m < n and k >= 4 * m):
        return False
    dt = np.dtype(dtype)
    mnk = m * k * n
    return ((m * n > 1200 or mnk >= RULE_MIN_MNK) and dt in _FLOATS
            and (dt.itemsize == 4 or mnk <= F64_MAX_MNK) and _openblas())


_blas_name: list = []


def _openblas() -> bool:
    """Whether numpy's BLAS is OpenBLAS (looked up once)."""
    if not _blas_name:
        from ....threads import _BLAS_GETTERS, _blas_function
        path, _ = _blas_function(_BLAS_GETTERS)
        _blas_name.append("openblas" in (path or "").lower())
    return _blas_name[0]


def _rows_first(mul):
    """``a @ w.T`` for `a` (m, k) and `w` (n, k) as ``(w @ a.T).T`` by `mul`, the result
    C-contiguous (`rows_first`); an `a` of at most `COPY_ROWS_MAX` elements is copied
    transposed first (the NN product then runs: up to 2x faster for few rows over a short
    inner dim; a larger copy costs more than it saves)."""
    def call(a, w):
        at = a.T
        if a.size <= COPY_ROWS_MAX:
            at = np.ascontiguousarray(at)
        return np.ascontiguousarray(mul(w, at).T)
    return call


_SMALL_ROWS_FIRST = _rows_first(dense_matmul)


def _rows_first_call(routed):
    """A plan's `_rows_first` call: numpy's matmul below `TEMPLATE_MIN_MNK` (`routed` is
    `dense_matmul`), else over a call site of its own, which the choice binds to the
    swapped product's key."""
    return _SMALL_ROWS_FIRST if routed is dense_matmul else _rows_first(_cell_call(blas_matmul, 0))


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
        if swap == 2 and rows_first(sa[0], sa[1], sb[0], dtype):
            return _rows_first_call(routed)
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
