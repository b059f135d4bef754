"""``einsum`` as a composite over reshape / permute / sum / matmul.

Operands are contracted left to right. Each pairwise step sorts the labels into
batch (in both, still needed), contracted (in both, not needed later), left-only and
right-only, lays the operands out as ``[batch, left, contracted]`` and
``[batch, contracted, right]``, and does one batched matmul, so the work goes to BLAS
and the gradient is matmul's. A step that contracts nothing (an outer product over the
batch labels, ``'bld,dn->bldn'``) is a broadcast multiply instead: as a matmul it would be
one ``(m, 1) @ (1, n)`` product per batch element, thousands of tiny BLAS calls, where a
multiply is one elementwise kernel that fuses with its neighbours. A batched matrix-vector
step (batch labels, and one side has no labels of its own: ``'bdn,bn->bd'``) is a broadcast
multiply summed over the contracted labels, for the same reason: one small GEMV per batch
element forward, and ``(m, 1) @ (1, k)`` outer products per element in its gradient.
Labels that only one operand has and nothing later needs
are summed out first; a repeated label within one operand takes the diagonal (a view,
as PyTorch's); a size-1 dimension broadcasts (that operand simply does not depend on
the label).
"""
from __future__ import annotations

import collections
import math

from ..errors import ArgumentError, ShapeError
from .. import dtypes as _dt
from . import autocast as _autocast
from .elementwise import cast, mul
from .linalg import matmul
from .reductions import sum as _sum
from .shape import permute, reshape, squeeze

__all__ = ["einsum"]

_ELL = "..."


def _parse(equation: str, operands):
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ValueError(f"einsum: equation {equation!r} has {len(terms)} operand terms but "
                         f"{len(operands)} operands were given")
    n_ell = 0
    parsed = []
    for term, op in zip(terms, operands):
        if term.count(_ELL) > 1 or term.replace(_ELL, "").count(".") or not all(
                c.isalpha() for c in term.replace(_ELL, "")):
            raise ValueError(f"einsum: invalid subscripts {term!r} in {equation!r} "
                             f"(letters and at most one '...')")
        explicit = len(term.replace(_ELL, ""))
        if _ELL in term:
            k = op.ndim - explicit
            if k < 0:
                raise ShapeError(f"einsum: operand of shape {tuple(op.shape)} has fewer dims than "
                                 f"subscripts {term!r}")
            n_ell = max(n_ell, k)
        elif explicit != op.ndim:
            raise ShapeError(f"einsum: subscripts {term!r} name {explicit} dims but the operand has "
                             f"shape {tuple(op.shape)}")
        parsed.append(term)
    ell = [chr(0x2460 + i) for i in range(n_ell)]   # ellipsis dims: labels outside [a-zA-Z]
    labels = []
    for term, op in zip(parsed, operands):
        head, _, tail = term.partition(_ELL)
        if _ELL in term:
            k = op.ndim - len(head) - len(tail)
            labels.append(list(head) + ell[n_ell - k:] + list(tail))  # ellipsis dims align right
        else:
            labels.append(list(term))
    if arrow:
        if rhs.count(_ELL) > 1 or not all(c.isalpha() for c in rhs.replace(_ELL, "")):
            raise ValueError(f"einsum: invalid output subscripts {rhs!r}")
        head, _, tail = rhs.partition(_ELL)
        out = list(head) + (ell if _ELL in rhs else []) + list(tail)
        if len(set(out)) != len(out):
            raise ValueError(f"einsum: output subscripts {rhs!r} repeat a label")
        known = {c for ls in labels for c in ls}
        for c in out:
            if c not in known:
                raise ArgumentError(f"einsum: output label {c!r} does not appear in any operand")
    else:
        counts = collections.Counter(c for ls in labels for c in ls)
        out = ell + sorted(c for c, n in counts.items() if n == 1 and c not in ell)
    return labels, out


def _diagonal(x, labels):
    """Take diagonals for labels repeated within one operand: views, as PyTorch's (writes
    into ``einsum('ii->i', m)`` reach ``m``)."""
    from .rearrange import diagonal
    while True:
        dup = next((c for c in labels if labels.count(c) > 1), None)
        if dup is None:
            return x, labels
        i = labels.index(dup)
        j = labels.index(dup, i + 1)
        if x.shape[i] != x.shape[j]:
            raise ShapeError(f"einsum: label {dup!r} has sizes {x.shape[i]} and {x.shape[j]} in "
                             f"one operand")
        rest = [k for k in range(x.ndim) if k not in (i, j)]
        x = diagonal(x, 0, i, j)      # the diagonal becomes the last dim
        labels = [labels[k] for k in rest] + [dup]


def _sum_labels(x, labels, drop):
    dims = [k for k, c in enumerate(labels) if c in drop]
    if not dims:
        return x, labels
    return _sum(x, tuple(dims)), [c for c in labels if c not in drop]


def _contract(a, la, b, lb, keep, order):
    # Sum what only one side has and nothing later needs.
    a, la = _sum_labels(a, la, {c for c in la if c not in lb and c not in keep})
    b, lb = _sum_labels(b, lb, {c for c in lb if c not in la and c not in keep})
    batch = [c for c in la if c in lb and c in keep]
    contr = [c for c in la if c in lb and c not in keep]
    left = [c for c in la if c not in lb]
    right = [c for c in lb if c not in la]
    size = {**dict(zip(lb, b.shape)), **dict(zip(la, a.shape))}
    if not contr or (batch and not (left and right)):
        # out = a * b broadcast (summed over `contr`), laid out in the order the result
        # wants (`order`), so the final permute is the identity and what follows reads
        # it contiguously
        res = sorted(batch + left + right, key=lambda c: order.index(c) if c in order else len(order))
        full = res + contr
        a = reshape(permute(a, [la.index(c) for c in full if c in la]),
                    tuple(size[c] if c in la else 1 for c in full))
        b = reshape(permute(b, [lb.index(c) for c in full if c in lb]),
                    tuple(size[c] if c in lb else 1 for c in full))
        out = mul(a, b)
        if contr:   # in the product's dtype, as a GEMM's (an integer sum widens to int64)
            out = _sum(out, tuple(range(len(res), len(full))), dtype=out.dtype)
            low = _autocast.STATE.dtype
            if low is not None and out.dtype is _dt.float32:
                out = cast(out, low)   # (under autocast: what the matmul it replaces returns)
        return out, res
    a = permute(a, [la.index(c) for c in batch + left + contr])
    b = permute(b, [lb.index(c) for c in batch + contr + right])
    nb, nl, nc, nr = (math.prod([size[c] for c in g]) for g in (batch, left, contr, right))
    out = matmul(reshape(a, (nb, nl, nc)), reshape(b, (nb, nc, nr)))
    out = reshape(out, tuple(size[c] for c in batch + left + right))
    return out, batch + left + right


def _sublist_equation(args) -> tuple:
    """``einsum(a, [0, 1], b, [1, 2], [0, 2])`` (operands each followed by its dims as ints
    or Ellipsis, then optionally the output's) -> ('ab,bc->ac', (a, b))."""
    def letters(sub):
        out = []
        for d in sub:
            if d is Ellipsis:
                out.append("...")
            elif isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 52:
                out.append("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[d])
            else:
                raise ValueError(f"einsum: a sublist holds ints in [0, 52) or Ellipsis, got {d!r}")
        return "".join(out)
    args = list(args)
    out = letters(args.pop()) if len(args) % 2 == 1 else None
    operands, terms = tuple(args[0::2]), [letters(sub) for sub in args[1::2]]
    return ",".join(terms) + ("" if out is None else "->" + out), operands


def einsum(equation: str, *operands):
    """Einstein summation, e.g. ``einsum('bij,bjk->bik', a, b)``, ``einsum('...ij->...ji', x)``,
    or in the sublist form ``einsum(a, [0, 1], b, [1, 2], [0, 2])``."""
    if not isinstance(equation, str):
        equation, operands = _sublist_equation((equation,) + operands)
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise ValueError("einsum: expected at least one operand")
    labels, out = _parse(equation, operands)
    xs = []
    sizes = {}
    for x, ls in zip(operands, labels):
        x, ls = _diagonal(x, list(ls))
        # a size-1 dim broadcasts against the label's size elsewhere: drop it here
        for k in reversed(range(len(ls))):
            if x.shape[k] == 1:
                x, ls = squeeze(x, k), ls[:k] + ls[k + 1:]
            else:
                if sizes.setdefault(ls[k], x.shape[k]) != x.shape[k]:
                    raise ShapeError(f"einsum: label {ls[k]!r} has size {sizes[ls[k]]} in one operand and "
                                     f"{x.shape[k]} in another ({equation!r})")
        xs.append((x, ls))
    x, lx = xs[0]
    for i in range(1, len(xs)):
        later = set(out).union(*(set(l2) for _, l2 in xs[i + 1:]))
        x, lx = _contract(x, lx, xs[i][0], xs[i][1], later, out)
    x, lx = _sum_labels(x, lx, {c for c in lx if c not in out})
    # labels squeezed away everywhere (size 1) come back as size-1 output dims
    missing = [c for c in out if c not in lx]
    if missing:
        x = reshape(x, tuple(x.shape) + (1,) * len(missing))
        lx = lx + missing
    return permute(x, [lx.index(c) for c in out]) if lx != out else x
