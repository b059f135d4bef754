"""The passes of a rows nest over one row: what each backend's renderer walks.

A rows nest computes, per row, reductions over the last dim and elementwise work that
reads them (a channel nest the same per channel). Its values are *per element* (depending
on the folded index) or *per row* (a reduction's result ``r<k>``, steps of per-row values,
operands broadcast along the last dim).

Reductions go into passes by dependence: one reading no other is in pass 0, one reading a
pass-p result in pass p + 1 (softmax: the max, then the sum of ``exp(x - max)``). Each pass
loops over the row once and recomputes the per-element steps it needs (cheaper than a
buffer while the row is in cache); per-row steps run just before the pass that reads them.
A last pass writes the per-element outputs and folds the column sums (`LoopNest.cols`).
A fold-pass value computed by a math function that the last pass needs again (softmax's
``exp(x - max)``) is stored into an output as computed (`RowPass.stash`) and read back
(`RowPass.restore`): a store and a load cost less than a second ``exp``.

`schedule` returns that order; codegen_cpu_rows.py runs each row on one thread,
codegen_cuda_rows.py gives each row a block.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .emitter import Emitter
from .loopnest import Const, LoopNest

__all__ = ["RowPass", "RowSchedule", "schedule"]


@dataclass(frozen=True)
class RowPass:
    """One loop over a row: per-row steps run before it (`before`), the per-element
    operands it loads and steps it computes, and what it folds (reduction indices) or
    writes (outputs, the last pass)."""
    before: tuple      # Steps (per row), in program order
    loads: tuple       # Operands (per element) read in the loop
    steps: tuple       # Steps (per element), in program order
    folds: tuple       # indices into nest.rows folded in this loop
    writes: tuple      # per-element Outputs stored in this loop
    stash: tuple = ()    # (Output, name): store the value into the output as it is computed
    restore: tuple = ()  # (Output, name): read the value back from the output first
    cols: tuple = ()     # indices into nest.cols folded in this loop (the last pass)


@dataclass(frozen=True)
class RowSchedule:
    row_loads: tuple   # Operands read once per row (broadcast along the last dim)
    passes: tuple      # RowPass per loop, the reductions' first, then the outputs' (if any)
    after: tuple       # per-row Steps needed by per-row outputs only, after the reductions
    row_writes: tuple  # per-row Outputs

    def row_names(self, nest: LoopNest) -> set:
        """Names valid for a whole row: per-row operands, reductions, per-row steps."""
        out = {op.name for op in self.row_loads}
        out |= {f"r{k}" for k in range(len(nest.rows))}
        out |= {st.name for p in self.passes for st in p.before}
        return out | {st.name for st in self.after}


def _args(step) -> list:
    return [a for a in step.args if not isinstance(a, Const)]


class _Probe(Emitter):
    """Renders a step's scalar rule only to see whether it calls a math function."""

    def _type(self, dt: str) -> str:
        return dt

    def _call(self, fn: str, spec, args: tuple) -> str:
        self.imports.add(fn)
        return f"{fn}({', '.join(args)})"


def _calls_math(step) -> bool:
    em = _Probe(step.dtype)
    args = [em.const(a.value, a.dtype) if isinstance(a, Const) else a for a in step.args]
    try:
        step.prim.scalar(em, *args, **dict(step.params))
    except NotImplementedError:
        return False
    return bool(em.imports)


def schedule(nest: LoopNest, stash: bool = True) -> RowSchedule:
    """The passes of rows nest `nest` (see the module docstring); `stash` False: every
    value the last pass needs is recomputed there."""
    folded = set(nest.rows[0].dims) if nest.rows else {nest.rank - 1}
    by_name = {st.name: st for st in nest.steps}
    element = {op.name for op in nest.operands if folded & set(op.index) and op.layout != "scalar"}
    for st in nest.steps:
        if any(a in element for a in _args(st)):
            element.add(st.name)
    # reductions each name needs, transitively
    needs: dict = {f"r{k}": {k} for k in range(len(nest.rows))}
    needs.update((op.name, set()) for op in nest.operands)
    for st in nest.steps:
        needs[st.name] = set().union(*(needs[a] for a in _args(st)))
    level: dict = {}
    for k, red in enumerate(nest.rows):
        deps = needs.get(red.value, set())
        level[k] = 1 + max((level[d] for d in deps), default=-1)

    def closure(names, stop=frozenset()) -> set:
        """Every step name `names` reach (through steps; operands, r<k> and `stop` stop it)."""
        out, stack = set(), list(names)
        while stack:
            a = stack.pop()
            if a in out or a not in by_name or a in stop:
                continue
            out.add(a)
            stack.extend(_args(by_name[a]))
        return out

    def loads_of(names) -> tuple:
        used = set(names) | {a for n in names if n in by_name for a in _args(by_name[n])}
        return tuple(x for x in nest.operands if x.name in used and x.name in element)

    done: set = set()   # per-row steps already computed
    passes = []

    def row_steps(names) -> tuple:
        want = {n for n in closure(names) if n not in element and n not in done}
        done.update(want)
        return tuple(st for st in nest.steps if st.name in want)

    for lvl in range(1 + max(level.values(), default=-1)):
        folds = tuple(k for k in range(len(nest.rows)) if level[k] == lvl)
        vals = [nest.rows[k].value for k in folds]
        elems = closure(vals) & element
        reads = {a for n in elems for a in _args(by_name[n])} | set(vals)
        before = row_steps(reads - element)
        steps = tuple(st for st in nest.steps if st.name in elems)
        passes.append(RowPass(before, loads_of(elems | (set(vals) & element)), steps, folds, ()))
    elem_out = tuple(o for o in nest.outputs if not o.row and not o.col)
    if elem_out or nest.cols:
        vals = [o.value for o in elem_out] + [c.value for c in nest.cols]
        kept = _kept(nest, passes, closure, closure(vals) & element, elem_out) if stash else None
        stop = frozenset() if kept is None else frozenset({kept[2]})
        elems = closure(vals, stop) & element
        reads = {a for n in elems for a in _args(by_name[n])} | (set(vals) - stop)
        before = row_steps(reads - element - stop)
        steps = tuple(st for st in nest.steps if st.name in elems)
        restore = ()
        if kept is not None:
            p, out, name = kept
            passes[p] = replace(passes[p], stash=((out, name),))
            restore = ((out, name),)
        passes.append(RowPass(before, loads_of(elems | ((set(vals) - stop) & element)), steps, (), elem_out,
                              restore=restore, cols=tuple(range(len(nest.cols)))))
    row_out = tuple(o for o in nest.outputs if o.row)
    after = row_steps([o.value for o in row_out])
    row_loads = tuple(op for op in nest.operands if op.name not in element)
    return RowSchedule(row_loads, tuple(passes), after, row_out)


def _kept(nest: LoopNest, passes: list, closure, needed: set, elem_out: tuple):
    """(fold pass index, Output, step name) of the value the last pass should read back
    instead of recomputing, or None: a needed fold-pass value that calls a math function,
    the most steps first, with an output of its dtype to hold it."""
    by_name = {st.name: st for st in nest.steps}
    best = None
    for p, rp in enumerate(passes):
        for st in rp.steps:
            if st.name not in needed or not st.out_dtype:
                continue
            out = next((o for o in elem_out if o.dtype == st.out_dtype), None)
            work = closure([st.name]) & needed
            if out is None or not any(_calls_math(by_name[n]) for n in work):
                continue
            if best is None or len(work) > best[0]:
                best = (len(work), p, out, st.name)
    return None if best is None else best[1:]
