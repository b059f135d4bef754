"""Fusion: partition a graph's equations into kernels.

A *group* is a maximal set of elementwise equations over one iteration shape (their
output shape; smaller operands are broadcast), optionally closed by one reduction
(sum/amax/amin/prod) that consumes it as its epilogue, so ``(y_pred - y).pow(2).sum()``
is a single pass over memory. Everything else (matmul, reshapes, indexing, control
flow) is a *step* of its own that runs through its primitive's array implementation.

Groups are grown greedily in program order. Adding an equation to a group (or merging
two groups) is refused when it would create a cycle: when some operand reaches the
group through an equation outside it. Values computed in a group are written to
memory only when something outside the group (or the graph's result) reads them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..jit.ir import Eqn, Graph, Literal, Var

__all__ = ["Group", "partition", "FUSIBLE_REDUCTIONS"]

FUSIBLE_REDUCTIONS = ("sum", "amax", "amin", "prod")
_KERNEL_DTYPES = ("float32", "float64", "int32", "int64", "bool", "int8", "uint8")


@dataclass(eq=False)
class Group:
    gid: int
    shape: tuple                          # the iteration shape
    eqns: list = field(default_factory=list)
    reduction: Eqn | None = None           # epilogue, consuming a value of the group
    inputs: list = field(default_factory=list)   # external Vars read (in first-use order)
    outputs: list = field(default_factory=list)  # Vars the group must write

    @property
    def defined(self) -> set:
        s = {e.out for e in self.eqns}
        if self.reduction is not None:
            s.add(self.reduction.out)
        return s


def _elementwise_ok(e: Eqn) -> bool:
    if e.prim.name == "expand":  # fused as a broadcasting read of its operand
        return e.out.aval.dtype.name in _KERNEL_DTYPES and isinstance(e.inputs[0], Var)
    if e.prim.kind != "elementwise" or e.prim.scalar is None or len(e.outs) != 1:
        return False
    if e.out.aval.dtype.name not in _KERNEL_DTYPES or e.out.aval.device.type != "cpu" and False:
        return False
    return all(a.aval.dtype.name in _KERNEL_DTYPES for a in e.inputs)


def partition(graph: Graph, *, fuse_reductions: bool = True) -> list:
    """Return the program as a list of items: `Group`s and plain `Eqn`s, in a valid order."""
    group_of: dict = {}        # Var -> Group that computes it
    deps: dict = {}            # Var -> set of gids it (transitively) depends on
    groups: dict = {}          # gid -> Group
    order: list = []           # Groups and Eqns, in creation order
    merged_into: dict = {}     # gid -> gid, for merged groups

    def find(g: Group) -> Group:
        while g.gid in merged_into:
            g = groups[merged_into[g.gid]]
        return g

    def var_deps(a) -> set:
        return deps.get(a, set()) if isinstance(a, Var) else set()

    def legal(g: Group, e_inputs) -> bool:
        # An operand not computed in g must not depend on g (that would be a cycle).
        for a in e_inputs:
            if isinstance(a, Var):
                owner = group_of.get(a)
                if owner is not None and find(owner) is g:
                    continue
                if g.gid in {find(groups[x]).gid for x in var_deps(a)}:
                    return False
        return True

    def ext_inputs(g: Group):
        out = []
        for e in g.eqns:
            for a in e.inputs:
                if isinstance(a, Var) and not (a in group_of and find(group_of[a]) is g):
                    out.append(a)
        return out

    for e in graph.eqns:
        dep = set()
        for a in e.inputs:
            if isinstance(a, Var):
                dep |= var_deps(a)
                if a in group_of:
                    dep.add(find(group_of[a]).gid)
        target = None
        if _elementwise_ok(e):
            shape = tuple(e.out.aval.shape)
            cands = []
            for a in e.inputs:
                if isinstance(a, Var) and a in group_of:
                    g = find(group_of[a])
                    if g.reduction is None and g.shape == shape and g not in cands:
                        cands.append(g)
            for g in cands:
                if legal(g, e.inputs):
                    target = g
                    break
            if target is not None:
                # Merge other candidate groups into target when that keeps the graph acyclic.
                for g in cands:
                    if g is target:
                        continue
                    if legal(target, ext_inputs(g)) and legal(g, ext_inputs(target)):
                        target.eqns.extend(g.eqns)
                        merged_into[g.gid] = target.gid
                        for v in list(group_of):
                            if find(group_of[v]) is target:
                                pass
            if target is None:
                gid = len(groups)
                target = Group(gid, shape)
                groups[gid] = target
                order.append(target)
            target.eqns.append(e)
            group_of[e.out] = target
        elif (fuse_reductions and e.prim.name in FUSIBLE_REDUCTIONS and isinstance(e.inputs[0], Var)
              and e.inputs[0] in group_of and e.out.aval.dtype.name in _KERNEL_DTYPES):
            g = find(group_of[e.inputs[0]])
            if g.reduction is None and g.shape == tuple(e.inputs[0].aval.shape) and legal(g, e.inputs):
                g.reduction = e
                group_of[e.out] = g
                target = g
            else:
                order.append(e)
        else:
            order.append(e)
        for o in e.outs:
            deps[o] = dep

    items = []
    seen = set()
    for it in order:
        if isinstance(it, Group):
            g = find(it)
            if g.gid in seen:
                continue
            seen.add(g.gid)
            items.append(g)
        else:
            items.append(it)
    _finish_groups(graph, [i for i in items if isinstance(i, Group)], group_of, find)
    return _schedule(items, graph)


def _finish_groups(graph, groups, group_of, find):
    """Compute each group's external inputs and the values it must write out."""
    used_outside: set = set(a for a in graph.outputs if isinstance(a, Var))
    for e in graph.eqns:
        for a in e.inputs:
            if isinstance(a, Var):
                used_outside.add((a, id(e)))
    for g in groups:
        # Keep the group's equations in program order (merges may have interleaved them).
        pos = {id(e): i for i, e in enumerate(graph.eqns)}
        g.eqns.sort(key=lambda e: pos[id(e)])
        members = {id(e) for e in g.eqns}
        if g.reduction is not None:
            members.add(id(g.reduction))
        defined = g.defined
        ins = []
        for e in g.eqns + ([g.reduction] if g.reduction is not None else []):
            for a in e.inputs:
                if isinstance(a, Var) and a not in defined and a not in ins:
                    ins.append(a)
        g.inputs = ins
        outs = []
        for e in g.eqns:
            v = e.out
            if v in graph.outputs or any(isinstance(x, tuple) and x[0] is v and x[1] not in members
                                         for x in used_outside):
                outs.append(v)
        if g.reduction is not None:
            outs.append(g.reduction.out)
        g.outputs = outs


def _schedule(items, graph):
    """Topologically order items: a group runs once all its inputs exist."""
    produced = set(graph.inputs)
    pending = list(items)
    out = []
    while pending:
        progressed = False
        for it in list(pending):
            need = it.inputs if isinstance(it, Group) else [a for a in it.inputs if isinstance(a, Var)]
            if all(a in produced for a in need):
                out.append(it)
                pending.remove(it)
                if isinstance(it, Group):
                    produced.update(it.defined)
                else:
                    produced.update(it.outs)
                progressed = True
                break
        if not progressed:
            raise RuntimeError("fusion produced a cyclic schedule (internal error)")
    return out
