"""Int arguments used as sizes: symbolic, like the dims that keep changing.

An ``int`` argument that came with a second value is a runtime input of the graph
(``_mark_dynamic`` in capture.py). Python code that reads it as a number specializes it,
guarded on the value: ``x[:n]`` would capture once per ``n``. So is an int read from
Python state that changed (``self.ptr``: lifted.py). As a slice bound it becomes
a symbolic size instead (``i0``, torch.compile's SymInt), bound from the argument on each
call, so one entry serves every ``n`` for which the capture's reasoning holds. That
reasoning is guarded: the symbol stands for values >= 2 (as a symbolic dim does, sizes 0
and 1 keep their own entries), and each fact a shape rule assumed about it
(``20 - i0 >= 0``: the slice stays inside a dim of 20) is checked on every call.
A floor division of such sizes or of dims (``144 // n``, ``x.view(n, -1)``, a strided
conv's ``(h - 1) // 2``) is a derived symbol
(``q0``, shapes.Derived) computed from them on each call, guarded >= 2 (or from 0 up where
it is 0 or 1 at capture), and where a rule
needs it exact (``n * q0 == 144``), guarded exact: a call with another ``n`` misses the
entry and meets the error eager code raises.

`SizeArgs` is that state for one capture (the root `TraceContext`'s ``sizes``); the
guard's side is a decision with the ``("nonneg", expr, sources)`` expression (scalars.py).
"""
from __future__ import annotations

import contextlib
import math
import threading
from typing import Optional

from ..ops.eager import trace_hooks
from ..ops.elementwise import ADD, CAST, DIV, FLOOR_DIVIDE, MUL, NEG, REMAINDER, SUB
from ..shapes import Derived, Sym, facts_hooks, hint

__all__ = ["SizeArgs", "size_of", "rounded", "assume_nonnegative", "known_facts", "for_capture", "specialize_sizes"]


class SizeArgs:
    """The int arguments one capture may make symbolic, and the symbols it made."""

    def __init__(self, ints: set, dims: dict, low: bool = True):
        self.low, self.from_zero = low, False   # (may a quotient below 2 be a symbol; was one)
        self.ints = ints          # leaf indices of the int arguments that may become sizes
        self.sources = dict(dims)  # symbol name -> ("dim", leaf, j) | ("int", leaf) | ("ext", Lifted)
        self.syms: dict = {}      # leaf index or Lifted -> its Sym
        self.names: dict = {}     # symbol name -> leaf index or Lifted (the int symbols)
        self.facts = Facts()      # the terms of each Sym guarded >= 0, and the divisions

    def symbol(self, ctx, k, var) -> Optional[Sym]:
        """The Sym for int leaf `k` or lifted int `k` (a `Lifted`: lifted.py) read by graph
        input `var`, made and guarded >= 2 at first use; None where its value in this call
        is below 2 (0 and 1 stay specialized)."""
        sym = self.syms.get(k)
        if sym is not None:
            return sym
        lifted = not isinstance(k, int)
        value = k.hint if lifted else ctx.leaves[k]
        if not (lifted or k in self.ints) or type(value) is not int or value < 2:
            return None
        name = f"i{len(self.names)}"
        sym = Sym.symbol(name, value)
        self.syms[k], self.names[name] = sym, k
        self.sources[name] = ("ext", k) if lifted else ("int", k)
        var.size = SizeName(name)  # the executors bind the symbol from this input
        var.size.facts = self.facts
        self._guard(ctx, sym - 2, f"{'a changing int' if lifted else 'an int argument'} used as a size")
        return sym

    def leaf_names(self, symbols: set, descs: list) -> set:
        """The names of the int arguments among `symbols` (code needed their values)."""
        return {descs[self.names[s]].name for s in symbols if type(self.names.get(s)) is int}

    def lifted_keys(self, symbols: set) -> set:
        """The lifted.py keys of the lifted ints among `symbols` (code needed their values)."""
        return {self.names[s].key for s in symbols if s in self.names and type(self.names[s]) is not int}

    def assume(self, ctx, v: Sym, what: str, dims: bool = False) -> bool:
        """Take ``v >= 0`` as a fact where it holds in this call and every symbol in it comes
        from an argument, guarded on every later call; False when it cannot be assumed.
        Facts about dim symbols alone are taken only where `dims` asks (a slice bound past
        a dim's end, a comparison of sizes, a floor division): elsewhere those dims stay
        specialized."""
        free = v.free_symbols
        if not (free & set(self.names) or dims and free) or v.hint < 0:
            return False
        if not all(s in self.sources for s in free):
            return False
        self._guard(ctx, v, what)
        if not free & set(self.names):
            _tag_dims(ctx, self.facts)
        return True

    def derive(self, ctx, num, den, op: str = "//") -> Optional[Sym]:
        """``num // den`` as a derived symbol, guarded >= 2 on every call, or this call's
        quotient 0 or 1, guarded equal; `op` "%": ``num % den``, a symbol from 0 up that
        needs no guard; None where `den` may not be positive."""
        key = (getattr(num, "terms", num), getattr(den, "terms", den), op)
        q = self.facts.derived.get(key)
        if q is not None:
            return q
        if (len(den.terms) != 1 or den.terms[0][1] <= 0) if isinstance(den, Sym) else den <= 0:
            return None
        if op == "%":
            if not all(s in self.sources for s in num.free_symbols):
                return None
            q = self.facts.derived[key] = Sym.symbol(Derived(f"r{len(self.facts.derived)}", num, den, op),
                                                     hint(num) % hint(den))
            _tag_dims(ctx, self.facts)   # (the gradient and ir.verify find it there)
            return q
        value = hint(num) // hint(den)
        if value < 0:
            return None
        # A quotient of 2 and more stands for values >= 2, guarded, as a dim's symbol does; one
        # of 0 or 1 for values from 0 up, as a remainder, with its numerator guarded >= 0 (a
        # view's -1 over a padded length serves one block and more). Kernels broadcast only a
        # dim of 1 they know: where such a quotient broadcasts, the capture runs again with it
        # this call's constant, guarded equal (``x[:, :n // 4]`` from n = 4 on)
        name = Derived(f"q{len(self.facts.derived)}", num, den, least=0 if value < 2 and self.low else 2)
        q = Sym.symbol(name, value)
        if value >= 2:
            made = self.assume(ctx, q - 2, "a size computed by //", dims=True)
        elif self.low:
            made = _nonneg(num) or self.assume(ctx, num, "a quotient below 2", dims=True)
            self.from_zero |= made
        else:
            made = (self.assume(ctx, q - value, "a quotient below 2", dims=True)
                    and self.assume(ctx, value - q, "a quotient below 2", dims=True))
            q = value
        if not made:
            return None
        self.facts.derived[key] = q
        if name.least == 0:
            _tag_dims(ctx, self.facts)
        return q

    def _guard(self, ctx, v: Sym, what: str) -> None:
        from .scalars import note
        if v.terms in self.facts:
            return
        srcs = tuple(sorted((s, self.sources[s]) for s in v.free_symbols))
        self.facts.add(v.terms)
        note(ctx.decisions, ("nonneg", v, srcs), "bool", True, what, same_kind=None)


def _nonneg(v) -> bool:
    low = v.lower_bound() if isinstance(v, Sym) else v
    return low is not None and low >= 0


def _tag_dims(ctx, facts: set) -> None:
    """Lend `facts` to the dim symbols of the capture's inputs: the gradient, built from the
    graph later, finds them there (`known_facts`) where no int argument carries them."""
    for var in ctx.inputs:
        for d in var.aval.shape:
            if isinstance(d, Sym):
                d.facts = facts


class Facts(set):
    """The terms of each Sym a capture guarded >= 0, and its floor divisions: ``derived``,
    (num, den) -> the derived Sym (its gradient divides alike)."""

    def __init__(self):
        super().__init__()
        self.derived: dict = {}


class SizeName(str):
    """The name of an int input's symbol (``Var.size``), with the facts its capture guarded:
    the gradient, built from the graph later, may assume them again (`Known`)."""
    facts: set = frozenset()


class Known:
    """A backward pass's view of `SizeArgs`: the facts the forward capture guarded."""

    def __init__(self, facts: set, derived: dict):
        self.facts, self.derived = facts, derived

    def assume(self, ctx, v: Sym, what: str, dims: bool = False) -> bool:
        return v.terms in self.facts

    def derive(self, ctx, num, den, op: str = "//") -> Optional[Sym]:
        return self.derived.get((getattr(num, "terms", num), getattr(den, "terms", den), op))


def known_facts(graph) -> Optional[Known]:
    """The facts guarded about the int symbols of `graph`'s inputs, or None."""
    facts: set = set()
    derived: dict = {}
    for v in graph.inputs:
        for f in [getattr(v.size, "facts", None)] + [getattr(d, "facts", None) for d in v.aval.shape]:
            facts |= f or frozenset()
            derived.update(getattr(f, "derived", {}))
    return Known(facts, derived) if facts or derived else None


def size_of(t) -> object:
    """A traced int used as a size or slice bound: a `Sym` where it is computed from int
    arguments that may be symbolic, ints read from Python state that changed (lifted.py) and
    symbolic sizes, by ``+``, ``-``, ``*``, ``//`` and ``%`` (``n``, ``2 * n``, ``144 // n``,
    ``n % 3``, ``x.shape[0] - n``), else its value (specialized and guarded, as ``int(t)``)."""
    ctx = t._trace
    sizes = getattr(ctx, "sizes", None)
    if sizes is not None and (sizes.ints or ctx.lifted) and ctx.parent is None and t._var.aval.weak \
            and t._var.aval.dtype.is_integer:
        from .scalars import scalar_expr
        expr = scalar_expr(ctx, t._var)
        sym = _polynomial(ctx, sizes, expr) if expr is not None else None
        if isinstance(sym, Sym):
            return sym
    return t.__index__()


_ARITH = {ADD: lambda a, b: a + b, SUB: lambda a, b: a - b, MUL: lambda a, b: a * b,
          FLOOR_DIVIDE: lambda a, b: None if isinstance(b, int) and b == 0 else a // b,
          REMAINDER: lambda a, b: None if isinstance(b, int) and b == 0 else a % b}


def _polynomial(ctx, sizes: SizeArgs, expr: tuple):
    """`expr` (scalars.py) as a Sym or int over the int symbols, or None."""
    tag = expr[0]
    if tag == "in":
        var = next((v for v, k in ctx.scalar_leaves.items() if k == expr[1]), None)
        return sizes.symbol(ctx, expr[1], var) if var is not None else None
    if tag == "ext":   # an int read from Python state (lifted.py)
        var = next(v for v, x in ctx.lifted.items() if x is expr[1])
        return sizes.symbol(ctx, expr[1], var)
    if tag == "lit":
        return expr[1] if type(expr[1]) is int else None
    if tag == "sym":   # a symbolic size read as a number (``x.shape[0] - n``)
        return expr[1] if isinstance(expr[1], (Sym, int)) else None
    if tag == "op":
        prim, args = expr[1], expr[3]
        if prim is NEG and len(args) == 1:
            a = _polynomial(ctx, sizes, args[0])
            return None if a is None else -a
        fn = _ARITH.get(prim)
        if fn is not None and len(args) == 2:
            a, b = (_polynomial(ctx, sizes, x) for x in args)
            if a is not None and b is not None:
                return fn(a, b)
    return None


def rounded(t, mode: str):
    """``math.floor``, ``math.ceil`` or ``math.trunc`` (`mode`) of a traced Python number
    computed from symbolic sizes and int arguments by ``+``, ``-``, ``*`` and ``/`` by a
    number (``n * 1.25 / 4``): the floor division it equals (``5*n // 16``), a size. Exact
    where float64 rounds at most the last step and each numerator stays in [0, 2^53),
    guarded: a non-integer n/d is then at least 1/d from an integer, its rounding error below
    that. `mode` "int": ``int()``'s value, a plain int, guarded by that range of the sizes
    (one entry per value, not per float). None where `t` is no such number."""
    ctx = t._trace
    sizes = getattr(ctx, "sizes", None)
    aval = t._var.aval
    if not isinstance(sizes, SizeArgs) or ctx.parent is not None or not (aval.weak and aval.dtype.is_floating_point):
        return None
    from .scalars import scalar_expr
    expr = scalar_expr(ctx, t._var)
    fits: list = []
    frac = _fraction(ctx, sizes, expr, fits) if expr is not None else None
    if frac is None or not isinstance(frac[0], Sym):
        return None
    num, den = frac[0], frac[1]
    if not all(_fits(ctx, sizes, v) for v in fits + [num]):
        return None
    if mode != "int":
        return (num + den - 1) // den if mode == "ceil" else num // den
    v = num.hint // den
    what = "int() of sizes (math.floor would keep a size)"
    return v if sizes.assume(ctx, num - v * den, what, dims=True) and sizes.assume(
        ctx, v * den + den - 1 - num, what, dims=True) else None


def _fraction(ctx, sizes: SizeArgs, expr: tuple, fits: list):
    """`expr` as (num, den, rounded): the exact value num / den (num a Sym or int, den > 0),
    `rounded` where float64 rounds its last step (den not a power of 2); the numerators of
    the steps are appended to `fits`. None where a rounded value is computed further."""
    tag, prim = expr[0], expr[1] if expr[0] == "op" else None
    if tag == "sym":
        return expr[1], 1, False
    if tag == "lit":
        v = expr[1]
        ok = type(v) is int or type(v) is float and math.isfinite(v)
        return (*v.as_integer_ratio(), False) if ok else None
    if prim is CAST and not expr[2][0][1].is_bool:
        frac = _fraction(ctx, sizes, expr[3][0], fits)
        return frac if frac is None or expr[2][0][1].is_floating_point or frac[1] == 1 else None
    if prim not in (ADD, SUB, MUL, DIV, NEG):
        p = _polynomial(ctx, sizes, expr)   # (an int argument, ``//`` and ``%`` of ints)
        return None if p is None else (p, 1, False)
    parts = [_fraction(ctx, sizes, a, fits) for a in expr[3]]
    if any(p is None or p[2] for p in parts):
        return None
    if prim is NEG:
        return -parts[0][0], parts[0][1], False
    (a, b, _), (c, d, _) = parts
    if prim is DIV and (isinstance(c, Sym) or c == 0):
        return None
    num, den = {ADD: (a * d + c * b, b * d), SUB: (a * d - c * b, b * d), MUL: (a * c, b * d),
                DIV: (a * d * (1 if hint(c) > 0 else -1), b * abs(hint(c)))}[prim]
    g = math.gcd(den, *(k for _, k in num.terms) if isinstance(num, Sym) else (num,))
    num, den = num // g, den // g
    fits.append(num)
    return num, den, den & (den - 1) != 0


def _fits(ctx, sizes: SizeArgs, v) -> bool:
    """``0 <= v < 2^53`` for every call served, guarded: float64 holds `v` exactly."""
    if not isinstance(v, Sym):
        return 0 <= v < 1 << 53
    low = v.lower_bound()
    return (low is not None and low >= 0 or sizes.assume(ctx, v, "a fraction of sizes", dims=True)) \
        and sizes.assume(ctx, (1 << 53) - 1 - v, "a fraction of sizes", dims=True)


class _Checking(threading.local):
    known: Optional[Known] = None   # the facts of the graph whose rules run again (ir.verify)


_checking = _Checking()


@contextlib.contextmanager
def facts_of(graph):
    """Shape rules run again outside a capture (`ir.verify`) take the facts `graph`'s
    capture guarded, so they type its equations as the capture did."""
    prev = _checking.known
    _checking.known = known_facts(graph) or prev   # (a sub-graph: its graph's facts)
    try:
        yield
    finally:
        _checking.known = prev


def assume_nonnegative(v: Sym, what: str, dims: bool = False) -> bool:
    """``v >= 0`` for every call this capture serves: True where the capturing context
    could guard it (`SizeArgs.assume`)."""
    from ..ops.eager import trace_state
    ctx = trace_state.tracer
    if ctx is None:
        return _checking.known is not None and _checking.known.assume(None, v, what)
    root = ctx._root()
    sizes = getattr(root, "sizes", None)
    return sizes is not None and sizes.assume(root, v, what, dims)


def derive(num, den, op: str = "//") -> Optional[Sym]:
    """``num // den`` (``num % den``) as a symbol where the capturing context can make one
    (`SizeArgs.derive`)."""
    from ..ops.eager import trace_state
    ctx = trace_state.tracer
    if ctx is None:
        return _checking.known and _checking.known.derive(None, num, den, op)
    root = ctx._root()
    sizes = getattr(root, "sizes", None)
    return sizes.derive(root, num, den, op) if sizes is not None else None


trace_hooks.size_of = staticmethod(size_of)
facts_hooks.derive = staticmethod(derive)
facts_hooks.assume = staticmethod(assume_nonnegative)
trace_hooks.assume_nonnegative = staticmethod(assume_nonnegative)


def specialize_sizes(value) -> None:
    """Make the symbolic dims in a returned Python value (``x.shape``, ``x.size(0)``)
    concrete: the capture then runs again with those dims static, so each size gets its
    own entry instead of replaying the first call's."""
    if isinstance(value, Sym):
        int(value)
    elif isinstance(value, (tuple, list)):
        for v in value:
            specialize_sizes(v)


def for_capture(sdescs, ints: set, low: bool = True) -> SizeArgs:
    """What a capture may make symbolic sizes: the int arguments in `ints` (by leaf name),
    and where each dim symbol of `sdescs` is read from."""
    dims: dict = {}
    for i, d in enumerate(sdescs):
        if d.kind == "tensor":
            for j, s in enumerate(d.shape):
                if isinstance(s, str):
                    dims.setdefault(s, ("dim", i, j))
    return SizeArgs({i for i, d in enumerate(sdescs) if d.kind == "scalar" and d.name in ints}, dims, low)
