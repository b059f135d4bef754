"""The shape functions' argument normalization (``reshape``'s ``-1``, ``permute``'s dims...),
kept per input shape and arguments: the Python it takes costs more than the op."""
from __future__ import annotations

import numpy as np

from ..dims import eager_int_0d
from ..errors import ShapeError
from .eager import remember_plain, trace_hooks
from ..shapes import Sym, data_sized, hint, normalize_dim
from ..size import Size


def keyword_shape(op: str, name: str, args: tuple, value) -> tuple:
    """`args` with PyTorch's keyword spelling (``x.reshape(shape=(2, 3))``,
    ``x.permute(dims=...)``) folded in: `value` given as well as positional `args` is an error."""
    if args:
        raise TypeError(f"{op}() got multiple values for argument '{name}'")
    return (value,)


def as_size(d):
    """A size argument as PyTorch reads it: a numpy int (as sizes computed with numpy are)
    or a 0-d integer tensor (``zeros(n.sum())``) as its int; anything else unchanged (a
    traced one is read by the shape functions, a float refused)."""
    if isinstance(d, np.integer):
        return int(d)
    if eager_int_0d(d):
        return int(d.item())
    return d


def dim_args(dims) -> tuple:
    """Dim indices given as ``f(1, 0)`` or ``f((1, 0))``, numpy ints and 0-d tensors read as ints."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = dims[0]
    return tuple(d if type(d) is int else as_size(d) for d in dims)


def size_arg(d):
    """A size argument, a traced int one as a size: a `Sym` where it may be one
    (jit/size_args.py); reading its value instead would capture once per value
    (``x.expand(n, -1)``, ``x.repeat(n, 1)``, ``x.roll(n, 0)``); else as `as_size`."""
    return trace_hooks.size_of(d) if getattr(d, "_trace", None) is not None else as_size(d)


def shape_args(shape) -> tuple:
    """Sizes given as ``f(2, 3)`` or ``f((2, 3))``, each read by `size_arg`."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(d if type(d) is int else size_arg(d) for d in shape)


# The user-level shape functions normalize their arguments into the primitive's params:
# several µs of Python, more than the op (x.permute(1, 0) 8.6 µs against bind's 1.7). The
# params depend only on the input's shape and the arguments, so `normalized` keeps them
# per (function, shape, arguments) for numpy tensors. A call that raises is never kept;
# arguments that are not plain ints take the function itself.
NORMALIZED: dict = {}
MAX_NORMALIZED = 4096
IDENTITY = "identity"   # the value kept for a call that returns its input unchanged


def normalized(fn, a, args):
    """``fn(a, args)``: the params of `a`'s op for `args` (or `IDENTITY`), kept per
    (fn, a's shape, args) where `a` is a numpy tensor and `args` plain ints."""
    data = a._data
    if type(data) is not np.ndarray:
        return fn(a, args)   # (a tracer: symbolic shapes; another device's array)
    # (checked before the lookup: 2.0 or a numpy int is equal to, and hashes as, the int
    # whose params are kept, but must get the function's own check and error; the first
    # level inline, as most calls give ints: a call less per shape function)
    for e in args:
        if type(e) is not int and not plain_ints((e,)):
            return fn(a, args)
    key = (fn, data.shape, args)
    v = NORMALIZED.get(key)
    if v is None:
        v = fn(a, args)
        if len(NORMALIZED) < MAX_NORMALIZED:
            NORMALIZED[key] = v
            remember_plain(v)   # (bind then takes it without checking its items)
    return v


def plain_ints(args) -> bool:
    for e in args:
        t = type(e)
        if t is not int:
            if t is not tuple and t is not Size or not plain_ints(e):
                return False
    return True


def unchanged(shape, old) -> bool:
    """Whether `shape` is `old`'s sizes (lengths first: a tuple compares items before
    lengths, and a symbolic ``i0 == 144`` would fix i0; a data-dependent size, unknown, is
    taken as changed)."""
    return len(shape) == len(old) and all(a is b or not (data_sized(a) or data_sized(b)) and a == b
                                          for a, b in zip(shape, old))


def permute_params(a, dims):
    dims = dim_args(dims)
    if len(dims) != a.ndim:
        raise ShapeError(f"permute: the order {dims} names {len(dims)} dims, but the tensor of shape "
                         f"{tuple(a.shape)} has {a.ndim}")
    dims = tuple(normalize_dim(d, a.ndim, "permute") for d in dims)
    return IDENTITY if dims == tuple(range(a.ndim)) else dims


def transpose_params(a, pair):
    n = a.ndim
    d0, d1 = normalize_dim(pair[0], n, "transpose"), normalize_dim(pair[1], n, "transpose")
    dims = list(range(n))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return permute_params(a, (tuple(dims),))


def expand_params(a, shape):
    shape = list(shape_args(shape))
    lead = len(shape) - a.ndim
    if lead < 0:
        raise ShapeError(f"expand: cannot expand shape {tuple(a.shape)} to {tuple(shape)} (fewer dims)")
    for d in shape[:lead]:
        if isinstance(d, int) and d < 0:
            raise ShapeError(f"expand: the size of a new leading dim must be given (got {d}) when "
                             f"expanding shape {tuple(a.shape)} to {tuple(shape)}")
    for i in range(a.ndim):
        if isinstance(shape[lead + i], int) and shape[lead + i] == -1:
            shape[lead + i] = a.shape[i]
    shape = tuple(shape)
    return IDENTITY if unchanged(shape, a.shape) else shape


def squeeze_params(a, dims):
    dims = {normalize_dim(d, a.ndim, "squeeze") for d in dims}
    shape = tuple(d for i, d in enumerate(a.shape) if not (i in dims and isinstance(d, int) and d == 1))
    return IDENTITY if unchanged(shape, a.shape) else shape


def unsqueeze_params(a, dim):
    (dim,) = dim
    d = normalize_dim(dim, a.ndim + 1, "unsqueeze")
    shape = list(a.shape)
    shape.insert(d, 1)
    return tuple(shape)


WHOLE_DIM = (("s", None, None, None),)   # the index spec item of a whole dim


def _pieces(n, s) -> list:
    """The sizes of `n` split in pieces of `s`, the last one shorter. Of symbolic sizes the
    count of pieces is this call's, guarded on the comparisons that fix it, and the last
    piece (1 to s long) a symbol where it is >= 2, else 1, guarded (chunk(2): one entry for
    every n >= 4)."""
    if isinstance(n, Sym) or isinstance(s, Sym):
        k = -(-hint(n) // hint(s)) - 1
        r = n - k * s   # (in [1, s])
        if hint(r) < 2 and r >= 1 and r <= 1:
            r = 1
        if r <= s and (not isinstance(r, Sym) or r >= 2):
            return [s] * k + [r]
        n, s = int(n), int(s)
    return [s] * (n // s) + ([n % s] if n % s else [])


def split_specs(a, args):
    """The pieces' index specs of ``split(a, *args)``, as `narrow` makes one: the sizes add
    up to the dim, so every piece is in range (narrow's checks per piece cost as much as the
    view); kept per shape and arguments (`normalized`), the same tuples each call."""
    split_size_or_sections, dim = as_size(args[0]), args[1]   # (a 0-d tensor: a size)
    d = normalize_dim(dim, a.ndim, "split")
    n = a.shape[d]
    if isinstance(split_size_or_sections, (int, Sym)):
        s = split_size_or_sections or (0 if n != 0 else 1)   # (0 splits an empty dim only)
        if s <= 0:
            raise ShapeError(f"split: split_size must be positive, got {split_size_or_sections}")
        sizes = _pieces(n, s)
        if not sizes:
            sizes = [0]  # splitting an empty dim gives one empty piece
    else:
        # (each an int or a Sym: a 0-d tensor section added to the running start in place
        # would move the pieces before it)
        sizes = [size_arg(s) for s in split_size_or_sections]
        if sum(sizes) != n:
            raise ShapeError(f"split: sections {sizes} do not add up to size {n} of dim {dim}")
        if any(s < 0 for s in sizes):
            raise ValueError(f"split: sections must be non-negative, got {sizes}")
    lead = WHOLE_DIM * d
    out, start = [], 0
    for s in sizes:
        out.append(lead + (("s", start, start + s, None),))
        remember_plain(out[-1])
        start += s
    return tuple(out)
