"""Eager bfloat16: every primitive on bf16 operands computes in float32 and rounds once.

`bind`'s general path sends here each call with a bf16 operand or a bf16 ``dtype``
parameter (bf16 signatures get no plan, so all of them come by). The ways, in order:

- data movement (views, shape ops without a number parameter) and `cast` run on the
  uint16 words themselves: nothing to round;
- an implementation registered on the bf16 words (the GEMM: compiler/cpu/gemm/bf16.py)
  runs on them, as it would in a compiled kernel;
- an elementwise primitive with a scalar rule giving bf16 runs in one pass where the
  backend has its kernel (`_one_pass`), else as the float32 op on the widened arrays
  rounded once; its autograd node is the primitive's own on the bf16 operands, as in the
  compiled graph (compiler/bf16_graph.py);
- an implementation marked ``bf16_widens`` (BatchNorm's records) runs on the words,
  widening on load and rounding on store (`_widening`); a bf16 result taken out of a
  float32 record (``moves``) is rounded in one pass (`_rounded_head`);
- everything else runs as ``cast(f32) -> op -> cast(bf16)`` through `bind`.

Either way the result equals the float32 op's rounded to nearest even (as PyTorch's CPU
kernels compute bf16), of the dtype the record's rule gives under PyTorch's promotion
(bf16 with bf16, an integer or a Python number stays bf16; with float32, float32).

`ROUND` (``round_bf16``) is ``cast(cast(x, bf16), float32)`` as one primitive: a float32
operand rounded to bf16 values without the words in between, for the products that
compute in float32 where the CPU has no bf16 units (`widens_products`; autocast's
``lower_widened`` policy, ops/autocast.py). Its gradient is the gradient rounded the same
way, as the two casts' would be.
"""
from __future__ import annotations

import numpy as np

from .. import bf16 as _bf16
from .. import dtypes as _dt
from ..errors import DTypeError
from ..tensor import Tensor
from .registry import REGISTRY, Aval, Primitive, defprim
from .promotion import compute_dtype, scalar_aval

__all__ = ["involves", "run", "on_words", "native", "words_prim", "widened", "widens_products", "ROUND",
           "round_bf16"]

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
    moved = prim.extra.get("moves")
    if moved is not None:   # (a record's head taken out: registry.py's ``moves``)
        return all(i < len(args) and isinstance(args[i], Tensor) and args[i].dtype is _BF16 for i in moved)
    return _moves_words(prim, [a.dtype for a in args if isinstance(a, Tensor)], params)


def _moves_words(prim: Primitive, dtypes, params) -> bool:
    if prim is _CAST or prim.is_view or (prim.view_if is not None and prim.view_if(params)):
        return True
    if prim.kind != "shape":
        return False
    if any(isinstance(v, float) for v in params.values()):
        return False   # (pad's fill value: a number to convert, not words to move)
    return all(d is _BF16 for d in dtypes)


def _bf16_impl(prim: Primitive) -> bool:
    """Whether a backend registered an implementation of `prim` on bf16 words (one marked
    ``bf16_words``, taking every call whose operands are all bf16: the GEMM)."""
    if not prim.has_impls:
        return False
    from .impls import implementations
    return any(_takes_words(impl.fn) for impl in implementations(prim))


def _takes_words(fn) -> bool:
    """An implementation's ``bf16_words`` mark: True, or a function saying whether the
    implementation runs on the words in this process (the GEMM: where it has bf16 units;
    elsewhere the product computes in float32 like every other op)."""
    flag = getattr(fn, "bf16_words", False)
    return bool(flag() if callable(flag) else flag)


def native(prim: Primitive, args, params) -> bool:
    """Whether a registered implementation takes these bf16 words (impls.py's checkers)."""
    if not all(isinstance(a, Tensor) and a.dtype is _BF16 for a in args) or not _bf16_impl(prim):
        return False
    from .impls import implementations
    arrays = [a._data for a in args]
    return any(_takes_words(impl.fn) and (impl.checker is None or impl.checker(*arrays, **params))
               for impl in implementations(prim))


def words_prim(prim: Primitive, in_avals, params, out_avals) -> bool:
    """For a graph's equation: whether it keeps bf16 words as they are (data movement, a
    cast, a complex call, or a product a backend runs on bf16 words; compiler/bf16_graph.py)."""
    dtypes = [a.dtype for a in in_avals]
    if _moves_words(prim, dtypes, params) or prim.kind == "complex":
        return True
    return (bool(dtypes) and all(d is _BF16 for d in dtypes) and all(o.dtype is _BF16 for o in out_avals)
            and _bf16_impl(prim))


def widens_products() -> bool:
    """Whether this process computes bf16 products in float32 (no backend runs them on the
    words: compiler/cpu/gemm/bf16.py's float32 way, or no backend registered)."""
    return not _bf16_impl(REGISTRY["matmul"])   # (by name: linalg imports this module)


def widened(*operands):
    """The float32 forms of a product's bf16 operands (linear, conv2d: input, weight, bias
    or None) where this process computes bf16 products in float32, else None. The op then
    runs in float32 and its caller rounds the result once, as PyTorch's bf16 linear and
    convolutions do (bias included)."""
    if not all(t is None or (isinstance(t, Tensor) and t.dtype is _BF16) for t in operands):
        return None
    if not widens_products():
        return None     # (the products run on the words: compiler/cpu/gemm/bf16.py)
    from .eager import bind
    return tuple(None if t is None else bind(_CAST, t, dtype=_dt.float32) for t in operands)


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
    if want is _BF16 and prim.kind == "elementwise" and prim.scalar is not None and prim.promote \
            and _words_and_numbers(args, params):
        return _one_pass(prim, args, params)
    if prim.has_impls and prim.kind != "elementwise":
        out = _widening(prim, args, params, want)
        if out is not None:
            return out
    if want is _BF16 and prim.extra.get("moves") is not None:
        out = _rounded_head(prim, args, params)
        if out is not None:
            return out
    f32 = _dt.float32
    wide = [bind(_CAST, a, dtype=f32) if isinstance(a, Tensor) and a.dtype is _BF16 else a for a in args]
    p = {k: (f32 if v is _BF16 else v) for k, v in params.items()}
    out = bind(prim, *wide, **p)
    if isinstance(out, Tensor) and out.dtype is not want and want is _BF16:
        out = bind(_CAST, out, dtype=_BF16)
    return out


def _words_and_numbers(args, params) -> bool:
    """Whether the operands are CPU bf16 tensors and Python numbers, the params no dtype."""
    for a in args:
        if isinstance(a, Tensor):
            if a.dtype is not _BF16 or a.device is not CPU:
                return False
        elif type(a) not in (int, float, bool):
            return False
    return not any(v is _BF16 for v in params.values())


def _one_pass(prim: Primitive, args, params) -> Tensor:
    """An elementwise `prim` on bf16 words (see the top): the backend's kernel where it
    takes the call, else the float32 plan on the widened arrays, rounded; one node."""
    from .eager import _eager
    from .impls import elementwise as _ew
    arrays = [a._data if isinstance(a, Tensor) else a for a in args]
    shape = np.broadcast_shapes(*[x.shape for x in arrays if isinstance(x, np.ndarray)])
    out = None
    if _ew.eligible(prim, [x.shape if isinstance(x, np.ndarray) else None for x in arrays], _F32, _BF16, shape,
                    params):
        out = _ew.run(prim, arrays, params, _F32_NP, _bf16.STORAGE, shape)
    if out is None:    # (the casts' own forms: the backend's one-pass kernels where loaded)
        wide = [Tensor._wrap(_CAST.run(np, x, dtype=_F32), _F32, CPU) if isinstance(x, np.ndarray) else x
                for x in arrays]
        with _grad_mode.no_grad():
            out = _CAST.run(np, _eager(prim, wide, params)._data, dtype=_BF16)
    return _with_node(prim, args, params, Tensor._wrap(out, _BF16, CPU))


def _rounded_head(prim: Primitive, args, params) -> Tensor | None:
    """A bf16 result taken out of a float32 record (``moves``: BatchNorm's output from its
    float32 record under autocast) rounded in one pass, the other operands' words not
    widened; with the primitive's own node. None where an operand is not a CPU array."""
    for a in args:
        if isinstance(a, Tensor) and (a.device is not CPU or type(a._data) is not np.ndarray):
            return None
    head = prim.run(np, *[a._data if isinstance(a, Tensor) else a for a in args], **params)
    if head.dtype != _F32_NP:
        return None
    out = _CAST.run(np, head, dtype=_BF16)
    return _with_node(prim, args, params, Tensor._wrap(out, _BF16, CPU))


def _widening(prim: Primitive, args, params, want) -> Tensor | None:
    """`prim`'s result (of dtype `want`) from an implementation marked ``bf16_widens`` (it
    computes in float32 on bf16 words, rounding a bf16 result on store), with the
    primitive's own autograd node; None where none takes the call (other dtypes, its
    kernel still loading)."""
    from .impls import implementations
    impls = [impl.fn for impl in implementations(prim) if getattr(impl.fn, "bf16_widens", False)]
    if not impls:
        return None
    for a in args:
        if isinstance(a, Tensor) and (a.device is not CPU or type(a._data) is not np.ndarray):
            return None
    arrays = [a._data if isinstance(a, Tensor) else a for a in args]
    for fn in impls:
        out = fn(*arrays, **params)
        if out is not None:
            if out.dtype != (_bf16.STORAGE if want is _BF16 else want.np):
                raise TypeError(f"{prim.name}: a bf16 implementation gave {out.dtype}, not {want.name}")
            return _with_node(prim, args, params, Tensor._wrap(out, want, CPU))
    return None


def _with_node(prim: Primitive, args, params, result: Tensor) -> Tensor:
    """`result` with `prim`'s autograd node where an operand requires a gradient."""
    if prim.vjp is not None and _grad_mode.is_grad_enabled():
        for a in args:
            if isinstance(a, Tensor) and a._requires_grad:
                from ..autograd.node import make_prim_node
                make_prim_node(prim, args, params, result)
                break
    return result


def _round_rule(a):
    if a.dtype is not _dt.float32:
        raise DTypeError(f"round_bf16: expected a float32 tensor, got {a.dtype.name}")
    return Aval(a.shape, a.dtype, a.device)


def _round_impl(xp, a):
    if xp is not np:
        raise NotImplementedError("round_bf16: bfloat16 rounding runs on the CPU")
    return _bf16.round_values(a)


def _round_scalar(e, a):
    e.imports.update(("f32_to_bf16", "bf16_to_f32"))
    return f"bf16_to_f32(f32_to_bf16({a}))"


ROUND = defprim("round_bf16", _round_impl, _round_rule, lambda g, out, a: (round_bf16(g),),
                kind="elementwise", scalar=_round_scalar, save=lambda rq: ())


def round_bf16(x: Tensor) -> Tensor:
    """float32 `x` with each value rounded to the nearest bf16 (ties to even), still
    float32: the values ``x.bfloat16().float()`` holds, in one pass."""
    from .eager import bind
    return bind(ROUND, x)


from .elementwise_logic import CAST as _CAST  # noqa: E402
from ..autograd import grad_mode as _grad_mode  # noqa: E402
from ..device import CPU  # noqa: E402

_F32 = _dt.float32
_F32_NP = np.dtype(np.float32)
