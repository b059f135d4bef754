"""Dtype promotion of an eager call's operands: PyTorch's rules for tensors and Python
scalars (`compute_dtype`), the abstract value of a scalar operand (`scalar_aval`) and the
operand arrays cast to the compute dtype with the record's rule applied (`prepare`)."""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..device import CPU
from ..errors import operand_error
from ..tensor import Tensor
from .registry import Aval, Primitive

__all__ = ["scalar_aval", "compute_dtype", "on_numpy", "prepare", "compute_np", "half_widened", "scalar_as",
           "NUMPY_WEAK_SCALARS"]

_SCALAR_TYPES = (bool, int, float, complex, np.number, np.bool_)


def scalar_aval(a, prim: Primitive) -> Aval:
    t = type(a)
    if t is float:
        return Aval((), _dt._default_float, CPU, weak=True)
    if t is int:
        return Aval((), _dt.int64, CPU, weak=True)
    if isinstance(a, _SCALAR_TYPES):
        return Aval((), _dt.scalar_dtype(a), CPU, weak=True)
    raise operand_error(prim.name, a)


def compute_dtype(prim: Primitive, avals) -> "_dt.DType":
    """The dtype a promoting op computes in (PyTorch's rules, see dtypes.result_type).
    A record's ``extra["operands"]`` sees the operands' own dtypes here first (new
    signatures and tracing only: a kept plan skips it)."""
    if prim.check_operands is not None:
        prim.check_operands(avals)
    # Fast path: every tensor operand has one dtype (0-d or not, the tiers then agree)
    # and no Python scalar is of a higher category (e.g. f32[n] * 2.0).
    cd = None
    simple = True
    weak_cat = -1
    for a in avals:
        if a.weak:
            c = a.dtype.category
            if c > weak_cat:
                weak_cat = c
        elif cd is not None and a.dtype is not cd:
            simple = False
            break
        elif cd is None:
            cd = a.dtype
    if not simple or cd is None or weak_cat > cd.category:
        dims, zero, weak = [], [], []
        for a in avals:
            (weak if a.weak else dims if a.shape else zero).append(a.dtype)
        cd = _dt.result_type(dims, weak, zero)
    if prim.int_to_float and cd.category < 2:   # (bool or integer; complex stays complex)
        cd = _dt.get_default_dtype()
    return cd


def on_numpy(prim: Primitive, avals, values, params: dict):
    """`prim` on numpy `values` (of `avals`) as eager computes it: operands in its compute
    dtype, numpy's floating-point warnings off (what constant folding evaluates)."""
    cd = compute_dtype(prim, avals).np if prim.promote else None
    with np.errstate(all="ignore"):
        return prim.impl(np, *(np.asarray(v, dtype=cd) for v in values), **params)


_F32_NP = np.dtype(np.float32)


def half_widened(prim: Primitive, dt: "_dt.DType") -> np.dtype | None:
    """numpy's float32 where `prim` computes a float16 operand of dtype `dt` in float32
    (registry.py `widens_half`: the result is rounded once), else None. Eager plans, the
    general path and compiled numpy steps all ask here."""
    return _F32_NP if dt is _dt.float16 and prim.widens_half else None


def compute_np(prim: Primitive, cd: "_dt.DType") -> np.dtype:
    """The numpy dtype a promoting record computes dtype `cd` in (`half_widened`, else
    `cd`'s own)."""
    w = half_widened(prim, cd)
    return cd.np if w is None else w


def prepare(prim: Primitive, args, avals, params):
    """Apply dtype promotion; returns the output aval and the operand arrays."""
    if prim.promote:
        cd = compute_dtype(prim, avals)
        npd = compute_np(prim, cd)
        arrays = []
        for a, av in zip(args, avals):
            if isinstance(a, Tensor):
                d = a._data
                dd = d.dtype
                if dd is not npd and dd != npd:  # identity first: builtin dtypes are singletons
                    d = d.astype(npd)
                arrays.append(d)
            else:
                arrays.append(scalar_as(a, npd))
            av.dtype = cd  # these avals are private to this call
    else:
        arrays = [a._data if isinstance(a, Tensor) else a for a in args]
        if prim.widens_half:
            arrays = [d.astype(_F32_NP) if isinstance(a, Tensor) and half_widened(prim, a.dtype) is not None else d
                      for a, d in zip(args, arrays)]
    return prim.rule(*avals, **params), arrays


NUMPY_WEAK_SCALARS = int(np.__version__.split(".")[0]) >= 2  # NEP 50


def scalar_as(a, npd):
    """A Python scalar in the compute dtype; an out-of-range int wraps around as in
    PyTorch (``uint8 tensor + 300``) instead of numpy's OverflowError."""
    try:
        return npd.type(a)
    except OverflowError:
        return np.array(a, dtype=np.int64).astype(npd)
