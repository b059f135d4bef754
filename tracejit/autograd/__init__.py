"""Reverse-mode automatic differentiation: grad modes, the engine, custom Functions."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .. import bf16 as _bf16
from ..errors import user_stacklevel
from ..ops.creation import as_tensor, ones_like
from ..tensor import Tensor
from .accumulate import _own_copy, laid_out_as
from .engine import run_backward
from .function import Function, FunctionCtx
from .grad_mode import (enable_grad, enforce_grad_layout_policy, inference_mode, no_grad, set_grad_enabled)
from .grad_mode import grad_mode_enabled as is_grad_enabled   # (PyTorch's: on under enable_grad in inference_mode)

__all__ = ["grad", "backward", "Function", "FunctionCtx", "no_grad", "enable_grad",
           "set_grad_enabled", "is_grad_enabled", "inference_mode", "enforce_grad_layout_policy"]


def _as_list(x):
    if x is None:
        return None
    if isinstance(x, Tensor):
        return [x]
    return list(x)


_ONES: dict = {}  # dtype -> a 0-d one, copied for each scalar output's root gradient


def _default_grads(outputs, grad_outputs, what: str):
    grads = _as_list(grad_outputs) or [None] * len(outputs)
    if len(grads) != len(outputs):
        raise ValueError(f"{what}: got {len(outputs)} outputs but {len(grads)} grad_outputs")
    out = []
    for i, (o, g) in enumerate(zip(outputs, grads)):
        if not o.requires_grad:
            raise RuntimeError(f"{what}: element {i} of the outputs does not require grad and has no "
                               f"grad_fn (was it computed under no_grad, or from tensors without "
                               f"requires_grad=True?)")
        if g is None:
            if o.numel() != 1:
                raise RuntimeError(f"{what}: grad can be implicitly created only for scalar outputs; "
                                   f"output {i} has shape {tuple(o.shape)}: pass gradient= "
                                   f"(grad_outputs=) with that shape")
            if o.dtype.is_complex:
                raise RuntimeError(f"{what}: grad can be implicitly created only for real scalar outputs; "
                                   f"output {i} is {o.dtype.name} (take .real or .abs() of it first)")
            d = o._data
            if type(d) is np.ndarray:
                # The root gradient of a CPU output: one fresh array (ones_like's dispatch
                # costs several times more than the rest of a small backward's root; a
                # scalar loss's is a copy of a kept 0-d one, 5x cheaper than np.ones).
                one = _ONES.get(d.dtype) if not d.shape else None
                if one is None:   # (bf16 storage: the words of 1.0, not the word 1)
                    one = _bf16.to_bfloat16(np.ones(d.shape)) if _bf16.is_storage(d) else np.ones(d.shape, d.dtype)
                    if not d.shape:
                        _ONES[d.dtype] = one
                g = Tensor._wrap(one.copy(), o.dtype, o.device)
            else:
                g = ones_like(o)
        elif not hasattr(g, "_data"):
            g = as_tensor(g, dtype=o.dtype, device=o.device)
        elif tuple(g.shape) != tuple(o.shape):
            raise RuntimeError(f"{what}: gradient of shape {tuple(g.shape)} does not match output "
                               f"{i} of shape {tuple(o.shape)}")
        out.append(g)
    return out


def backward(tensors, grad_tensors=None, retain_graph: Optional[bool] = None,
             create_graph: bool = False, inputs=None) -> None:
    """Accumulate gradients of `tensors` into the ``.grad`` of the leaves they depend on, or
    with `inputs` into those tensors' ``.grad`` alone (leaves or not, as PyTorch's)."""
    if inputs is not None:
        return _backward_into(tensors, grad_tensors, retain_graph, create_graph, inputs)
    if grad_tensors is None and not retain_graph and not create_graph and type(tensors) is list \
            and len(tensors) == 1:
        # ``loss.backward()`` (Tensor.backward's list): a node that can run the whole
        # backward itself (a compiled training step's) does, with no root gradient made
        t = tensors[0]
        fn = t.grad_fn
        if fn is not None and fn.unit_backward is not None and t._base is None \
                and fn.unit_backward(t):
            return
        d = t._data
        if t._requires_grad and type(d) is np.ndarray and not d.shape:
            # a scalar CPU loss: its root gradient as `_default_grads` makes it, without
            # the argument handling (one backward call in every training step)
            one = _ONES.get(d.dtype)
            if one is not None:
                run_backward(tensors, [Tensor._wrap(one.copy(), t.dtype, t.device)], False, False)
                return
    tensors = _as_list(tensors)
    grads = _default_grads(tensors, grad_tensors, "backward")
    if retain_graph is None:
        retain_graph = create_graph
    run_backward(tensors, grads, retain_graph, create_graph)


def _backward_into(tensors, grad_tensors, retain_graph, create_graph, inputs) -> None:
    inputs = _as_list(inputs)
    if not inputs:
        raise RuntimeError("backward: the inputs argument cannot be empty (pass None for every leaf)")
    for i, t in enumerate(inputs):
        if not t.requires_grad:
            raise RuntimeError(f"backward: input {i} does not require grad")
    tensors = _as_list(tensors)
    grads = _default_grads(tensors, grad_tensors, "backward")
    for t in inputs:
        if t.grad_fn is not None:
            # As PyTorch's: a non-leaf input retains its gradient from now on, through
            # retain_grad's hook (which fills .grad in this backward too)
            t.retain_grad()
    got = run_backward(tensors, grads, create_graph if retain_graph is None else retain_graph,
                       create_graph, inputs, allow_unused=True)
    for t, g in zip(inputs, got):   # leaves, as AccumulateGrad: in place unless create_graph
        if g is None or t.grad_fn is not None:
            continue
        if t._grad is None:   # its AccumulateGrad's layout
            c = laid_out_as(g, t) if create_graph else _own_copy(g, t)
            t.grad = c.clone() if c is g else c
        elif create_graph:
            t.grad = t._grad + g
        else:
            with no_grad():
                t._grad.add_(g)


def grad(outputs, inputs, grad_outputs=None, retain_graph: Optional[bool] = None,
         create_graph: bool = False, only_inputs: bool = True, allow_unused: Optional[bool] = None,
         is_grads_batched: bool = False, materialize_grads: bool = False) -> tuple:
    """Gradients of `outputs` with respect to `inputs`, returned rather than accumulated.

    As PyTorch's: ``only_inputs`` is ignored (a warning when False); ``is_grads_batched``
    reads the first dim of every grad output as a batch of vectors and returns the batch of
    their vector-Jacobian products (one backward pass each); ``materialize_grads`` returns
    zeros for inputs the outputs do not depend on (and implies ``allow_unused``)."""
    if not only_inputs:
        import warnings
        warnings.warn("autograd.grad: only_inputs is deprecated and ignored (it is always True); "
                      "use autograd.backward to accumulate into other leaves", stacklevel=user_stacklevel())
    if materialize_grads and allow_unused is False:
        raise ValueError("autograd.grad: materialize_grads=True needs allow_unused True or unset")
    allow_unused = bool(materialize_grads or allow_unused)
    outputs = _as_list(outputs)
    inputs_l = _as_list(inputs)
    traced = any(isinstance(t, Tensor) and t._data is None for t in outputs + inputs_l)
    for i, t in enumerate(inputs_l):
        if not t.requires_grad and not traced:   # (traced_grad checks tracers)
            raise RuntimeError(f"autograd.grad: input {i} does not require grad")
    if retain_graph is None:
        retain_graph = create_graph
    if is_grads_batched:
        result = _batched_grad(outputs, inputs_l, grad_outputs, retain_graph, create_graph, allow_unused)
    elif traced:   # inside a compiled function: recorded into its graph
        from ..jit.autodiff import traced_grad
        result = traced_grad(outputs, inputs_l, _as_list(grad_outputs) or [None] * len(outputs), create_graph)
        for i, g in enumerate(result):
            if g is None and not allow_unused:
                raise RuntimeError(f"input {i} of autograd.grad does not appear in the graph of the outputs; "
                                   f"pass allow_unused=True if that is expected")
    else:
        grads = _default_grads(outputs, grad_outputs, "autograd.grad")
        result = run_backward(outputs, grads, retain_graph, create_graph, inputs=inputs_l,
                              allow_unused=allow_unused)
    if materialize_grads:
        from ..ops import zeros_like
        result = tuple(zeros_like(t) if g is None else g for g, t in zip(result, inputs_l))
    if traced:
        return tuple(result)
    if create_graph and any(g is not None and not g.requires_grad for g in result) and _prims_only(outputs):
        result = tuple(_tied(g, t) for g, t in zip(result, inputs_l))
    return result


def _tied(g, t):
    """A create_graph gradient `g` of `t` that depends on no leaf (a piecewise-linear op's,
    hardshrink or max_pool of `t` with nothing after) as one that depends on `t` with a zero
    derivative, so differentiating it again gives zeros, as PyTorch's backward formulas that
    read their input do. A select, not ``g + 0 * t``: an inf in `t` stays out of it."""
    if g is None or g.requires_grad or g.shape != t.shape:
        return g
    from ..ops import where, zeros
    return where(zeros(t.shape, dtype=bool, device=t.device), t, g)


def _prims_only(outputs) -> bool:
    """Whether every node behind `outputs` is a primitive's (or a leaf's), whose backward
    under create_graph records every dependence: then a gradient with no graph is constant.
    A custom Function's backward may compute without a graph (once_differentiable): no."""
    from .node import AccumulateGrad, PrimNode
    seen, stack = set(), [t.grad_fn for t in outputs]
    while stack:
        n = stack.pop()
        if n is None or n in seen:
            continue
        if not isinstance(n, (PrimNode, AccumulateGrad)):
            return False
        seen.add(n)
        stack.extend(f for f, _ in n.next_functions)
    return True


def _batched_grad(outputs: list, inputs: list, grad_outputs, retain_graph: bool, create_graph: bool,
                  allow_unused: bool) -> tuple:
    """is_grads_batched: one backward pass per row of the grad outputs, the results stacked."""
    from ..ops import stack
    gos = _as_list(grad_outputs) if grad_outputs is not None else []
    if len(gos) != len(outputs) or any(not isinstance(g, Tensor) for g in gos):
        raise RuntimeError("autograd.grad: is_grads_batched=True needs one grad output tensor per "
                           "output, batched along its first dim")
    sizes = {g.shape[0] if g.dim() else None for g in gos}
    for g, o in zip(gos, outputs):
        if g.dim() == 0 or tuple(g.shape[1:]) != tuple(o.shape):
            raise RuntimeError(f"autograd.grad: is_grads_batched=True: a grad output of shape "
                               f"{tuple(g.shape)} is not a batch of the output's shape {tuple(o.shape)}")
    if len(sizes) != 1:
        raise RuntimeError(f"autograd.grad: is_grads_batched=True: grad outputs have different batch "
                           f"sizes {sorted(sizes)}")
    (n,) = sizes
    rows = []
    for b in range(n):
        rows.append(run_backward(outputs, [g[b] for g in gos], retain_graph or b < n - 1, create_graph,
                                 inputs=inputs, allow_unused=allow_unused))
    return tuple(None if any(r[i] is None for r in rows) else stack([r[i] for r in rows])
                 for i in range(len(inputs)))


from .checks import (Variable, detect_anomaly, is_anomaly_enabled,  # noqa: E402,F401
                     set_detect_anomaly, set_multithreading_enabled)
# (the module at PyTorch's path first, then its functions over the submodule's name, as
# PyTorch's package does: ``autograd.gradcheck`` is the function)
from .gradcheck import GradcheckError, gradcheck, gradgradcheck  # noqa: E402,F401
__all__ += ["gradcheck", "gradgradcheck", "Variable", "detect_anomaly", "set_detect_anomaly",
            "set_multithreading_enabled", "is_anomaly_enabled"]


def __getattr__(name: str):
    """``tracejit.autograd.profiler`` (it imports the dispatch it hooks), ``.functional`` and
    the submodules at PyTorch's paths (``.graph``, ``.variable``...) on first use."""
    if name in ("profiler", "functional", "graph", "variable", "anomaly_mode"):
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
