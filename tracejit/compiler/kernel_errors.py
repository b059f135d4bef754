"""Naming the fused group behind an exception raised inside a compiled kernel: each plan
registers which item every line of its source runs (`errors.register_source_lines`), and
`kernel_error` walks the traceback to the innermost group's. Imports nothing heavy (the
capture path uses it).
"""
from __future__ import annotations

import os

from ..errors import IndexRangeError, KernelError, TracejitError, innermost_source_item, note_user_line

__all__ = ["group_parts", "group_label", "kernel_error"]


def group_parts(grp) -> tuple:
    """(ops, source locations) of a fused group, for explain and for errors."""
    win = getattr(grp, "window", None)    # a windows group's pooling (compiler/windows.py)
    sc = getattr(grp, "scatter", None)    # a scatter group's row add (compiler/scatters.py)
    located = list(grp.eqns) + [e for e in (win, sc) if e is not None]
    locs = sorted({f"{os.path.basename(e.loc[0])}:{e.loc[1]}" for e in located if e.loc})
    ops = [f"{e.prim.name} (row)" for e in getattr(grp, "rows", ())] + [e.prim.name for e in grp.eqns]
    extra = ((win, "window"), (sc, "scatter"), (getattr(grp, "reduction", None), "epilogue"))
    return ops + [f"{e.prim.name} ({what})" for e, what in extra if e is not None], locs


def group_label(grp) -> str:
    """``fused group 3 (mul, tanh, sum (epilogue)) from model.py:9, model.py:10``."""
    ops, locs = group_parts(grp)
    return f"fused group {grp.gid} ({', '.join(ops)}) from {', '.join(locs) or 'unknown lines'}"


def kernel_error(exc: BaseException) -> TracejitError | None:
    """A `KernelError` naming the fused group whose kernel raised `exc` (a scatter's index out
    of range: the `IndexRangeError` eager raises, noted at the user's line), or None when `exc`
    did not come from a kernel call of a plan, or is tracejit's own error (a
    `CompileError` of a variant compiled on first use already names its group)."""
    if isinstance(exc, TracejitError) or not isinstance(exc, Exception):
        return None
    found = innermost_source_item(exc.__traceback__, lambda item: hasattr(item, "gid"))   # (a fused group)
    if found is None:
        return None
    sc = getattr(found[0], "scatter", None)
    if sc is not None and type(exc) is IndexError and len(exc.args) == 3:   # (render_scatter's check)
        what, r, n = exc.args
        err = IndexRangeError(f"{what}: index {r} is out of range for {'dim 0 of ' * (what == 'scatter_add')}size {n}")
        err.__suppress_context__ = True
        note_user_line(err, sc.loc, found[1])
        return err
    label = group_label(found[0])
    return KernelError(f"the kernel of {label} raised {type(exc).__name__}: {exc}")

