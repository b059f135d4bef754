"""``tracejit.autograd.functional``: PyTorch's higher-level autograd functions —
``jacobian``, ``hessian``, ``vjp``, ``jvp``, ``hvp``, ``vhp`` — on top of
``autograd.grad``.

Inputs are a tensor or a tuple of tensors and results mirror that structure, as in
PyTorch. Results are detached unless ``create_graph=True``; an output that does not
depend on an input gives zeros, or a RuntimeError naming both with ``strict=True``.
``jvp`` uses the double-vjp identity (the vjp is linear in its cotangent, so
differentiating it with respect to the cotangent gives J @ v).
"""
from __future__ import annotations

from typing import Callable, Optional

from ..ops import zeros, zeros_like
from ..tensor import Tensor
from . import grad as _grad
from .grad_mode import enable_grad

__all__ = ["jacobian", "hessian", "vjp", "jvp", "hvp", "vhp"]


def _as_tuple(x, what: str, fn: str) -> tuple[bool, tuple]:
    is_tuple = isinstance(x, (tuple, list))
    items = tuple(x) if is_tuple else (x,)
    for i, t in enumerate(items):
        if not isinstance(t, Tensor):
            where = f"the value at index {i}" if is_tuple else "the given object"
            raise TypeError(f"The {what} given to {fn} must be either a Tensor or a tuple of Tensors but "
                            f"{where} has type {type(t).__name__}.")
    return is_tuple, items


def _prepare(inputs: tuple, create_graph: bool) -> tuple:
    """Inputs the function is run on: views of graph tensors when a graph is wanted,
    detached leaves that require grad otherwise."""
    return tuple(t.view_as(t) if create_graph and t.requires_grad else t.detach().requires_grad_(True)
                 for t in inputs)


def _finish(t: Optional[Tensor], like: Tensor, create_graph: bool) -> Tensor:
    if t is None:
        return zeros_like(like)
    return t if create_graph else t.detach()


def _grads(outputs: tuple, inputs: tuple, cotangents: tuple, create_graph: bool, strict: bool,
           fn: str) -> tuple:
    live = [(o, v) for o, v in zip(outputs, cotangents) if o.requires_grad]
    if not live:
        found = (None,) * len(inputs)
    else:
        found = _grad([o for o, _ in live], list(inputs), [v for _, v in live], retain_graph=True,
                      create_graph=create_graph, allow_unused=True)
    if strict:
        for i, g in enumerate(found):
            if g is None:
                raise RuntimeError(f"{fn}: the output of the function is independent of input {i}; "
                                   "this is not allowed in strict mode")
    return found


def _run(func: Callable, inputs: tuple, fn: str) -> tuple[bool, tuple]:
    with enable_grad():
        out = func(*inputs)
    return _as_tuple(out, "outputs of the user-provided function", fn)


def _check_v(v, outputs: tuple, what: str, fn: str) -> tuple:
    if v is None:
        if len(outputs) != 1 or outputs[0].numel() != 1:
            raise RuntimeError(f"{fn}: the vector v can only be None if the {what} is a single "
                               "Tensor with a single element")
        return (zeros_like(outputs[0]) + 1,)
    _, vs = _as_tuple(v, "v", fn)
    if len(vs) != len(outputs):
        raise RuntimeError(f"{fn}: v has {len(vs)} tensors but the {what} has {len(outputs)}")
    for i, (a, b) in enumerate(zip(vs, outputs)):
        if tuple(a.shape) != tuple(b.shape):
            raise RuntimeError(f"{fn}: entry {i} of v has shape {tuple(a.shape)} but the {what} "
                               f"entry has shape {tuple(b.shape)}")
    return vs


def _shape(is_tuple: bool, items: tuple):
    return items if is_tuple else items[0]


def vjp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), v^T J)``: the vector-Jacobian product at `inputs`."""
    in_tuple, ins = _as_tuple(inputs, "inputs", "vjp")
    ins = _prepare(ins, create_graph)
    out_tuple, outs = _run(func, ins, "vjp")
    vs = _check_v(v, outs, "output of the function", "vjp")
    found = _grads(outs, ins, vs, create_graph, strict, "vjp")
    res = tuple(_finish(g, x, create_graph) for g, x in zip(found, ins))
    outs = tuple(o if create_graph else o.detach() for o in outs)
    return _shape(out_tuple, outs), _shape(in_tuple, res)


def jvp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), J v)``: the Jacobian-vector product at `inputs`."""
    in_tuple, ins = _as_tuple(inputs, "inputs", "jvp")
    ins = _prepare(ins, create_graph)
    vs = _check_v(v, ins, "input", "jvp")
    out_tuple, outs = _run(func, ins, "jvp")
    with enable_grad():
        dummies = tuple(zeros_like(o).requires_grad_(True) for o in outs)
        found = _grads(outs, ins, dummies, True, strict, "jvp")
        pairs = [(g, v) for g, v in zip(found, vs) if g is not None]
        if pairs:
            res = _grad([g for g, _ in pairs], list(dummies), [v for _, v in pairs],
                        create_graph=create_graph, allow_unused=True)
        else:
            res = (None,) * len(outs)
    if strict and any(r is None for r in res):
        raise RuntimeError("jvp: an output of the function is independent of the inputs; this is not "
                           "allowed in strict mode")
    res = tuple(_finish(r, o, create_graph) for r, o in zip(res, outs))
    outs = tuple(o if create_graph else o.detach() for o in outs)
    return _shape(out_tuple, outs), _shape(out_tuple, res)


def jacobian(func: Callable, inputs, create_graph: bool = False, strict: bool = False,
             vectorize: bool = False, strategy: str = "reverse-mode"):
    """The Jacobian of `func` at `inputs`: for one output and one input a tensor of shape
    ``output.shape + input.shape``; tuples index ``[output][input]``."""
    if strategy not in ("reverse-mode", "forward-mode"):
        raise ValueError(f"jacobian: expected strategy to be 'reverse-mode' or 'forward-mode', got {strategy!r}")
    in_tuple, ins = _as_tuple(inputs, "inputs", "jacobian")
    ins = _prepare(ins, create_graph)
    out_tuple, outs = _run(func, ins, "jacobian")
    table = []
    for i, out in enumerate(outs):
        n = out.numel()
        rows: list[list] = [[] for _ in ins]
        flat = out.reshape(-1)
        for k in range(n):
            if flat.requires_grad:
                found = _grad([flat[k]], list(ins), retain_graph=True, create_graph=create_graph,
                              allow_unused=True)
            else:
                found = (None,) * len(ins)
            for j, (g, x) in enumerate(zip(found, ins)):
                if g is None and strict:
                    raise RuntimeError(f"jacobian: output {i} of the function is independent of input "
                                       f"{j}; this is not allowed in strict mode")
                rows[j].append(_finish(g, x, create_graph))
        entry = []
        for j, x in enumerate(ins):
            if n:
                from ..ops import stack
                jac = stack(rows[j]).reshape(tuple(out.shape) + tuple(x.shape))
            else:
                jac = zeros(tuple(out.shape) + tuple(x.shape), dtype=x.dtype)
            entry.append(jac)
        table.append(_shape(in_tuple, tuple(entry)))
    return _shape(out_tuple, tuple(table))


def hessian(func: Callable, inputs, create_graph: bool = False, strict: bool = False,
            vectorize: bool = False, outer_jacobian_strategy: str = "reverse-mode"):
    """The Hessian of scalar-valued `func` at `inputs`: ``input.shape * 2`` for one input,
    ``[i][j]`` blocks for a tuple."""
    in_tuple, ins = _as_tuple(inputs, "inputs", "hessian")

    def gradient(*xs):
        out_tuple, outs = _run(func, xs, "hessian")
        if out_tuple or outs[0].numel() != 1:
            raise RuntimeError("hessian: the function given to hessian should return a single Tensor "
                               "with a single element")
        found = _grads(outs, xs, (zeros_like(outs[0]) + 1,), True, strict, "hessian")
        return tuple(zeros_like(x) if g is None else g for g, x in zip(found, xs))

    res = jacobian(gradient, ins, create_graph=create_graph, strict=strict,
                   strategy=outer_jacobian_strategy)
    return res if in_tuple else res[0][0]


def _second(func: Callable, inputs, v, create_graph: bool, strict: bool, fn: str):
    in_tuple, ins = _as_tuple(inputs, "inputs", fn)
    ins = _prepare(ins, create_graph)
    vs = _check_v(v, ins, "input", fn)
    out_tuple, outs = _run(func, ins, fn)
    if out_tuple or outs[0].numel() != 1:
        raise RuntimeError(f"{fn}: the function given to {fn} should return a single Tensor with a "
                           "single element")
    with enable_grad():
        first = _grads(outs, ins, (zeros_like(outs[0]) + 1,), True, strict, fn)
        pairs = [(g, v) for g, v in zip(first, vs) if g is not None and g.requires_grad]
        found = (_grad([g for g, _ in pairs], list(ins), [v for _, v in pairs], create_graph=create_graph,
                       allow_unused=True) if pairs else (None,) * len(ins))
    res = tuple(_finish(g, x, create_graph) for g, x in zip(found, ins))
    out = outs[0] if create_graph else outs[0].detach()
    return out, _shape(in_tuple, res)


def vhp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), v^T H)`` for scalar-valued `func`."""
    return _second(func, inputs, v, create_graph, strict, "vhp")


def hvp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), H v)`` for scalar-valued `func` (H is symmetric for functions
    twice continuously differentiable, so this is the same product as vhp's)."""
    return _second(func, inputs, v, create_graph, strict, "hvp")
