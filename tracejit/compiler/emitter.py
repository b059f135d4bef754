"""What a primitive's ``scalar`` rule writes against, and the rendering of a nest's steps.

`Emitter` is the interface of ops/registry.py's ``scalar(e, *names, **params)``: typed
constants (``e.const``), casts (``e.cast``), powers (``e.pow``) and math functions
(``e.call``, looked up in the one table `mathnames.MATH`). Typed constants, casts and
integer powers are the same code for every backend; a backend's emitter says only how a
type, a special float and a math function are spelled (`_type`, `_SPECIAL`, `_call`).
"""
from __future__ import annotations

import math

from ..errors import ArgumentError
from .loopnest import Const, LoopNest
from .mathnames import MATH

__all__ = ["Emitter", "render_steps", "fold", "unflatten", "NUMBA_TYPE", "arr_type"]

# numba's name of each kernel dtype (the CUDA backend's scalar types; both backends' array types)
NUMBA_TYPE = {"float32": "float32", "float64": "float64", "int32": "int32", "int64": "int64",
              "bool": "boolean", "int8": "int8", "uint8": "uint8",
              "bfloat16": "uint16"}   # (bf16's storage: kernels compute it in float32, bf16math.py)


def arr_type(dtype: str, rank: int, contiguous: bool, readonly: bool = False) -> str:
    """The numba type, as source text, of a kernel's array argument (rank 0: one element)."""
    rank = max(rank, 1)
    if readonly:
        # Inputs are only read; read-only types also accept writable arrays and numpy's
        # read-only broadcast views.
        return f"Array({NUMBA_TYPE[dtype]}, {rank}, {'C' if contiguous else 'A'!r}, readonly=True)"
    dims = [":"] * rank
    if contiguous:
        dims[-1] = "::1"
    return f"{NUMBA_TYPE[dtype]}[{', '.join(dims)}]"


class Emitter:
    """Base of the backends' emitters (codegen_cpu.CpuEmitter, codegen_cuda.CudaEmitter)."""

    # How nan and inf are written in generated source.
    _SPECIAL = {"nan": "np.nan", "inf": "np.inf"}

    def __init__(self, dtype: str):
        self.dtype = dtype
        self.imports: set = set()
        self.literals: dict = {}

    def _type(self, dt: str) -> str:
        """Source for the scalar type `dt` (a callable that makes a typed value)."""
        raise NotImplementedError

    def _call(self, fn: str, spec, args: tuple) -> str:
        """Source calling math function `fn` (its `mathnames.MathFn` is `spec`)."""
        raise NotImplementedError

    def const(self, v, dtype: str | None = None) -> str:
        dt = dtype or self.dtype
        if dt == "bool":
            return "True" if v else "False"
        tn = self._type(dt)
        if dt.startswith("float"):
            v = float(v)
            if math.isnan(v):
                text = f"{tn}({self._SPECIAL['nan']})"
            elif math.isinf(v):
                text = f"{tn}({'-' if v < 0 else ''}{self._SPECIAL['inf']})"
            else:
                text = f"{tn}({v!r})"
        else:
            text = f"{tn}({int(v)})"
        self.literals[text] = v
        return text

    def call(self, fn: str, *args) -> str:
        spec = MATH.get(fn)
        if spec is None:
            raise NotImplementedError(f"no math function {fn!r} (see compiler/mathnames.MATH)")
        return self._call(fn, spec, args)

    def cast(self, x: str, dtype) -> str:
        name = dtype.name
        if name == "bfloat16" or self.dtype == "bfloat16":
            return self._bf16_cast(x, name)
        if name == "bool":
            return f"({x} != 0)"
        tn = self._type(name)
        if x in self.literals and x.startswith(f"{tn}("):
            return x   # (a constant typed already: `const` made it)
        return f"{tn}({x})"

    def _bf16_cast(self, x: str, name: str) -> str:
        """A cast from or to bf16 words: loads widen to float32, stores round to nearest
        even (compiler/bf16math.py); the other dtypes go through float32."""
        if self.dtype == name:
            return x
        if name == "bfloat16":
            self.imports.add("f32_to_bf16")
            return f"f32_to_bf16({x if self.dtype == 'float32' else self._type('float32') + '(' + x + ')'})"
        self.imports.add("bf16_to_f32")
        wide = f"bf16_to_f32({x})"
        if name == "float32":
            return wide
        return f"({wide} != 0)" if name == "bool" else f"{self._type(name)}({wide})"

    def pow(self, a: str, b: str) -> str:
        if b in self.literals:
            v = self.literals[b]
            if v < 0 and not self.dtype.startswith("float"):
                # numpy (so eager) refuses this; a kernel would silently compute 1 // a**n.
                raise ArgumentError("Integers to negative integer powers are not allowed.")
            if math.isfinite(v) and v == int(v) and abs(v) <= 4:
                n = int(abs(v))
                if n == 0:
                    return self.const(1)
                prod = " * ".join([a] * n)
                return f"({prod})" if v > 0 else f"({self.const(1)} / ({prod}))"
            if v == 0.5 and self.dtype.startswith("float"):
                return self.call("sqrt", a)
        if self.dtype == "bool":
            return f"({a} ** {b})"
        if not self.dtype.startswith("float"):
            # a negative exponent as eager (ops/elementwise_pow.py) and PyTorch: 1 // a**-b
            # truncated, so 0 but +-1 for a == +-1 (the kernel's own power divided by 0 at a == 0)
            one, zero = self.const(1), self.const(0)
            return (f"({a} ** {b} if {zero} <= {b} <= 65536 else {self._big_int_pow(a, b)} if {b} > {zero} "
                    f"else ({one} if {a} == {one} else "
                    f"(({one} if {b} % 2 == {zero} else -{one}) if {a} == -{one} else {zero})))")
        return self.call("pow", a, b)

    def _big_int_pow(self, a: str, b: str) -> str:
        """a ** b for an exponent above 2**16 in 16-bit digits, a ** (h * 2**16 + l) ==
        (a ** h) ** 65536 * a ** l, wrapping as PyTorch's: numba's own integer power
        turns to a float pow there (int64 min for every base but 0 and +-1)."""
        bits = 64 if self.dtype == "int64" else 32   # (8-bit exponents never get here)
        expr = f"{a} ** ({b} >> {bits - 16})"
        for s in range(bits - 32, -1, -16):
            expr = f"({expr}) ** 65536 * {a} ** (({b} >> {s}) & 65535)"
        return f"({expr})"


_NARROW_INTS = ("int8", "uint8", "int32")


def render_steps(nest: LoopNest, emitter_cls) -> tuple:
    """(lines ``v<j> = <expr>  # <op> (<file>:<line>)``, emitters used) for `nest`'s steps,
    each through its primitive's ``scalar`` rule with an `emitter_cls` of its compute
    dtype; the emitters tell a backend the imports and names they used."""
    lines, emitters = [], []
    for st in nest.steps:
        em = emitter_cls(st.dtype)
        args = [em.const(a.value, a.dtype) if isinstance(a, Const) else a for a in st.args]
        expr = st.prim.scalar(em, *args, **dict(st.params))
        if st.out_dtype in _NARROW_INTS:
            # (numba computes these in int64: ``a - b`` of uint8 may be -3, which the next
            # step, fmod or a division, must see as 253, as eager's numpy does)
            expr = f"{em._type(st.out_dtype)}({expr})"
        emitters.append(em)
        lines.append(f"{st.name} = {expr}  # {st.note}")
    return lines, emitters


def fold(combine: str, acc: str, r: str) -> str:
    """The statement folding value `r` into accumulator `acc` (names or subscripts), the
    same in every backend. max and min let nan win, as numpy does (``r != r`` is only
    true for nan); ``cuda.atomic.max`` and a plain ``max`` would drop it."""
    if combine == "add":
        return f"{acc} += {r}"
    if combine == "mul":
        return f"{acc} *= {r}"
    op = ">" if combine == "max" else "<"
    return f"{acc} = {r} if ({r} {op} {acc} or {r} != {r}) else {acc}"


def unflatten(flat: str, dims: list, ind: str) -> list:
    """Statements turning the flat index `flat` over `dims` (C order) into ``i<d>`` variables,
    each quotient named apart (numba's parfor pass refuses a reassigned prange alias)."""
    if not dims:
        return []
    out, q = [], flat
    for d in reversed(dims[1:]):
        out += [f"{ind}i{d} = {q} % d{d}", f"{ind}{flat}_{d} = {q} // d{d}"]
        q = f"{flat}_{d}"
    return out + [f"{ind}i{dims[0]} = {q}"]
