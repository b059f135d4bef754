"""The CPU kernels of primitives that have a rows form, rendered by the rows-group renderer.

Some row ops stay primitives (an eager softmax is a few numpy passes in place, its
composite five ops), but their kernel is no hand-written loop: the record's *rows form*
(``prim.extra["rows_form"]``) is traced, scheduled as one rows group, lowered and rendered
by the CPU backend, so a compiled rows group and the primitive's kernel are one lowering.
Loaded with loader.py's policy. A kernel is made per primitive, dtype, params, variant and
pattern of size-1 dims; sizes are arguments, operands C-contiguous. A form may give several
results, which the caller may direct into arrays of its own.

Selections along one dim (argmax, argmin, topk's first k of ARGSORT's order) run as the
group of that reduction alone, lowered as a compiled program's epilogue (one scan a row,
codegen_cpu_loops `_arg_rows`): numpy's forms pay per row (``argpartition`` then a sort of
the k, ~10 ms for 2048 rows of 256, k 16; ``argmax`` over a short dim).
"""
from __future__ import annotations

import functools
import math
from operator import itemgetter

import numpy as np

from ....ops.cross_entropy_prim import (CROSS_ENTROPY, CROSS_ENTROPY_BACKWARD, check_range,
                                        reduce_losses)
from ....ops.layer_norm_prim import LAYER_NORM, LAYER_NORM_BACKWARD, row_size
from ....ops.log_softmax_prim import LOG_SOFTMAX, LOG_SOFTMAX_BACKWARD
from ....ops.logsumexp_prim import LOGSUMEXP
from ....ops.reductions import ARGMAX, ARGMIN
from ....ops.softmax_prim import SOFTMAX, SOFTMAX_BACKWARD, on_last_dim
from ....ops.tensorfns import ARGSORT
from ....ops import impls
from ....threads import PARALLEL_MIN
from .loader import kernel as _kernel, lowered, one_group, rendered

__all__ = ["run", "kernel_source", "on_last_dim", "softmax", "softmax_backward", "layer_norm", "layer_norm_backward",
           "logsumexp", "logsumexp_call", "cross_entropy", "bound", "softmax_call",
           "log_softmax", "log_softmax_call", "log_softmax_backward", "log_softmax_backward_call",
           "softmax_backward_call", "cross_entropy_call",
           "cross_entropy_backward", "cross_entropy_backward_call", "layer_norm_call",
           "SELECT_MIN", "argmax", "argmin", "topk_indices", "topk_call"]

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_forms: dict = {}    # kernel key (no variant) -> (graph input positions, nest), or unsupported


def _key(prim, arrays, params, parallel):
    pattern = tuple((a.dtype.name, tuple(d == 1 for d in a.shape)) for a in arrays)
    return ("rows", prim.name, pattern, tuple(sorted(params.items())), parallel)


def run(prim, arrays, params, out=None):
    """`prim`'s result on numpy `arrays` (the first float32 or float64, of the iteration
    shape; floats among the others of its dtype) by the kernel rendered from its rows
    form, or None (not such arrays, the form is no single rows group, or the kernel is not
    loaded yet: the caller's numpy form runs). `out`: the arrays the kernel writes its
    results into (C-contiguous, of their shapes), instead of new ones."""
    if type(arrays[0]) is not np.ndarray:
        return None
    # the loaded kernel's call for exactly these shapes and dtypes (a dict look-up: the
    # cross-entropy of 256x10 logits is ~10 us of work, the general path below ~15 more)
    fast = (prim, tuple(params.items()), tuple([a.shape for a in arrays]), tuple([a.dtype for a in arrays]))
    call = _calls.get(fast) or _cached(prim, arrays, params, fast)
    return None if call is None else _execute(call, arrays, out)


def bound(prim, params: dict, otherwise=None):
    """``run(prim, arrays, params)`` for the arrays of one signature (the shapes and dtypes
    of an eager plan's calls), else ``otherwise(*arrays)`` (None: None): the kernel's call
    is looked up until it is loaded, then kept with its output shapes, so a call is the
    kernel's alone (a (1, 2) softmax: run's key and layout cost 2 us of 4)."""
    kept = None

    def call(*arrays):
        nonlocal kept
        if kept is not None:
            return kept(*arrays)
        fast = (prim, tuple(params.items()), tuple([a.shape for a in arrays]), tuple([a.dtype for a in arrays]))
        got = _calls.get(fast) or _cached(prim, arrays, params, fast)
        if got is None:
            return None if otherwise is None else otherwise(*arrays)
        kept = _fixed(got, arrays)
        return kept(*arrays)
    return call


def _fixed(call, arrays):
    """`_execute` of `call` for arrays of these shapes, the outputs' shapes worked out once."""
    fn, reads, flat, outs = call
    x = arrays[0]
    if flat or len(outs) != 1:
        return lambda *arrays: _execute(call, arrays, None)
    (shape, dt), = _out_shapes(x, outs)
    dims = x.shape
    # the operands in the kernel's order, by one C call (a comprehension is a frame of its own)
    pick = None if list(reads) == list(range(len(arrays))) else (
        itemgetter(*reads) if len(reads) > 1 else lambda arrays: (arrays[reads[0]],))

    def run_one(*arrays):
        # (loops, not comprehensions: each of those is a frame of its own in Python 3.11)
        args = arrays if pick is None else pick(arrays)
        for a in args:
            if not a.flags.c_contiguous:
                args = [np.ascontiguousarray(a) for a in args]
                break
        y = np.empty(shape, dt)
        fn(*args, y, *dims)
        return y
    return run_one


def _cached(prim, arrays, params, fast):
    """The call `_prepare` makes for `fast`, kept in `_calls`; None while there is none."""
    call = _prepare(prim, arrays, params, fast)
    if call is not None:
        if len(_calls) > 4096:   # (shapes that keep changing: a dynamic batch)
            _calls.clear()
        _calls[fast] = call
    return call


def _execute(call, arrays, out):
    """The kernel of `call` (`_prepare`'s) on `arrays`, into `out` or new arrays."""
    fn, reads, flat, outs = call
    x = arrays[0]
    args = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in (arrays[k] for k in reads)]
    if flat:   # one-element operands the kernel reads as 1-d (the callers pass most so)
        args = [a.reshape(-1) if k in flat else a for k, a in zip(reads, args)]
    if out is None:
        out = [np.empty(shape, dt) for shape, dt in _out_shapes(x, outs)]
    fn(*args, *out, *x.shape)
    return out[0] if len(out) == 1 else tuple(out)


def _out_shapes(x, outs) -> list:
    """(shape, dtype) of each output (of the kind `_prepare` says) for the iteration shape of `x`."""
    lead = (1,) * (x.ndim - 1)
    return [(x.shape if kind == "elem" else x.shape[:-1] + (1,) if kind == "row" else lead + x.shape[-1:], dt)
            for kind, dt in outs]


_calls: dict = {}   # (prim, params, shapes, dtypes) -> (kernel, operand order, outputs)
# The same key -> its kernel's `_plan` while the kernel is not loaded: a call meanwhile runs
# the numpy form without planning again (~0.5 ms a call for LayerNorm's backward).
_waiting: dict = {}


def _prepare(prim, arrays, params, fast):
    """(the loaded kernel's entry, the arrays in its operand order, those of them passed
    flat, (per-row?, dtype) per output) for these arrays, or None (not such arrays, or
    not loaded yet)."""
    plan = _waiting.get(fast)
    if plan is None:
        plan = _plan(prim, arrays, params)
        if plan is None:
            return None
        if len(_waiting) > 4096:
            _waiting.clear()
        _waiting[fast] = plan
    kern, parallel, positions, nest = plan
    fn = kern.get()
    if fn is None:
        return None
    _waiting.pop(fast, None)
    from ... import backends
    flat = {pos for pos, op in zip(positions, nest.operands) if op.layout == "scalar" and arrays[pos].ndim != 1}
    entry = fn if parallel else backends.get("cpu").fast_entry(fn)
    kinds = tuple("row" if o.row else "col" if o.col else "elem" for o in nest.outputs)
    return entry, positions, flat, tuple((kd, np.dtype(o.dtype)) for kd, o in zip(kinds, nest.outputs))


def _plan(prim, arrays, params):
    """(the kernel, its variant, graph input positions, nest) for these arrays, or None
    (not such arrays, or the form is no single rows group)."""
    x = arrays[0]
    dt = x.dtype
    if dt not in _DTYPES or x.ndim == 0 or x.size == 0:
        return None
    for a in arrays:
        if type(a) is not np.ndarray or (a.dtype != dt and a.dtype.kind == "f"):
            return None
    shapes = [(a.shape, a.dtype.name) for a in arrays]
    form = lowered(_forms, _key(prim, arrays, params, None), lambda: _lower(prim, shapes, params))
    if form is None:
        return None
    positions, nest = form
    from ... import backends
    from ...codegen_cpu_rows import runs_parallel
    parallel = runs_parallel(nest, x.size)
    key = _key(prim, arrays, params, parallel)
    return _kernel(key, lambda: backends.get("cpu").render(nest, parallel)), parallel, positions, nest


def kernel_source(prim, operands: int, dtype: str, params: dict, name: str) -> str:
    """Module text defining ``name(*operands, *outputs, d0, d1)``: the serial kernel of
    `prim`'s rows form over `operands` 2-d C-contiguous arrays of `dtype` (no dim 1), for
    kernels that run it on rows of their own (attention's part kernels splice it in and call
    it once per head). Raises where the form is not one rows group."""
    from ...codegen_cpu_rows import render_rows
    shapes = [((2, 2), dtype)] * operands
    return render_rows(_lower(prim, shapes, params, name)[1], False).source


def _lower(prim, shapes, params, name: str = "kernel"):
    """`prim`'s rows form traced, scheduled and lowered: (graph input positions, nest).
    Raises where the form is not one rows group over the first operand's shape."""
    from ... import loopnest
    from ....autograd.grad_mode import enable_grad
    form = prim.extra["rows_form"]
    # (with gradients on: under no_grad, as in a backward pass, the tracer records a detach
    # of every value, and a detached sum over the rows would be a group of its own)
    with enable_grad():
        graph, group = one_group(lambda *xs: form(*xs, **params), shapes, f"{prim.name}'s rows form",
                                 lone_rows=True)
    if not group.rows:
        raise ValueError(f"{prim.name}'s rows form is not one rows group")
    if tuple(group.shape) != tuple(shapes[0][0]) or list(group.outputs) != list(graph.outputs):
        raise ValueError(f"{prim.name}'s rows form writes other values than its result")
    positions = [list(graph.inputs).index(v) for v in group.inputs]
    return positions, loopnest.lower(group, loopnest.operand_layouts(group), name)


# ---------------------------------------------------------------- the primitives' implementations
# (registered by implementations.py: arrays and params in, the result out, or None while
# the kernel is not loaded and the numpy form runs)
def softmax(x, *mask, dim, scale=1.0):
    return run(SOFTMAX, (x,) + mask, {"dim": dim, "scale": scale})


def softmax_backward(g, y, dim, scale=1.0):
    return run(SOFTMAX_BACKWARD, (g, y), {"dim": dim, "scale": scale}) if g.shape == y.shape else None


def softmax_call(shapes, dtype, params):
    """An eager plan's call for one signature of SOFTMAX (no mask) or SOFTMAX_BACKWARD: the
    kernel bound to it where `run` may take the call, else the numpy form itself."""
    return _rows_call(SOFTMAX, shapes, dtype, params, 1, True)


def softmax_backward_call(shapes, dtype, params):
    return _rows_call(SOFTMAX_BACKWARD, shapes, dtype, params, 2, True)


def log_softmax(x, *, dim):
    return run(LOG_SOFTMAX, (x,), {"dim": dim})


def log_softmax_call(shapes, dtype, params):
    """An eager plan's call for one signature of LOG_SOFTMAX (as `softmax_call`)."""
    return _rows_call(LOG_SOFTMAX, shapes, dtype, params, 1)


def log_softmax_backward(g, y, *, dim):
    return run(LOG_SOFTMAX_BACKWARD, (g, y), {"dim": dim}) if g.shape == y.shape else None


def log_softmax_backward_call(shapes, dtype, params):
    return _rows_call(LOG_SOFTMAX_BACKWARD, shapes, dtype, params, 2)


def _rows_call(prim, shapes, dtype, params, arity, scaled=False):
    if len(shapes) != arity or None in shapes or len(set(shapes)) != 1:
        return None   # (a mask, a scalar, a broadcast: the table decides per call)
    shape = shapes[0]
    if not (0 not in shape and np.dtype(dtype) in _DTYPES and 0 <= params["dim"] < len(shape)):
        return impls.numpy_form(prim, params)
    if params["dim"] != len(shape) - 1:   # (a middle dim: the rows form in lanes)
        from .lane_forms import middle_call
        return middle_call(prim, params, scaled)
    # (softmax's params spelled one way, with or without the default scale)
    kept = {"dim": params["dim"], "scale": params.get("scale", 1.0)} if scaled else params
    return bound(prim, kept, impls.numpy_form(prim, params))


def layer_norm_backward(g, x, *w, n, eps, has_w, sums=True):
    # (M + 2, K): the kernel writes dx into its first M rows, dweight and dbias into the
    # last two (without `sums`, (M, K): dx alone); weight as a (1, K) row and 1 / K an
    # operand, as the forward's
    k = row_size(x, n)
    if x.ndim == 0 or k == 0 or x.dtype not in _DTYPES or g.shape != x.shape:
        return None
    m = x.size // k
    res = np.empty((m + 2 * sums, k), x.dtype)
    ops = (g.reshape(m, k), x.reshape(m, k)) + tuple(a.reshape(1, k) for a in w) + (_reciprocal(k, x.dtype),)
    got = run(LAYER_NORM_BACKWARD, ops, {"n": 1, "eps": eps, "has_w": has_w, "sums": sums},
              out=[res[:m], res[m:m + 1], res[m + 1:]] if sums else [res])
    return None if got is None else res


def layer_norm(x, *wb, n, eps, affine):
    # over the (M, K) view of the rows; 1 / K an operand (compiled plans inline the same
    # value as a literal: the same bits)
    if x.ndim == 0 or x.dtype not in _DTYPES or not (ops := _row_operands(x.shape, n, x.dtype)):
        return None
    rows, row, r = ops
    y = run(LAYER_NORM, (x.reshape(rows),) + tuple(a.reshape(row) for a in wb) + (r,),
            {"n": 1, "eps": eps, "affine": affine})
    return None if y is None else y.reshape(x.shape)


def _row_operands(shape, n, dt):
    """LayerNorm's (M, K) rows, a weight's (1, K) and 1 / K for rows of `shape`'s last `n`
    dims; None for empty rows."""
    k = math.prod(shape[len(shape) - n:])
    return ((-1, k), (1, k), _reciprocal(k, np.dtype(dt))) if k else None


def layer_norm_call(shapes, dtype, params):
    """An eager plan's call for one signature of LAYER_NORM: `layer_norm` with its kernel
    bound, else the numpy form itself."""
    x = shapes[0] if None not in shapes else None
    if not x or 0 in x or np.dtype(dtype) not in _DTYPES:
        return impls.numpy_form(LAYER_NORM, params)
    kern = bound(LAYER_NORM, {"n": 1, "eps": params["eps"], "affine": params["affine"]})
    impl = LAYER_NORM.impl
    # `layer_norm` for this signature, its row size and operands' shapes worked out once
    rows, row, r = _row_operands(x, params["n"], dtype)

    def call(x, *wb):
        if len(wb) == 2:   # (weight and bias: no comprehension's frame)
            y = kern(x.reshape(rows), wb[0].reshape(row), wb[1].reshape(row), r)
        else:
            y = kern(x.reshape(rows), *[a.reshape(row) for a in wb], r)
        return impl(np, x, *wb, **params) if y is None else y.reshape(x.shape)
    return call


def logsumexp(x, *, dims, keepdim):
    # over the last dim, rows of `LOGSUMEXP_ROWS_FROM` or more: 3x numpy's passes;
    # shorter rows cost less in the numpy form's front layout (logsumexp_prim.FRONT_EXTENT)
    if type(x) is not np.ndarray or x.size == 0 or not _lse_takes(x.shape, x.dtype, dims):
        return None
    n = x.shape[-1]
    y = run(LOGSUMEXP, (x.reshape(-1, n),), {"dims": (1,), "keepdim": True})
    if y is None:
        return None
    return y.reshape(x.shape[:-1] + ((1,) if keepdim else ()))


LOGSUMEXP_ROWS_FROM = 32   # (rows of 16: the front layout measured 1.6x faster)


def logsumexp_call(shapes, dtype, params):
    """An eager plan's call for one signature: the numpy form itself where `logsumexp`
    never takes the call (a decline through the table cost 10% of a small call)."""
    if _lse_takes(shapes[0], dtype, params["dims"]):
        return None
    return impls.numpy_form(LOGSUMEXP, params)


def _lse_takes(shape, dtype, dims) -> bool:
    """Whether `logsumexp` runs the rows kernel for this signature."""
    return (len(dims) == 1 and len(shape) > 0 and dims[0] == len(shape) - 1
            and shape[-1] >= LOGSUMEXP_ROWS_FROM and np.dtype(dtype) in _DTYPES)


_reciprocals: dict = {}   # (K, dtype) -> 1 / K as a (1,) array


def _reciprocal(k: int, dt) -> np.ndarray:
    r = _reciprocals.get((k, dt))
    if r is None:
        if len(_reciprocals) > 1024:
            _reciprocals.clear()
        r = _reciprocals[(k, dt)] = np.full(1, 1.0 / k, dt)
    return r


_classes: dict = {}   # C -> the class indices 0..C-1 as a (1, C) int64 array


def _ce_operands(x, t, ignore_index):
    """(targets as (N, 1) int64, the class indices (1, C), counted rows), after PyTorch's
    range check (a target outside [0, C) that is not `ignore_index`: an IndexError)."""
    if not _ce_shapes(x, t):
        return None
    n, c = x.shape
    t = t.astype(np.int64, copy=False)
    lo, hi = (int(t.min()), int(t.max())) if n else (0, 0)
    counted = n
    if lo < 0 or hi >= c or lo <= ignore_index <= hi:   # (two reductions where all is well)
        valid = t != ignore_index
        check_range(t, valid, c)
        counted = int(np.count_nonzero(valid))
    return t.reshape(n, 1), _class_ids(c), counted


def _class_ids(c: int) -> np.ndarray:
    classes = _classes.get(c)
    if classes is None:
        classes = _classes[c] = np.arange(c, dtype=np.int64).reshape(1, c)
    return classes


def _ce_shapes(x, t) -> bool:
    """Logits (N, C) and integer targets (N,): the operands the rows kernels take."""
    return x.ndim == 2 and t.ndim == 1 and t.dtype.kind in "iu"


def cross_entropy(x, t, *, ignore_index=-100, reduction="mean"):
    return _cross_entropy(None, x, t, ignore_index, reduction)


def cross_entropy_call(shapes, dtype, params):
    """An eager plan's call for one signature of CROSS_ENTROPY: the kernel bound to it
    where the implementation may take the call, else the numpy form itself."""
    return _ce_call(CROSS_ENTROPY, 2, shapes, params, _cross_entropy)


def _ce_call(prim, arity, shapes, params, compute):
    """A plan call for `prim` whose last two operands are logits (N, C) and targets (N,):
    `compute(kern, *operands, ignore_index, reduction)` with the kernel bound, falling back
    to the numpy form where it declines (None)."""
    impl = prim.impl
    if len(shapes) != arity or None in shapes or len(shapes[-2]) != 2 or len(shapes[-1]) != 1:
        return impls.numpy_form(prim, params)
    ignore_index, reduction = params.get("ignore_index", -100), params.get("reduction", "mean")
    kern = bound(prim, {"ignore_index": ignore_index, "reduction": "none"})

    def call(*ops):
        y = compute(kern, *ops, ignore_index, reduction)
        return impl(np, *ops, **params) if y is None else y
    return call


def _cross_entropy(kern, x, t, ignore_index, reduction):
    """The mean, sum or rows of the losses, by `kern` (`bound`'s call; None: `run`)."""
    if not _ce_shapes(x, t):
        return None
    n, c = x.shape
    t = t.astype(np.int64, copy=False)
    ops = (x, t.reshape(n, 1), _class_ids(c))
    loss = (run(CROSS_ENTROPY, ops, {"ignore_index": ignore_index, "reduction": "none"}) if kern is None
            else kern(*ops))
    if loss is None:
        return None
    loss = loss.reshape(-1)
    total = loss.sum(dtype=np.float64)
    if not math.isfinite(total):   # a target outside [0, C) has loss inf: PyTorch's IndexError
        check_range(t, t != ignore_index, c)
    counted = n - int(np.count_nonzero(t == ignore_index)) if reduction == "mean" else n
    return reduce_losses(loss, total, counted, reduction, x.dtype)


def cross_entropy_backward_call(shapes, dtype, params):
    """An eager plan's call for one signature of CROSS_ENTROPY_BACKWARD, as `cross_entropy_call`."""
    return _ce_call(CROSS_ENTROPY_BACKWARD, 3, shapes, params,
                    lambda kern, g, x, t, ii, red: cross_entropy_backward(
                        g, x, t, ignore_index=ii, reduction=red, kern=kern))


def cross_entropy_backward(g, x, t, *, ignore_index=-100, reduction="mean", kern=None):
    """The logits' gradient by `kern` (a plan call's `bound` kernel; None: `run`), or None."""
    got = _ce_operands(x, t, ignore_index)
    if got is None or type(g) is not np.ndarray or g.dtype != x.dtype:
        return None
    t2, classes, counted = got
    div = np.full(1, max(counted, 1) if reduction == "mean" else 1, x.dtype)
    ops = (x, t2, classes, g.reshape(-1, 1) if g.ndim else g.reshape(1), div)
    return (run(CROSS_ENTROPY_BACKWARD, ops, {"ignore_index": ignore_index, "reduction": "none"})
            if kern is None else kern(*ops))


# Below these many elements numpy's selections cost less than a call's preparation (~3 us).
SELECT_MIN = 2048
_SELECT_DTYPES = frozenset(np.dtype(t) for t in ("float32", "float64", "int32", "int64"))
_select_forms: dict = {}   # (primitive, dtype, rank, k) -> nest, or unsupported
_select_calls: dict = {}   # the same plus the variant -> the loaded kernel


def _selection(prim, a, dim: int, k: int = 0):
    """`prim`'s indices over `dim` of `a` by the kernel of the group of it alone (over dim 1 of
    a C-contiguous (rows, n) or (outer, n, inner) array), or None while it is not loaded."""
    n, inner = a.shape[dim], math.prod(a.shape[dim + 1:])
    rank = 2 if inner == 1 else 3
    fn = _select_kernel(prim, a.dtype, rank, k, a.size >= PARALLEL_MIN)
    if fn is None:
        return None
    x = np.ascontiguousarray(a).reshape((-1, n) if rank == 2 else (-1, n, inner))
    out = np.empty(x.shape[:1] + ((k,) if k else x.shape[2:]), np.int64)
    fn(x, out, *x.shape)
    return out


def _select_kernel(prim, dtype, rank: int, k: int, parallel: bool):
    """The loaded kernel of `_selection` (None while it is not loaded)."""
    key = (prim.name, dtype.name, rank, k, parallel)
    fn = _select_calls.get(key)
    if fn is None:
        from .... import dtypes
        from ....jit.ir import Eqn, Var
        from ....ops.registry import Aval
        from ....shapes import Sym
        from ... import fusion, loopnest

        def lower():
            shape = tuple(Sym.symbol(f"d{j}", 0) for j in range(rank))
            x = Var(Aval(shape, getattr(dtypes, dtype.name)))
            params = {"dim": 1, "keepdim": False}
            if k:   # (the last dim: `topk_indices` moves it there)
                params = {"dim": 1, "descending": prim is ARGMAX, "stable": True, "k": k}
            out = Var(Aval(shape[:1] + ((k,) if k else shape[2:]), dtypes.int64))
            e = Eqn(ARGSORT if k else prim, (x,), (out,), params)
            return loopnest.lower(fusion.Group(0, shape, [], e, [x], [out]), ("flat",))
        nest = lowered(_select_forms, key[:-1], lower)
        fn = None if nest is None else rendered(("select",) + key, nest, parallel)
        if fn is not None:
            _select_calls[key] = fn
    return fn


def _arg(prim):
    def impl(a, dim, keepdim):
        if (dim is None or type(a) is not np.ndarray or a.dtype not in _SELECT_DTYPES or a.size < SELECT_MIN
                or a.shape[dim] > one_scan()):
            return None
        dim %= a.ndim
        out = _selection(prim, a, dim)
        lead, rest = a.shape[:dim] + ((1,) if keepdim else ()), a.shape[dim + 1:]
        return None if out is None else out.reshape(lead + rest)
    impl.__name__ = prim.name
    return impl


@functools.cache
def one_scan() -> int:
    """The longest row the generated kernel scans once (a longer row: numpy's vectorized
    scan costs less). Read at the first call: importing tracejit loads no lowering."""
    from ...loopnest import ARG_BLOCK
    return ARG_BLOCK


argmax = _arg(ARGMAX)   # ARGMAX's CPU implementation over one dim
argmin = _arg(ARGMIN)   # ARGMIN's


def _insertion_pays(a, dim: int, descending: bool, k) -> bool:
    """Whether keeping the best `k` of each row of `a` by insertion costs less than numpy's
    partial sort (a largest first is an argmax: numpy's scan). On values in random order a
    row of n inserts about k(1 + ln(n/k)) times, each moving past up to k kept ones, against
    numpy's few passes over the row: insertion wins up to about 4n such steps (k 16 of 256:
    0.8x the numpy form's time)."""
    return type(a) is np.ndarray and _pays(a.shape, a.dtype, dim, descending, k)


def _pays(shape: tuple, dtype, dim: int, descending: bool, k) -> bool:
    """`_insertion_pays` by the signature alone."""
    from ...fusion import TOPK_MAX
    if (k is None or dtype not in _SELECT_DTYPES or not shape or math.prod(shape) < SELECT_MIN
            or not 0 < k <= TOPK_MAX or (k == 1 and descending)):
        return False
    n = shape[dim]
    return k * 4 < n and k * k * (1.0 + math.log(n / k)) <= 4.0 * n


def topk_indices(a, dim, descending, stable, k=None):
    """ARGSORT's CPU implementation for ``k`` set (topk) with k a small part of the dim
    (`_insertion_pays`): the k best indices, best first, ties in input order, NaN the
    largest; None (the numpy form runs) otherwise or while the kernel is not loaded."""
    if not _insertion_pays(a, dim, descending, k):
        return None
    dim %= a.ndim
    rows = np.moveaxis(a, dim, -1).reshape(-1, a.shape[dim])
    out = _selection(ARGMAX if descending else ARGMIN, rows, 1, k)
    if out is None:
        return None
    lead = a.shape[:dim] + a.shape[dim + 1:]
    return np.ascontiguousarray(np.moveaxis(out.reshape(lead + (k,)), -1, dim))


def topk_call(shapes, dtype, params):
    """ARGSORT's plan call for one signature: where `topk_indices` takes it, the kernel, its
    layouts worked out once (per call they cost ~25 us of a (16, 5000) topk's ~100; the numpy
    form while it loads); elsewhere the numpy form; None for a symbolic shape."""
    shape, k, desc, dim = shapes[0], params.get("k"), params["descending"], params["dim"]
    if len(shapes) != 1 or shape is None or not all(type(d) is int for d in shape):
        return None
    plain, dt = impls.numpy_form(ARGSORT, params), np.dtype(dtype)
    if not _pays(tuple(shape), dt, dim, desc, k):
        return plain
    nd = len(shape)
    dim %= nd
    rest, perm = tuple(shape[:dim]) + tuple(shape[dim + 1:]), tuple(d for d in range(nd) if d != dim) + (dim,)
    back = None if dim == nd - 1 else tuple(range(dim)) + (nd - 1,) + tuple(range(dim, nd - 1))
    rows, n = math.prod(rest), shape[dim]
    kern = None

    def call(a):
        nonlocal kern
        if kern is None or a.dtype != dt:
            kern = _select_kernel(ARGMAX if desc else ARGMIN, dt, 2, k, a.size >= PARALLEL_MIN)
            if kern is None or a.dtype != dt:
                return plain(a)
        x = np.ascontiguousarray(a if back is None else a.transpose(perm)).reshape(rows, n)
        out = np.empty((rows, k), np.int64)
        kern(x, out, rows, n)
        out = out.reshape(rest + (k,))
        return out if back is None else np.ascontiguousarray(out.transpose(back))
    return call
