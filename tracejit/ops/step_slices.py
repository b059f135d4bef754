"""A tensor's pieces along a dim as one autograd node, whose backward stacks or
concatenates their gradients: eager ``split``/``chunk``/``unbind``/``tensor_split`` when
their input needs gradients (as PyTorch's SplitBackward and UnbindBackward), an eager
scan's xs, attention's packed q/k/v, a recurrent step's gate blocks (`unbind_steps`,
`chunk`). Traced, the pieces stay slices (getitem's VJP)."""
from __future__ import annotations

import numpy as np

from .. import ops
from ..autograd.function import Function
from ..autograd.grad_mode import _state as _grad_state, is_grad_enabled
from ..tensor import Tensor
from . import eager as _eager
from .eager import bind
from .grad_views import recording
from .registry import REGISTRY
from .shape import _slices_along, narrow
from .shape_params import as_size, normalized as _normalized, split_specs as _split_specs
from ..errors import ShapeError
from ..shapes import normalize_dim

__all__ = ["split", "chunk", "unbind", "unbind_steps", "records_pieces"]


class _Pieces(Function):
    """The pieces of `x` along `dim` as one autograd node whose backward is one ``stack``
    (the slices ``x[k]``, `specs` None) or ``cat`` (getitem's index `specs` of consecutive
    slices covering the dim) of their gradients, zeros where a piece got none. Slicing piece
    by piece instead would make each piece's backward a full-size zero tensor with one part
    filled in, summed over the pieces: O(n^2) memory traffic for n pieces (a scan's T
    steps), five passes over `x` for two chunks."""

    @staticmethod
    def forward(ctx, x, dim, specs):
        ctx.set_materialize_grads(False)
        stacked = specs is None
        if stacked:   # (x[..., k, ...]'s specs, kept per shape and dim)
            specs = _normalized(_unbind_specs, x, (dim,))
        getitem = REGISTRY["getitem"]
        pieces = tuple([bind(getitem, x, spec=spec) for spec in specs])
        ctx.meta = (x.dtype, x.device, dim, stacked, [p.shape for p in pieces], x.shape)
        return pieces

    @staticmethod
    def backward(ctx, *grads):
        dtype, device, dim, stacked, shapes, shape = ctx.meta
        given = [g for g in grads if g is not None]
        if not given:
            return None, None, None
        if not recording(*given):   # (no graph: each gradient written once into one array)
            return _written(grads, given, shapes, shape, dim, stacked), None, None
        if len(given) < len(grads):   # (no gradient: zeros of that piece's shape)
            grads = [ops.zeros(s, dtype=dtype, device=device) if g is None else g
                     for g, s in zip(grads, shapes)]
        return (ops.stack(grads, dim) if stacked else ops.cat(grads, dim)), None, None


def _unbind_specs(x, args) -> tuple:
    """getitem's specs of the slices ``x[..., k]`` along dim ``args[0]`` (>= 0)."""
    from .indexing import _plain_spec
    lead = (slice(None),) * args[0]
    return tuple([_plain_spec(x, lead + (k,)) for k in range(x.shape[args[0]])])


def _written(grads, given, shapes, shape, dim: int, stacked: bool) -> Tensor:
    """The pieces' gradients (numpy arrays) written into one array of `x`'s shape, zeros
    where a piece got none."""
    out = np.empty(tuple(shape), dtype=given[0]._data.dtype)
    lead, at = (slice(None),) * dim, 0
    for g, s in zip(grads, shapes):
        n = 1 if stacked else s[dim]
        out[lead + ((at,) if stacked else (slice(at, at + n),))] = 0 if g is None else g._data
        at += n
    return Tensor._wrap(out, given[0].dtype, given[0].device)


def records_pieces(x: Tensor) -> bool:
    """Whether eager autograd records `x`'s pieces (one `_Pieces` node): `x` is a floating
    tensor that needs gradients, grad mode is on and no tracer is active."""
    return (x._requires_grad and _grad_state.enabled and not _eager._tracers_active
            and x.dtype.is_floating_point)


def split(a, split_size_or_sections, dim: int = 0):
    if type(split_size_or_sections) is list:   # (as a tuple: kept like a split size)
        split_size_or_sections = tuple(split_size_or_sections)
    specs = _normalized(_split_specs, a, (split_size_or_sections, dim))
    if records_pieces(a):   # one backward node writing every piece's gradient once
        return _Pieces.apply(a, len(specs[0]) - 1, specs)
    getitem = REGISTRY["getitem"]
    return tuple([bind(getitem, a, spec=spec) for spec in specs])


def chunk(a, chunks: int, dim: int = 0):
    if not isinstance(chunks := as_size(chunks), int) or chunks <= 0:   # (ShapeError: PyTorch's RuntimeError)
        raise (ShapeError if isinstance(chunks, int) else TypeError)(f"chunk: chunks must be a positive int, got {chunks!r}")
    d = normalize_dim(dim, a.ndim, "chunk")
    n = a.shape[d]   # (a symbolic one stays one: `split` guards the count of pieces)
    if n == 0:
        return tuple(narrow(a, d, 0, 0) for _ in range(chunks))
    return split(a, -(-n // chunks), d)


def unbind(a, dim: int = 0):
    d = normalize_dim(dim, a.ndim, "unbind")
    if a.shape[d] and records_pieces(a):
        return _Pieces.apply(a, d, None)
    return _slices_along(a, d)


def unbind_steps(x: Tensor, dim: int = 0) -> tuple:
    """``x.unbind(dim)`` for an eager scan: when `x` needs gradients the slices share one
    backward node that stacks their gradients along `dim` (see `_Pieces`). ``dim``
    (>= 0): attention's packed q/k/v are cut along axis 2 of [N, T, 3, H, hd], so their
    gradient is stacked straight into the layout of the projection's GEMM."""
    if x.shape[dim] and x.requires_grad and x.dtype.is_floating_point and is_grad_enabled():
        return _Pieces.apply(x, dim, None)
    return _slices_along(x, dim)
