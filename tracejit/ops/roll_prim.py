"""roll, whose int shifts are one primitive: the shifted copy forward, the opposite roll
backward (a symbolic shift or size: slices and a ``cat``, which a capture keeps symbolic).

Why: as slices and a ``cat`` per rolled dim, an eager roll of two dims is six ops forward
and as many autograd nodes (each slice's gradient a zero-filled scatter) backward, ~2x
PyTorch's time for a (64, 256) roll. Here it is one copy each way.
"""
from __future__ import annotations

from ..shapes import Sym, normalize_dim
from .eager import bind
from .indexing import getitem
from .registry import Aval, defprim, shift_dims
from .shape import cat, clone, reshape
from .shape_params import size_arg

__all__ = ["roll", "roll_static"]


def _roll_impl(xp, a, shifts, dims):
    # (a new row-major array: numpy's roll follows the input's layout)
    return xp.ascontiguousarray(xp.roll(a, shifts, dims))


def _roll_rule(a, shifts, dims):
    return Aval(a.shape, a.dtype, a.device)


def _roll_vjp(g, out, a, shifts, dims):
    return (roll_static(g, tuple(a.shape[d] - s for s, d in zip(shifts, dims)), dims),)


ROLL = defprim("roll", _roll_impl, _roll_rule, _roll_vjp, kind="shape", save=lambda rq: (),
               extra={"batch": shift_dims, "meta": (0,), "moves": (0,)}, grad_name="RollBackward0")


def roll_static(a, shifts: tuple, dims: tuple):
    """`a` rolled by the int `shifts` (each in (0, size)) along the distinct `dims` (normalized)."""
    return bind(ROLL, a, shifts=tuple(shifts), dims=tuple(dims))


def roll(input, shifts, dims=None):
    """Shift elements along dims, wrapping around (flattened first when dims is None)."""
    if dims is None:
        return reshape(roll(reshape(input, (-1,)), shifts, 0), tuple(input.shape))
    # (a 0-d tensor or numpy int: one shift; a changing int argument: a symbolic one)
    shifts = size_arg(shifts) if not isinstance(shifts, (tuple, list)) else shifts
    shifts = (shifts,) if isinstance(shifts, (int, Sym)) else tuple(map(size_arg, shifts))
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise ValueError(f"roll: shifts {shifts} and dims {dims} must have the same length")
    out, static = input, {}
    for s, d in zip(shifts, dims):
        d = normalize_dim(d, input.ndim, "roll")
        n = input.shape[d]
        if n == 0:
            continue
        sym = isinstance(s, Sym) or isinstance(n, Sym)   # (then each comparison is guarded)
        if sym and -n <= s < 0:
            s = s + n
        if not sym or not 0 <= s < n:
            s %= n
        if not sym:   # (a dim named twice rolls by the sum)
            static[d] = (static.get(d, 0) + s) % n
        elif s:
            lo = getitem(out, (slice(None),) * d + (slice(n - s, n),))
            hi = getitem(out, (slice(None),) * d + (slice(0, n - s),))
            out = cat([lo, hi], d)
    static = {d: s for d, s in static.items() if s}
    if static:
        return roll_static(out, tuple(static.values()), tuple(static))
    # (new memory even when every shift is a whole turn, as PyTorch's: writes into the
    # input later must not show in the result)
    return clone(input) if out is input else out
