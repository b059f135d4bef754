"""Shapes: dims that are ints or symbols (broadcasting: broadcasting.py; dim normalization: dims.py).

Dynamic dims are `Sym` values: integer polynomials over named symbols (``s0``,
``s0*100``, ``s0 + 1``) that carry a *hint*, the concrete size seen while tracing.
Shape rules are written with ordinary arithmetic and work for both. Symbols stand
for sizes >= 2 (sizes 0 and 1 stay static, as their broadcasting meaning differs),
so ``sym == 1`` is statically False. Anything that needs a symbol's concrete value
(``int(dim)``, ``range(dim)``) asks the active tracer to specialize it.

A floor division that is not exact as polynomials (``144 // i0``, ``-1`` inferred from a
symbolic size) is a *derived* symbol (`Derived`), computed from the others wherever a
dim is evaluated, where the capture can guard it (jit/size_args.py). A shape rule's
``i0 * q0 == 144`` holds when the division is exact, which the capture then guards.
"""
from __future__ import annotations

import math
import sys
import threading
from typing import Callable, Optional, Union

from .dims import normalize_dim, normalize_dims   # (re-exported: most callers import them here)

__all__ = ["Sym", "Dim", "Shape", "broadcast_shapes", "normalize_dim", "normalize_dims",
           "numel", "hint", "as_dim"]

class _Hook(threading.local):
    # Set by the tracer, per thread as the tracer itself is (ops.registry.trace_state): two
    # threads capturing at once must each record the dims their own code needed.
    fn: Optional[Callable] = None       # called with a Sym whose concrete value code asked for
    number: Optional[Callable] = None   # a Sym -> a traced 0-d float64 value of it


_hook = _Hook()


def set_specialize_hook(fn: Optional[Callable]) -> Optional[Callable]:
    """Install this thread's specialize hook; returns the one it replaces."""
    prev, _hook.fn = _hook.fn, fn
    return prev


class _Facts:
    """Set by jit/size_args.py: what a capture can make of a division, and guard."""
    # `Derived` for ``num // den`` (guarded >= 2; op "%": ``num % den``), or None where none can be made
    derive: Callable = staticmethod(lambda num, den, op="//": None)
    # ``v >= 0`` taken as a fact for every call served (guarded), or False
    assume: Callable = staticmethod(lambda v, what, dims=False: False)


facts_hooks = _Facts()


class Derived(str):
    """A symbol's name that stands for ``num // den`` (`op` "%": ``num % den``): ``den`` is
    positive (a positive int or a one-term Sym with a positive coefficient) and ``exact``
    once the capture guarded ``den * self == num``. ``least``: the values it stands for
    start there (a remainder, and a quotient first seen below 2, from 0; others from 2)."""

    def __new__(cls, name: str, num, den, op: str = "//", least: int = 2):
        self = super().__new__(cls, name)
        self.num, self.den, self.exact, self.op = num, den, False, op
        self.least = 0 if op == "%" else least
        return self

    def __reduce__(self):
        return _derived, (str(self), self.num, self.den, self.exact, self.op, self.least)

    def value(self, env: dict) -> int:
        a, b = _value(self.num, env), _value(self.den, env)
        v = env[self] = a % b if self.op == "%" else a // b
        return v

    def code(self, names: dict) -> str:
        return f"({_code(self.num, names)} {self.op} {_code(self.den, names)})"


class DataSize(str):
    """The name of a size known only at run time, from the values (a boolean mask's count:
    ops/host_steps.py). Shape code inside tracejit may take it as >= 2 (size-oblivious, as
    torch's unbacked sizes), but a comparison in user code (``if sel.shape[0] > 0:``) needs
    its value: a graph break."""

    def value(self, env: dict) -> int:
        # Unbound where it is evaluated: only the zero gradient of an output that no residual
        # nor other gradient has a dim of, which nothing else then reads (0 elements)
        return 0


def _user_compares(d, depth: int) -> None:
    """Ask for `d`'s value (the tracer's hook refuses a data-dependent size) when the code
    `depth` frames up, outside tracejit, compares a data-dependent size."""
    if data_sized(d) and _from_user(depth + 1):
        d._specialized()


def data_sized(d) -> bool:
    """Whether dim `d` involves a data-dependent size (a quotient of one included)."""
    return isinstance(d, Sym) and any(isinstance(x, DataSize) or isinstance(x, Derived)
                                      and (data_sized(x.num) or data_sized(x.den))
                                      for mono, _ in d.terms for x in mono)


def _data_quotient(num: "Sym", den):
    """``num // den`` of a data-dependent `num` by a positive `den`, or of a size by a
    positive data-dependent `den` (a fixed size by a mask's count): a derived symbol taken as
    >= 2 (as `DataSize`), named by its definition so equal quotients are one symbol. Where a
    view needs it exact (``x[mask].view(b, -1, c)``), ops/host_steps.py checks it at run time."""
    if isinstance(den, Sym) and (len(den.terms) != 1 or den.terms[0][1] <= 0) or isinstance(den, int) and den <= 0:
        return None
    g = math.gcd(den if isinstance(den, int) else den.terms[0][1],
                 *(c for _, c in num.terms) if isinstance(num, Sym) else (num,))
    num, den = _exact_div(num, g), _exact_div(den, g)   # (lowest terms: ``4*u0 // 8`` is ``u0 // 2``)
    name = "q_" + f"{num}_by_{den}".translate(_NAMED)   # (an identifier: plans bind it by name)
    return Sym.symbol(Derived(name, num, den), max(hint(num) // hint(den), 2))


_NAMED = str.maketrans({" ": "", "*": "x", "+": "p", "-": "m", "(": "L", ")": "R", "/": "d"})


def _from_user(depth: int) -> bool:
    return not sys._getframe(depth).f_globals.get("__name__", "").startswith("tracejit")


def _user_equal(a, b) -> bool:
    """``a == b`` of two dims that differ in form, asked by the user's code: this call's
    answer, guarded as a fact on the sizes (equal both ways, or the smaller one below the
    other) for every call the entry serves; the sizes specialized where it cannot be."""
    if hint(a) == hint(b):
        if _assume_equal(a, b):
            return True
    else:
        lo, hi = (a, b) if hint(a) < hint(b) else (b, a)
        v = hi - lo - 1
        if not isinstance(v, Sym) or facts_hooks.assume(v, "a comparison of sizes", dims=True):
            return False
    return a._specialized() == b._specialized()


def data_dependent(*dims) -> None:
    """Ask for the value of each data-dependent size among `dims` (a graph break while
    tracing): a check that cannot hold for every value, as two masks' counts, is made on
    the call's values instead."""
    for d in dims:
        if data_sized(d):
            d._specialized()


def _derived(name, num, den, exact, op="//", least=2):
    d = Derived(name, num, den, op, least)
    d.exact = exact
    return d


def _value(v, env: dict) -> int:
    return v.evaluate(env) if isinstance(v, Sym) else v


def _code(v, names: dict) -> str:
    return v.to_python(names) if isinstance(v, Sym) else str(v)


def symbol_text(s: str, names: dict) -> str:
    """Python source for the symbol `s`: its name in `names`, or its definition."""
    if s in names:
        return names[s]
    return s.code(names) if isinstance(s, Derived) else s


def set_number_hook(fn: Optional[Callable]) -> Optional[Callable]:
    """Install this thread's hook turning a Sym into a traced number (what ``n / (n - 1)``
    on symbolic sizes computes); returns the one it replaces."""
    prev, _hook.number = _hook.number, fn
    return prev


class Sym:
    """A symbolic dimension: sum of coeff * product(symbols)."""

    # facts: on an input's dim symbol, the facts a capture guarded about dims (size_args.py)
    __slots__ = ("terms", "hint", "facts")

    def __init__(self, terms: tuple, hint: int):
        self.terms = terms  # tuple of (monomial: tuple[str,...], coeff: int), sorted, no zeros
        self.hint = hint

    @staticmethod
    def symbol(name: str, hint: int) -> "Sym":
        return Sym((((name,), 1),), hint)

    @property
    def free_symbols(self) -> set:
        """The symbols bound from the inputs that this dim is computed from."""
        out: set = set()
        for mono, _ in self.terms:
            for s in mono:
                if isinstance(s, Derived):
                    for part in (s.num, s.den):
                        if isinstance(part, Sym):
                            out |= part.free_symbols
                else:
                    out.add(s)
        return out

    # -- arithmetic ---------------------------------------------------------
    @staticmethod
    def _make(terms: dict, hint: int):
        items = tuple(sorted((m, c) for m, c in terms.items() if c != 0))
        if not items:
            return 0
        if len(items) == 1 and items[0][0] == ():
            return items[0][1]
        return Sym(items, hint)

    @staticmethod
    def _terms(x) -> dict:
        if isinstance(x, Sym):
            return dict(x.terms)
        return {(): int(x)} if x else {}

    def __add__(self, o):
        if isinstance(o, float):
            return self._number() + o
        if not isinstance(o, (int, Sym)):
            return NotImplemented
        t = self._terms(self)
        for m, c in self._terms(o).items():
            t[m] = t.get(m, 0) + c
        return Sym._make(t, self.hint + hint(o))

    __radd__ = __add__

    def __neg__(self):
        return Sym._make({m: -c for m, c in self.terms}, -self.hint)

    def __sub__(self, o):
        return self + (-o) if isinstance(o, (int, float, Sym)) else NotImplemented

    def __rsub__(self, o):
        return (-self) + o

    def __mul__(self, o):
        if isinstance(o, float):
            return self._number() * o
        if not isinstance(o, (int, Sym)):
            return NotImplemented
        t: dict = {}
        for m1, c1 in self._terms(self).items():
            for m2, c2 in self._terms(o).items():
                m = tuple(sorted(m1 + m2))
                t[m] = t.get(m, 0) + c1 * c2
        return Sym._make(t, self.hint * hint(o))

    __rmul__ = __mul__

    def __floordiv__(self, o):
        if not isinstance(o, (int, Sym)):
            return self._specialized() // o
        q = _exact_div(self, o)
        if q is None and isinstance(o, int) and o > 0:
            # ``(o*y + r) // o`` is ``y + r // o`` for every integer y: ``(2*s0 - 1) // 2`` is
            # ``s0 - 1`` (a stride-2 conv of a conv-transposed size), no derived symbol
            q = _exact_div(self - self.hint % o, o)
        if q is None:
            q = facts_hooks.derive(self, o)
        if q is None and (data_sized(self) or data_sized(o)):
            q = _data_quotient(self, o)
        if q is None and self.hint < 0 and isinstance(o, int) and o > 0:
            return -((-self + (o - 1)) // o)   # (a ceil division, ``-(-n // s)``: of n >= 0)
        return self._specialized() // _value_of(o) if q is None else q

    def __rfloordiv__(self, o):
        if not isinstance(o, int):
            return o // self._specialized()
        q = _exact_div(o, self)
        if q is None:
            q = facts_hooks.derive(o, self)
        if q is None and data_sized(self):   # (a size by a mask's count: checked where viewed)
            q = _data_quotient(o, self)
        return int(o) // self._specialized() if q is None else q

    def __mod__(self, o):
        if _exact_div(self, o) is not None:
            return 0
        if isinstance(o, int) and o > 0:
            if self.hint < 0:
                m = -self % o
                return (o - m) % o if isinstance(m, Sym) else -m % o
            r = self.hint % o
            if _exact_div(self - r, o) is not None:   # (``8*s0 + 3``)
                return r
            # a symbol from 0 up (``n % 8``: a quotient ``n // 8`` would be guarded >= 2),
            # or ``n - 8*q0``; either may be 0 or 1, which a comparison guards (`_eq`)
            m = facts_hooks.derive(self, o, "%")
            if m is not None:
                return m
            q = facts_hooks.derive(self, o)
            if q is not None:
                return self - o * q
        return self._specialized() % _value_of(o)

    def __rmod__(self, o):   # (a channel count checked against a symbolic one: this call's)
        return o % self._specialized()

    # True division, float arithmetic and a power other than a natural number give a
    # fraction, not a size: while tracing a traced number computed from the input shapes on
    # each call (BatchNorm's ``n / (n - 1)``, ``d ** -0.5``, ``(n + 0.1) / 4``); elsewhere
    # the float of the concrete size.
    def _number(self):
        return self._specialized() if _hook.number is None else _hook.number(self)

    def __truediv__(self, o):
        if not isinstance(o, (int, float, Sym)):
            return NotImplemented
        return self._number() / (hint(o) if isinstance(o, Sym) and _hook.number is None else o)

    def __rtruediv__(self, o):
        return o / self._number() if isinstance(o, (int, float)) else NotImplemented

    def __pow__(self, o):
        if isinstance(o, int) and o >= 0:
            return math.prod([self] * o, start=1)
        return self._number() ** o if isinstance(o, (int, float)) else NotImplemented

    def lower_bound(self) -> Optional[int]:
        """The least value this dim can take (symbols stand for sizes >= 2, a remainder
        for 0 up) when it grows with every symbol (no negative coefficient), else None."""
        if any(c < 0 for mono, c in self.terms if mono):
            return None
        return sum(c * math.prod(getattr(s, "least", 2) for s in mono) for mono, c in self.terms)

    # -- comparisons ----------------------------------------------------------
    def __eq__(self, o):
        return self._eq(o, 3)

    def _eq(self, o, depth: int):
        _user_compares(self, depth)
        if isinstance(o, Sym):
            if self.terms == o.terms or _equal_if_exact(self, o):
                return True
            # (tracejit's own checks ask whether two dims are the same dim; the user's code
            # asks about this call's sizes: ``x if n == m else y`` must not serve n == m later)
            return _from_user(depth) and _user_equal(self, o)
        if isinstance(o, int):
            low = self.lower_bound()
            if o < 0 or low is not None and o < low:
                return False  # ``5 * s0 == 5`` for no size (symbols stand for sizes >= 2)
            if o <= 1:   # (``n - 8*q0``, the user's ``n - 4``) may be 0 or 1: this call's answer, guarded
                if data_sized(self) or not (_from_user(depth) or any(isinstance(x, Derived) for m, _ in self.terms
                                                                     for x in m)):
                    return False   # (tracejit's own checks: other sizes stand for values >= 2)
                v = (self - o, o - self) if self.hint == o else (self - o - 1,) if self.hint > o else (o - self - 1,)
                if all(facts_hooks.assume(x, "a comparison of sizes", dims=True) for x in v):
                    return self.hint == o
                if _hook.fn is None:   # (the compiler's question, unguarded: not the same size)
                    return False
            return _equal_if_exact(self, o) or self._specialized() == o
        return NotImplemented

    def __ne__(self, o):
        r = self._eq(o, 3)
        return r if r is NotImplemented else not r

    def __hash__(self):
        # (the user's ``table.get(n)``, ``n in seen``: this call's value, as ``int(n)``, since a
        # hash by form finds no int key; tracejit's own dicts of dims key by form)
        if _hook.fn is not None and _from_user(2):
            return hash(self._specialized())
        return hash(self.terms)

    def _cmp(self, o, op, less: bool, strict: bool):
        _user_compares(self, 3)
        if isinstance(o, int):
            low = self.lower_bound()
            if low is not None and op(low, o) == op(max(low, o + 1), o):
                # the same answer for every value this dim can take (all >= low)
                return op(low, o)
        elif isinstance(o, Sym):   # the difference's sign, where every size gives one (1 + s0 < 2*s0)
            d = self - o
            if not isinstance(d, Sym):
                return op(d, 0)
            for low, sign in ((d.lower_bound(), 1), ((-d).lower_bound(), -1)):
                if low is not None and op(sign * low, 0) == op(sign * max(low, 1), 0):
                    return op(sign * low, 0)
        if isinstance(o, (int, Sym)):
            # The answer in this call, guarded as a fact on the sizes (``8 - s0 >= 0``) where
            # the capture can: one entry serves every size on that side.
            result = op(self.hint, hint(o))
            lo, hi = (self, o) if less == result else (o, self)
            v = hi - lo - (1 if strict == result else 0)
            if not isinstance(v, Sym) or facts_hooks.assume(v, "a comparison of sizes", dims=True):
                return result
        return op(self._specialized(), hint(o) if isinstance(o, Sym) else o)

    def __lt__(self, o):
        return self._cmp(o, lambda a, b: a < b, True, True)

    def __le__(self, o):
        return self._cmp(o, lambda a, b: a <= b, True, False)

    def __gt__(self, o):
        return self._cmp(o, lambda a, b: a > b, False, True)

    def __ge__(self, o):
        return self._cmp(o, lambda a, b: a >= b, False, False)

    def __bool__(self):   # (``if n % 4:``: a remainder may be 0)
        return self._eq(0, 3) is not True

    # -- leaving the symbolic world -------------------------------------------
    def _specialized(self) -> int:
        if _hook.fn is not None:
            _hook.fn(self)
        return self.hint

    def __int__(self):
        return self._specialized()

    __index__ = __int__

    def __float__(self):
        return float(self._specialized())

    def __repr__(self) -> str:
        parts = [str(c) if not mono else "*".join(mono) if c == 1 else f"{c}*{'*'.join(mono)}"
                 for mono, c in self.terms]
        return " + ".join(parts).replace("+ -", "- ")

    def to_python(self, names: dict | None = None) -> str:
        """A Python expression computing this dim from variables named like the symbols."""
        names = names or {}
        parts = []
        for mono, c in self.terms:
            factors = [symbol_text(s, names) for s in mono]
            if c != 1 or not factors:
                factors.insert(0, str(c))
            parts.append("*".join(factors))
        return "(" + " + ".join(parts) + ")"

    def evaluate(self, env: dict) -> int:
        total = 0
        for mono, c in self.terms:
            v = c
            for s in mono:
                x = env.get(s)
                v *= s.value(env) if x is None else x   # (None: a derived symbol)
            total += v
        return total


def _value_of(d) -> int:
    """`d`'s concrete value, specialized where it is symbolic."""
    return d._specialized() if isinstance(d, Sym) else int(d)


def _equal_if_exact(a: Sym, b) -> bool:
    """``a == b`` where it holds once the derived symbols in it divide exactly (``i0 * q0
    == 144`` for ``q0 = 144 // i0``): True with that exactness guarded, else False."""
    diff = a - b
    used: list = []
    if not isinstance(diff, Sym) or not any(isinstance(s, Derived) for mono, _ in diff.terms
                                             for s in mono):
        return False
    diff = _substitute_exact(diff, used)
    if isinstance(diff, Sym) and hint(a) == hint(b) and any(getattr(s, "op", "") == "%" for m, _ in diff.terms
                                                            for s in m):
        return _assume_equal(a, b)   # (``8*q + (8 - r) % 8 == n``: a remainder's, guarded equal)
    if isinstance(diff, Sym) or diff != 0:
        return False
    for q in used:
        if q.exact:
            continue
        if hint(q.num) % hint(q.den) or not facts_hooks.assume(
                q.den * Sym.symbol(q, hint(q.num) // hint(q.den)) - q.num,
                "a size that divides exactly", dims=True):
            return False
    for q in used:
        q.exact = True
    return True


def _substitute_exact(v: Sym, used: list):
    """`v` with each ``den * q`` (q a derived symbol ``num // den``) replaced by ``num``;
    the symbols replaced are appended to `used`."""
    for _ in range(8):   # (a num may hold derived symbols in turn)
        out = 0
        changed = False
        for mono, c in v.terms:
            term = None
            # (a quotient by another first: q1 = 4*s0 // (2*q0) in 2*q0*q1, its den takes q0)
            for q in sorted(mono, key=lambda s: len(s.den.terms[0][0]) if isinstance(getattr(s, "den", 0), Sym)
                            else 0, reverse=True):
                if not isinstance(q, Derived) or q.op == "%":
                    continue
                dmono, dc = ((), q.den) if isinstance(q.den, int) else q.den.terms[0]
                rest = list(mono)
                rest.remove(q)
                if c % dc or not _take(rest, dmono):
                    continue
                term = (c // dc) * q.num * Sym._make({tuple(rest): 1}, 0)
                if q not in used:
                    used.append(q)
                break
            if term is None:
                term = Sym._make({mono: c}, 0)
            else:
                changed = True
            out = out + term
        v = out
        if not changed or not isinstance(v, Sym):
            break
    return v


def _exact_div(a, b):
    """a // b when b divides a exactly as polynomials (a monomial or a sum's multiple), else None."""
    if isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("division of a dimension by zero")
        if isinstance(a, int):
            return a // b if a % b == 0 else None
        if all(c % b == 0 for _, c in a.terms):
            return Sym._make({m: c // b for m, c in a.terms}, a.hint // b)
        return None
    if len(b.terms) != 1:   # ((48 + 48*s) // (6 + 6*s) is 8, a view's -1 over a grown cache)
        k = a.terms[0][1] // b.terms[0][1] if isinstance(a, Sym) else 0
        return k if k and (b * k).terms == a.terms else None
    (bm, bc), = b.terms
    if isinstance(a, int):
        return None
    out = {}
    for m, c in a.terms:
        rest = list(m)
        for s in bm:
            if s not in rest:
                return None
            rest.remove(s)
        if c % bc:
            return None
        out[tuple(rest)] = c // bc
    return Sym._make(out, a.hint // b.hint)


def _take(rest: list, symbols: tuple) -> bool:
    """Remove `symbols` (with repeats) from `rest`; False, leaving it partly done, where
    one is missing."""
    for s in symbols:
        if s not in rest:
            return False
        rest.remove(s)
    return True


Dim = Union[int, Sym]
Shape = tuple


def contains_sym(v) -> bool:
    """Whether a param value (a dim; nested tuples or dicts of them) mentions a symbol."""
    items = v.values() if isinstance(v, dict) else v
    return isinstance(v, Sym) or isinstance(v, (tuple, dict)) and any(contains_sym(x) for x in items)


def as_dim(d) -> Dim:
    """A size given as an op parameter: a symbolic one stays symbolic (``int()`` would fix
    the capture to the size it saw), anything else becomes a Python int."""
    return d if isinstance(d, Sym) else int(d)


def hint(d) -> int:
    return d.hint if isinstance(d, Sym) else int(d)


def numel(shape) -> Dim:
    return math.prod(shape)   # (of Syms too)


def _assume_equal(a, b) -> bool:
    """Two dims a capture cannot prove equal (``s0`` and ``1 + s1``: a mask and the cache it
    covers, from different arguments) but equal in this call: taken as equal, guarded both
    ways on every call, as torch.compile guards a broadcast of its symbolic sizes."""
    if not (isinstance(a, Sym) or isinstance(b, Sym)) or hint(a) != hint(b):
        return False
    ab, ba = a - b, b - a
    for d in (a, b):   # guarded already: a graph checked again after its capture
        facts = getattr(d, "facts", None)
        if facts and ab.terms in facts and ba.terms in facts:
            return True
    return facts_hooks.assume(ab, "sizes broadcast together", dims=True) and \
        facts_hooks.assume(ba, "sizes broadcast together", dims=True)


from .broadcasting import broadcast_shapes, specialize_to_agree   # noqa: E402  (re-exported)
