"""Bias adds folded into their GEMM (``x @ w + b`` as one BLAS call with beta=1), and bias
gradients' column sums as one GEMV.

Why: a Linear's bias add after its product is a pass of its own over the output when
nothing else elementwise follows it (the packed q/k/v projection of self-attention: a
(2048, 768) float32 add, ~0.45 ms a step on one thread, against ~0.1 ms to fill the output
with the broadcast bias). OpenBLAS's GEMM with beta=0 clears C before it accumulates;
with beta=1 it accumulates onto what C holds, so filling C with the bias and calling it
with beta=1 costs no more than the product alone. This is what PyTorch's ``addmm`` does
with its bias, filling on all its threads: the fill of a fresh output costs 0.51-0.59 ms a
step on one thread for the q/k/v projection's 6 MB inside the Transformer step (cold
caches: 0.25 in a loop reusing it; not page faults, 3 a step). So where BLAS runs on two
threads or more, a large fill is itself a BLAS call (`_fill`): the k=1 product
``ones(m, 1) @ b`` with beta=0, which BLAS's threads write in the parts of the output their
shares of the GEMM right after read.

The pass runs on the plan's items after `fusion.partition` and `rowfuse.fuse_rows` (so
only adds that stayed alone are taken: an add fused with a ReLU, or into a LayerNorm's row
kernel, already costs no pass of its own). It takes a group that is exactly one ``add`` of
a ``matmul``'s output (read by nothing else) and a bias broadcast along the product's
last dim, and replaces both by one `BiasGemm` step at the group's place. The step calls
`matmul_bias`, which falls back to the product and an add where BLAS cannot take the
operands as they are (a strided `x`, a BLAS numpy does not expose, a non-float dtype).

Backward: a bias gradient that no fused kernel sums (the packed q/k/v gradient
`attention_backward` writes, (2048, 768) float32) is a `sum` step over the leading dims of
a C-contiguous array. numpy's ``add.reduce`` over axis 0 runs at ~9 GB/s there (0.62-0.73
ms); the same sum as ``ones @ g`` (BLAS's GEMV) takes 0.36-0.42 ms and rounds less
(blocked float32 accumulation instead of one running sum per column). `ColumnSum` is that
step.

Values: the bias is added inside BLAS's accumulation instead of after it, so the result
can differ from the unfused form by rounding (K larger than BLAS's block of the inner
dimension), and a -0.0 bias element filled by the k=1 product reads +0.0 (0 + -0.0);
gradients are unchanged (the backward graph is built before this pass).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import ctypes

import numpy as np

from .cpu.gemm.router import SKINNY_DOT_MNK, SKINNY_MNK, SKINNY_THIN, matmul
from .cpu.runtime.coreshare import adapt, gemm_threads
from ..jit.ir import Eqn, Var
from .cpu.gemm.blas_gemm import gemm_address
from ..ops.linalg import MATMUL, matmul_rows
from ..threads import blas_threads
from .. import envflags
from .fusion import Group
from ..ops.elementwise import ADD
from ..ops.reductions import SUM

__all__ = ["BiasGemm", "ColumnSum", "fold_bias", "matmul_bias", "column_sum"]

# A plan pattern (compiler/plan_patterns.py): TRACEJIT_BIAS_GEMM=0 keeps the product and the
# add separate and the sums numpy's (A/B measurements, tests); TRACEJIT_BIAS_COLUMN_SUMS=0
# the sums alone.
_DTYPES = ("float32", "float64")
# The same as numpy dtypes, for the run-time calls: ``dtype.name`` is Python code in numpy
# (numpy/_core/_dtype.py), and right after a large GEMM or kernel has swept the caches it
# took 22-26 us of the MLP step's logits product (SCHED_FIFO, in-step median), against ~3.5 us
# warm; a dtype compares and hashes in C.
_NP_DTYPES = frozenset(np.dtype(t) for t in _DTYPES)
# Output elements from which the bias fill is a k=1 GEMM on BLAS's threads (`_fill`): 1 MB of
# float32 (OpenBLAS runs products below 256K multiply-adds on one thread itself). The
# Transformer step's q/k/v projection (2048 x 768), 2 threads forced, SCHED_FIFO, one process
# alternating, matmul_bias min/median ms: fill on one thread
# 2.95/3.55, 3.28/3.68; numpy's fill in row halves on a pair (sharepool.run_pair) 2.78/3.39,
# 2.82/3.47; the k=1 GEMM 3.00/3.39 in the same runs, and against the pair 2.69/3.23 vs
# 2.81/3.33, 2.53/3.16 vs 2.59/3.25. The LSTM head's 2048 x 64 stays on numpy's fill.
FILL_MIN = 1 << 18


@dataclass(eq=False)
class BiasGemm:
    """``out = x @ w + b`` as one step of a plan (the matmul and the add group it replaces)."""
    matmul: Eqn
    add: Eqn
    bias: Var
    inputs: list = field(default_factory=list)   # x, w, bias

    @property
    def outs(self) -> list:
        return [self.add.out]

    @property
    def defined(self) -> set:
        return {self.add.out}

    def describe(self) -> str:
        return "matmul + bias (one GEMM, beta=1)"

    def emit(self, nm, consts: dict) -> list:
        consts["I_matmul_bias"] = matmul_bias
        x, w = (nm(a) for a in self.matmul.inputs)
        return [f"    {nm(self.add.out)} = I_matmul_bias(xp, {x}, {w}, {nm(self.bias)})"]


@dataclass(eq=False)
class ColumnSum:
    """A `sum` over every dim but the last (a bias gradient) run as a GEMV with ones."""
    eqn: Eqn

    @property
    def inputs(self) -> list:
        return list(self.eqn.inputs)

    @property
    def outs(self) -> list:
        return list(self.eqn.outs)

    @property
    def defined(self) -> set:
        return set(self.eqn.outs)

    def describe(self) -> str:
        return "sum over rows (GEMV with ones)"

    def emit(self, nm, consts: dict) -> list:
        consts["I_column_sum"] = column_sum
        shape = tuple(int(d) for d in self.eqn.out.aval.shape)
        return [f"    {nm(self.eqn.out)} = I_column_sum(xp, {nm(self.eqn.inputs[0])}, {shape!r})"]


def _column_sum(e) -> bool:
    """`e` is a plan step summing a float CPU array over all its dims but the last."""
    if not (isinstance(e, Eqn) and e.prim is SUM and isinstance(e.inputs[0], Var)):
        return False
    a = e.inputs[0].aval
    r = len(a.shape)
    return (r >= 2 and a.dtype.name in _DTYPES and a.device.type == "cpu"
            and tuple(sorted(e.params["dims"])) == tuple(range(r - 1))
            and all(isinstance(d, int) for d in e.out.aval.shape))


def _bias_operand(add: Eqn, m: Var):
    """The other operand of `add` when it is a bias along `m`'s last dim, else None."""
    if len(add.inputs) != 2 or add.inputs.count(m) != 1:
        return None
    b = add.inputs[1] if add.inputs[0] is m else add.inputs[0]
    if not isinstance(b, Var) or b.aval.dtype != m.aval.dtype:
        return None
    bs, ms = tuple(b.aval.shape), tuple(m.aval.shape)
    if not bs or len(bs) > len(ms) or bs[-1] != ms[-1] or any(d != 1 for d in bs[:-1]):
        return None
    if tuple(add.out.aval.shape) != ms:
        return None
    return b


def fold_bias(items: list, graph) -> list:
    """`items` with each lone bias-add group after a matmul step replaced by a `BiasGemm`."""
    column_sums = envflags.enabled("TRACEJIT_BIAS_COLUMN_SUMS")
    readers: dict = {}
    producer: dict = {}
    for it in items:
        ins = it.inputs if isinstance(it, Group) else [a for a in it.inputs if isinstance(a, Var)]
        for a in ins:
            readers.setdefault(a, []).append(it)
        if isinstance(it, Eqn):
            for o in it.outs:
                producer[o] = it
    results = {a for a in graph.outputs if isinstance(a, Var)}
    drop: set = set()
    replace: dict = {}
    for it in items:
        if not (isinstance(it, Group) and len(it.eqns) == 1 and it.reduction is None):
            continue
        add = it.eqns[0]
        if add.prim is not ADD or it.outputs != [add.out]:
            continue
        mms = [a for a in add.inputs if isinstance(a, Var) and a in producer
               and producer[a].prim is MATMUL]
        if len(mms) != 1:
            continue
        m = mms[0]
        mm = producer[m]
        x, w = mm.inputs
        if (m in results or len(readers.get(m, ())) != 1 or m.aval.dtype.name not in _DTYPES
                or m.aval.device.type != "cpu" or not isinstance(x, Var) or not isinstance(w, Var)
                or len(x.aval.shape) < 2 or len(w.aval.shape) != 2):
            continue
        b = _bias_operand(add, m)
        if b is None:
            continue
        drop.add(id(mm))
        replace[id(it)] = BiasGemm(mm, add, b, [x, w, b])
    for it in items:
        if column_sums and _column_sum(it):
            replace[id(it)] = ColumnSum(it)
    if not replace:
        return items
    return [replace.get(id(it), it) for it in items if id(it) not in drop]


# ---- runtime -------------------------------------------------------------------------

_gemms: dict = {}    # numpy dtype -> cblas ?gemm as a ctypes function, or None


def _cblas(dtype):
    """ctypes function of numpy's BLAS cblas_?gemm for `dtype` (a numpy dtype), or None."""
    fn = _gemms.get(dtype, False)
    if fn is not False:
        return fn
    name = np.dtype(dtype).name
    found = gemm_address(name) if name in _DTYPES else None
    fn = None
    if found is not None:
        addr, bits = found
        i = ctypes.c_int64 if bits == 64 else ctypes.c_int
        f = ctypes.c_float if name == "float32" else ctypes.c_double
        p = ctypes.c_void_p
        fn = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, i, i, i, f,
                              p, i, p, i, f, p, i)(addr)
    _gemms[dtype] = fn
    return fn


_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_skinny_product = None   # gemm/skinny_gemm.product, once a head's logits needed it


def matmul_bias(xp, x, w, b):
    """``x @ w + b`` (x: (..., k), w: (k, n), b: n values in any shape (1, ..., n)): the
    output filled with b, then one GEMM with beta=1; a few columns of a transposed w (a
    head's logits) by compiler/cpu/gemm/skinny_gemm.py's dot kernel, the bias added in it; the product
    and an add otherwise."""
    n = w.shape[1]
    k = x.shape[-1]
    fn = _cblas(x.dtype) if xp is np and x.dtype == w.dtype == b.dtype else None
    # w's flags read once (w.T C-contiguous is w F-contiguous): each ``flags`` and each view
    # is a new object, and this runs on caches the forward's GEMMs and row kernels swept
    wf = w.flags
    w_c = wf.c_contiguous
    w_trans = wf.f_contiguous and not w_c
    if (fn is None or not x.flags.c_contiguous or not (w_c or w_trans)
            or w.shape[0] != k or k == 0 or n == 0):
        out = matmul_rows(matmul, x, w) if x.ndim > 2 else matmul(x, w)
        return xp.add(out, b.reshape(n), out=out)
    lead = x.shape[:-1]
    m = x.size // k if k else 0
    if SKINNY_MNK <= m * k * n < SKINNY_DOT_MNK and n <= SKINNY_THIN:   # a head's logits
        global _skinny_product
        if _skinny_product is None:    # (imported at the first: an import statement in every
            from .cpu.gemm.skinny_gemm import product as _skinny_product   # call cost ~4 us cold)
        flat = x.ndim == 2             # (no reshaped views where x is the matrix already)
        out = _skinny_product(x if flat else x.reshape(m, k), w, b)
        if out is not None:
            return out if flat else out.reshape(lead + (n,))
    out = np.empty(lead + (n,), dtype=x.dtype)
    if m == 0:
        return out
    adapt()
    with gemm_threads(m, k, n):
        _fill(fn, out, np.ascontiguousarray(b.reshape(n)), m, n)
        fn(_ROW_MAJOR, _NO_TRANS, _TRANS if w_trans else _NO_TRANS, m, n, k, 1.0,
           x.ctypes.data, k, w.ctypes.data, k if w_trans else n, 1.0, out.ctypes.data, n)
    return out


_ones: dict = {}   # dtype -> the longest ones vector `_ones_for` has made


def _ones_for(m: int, dtype):
    """m ones of `dtype` (a view of one kept vector: `_fill` and `column_sum` call it every
    step with the same lengths)."""
    ones = _ones.get(dtype)
    if ones is None or ones.shape[0] < m:
        ones = np.ones(m, dtype)
        ones.flags.writeable = False     # shared: no caller may write it
        _ones[dtype] = ones
    return ones[:m]


def _fill(fn, out, row, m: int, n: int) -> None:
    """The (m, n) C-contiguous `out` set to `row` in every row: from `FILL_MIN` elements,
    where BLAS runs on two threads or more, as the k=1 product ``ones(m, 1) @ row`` with
    beta=0 by `fn` (cblas_?gemm: 1.0 * row + nothing, exactly the bias), on BLAS's threads,
    each writing the part of the output its share of the GEMM that follows reads; by
    numpy's assignment on this thread otherwise (the k=1 product on one thread clears the
    output first: two passes)."""
    if m * n < FILL_MIN or (blas_threads() or 1) < 2:
        out[...] = row
        return
    ones = _ones_for(m, out.dtype)
    fn(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, m, n, 1, 1.0, ones.ctypes.data, 1, row.ctypes.data, n,
       0.0, out.ctypes.data, n)


def column_sum(xp, g, shape: tuple):
    """``g`` summed over every dim but the last, in `shape` (the sum's output shape, with
    or without kept dims): ``ones @ g`` by BLAS for a C-contiguous numpy float `g`."""
    n = g.shape[-1]
    if xp is np and g.flags.c_contiguous and g.dtype in _NP_DTYPES:
        m = g.size // n if n else 0
        return matmul(_ones_for(m, g.dtype), g.reshape(m, n)).reshape(shape)
    return xp.sum(g.reshape(-1, n), axis=0).reshape(shape)
