"""Memory formats and layouts PyTorch programs name (``memory_format=``, ``layout=``).

tracejit tensors are dense and strided; ``contiguous()`` gives row-major (C-order)
memory. ``contiguous_format``, ``legacy_contiguous_format`` (F.gumbel_softmax's source
names it) and ``preserve_format`` are what most calls get. ``x.contiguous(memory_format=
channels_last)``, ``x.to(memory_format=...)`` and ``x.clone(memory_format=...)`` give
PyTorch's strides (channels innermost), so code that branches on
``x.is_contiguous(memory_format=channels_last)`` (ConvNeXt's and timm's LayerNorm2d) takes
PyTorch's branch, eagerly and traced; the values are the same either way. Elementwise ops
and ``cat`` keep channels_last, as PyTorch's do; convolutions and pooling give row-major
results (PyTorch's keep channels_last). ``clone()`` and the ``*_like`` factories keep their
input's memory order under ``preserve_format`` (`memory_order`), as PyTorch's do.
"""
from __future__ import annotations

__all__ = ["memory_format", "contiguous_format", "legacy_contiguous_format", "preserve_format",
           "channels_last", "channels_last_3d", "layout", "strided", "check_memory_format", "check_layout"]


class memory_format:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"tj.{self.name}"


class layout:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"tj.{self.name}"


contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
legacy_contiguous_format = memory_format("legacy_contiguous_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
strided = layout("strided")


def check_layout(layout_, op: str) -> None:
    """A factory's ``layout=``: tensors are made strided here (``to_sparse()`` makes a COO one)."""
    if layout_ is not None and layout_ is not strided:
        raise NotImplementedError(f"{op}: layout={layout_!r} is not supported; make a strided tensor "
                                  f"(then .to_sparse() for a sparse COO one)")


CHANNELS_LAST_OF_RANK = {4: channels_last, 5: channels_last_3d}   # the channels-last format of a rank
_RANK = {f.name: r for r, f in CHANNELS_LAST_OF_RANK.items()}
# rank -> (the channels-innermost order of (N, C, spatial...), and back)
CHANNELS_INNER = {r: ((0,) + tuple(range(2, r)) + (1,), (0, r - 1) + tuple(range(1, r - 1))) for r in (4, 5)}


def check_memory_format(fmt, what: str) -> None:
    if fmt is not None and not isinstance(fmt, memory_format):
        raise TypeError(f"{what}: memory_format must be a tracejit memory format (e.g. "
                        f"tracejit.contiguous_format), got {fmt!r}")


def laid_out(t, fmt, copy: bool = False):
    """`t` (a copy where `copy`) with PyTorch's strides for `fmt`: for channels_last(_3d)
    of its rank, a copy with channels innermost viewed back in t's dim order; else
    ``contiguous()``'s (``clone()``'s)."""
    from . import ops
    if copy:
        return ops.clone(t, memory_format=fmt)
    rank = _RANK.get(getattr(fmt, "name", None))
    if rank is None or t.ndim != rank:
        return ops.contiguous(t)
    if t.is_contiguous(memory_format=fmt):
        return t
    return ops.clone(t, memory_format=fmt)


def memory_order(t, fmt=None, op: str = "clone"):
    """The dims of `t` outermost first in the memory order a new tensor made like `t` gets
    under `fmt` (``clone``, ``*_like``), or None for row-major order. ``preserve_format``
    (the default) keeps t's order, as PyTorch's empty_like: dims sorted by stride, a
    broadcast (0) stride leaving a dim where it stands, equal strides putting the larger
    dim outside; so a dense tensor keeps its strides and any other gets dense ones in its
    dims' order. A tensor of symbolic sizes inside a compiled function is taken as row-major.
    `op` names the call in the error for a `fmt` that is no memory format."""
    check_memory_format(fmt, op)
    name = getattr(fmt, "name", "preserve_format")
    if name != "preserve_format":
        rank = _RANK.get(name)
        return CHANNELS_INNER[rank][0] if rank is not None and t.ndim == rank else None
    if t.ndim < 2 or not all(type(d) is int for d in t.shape):   # (asking would specialize sizes)
        return None
    from . import ops   # (the package: formats sits below ops, as laid_out's import)
    data = ops.eager.eager_layout(t)
    if data is None or data.flags.c_contiguous:
        return None
    return strides_order(data.shape, data.strides)


def dense(a) -> bool:
    """Whether array `a`'s elements fill one block of memory once each, in any order of dims
    (PyTorch's "non-overlapping and dense"); False for an empty array."""
    expect = a.itemsize
    for st, n in sorted((st, n) for st, n in zip(a.strides, a.shape) if n > 1):
        if st != expect:
            return False
        expect *= n
    return a.size > 0


def strides_order(shape: tuple, strides: tuple):
    """`memory_order`'s dim order for an array of `shape` and `strides` (outermost first),
    or None for row-major."""
    inner = list(range(len(shape) - 1, -1, -1))   # innermost first
    for i in range(1, len(inner)):   # an insertion sort that lets a 0 stride compare as neither
        j = i
        for k in range(i - 1, -1, -1):
            a, b = inner[k], inner[j]
            if strides[a] > strides[b] > 0 or (strides[a] == strides[b] != 0 and shape[a] > shape[b]):
                inner[k], inner[j] = b, a
                j = k
            elif 0 < strides[a] < strides[b]:
                break
    order = tuple(inner[::-1])
    return None if order == tuple(range(len(shape))) else order


def channels_innermost(fmt: memory_format, ndim: int):
    """The dims of channels-last format `fmt` innermost first (C, W, H(, D), N), or None
    where its rank is not `ndim`."""
    rank = _RANK.get(getattr(fmt, "name", None))
    if rank is None:
        raise TypeError(f"is_contiguous: memory_format must be a tracejit memory format, got {fmt!r}")
    return None if ndim != rank else (1,) + tuple(range(rank - 1, 1, -1)) + (0,)


def dense_in_order(t, fmt: memory_format) -> bool:
    """Whether `t`'s memory is dense with channels innermost (channels_last for 4-D,
    channels_last_3d for 5-D); dims of size 1 may have any stride, as in PyTorch."""
    order = channels_innermost(fmt, t.ndim)
    if order is None:
        return False
    shape, item = tuple(t.shape), t.dtype.itemsize
    strides = tuple(int(s) // item for s in t._data.strides)
    expect = 1
    for d in order:
        if shape[d] != 1 and strides[d] != expect:
            return False
        expect *= shape[d]
    return True


def all_channels_last(tensors, layout_of) -> bool:
    """Whether every tensor is laid out channels-last (PyTorch's suggested format of each:
    channels innermost and not also row-major); `layout_of` gives a tracer's eager array,
    asked of static sizes only (a traced layout read would specialize symbolic ones)."""
    fmt = CHANNELS_LAST_OF_RANK[tensors[0].ndim]
    for x in tensors:
        data = x._data
        if data is None:
            data = layout_of(x) if all(type(d) is int for d in x.shape) else None
        if (data is None or data.ndim != x.ndim or data.strides[1] != data.itemsize or data.shape[1] == 1
                or not x.is_contiguous(memory_format=fmt) or x.is_contiguous()):   # (the quick tests first)
            return False
    return True


def made_in_order(make, shape, order):
    """``make(s)`` for `shape` with its dims in `order` (outermost first), a row-major
    tensor, viewed back in shape's dim order: memory laid out in that order. Eagerly the
    result owns that memory, as a new tensor does (no view of a temporary); a compiled
    function keeps the view, its values being row-major."""
    if order is None:
        return make(shape)
    back = [0] * len(order)
    for i, d in enumerate(order):
        back[d] = i
    from . import ops
    out = ops.shape.permute(make(tuple(shape[d] for d in order)), back)
    if out._data is not None:
        out._base, out._vbox = None, [0]
    return out
