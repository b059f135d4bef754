"""Windows groups: pooling as a window read in the schedule, fused with its elementwise neighbours.

A pooling forward reads each output's window of an (N, C, H, W) value; when an elementwise
group computes that value and nothing else reads it, the pooling joins the group as its
*window* and the kernel computes the group's work at each window position, so the value
is never written (loopnest.Window). A pooling backward is a *gather* per input element,
and elementwise work of the input's shape that reads it joins behind it.

`attach_windows` runs on `fusion.partition`'s items. ``windows="auto"`` (the default;
``TRACEJIT_WINDOWS`` sets it) makes a windows group of every forward and average backward,
and of a max's scatter where its windows tile the input (`tiles`: 0.46 ms against the
registered kernel's 0.68); ``"all"`` of every floating rank-4 pooling; ``"none"`` none. A
reader that reads only the pooled value's shape gets another value of that shape. A fold
whose result is only rounded to bf16 stores it rounded (`_round_on_store`).
"""
from __future__ import annotations

from ..jit.ir import Eqn, Var
from ..ops.pooling_prim import AVG_POOL2D, AVG_POOL2D_BACKWARD, MAX_POOL2D
from ..ops.pool_offsets import MAX_POOL2D_SCATTER, MAX_POOL2D_WITH_OFFSETS

__all__ = ["KINDS", "attach_windows", "channel_major_outputs", "channel_layouts", "channel_rows", "channel_view", "strided_layout", "window_kind", "MODES", "tiles"]

#: primitive -> (kind, gather): what loopnest.Window calls it, and whether it is a backward
KINDS = {MAX_POOL2D_WITH_OFFSETS: ("max_record", False), MAX_POOL2D: ("max", False),
         AVG_POOL2D: ("avg", False), MAX_POOL2D_SCATTER: ("scatter", True),
         AVG_POOL2D_BACKWARD: ("avg_backward", True)}
MODES = ("auto", "all", "none")
_FLOATS = ("float32", "float64")
# Window positions up to which the renderers unroll a window (LeNet's 2x2: 4).
MAX_POSITIONS = 64


def window_kind(e) -> str | None:
    """The kind of pooling equation `e` a windows group takes (float32/float64, 4-D,
    at most MAX_POSITIONS window positions), else None."""
    if not isinstance(e, Eqn) or e.prim not in KINDS or len(e.outs) != 1:
        return None
    kind, gather = KINDS[e.prim]
    if not all(isinstance(a, Var) for a in e.inputs):
        return None
    dts = {a.aval.dtype.name for a in e.inputs} | {e.out.aval.dtype.name}
    if len(dts) != 1 or dts.pop() not in _FLOATS:
        return None
    p = e.params
    if tuple(p["kernel"])[0] * tuple(p["kernel"])[1] > MAX_POSITIONS:
        return None
    shape = tuple(e.out.aval.shape) if gather else tuple(e.inputs[0].aval.shape)
    if len(shape) != 4 or not all(isinstance(d, int) for d in shape):
        return None
    return kind


def tiles(kernel, stride, dilation) -> bool:
    """Whether windows of this geometry tile the input (stride = kernel, no dilation), so a
    gather can walk the windows instead of searching each position's."""
    return tuple(stride) == tuple(kernel) and tuple(dilation) == (1, 1)


def _plain(g) -> bool:
    return g.reduction is None and not g.rows and g.window is None


def channel_rows(g) -> bool:
    """Whether `g` is a rows group of per-channel sums (fusion._row_reduction: over every
    dim but 1 of an (N, C, H, W) value)."""
    return bool(g.rows) and tuple(g.rows[0].params["dims"]) == (0, 2, 3)


def channel_layouts(grp, layouts: tuple, producer, ordered) -> tuple:
    """`layouts` of CPU group `grp`'s operands with "cm" for each "nd" one of a windows or
    channel group that is a permuted view of C-ordered (C, N, H, W) memory (a convolution's
    output), which the "nd" variant would read with loads LLVM cannot vectorize."""
    from ..ops.shape import PERMUTE
    if len(grp.shape) != 4 or not (grp.window is not None or channel_rows(grp)):
        return layouts

    def cm(v, lay) -> bool:
        e = producer(v) if lay == "nd" and tuple(v.aval.shape) == tuple(grp.shape) else None
        return (e is not None and e.prim is PERMUTE and tuple(e.params["dims"]) == (1, 0, 2, 3)
                and isinstance(e.inputs[0], Var) and ordered(e.inputs[0]))
    return tuple("cm" if cm(v, lay) else lay for v, lay in zip(grp.inputs, layouts))


def channel_view(a):
    """`a` (N, C, H, W) as its (C, N, H, W) view, C-contiguous (a copy where that view is
    not): how a plan passes a "cm" operand (loopnest.LAYOUTS) of a windows or channel group."""
    t = a.swapaxes(0, 1)
    return t if t.flags.c_contiguous else t.copy()


def strided_layout(a, lay: str) -> str:
    """The layout a windows or channel group's kernel takes operand `a` in at run time (its
    contiguous variant's being `lay`): `lay` if C-contiguous, "cm" where its (C, N, H, W)
    view is, else "nd"."""
    if a.flags.c_contiguous:
        return lay
    return "cm" if a.ndim == 4 and a.swapaxes(0, 1).flags.c_contiguous else "nd"


def _host(g) -> bool:
    """Whether a window may join group `g`: elementwise work, or per-channel sums and
    the work reading them (the window fold is then the channel's last pass)."""
    return g.reduction is None and g.window is None and (not g.rows or channel_rows(g))


def _element_outputs(g) -> list:
    """`g`'s outputs of its iteration shape (a rows group's others are per row)."""
    return [v for v in g.outputs if tuple(v.aval.shape) == tuple(g.shape)]


def attach_windows(items: list, graph, windows: str | None = None) -> list:
    """`items` with the pooling steps taken into windows groups (module docstring);
    `windows` None: ``TRACEJIT_WINDOWS``."""
    from .. import envflags
    from .fusion import Group, _schedule
    if windows is None:
        windows = envflags.value("TRACEJIT_WINDOWS").lower()
    if windows not in MODES:
        raise ValueError(f"windows must be one of {MODES}, got {windows!r}")
    if windows == "none" or not any(window_kind(it) for it in items):
        return channel_major_outputs(items, graph)
    results = {a for a in graph.outputs if isinstance(a, Var)}
    items = list(items)
    next_gid = [1 + max((it.gid for it in items if isinstance(it, Group)), default=-1)]

    def readers(v) -> list:
        return [it for it in items if v in (it.inputs if isinstance(it, Group) else
                                           [a for a in it.inputs if isinstance(a, Var)])]

    def new_group(shape, e, inputs, outputs):
        g = Group(next_gid[0], tuple(shape), [], None, list(inputs), list(outputs))
        g.window = e
        next_gid[0] += 1
        return g

    for idx, e in enumerate(list(items)):
        kind = window_kind(e)
        if kind is None or KINDS[e.prim][1]:
            continue
        x = e.inputs[0]
        prod = next((it for it in items if isinstance(it, Group) and x in it.defined), None)
        fused = False
        if (prod is not None and _host(prod) and tuple(prod.shape) == tuple(x.aval.shape)
                and x in prod.outputs and x not in results):
            others = [r for r in readers(x) if r is not e]
            shape_only = all(_shape_only(r, x) for r in others)
            if shape_only and _element_outputs(prod) != [x]:
                _peel(items, prod, x, next_gid)
            sub = next((v for v in prod.inputs if tuple(v.aval.shape) == tuple(x.aval.shape)), None)
            if sub is not None and shape_only and _element_outputs(prod) == [x]:
                for r in others:
                    items[items.index(r)] = Eqn(r.prim, tuple(sub if a is x else a for a in r.inputs),
                                                r.outs, r.params, r.loc)
                prod.window = e
                prod.outputs = [e.out] + [v for v in prod.outputs if v is not x]
                items.remove(e)
                fused = True
        if not fused:
            items[items.index(e)] = new_group(x.aval.shape, e, [x], [e.out])

    _round_on_store(items, results, readers)
    for e in list(items):
        kind = window_kind(e)
        if kind is None or not KINDS[e.prim][1] or (kind == "scatter" and windows != "all"
                                                     and not tiles(e.params["kernel"], e.params["stride"],
                                                                   e.params["dilation"])):
            continue
        e = _gather_words(items, e, readers)
        gx = e.out
        shape = tuple(gx.aval.shape)
        reads = readers(gx)
        host = next((r for r in reads if isinstance(r, Group) and _plain(r)
                     and tuple(r.shape) == shape), None)
        if host is not None:
            host.window = e
            host.inputs = list(dict.fromkeys(list(e.inputs) + [v for v in host.inputs if v is not gx]))
            if gx in results or any(r is not host for r in reads):
                host.outputs = [gx] + list(host.outputs)
            items.remove(e)
        else:
            items[items.index(e)] = new_group(shape, e, list(e.inputs), [gx])
    return channel_major_outputs(_schedule(items, graph), graph)


def channel_major_outputs(items: list, graph) -> list:
    """`items` with each channel group's outputs that only (1, 0, 2, 3) permutes read marked
    ``cm_outputs``: written channel-major, the permute and the reshape to a convolution
    backward's rows after it are views, not a transposing copy."""
    from ..ops.shape import PERMUTE
    from .fusion import Group
    results = {a for a in graph.outputs if isinstance(a, Var)}
    readers: dict = {}
    for it in items:
        for a in it.inputs:
            readers.setdefault(a, []).append(it)
    for g in items:
        if not isinstance(g, Group) or len(g.shape) != 4 or not channel_rows(g):
            continue
        g.cm_outputs = frozenset(
            v for v in g.outputs if tuple(v.aval.shape) == tuple(g.shape) and v not in results
            and v in readers and all(isinstance(r, Eqn) and r.prim is PERMUTE
                                     and tuple(r.params["dims"]) == (1, 0, 2, 3) for r in readers[v]))
    return items


def _round_on_store(items: list, results: set, readers) -> None:
    """Each forward window whose result only a rounding to bf16 reads (a group of that one
    cast, on the CPU) stores it rounded (its group's ``stores``: loopnest.lower): a bf16
    pooling is one pass, widened on load, folded in float32, rounded on store."""
    from .. import dtypes
    from ..ops.elementwise_logic import CAST
    from .fusion import Group
    for g in [it for it in items if isinstance(it, Group) and it.window is not None]:
        v = g.window.out
        if KINDS[g.window.prim][1] or v in results or v not in g.outputs or v.aval.device.type != "cpu":
            continue
        rs = readers(v)
        r = rs[0] if len(rs) == 1 else None
        if not (isinstance(r, Group) and _plain(r) and len(r.eqns) == 1 and r.eqns[0].prim is CAST
                and r.eqns[0].params.get("dtype") is dtypes.bfloat16 and r.inputs == [v]):
            continue
        o = r.eqns[0].out
        g.outputs = [o if u is v else u for u in g.outputs]
        g.stores = {**getattr(g, "stores", {}), o: v}
        items.remove(r)


def _gather_words(items: list, e, readers):
    """Gather `e` reading the bf16 words of each operand that a group of one widening cast
    alone makes for it, widened on load (the cast's group dropped): a bf16 pooling backward
    is one pass. `e` itself where there is none (CPU only)."""
    from .. import dtypes
    from ..ops.elementwise_logic import CAST
    from .fusion import Group
    if e.out.aval.device.type != "cpu":
        return e
    ins = list(e.inputs)
    for k, v in enumerate(ins):
        rs = readers(v)
        made = [it for it in items if isinstance(it, Group) and v in it.outputs]
        g = made[0] if len(made) == 1 else None
        if (rs == [e] and isinstance(g, Group) and _plain(g) and len(g.eqns) == 1 and g.eqns[0].prim is CAST
                and g.outputs == [v] and g.inputs[0].aval.dtype is dtypes.bfloat16):
            ins[k] = g.inputs[0]
            items.remove(g)
    if ins == list(e.inputs):
        return e
    new = Eqn(e.prim, tuple(ins), e.outs, e.params, e.loc)
    items[items.index(e)] = new
    return new


def _peel(items: list, g, x, next_gid: list) -> None:
    """`g`'s other outputs of its shape than `x` (a bf16 activation the backward keeps,
    rounded from the float32 one `g` reads) computed by a group of their own put before
    `g`, which then reads them: `g` writes `x` alone, so a pooling of `x` can join it as its
    window and `x` is never written. Nothing changes where an output needs `g`'s sums or
    values `g` still needs besides it, or `g` would read no value of its shape (the
    pooling's shape-only readers take one)."""
    from .fusion import Group, external_inputs
    others = [v for v in _element_outputs(g) if v is not x]
    by_out = {e.out: e for e in g.eqns}
    taken: list = []
    for o in others:
        stack, part = [o], []
        while stack:
            v = stack.pop()
            e = by_out.get(v)
            if e is None:
                if v in g.defined:
                    return                  # (a sum's: the rows pass)
                continue
            if e not in part and e not in taken:
                part.append(e)
                stack.extend(a for a in e.inputs if isinstance(a, Var))
        taken += part
    inside = {e.out for e in taken}
    rest = [e for e in g.eqns if e not in taken]
    for e in rest + g.rows + g.cols + ([g.reduction] if g.reduction is not None else []):
        if any(isinstance(a, Var) and a in inside and a not in others for a in e.inputs):
            return
    taken.sort(key=g.eqns.index)
    members = [m for m in g.members if m not in taken]
    reads = external_inputs(members)
    if not any(tuple(v.aval.shape) == tuple(x.aval.shape) for v in reads):
        return
    items.insert(items.index(g), Group(next_gid[0], g.shape, taken, None, external_inputs(taken),
                                       list(others)))
    next_gid[0] += 1
    g.eqns, g.inputs = rest, reads
    g.outputs = [v for v in g.outputs if v not in others]


def _shape_only(reader, v) -> bool:
    """Whether `reader` (an item) reads `v` only for its shape (``extra["shape_only"]``)."""
    if not isinstance(reader, Eqn):
        return False
    only = reader.prim.extra.get("shape_only", ())
    return all(k in only for k, a in enumerate(reader.inputs) if a is v)
