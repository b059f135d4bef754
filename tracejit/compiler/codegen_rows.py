"""Source of a fused row kernel (a `rowfuse.RowGroup`), and the plan lines that call it.

The kernel is the row op's loop from compiler/cpu/kernels/row_kernels.py (its statistics, LayerNorm's
output formula and backward, softmax's max and exponentials, filled in by
`row_kernels.source`) with the fused groups' work spliced in per element:

- each fused group becomes a helper ``pro_x`` / ``pro_g`` / ``epi`` whose body is the
  group's steps as every fused kernel writes them (`emitter.render_steps`: each op's own
  scalar rule), compiled without fastmath and inlined by LLVM with its own instruction
  flags (as codegen_cpu's ``element``): the row loop's ``fastmath={'reassoc'}`` (which
  its sums need to vectorize) never reaches the elementwise arithmetic;
- a prologue fills a row buffer (``xb``: the row op's ``x``; ``gb``: layer_norm_backward's
  incoming gradient) that the row op then reads instead of an array in memory;
- the epilogue runs on each output element ``y`` as the row op makes it.

Operands are read per role (`rowfuse.role`): "rows" through the row's view
(``r<j>[k]``), "bcast" through the view of its row ``ix<j>[i]`` (`bcast_rows`), "col" by
column (``in<j>[k]``), "scalar" once (``sc<j>``: the row code uses ``s1``, ``s2``). Sizes are
arguments (``m`` rows of ``cols``), so one kernel serves every batch size.
"""
from __future__ import annotations

import numpy as np

from .cpu.runtime import cshares, sharepool
from .cpu.kernels import row_kernels
from . import llvmopts
from .codegen_cpu import CpuEmitter
from .emitter import NUMBA_TYPE, render_steps
from .loopnest import lower
from ..ops.layer_norm_prim import LAYER_NORM, LAYER_NORM_BACKWARD
from ..ops.softmax_prim import SOFTMAX
from .rowfuse import ROW_PRIMS, RowGroup

__all__ = ["RowSpec", "render", "emit"]

I2, I3 = " " * 8, " " * 12


class RowSpec:
    """A rendered row kernel, shaped like codegen_cpu.KernelSpec where the plan, the tiers
    and the backend's loader look (``source``, ``llvm_options``, ``chunked``, ``nest.layouts``)."""

    chunked = False
    # the share form is serial nogil code launched in shares (RowShares): it compiles as fast
    # as the serial twin, so it needs no tiered stage 1 (compiler/tiers.py)
    parfor = False
    mode = "rows"
    form = "rows"

    class _Nest:
        layouts = ("rows",)

    def __init__(self, source: str, name: str, llvm_options: tuple, parallel: bool, pair: str = ""):
        self.source = source
        self.parallel = parallel
        self.name = name
        self.nest = self._Nest()
        self.llvm_options = llvm_options
        # the share form's GIL-free pair (compiler/cpu/runtime/cshares.py): ``source`` + this, a module of
        # its own compiled after the kernel ("" where the argument types have no table form)
        self.pair = pair


def _helper(group, name: str) -> tuple:
    """(source lines of helper `name` computing `group`'s outputs from its inputs, imports).
    The helper has no CPython wrapper (only the row kernel calls it, and LLVM inlines it):
    a wrapper boxing its tuple was ~0.01 s of compile per helper in every job."""
    layouts = tuple("scalar" if all(isinstance(d, int) and d == 1 for d in v.aval.shape)
                    and tuple(v.aval.shape) != tuple(group.shape) else
                    "flat" if tuple(v.aval.shape) == tuple(group.shape) else "ndc" for v in group.inputs)
    nest = lower(group, layouts, name)
    comp, emitters = render_steps(nest, CpuEmitter)
    imports = set().union(*(em.imports for em in emitters)) if emitters else set()
    rets = [o.value for o in nest.outputs]
    lines = ["@njit(cache=False, error_model='numpy', fastmath=False, no_cpython_wrapper=True)",
             f"def {name}({', '.join(op.name for op in nest.operands)}):",
             "    _always_inline()"] + ["    " + c for c in comp]
    lines += [f"    return ({', '.join(rets)},)", "", ""]
    return lines, imports


def render(rg: RowGroup, parallel: bool = False) -> RowSpec:
    """The numba source of `rg`'s kernel (calling convention: `arguments`): a loop over the
    rows, or (``parallel``) the share form, chunks of rows claimed by the shares of a launch
    (`_parallel_loop`, launched by `RowShares`; serial ``nogil`` code, no prange)."""
    e = rg.eqn
    dt = e.out.aval.dtype.name
    nt = NUMBA_TYPE[dt]
    backward = e.prim is LAYER_NORM_BACKWARD
    softmax = e.prim is SOFTMAX
    xv = e.inputs[ROW_PRIMS[e.prim]]
    ins, outs = rg.inputs, rg.outputs
    idx_in = {v: j for j, v in enumerate(ins)}
    idx_out = {v: j for j, v in enumerate(outs)}
    helpers, imports = [], {"_always_inline"}

    def read(v, local: dict) -> str:
        """Source reading value `v` at element k of row i."""
        if v in local:
            return local[v]
        role = rg.roles[v]
        j = idx_in[v]
        return {"rows": f"r{j}[k]", "bcast": f"r{j}[k]", "col": f"in{j}[k]", "scalar": f"sc{j}"}[role]

    def splice(group, name, local: dict, ind: str, t: str = "t") -> list:
        """Lines calling `group`'s helper at element k (its results in tuple `t`) and
        storing what must be written; `local` gets the group's values the row op reads."""
        lines, imp = _helper(group, name)
        helpers.extend(lines)
        imports.update(imp)
        args = ", ".join(read(a, local) for a in group.inputs)
        body = [f"{ind}{t} = {name}({args})"]
        for m, v in enumerate(group.outputs):
            if v in idx_out:
                body.append(f"{ind}p{idx_out[v]}[k] = {t}[{m}]")
        return body, {v: f"{t}[{m}]" for m, v in enumerate(group.outputs)}

    cs = rg.col_sum
    # The work on row i, at the row loop's indentation (I2): its operands' row views, the
    # prologues into the row buffers, the row op, the epilogue.
    rowbody = [f"{I2}r{j} = in{j}[i]" for j, v in enumerate(ins) if rg.roles[v] == "rows"]
    rowbody += [f"{I2}r{j} = in{j}[ix{j}[i]]" for j, v in enumerate(ins) if rg.roles[v] == "bcast"]
    rowbody += [f"{I2}p{j} = out{j}[i]" for j, v in enumerate(outs)
                if not ((backward or softmax) and v is e.out) and not (cs is not None and v is cs.out)]
    local: dict = {}
    if rg.x_pro is not None:
        calls, vals = splice(rg.x_pro, "pro_x", {}, I3)
        rowbody += [f"{I2}row = xb", f"{I2}for k in range(cols):"] + calls + [f"{I3}xb[k] = {vals[xv]}"]
        x_loop_end = len(rowbody)
    else:
        rowbody.append(f"{I2}row = r{idx_in[xv]}")
    local[xv] = "row[k]"
    if backward:
        gv = e.inputs[0]
        rest = row_kernels.LN_BACKWARD_ROW
        ye = rg.y_eqn
        if ye is not None:
            # the statistics first: the gradient's chain reads LayerNorm's output, made here
            # by its own formula from them (the forward kernel's value, bit for bit)
            assert rest.startswith("STATS\n")
            rowbody.append("STATS")
            rest = rest[len("STATS\n"):]
            local[ye.out] = "yv"
        if rg.g_pro is not None:
            if rg.g_view is not None:       # the group's value, before the reshape to x's shape
                gv = rg.g_view.inputs[0]
            calls, vals = splice(rg.g_pro, "pro_g", local, I3, "tg")
            if ye is None and rg.x_pro is not None:
                # both prologues in one loop (elementwise: the same values; x's element k
                # is in xb when the gradient's chain reads it). The row statistics stay a
                # loop of their own: summed in this loop as well (the same sums, the same
                # bits) the kernel took 2.3x as long (2048x256 float32, one thread, 0.96
                # against 0.41 ms; LLVM's vectorized loop with stores and two reductions)
                rowbody[x_loop_end:x_loop_end] = calls + [f"{I3}gb[k] = {vals[gv]}"]
                rowbody.append(f"{I2}gr = gb")
            else:
                head = [f"{I2}for k in range(cols):"]
                if ye is not None:
                    head.append(f"{I3}yv = {_ln_y(ye, idx_in)}")
                rowbody += head + calls + [f"{I3}gb[k] = {vals[gv]}", f"{I2}gr = gb"]
        else:
            rowbody.append(f"{I2}gr = r{idx_in[gv]}")
        if cs is not None:
            # dx summed over the rows as it is made (in the dx loop, not a loop of its own
            # reading the row back): in the data's dtype over the same blocks of rows as
            # dweight and dbias, in float64 across blocks
            dx = row_kernels.LN_BACKWARD_DX
            assert rest.endswith(dx)
            val = dx.split(" = ", 1)[1]
            rest = rest[:-len(dx)] + f"{I3}dxv = {val}\n{I3}o[k] = dxv\n{I3}dxsb[k] += dxv"
        rowbody += [f"{I2}o = out{idx_out[e.out]}[i]", rest]
    elif softmax:
        # row_kernels' softmax on the row buffer: its max, then SOFTMAX_EXP's two passes
        rowbody += [f"{I2}z = row", f"{I2}o = out{idx_out[e.out]}[i]", f"{I2}n = cols", "ROWMAX", "SOFTMAXEXP"]
    else:
        rowbody += ["STATS", f"{I2}for k in range(n):", f"{I3}y = LN_Y"]
        if e.out in idx_out:
            rowbody.append(f"{I3}p{idx_out[e.out]}[k] = y")
        if rg.epi is not None:
            local[e.out] = "y"
            calls, _ = splice(rg.epi, "epi", local, I3)
            rowbody += calls
    rowtext = row_kernels.source("\n".join(rowbody), dt)
    body = [f"    sc{j} = in{j}[0]" for j, v in enumerate(ins) if rg.roles[v] == "scalar"]
    if softmax:
        body.append(f"    sc = np.{dt}(scale)")
    body += _serial_loop(rg, rowtext, dt, idx_out) if not parallel else _parallel_loop(rg, rowtext, dt, idx_out)
    ro2, ro1 = f"Array({nt}, 2, 'C', readonly=True)", f"Array({nt}, 1, 'C', readonly=True)"
    ix = "Array(int64, 1, 'C', readonly=True)"
    sig = []
    for v in ins:
        vt = NUMBA_TYPE[v.aval.dtype.name]       # (a bool mask: its own dtype)
        a2, a1 = f"Array({vt}, 2, 'C', readonly=True)", f"Array({vt}, 1, 'C', readonly=True)"
        sig += [a2] if rg.roles[v] == "rows" else [a2, ix] if rg.roles[v] == "bcast" else [a1]
    sig += [f"{nt}[:, ::1]"] * len(outs)
    sig += [ro1] * (0 if softmax else 1 if backward else 2) + ["int64", "int64", "float64"]
    args = arguments(rg)
    if parallel:     # the share form's own: partial sums (backward), the chunk counter, the share
        sig += ["float64[:, :, ::1]"] * bool(partial_sums(rg)) + ["int64[::1]", "int64", "int64"]
        args = args + ["part"] * bool(partial_sums(rg)) + ["next_chunk", "share", "shares"]
    # 256-bit vectors (no WIDE_VECTORS): a row's statistics are reassociated sums, and a
    # 512-bit loop adds them in another order than the LayerNorm / softmax primitives' own
    # row kernels (compiler/cpu/kernels/row_kernels.py, LLVM's default width): a fused row kernel must give
    # the unfused plan's results bit for bit (tests/compiler/test_rowfuse.py)
    options = llvmopts.kernel_options(len(outs), True, "map", wide=False)
    src = ["# generated by tracejit (CPU backend, row kernel); sizes are arguments, never constants"]
    if options:
        src.append(f"# compiled with LLVM options: {' '.join(options)}")
    src += ["import numpy as np", "from numba import njit", f"from tracejit.compiler.mathlib import {', '.join(sorted(imports))}"]
    if parallel:
        src.append("from tracejit.compiler.cpu.runtime.claim import claim")
    if softmax:
        src += ["from tracejit.compiler.mathlib import exp_{s} as EXP", "ROWMAXBITS"]
    src += ["", ""]
    src += helpers
    src += [f"@njit({'void(' + ', '.join(sig) + ')'!r}, nogil={parallel}, cache=CACHE, error_model='numpy',",
            "      boundscheck=False, fastmath={'reassoc'})",
            f"def kernel({', '.join(args)}):",
            f'    """row kernel: {rg.describe()}"""']
    src += body
    text = row_kernels.source("\n".join(src) + "\n", dt)
    pair = ""
    if parallel:     # its GIL-free two-share launch (compiler/cpu/runtime/cshares.py), where the types allow
        try:
            pair = cshares.source(sig[:-2], args[:-2])
        except ValueError:   # an argument type without a table form: the Python-callback launch
            pass
    return RowSpec(text, "kernel", options, parallel, pair)


def _ln_y(ye, idx_in: dict) -> str:
    """LayerNorm's output formula (row_kernels.LN_Y) with `ye`'s own weight and bias."""
    w, b = ye.params["affine"]
    wb = list(ye.inputs[1:])
    y = row_kernels.LN_Y
    y = y.replace(" * w[k]", f" * in{idx_in[wb.pop(0)]}[k]" if w else "")
    return y.replace(" + b[k]", f" + in{idx_in[wb.pop(0)]}[k]" if b else "")


# Chunks of rows of a parallel row kernel: at most CHUNKS, of at least CHUNK_ROWS rows
# (chosen from the sizes alone, so results never depend on the thread count).
CHUNKS = 16
CHUNK_ROWS = 16

# Row kernels run serially below this many elements (fused elementwise kernels: from
# threads.PARALLEL_MIN, 16K, on). A row kernel comes right after a GEMM (the bias add ->
# LayerNorm -> GELU after x @ W, its backward after the weight gradient's product) whose
# OpenBLAS worker keeps busy-waiting on the other core for a while. When the parallel
# variant was a prange, numba's worker woken there started late and the join waited for
# it: in the MLP step on 2 cores (load 4.1-4.6) the four row kernels took per step,
# parallel on 1 thread / parallel on 2 / serial (min/median ms): batch 256 (256K elements
# each) 1.47/1.54, 1.76/1.77, 1.43/1.46; batch 1024 (1M) 6.39/6.53, 6.68/6.71, 6.27/6.37;
# alone, without the GEMM before them, 2x faster on 2 threads (256K: 218 -> 109 us). So
# softmax's row kernels stay serial below 2M elements (ROW_PARALLEL_MIN).
# The parallel variant is now the share form (`_parallel_loop`, `RowShares`): share 1 runs
# on that spinning OpenBLAS worker itself and chunks are claimed, so a late share delays
# nothing. LayerNorm's backward row kernels use it from LN_BACKWARD_PARALLEL_MIN: in the
# MLP step (256 x 1024, SCHED_FIFO quiet emulation, one process alternating) 416-426 us a
# call against 448-464 serial (median, 4 chunks of 64 rows; share 1 starts ~100 us after the call, ~70 after share
# 0: the worker's pickup and the GIL for unboxing); the forward ones (16 chunks of 16 rows)
# were slower so (259-268 against 240-247 us: the launch costs ~35 us before share 0
# starts) and stayed serial below ROW_PARALLEL_MIN, as softmax's do. That launch was a ctypes
# Python callback per share (each share takes the GIL to unbox its arguments: 60-120 us a
# launch on the 2-core VM); launched GIL-free (compiler/cpu/runtime/cshares.py) the forward kernel takes
# 116-144 us in two shares right after a GEMM against 209-234 serial, and the
# MLP step's forward phase 3.98 ms against 4.20 (median, SCHED_FIFO, one process
# alternating): LayerNorm's forward row kernels use the share form from
# LN_FORWARD_PARALLEL_MIN too.
ROW_PARALLEL_MIN = 1 << 21
LN_BACKWARD_PARALLEL_MIN = 1 << 17
LN_FORWARD_PARALLEL_MIN = 1 << 17


def parallel_min(prim=SOFTMAX) -> int:
    """The element count from which row kernels of primitive `prim` run their parallel
    variant (the share form)."""
    from ..threads import PARALLEL_MIN
    least = ROW_PARALLEL_MIN
    if prim is LAYER_NORM_BACKWARD:
        least = min(least, LN_BACKWARD_PARALLEL_MIN)
    elif prim is LAYER_NORM:
        least = min(least, LN_FORWARD_PARALLEL_MIN)
    return max(PARALLEL_MIN, least)


def _serial_loop(rg, rowtext: str, dt: str, idx_out: dict) -> list:
    """One loop over the rows; the backward's weight/bias gradients as the eager kernel
    sums them (row_kernels' text)."""
    e, cs = rg.eqn, rg.col_sum
    out = []
    if rg.x_pro is not None:
        out.append(f"    xb = np.empty(cols, np.{dt})")
    if rg.g_pro is not None:
        out.append(f"    gb = np.empty(cols, np.{dt})")
    if e.prim is not LAYER_NORM_BACKWARD:
        return out + ["    for i in range(m):", rowtext]
    fold = row_kernels.LN_BACKWARD_FOLD.replace("out[", f"out{idx_out[e.out]}[")
    out.append(row_kernels.LN_BACKWARD_INIT)
    if cs is not None:
        out.append(row_kernels.zeroed([("dxs", "float64"), ("dxsb", dt)]))
        fold = fold.replace("                dbb[k] = 0\n", "                dbb[k] = 0\n"
                            "                dxs[k] += dxsb[k]\n                dxsb[k] = 0\n")
        fold += f"\n    for k in range(cols):\n        out{idx_out[cs.out]}[0, k] = dxs[k]"
    return out + ["    for i in range(m):", rowtext, row_kernels.source(fold, dt)]


def _parallel_loop(rg, rowtext: str, dt: str, idx_out: dict) -> list:
    """The share form: chunks of rows claimed one at a time from the launch's counter
    (``next_chunk``, compiler/cpu/runtime/claim.py) by each share of the launch (`RowShares`); each share
    has its own row buffers and each chunk (backward) its own float64 partial sums of the
    weight/bias gradients in ``part``, which the launch's last call (share == shares) adds in chunk
    order (a share that ran alone folds at once). Which share runs a chunk changes nothing:
    the same results on any thread count."""
    e, cs = rg.eqn, rg.col_sum
    backward = e.prim is LAYER_NORM_BACKWARD
    rows = row_kernels.ROWS if backward else CHUNK_ROWS
    out = [f"    nchunk = max(1, min({CHUNKS}, m // {rows}))"]
    sums = 3 if cs is not None else 2
    # Buffers: this call's own (a share's), reused by its chunks; the gradients' block sums
    # are zero again at the end of each chunk (each block is added to part and cleared).
    # (Views of one array shared by the chunks kept LLVM from telling them apart from the
    # rows written, and the backward's accumulation loops stopped vectorizing: 1.03 against
    # 0.86 ms serial, 256x1024.)
    if rg.x_pro is not None:
        out.append(f"    xb = np.empty(cols, np.{dt})")
    if rg.g_pro is not None:
        out.append(f"    gb = np.empty(cols, np.{dt})")
    names = ["dwb", "dbb", "dxsb"][:sums]
    if backward:
        out.append(row_kernels.zeroed([(nm, dt) for nm in names]))
    out += ["    while share < shares:", "        ch = claim(next_chunk)", "        if ch >= nchunk:",
            "            break", "        lo = ch * m // nchunk", "        hi = (ch + 1) * m // nchunk"]
    if backward:
        out.append("        part[ch] = 0.0")
    out += ["        for i in range(lo, hi):", "\n".join("    " + x if x else x for x in rowtext.split("\n"))]
    if not backward:
        return out
    # the eager kernel's blocks of ROWS rows (counted from the chunk's first row), each
    # added to the chunk's float64 partial sums
    out += [f"            if (i - lo) % {row_kernels.ROWS} == {row_kernels.ROWS - 1} or i == hi - 1:",
            "                for k in range(cols):"]
    for q, nm in enumerate(names):
        out += [f"                    part[ch, {q}, k] += {nm}[k]", f"                    {nm}[k] = 0"]
    # the fold: by a share that ran alone (shares == 1) right after its chunks, else by
    # the launch's last call (share == shares), after every share ended
    j = idx_out[e.out]
    out += ["    if share < shares and shares > 1:", "        return", "    for k in range(cols):"]
    out += [f"        acc{q} = 0.0" for q in range(sums)]
    out += ["        for ch in range(nchunk):"] + [f"            acc{q} += part[ch, {q}, k]" for q in range(sums)]
    out += [f"        out{j}[m, k] = acc0", f"        out{j}[m + 1, k] = acc1"]
    if cs is not None:
        out.append(f"        out{idx_out[cs.out]}[0, k] = acc2")
    return out


def partial_sums(rg: RowGroup) -> int:
    """Float64 partial sums per column and chunk of the share form's ``part`` (0: none)."""
    if rg.eqn.prim is not LAYER_NORM_BACKWARD:
        return 0
    return 3 if rg.col_sum is not None else 2


class RowShares:
    """A row kernel's share form as the plan calls it (the kernel's own arguments): its
    shares on the cores other processes leave (`sharepool.launch`: with two, share 1 on
    OpenBLAS's worker, which busy-waits on that core after the GEMM a row kernel follows),
    then, for a backward run in more than one share, the fold call. Two shares run through
    the GIL-free share entry (`pair`, compiler/cpu/runtime/cshares.py) once its module is loaded (compiled
    apart from the kernel: in background mode by the compile workers, so the plan never waits
    for it; until then, and where it cannot run, through sharepool's launch)."""

    __slots__ = ("kernel", "entry", "sums", "pair", "pending")

    def __init__(self, kernel, entry, sums: int, pending=None):
        self.kernel = kernel      # the numba dispatcher
        self.entry = entry        # its compiled entry point
        self.sums = sums
        self.pair = None          # cshares.CShares: both shares without the GIL, once loaded
        self.pending = pending    # cshares.Pending: the pair's module until it is loaded

    def __call__(self, *args):
        counter = np.zeros(1, np.int64)
        if self.sums:
            # sized to the kernel's chunk count (`_parallel_loop`'s nchunk): the 16-chunk
            # bound's 393 KB for 1024 columns was a fresh mmap and its page faults per call
            m, cols = args[-3], args[-2]
            nchunk = max(1, min(CHUNKS, m // row_kernels.ROWS))
            args += (np.empty((nchunk, self.sums, cols), np.float64), counter)
        else:
            args += (counter,)
        nt = sharepool.pool_threads()
        if self.pending is not None:
            self.pair, self.pending = self.pending.poll()
        if (nt == 2 and self.pair is not None and sharepool.pair_on_blas_worker()
                and sharepool.try_launch()):
            try:
                self.pair(args)
            finally:
                sharepool.end_launch()
            shares = 2
        else:
            shares = sharepool.launch(self.entry, args, nt)
        if self.sums and shares > 1:
            self.entry(*args, shares, shares)     # the fold, after every share ended


def arguments(rg: RowGroup) -> list:
    """The kernel's parameters: inputs (a "bcast" one with its row index), outputs, the row
    op's weight (and bias), sizes, eps (softmax: its scale)."""
    prim = rg.eqn.prim
    ins = []
    for j, v in enumerate(rg.inputs):
        ins += [f"in{j}", f"ix{j}"] if rg.roles[v] == "bcast" else [f"in{j}"]
    own = {LAYER_NORM: ["w", "b"], LAYER_NORM_BACKWARD: ["w"], SOFTMAX: []}[prim]
    return (ins + [f"out{j}" for j in range(len(rg.outputs))] + own
            + ["m", "cols", "scale" if prim is SOFTMAX else "eps"])


def bcast_rows(a, shape: tuple, n: int) -> tuple:
    """(distinct rows of `a`, C-contiguous (R, K), and the row of them each of the (M, K)
    rows of `shape` reads): a "bcast" operand (whole along the last `n` dims, broadcast
    along leading ones) is not copied out to full size."""
    import numpy as np
    a = a.reshape((1,) * (len(shape) - a.ndim) + tuple(a.shape))
    lead = a.shape[:len(shape) - n]
    rows = np.ascontiguousarray(a).reshape(-1, int(np.prod(shape[len(shape) - n:], dtype=np.int64)))
    ids = np.arange(rows.shape[0], dtype=np.int64).reshape(lead)
    return rows, np.ascontiguousarray(np.broadcast_to(ids, tuple(shape[:len(shape) - n]))).reshape(-1)


class RowKernel:
    """A row group's kernel: the interface of plan._Kernel (one variant, serial)."""

    def __init__(self, rg: RowGroup, label: str, backend):
        self.group = rg
        self.label = label
        self.backend = backend
        self.variants: dict = {}
        self.sources: dict = {}
        self._specs: dict = {}

    def spec(self, layouts=(), parallel=False) -> RowSpec:
        spec = self._specs.get(((), parallel))
        if spec is None:
            spec = self._specs[((), parallel)] = render(self.group, parallel)
        return spec

    def get(self, layouts=(), parallel=False):
        key = ((), parallel)
        fn = self.variants.get(key)
        if fn is None:
            spec = self.spec(layouts, parallel)
            pending = None
            if spec.pair:
                # the GIL-free pair: in the kernel's module where compiles are synchronous (one
                # module, one compile), else a module of its own the workers build later
                from .prepare import compile_mode
                if compile_mode(None) == "background":
                    pending = cshares.Pending(spec.source, spec.pair, self.label, spec.llvm_options,
                                              self.backend.fast_entry)
                else:
                    spec = RowSpec(spec.source + spec.pair, spec.name, spec.llvm_options, parallel)
            from ..errors import CompileError
            try:
                # the share form is serial code too: launched by RowShares, not numba's threads
                fn = self.backend.load(spec, self.label, False)
            except Exception as exc:
                raise CompileError(f"compiling the row kernel {self.label} ({self.group.describe()}) "
                                   f"failed: {type(exc).__name__}: {exc}\ngenerated source:\n{spec.source}") from exc
            if parallel:
                fn = RowShares(fn, self.backend.fast_entry(fn), partial_sums(self.group),
                               pending or cshares.Ready(fn, self.backend.fast_entry))
            self.variants[key] = fn
            self.sources[key] = spec.source
        return fn


def _dims(shape) -> str:
    from ..shapes import Sym
    parts = [d.to_python() if isinstance(d, Sym) else str(int(d)) for d in shape]
    return " * ".join(parts) or "1"


def emit(plan, rg: RowGroup, nm, consts, shape_code, dtype_const) -> list:
    """The plan's lines running `rg` (allocating its outputs), registering its kernel."""
    import numpy as np
    k = len(plan.kernels)
    kern = RowKernel(rg, f"{plan.name}_r{k}", plan.backend)
    plan.kernels.append(kern)
    kname = f"K{k}"
    consts[kname] = kern
    e = rg.eqn
    shape, n = rg.rows_shape, rg.n
    cols = _dims(shape[len(shape) - n:])
    rows = _dims(shape[:len(shape) - n])
    consts["ROWS2"] = row_kernels._rows
    consts["VEC"] = np.ravel
    consts["BROWS"] = bcast_rows
    dt = dtype_const(e.out.aval.dtype, consts)
    lines = []
    for v in rg.outputs:
        lines.append(f"    {nm(v)} = xp.empty({shape_code(v.aval.shape)}, {dtype_const(v.aval.dtype, consts)})")
    args = []
    for v in rg.inputs:
        role = rg.roles[v]
        args.append(f"ROWS2({nm(v)}, {cols})" if role == "rows" else
                    f"*BROWS({nm(v)}, {shape_code(shape)}, {n})" if role == "bcast" else f"VEC({nm(v)})")
    args += [f"{nm(v)}.reshape(1, {cols})" if rg.col_sum is not None and v is rg.col_sum.out
             else f"{nm(v)}.reshape(-1, {cols})" for v in rg.outputs]
    own = list(e.inputs[ROW_PRIMS[e.prim] + 1:])
    if e.prim is SOFTMAX:
        pass
    elif e.prim is LAYER_NORM_BACKWARD:
        args.append(f"VEC({nm(own[0])})" if e.params["has_w"] else f"np.ones({cols}, {dt})")
    else:
        aff = e.params["affine"]
        wb = list(own)
        args.append(f"VEC({nm(wb.pop(0))})" if aff[0] else f"np.ones({cols}, {dt})")
        args.append(f"VEC({nm(wb.pop(0))})" if aff[1] else f"np.zeros({cols}, {dt})")
    last = e.params.get("scale", 1.0) if e.prim is SOFTMAX else e.params["eps"]
    args += [rows, cols, repr(float(last))]

    # serial below `parallel_min()` elements, the share form above
    from .plan import _serial_only
    least = parallel_min(e.prim)
    static = None if any(not isinstance(d, int) for d in shape) else int(np.prod(shape))
    serial_only = bool(_serial_only)
    twins = []
    if (static is None or static >= least) and not serial_only:
        twins.append((f"{kname}p", True))
    if static is None or static < least or serial_only:
        twins.append((f"{kname}s", False))
    for name, parallel in twins:
        consts[name] = _first_call(kern, parallel, consts, name)
        plan.first_variants.append((kern, (), parallel))
        kern.spec((), parallel)   # rendered now: generator errors surface at capture
    call = ", ".join(args)
    if len(twins) == 1:
        lines.append(f"    {twins[0][0]}({call})")
    else:
        consts["ROW_PARALLEL_MIN"] = least
        lines += [f"    if {rows} * {cols} >= ROW_PARALLEL_MIN:", f"        {kname}p({call})",
                  "    else:", f"        {kname}s({call})"]
    return lines


def _first_call(kern, parallel: bool, consts: dict, name: str):
    """The plan global `name` until its first call loads the kernel (then the kernel)."""
    def first_call(*a):
        fn = kern.get((), parallel)
        fn = fn if parallel else kern.backend.fast_entry(fn)
        consts[name] = fn
        return fn(*a)
    return first_call
