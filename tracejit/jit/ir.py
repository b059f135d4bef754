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
import weakref
from dataclasses import dataclass, field
from typing import Optional, Union

from ..ops.registry import Aval, Primitive
from ..shapes import Sym

__all__ = ["Var", "Literal", "Eqn", "Graph", "Atom", "verify", "VerifyError", "format_param",
           "eqn_lines"]


class Var:
    """An SSA value. Identity is the object; ``name`` is assigned when printing."""

    __slots__ = ("aval", "hint", "size")

    def __init__(self, aval: Aval, hint: str = ""):
        self.aval = aval
        self.hint = hint  # the user's argument name, for readable graph inputs
        self.size = None  # an int input's symbol name where it is a symbolic size (size_args.py)

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
            if v.size is not None and v.size not in out:
                out.append(v.size)
            for d in v.aval.shape:
                if isinstance(d, Sym):
                    for s in sorted(d.free_symbols):
                        if s not in out:
                            out.append(s)
        return out


def def_use(g: Graph) -> tuple:
    """``(producer, users, outputs)`` of `g`: each value's equation, the equations that read
    each value (in order), and the graph's output values."""
    producer: dict = {}
    users: dict = {}
    for e in g.eqns:
        for o in e.outs:
            producer[o] = e
        for a in e.inputs:
            if isinstance(a, Var):
                users.setdefault(a, []).append(e)
    return producer, users, set(a for a in g.outputs if isinstance(a, Var))


def rewritten(g: Graph, replace: dict) -> Graph:
    """`g` with each equation ``e`` where ``id(e)`` is in `replace` written as the equations
    there (an empty list drops it); `g` itself where nothing is replaced."""
    if not replace:
        return g
    eqns = []
    for e in g.eqns:
        eqns.extend(replace.get(id(e), (e,)))
    return Graph(g.inputs, tuple(eqns), g.outputs, g.name)


# ---------------------------------------------------------------- printing
def format_param(v) -> str:
    from ..dtypes import DType
    if isinstance(v, Graph):
        return "{...}"
    if isinstance(v, DType):
        return v.short
    if isinstance(v, tuple):
        return "(" + ",".join(format_param(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, type):
        return v.__qualname__
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


def eqn_lines(g: Graph) -> dict:
    """{eqn: its text line as ``str(g)`` prints it}, for naming equations in messages."""
    out: dict = {}
    format_graph(g, with_locations=False, collect=out)
    return out


def _atom(a, namer) -> str:
    if isinstance(a, Literal):
        return repr(a.value)
    return namer(a)


def format_graph(g: Graph, with_locations: bool = True, indent: str = "", namer=None,
                 collect: Optional[dict] = None) -> str:
    """The text form. `collect`, if given, receives {eqn: its line} (for error messages)."""
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
        if collect is not None:
            collect[e] = s.strip()
        if with_locations and e.loc:
            s = s.ljust(width) + f"  # {os.path.basename(e.loc[0])}:{e.loc[1]}"
        lines.append(s)
        for k, v in e.params.items():
            if isinstance(v, Graph):
                lines.append(format_graph(v, with_locations, indent + "    ", namer, collect).replace(
                    f"{indent}    {v.name}(", f"{indent}    {k}: {v.name}(", 1))
    outs = ", ".join(_atom(a, namer) for a in g.outputs)
    lines.append(f"{indent}  return {outs}")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


# ---------------------------------------------------------------- verifier
class VerifyError(Exception):
    """The graph is malformed (an internal error, or a broken pass)."""


# Equations whose types (and sub-graphs) checked out. An equation is immutable, and the
# passes keep the unchanged ones, so a capture's second `verify` (of the optimized graph)
# type-checks only what the passes built; which values are defined is checked per graph.
_typed: "weakref.WeakSet[Eqn]" = weakref.WeakSet()


def verify(g: Graph, outer: frozenset = frozenset()) -> None:
    """Check every use is defined before it, each var is defined once, and types agree.

    Sub-graphs (branches, loop bodies) are closed: they see only their own inputs, which
    is how the interpreter runs them, so they are verified on their own.
    """
    from .size_args import facts_of
    with facts_of(g):
        _verify(g, set(outer))


def _verify(g: Graph, defined: set) -> None:
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
        if e in _typed:   # this equation object passed the checks below in another graph
            defined.update(e.outs)
            continue
        for v in e.params.values():
            if isinstance(v, Graph):
                try:
                    verify(v)
                except VerifyError as ex:
                    raise VerifyError(f"eqn {i} ({e.prim.name}), sub-graph {v.name!r}: {ex}") from None
        check = e.prim.extra.get("check")   # (control flow: its operands against its sub-graphs)
        if check is not None:
            check(i, e)
        elif e.prim.kind != "control":
            _check_arity(i, e)
            try:
                avals = [a.aval for a in e.inputs]
                expect = _rule_aval(e, avals)
            except Exception as ex:  # a rule rejecting its inputs is a type error here
                raise VerifyError(f"eqn {i} ({e.prim.name}): inputs do not type-check: {ex}") from None
            if expect is not None and (tuple(expect.shape) != tuple(e.out.aval.shape) or
                                       expect.dtype is not e.out.aval.dtype):
                raise VerifyError(f"eqn {i} ({e.prim.name}): output typed {e.out.aval} but its "
                                  f"rule gives {expect}")
        _typed.add(e)
        defined.update(e.outs)
    for a in g.outputs:
        if isinstance(a, Var) and a not in defined:
            raise VerifyError(f"graph output {a!r} is undefined")


_impl_params: dict = {}   # impl -> its operand slots after `xp` (None: no signature)


def _params_of(impl):
    """`impl`'s parameters after `xp` as (name, kind, has_default), once per impl: kind 0
    positional, 1 ``*args``, 2 other."""
    try:
        return _impl_params[impl]
    except (KeyError, TypeError):
        pass
    import inspect
    try:
        sig = list(inspect.signature(impl).parameters.values())
    except (TypeError, ValueError):
        ps = None
    else:
        pos_kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        ps = [(p.name, 0 if p.kind in pos_kinds else 1 if p.kind == p.VAR_POSITIONAL else 2,
               p.default is not p.empty) for p in sig[1:]]
    try:
        _impl_params[impl] = ps
    except TypeError:  # unhashable: ask again next time
        pass
    return ps


def _check_arity(i: int, e: Eqn) -> None:
    """The number of operands the primitive's implementation takes (params aside)."""
    ps = _params_of(e.prim.impl)
    if ps is None:
        return
    lo = hi = 0
    params = e.params
    for name, kind, has_default in ps:
        if kind == 1:
            return
        if kind == 0 and name not in params:
            hi += 1
            if not has_default:
                lo += 1
    if not lo <= len(e.inputs) <= hi:
        want = str(lo) if lo == hi else f"{lo} to {hi}"
        raise VerifyError(f"eqn {i} ({e.prim.name}) has {len(e.inputs)} operands; it takes {want}")


def _rule_aval(e: Eqn, avals):
    p = e.prim
    if p.promote:
        from ..ops.promotion import compute_dtype
        cd = compute_dtype(p, avals)
        for a in avals:
            if not a.weak and a.dtype is not cd:
                raise VerifyError(f"operand {a} is not of the compute dtype {cd.short}")
        avals = [Aval(a.shape, cd, a.device, a.weak) for a in avals]
    return p.rule(*avals, **e.params)
