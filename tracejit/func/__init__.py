"""``tracejit.func``: PyTorch's ``torch.func`` (JAX-style function transforms) on tracejit.

``grad``, ``grad_and_value``, ``vjp``, ``jvp``, ``jacrev``, ``jacfwd`` and ``hessian`` are built on
reverse-mode autograd (``jacfwd`` computes the same Jacobian by reverse mode, one row per
output element); ``vmap`` maps a function over a batch dim by calling it once per batch
element and stacking the results, so any function runs under it (per-sample gradients:
``vmap(grad(f))``), at the cost of one call per element; ``functional_call`` runs a module
with parameters and buffers given in a dict (``stack_module_state``: an
ensemble's stacked ones). Transforms nest: a gradient keeps its graph
when its inputs carry one, so ``grad(grad(f))`` and ``hessian`` work."""
from __future__ import annotations

from .transforms import (functionalize, grad, grad_and_value, hessian, jacfwd, jacrev, jvp, linearize,
                         replace_all_batch_norm_modules_, vjp)
from .vmap import vmap
from .functional_call import functional_call, stack_module_state
from .control import cond

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "linearize", "functionalize", "replace_all_batch_norm_modules_", "jacrev", "jacfwd", "hessian", "vmap", "functional_call",
           "stack_module_state", "cond"]
