"""Tensor element types and PyTorch-style type promotion.

A `DType` is a small immutable object wrapping a numpy dtype. Promotion follows
PyTorch: categories bool < integer < floating < complex; Python scalars are "weak"
and do not widen a tensor's dtype within its category (``f32 tensor * 2.0`` stays
f32), but an integer tensor meeting a Python float becomes the default float dtype,
and a floating tensor meeting a complex number becomes the complex type of its width
(``f64 tensor * 1j`` is complex128). Complex tensors run eagerly (ops/complex_ops.py).
"""
from __future__ import annotations

import functools
import math

import numpy as np

__all__ = [
    "DType", "float32", "float64", "float16", "bfloat16", "int32", "int64", "int16", "int8", "uint8", "bool_",
    "complex64", "complex128",
    "as_dtype", "result_type", "promote_types", "get_default_dtype", "set_default_dtype",
]


class DType:
    """A tensor element type (``tracejit.float32`` ...)."""

    __slots__ = ("name", "np", "short", "itemsize", "is_floating_point", "is_integer", "is_bool", "is_complex",
                 "differentiable", "category")

    def __init__(self, name: str, np_dtype, short: str):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.short = short
        self.itemsize = self.np.itemsize
        self.is_floating_point = self.np.kind == "f"
        self.is_integer = self.np.kind in "iu"
        self.is_bool = self.np.kind == "b"
        self.is_complex = self.np.kind == "c"
        # can a tensor of this dtype require grad (floating and complex, as in PyTorch)?
        self.differentiable = self.np.kind in "fc"
        # promotion's category: bool 0 < integer 1 < floating 2 < complex 3
        self.category = 0 if self.is_bool else (1 if self.is_integer else (3 if self.is_complex else 2))

    @property
    def is_signed(self) -> bool:
        return self.category >= 2 or self.np.kind == "i"   # (bfloat16's storage words are unsigned)

    def __repr__(self) -> str:
        return f"tracejit.{self.name}"

    def __reduce__(self):
        return (as_dtype, (self.name,))

    def to_real(self) -> "DType":
        """The real dtype of a complex one's parts (complex64 -> float32); itself otherwise."""
        return _REAL_OF.get(self, self)

    def to_complex(self) -> "DType":
        """The complex dtype whose parts are this floating dtype (float64 -> complex128;
        float16 and bfloat16 -> complex64, tracejit has no complex32); itself if complex."""
        if self.is_complex:
            return self
        return complex128 if self is float64 else complex64


float16 = DType("float16", np.float16, "f16")
float32 = DType("float32", np.float32, "f32")
float64 = DType("float64", np.float64, "f64")
# bfloat16: stored as uint16 words (tracejit/bfloat16.py), floating point in every rule
bfloat16 = DType("bfloat16", np.uint16, "bf16")
bfloat16.is_floating_point, bfloat16.is_integer, bfloat16.differentiable, bfloat16.category = True, False, True, 2
int8 = DType("int8", np.int8, "i8")
uint8 = DType("uint8", np.uint8, "u8")
int16 = DType("int16", np.int16, "i16")  # needed: uint8 and int8 promote to int16
int32 = DType("int32", np.int32, "i32")
int64 = DType("int64", np.int64, "i64")
bool_ = DType("bool", np.bool_, "bool")
complex64 = DType("complex64", np.complex64, "c64")
complex128 = DType("complex128", np.complex128, "c128")
_REAL_OF = {complex64: float32, complex128: float64}

_ALL = [float16, bfloat16, float32, float64, int8, uint8, int16, int32, int64, bool_, complex64, complex128]
_BY_NP = {d.np: d for d in _ALL if d is not bfloat16}  # (uint16 is bf16's storage, not a dtype)
_BY_NAME = {d.name: d for d in _ALL}
_BY_NAME.update({"float": float32, "double": float64, "half": float16, "long": int64, "int": int32,
                 "short": int16, "cfloat": complex64, "cdouble": complex128})

_default_float = float32


def get_default_dtype() -> DType:
    return _default_float


def set_default_dtype(d) -> None:
    global _default_float
    d = as_dtype(d)
    if not d.is_floating_point:
        raise TypeError(f"set_default_dtype: only floating dtypes are allowed, got {d}")
    _default_float = d


def as_dtype(d) -> DType:
    """Accept a DType, a numpy dtype/type, a name, or Python's float/int/bool."""
    if isinstance(d, DType):
        return d
    if d is float:
        return _default_float
    if d is int:
        return int64
    if d is bool:
        return bool_
    if d is complex:
        return _default_float.to_complex()
    if isinstance(d, str) and d in _BY_NAME:
        return _BY_NAME[d]
    try:
        npd = np.dtype(d)
    except TypeError:
        raise TypeError(f"not a dtype: {d!r}") from None
    try:
        return _BY_NP[npd]
    except KeyError:
        if npd.name == "bfloat16":  # ml_dtypes' numpy bfloat16
            return bfloat16
        raise TypeError(f"unsupported dtype {npd} (supported: {', '.join(x.name for x in _ALL)})") from None


def scalar_dtype(v) -> DType:
    """The dtype a Python scalar gets when it becomes a tensor on its own (a 0-dim tensor,
    a compiled function's scalar argument among them, as the number it holds)."""
    d = getattr(v, "dtype", None)
    if type(d) is DType:
        return (bool_, int64, _default_float, _default_float.to_complex())[d.category]
    if isinstance(v, (bool, np.bool_)):
        return bool_
    if isinstance(v, (int, np.integer)) or hasattr(v, "terms"):   # (a symbolic size: an int)
        return int64
    if isinstance(v, (complex, np.complexfloating)):
        return _default_float.to_complex()
    return _default_float


def number_as(dt: DType, v, what: str):
    """Python number `v` as PyTorch stores it in a tensor of dtype `dt` (a fill value, a
    clamp bound): an int below zero wraps into an unsigned dtype within its range (-3 is
    253 for uint8), a complex one with no imaginary part is its real part; a value beyond
    `dt`'s range, a float inf or nan for an integer dtype, or an imaginary part for a real
    one raises ValueRangeError naming `what`. A numpy number is checked as its Python
    value; anything else passes unchanged."""
    t = type(v)
    if t is float:
        if dt.category == 2 and (abs(v) <= _FLOAT_MAX[dt] or v != v or abs(v) == _INF):
            return v
    elif t is int:
        if 0 <= v <= 127:   # (in every dtype)
            return v
    elif t is not complex:   # (a numpy number: checked as the Python number it holds)
        return number_as(dt, v.item(), what) if isinstance(v, np.number) else v
    return _checked(dt, v, what)


def _checked(dt: DType, v, what: str):
    if dt.category == 3:
        return v
    if type(v) is complex:
        if dt.category == 0:
            return bool(v)
        if v.imag:
            _overflow(dt, v, what)
        v = v.real
    if dt.category == 2:
        if abs(v) > _FLOAT_MAX[dt] and abs(v) != _INF:
            _overflow(dt, v, what)
        return v
    if dt.category == 0:
        return v
    lo, hi = _int_range(dt)
    if lo <= v <= hi:
        return v
    if type(v) is int and lo == 0 and -hi <= v < 0:
        return v + hi + 1
    _overflow(dt, v, what)


@functools.cache
def _int_range(dt: DType) -> tuple:
    info = np.iinfo(dt.np)
    return int(info.min), int(info.max)


_INF = math.inf
_FLOAT_MAX = {float16: 65504.0, bfloat16: 3.3895313892515355e38, float32: 3.4028234663852886e38, float64: _INF}


def _overflow(dt: DType, v, what: str):
    from .errors import ValueRangeError
    raise ValueRangeError(f"{what}: value {v!r} cannot be converted to type {dt.name} without overflow")


def promote_types(a: DType, b: DType) -> DType:
    """PyTorch's pairwise promotion: the higher category wins outright (int32 with
    float16 is float16, not numpy's float64); within a category the wider type wins."""
    if a is b:
        return a
    if a.is_complex or b.is_complex:
        if a.is_floating_point or b.is_floating_point:   # (complex64 with float64 is complex128)
            a, b = a.to_complex(), b.to_complex()
        return a if b.category < 3 or (a.is_complex and a.itemsize >= b.itemsize) else b
    if a is bfloat16 or b is bfloat16:
        o = b if a is bfloat16 else a
        if o.category < 2:
            return bfloat16
        return float32 if o is float16 else o   # (bf16 with f16 is f32, as in PyTorch)
    ca, cb = a.category, b.category
    if ca != cb:
        return a if ca > cb else b
    return _BY_NP[np.promote_types(a.np, b.np)]


def _promote_all(ds) -> "DType | None":
    out = None
    for d in ds:
        out = d if out is None else promote_types(out, d)
    return out


def _combine(higher, lower):
    """Merge a lower-priority group's dtype into a higher one's (torch's combine_categories):
    the lower group only matters when it is of a higher category."""
    if higher is None:
        return lower
    if lower is None or lower.category <= higher.category:
        return higher
    if lower.is_complex and higher.is_floating_point:
        return higher.to_complex()   # (f32 tensor * 1j is complex64, f64's complex128)
    return promote_types(higher, lower)


def result_type(strong: list, weak: list, zero_dim: list = ()) -> DType:
    """Promote dtypes like PyTorch, in three priority groups.

    ``strong``: tensors with at least one dim; ``zero_dim``: 0-d tensors; ``weak``:
    Python scalars (already mapped by `scalar_dtype`). A lower group changes the result
    only when it is of a higher category (bool < integer < floating < complex), so
    ``f32 tensor * 2.5 -> f32``, ``int tensor * 2.5 -> default float``,
    ``f32[3] + f64 0-d -> f32`` but ``int64[3] + f64 0-d -> f64``.
    """
    out = _combine(_promote_all(strong), _combine(_promote_all(zero_dim), _promote_all(weak)))
    return out if out is not None else _default_float
