"""Python decisions on runtime scalar arguments, and the guards that replay them.

A Python number passed to a compiled function (a float under ``@trace``; ints and
floats under ``@script``) is an input of the graph, so a new value never recompiles.
Python code may still need its value: ``if prev_loss < 5.0:`` (a branch), ``x.view(n,
-1)`` (a size), ``math.exp(lr)``. Then capture reads the value from the call being
captured and records a *decision*: the scalar expression that produced the value
(rebuilt from the equations, back to the scalar arguments) and what it was.

- a truth test (``bool``) is guarded on its outcome: ``prev_loss < 5.0`` was True, so the
  entry serves every call where it is True again, and the other branch gets one entry;
- any other use (``float``, ``int``, ``item``, an op parameter) is guarded on the value,
  exactly (sign of zero and nan included): that is specialization, as ``@trace`` used to
  do for every scalar.

The guard evaluates the expression in Python's own arithmetic (float64), the arithmetic
the original code would have used for the decision. This is what torch.compile does with
unspecialized floats (guards on symbolic expressions); here the expressions are the IR's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
from ..ops.elementwise import CAST

__all__ = ["Decision", "NOT_KNOWN", "scalar_expr", "evaluate", "same_number", "make_check",
           "describe_decisions", "symbols_in"]

NOT_KNOWN = object()  # concretization is not possible (the value depends on tensor data)


@dataclass(frozen=True)
class Decision:
    expr: tuple          # ("in", leaf) | ("lit", value) | ("op", prim, params, (args...))
    kind: str            # "bool": outcome guarded | "value": value guarded
    expected: Any
    where: str           # "model.py:4", for messages
    what: str            # "bool(...)", "float(...)", "parameter min of clamp"

    def text(self, names: list) -> str:
        shown = render(self.expr, names)
        if self.expr[0] == "nonneg":   # a symbolic size's range (size_args.py)
            return f"{shown}  [{self.what} at {self.where}: a symbolic size's range]"
        if self.kind == "bool":
            return f"({shown}) is {self.expected}  [Python branch at {self.where}]"
        return f"{shown} == {self.expected!r}  [{self.what} at {self.where}: specialized]"


def note(decisions: list, expr: tuple, kind: str, expected, what: str, same_kind: Optional[bool] = True) -> None:
    """Append the decision `expr` to a capture's `decisions`, at the user's line, unless one
    with the same expression (and kind, where asked) is there already (`same_kind` None: the
    caller knows it is new; comparing sizes could take more facts, and note them)."""
    import os
    from ..errors import user_location
    loc = user_location(2)
    d = Decision(expr, kind, expected, f"{os.path.basename(loc[0])}:{loc[1]}" if loc else "?", what)
    if same_kind is None or not any(o.expr == d.expr and (o.kind == d.kind or not same_kind) for o in decisions):
        decisions.append(d)


def _full():
    from ..ops.creation import FULL   # (ops imports this module's users: read when first needed)
    return FULL


def scalar_expr(ctx, atom) -> Optional[tuple]:
    """The expression computing `atom` from scalar arguments and literals, or None when it
    depends on anything else (tensor data, loop-carried values)."""
    from ..shapes import Sym
    from .ir import Literal
    if isinstance(atom, Literal):
        return ("sym", atom.value) if isinstance(atom.value, Sym) else ("lit", atom.value)
    root = ctx._root()
    if ctx is root and atom in root.scalar_leaves:
        return ("in", root.scalar_leaves[atom])
    if ctx is root and atom in root.lifted:   # a float read from Python state (lifted.py)
        return ("ext", root.lifted[atom])
    if not atom.aval.weak or atom.aval.shape != ():
        return None
    for eqn in reversed(ctx.eqns):
        if atom in eqn.outs:
            if eqn.prim is _full() and isinstance(eqn.params["value"], Sym):
                return ("sym", eqn.params["value"])   # a symbolic size as a number
            if len(eqn.outs) != 1 or eqn.prim.kind != "elementwise" or eqn.prim.impl is None:
                return None
            args = []
            for a in eqn.inputs:
                sub = scalar_expr(ctx, a)
                if sub is None:
                    return None
                args.append(sub)
            return ("op", eqn.prim, tuple(sorted(eqn.params.items())), tuple(args))
    for outer, local in ctx.captured.items():  # a sub-trace reading an outer value
        if local is atom:
            return scalar_expr(ctx.parent, outer)
    return None


def evaluate(expr: tuple, leaves) -> Any:
    """The value of `expr` for these argument leaves, as a Python number."""
    tag = expr[0]
    if tag == "in":
        return leaves[expr[1]]
    if tag == "lit":
        return expr[1]
    if tag == "ext":   # a float read from Python state: its value now
        return expr[1].value()
    if tag == "sym":   # a symbolic size: its value in the call being captured
        return int(expr[1])
    if tag == "nonneg":   # a fact a shape rule assumed about symbolic sizes (size_args.py)
        env = {s: (leaves[src[1]] if src[0] == "int" else src[1].value() if src[0] == "ext"
                   else leaves[src[1]].shape[src[2]]) for s, src in expr[2]}
        return expr[1].evaluate(env) >= 0
    if tag == "layout":   # a tensor argument's memory layout (view_writes.eager_layout)
        return layout(leaves[expr[1]]._data)
    _, prim, params, args = expr
    vals = [evaluate(a, leaves) for a in args]
    params = dict(params)
    if prim is CAST:   # Python's own conversion, not the graph's dtype
        dt = params["dtype"]
        v = vals[0]
        return float(v) if dt.is_floating_point else bool(v) if dt.is_bool else int(v)
    with np.errstate(all="ignore"):
        out = prim.impl(np, *[np.asarray(v) for v in vals], **params)
    return np.asarray(out).item()


def layout(a) -> object:
    """"C" for a C-contiguous array (whatever its sizes), else its strides in bytes."""
    return "C" if a.flags.c_contiguous else tuple(a.strides)


def symbols_in(expr: tuple) -> list:
    """The symbolic sizes (`Sym`) an expression reads."""
    if expr[0] == "sym":
        return [expr[1]]
    if expr[0] == "op":
        return [s for a in expr[3] for s in symbols_in(a)]
    return []


def same_number(a, b) -> bool:
    """Equal as a guard needs: same type, same value, same sign of zero, nan equals nan."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if a != a:
            return b != b
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return a == b


def make_check(decisions: list):
    """``check(leaves) -> bool``: every decision comes out as it did at capture."""
    decisions = tuple(decisions)

    def check(leaves) -> bool:
        for d in decisions:
            v = evaluate(d.expr, leaves)
            if not (bool(v) is d.expected if d.kind == "bool" else same_number(v, d.expected)):
                return False
        return True
    return check


def describe_decisions(decisions: list, leaves, names: list) -> list:
    """Reasons a call fails the decisions (for recompile messages)."""
    out = []
    for d in decisions:
        try:
            v = evaluate(d.expr, leaves)
        except Exception as e:  # noqa: BLE001 - a reason, not an error
            out.append(f"{render(d.expr, names)} could not be evaluated ({type(e).__name__})")
            continue
        if d.expr[0] == "nonneg" and not v:
            out.append(f"{d.what} at {d.where} took a symbolic size for {render(d.expr, names)}, "
                       f"which no longer holds")
        elif d.kind == "bool" and bool(v) is not d.expected:
            out.append(f"the Python branch at {d.where} on ({render(d.expr, names)}) was {d.expected} "
                       f"at capture, now {bool(v)}")
        elif d.kind == "value" and not same_number(v, d.expected):
            out.append(f"{d.what} at {d.where} specialized {render(d.expr, names)} to {d.expected!r}, "
                       f"now {v!r}")
    return out


_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "true_divide": "/", "pow": "**",
            "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=",
            "floor_divide": "//", "remainder": "%"}


def render(expr: tuple, names: list) -> str:
    from ..shapes import symbol_text
    tag = expr[0]
    if tag == "in":
        return names[expr[1]] if expr[1] < len(names) else f"arg{expr[1]}"
    if tag in ("lit", "sym"):
        return repr(expr[1])
    if tag == "ext":
        return expr[1].label
    if tag == "nonneg":
        named = {s: (src[1].label if src[0] == "ext" else
                     names[src[1]] if src[0] == "int" and src[1] < len(names) else
                     f"{names[src[1]]}.shape[{src[2]}]" if src[1] < len(names) else s)
                 for s, src in expr[2]}
        terms = dict(expr[1].terms)
        c = terms.pop((), 0)
        if len(terms) == 1:   # n >= 2, n <= 20, 5*n <= 47
            (mono, k), = terms.items()
            coef = f"{abs(k)}*" if abs(k) != 1 else ""
            return f"{coef}{'*'.join(symbol_text(s, named) for s in mono)} {'>=' if k > 0 else '<='} {-c if k > 0 else c}"
        return f"{expr[1].to_python(named)[1:-1]} >= 0"
    if tag == "layout":
        return f"the layout of {names[expr[1]] if expr[1] < len(names) else f'arg{expr[1]}'}"
    _, prim, params, args = expr
    parts = []
    for a in args:  # parenthesize operator sub-expressions: (a + b) * c
        text = render(a, names)
        parts.append(f"({text})" if a[0] == "op" and a[1].name in _SYMBOLS else text)
    sym = _SYMBOLS.get(prim.name)
    if sym is not None and len(parts) == 2:
        return f"{parts[0]} {sym} {parts[1]}"
    if prim is CAST and parts:
        return parts[0]
    return f"{prim.name}({', '.join(parts)})"
