"""``vmap``: a function mapped over a batch dim of its inputs, the results stacked along
``out_dims`` (PyTorch's ``torch.func.vmap`` / ``torch.vmap`` interface).

The function is traced once on one sample's shapes and its graph run once over the whole
batch (func/batching.py): each primitive runs once, with the batch as a leading dim. A
function that cannot run so (it reads tensor values, writes state, or calls a primitive
without a batching rule) is called once per batch element, the results stacked; the
``fallback`` log topic says why."""
from __future__ import annotations

from typing import Callable

from ..ops.registry import Aval, trace_state
from ..tensor import Tensor
from .batching import RANDOM_ERROR, Unbatchable, run_batched
from .transforms import _rebuild   # (every leaf it rebuilds here is a tensor)

__all__ = ["vmap"]


def _map(x, dims, fn, path=""):
    """`x` with each tensor mapped over (`dims`: an int/None or a matching tree) replaced
    by ``fn(tensor, dim)``."""
    if isinstance(x, Tensor):
        if dims is None:
            return x
        if not isinstance(dims, int):
            raise ValueError(f"vmap: in_dims for the tensor at {path or 'the input'} must be an int or "
                             f"None, got {dims!r}")
        if not -x.dim() <= dims < max(x.dim(), 1) or x.dim() == 0:
            raise ValueError(f"vmap: in_dim {dims} is out of range for the tensor of shape "
                             f"{tuple(x.shape)} at {path or 'the input'}")
        return fn(x, dims % x.dim())
    if isinstance(x, (tuple, list)):
        ds = dims if isinstance(dims, (tuple, list)) else [dims] * len(x)
        if len(ds) != len(x):
            raise ValueError(f"vmap: in_dims {dims!r} does not match the {len(x)} items at {path or 'the input'}")
        return type(x)(_map(v, d, fn, f"{path}[{i}]") for i, (v, d) in enumerate(zip(x, ds)))
    if isinstance(x, dict):
        ds = dims if isinstance(dims, dict) else {k: dims for k in x}
        return {k: _map(v, ds.get(k), fn, f"{path}[{k!r}]") for k, v in x.items()}
    return x


def _flatten(x, dims) -> list:
    """(leaf, out_dim) pairs of a function's result `x`."""
    if isinstance(x, (tuple, list)):
        ds = dims if isinstance(dims, (tuple, list)) else [dims] * len(x)
        return [p for v, d in zip(x, ds) for p in _flatten(v, d)]
    if isinstance(x, dict):
        ds = dims if isinstance(dims, dict) else {k: dims for k in x}
        return [p for k, v in x.items() for p in _flatten(v, ds.get(k, 0))]
    return [(x, dims)]


def _place(v: Tensor, batched: bool, dim, n: int) -> Tensor:
    """A batched result (batch at dim 0) with its batch at `dim`; an unbatched one repeated."""
    if dim is None:
        return v
    if not batched:
        v = v.expand((n,) + tuple(v.shape))
    return v.movedim(0, dim % v.dim()) if dim else v


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


def _batched(func, args: list, dims: list, kwargs: dict, n: int, out_dims, randomness: str):
    """One traced call of `func` on a sample's shapes, its graph run over the batch."""
    from ..jit.tracer import TraceContext
    mapped: list = []
    traced: list = []
    ctx = TraceContext()

    def sample(t, d):
        mapped.append(t.movedim(d, 0) if d else t)
        traced.append(ctx.new_input(Aval(t.shape[:d] + t.shape[d + 1:], t.dtype, t.device),
                                    requires_grad=t.requires_grad))
        return traced[-1]
    samples = _map(args, dims, sample)   # (outside the capture: the moves run eagerly)
    # Python state the function changes while traced is put back before the loop runs it
    # per sample: each sample changes it once, none twice
    ctx.effects.active = True
    ctx.effects.watch_function(func, [x for x in (*args, *kwargs.values()) if not isinstance(x, Tensor)])
    try:
        try:
            with ctx:
                out = func(*samples, **kwargs)
                leaves = _flatten(out, out_dims)
                if not all(isinstance(o, Tensor) for o, _ in leaves):
                    raise Unbatchable("the function returned a value that is not a tensor")
                graph = ctx.graph([ctx.atom(o) for o, _ in leaves])
        except Unbatchable:
            raise
        except Exception as exc:   # (the loop raises the user's errors with their own context)
            raise Unbatchable(f"the function could not be traced ({type(exc).__name__}: {exc})") from None
        effects = ctx.effects.found(out)
        # (an in-place write to a mapped input rebinds its tracer: the loop writes through)
        if (effects or ctx.buffer_writes or ctx.attr_writes or ctx.effects.stores
                or any(t._var is not v for t, v in zip(traced, graph.inputs))
                or len(graph.inputs) != len(mapped) + len(ctx.const_tensors)):
            raise Unbatchable("; ".join(effects) or "the function writes state or reads Python values")
    except Unbatchable:
        ctx.restore_attributes()
        _release(ctx)
        raise
    try:
        res = run_batched(graph, mapped + list(ctx.const_tensors),
                          [True] * len(mapped) + [False] * len(ctx.const_tensors), n, randomness)
    finally:
        _release(ctx)
    return _rebuild(out, iter(_place(v, b, d, n) for (v, b), (_, d) in zip(res, leaves)))


def _release(ctx) -> None:
    """Drop the trace's references to its own tracers once its graph has run: the
    context holds the tracers a view was taken of, each tracer its context, so each call's
    trace (~2900 objects for a Hessian of an MLP) was a cycle only the collector freed,
    and every young collection walked it until then."""
    ctx.viewed.clear()


def _per_sample(func, args: list, dims: list, kwargs: dict, n: int, randomness: str, out_dims):
    """`func` called once per batch element, the results stacked, with vmap's randomness:
    "same" draws each element's numbers from the same generator state, "error" raises
    once an element's call has drawn any (the global generator's state moved)."""
    from ..ops.random import get_rng_state, set_rng_state
    state = None if randomness == "different" else get_rng_state()
    outs = []
    for b in range(n):
        if randomness == "same":
            set_rng_state(state)
        outs.append(func(*_map(args, dims, lambda t, d: t.select(d, b)), **kwargs))
        if randomness == "error" and b == 0 and not (get_rng_state() == state).all():
            raise RuntimeError(RANDOM_ERROR)
    return _stack(outs, out_dims)


def vmap(func: Callable, in_dims=0, out_dims=0, randomness: str = "error", *,
         chunk_size: int | None = None) -> Callable:
    """`func` mapped over dim `in_dims` of its inputs (an int for all, or a tuple with an
    entry per argument: an int, None for an unmapped argument, or a matching tree)."""
    if randomness not in ("error", "different", "same"):
        raise ValueError(f"vmap: randomness must be 'error', 'different' or 'same', got {randomness!r}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"vmap: chunk_size must be a positive int or None, got {chunk_size!r}")

    def call(args: list, dims: list, kwargs: dict, n: int):
        # (inside a capture, the per-sample calls are what the captured graph holds)
        if trace_state.tracer is None:
            try:
                return _batched(func, args, dims, kwargs, n, out_dims, randomness)
            except Unbatchable as why:
                from ..jit import config
                config.topic("fallback").info("vmap of %s runs once per sample: %s",
                                              getattr(func, "__name__", "the function"), why)
            return _per_sample(func, args, dims, kwargs, n, randomness, out_dims)
        return _stack([func(*_map(args, dims, lambda t, d: t.select(d, b)), **kwargs) for b in range(n)], out_dims)

    def wrapper(*args, **kwargs):
        dims = list(in_dims) if isinstance(in_dims, (tuple, list)) else [in_dims] * len(args)
        if isinstance(in_dims, (tuple, list)) and len(in_dims) != len(args):
            raise ValueError(f"vmap: in_dims has {len(in_dims)} entries but the function got "
                             f"{len(args)} positional arguments")
        leaves: list = []
        _map(list(args), dims, lambda t, d: leaves.append((t, d)))
        if not leaves:
            raise ValueError("vmap: no tensor input is mapped over (every in_dim is None)")
        sizes = {t.shape[d] for t, d in leaves}
        if len(sizes) != 1:
            raise ValueError(f"vmap: mapped inputs have different sizes along their in_dims: "
                             f"{sorted(sizes)} (shapes {[tuple(t.shape) for t, _ in leaves]})")
        (n,) = sizes
        if n == 0:
            raise ValueError("vmap: the mapped dim has size 0")
        step = chunk_size or n
        if step >= n:
            return call(list(args), dims, kwargs, n)
        from ..ops import cat
        parts = [call(_map(list(args), dims, lambda t, d: t.narrow(d, s, min(step, n - s))), dims, kwargs,
                      min(step, n - s)) for s in range(0, n, step)]
        flat = [_flatten(p, out_dims) for p in parts]
        return _rebuild(parts[0], iter(
            v if d is None else cat([f[i][0] for f in flat], d % v.dim())
            for i, (v, d) in enumerate(flat[0])))
    return wrapper
