"""``vmap``: a function mapped over a batch dim of its inputs, one call per batch element,
the results stacked along ``out_dims`` (PyTorch's ``torch.func.vmap`` / ``torch.vmap``
interface). Any function maps, including ones that branch on values or call other
transforms; the price is one call per element."""
from __future__ import annotations

from typing import Callable

from ..tensor import Tensor

__all__ = ["vmap"]


def _leaves(x, dims, path="") -> list:
    """(tensor, dim) pairs of `x` mapped over, with `dims` an int/None or a matching tree."""
    if isinstance(x, Tensor):
        if dims is None:
            return []
        if not isinstance(dims, int):
            raise ValueError(f"vmap: in_dims for the tensor at {path or 'the input'} must be an int or "
                             f"None, got {dims!r}")
        if not -x.dim() <= dims < max(x.dim(), 1) or x.dim() == 0:
            raise ValueError(f"vmap: in_dim {dims} is out of range for the tensor of shape "
                             f"{tuple(x.shape)} at {path or 'the input'}")
        return [(x, dims % x.dim())]
    if isinstance(x, (tuple, list)):
        ds = dims if isinstance(dims, (tuple, list)) else [dims] * len(x)
        if len(ds) != len(x):
            raise ValueError(f"vmap: in_dims {dims!r} does not match the {len(x)} items at {path or 'the input'}")
        return [p for i, (v, d) in enumerate(zip(x, ds)) for p in _leaves(v, d, f"{path}[{i}]")]
    if isinstance(x, dict):
        ds = dims if isinstance(dims, dict) else {k: dims for k in x}
        return [p for k, v in x.items() for p in _leaves(v, ds.get(k), f"{path}[{k!r}]")]
    return []


def _select(x, dims, b: int):
    if isinstance(x, Tensor):
        return x if dims is None else x.select(dims % x.dim(), b)
    if isinstance(x, (tuple, list)):
        ds = dims if isinstance(dims, (tuple, list)) else [dims] * len(x)
        return type(x)(_select(v, d, b) for v, d in zip(x, ds))
    if isinstance(x, dict):
        ds = dims if isinstance(dims, dict) else {k: dims for k in x}
        return {k: _select(v, ds.get(k), b) for k, v in x.items()}
    return x


def _stack(outs: list, dims):
    from ..ops import stack, tensor
    first = outs[0]
    if isinstance(first, Tensor):
        if dims is None:
            return first
        return stack(outs, dims % (first.dim() + 1))
    if isinstance(first, (int, float, bool)):
        return stack([tensor(o) for o in outs], 0)
    if isinstance(first, (tuple, list)):
        ds = dims if isinstance(dims, (tuple, list)) else [dims] * len(first)
        return type(first)(_stack([o[i] for o in outs], ds[i]) for i in range(len(first)))
    if isinstance(first, dict):
        ds = dims if isinstance(dims, dict) else {k: dims for k in first}
        return {k: _stack([o[k] for o in outs], ds.get(k, 0)) for k in first}
    raise ValueError(f"vmap: the function returned {type(first).__name__}; it must return tensors "
                     f"(or tuples, lists, dicts of them)")


def vmap(func: Callable, in_dims=0, out_dims=0, randomness: str = "error", *,
         chunk_size: int | None = None) -> Callable:
    """`func` mapped over dim `in_dims` of its inputs (an int for all, or a tuple with an
    entry per argument: an int, None for an unmapped argument, or a matching tree)."""
    if randomness not in ("error", "different", "same"):
        raise ValueError(f"vmap: randomness must be 'error', 'different' or 'same', got {randomness!r}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"vmap: chunk_size must be a positive int or None, got {chunk_size!r}")

    def wrapper(*args, **kwargs):
        dims = in_dims if isinstance(in_dims, (tuple, list)) else [in_dims] * len(args)
        if isinstance(in_dims, (tuple, list)) and len(in_dims) != len(args):
            raise ValueError(f"vmap: in_dims has {len(in_dims)} entries but the function got "
                             f"{len(args)} positional arguments")
        leaves = _leaves(list(args), list(dims))
        if not leaves:
            raise ValueError("vmap: no tensor input is mapped over (every in_dim is None)")
        sizes = {t.shape[d] for t, d in leaves}
        if len(sizes) != 1:
            raise ValueError(f"vmap: mapped inputs have different sizes along their in_dims: "
                             f"{sorted(sizes)} (shapes {[tuple(t.shape) for t, _ in leaves]})")
        (n,) = sizes
        outs = [func(*_select(list(args), list(dims), b), **kwargs) for b in range(n)]
        if not outs:
            raise ValueError("vmap: the mapped dim has size 0")
        return _stack(outs, out_dims)
    return wrapper
