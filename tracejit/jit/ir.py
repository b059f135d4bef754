"""The IR: a flat, typed SSA program.

A `Graph` has input `Var`s, a list of `Eqn`s ``out = prim[params](ins)`` and output
atoms. Values are typed by an `Aval` (dtype, device, shape with int or symbolic
dims); an input of an equation is a `Var` or a `Literal` (a Python scalar). Control
flow is structured: ``cond`` and ``while`` equations hold their branches/bodies as
sub-graphs in ``params``. Every equation remembers the user's file and line.
Graphs are treated as immutable: passes build new ones.

The text form (``str(graph)``) is what tests compare and what ``explain`` prints.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from ..ops.registry import Aval, Primitive
from ..shapes import Sym

__all__ = ["Var", "Literal", "Eqn", "Graph", "Atom", "verify", "VerifyError", "format_param"]


class Var:
    """An SSA value. Identity is the object; ``name`` is assigned when printing."""

    __slots__ = ("aval", "hint")

    def __init__(self, aval: Aval, hint: str = ""):
        self.aval = aval
        self.hint = hint  # the user's argument name, for readable graph inputs

    def __repr__(self) -> str:
        return f"Var({self.aval})"


@dataclass(frozen=True)
class Literal:
    """A Python scalar used directly as an operand."""
    value: Union[int, float, bool]
    aval: Aval = field(compare=False, hash=False)

    def __repr__(self) -> str:
        return repr(self.value)


Atom = Union[Var, Literal]


@dataclass(frozen=True, eq=False)
class Eqn:
    prim: Primitive
    inputs: tuple
    outs: tuple          # most primitives have one output; cond/while have several
    params: dict
    loc: Optional[tuple] = None  # (filename, lineno) in user code

    @property
    def out(self) -> Var:
        return self.outs[0]


@dataclass(frozen=True, eq=False)
class Graph:
    inputs: tuple
    eqns: tuple
    outputs: tuple
    name: str = "graph"

    def __str__(self) -> str:
        return format_graph(self)

    def text(self, with_locations: bool = True) -> str:
        return format_graph(self, with_locations=with_locations)

    @property
    def symbols(self) -> list:
        out = []
        for v in self.inputs:
            for d in v.aval.shape:
                if isinstance(d, Sym):
                    for s in sorted(d.free_symbols):
                        if s not in out:
                            out.append(s)
        return out


# ---------------------------------------------------------------- printing
def format_param(v, namer=None) -> str:
    from ..dtypes import DType
    if isinstance(v, Graph):
        return "{...}"
    if isinstance(v, DType):
        return v.short
    if isinstance(v, tuple):
        return "(" + ",".join(format_param(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, float):
        return repr(v)
    return str(v)


class _Namer:
    def __init__(self):
        self.names: dict = {}
        self.n = 0

    def __call__(self, v: Var, is_input: bool = False) -> str:
        name = self.names.get(v)
        if name is None:
            if is_input and v.hint and v.hint not in self.names.values():
                name = v.hint
            else:
                name = str(self.n)
                self.n += 1
            self.names[v] = name
        return "%" + name


def _atom(a, namer) -> str:
    if isinstance(a, Literal):
        return repr(a.value)
    return namer(a)


def format_graph(g: Graph, with_locations: bool = True, indent: str = "", namer=None) -> str:
    namer = namer or _Namer()
    ins = ", ".join(f"{namer(v, True)}: {v.aval}" for v in g.inputs)
    lines = [f"{indent}{g.name}({ins}) {{"]
    body = []
    for e in g.eqns:
        args = " ".join(_atom(a, namer) for a in e.inputs)
        plain = {k: v for k, v in e.params.items() if not isinstance(v, Graph)}
        ps = ",".join(f"{k}={format_param(v)}" for k, v in plain.items())
        lhs = ", ".join(f"{namer(o)}: {o.aval}" for o in e.outs)
        rhs = e.prim.name + (f"[{ps}]" if ps else "") + (f" {args}" if args else "")
        body.append((f"{indent}  {lhs} = {rhs}", e))
    width = max((len(s) for s, _ in body), default=0)
    for s, e in body:
        if with_locations and e.loc:
            s = s.ljust(width) + f"  # {os.path.basename(e.loc[0])}:{e.loc[1]}"
        lines.append(s)
        for k, v in e.params.items():
            if isinstance(v, Graph):
                lines.append(format_graph(v, with_locations, indent + "    ", namer).replace(
                    f"{indent}    {v.name}(", f"{indent}    {k}: {v.name}(", 1))
    outs = ", ".join(_atom(a, namer) for a in g.outputs)
    lines.append(f"{indent}  return {outs}")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


# ---------------------------------------------------------------- verifier
class VerifyError(Exception):
    """The graph is malformed (an internal error, or a broken pass)."""


def verify(g: Graph, outer: frozenset = frozenset()) -> None:
    """Check every use is defined before it, each var is defined once, and types agree."""
    defined = set(outer)
    for v in g.inputs:
        if not isinstance(v, Var):
            raise VerifyError(f"graph input {v!r} is not a Var")
        if v in defined:
            raise VerifyError(f"graph input {v!r} defined twice")
        defined.add(v)
    for i, e in enumerate(g.eqns):
        for a in e.inputs:
            if isinstance(a, Var) and a not in defined:
                raise VerifyError(f"eqn {i} ({e.prim.name}) uses an undefined value {a!r}")
            if not isinstance(a, (Var, Literal)):
                raise VerifyError(f"eqn {i} ({e.prim.name}) has a non-atom input {a!r}")
        for o in e.outs:
            if o in defined:
                raise VerifyError(f"eqn {i} ({e.prim.name}) redefines {o!r}")
        for v in e.params.values():
            if isinstance(v, Graph):
                verify(v, frozenset(defined))
        check = getattr(e.prim, "extra", {}).get("check")
        if check is not None:
            check(e)
        elif e.prim.kind not in ("control",):
            try:
                avals = [a.aval for a in e.inputs]
                expect = _rule_aval(e, avals)
            except Exception as ex:  # a rule rejecting its inputs is a type error here
                raise VerifyError(f"eqn {i} ({e.prim.name}): inputs do not type-check: {ex}") from None
            if expect is not None and (tuple(expect.shape) != tuple(e.out.aval.shape) or
                                       expect.dtype is not e.out.aval.dtype):
                raise VerifyError(f"eqn {i} ({e.prim.name}): output typed {e.out.aval} but its "
                                  f"rule gives {expect}")
        defined.update(e.outs)
    for a in g.outputs:
        if isinstance(a, Var) and a not in defined:
            raise VerifyError(f"graph output {a!r} is undefined")


def _rule_aval(e: Eqn, avals):
    p = e.prim
    if p.promote:
        from ..ops.registry import compute_dtype
        cd = compute_dtype(p, avals)
        for a in avals:
            if not a.weak and a.dtype is not cd:
                raise VerifyError(f"operand {a} is not of the compute dtype {cd.short}")
        avals = [Aval(a.shape, cd, a.device, a.weak) for a in avals]
    return p.rule(*avals, **e.params)
