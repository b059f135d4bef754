"""Naming the fused group behind an exception raised inside a compiled kernel: each plan
registers which group every line of its source runs, and `kernel_error` walks the
traceback to the innermost plan frame. Imports nothing heavy (the capture path uses it).
"""
from __future__ import annotations

import os
import weakref

from ..errors import KernelError, TracejitError

__all__ = ["group_parts", "group_label", "register_plan_lines", "kernel_error"]

_GROUP_LINES: dict = {}   # plan pseudo-file name -> {line number: group label}


def group_parts(grp) -> tuple:
    """(ops, source locations) of a fused group, for explain and for errors."""
    win = getattr(grp, "window", None)    # a windows group's pooling (compiler/windows.py)
    located = list(grp.eqns) + ([win] if win is not None else [])
    locs = sorted({f"{os.path.basename(e.loc[0])}:{e.loc[1]}" for e in located if e.loc})
    ops = [f"{e.prim.name} (row)" for e in getattr(grp, "rows", ())] + [e.prim.name for e in grp.eqns]
    if win is not None:
        ops.append(f"{win.prim.name} (window)")
    red = getattr(grp, "reduction", None)
    if red is not None:
        ops.append(f"{red.prim.name} (epilogue)")
    return ops, locs


def group_label(grp) -> str:
    """``fused group 3 (mul, tanh, sum (epilogue)) from model.py:9, model.py:10``."""
    ops, locs = group_parts(grp)
    return f"fused group {grp.gid} ({', '.join(ops)}) from {', '.join(locs) or 'unknown lines'}"


def register_plan_lines(owner, fname: str, lines: dict) -> None:
    """Remember `lines` ({line: label}) for the plan source `fname` while `owner` lives."""
    _GROUP_LINES[fname] = lines
    weakref.finalize(owner, _GROUP_LINES.pop, fname, None)


def kernel_error(exc: BaseException) -> KernelError | None:
    """A `KernelError` naming the fused group whose kernel raised `exc`, or None when `exc`
    did not come from a kernel call of a plan, or is tracejit's own error (a
    `CompileError` of a variant compiled on first use already names its group)."""
    if isinstance(exc, TracejitError) or not isinstance(exc, Exception):
        return None
    label = None
    tb = exc.__traceback__
    while tb is not None:                      # the innermost plan frame wins
        lines = _GROUP_LINES.get(tb.tb_frame.f_code.co_filename)
        if lines is not None:
            label = lines.get(tb.tb_lineno, label)
        tb = tb.tb_next
    if label is None:
        return None
    return KernelError(f"the kernel of {label} raised {type(exc).__name__}: {exc}")

