"""The backend-neutral description of one fused group's kernel, and `lower`, which makes it.

A fused group (`fusion.Group`) is lowered once, here, into a `LoopNest`: everything a
backend needs to write the kernel, decided in one place:

- the *iteration space*: the group's rank (sizes are arguments) and whether it is walked
  ``flat`` (every operand of the iteration shape in C order, or a single value);
- the *operands*: each input's layout (`LAYOUTS`) and the iteration dim each of its dims
  follows (None where broadcast);
- the *scalar expression DAG*: one `Step` per equation with its compute dtype and typed
  constants; a backend renders a step through the primitive's own ``scalar`` rule, so an
  op's scalar lowering lives in its record, never in a backend;
- the *outputs* and the *reduction epilogue* (combine, dims, `accumulation`, initial value);
- a rows group's per-row reductions (`LoopNest.rows`, ordered into passes by rowpasses.py)
  and per-column sums (`LoopNest.cols`); a windows group's window read (`LoopNest.window`:
  a pooling forward's fold or backward's gather, codegen_cpu_windows.py);
- the *calling convention* (`LoopNest.arguments`): inputs, per-element outputs, the
  reduction's output, then the sizes (``n`` for a flat nest, ``d0..`` otherwise), the
  same for every backend.

`lower_op` describes one elementwise op alone the same way, for the eager kernels. A new
backend is a renderer of this description and a `backends.Backend`; a new elementwise op is
a ``scalar`` rule in its record. Nothing here changes for either.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ..jit.ir import Literal
from ..ops.registry import Aval

__all__ = ["LAYOUTS", "Const", "Step", "Operand", "Output", "Reduction", "Window", "Scatter", "LoopNest", "lower",
           "lower_op", "accumulation", "operand_layouts", "SUM_BLOCK", "ARG_BLOCK"]

#: Operand layouts: "flat" (the iteration shape, C-contiguous), "scalar" (one element, read
#: before the loops), "ndc" (indexed per dim, known C-contiguous so the inner loop
#: vectorizes), "nd" (any strides) and "cm" ((N, C, H, W) passed as its C-contiguous
#: (C, N, H, W) view, plan.py `_channel_major`).
LAYOUTS = ("flat", "scalar", "ndc", "nd", "cm")

# Elements summed in float32 before each float64 accumulation (see `Reduction.block_dtype`).
SUM_BLOCK = 256
# An argmax's row up to this long is one scan keeping the index; a longer one is folded by
# blocks this long, of which the first holding the extreme is read again (codegen_cpu_loops).
ARG_BLOCK = 64


@dataclass(frozen=True)
class Const:
    """A constant operand of a step, in the dtype the kernel must type it in."""
    value: object
    dtype: str


@dataclass(frozen=True)
class Step:
    """``name = prim.scalar(emitter(dtype), *args, **params)``: one node of the DAG."""
    name: str          # "v<j>"
    prim: object       # the Primitive; its ``scalar`` rule writes the expression
    args: tuple        # names of operands/earlier steps (str) or `Const`
    params: tuple      # the equation's params, as (key, value) pairs
    dtype: str         # the dtype the operation computes in (constants, math functions)
    note: str          # "mul": the op, for a comment (not the user's line: see `lower`)
    out_dtype: str = ""  # the dtype of its result


@dataclass(frozen=True)
class Operand:
    """Input k of the kernel: array argument ``in<k>``, its element value ``x<k>``."""
    k: int
    var: object
    dtype: str
    layout: str
    index: tuple       # per dim of the operand: the iteration dim it follows, or None (broadcast)
    offset: tuple = ()  # per dim, added to its index: a slice read in place (slice_reads.py)

    @property
    def name(self) -> str:
        return f"x{self.k}"

    def subscript(self) -> str:
        """The operand's element index in loop indices ``i<d>`` (0 on broadcast dims)."""
        if not self.index:
            return "0"
        off = self.offset or (0,) * len(self.index)
        return ", ".join(str(o) if d is None else f"i{d} + {o}" if o else f"i{d}"
                         for d, o in zip(self.index, off))

    @property
    def array(self) -> str:
        return f"in{self.k}"

    @property
    def load(self) -> str:
        """The statement reading the operand's element: ``x<k> = in<k>[subscript]``."""
        return f"{self.name} = {self.array}[{self.subscript()}]"

    @property
    def rank(self) -> int:
        return len(self.index)

    @property
    def contiguous(self) -> bool:
        return self.layout != "nd"


@dataclass(frozen=True)
class Output:
    """Per-element output m: array argument ``out<m>`` (iteration shape), set to `value`."""
    m: int
    var: object
    dtype: str
    value: str         # the step (or operand) name whose value is stored
    row: bool = False  # a rows nest's per-row value: the iteration shape with last dim 1
    col: bool = False  # a rows nest's sum over its rows: dims 1 but the last
    cm: bool = False   # written into (C, N, H, W) memory (windows.channel_major_outputs)

    @property
    def array(self) -> str:
        return f"out{self.m}"


@dataclass(frozen=True)
class Reduction:
    """The epilogue: `value` folded over `dims` with `combine`, into array ``red``."""
    combine: str       # "add" | "mul" | "max" | "min" | "argmax" | "argmin" (the first
    #                    extreme's index along its one dim, the first nan's where one is)
    dims: tuple        # reduced iteration dims
    kept: tuple        # the others, in order: the output's dims
    value: str         # the step name reduced
    var: object        # the reduction's output Var
    out_dtype: str
    acc_dtype: str     # see `accumulation`
    block_dtype: Optional[str]  # float32 sums: run SUM_BLOCK elements in this dtype first
    k: int = 0         # an argmax/argmin keeping its k best indices, best first (topk)

    @property
    def full(self) -> bool:
        return not self.kept

    @property
    def indexed(self) -> bool:
        """An argmax/argmin: its accumulator (`acc_dtype`) is the value's dtype."""
        return self.combine in ("argmax", "argmin")

    @property
    def leading(self) -> bool:
        """Over every dim but the last (a bias gradient: the sum over the batch)."""
        return len(self.kept) == 1 and self.kept[0] == len(self.kept) + len(self.dims) - 1

    def init(self):
        """The fold's initial value (a Python number, or a bool)."""
        if self.combine == "add":
            return 0
        if self.combine == "mul":
            return 1
        dt = self.acc_dtype
        if dt.startswith("float"):
            return -math.inf if self.combine == "max" else math.inf
        if dt == "bool":
            return self.combine != "max"
        import numpy as np
        info = np.iinfo(dt)
        return info.min if self.combine == "max" else info.max


@dataclass(frozen=True)
class Window:
    """A window read over the (N, C, H, W) iteration space (windows.py names the kinds).
    Forward kinds ("max_record", "max", "avg") fold `value` at each window position into
    output 0 (for "max_record" also each window's first-maximum offset); gather kinds
    ("scatter", "avg_backward") define ``w`` per input element from the gradient `grad`
    (and `record`) of the windows holding it."""
    kind: str
    kernel: tuple
    stride: tuple
    padding: tuple
    dilation: tuple
    dtype: str
    value: Optional[str] = None   # forward: the name folded
    grad: Optional[int] = None    # gather: the operand holding the output-shaped gradient
    record: Optional[int] = None  # scatter: the operand holding the max record

    @property
    def gather(self) -> bool:
        return self.kind in ("scatter", "avg_backward")


@dataclass(frozen=True)
class Scatter:
    """A scatter nest's store (scatters.py): output 0, a copy of operand `base` (None: every
    element `fill`), gets ``out0[index[i0..i<k-1>], i<k>, ...] += value`` at each point of the
    iteration space (the updates), operand `index` (negative rows counted from the end) over
    its first `k` dims."""
    base: Optional[int]
    index: int
    k: int
    value: str
    fill: Optional[Const] = None
    nonneg: bool = False     # a negative index out of range, not counted from the end


@dataclass(frozen=True)
class LoopNest:
    name: str
    gid: int
    ops: str           # "mul, add -> sum": for the kernel's docstring
    shape: tuple       # the iteration shape (ints or Syms)
    operands: tuple    # Operand per input
    steps: tuple       # Step per equation, in program order
    outputs: tuple     # Output per value written per element
    reduction: Optional[Reduction]
    flat: bool         # one flat index over the iteration space (see the module docstring)
    # a rows nest: its reductions over the last dim, value ``r<k>`` per row (rowpasses.py
    # orders them into passes over each row)
    rows: tuple = ()
    # a windows nest: its window read (`Window`)
    window: Optional[Window] = None
    # a rows nest's sums over every dim but the last, value ``c<k>`` (an output only)
    cols: tuple = ()
    # a scatter nest's add of its value into rows by index (`Scatter`)
    scatter: Optional[Scatter] = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def layouts(self) -> tuple:
        return tuple(op.layout for op in self.operands)

    @property
    def mode(self) -> str:
        if self.window is not None or self.scatter is not None:
            return "window" if self.scatter is None else "scatter"
        return "flat" if self.flat else ("rows" if self.rows else "nested")

    @property
    def sizes(self) -> list:
        """The size arguments: ``n`` (flat) or one per iteration dim."""
        return ["n"] if self.flat else [f"d{i}" for i in range(self.rank)]

    def arguments(self) -> list:
        """The kernel's parameter names, in calling order (the calling convention)."""
        out = [op.array for op in self.operands] + [o.array for o in self.outputs]
        if self.reduction is not None:
            out.append("red")
        return out + self.sizes

    def arg_rank(self, k: int) -> int:
        """Rank of input k as the kernel receives it: 1 for flat nests and single values."""
        op = self.operands[k]
        return 1 if self.flat or op.layout == "scalar" else max(op.rank, 1)

    @property
    def red_rank(self) -> int:
        """Rank of the reduction's output buffer (its kept dims; (1,) for a full one)."""
        red = self.reduction
        return 0 if red is None else max(len(red.kept) + (red.k > 0), 1)


def accumulation(combine: str, dtype: str, sequential: bool) -> str:
    """The accumulator dtype of a reduction producing `dtype`: the one rule for every backend.
    Integer and bool sums and products accumulate in int64 (numpy's rule); float32 sums and
    products in float64 where the backend folds long *sequential* runs (CPU: a running sum
    over millions drifts by ~n*eps), else float32 (CUDA folds trees of short runs, and
    float64 would make a bandwidth-bound kernel compute-bound); max and min keep the dtype."""
    if combine in ("add", "mul") and dtype in ("int32", "int64", "bool", "int8", "uint8"):
        return "int64"
    if combine in ("add", "mul") and dtype in ("float32", "float64") and sequential:
        return "float64"
    return dtype


def operand_layouts(group, contiguous=None) -> tuple:
    """The layout of each of `group`'s inputs (see `LAYOUTS`), from shapes alone.
    `contiguous[k]` says whether input k is C-contiguous; without it contiguity is assumed
    (the plan checks before the call and takes the "nd" variant otherwise)."""
    shape = tuple(group.shape)
    rank = len(shape)
    out = []
    reads = getattr(group, "reads", None) or {}
    for k, v in enumerate(group.inputs):
        vs = tuple(v.aval.shape)
        c = True if contiguous is None else contiguous[k]
        one = all(isinstance(d, int) and d == 1 for d in vs) and not (vs == shape and rank)
        if v not in reads and one:
            # One element (0-d, or all dims 1 like a summed cotangent): read once, so it
            # does not force the whole group into the broadcasting loop nest.
            out.append("scalar")
        elif v not in reads and vs == shape:
            out.append("flat" if c else "nd")
        else:
            # A slice read in place (its array larger than the iteration shape), or a
            # broadcast operand (a bias, a per-row statistic): usually contiguous, typed so,
            # the inner loop vectorizes (3x on a LayerNorm+GELU backward).
            out.append("ndc" if c else "nd")
    return tuple(out)


def _compute_dtype(e) -> str:
    """The dtype the operation computes in (its operands', after the IR's explicit casts;
    the output's for ops that say so, like where, whose first operand is a bool)."""
    if e.prim.extra.get("compute_dtype") == "out":
        return e.out.aval.dtype.name
    for a in e.inputs:
        if not isinstance(a, Literal):
            return a.aval.dtype.name
    return e.out.aval.dtype.name


def _index(v, shape, channels: bool = False) -> tuple:
    """Per dim of `v`, the iteration dim it follows, or None (broadcast: read at 0); in a
    channel nest a (1, C, 1, 1) operand is per channel even for N = 1."""
    rank = len(shape)
    r = len(v.aval.shape)
    if r > rank:   # a window's record ((2,) + the pooled shape): read by the window only
        return tuple(range(r))
    parts = []
    for j, dsz in enumerate(v.aval.shape):
        it = rank - r + j
        if isinstance(dsz, int) and dsz == 1 and (channels or not (isinstance(shape[it], int) and shape[it] == 1)):
            parts.append(None)
        else:
            parts.append(it)
    return tuple(parts)


def lower(group, layouts: tuple, name: str = "kernel", *, sequential_sums: bool = True) -> LoopNest:
    """The `LoopNest` of `group` with input layouts `layouts`. `sequential_sums`: whether
    the backend folds long sequential runs (CPU) or trees of short ones (CUDA)."""
    shape = tuple(group.shape)
    rank = len(shape)
    red = group.reduction
    if len(layouts) != len(group.inputs) or any(lay not in LAYOUTS for lay in layouts):
        raise ValueError(f"layouts {layouts!r} do not fit the group's {len(group.inputs)} inputs")
    reads = getattr(group, "reads", None) or {}
    rows_in = list(getattr(group, "rows", ()))
    chan = bool(rows_in) and rank == 4 and tuple(rows_in[0].params["dims"]) == (0, 2, 3)
    sc = getattr(group, "scatter", None)
    # (a scatter's base and index are read whole: each by its own dims)
    whole = () if sc is None else (sc.inputs[0], sc.inputs[2])
    operands = tuple(Operand(k, v, v.aval.dtype.name, layouts[k], tuple(range(len(v.aval.shape))) if v in whole
                             else _index(v, shape, chan) if layouts[k] != "cm" else (1, 0) + _index(v, shape)[2:],
                             reads[v][1] if v in reads else ())
                     for k, v in enumerate(group.inputs))
    names = {op.var: op.name for op in operands}
    for k, e in enumerate(rows_in):
        names[e.out] = f"r{k}"
    cols_in = list(getattr(group, "cols", ()))
    for k, e in enumerate(cols_in):
        names[e.out] = f"c{k}"
    win = getattr(group, "window", None)
    if win is not None and _WINDOW_KINDS()[win.prim][1]:
        names[win.out] = "w"
    steps = []
    for j, e in enumerate(group.eqns):
        dt = _compute_dtype(e)
        typed = e.prim.promote or e.prim.extra.get("compute_dtype") == "out"
        args = tuple(Const(a.value, dt if typed else a.aval.dtype.name) if isinstance(a, Literal)
                     else names[a] for a in e.inputs)
        names[e.out] = f"v{j}"
        # The comment names the op only, not the user's line: the source is the disk-cache
        # key, so groups of one structure at different lines compile once.
        steps.append(Step(f"v{j}", e.prim, args, tuple(e.params.items()), dt, e.prim.name,
                          e.out.aval.dtype.name))
    window = None
    if win is not None:
        window = _window(win, names, operands)
        # (a fold's output stores its window value: a rows nest's last pass computes that)
        names.setdefault(win.out, "w" if window.gather else window.value)
    if sc is not None:
        names[sc.out] = names[sc.inputs[1]]
    stores = getattr(group, "stores", {})   # (a value stored rounded: windows._round_on_store)
    for v, src in stores.items():
        names[v] = names[src]
    mats = [v for v in group.outputs if red is None or v is not red.out]
    # a rows nest's per-row (per-channel) values: not of the iteration shape, nor the window's
    col_vars = {e.out for e in cols_in}
    cm = getattr(group, "cm_outputs", ())
    outputs = tuple(Output(m, v, v.aval.dtype.name, names[v], bool(rows_in) and tuple(v.aval.shape) != shape
                           and (win is None or (v is not win.out and v not in stores)) and v not in col_vars,
                           v in col_vars, v in cm)
                    for m, v in enumerate(mats))
    rows = tuple(_reduction(e, names, rank, sequential_sums) for e in rows_in)
    cols = tuple(_reduction(e, names, rank, sequential_sums) for e in cols_in)
    reduction = None
    if red is not None:
        reduction = _reduction(red, names, rank, sequential_sums)
    flat = (not rows and window is None and all(lay in ("flat", "scalar") for lay in layouts)
            and (reduction is None or (reduction.full and not reduction.indexed)))
    scatter = None
    if sc is not None:
        k_of = {op.var: op.k for op in operands}
        fill = getattr(group, "fill", None)
        scatter = Scatter(k_of.get(sc.inputs[0]), k_of[sc.inputs[2]], len(sc.inputs[2].aval.shape),
                          names[sc.inputs[1]], None if fill is None else Const(fill, sc.out.aval.dtype.name),
                          getattr(group, "nonneg_index", False))
        flat = False
    ops = ", ".join(e.prim.name for e in group.eqns) + (f" -> {red.prim.name}" if red is not None else "")
    if rows:
        ops = f"rows of {', '.join(e.prim.name for e in rows_in)}: {ops}"
    for what, e in (("window", win), ("scatter", sc)):
        if e is not None:
            ops = f"{what} {e.prim.name}: {ops}" if ops else f"{what} {e.prim.name}"
    return LoopNest(name, group.gid, ops, shape, operands, tuple(steps), outputs, reduction, flat,
                    rows=rows, window=window, cols=cols, scatter=scatter)


def _WINDOW_KINDS():
    from .windows import KINDS
    return KINDS


def _window(e, names: dict, operands) -> Window:
    """The `Window` of pooling equation `e` (windows.py: its kind), its operands named."""
    kind, gather = _WINDOW_KINDS()[e.prim]
    p = e.params
    geo = dict(kernel=tuple(p["kernel"]), stride=tuple(p["stride"]), padding=tuple(p["padding"]),
               dilation=tuple(p["dilation"]), dtype=e.out.aval.dtype.name)
    if not gather:
        return Window(kind, value=names[e.inputs[0]], **geo)
    k_of = {op.var: op.k for op in operands}
    rec = k_of[e.inputs[1]] if kind == "scatter" else None
    return Window(kind, grad=k_of[e.inputs[0]], record=rec, **geo)


def _reduction(red, names: dict, rank: int, sequential_sums: bool) -> Reduction:
    """The `Reduction` of equation `red` (its input named in `names`)."""
    from .fusion import reduced_dims
    k = red.params.get("k") or 0   # (ARGSORT's first k: a topk)
    combine = red.prim.extra.get("combine") or ("argmax" if red.params["descending"] else "argmin")
    dims = reduced_dims(red)
    out_dt = red.out.aval.dtype.name
    in_dt = red.inputs[0].aval.dtype.name
    acc = in_dt if combine in ("argmax", "argmin") else accumulation(combine, out_dt, sequential_sums)
    block = "float32" if combine == "add" and acc == "float64" and in_dt == "float32" else None
    return Reduction(combine, dims, tuple(d for d in range(rank) if d not in dims),
                     names.get(red.inputs[0]), red.out, out_dt, acc, block, k)


def lower_op(prim, operands, params: dict, dtype: str, out_dtype: str,
             name: str = "kernel") -> LoopNest:
    """The flat `LoopNest` of elementwise primitive `prim` applied on its own. Each operand
    is "array" (of the output's shape and `dtype`), "words" (bf16 words of that shape,
    widened to `dtype` on load), "scalar" (a 1-element array) or a number (a constant
    written into the kernel); the output has dtype `out_dtype` (bf16: the result computed
    in `dtype` and rounded on store), the size ``n`` is an argument."""
    from .. import dtypes
    from ..jit.ir import Eqn, Var
    from ..ops.elementwise_logic import CAST
    from ..shapes import Sym
    from .fusion import Group

    dt = dtypes.as_dtype(dtype)
    shape = (Sym.symbol("n", 0),)
    inputs, atoms, layouts, eqns = [], [], [], []
    for kind in operands:
        if kind in ("array", "scalar", "words"):
            v = Var(Aval(shape if kind != "scalar" else (), dtypes.bfloat16 if kind == "words" else dt))
            inputs.append(v)
            layouts.append("scalar" if kind == "scalar" else "flat")
            if kind == "words":
                w = Var(Aval(shape, dt))
                eqns.append(Eqn(CAST, (v,), (w,), {"dtype": dt}))
                v = w
            atoms.append(v)
        else:
            atoms.append(Literal(kind, Aval((), dt, weak=True)))
    odt = dtypes.as_dtype(out_dtype)
    out = Var(Aval(shape, dt if odt is dtypes.bfloat16 else odt))
    eqns.append(Eqn(prim, tuple(atoms), (out,), dict(params)))
    if odt is dtypes.bfloat16:
        res = Var(Aval(shape, odt))
        eqns.append(Eqn(CAST, (out,), (res,), {"dtype": odt}))
        out = res
    group = Group(0, shape, eqns, None, inputs, [out])
    return lower(group, tuple(layouts), name, sequential_sums=True)


def broadcast_index(vshape: tuple, shape: tuple) -> str:
    """The subscript that takes a broadcast value (shape `vshape`, computed at every index of
    `shape`) back to its own shape: 0 for missing leading dims, 0:1 where it is 1."""
    lead = len(shape) - len(vshape)
    parts = ["0"] * lead + ["0:1" if d == 1 and shape[lead + i] != 1 else ":" for i, d in enumerate(vshape)]
    return ", ".join(parts) + ("," if len(parts) == 1 else "")
