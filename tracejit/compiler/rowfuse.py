"""Row fusion: elementwise groups around the row kernels of LayerNorm (and softmax's
prologue) become part of them.

Why: LayerNorm (forward and backward) is a primitive run by a row kernel
(compiler/cpu/kernels/row_kernels.py), which a plan calls as an opaque step. Around it sit elementwise
groups: the bias add of the Linear before it, the GELU after it, and in the backward the
GELU's gradient times the upstream gradient, which is LayerNorm backward's incoming
gradient. Each is a separate pass over memory: in the MLP step (256x1024 rows) every
LayerNorm came with a bias-add kernel and a GELU kernel forward, and a bias-add
(recomputed) and GELU-backward kernel backward, each writing an array the row kernel read
back. Here those groups are moved into the row kernel:

- a *prologue* (a group computing the row op's input `x`, or layer_norm_backward's
  incoming gradient `g`) is computed per row into a row buffer that stays in cache; the
  group's values are written to memory only when something else reads them;
- an *epilogue* (a group consuming LayerNorm's output) is computed from each output
  element as it is made; LayerNorm's output itself is written only when something else
  (a backward, another op) reads it;
- backward only: a `sum` of layer_norm_backward's dx over the rows (the gradient of the
  bias added before the LayerNorm) is summed by the kernel as dx is made, and a recomputed
  `layer_norm` of the same x whose output the gradient's chain reads (GELU's gradient reads
  GELU's input; compiler/saving.py has the backward recompute it rather than the forward
  write it) is made from the row statistics the kernel computes anyway.

Softmax over the last dim takes a prologue only: the scale and additive mask (or a
``masked_fill``) a program writes before it, ``softmax(q @ k.T * c + mask)``, are computed
per row into its row buffer; the scores are written once, as the softmax's output.

A gradient group may sit behind a `reshape` to the row op's shape with the same rows
(the encoder layer adds its residual gradient on (tokens, E) rows and reshapes it to the
(N, T, E) LayerNorm's): it joins the kernel and the reshape goes (`RowGroup.g_view`).

A fused group's other operands must be read the same way in every row: arrays of the
row op's shape ("rows"), vectors along the normalized dims broadcast over the rows
("col": a bias, a LayerNorm weight), whole rows broadcast along some leading dims
("bcast": an attention mask (T, S) over (N, H, T, S) scores, read through a row index),
or single values ("scalar"); a group with anything else stays a group. The kernel's source (compiler/codegen_rows.py) is written from the
row op's own text in compiler/cpu/kernels/row_kernels.py and the groups' ops' scalar rules, the ones every
fused kernel uses: no op is written twice.

The pass runs on `fusion.partition`'s items in `plan.Plan`; ``TRACEJIT_ROW_FUSION=0``
turns it off (the plan then calls the row ops as steps, as before).
"""
from __future__ import annotations

from .. import envflags
from dataclasses import dataclass, field

from ..jit.ir import Eqn, Var
from ..ops.layer_norm_prim import LAYER_NORM, LAYER_NORM_BACKWARD
from ..ops.softmax_prim import SOFTMAX
from .emitter import NUMBA_TYPE
from .fusion import Group, _schedule
from ..ops.indexing import GETITEM
from ..ops.reductions import SUM
from ..ops.shape import RESHAPE

__all__ = ["RowGroup", "fuse_rows", "enabled", "ROW_PRIMS"]

# The row primitives whose kernels take fused work, and which input is the row data `x`.
# softmax (over the last dim, without the mask operand attention gives it) takes a prologue:
# the scale and additive mask a program writes before it (``softmax(q @ k.T * c + mask)``)
ROW_PRIMS = {LAYER_NORM: 0, LAYER_NORM_BACKWARD: 1}
_DTYPES = ("float32", "float64")


def enabled() -> bool:
    return not envflags.is_off("TRACEJIT_ROW_FUSION")


@dataclass(eq=False)
class RowGroup:
    """A row primitive's equation with the groups fused into its kernel."""
    gid: int
    eqn: Eqn                       # layer_norm or layer_norm_backward
    x_pro: Group | None = None     # computes the row op's `x`
    g_pro: Group | None = None     # computes layer_norm_backward's incoming gradient
    epi: Group | None = None       # consumes layer_norm's output
    col_sum: Eqn | None = None     # sums layer_norm_backward's dx over the rows (a bias gradient)
    y_eqn: Eqn | None = None       # (backward) the layer_norm of the same x whose output g_pro reads:
                                   # recomputed from the row's statistics instead of read
    g_view: Eqn | None = None      # a reshape between g_pro's value and the gradient (same rows:
                                   # a (tokens, E) group feeding a (N, T, E) LayerNorm)
    inputs: list = field(default_factory=list)   # external Vars, in calling order
    outputs: list = field(default_factory=list)  # Vars written (the row op's output first when written)
    roles: dict = field(default_factory=dict)    # input Var -> "rows" | "col" | "scalar"

    @property
    def groups(self) -> list:
        return [g for g in (self.x_pro, self.g_pro, self.epi) if g is not None]

    @property
    def members(self) -> list:
        """Every equation of the item, in program order of its parts."""
        out = list(self.x_pro.eqns if self.x_pro else []) + ([self.y_eqn] if self.y_eqn else [])
        out += list(self.g_pro.eqns if self.g_pro else []) + ([self.g_view] if self.g_view else [])
        return out + [self.eqn] + list(self.epi.eqns if self.epi else [])

    @property
    def eqns(self) -> list:
        """Every equation the kernel computes (`members` and the row sum): what a fused
        group's ``eqns`` are to kernel_errors.group_parts (labels, explain, the benches)."""
        return self.members + ([self.col_sum] if self.col_sum is not None else [])

    @property
    def defined(self) -> set:
        return {e.out for e in self.members} | ({self.col_sum.out} if self.col_sum is not None else set())

    @property
    def outs(self) -> list:
        """What the scheduler (`fusion._schedule`) counts as produced by this item."""
        return list(self.defined)

    @property
    def rows_shape(self) -> tuple:
        return tuple(self.eqn.inputs[ROW_PRIMS[self.eqn.prim]].aval.shape)

    @property
    def n(self) -> int:
        return _row_dims(self.eqn)

    def describe(self) -> str:
        parts = [("+".join(e.prim.name for e in g.eqns)) for g in (self.x_pro, self.g_pro) if g is not None]
        if self.y_eqn is not None:
            parts.insert(len(parts) - (self.g_pro is not None), "layer_norm (recomputed)")
        parts.append(self.eqn.prim.name)
        if self.epi is not None:
            parts.append("+".join(e.prim.name for e in self.epi.eqns))
        if self.col_sum is not None:
            parts.append("sum over rows")
        return " -> ".join(parts)


def _row_dims(e) -> int:
    """How many trailing dims make a row of row primitive `e` (softmax: its last)."""
    return e.params["n"] if "n" in e.params else 1


def role(v, shape: tuple, n: int) -> str | None:
    """How a row kernel reads operand `v` against row data of `shape` normalized over its
    last `n` dims: "rows" (the same shape), "col" (broadcast over the leading dims, whole
    along the normalized ones), "scalar" (one element), "bcast" (whole along the normalized
    dims, broadcast along some leading ones: an attention mask (T, S) over (N, H, T, S)
    scores; the kernel reads row ``ix[i]`` of its distinct rows), or None (it cannot)."""
    vs = tuple(v.aval.shape)
    if vs == shape:
        return "rows"
    if all(isinstance(d, int) and d == 1 for d in vs):
        return "scalar"
    if len(vs) > len(shape):
        return None
    padded = (1,) * (len(shape) - len(vs)) + vs
    lead, tail = padded[:len(shape) - n], padded[len(shape) - n:]
    if tail != shape[len(shape) - n:]:
        return None
    if all(isinstance(d, int) and d == 1 for d in lead):
        return "col"
    if all((isinstance(d, int) and d == 1) or d == s for d, s in zip(lead, shape)):
        return "bcast"
    return None


def _fusible_group(g, shape, n, dtype) -> bool:
    """Can group `g` run inside a row kernel over rows of `shape`?"""
    if not isinstance(g, Group) or g.reduction is not None or g.rows or tuple(g.shape) != shape:
        return False
    if any(v.aval.dtype.name != dtype for v in g.outputs):
        return False
    # operands of other dtypes (a bool mask read by `where`) are read as they are: the
    # group's ops do their own casts, as in any fused kernel
    return all(role(a, shape, n) is not None and a.aval.dtype.name in NUMBA_TYPE for a in g.inputs)


def fuse_rows(items: list, graph) -> list:
    """`items` (fusion.partition's) with each LayerNorm step and the groups around it that
    can join it replaced by one `RowGroup` (see the module docstring)."""
    producer: dict = {}     # Var -> item computing it
    readers: dict = {}      # Var -> items reading it
    for it in items:
        ins = it.inputs if isinstance(it, Group) else [a for a in it.inputs if isinstance(a, Var)]
        for a in ins:
            readers.setdefault(a, []).append(it)
        for o in (it.defined if isinstance(it, Group) else it.outs):
            producer[o] = it
    results = {a for a in graph.outputs if isinstance(a, Var)}
    taken: set = set()      # ids of items already fused
    replace: dict = {}      # id(row eqn) -> RowGroup
    count = 0
    # layer_norm_backward first: it may take a recomputed layer_norm of its own x (see
    # `_recomputed_output`), which must not become a forward row kernel of its own
    order = sorted((it for it in items if not isinstance(it, Group) and it.prim in ROW_PRIMS),
                   key=lambda it: it.prim is not LAYER_NORM_BACKWARD)
    for it in order:
        if id(it) in taken:
            continue
        e = it
        xv = e.inputs[ROW_PRIMS[e.prim]]
        if not isinstance(xv, Var) or xv.aval.dtype.name not in _DTYPES or xv.aval.device.type != "cpu":
            continue
        shape, n, dt = tuple(xv.aval.shape), _row_dims(e), xv.aval.dtype.name
        if not shape or n < 1 or n > len(shape):
            continue
        if e.prim is SOFTMAX and (len(e.inputs) != 1 or e.params["dim"] != len(shape) - 1):
            continue
        rg = RowGroup(1000 + count, e)

        def only_for(value, group, gshape=shape) -> bool:
            """`group` computes `value` and fusing it moves no read of `value` elsewhere."""
            return (group is not None and id(group) not in taken and _fusible_group(group, gshape, n, dt)
                    and value in group.outputs)
        px = producer.get(xv)
        if only_for(xv, px):
            rg.x_pro = px
        if e.prim is LAYER_NORM_BACKWARD:
            gv = e.inputs[0]
            pg = producer.get(gv) if isinstance(gv, Var) else None
            view = _row_view(pg, gv, shape, n, producer, readers, results, taken)
            if view is not None:
                rg.g_view, gv, pg = view, view.inputs[0], producer.get(view.inputs[0])
            else:
                pg = pg if isinstance(pg, Group) else None
            gshape = tuple(pg.shape) if rg.g_view is not None else shape
            if pg is not rg.x_pro and only_for(gv, pg, gshape):
                rg.g_pro = pg
                rg.y_eqn = _recomputed_output(e, pg, xv, producer, readers, results, taken)
        elif e.prim is LAYER_NORM:
            for r in readers.get(e.out, ()):
                if isinstance(r, Group) and id(r) not in taken and _fusible_group(r, shape, n, dt):
                    rg.epi = r
                    break
        for part in ("x_pro", "g_pro", "epi"):
            if getattr(rg, part) is not None and not _reads_ok(rg, getattr(rg, part)):
                setattr(rg, part, None)
        if not rg.groups:
            continue
        # Drop parts that would make a cycle (a part reading, through other items, a value
        # the merged item computes): one part if that is enough, the gradient's chain kept
        # over the recomputed input (in a graph holding forward and backward, the gradient
        # reads the forward LayerNorm's output, which reads x), else one by one.
        if _cyclic(rg, producer):
            for part in ("epi", "x_pro", "g_pro"):
                kept = getattr(rg, part)
                if kept is None:
                    continue
                setattr(rg, part, None)
                if not _cyclic(rg, producer):
                    break
                setattr(rg, part, kept)
        for part in ("epi", "g_pro", "x_pro"):
            if getattr(rg, part) is not None and _cyclic(rg, producer):
                setattr(rg, part, None)
        if rg.g_pro is None:
            rg.y_eqn = rg.g_view = None
        if not rg.groups or _cyclic(rg, producer):
            continue
        if e.prim is LAYER_NORM_BACKWARD:
            rg.col_sum = _column_sum(e, readers, shape, n)
        _finish(rg, readers, results)
        for g in rg.groups:
            taken.add(id(g))
        for x in (rg.col_sum, rg.y_eqn, rg.g_view):
            if x is not None:
                taken.add(id(x))
        replace[id(e)] = rg
        count += 1
    if not replace:
        return items
    out = []
    for it in items:
        if id(it) in taken:
            continue
        out.append(replace.get(id(it), it))
    return _schedule(out, graph)


def _row_view(p, v, shape, n, producer, readers, results, taken):
    """The `reshape` step `p` making value `v` (read only by the row op) from a value with
    the same rows (same trailing `n` dims, same count) that a group computes: the group can
    then run in the row kernel, the reshape gone. The encoder layer's residual gradient is
    added on (tokens, E) rows and reshaped to the (N, T, E) LayerNorm's."""
    if not (isinstance(p, Eqn) and p.prim is RESHAPE and id(p) not in taken
            and v not in results and len(readers.get(v, ())) == 1):
        return None
    src = p.inputs[0]
    if not isinstance(src, Var) or not isinstance(producer.get(src), Group):
        return None
    ss = tuple(src.aval.shape)
    if len(ss) < n or any(not isinstance(d, int) for d in ss + shape):
        return None
    if ss[len(ss) - n:] != shape[len(shape) - n:]:
        return None
    rows = want = 1
    for d in ss[:len(ss) - n]:
        rows *= d
    for d in shape[:len(shape) - n]:
        want *= d
    return p if rows == want else None


def _column_sum(e, readers, shape, n):
    """The `sum` step adding layer_norm_backward's dx over its rows (the gradient of a bias
    added before the LayerNorm), if there is one: dx is ``getitem(out, :-2)``, (M, K), or
    that reshaped to x's shape. The row kernel then sums each row of dx as it makes it,
    instead of a pass reading dx back."""
    views = [r for r in readers.get(e.out, ()) if isinstance(r, Eqn) and r.prim is GETITEM
             and r.params.get("spec") == (("s", None, -2, None),)]
    for v in views:
        cands = [(v.out, (0,))]
        for r in readers.get(v.out, ()):
            if isinstance(r, Eqn) and r.prim is RESHAPE and tuple(r.out.aval.shape) == shape:
                cands.append((r.out, tuple(range(len(shape) - n))))
        for val, dims in cands:
            for r in readers.get(val, ()):
                if (isinstance(r, Eqn) and r.prim is SUM and r.inputs[0] is val
                        and tuple(r.params.get("dims", ())) == dims and dims
                        and r.out.aval.dtype is val.aval.dtype):
                    return r
    return None


def _recomputed_output(e, pg, xv, producer, readers, results, taken):
    """The `layer_norm` of layer_norm_backward `e`'s own x (same dims and eps) whose output
    only the incoming gradient's group `pg` reads (GELU's gradient reads GELU's input), if
    there is one: the backward row kernel recomputes that output from the statistics it
    computes anyway instead of reading it (compiler/saving.py lets the backward recompute
    it rather than the forward write it)."""
    for a in pg.inputs:
        p = producer.get(a)
        if (isinstance(p, Eqn) and p.prim is LAYER_NORM and id(p) not in taken
                and p.inputs[0] is xv and p.params["n"] == e.params["n"] and p.params["eps"] == e.params["eps"]
                and a not in results and all(r is pg for r in readers.get(a, ()))):
            return p
    return None


def _reads_ok(rg, part) -> bool:
    """A part reads, of what the other parts and the row op compute, only the row op's
    `x` (held in the row while the part runs) and, for the epilogue, the row op's output."""
    e = rg.eqn
    xv = e.inputs[ROW_PRIMS[e.prim]]
    others = {e.out} | {v for g in rg.groups if g is not part for v in g.defined}
    for a in part.inputs:
        if a in others and a is not xv and not (part is rg.epi and a is e.out):
            return False
    return True


def _external(rg) -> list:
    """The Vars the merged item reads from outside, in first-use order."""
    defined = rg.defined
    seen, ins = set(), []
    for e in rg.members:
        for a in e.inputs:
            if isinstance(a, Var) and a not in defined and a not in seen:
                seen.add(a)
                ins.append(a)
    return ins


def _cyclic(rg, producer) -> bool:
    """Does some value the merged item reads depend on one it computes?"""
    mine = {id(g) for g in rg.groups} | {id(rg.eqn)} | {id(x) for x in (rg.y_eqn, rg.g_view) if x is not None}
    stack = list(_external(rg))
    seen: set = set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        it = producer.get(v)
        if it is None:
            continue
        if id(it) in mine:
            return True
        stack.extend(it.inputs if isinstance(it, Group) else [a for a in it.inputs if isinstance(a, Var)])
    return False


def _finish(rg, readers, results) -> None:
    """Set the item's inputs (with their roles) and the values it must write."""
    shape, n = rg.rows_shape, rg.n
    e = rg.eqn
    own = [a for a in e.inputs[ROW_PRIMS[e.prim] + 1:]]   # weight, bias
    if rg.y_eqn is not None:
        own += list(rg.y_eqn.inputs[1:])
    rg.inputs = _external(rg)
    gshape = tuple(rg.g_pro.shape) if rg.g_view is not None else shape
    for a in rg.inputs:
        # the row op's own weight and bias are vectors along the normalized dims; a
        # reshaped gradient group's operands are read per its own (same-rows) shape
        rg.roles[a] = "col" if a in own else (role(a, shape, n) or role(a, gshape, n))
    members = {id(g) for g in rg.groups} | {id(e)} | {id(x) for x in (rg.y_eqn, rg.g_view) if x is not None}
    outs = []
    for g in rg.groups:
        for v in g.outputs:
            if v in results or any(id(r) not in members for r in readers.get(v, ())):
                outs.append(v)
    if e.out in outs:
        outs.remove(e.out)
    if e.prim is LAYER_NORM_BACKWARD or e.out in results or any(
            id(r) not in members for r in readers.get(e.out, ())):
        outs.insert(0, e.out)
    if rg.col_sum is not None:
        outs.append(rg.col_sum.out)
    rg.outputs = outs
