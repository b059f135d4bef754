"""Gradient transforms of ``tracejit.func`` on reverse-mode autograd: grad, grad_and_value,
vjp, jvp, linearize, jacrev, jacfwd, hessian; functionalize and
replace_all_batch_norm_modules_, which have nothing to transform here."""
from __future__ import annotations

from typing import Callable

from ..autograd import grad as _autograd_grad
from ..autograd.grad_mode import enable_grad, is_grad_enabled
from ..autograd.graph import reachable_leaves
from ..jit.ir import Var
from ..ops.registry import bind, trace_state
from ..tensor import Tensor

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "linearize", "functionalize",
           "replace_all_batch_norm_modules_"]


def _argnums(argnums, n: int, who: str) -> tuple:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums or not all(isinstance(a, int) for a in nums):
        raise TypeError(f"{who}: argnums must be an int or a tuple of ints, got {argnums!r}")
    out = []
    for a in nums:
        if not -n <= a < n:
            raise ValueError(f"{who}: argnums {a} is out of range for a function of {n} positional "
                             f"arguments")
        out.append(a % n)
    return tuple(out)


def _flatten(x) -> list:
    if isinstance(x, Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _flatten(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _flatten(v)]
    return []


def _rebuild(x, it):
    if isinstance(x, Tensor):
        return next(it)
    if isinstance(x, (tuple, list)):
        return type(x)(_rebuild(v, it) for v in x)
    if isinstance(x, dict):
        return {k: _rebuild(v, it) for k, v in x.items()}
    return x


def _track(x):
    """`x` with every tensor a graph input: a tensor that already carries a graph (an outer
    transform's) stays connected to it, so nested transforms differentiate through. Inside
    a capture a concrete tensor becomes a traced value (the capture's gradient starts there)."""
    from ..jit.tracer import DETACH
    from ..ops.shape import COPY

    def one(t):
        if not t.dtype.is_floating_point:
            raise TypeError(f"func transforms differentiate floating-point inputs, got {t.dtype}")
        if trace_state.tracer is not None and getattr(t, "_trace", None) is None:
            return bind(COPY, t) if t.requires_grad else bind(DETACH, t).requires_grad_(True)
        return t if t.requires_grad else t.detach().requires_grad_(True)
    return _rebuild(x, iter([one(t) for t in _flatten(x)]))


def _grads(outputs, inputs: list, cotangents, create_graph: bool) -> list:
    grads = _autograd_grad(outputs, inputs, cotangents, retain_graph=True, create_graph=create_graph,
                           allow_unused=True, materialize_grads=True)
    return list(grads)


def _reaches_outside(outs: list, inner: list) -> bool:
    """Whether the graph of `outs` reaches a tensor requiring grad other than the transform's
    own inputs `inner` (a closed-over parameter, another argument, an outer transform's
    input): then the result must stay differentiable, as torch.func's does."""
    traced = [t for t in outs if getattr(t, "_trace", None) is not None]
    if not traced:
        return bool(reachable_leaves(outs) - {id(t) for t in inner})
    # inside a capture: the recorded graph's dependence, walked back from the outputs
    from ..jit.tracer import DETACH
    from ..ops.shape import COPY
    ctx, need = traced[0]._trace, {t._var for t in traced}
    roots = {v for v in ctx.grad_inputs + [ctx.consts[id(t)] for t in ctx.const_tensors if t.requires_grad]
             } - {getattr(t, "_var", None) or ctx.consts.get(id(t)) for t in inner}
    for e in reversed(ctx.eqns):
        if roots & need:
            return True
        if e.prim is not DETACH and not need.isdisjoint(e.outs):
            need.update(a for a in e.inputs if isinstance(a, Var) and a.aval.dtype.differentiable)
    return bool(roots & need)


def _call_tracked(func: Callable, args: tuple, kwargs: dict, argnums, has_aux: bool, who: str):
    """``func(*args)`` with the `argnums` arguments tracked (`_track`): (the arguments as
    called, the output, aux or None, the argnums, whether the result keeps a graph: the
    inputs carried one, or the output reaches another tensor requiring grad)."""
    nums = _argnums(argnums, len(args), who)
    args = list(args)
    outer = any(t.requires_grad for i in nums for t in _flatten(args[i]))
    grad_on = is_grad_enabled()
    with enable_grad():
        for i in nums:
            args[i] = _track(args[i])
        out = func(*args, **kwargs)
    if not outer and grad_on:
        outer = _reaches_outside(_flatten(out[0] if has_aux and isinstance(out, tuple) else out),
                                 [t for i in nums for t in _flatten(args[i])])
    aux = None
    if has_aux:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise RuntimeError(f"{who}: with has_aux=True the function must return a (output, aux) tuple")
        out, aux = out
    return args, out, aux, nums, outer


def grad_and_value(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """A function returning ``(gradient of func's scalar output w.r.t. argnums, output)``
    (``(grad, (output, aux))`` with ``has_aux``)."""
    def wrapper(*args, **kwargs):
        args, out, aux, nums, outer = _call_tracked(func, args, kwargs, argnums, has_aux, "grad")
        with enable_grad():
            if not isinstance(out, Tensor) or out.numel() != 1:
                raise RuntimeError(f"grad: the function must return a tensor with one element, got "
                                   f"{type(out).__name__}"
                                   + (f" of shape {tuple(out.shape)}" if isinstance(out, Tensor) else ""))
            inputs = [t for i in nums for t in _flatten(args[i])]
            g = iter(_grads([out], inputs, None, create_graph=outer))
        res = tuple(_rebuild(args[i], g) for i in nums)
        res = res[0] if isinstance(argnums, int) else res
        value = out if outer else out.detach()
        return (res, (value, aux)) if has_aux else (res, value)
    return wrapper


def grad(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """The gradient of `func` (a scalar-valued function) with respect to `argnums`."""
    gv = grad_and_value(func, argnums, has_aux)

    def wrapper(*args, **kwargs):
        g, v = gv(*args, **kwargs)
        return (g, v[1]) if has_aux else g
    return wrapper


def vjp(func: Callable, *primals, has_aux: bool = False):
    """``(func(*primals), vjp_fn)``; ``vjp_fn(cotangents)`` gives one gradient per primal."""
    outer = any(t.requires_grad for t in _flatten(primals))
    grad_on = is_grad_enabled()
    with enable_grad():
        primals = tuple(_track(p) for p in primals)
        out = func(*primals)
        aux = None
        if has_aux:
            out, aux = out
    inputs = _flatten(primals)
    outer = outer or (grad_on and _reaches_outside(_flatten(out), inputs))

    def vjp_fn(*cotangents):
        cot = cotangents[0] if len(cotangents) == 1 else cotangents
        outs, cots = _flatten(out), _flatten(cot)
        if len(outs) != len(cots):
            raise RuntimeError(f"vjp: expected {len(outs)} cotangents (one per output), got {len(cots)}")
        for o, c in zip(outs, cots):
            if tuple(o.shape) != tuple(c.shape):
                raise RuntimeError(f"vjp: a cotangent of shape {tuple(c.shape)} for an output of shape "
                                   f"{tuple(o.shape)}")
        g = iter(_grads(outs, inputs, cots, create_graph=outer))
        return tuple(_rebuild(p, g) for p in primals)
    value = out if outer else _rebuild(out, iter([t.detach() for t in _flatten(out)]))
    return (value, vjp_fn, aux) if has_aux else (value, vjp_fn)


def jacrev(func: Callable, argnums=0, *, has_aux: bool = False, chunk_size: int | None = None) -> Callable:
    """The Jacobian of `func` w.r.t. `argnums`, as torch.func's: for each output tensor (the
    output's structure: a tensor, or tuples, lists, dicts of them) the arguments' structure
    (one argument for an int `argnums`, a tuple of them otherwise) of blocks of shape
    output + input. `chunk_size` bounds how many backward passes are batched at once."""
    from ..ops import cat, eye, zeros
    from .vmap import vmap

    def wrapper(*args, **kwargs):
        args, out, aux, nums, outer = _call_tracked(func, args, kwargs, argnums, has_aux, "jacrev")
        outs = _flatten(out)
        if not outs or not isinstance(out, (Tensor, tuple, list, dict)) or len(outs) != _count_leaves(out):
            raise RuntimeError(f"jacrev: the function must return a tensor or tuples, lists or dicts of "
                               f"tensors, got {type(out).__name__}")
        inputs = [t for i in nums for t in _flatten(args[i])]
        with enable_grad():   # (under no_grad too: the rows differentiate this view)
            flat = cat([o.reshape(-1) for o in outs]) if len(outs) > 1 else outs[0].reshape(-1)
        # the rows: one backward pass mapped over the basis cotangents (batched by vmap)
        rows = vmap(lambda e: tuple(_grads([flat], inputs, [e], create_graph=outer)), chunk_size=chunk_size)(
            eye(flat.shape[0], dtype=flat.dtype, device=flat.device)) if flat.shape[0] else None
        blocks, start = [], 0
        for o in outs:
            n = o.numel()
            per_input = []
            for j, x in enumerate(inputs):
                shape = tuple(o.shape) + tuple(x.shape)
                b = rows[j][start:start + n].reshape(shape) if rows is not None else zeros(
                    shape, dtype=x.dtype, device=x.device)
                per_input.append(b if outer else b.detach())
            start += n
            it = iter(per_input)
            by_arg = [_rebuild(args[i], it) for i in nums]
            blocks.append(by_arg[0] if isinstance(argnums, int) else tuple(by_arg))
        res = _rebuild(out, iter(blocks))
        return (res, aux) if has_aux else res
    return wrapper


def _count_leaves(x) -> int:
    """How many leaves the pytree `x` has (tensors or not), to tell a non-tensor output."""
    if isinstance(x, (tuple, list)):
        return sum(_count_leaves(v) for v in x)
    if isinstance(x, dict):
        return sum(_count_leaves(v) for v in x.values())
    return 1


def jacfwd(func: Callable, argnums=0, has_aux: bool = False, *, randomness: str = "error") -> Callable:
    """The Jacobian of `func`, as `jacrev` computes it (reverse mode: the same numbers)."""
    return jacrev(func, argnums, has_aux=has_aux)


def hessian(func: Callable, argnums=0) -> Callable:
    """The Hessian of a scalar-valued `func`: the Jacobian of its gradient."""
    return jacfwd(jacrev(func, argnums), argnums)


def jvp(func: Callable, primals, tangents, *, strict: bool = False, has_aux: bool = False):
    """``(func(*primals), J tangents)`` (and aux with `has_aux`): forward mode computed
    by reverse mode twice, the VJP's graph differentiated w.r.t. its cotangent (the
    ops' backward must be differentiable, as for ``grad(grad(f))``)."""
    from ..ops import zeros_like
    for name, x in (("primals", primals), ("tangents", tangents)):
        if not isinstance(x, (tuple, list)):
            raise RuntimeError(f"jvp(f, primals, tangents): Expected {name} to be a tuple. "
                               f"E.g. it should be valid to call f(*primals).")
    ps, ts = _flatten(primals), _flatten(tangents)
    if len(primals) != len(tangents) or len(ps) != len(ts) or any(
            tuple(p.shape) != tuple(t.shape) for p, t in zip(ps, ts)):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals and tangents to have the same "
                           "python structure and shapes")
    args, out, aux, nums, outer = _call_tracked(func, tuple(primals), {}, tuple(range(len(primals))),
                                                has_aux, "jvp")
    outs = _flatten(out)
    with enable_grad():
        dummies = [zeros_like(o).requires_grad_(True) for o in outs]
        gs = _grads(outs, _flatten(args), dummies, create_graph=True)
        pairs = [(g, t) for g, t in zip(gs, ts) if g.requires_grad]
        res = _autograd_grad([g for g, _ in pairs], dummies, [t for _, t in pairs], create_graph=outer,
                             allow_unused=True, materialize_grads=True) if pairs else [zeros_like(o) for o in outs]
    if not outer:
        outs, res = [o.detach() for o in outs], [r.detach() for r in res]
    inner = _flatten(args)   # (aux keeps a graph only to tensors outside the transform, as torch's)
    aux = _rebuild(aux, iter([t if outer and _reaches_outside([t], inner) else t.detach() for t in _flatten(aux)]))
    value, jv = _rebuild(out, iter(outs)), _rebuild(out, iter(res))
    return (value, jv, aux) if has_aux else (value, jv)


def linearize(func: Callable, *primals):
    """``(func(*primals), jvp_fn)``; ``jvp_fn(*tangents)`` is the Jacobian-vector product at
    `primals` (each call differentiates again: nothing is kept between them)."""
    out = jvp(func, primals, primals)[0]
    return out, lambda *tangents: jvp(func, primals, tangents)[1]


def functionalize(func: Callable, *, remove: str = "mutations") -> Callable:
    """`func` itself: its in-place writes already run as functional updates when captured."""
    if remove not in ("mutations", "mutations_and_views"):
        raise RuntimeError(f"functionalize: remove must be 'mutations' or 'mutations_and_views', got {remove!r}")
    return func


def replace_all_batch_norm_modules_(root):
    """Batch norm layers of `root` stop tracking running statistics (in place; `root`)."""
    from ..nn.normalization import _BatchNorm
    for m in root.modules():
        if isinstance(m, _BatchNorm) and m.track_running_stats:
            m.running_mean = m.running_var = m.num_batches_tracked = None
            m.track_running_stats = False
    return root
