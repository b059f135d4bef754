"""Fusion: partition a graph's equations into kernels.

A *group* is a maximal set of elementwise equations over one iteration shape, optionally
closed by one reduction as its epilogue, so ``(y_pred - y).pow(2).sum()`` is one pass over
memory. A *rows group* holds keepdim reductions over the last dim and the elementwise work
that reads them, so a softmax, LayerNorm or cross-entropy is one kernel walking each row a
few times while in cache. Everything else is a *step* run through its primitive's array
implementation. A second pass merges an elementwise group into a reduction group it shares
data with when it does not need the reduction's result (a loss and its gradient: one pass).

Groups grow greedily in program order; an addition or merge that would create a cycle is
refused. Values computed in a group are written to memory only when read outside it.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ..jit.ir import Eqn, Graph, Var, def_use
from ..ops import reductions as _red
from ..ops.tensorfns import ARGSORT
from ..shapes import contains_sym

__all__ = ["Group", "partition", "FUSIBLE_REDUCTIONS", "external_inputs", "reduced_dims"]

FUSIBLE_REDUCTIONS = (_red.SUM, _red.AMAX, _red.AMIN, _red.PROD, _red.ARGMAX, _red.ARGMIN)
_INDEXED = (_red.ARGMAX, _red.ARGMIN, ARGSORT)
# A topk (ARGSORT's first k) closes a group up to this k: a row's best k are kept in
# registers by insertion; a larger k is numpy's partial sort, a step.
TOPK_MAX = 16
_KERNEL_DTYPES = ("float32", "float64", "int32", "int64", "bool", "int8", "uint8",
                  "bfloat16")   # (bf16 words: only loaded and stored, see bf16_graph.py)


@dataclass(eq=False)
class Group:
    gid: int
    shape: tuple                          # the iteration shape
    eqns: list = field(default_factory=list)
    reduction: Eqn | None = None           # epilogue, consuming a value of the group
    inputs: list = field(default_factory=list)   # external Vars read (in first-use order)
    outputs: list = field(default_factory=list)  # Vars the group must write
    rows: list = field(default_factory=list)     # reductions over the last dim (keepdim)
    cols: list = field(default_factory=list)     # a rows group's sums over its rows (keepdim)
    window: Eqn | None = None              # a pooling read (windows.py): of the eqns' values
    #                                        (forward) or read by them (backward)
    scatter: Eqn | None = None             # an add of rows by index of an eqns' value (scatters.py)
    reads: dict = field(default_factory=dict)  # input -> (array, offsets): read in place
    #                                            at an offset (slice_reads.py)

    @property
    def defined(self) -> set:
        return {e.out for e in self.members}

    @property
    def members(self) -> list:
        """Every equation the group's kernel computes."""
        win = [self.window] if self.window is not None else []
        return (win + list(self.eqns) + self.rows + self.cols
                + [e for e in (self.reduction, self.scatter) if e is not None])

    @property
    def row_shape(self):
        """The shape of a per-row value of a rows group (its reduced dims 1), else None."""
        if not self.rows:
            return None
        dims = _row_dims(self.rows[0])
        return tuple(1 if d in dims else s for d, s in enumerate(self.shape))


def _row_dims(e: Eqn) -> tuple:
    return tuple(e.params.get("dims", ()))


def reduced_dims(e: Eqn) -> tuple:
    """The dims reduction `e` folds (an argmax's one ``dim``)."""
    return tuple(e.params["dims"]) if "dims" in e.params else (e.params["dim"],)


def _epilogue_ok(e: Eqn) -> bool:
    """Whether reduction `e` may close a group: an argmax/argmin, or a topk of k up to
    TOPK_MAX, over one dim, the last, of a CPU array of numbers (a scan of the contiguous
    row: codegen_cpu_loops `_arg_rows`)."""
    if e.prim not in _INDEXED:
        return True
    k = e.params.get("k")   # (a symbolic k is a step: the kernel's buffer has a constant size)
    if e.prim is ARGSORT and not (type(k) is int and 0 < k <= TOPK_MAX and (k > 1 or not e.params["descending"])):
        return False   # (a largest first is an argmax: numpy's vectorized scan, a step)
    src = e.inputs[0].aval
    dim = e.params["dim"]
    return (dim is not None and dim == len(src.shape) - 1 <= 8 and getattr(src.device, "type", "cpu") == "cpu"
            and src.dtype.name in ("float32", "float64", "int32", "int64"))


def _row_reduction(e: Eqn) -> bool:
    """A reduction a rows group takes, of a float array, kept: sum/amax/amin over the last
    dim only, or a sum over every dim but dim 1 of a rank-4 value (per channel: BatchNorm's
    statistics)."""
    if e.prim not in (_red.SUM, _red.AMAX, _red.AMIN) or not isinstance(e.inputs[0], Var):
        return False
    src = e.inputs[0].aval
    rank = len(src.shape)
    if not (rank >= 1 and bool(e.params.get("keepdim")) and src.dtype.name in ("float32", "float64")
            and e.out.aval.dtype == src.dtype):
        return False
    dims = _row_dims(e)
    if dims == (rank - 1,):
        return True
    return e.prim is _red.SUM and rank == 4 and dims == (0, 2, 3)   # (per channel)


def _column_sum(e: Eqn) -> bool:
    """A sum a rows group may fold beside its rows: of a float CPU array of rank 2 or more,
    kept, over every dim but the last (LayerNorm's weight and bias gradients); CUDA renders
    no such nest."""
    if e.prim is not _red.SUM or not isinstance(e.inputs[0], Var):
        return False
    src = e.inputs[0].aval
    rank = len(src.shape)
    return (rank >= 2 and bool(e.params.get("keepdim")) and _row_dims(e) == tuple(range(rank - 1))
            and src.dtype.name in ("float32", "float64") and e.out.aval.dtype == src.dtype
            and getattr(src.device, "type", "cpu") == "cpu")


def _same_rows(a: "Group", b: "Group") -> bool:
    """Whether two groups' rows fold the same dims (or one has none): they may merge."""
    return not a.rows or not b.rows or _row_dims(a.rows[0]) == _row_dims(b.rows[0])


def _fits(g: "Group", shape: tuple) -> bool:
    """Whether an elementwise equation of output `shape` may join open group `g`: of its
    iteration shape, or (a rows group) of its per-row shape."""
    return g.reduction is None and (g.shape == shape or (bool(g.rows) and g.row_shape == shape))


def _elementwise_ok(e: Eqn) -> bool:
    if e.prim.extra.get("broadcast_read"):  # expand: fused as a broadcasting read of its operand
        return e.out.aval.dtype.name in _KERNEL_DTYPES and isinstance(e.inputs[0], Var)
    if e.prim.kind != "elementwise" or e.prim.scalar is None or len(e.outs) != 1:
        return False
    if contains_sym(tuple(e.params.values())):
        # a dynamic size as a parameter (``clamp(max=n - 1)``): a kernel would hold the
        # capture's value; a step evaluates it on each call
        return False
    if "int_divisor" in e.prim.extra and not e.out.aval.dtype.is_floating_point:
        # Integer //, % and fmod by zero raise; a numba kernel would give numpy's silent 0,
        # so they run as checked steps
        return False
    return all(a.aval.dtype.name in _KERNEL_DTYPES for a in (e.out, *e.inputs))


def index_views(graph: Graph) -> set:
    """The expands read only at positions an index tensor gives (gather, advanced indexing,
    scatter_add): they stay steps, broadcast views, not copies the size of the broadcast of
    which few rows are read (Informer's (B, H, L, L, E) sampled keys); a graph output among
    them is written unless the caller keeps it a view."""
    other_reads = {a for e in graph.eqns if e.prim.kind != "index" or len(e.inputs) < 2
                   for a in e.inputs if isinstance(a, Var)}
    return {e.out for e in graph.eqns if e.prim.extra.get("broadcast_read")} - other_reads


def partition(graph: Graph, *, fuse_reductions: bool = True, windows: str | None = None,
              lone_rows: bool = False) -> list:
    """Return the program as a list of items: `Group`s and plain `Eqn`s, in a valid order.
    `windows`: which poolings become windows groups ("auto", "all", "none"; None: as
    ``TRACEJIT_WINDOWS`` says). `lone_rows`: a lone row reduction of an outside value stays
    a rows group instead of a step (a primitive's kernel of its own: a lone sum's,
    reduce_rows.py; log_softmax's backward rows form)."""
    items = _partition(graph, fuse_reductions, frozenset(), lone_rows)
    # A rows group pays where a row is walked more than once; one reduction of an outside
    # value runs as a step, so the work after it can take a full reduction as epilogue.
    lone = frozenset(id(g.rows[0]) for g in items
                     if isinstance(g, Group) and len(g.rows) == 1
                     and not any(g.rows[0].inputs[0] is e.out for e in g.eqns))
    if lone and not lone_rows:
        items = _partition(graph, fuse_reductions, lone)
    from .windows import attach_windows
    from .scatters import attach_scatters
    return attach_scatters(attach_windows(items, graph, windows), graph) if fuse_reductions else items


def _partition(graph: Graph, fuse_reductions: bool, lone: frozenset, keep_rows: bool = False) -> list:
    group_of: dict = {}        # Var -> Group that computes it
    producer: dict = {}        # Var -> the step Eqn that computes it (values outside groups)
    groups: dict = {}          # gid -> Group
    order: list = []           # Groups and Eqns, in creation order
    merged_into: dict = {}     # gid -> gid, for merged groups
    ext_in: dict = {}          # gid -> external Vars read by the group, an ordered set (grows with it)

    def find(g: Group) -> Group:
        root = g
        while root.gid in merged_into:
            root = groups[merged_into[root.gid]]
        # (path compression: merges chain groups, and an unrolled recurrent step's graph
        # walked chains of hundreds here at every look-up, most of its planning time)
        while g is not root:
            merged_into[g.gid], g = root.gid, groups[merged_into[g.gid]]
        return g

    def owner(a):
        g = group_of.get(a)
        return find(g) if g is not None else None

    # The other direction of the same edges, for `depends_on`'s forward walk: per value its
    # readers, per group the values it computes.
    readers: dict = {}         # Var -> [Group or Eqn]
    made: dict = {}            # gid -> Vars the group computes (grows with it)
    top: dict = {}             # gid -> the latest made of the groups merged into it

    def depends_on(values, targets: set) -> bool:
        """Does any of `values` need (transitively) a group in `targets` to have run?
        Dependencies are taken per group (a group runs as one kernel; per-value ones miss
        cycles through two members). Two walks take turns, back from `values` and forward
        from `targets`, and the first to end answers: either alone is quadratic (an unrolled
        recurrent step: 14 s of 17 walking back)."""
        want = {a for a in values if isinstance(a, Var)}
        if not want:
            return False
        back = list(want)
        seen: set = set()
        seen_groups: set = set()
        fwd = [v for gid in targets for v in made[gid]]
        reached: set = set()
        fwd_groups: set = set(targets)
        fwd_eqns: set = set()
        while back and fwd:   # (either walk ending without an answer: none depends)
            v = back.pop()
            if v not in seen:
                seen.add(v)
                g = owner(v)
                if g is not None:
                    if g.gid in targets:
                        return True
                    if g.gid not in seen_groups:
                        seen_groups.add(g.gid)
                        back.extend(ext_in[g.gid])
                else:
                    e = producer.get(v)
                    if e is not None:
                        back.extend(a for a in e.inputs if isinstance(a, Var))
            u = fwd.pop()
            if u not in reached:
                if u in want:
                    return True
                reached.add(u)
                for r in readers.get(u, ()):
                    if isinstance(r, Group):
                        r = find(r)
                        if r.gid not in fwd_groups:
                            fwd_groups.add(r.gid)
                            fwd.extend(made[r.gid])
                    elif id(r) not in fwd_eqns:
                        fwd_eqns.add(id(r))
                        fwd.extend(r.outs)
        return False

    def outside(gids: set, values) -> list:
        out = []
        for a in values:
            if isinstance(a, Var):
                g = owner(a)
                if g is None or g.gid not in gids:
                    out.append(a)
        return out

    def add_inputs(g: Group, values) -> None:
        for a in values:
            if isinstance(a, Var):
                ext_in[g.gid][a] = None
                readers.setdefault(a, []).append(g)

    def computes(g: Group, v: Var) -> None:
        group_of[v] = g
        made[g.gid].append(v)

    def step(e: Eqn) -> None:
        order.append(e)
        for o in e.outs:
            producer[o] = e
        for a in e.inputs:
            if isinstance(a, Var):
                readers.setdefault(a, []).append(e)

    # Pairs whose union has a cycle: a group only grows, and a cycle through values
    # outside the pair stays one until a third group merges into either (`merges`). An
    # unrolled recurrent step asked the same pairs 9-10 times, 0.4 s of its planning.
    cyclic: dict = {}          # (gid, gid) -> (merges of each) when found cyclic
    merges: dict = {}          # gid -> groups merged into it so far

    def apart(a: Group, b: Group) -> bool:
        """Would merging `a` and `b` make a cycle: does a value outside both that either
        reads need the other?"""
        key, now = (a.gid, b.gid), (merges.get(a.gid, 0), merges.get(b.gid, 0))
        if cyclic.get(key) == now:
            return True
        parts = {a.gid, b.gid}
        if depends_on(outside(parts, [*ext_in[a.gid], *ext_in[b.gid]]), parts):
            cyclic[key] = now
            return True
        return False

    def merge(into: Group, g: Group) -> None:
        merges[into.gid] = merges.get(into.gid, 0) + 1
        ext_in[into.gid].update(ext_in[g.gid])
        made[into.gid].extend(made[g.gid])
        top[into.gid] = max(top[into.gid], top[g.gid])
        merged_into[g.gid] = into.gid

    def new_group(shape: tuple) -> Group:
        gid = len(groups)
        g = groups[gid] = Group(gid, shape)
        ext_in[gid], made[gid], top[gid] = {}, [], gid
        order.append(g)
        return g

    col_outs: set = set()      # the values of rows groups' column sums (no reader joins)

    def column_group(e: Eqn):
        """The rows group (over the last dim, of e's operand's shape) that computes or reads
        column sum `e`'s operand and may fold it, or None."""
        src = e.inputs[0]
        shape = tuple(src.aval.shape)
        if src in group_of:
            cands = [owner(src)]
        else:   # (the groups that read it, the latest made first)
            cands = sorted({id(g): g for g in (find(r) for r in readers.get(src, ()) if isinstance(r, Group))}
                           .values(), key=lambda g: -top[g.gid])
        for g in cands:
            if (g.rows and g.reduction is None and g.window is None and g.shape == shape
                    and _row_dims(g.rows[0]) == (len(shape) - 1,)
                    and not depends_on(outside({g.gid}, e.inputs), {g.gid})):
                return g
        return None

    views = index_views(graph) - {a for a in graph.outputs if isinstance(a, Var)}
    for e in graph.eqns:
        if _elementwise_ok(e) and e.outs[0] not in views:
            shape = tuple(e.out.aval.shape)
            cands = []
            for a in e.inputs:
                if isinstance(a, Var) and a in group_of and a not in col_outs:
                    g = owner(a)
                    if _fits(g, shape) and g not in cands:
                        cands.append(g)
            # (a group's column sums are whole only after its last row: no step of it reads
            # one, as ``x - x.sum(0)`` of a single row would)
            sums_of = {owner(a).gid for a in e.inputs if isinstance(a, Var) and a in col_outs}
            target = None
            cands.sort(key=lambda g: not g.rows)   # a rows group first: the per-row work joins it
            for g in cands:
                if g.gid not in sums_of and not depends_on(outside({g.gid}, e.inputs), {g.gid}):
                    target = g
                    break
            if target is not None:
                # Merge other candidate groups into target when the union stays acyclic:
                # nothing the union reads from outside may depend on a part of it.
                for g in cands:
                    if g is target or g.shape != target.shape or not _same_rows(g, target) or g.gid in sums_of:
                        continue
                    parts = {target.gid, g.gid}
                    if not apart(target, g) and not depends_on(outside(parts, e.inputs), parts):
                        target.eqns.extend(g.eqns)
                        target.rows.extend(g.rows)
                        target.cols.extend(g.cols)
                        merge(target, g)
            if target is None:
                target = new_group(shape)
            target.eqns.append(e)
            add_inputs(target, e.inputs)
            computes(target, e.out)
        elif fuse_reductions and _row_reduction(e) and id(e) not in lone:
            src = e.inputs[0]
            shape = tuple(src.aval.shape)
            g = owner(src) if src in group_of else None
            if not (g is not None and g.reduction is None and g.shape == shape
                    and (not g.rows or _row_dims(g.rows[0]) == _row_dims(e))
                    and not depends_on(outside({g.gid}, e.inputs), {g.gid})):
                g = new_group(shape)
            g.rows.append(e)
            add_inputs(g, e.inputs)
            computes(g, e.out)
        elif fuse_reductions and _column_sum(e) and (cg := column_group(e)) is not None:
            cg.cols.append(e)
            add_inputs(cg, e.inputs)
            computes(cg, e.out)
            col_outs.add(e.out)
        elif (fuse_reductions and e.prim in FUSIBLE_REDUCTIONS + (ARGSORT,) and isinstance(e.inputs[0], Var)
              and e.inputs[0] in group_of and e.out.aval.dtype.name in _KERNEL_DTYPES and _epilogue_ok(e)):
            g = owner(e.inputs[0])
            if (g.reduction is None and not g.rows and g.shape == tuple(e.inputs[0].aval.shape)
                    and not depends_on(outside({g.gid}, e.inputs), {g.gid})):
                g.reduction = e
                add_inputs(g, e.inputs)
                computes(g, e.out)
            else:
                step(e)
        else:
            step(e)

    # Second pass: elementwise groups join a reduction group of the same shape they share
    # data with, unless they read its result (no epilogue is lost; the same cycle test
    # applies). Per-row values a rows group reads join it as its per-row work.
    live = list({find(it).gid: find(it) for it in order if isinstance(it, Group)}.values())

    def joined(gr: Group, gm: Group) -> bool:
        """Merge `gm` into `gr` unless that makes a cycle; whether it did."""
        if apart(gr, gm):
            return False
        gr.eqns.extend(gm.eqns)
        merge(gr, gm)
        return True
    for gm in [g for g in live if g.reduction is None and not g.rows]:
        mine = set(ext_in[gm.gid])
        rows = [gr for gr in live if gr.rows and gr.row_shape == gm.shape != gr.shape
                and find(gr) is gr and any(owner(a) is gm for a in ext_in[gr.gid])]
        if any(joined(gr, gm) for gr in rows):
            continue
        for gr in live:
            if gr.reduction is None or gr.shape != gm.shape or gr.reduction.out in mine:
                continue
            shares = any(owner(a) is gr for a in mine) or any(a in mine for a in ext_in[gr.gid])
            if shares and joined(gr, gm):
                break

    items = []
    seen = set()
    for it in order:
        if isinstance(it, Group):
            g = find(it)
            if g.gid in seen:
                continue
            seen.add(g.gid)
            items.append(g if keep_rows else _plain(g))
        else:
            items.append(it)
    _finish_groups(graph, [i for i in items if isinstance(i, Group)], group_of, find)
    return _schedule(items, graph)


def _plain(g: Group):
    """`g`, or what it is without rows: one row reduction nothing in it reads is the
    group's epilogue, and such a reduction alone is a step."""
    if len(g.rows) != 1 or g.cols:
        return g
    red = g.rows[0]
    if any(red.out in e.inputs for e in g.eqns):
        return g
    if not g.eqns:
        return red
    g.rows = []
    g.reduction = red
    return g


def _finish_groups(graph, groups, group_of, find):
    """Compute each group's external inputs and the values it must write out."""
    _, readers, results = def_use(graph)
    pos = {id(e): i for i, e in enumerate(graph.eqns)}
    for g in groups:
        # Keep the group's equations in program order (merges may have interleaved them).
        g.eqns.sort(key=lambda e: pos[id(e)])
        g.rows.sort(key=lambda e: pos[id(e)])
        g.cols.sort(key=lambda e: pos[id(e)])
        members = {id(e) for e in g.members}
        g.inputs = external_inputs(g.members)
        outs = [e.out for e in g.eqns + g.rows + g.cols
                if e.out in results or any(id(r) not in members for r in readers.get(e.out, ()))]
        if g.reduction is not None:
            outs.append(g.reduction.out)
        g.outputs = outs


def external_inputs(eqns) -> list:
    """The values `eqns` read and do not compute, in first-use order."""
    defined = {e.out for e in eqns}
    return list(dict.fromkeys(a for e in eqns for a in e.inputs
                              if isinstance(a, Var) and a not in defined))


def _schedule(items, graph):
    """Topologically order items: a group runs once all its inputs exist; of the items
    ready, the earliest in `items` runs first (Kahn's walk over a heap of positions: n log n
    in the items, of which an unrolled recurrent step has thousands)."""
    made_by: dict = {}
    for i, it in enumerate(items):
        for v in (it.defined if isinstance(it, Group) else it.outs):
            made_by[v] = i
    produced = set(graph.inputs)
    missing = [0] * len(items)
    waiting: dict = {}    # item position -> the items that wait for it
    for i, it in enumerate(items):
        need = it.inputs if isinstance(it, Group) else [a for a in it.inputs if isinstance(a, Var)]
        for j in {made_by.get(a, -1) for a in need if a not in produced}:
            missing[i] += 1
            waiting.setdefault(j, []).append(i)
    ready = [i for i, n in enumerate(missing) if n == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(items[i])
        for k in waiting.get(i, ()):
            missing[k] -= 1
            if missing[k] == 0:
                heapq.heappush(ready, k)
    if len(out) != len(items):   # (a value no item makes, or a cycle)
        raise RuntimeError("fusion produced a cyclic schedule (internal error)")
    return out
