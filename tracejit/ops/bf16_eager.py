"""Eager bfloat16: every primitive on bf16 operands computes in float32 and rounds once.

`bind`'s general path sends here each call with a bf16 operand or a bf16 ``dtype``
parameter (bf16 signatures get no plan, so all of them come by). Three ways, one rule:

- data movement (views, shape ops without a number parameter) and `cast` run on the
  uint16 words themselves: nothing to round;
- a primitive with a registered implementation that accepts the bf16 words (the GEMM:
  compiler/cpu/gemm/bf16.py) runs on them, as it would in a compiled kernel;
- everything else runs as ``cast(f32) -> op -> cast(bf16)`` through `bind`, so autograd
  and tracing see three ordinary equations, and the result equals the float32 op's
  result rounded to nearest even (PyTorch's CPU kernels compute bf16 so too).

The result dtype is the record's rule under PyTorch's promotion (dtypes.promote_types):
bf16 with bf16, an integer or a Python number stays bf16, bf16 with float32 is float32.
"""
from __future__ import annotations

from .. import dtypes as _dt
from ..tensor import Tensor
from .registry import Aval, Primitive
from .promotion import compute_dtype, scalar_aval

__all__ = ["involves", "run"]

_BF16 = _dt.bfloat16


def involves(args, params) -> bool:
    """Whether a call has a bf16 tensor operand or asks for a bf16 result."""
    for a in args:
        if isinstance(a, Tensor) and a.dtype is _BF16:
            return True
    if params:
        for v in params.values():
            if v is _BF16:
                return True
    return False


def on_words(prim: Primitive, args, params) -> bool:
    """Whether `prim` may run on the uint16 words as they are (no arithmetic on them)."""
    if prim.name == "cast" or prim.is_view or (prim.view_if is not None and prim.view_if(params)):
        return True
    if prim.kind != "shape":
        return False
    if any(isinstance(v, float) for v in params.values()):
        return False   # (pad's fill value: a number to convert, not words to move)
    return all(a.dtype is _BF16 for a in args if isinstance(a, Tensor))


def native(prim: Primitive, args, params) -> bool:
    """Whether a registered implementation takes these bf16 words (impls.py's checkers)."""
    if not prim.has_impls or not all(isinstance(a, Tensor) and a.dtype is _BF16 for a in args):
        return False
    from .impls import implementations
    arrays = [a._data for a in args]
    for impl in implementations(prim):
        if getattr(impl.fn, "bf16_words", False) and (impl.checker is None or impl.checker(*arrays, **params)):
            return True
    return False


def out_dtype(prim: Primitive, args, params):
    """The result's dtype under the record's rule and PyTorch's promotion."""
    avals = [Aval(a._data.shape, a.dtype, a.device) if isinstance(a, Tensor) else scalar_aval(a, prim)
             for a in args]
    if prim.promote:
        cd = compute_dtype(prim, avals)
        for av in avals:
            av.dtype = cd
    return prim.rule(*avals, **params).dtype


def run(prim: Primitive, args, params):
    """``prim(*args, **params)`` computed in float32 and rounded to bf16 (see the top)."""
    from .eager import bind
    want = out_dtype(prim, args, params)
    f32 = _dt.float32
    wide = [bind(_CAST, a, dtype=f32) if isinstance(a, Tensor) and a.dtype is _BF16 else a for a in args]
    p = {k: (f32 if v is _BF16 else v) for k, v in params.items()}
    out = bind(prim, *wide, **p)
    if isinstance(out, Tensor) and out.dtype is not want and want is _BF16:
        out = bind(_CAST, out, dtype=_BF16)
    return out


from .elementwise_logic import CAST as _CAST  # noqa: E402
