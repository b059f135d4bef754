"""PyTorch's ``*_copy`` functions (``torch.narrow_copy``, ``permute_copy``, ...): the view op's
result as a new row-major tensor of its own memory. Each is the view op followed by a
contiguous clone, so eager, traced and compiled calls share the view's definition and
gradients flow as through the view."""
from __future__ import annotations

from ..formats import contiguous_format

__all__ = ["alias_copy", "as_strided_copy", "detach_copy", "diagonal_copy", "expand_copy", "narrow_copy",
           "permute_copy", "select_copy", "slice_copy", "squeeze_copy", "t_copy", "transpose_copy",
           "unfold_copy", "unsqueeze_copy", "view_as_complex_copy", "view_as_real_copy", "view_copy"]


def _own(view):
    return view.clone(memory_format=contiguous_format)


def alias_copy(input):
    return _own(input)


def as_strided_copy(input, size, stride, storage_offset=None):
    from .numpy_like import as_strided
    return _own(as_strided(input, size, stride, storage_offset))


def detach_copy(input):
    return _own(input.detach())


def diagonal_copy(input, offset: int = 0, dim1: int = 0, dim2: int = 1):
    return _own(input.diagonal(offset, dim1, dim2))


def expand_copy(input, size, *, implicit: bool = False):
    return _own(input.expand(size))


def narrow_copy(input, dim: int, start: int, length: int):
    return _own(input.narrow(dim, start, length))


def permute_copy(input, dims):
    return _own(input.permute(dims))


def select_copy(input, dim: int, index: int):
    return _own(input.select(dim, index))


def slice_copy(input, dim: int = 0, start=None, end=None, step: int = 1):
    index = [slice(None)] * input.ndim
    index[dim] = slice(start, end, step)
    return _own(input[tuple(index)])


def squeeze_copy(input, dim=None):
    return _own(input.squeeze() if dim is None else input.squeeze(dim))


def t_copy(input):
    return _own(input.t())


def transpose_copy(input, dim0: int, dim1: int):
    return _own(input.transpose(dim0, dim1))


def unfold_copy(input, dimension: int, size: int, step: int):
    return _own(input.unfold(dimension, size, step))


def unsqueeze_copy(input, dim: int):
    return _own(input.unsqueeze(dim))


def view_as_complex_copy(input):
    from .complex_ops import view_as_complex
    return _own(view_as_complex(input))


def view_as_real_copy(input):
    from .complex_ops import view_as_real
    return _own(view_as_real(input))


def view_copy(input, size):
    """``view_copy(x, shape)`` or ``view_copy(x, dtype)``, as Tensor.view."""
    return _own(input.view(size))
