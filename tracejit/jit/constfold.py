"""Tensor values Python code reads during a capture that the capture knows already.

``if attn_mask.any().item():`` on a mask built from sizes alone (``torch.triu(x.new_ones(q,
k), 1 + m)``, Transformer-XL's), or ``for i, c in enumerate(self.is_continuous): if c:``
over a small boolean tensor a module keeps (TabNet's embedding generator): the value is
computed from literals, sizes and concrete tensors of Python state, never from the call's
tensor arguments. The equations that make it run eagerly at capture, instead of the
forward falling back to eager. A concrete tensor read so is guarded on its value as
``t.item()`` on it is (value_snapshot.py `TensorValueReads`: changed in place, the next call
captures again), and a symbolic size read so becomes static, as ``int(x.shape[0])`` makes it.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import bfloat16
from ..errors import ShapeError
from ..ops.promotion import on_numpy
from ..shapes import Sym
from .ir import Literal
from .scalars import NOT_KNOWN

__all__ = ["known_value", "known_as"]

_MAX_READ = 256          # elements of a concrete tensor a guard compares on every call
_MAX_ELEMENTS = 1 << 16  # elements of any value computed at capture


class _Unknown(Exception):
    pass


def _param(v, syms: list):
    """An equation parameter with its symbolic sizes as their values in this call (noted
    in `syms`: specialized only once the whole value is known)."""
    if isinstance(v, Sym):
        syms.append(v)
        return v.hint
    if isinstance(v, (tuple, list)):
        return type(v)(_param(x, syms) for x in v)
    return v


def known_values(ctx, atoms) -> list | None:
    """The values of `atoms` as numpy arrays when the capture `ctx` knows them all, else None."""
    known = [known_value(ctx, a) for a in atoms]
    return None if any(v is NOT_KNOWN for v in known) else known


def known_value(ctx, var):
    """The value of `var` (an IR value of the root capture `ctx`) as a numpy array when no
    tensor argument of the call reaches it, else NOT_KNOWN. Random ops, tensors written or
    requiring grad, and large values are not computed."""
    if ctx.parent is not None:
        return NOT_KNOWN
    made = {o: e for e in ctx.eqns for o in e.outs}
    consts = {ctx.consts[id(t)]: t for t in ctx.const_tensors}
    memo, reads, syms = {}, [], []

    def value(a):
        if isinstance(a, Literal):
            return np.asarray(_param(a.value, syms))
        if a in memo:
            return memo[a]
        t = consts.get(a)
        if t is not None:
            if (t.requires_grad or t.numel() > _MAX_READ or id(t) in ctx.buffer_writes
                    or (t._data_of is not None and id(t._data_of) in ctx.buffer_writes)):
                raise _Unknown
            memo[a] = v = np.array(t._values())
            reads.append((t, v))
            return v
        eqn = made.get(a)
        if eqn is None or eqn.prim.kind == "random" or eqn.prim.impl is None:
            raise _Unknown
        avals = [x.aval for x in eqn.inputs]
        if any(v.dtype is bfloat16 for v in avals + [o.aval for o in eqn.outs]):
            raise _Unknown   # (numpy holds it as uint16 words)
        out = on_numpy(eqn.prim, avals, [value(x) for x in eqn.inputs],
                       {k: _param(v, syms) for k, v in eqn.params.items()})
        outs = tuple(out) if len(eqn.outs) > 1 else (out,)
        for o, v in zip(eqn.outs, outs):
            v = np.asarray(v, dtype=o.aval.dtype.np)
            if v.size > _MAX_ELEMENTS:
                raise _Unknown
            memo[o] = v
        return memo[a]

    try:
        v = value(var)
    except _Unknown:
        return NOT_KNOWN
    except Exception:  # noqa: BLE001 - an impl that needs more than numpy: not known here
        return NOT_KNOWN
    for d in syms:   # the value holds for these sizes only: the capture runs again with them static
        int(d)
    for t, read in reads:
        ctx.note_value_read(t, read if read.size != 1 else read.reshape(()).item())
        ctx.folded_reads.add(id(t))
    return v


def known_as(ctx, var, kind: str):
    """`known_value` as Python code asked for it (`kind`: "array", "bool" or "value", a
    number), with eager's errors for a value of many elements."""
    v = known_value(ctx, var)
    if v is NOT_KNOWN or kind == "array":
        return v
    if v.size != 1 and kind == "bool":
        raise RuntimeError(f"the truth value of a tensor with {v.size} elements is ambiguous; use "
                           f".any() or .all()")
    if v.size != 1:
        raise ShapeError(f"a tensor with {v.size} elements cannot be converted to a Python scalar")
    return bool(v) if kind == "bool" else v.reshape(()).item()
