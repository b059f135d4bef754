"""``nn.utils.prune``: zeroing chosen entries of a module's tensor through a mask, as PyTorch's.

Pruning ``module.weight`` renames the parameter to ``weight_orig``, adds a buffer
``weight_mask`` and a forward pre-hook (the pruning method itself) that sets the plain
attribute ``module.weight = weight_mask * weight_orig`` before every forward; so the
state_dict holds ``weight_orig`` and ``weight_mask``, gradients reach ``weight_orig``
through the mask, and `remove` makes the pruning permanent (``weight`` a parameter again,
holding the masked values). Pruning a tensor again composes the masks in a
`PruningContainer`: the new method only sees the entries still unpruned.

The hook only assigns a tensor attribute, which a compiled forward records as a graph
output written back per call, so pruned modules run under ``tracejit.compile``. Masks pick
entries the way PyTorch's CPU ``topk`` does, ties included (``selection.py``), so the same
weights prune to the same mask.
"""
from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterable

import numpy as np

from ... import ops
from ...tensor import Tensor
from ..module import Module
from .selection import topk_set

__all__ = ["BasePruningMethod", "PruningContainer", "Identity", "RandomUnstructured", "L1Unstructured",
           "RandomStructured", "LnStructured", "CustomFromMask", "identity", "random_unstructured",
           "l1_unstructured", "random_structured", "ln_structured", "global_unstructured",
           "custom_from_mask", "remove", "is_pruned"]


class BasePruningMethod(ABC):
    """A way of choosing a mask; an instance applied to ``module.<name>`` is also the forward
    pre-hook recomputing ``module.<name>`` from ``<name>_orig`` and ``<name>_mask``."""

    _tensor_name: str
    _traceable = True   # the hook's only effect is a tensor attribute a graph writes back

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self._tensor_name, self.apply_mask(module))

    @abstractmethod
    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        """The new mask for `t`, given the mask already in force."""

    def apply_mask(self, module: Module) -> Tensor:
        """``<name>_mask * <name>_orig`` of `module`."""
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned")
        mask = getattr(module, self._tensor_name + "_mask")
        orig = getattr(module, self._tensor_name + "_orig")
        return mask.to(dtype=orig.dtype) * orig

    @classmethod
    def apply(cls, module: Module, name: str, *args, importance_scores: Tensor | None = None, **kwargs):
        """Prune ``module.<name>`` with ``cls(*args, **kwargs)``, composing with an earlier
        pruning of the same tensor; returns the method (or container) now hooked."""
        method = _composite_method(cls, module, name, *args, **kwargs)
        orig = getattr(module, name)
        importance_scores = _scores(importance_scores, orig, f"parameter {name} of {module}")
        if not isinstance(method, PruningContainer):
            module.register_parameter(name + "_orig", orig)
            del module._parameters[name]
            default_mask = ops.ones_like(orig)
        else:
            default_mask = getattr(module, name + "_mask").detach().clone()
        try:
            mask = method.compute_mask(importance_scores, default_mask=default_mask)
            module.register_buffer(name + "_mask", mask)
            setattr(module, name, method.apply_mask(module))
            module.register_forward_pre_hook(method)
        except Exception:
            if not isinstance(method, PruningContainer):
                orig = getattr(module, name + "_orig")
                module.register_parameter(name, orig)
                del module._parameters[name + "_orig"]
            raise
        return method

    def prune(self, t: Tensor, default_mask: Tensor | None = None,
              importance_scores: Tensor | None = None) -> Tensor:
        """`t` with this method's mask applied (no module involved)."""
        importance_scores = _scores(importance_scores, t, "tensor t")
        default_mask = default_mask if default_mask is not None else ops.ones_like(t)
        return t * self.compute_mask(importance_scores, default_mask=default_mask)

    def remove(self, module: Module) -> None:
        """Make the pruning permanent: ``<name>`` becomes the ``<name>_orig`` parameter, now
        holding the masked values; the mask buffer goes."""
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned before pruning can be removed")
        weight = self.apply_mask(module)
        if hasattr(module, self._tensor_name):
            delattr(module, self._tensor_name)
        orig = module._parameters[self._tensor_name + "_orig"]
        orig.data = weight.data
        del module._parameters[self._tensor_name + "_orig"]
        del module._buffers[self._tensor_name + "_mask"]
        setattr(module, self._tensor_name, orig)


def _composite_method(cls, module: Module, name: str, *args, **kwargs) -> BasePruningMethod:
    """``cls(*args, **kwargs)`` for `name`, in a container with the method already hooked there."""
    old, keys = None, []
    for k, hook in module._forward_pre_hooks.items():
        if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
            old = hook
            keys.append(k)
    if len(keys) > 1:
        raise AssertionError(f"Avoid adding multiple pruning hooks to the same tensor {name} of module "
                             f"{module}. Use a PruningContainer.")
    for k in keys:
        del module._forward_pre_hooks[k]
    method = cls(*args, **kwargs)
    method._tensor_name = name
    if isinstance(old, PruningContainer):
        old.add_pruning_method(method)
        return old
    if old is not None:
        container = PruningContainer(old)
        container.add_pruning_method(method)
        return container
    return method


class PruningContainer(BasePruningMethod):
    """The pruning methods applied to one tensor, in order; its mask is the last method's,
    computed on the entries the earlier ones left."""

    def __init__(self, *args) -> None:
        self._pruning_methods: tuple = ()
        if len(args) == 1:
            self._tensor_name = args[0]._tensor_name
            self.add_pruning_method(args[0])
        else:
            for method in args:
                self.add_pruning_method(method)

    def add_pruning_method(self, method: BasePruningMethod | None) -> None:
        if not isinstance(method, BasePruningMethod) and method is not None:
            raise TypeError(f"{type(method)} is not a BasePruningMethod subclass")
        if method is not None and self._tensor_name != method._tensor_name:
            raise ValueError(f"Can only add pruning methods acting on the parameter named "
                             f"'{self._tensor_name}' to PruningContainer {self}. Found "
                             f"'{method._tensor_name}'")
        self._pruning_methods += (method,)

    def __len__(self) -> int:
        return len(self._pruning_methods)

    def __iter__(self):
        return iter(self._pruning_methods)

    def __getitem__(self, idx):
        return self._pruning_methods[idx]

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        """The last method's mask over the part of `t` still unpruned under `default_mask`:
        the entries (unstructured), the channels with an entry left (structured), or all
        of `t` (global)."""
        method = self._pruning_methods[-1]
        mask = default_mask
        new_mask = mask.to(dtype=t.dtype)
        kind = method.PRUNING_TYPE
        if kind == "unstructured":
            slc = mask == 1
        elif kind == "structured":
            if not hasattr(method, "dim"):
                raise AttributeError('Pruning methods of PRUNING_TYPE "structured" need to have the '
                                     "attribute `dim` defined.")
            n_dims = t.dim()
            dim = method.dim + n_dims if method.dim < 0 else method.dim
            if dim < 0:
                raise IndexError(f"Index is out of bounds for tensor with dimensions {n_dims}")
            keep = mask.sum(dim=[d for d in range(n_dims) if d != dim]) != 0
            slc = tuple(keep if d == dim else slice(None) for d in range(n_dims))
        elif kind == "global":
            slc = (slice(None),) * len(t.shape)
        else:
            raise ValueError(f"Unrecognized PRUNING_TYPE {kind}")
        partial = method.compute_mask(t[slc], default_mask=mask[slc])
        new_mask[slc] = partial.to(dtype=new_mask.dtype)
        return new_mask


class Identity(BasePruningMethod):
    """Prunes nothing: the mask is all ones (the mechanism without the pruning)."""

    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        return default_mask

    @classmethod
    def apply(cls, module: Module, name: str):
        return super().apply(module, name)


def _zero_at(mask: Tensor, indices: np.ndarray) -> Tensor:
    mask = mask.clone()
    if indices.size:
        mask.view(-1)[ops.tensor(indices)] = 0
    return mask


class _Unstructured(BasePruningMethod):
    """Prunes `amount` entries (a count, or a fraction of the tensor): those `_drop` picks."""

    PRUNING_TYPE = "unstructured"

    def __init__(self, amount: int | float) -> None:
        _validate_pruning_amount_init(amount)
        self.amount = amount

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        k = _compute_nparams_toprune(self.amount, t.numel())
        _validate_pruning_amount(k, t.numel())
        if k == 0:
            return default_mask.clone()
        return _zero_at(default_mask, self._drop(t, k))


class RandomUnstructured(_Unstructured):
    """Prunes `amount` entries (a count, or a fraction of the tensor) chosen at random."""

    def _drop(self, t: Tensor, k: int) -> np.ndarray:
        return topk_set(ops.rand_like(t).detach().numpy(), k, largest=True)

    @classmethod
    def apply(cls, module: Module, name: str, amount: int | float):
        return super().apply(module, name, amount=amount)


class L1Unstructured(_Unstructured):
    """Prunes the `amount` entries of smallest absolute value (of `importance_scores`, when given)."""

    def _drop(self, t: Tensor, k: int) -> np.ndarray:
        return topk_set(ops.abs(t.detach()).numpy(), k, largest=False)

    @classmethod
    def apply(cls, module: Module, name: str, amount: int | float, importance_scores: Tensor | None = None):
        return super().apply(module, name, amount=amount, importance_scores=importance_scores)


class _Structured(BasePruningMethod):
    """Prunes `amount` whole channels along `dim`: all but those `_keep` picks."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount: int | float, dim: int = -1) -> None:
        _validate_pruning_amount_init(amount)
        self.amount = amount
        self.dim = dim

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        _validate_structured_pruning(t)
        _validate_pruning_dim(t, self.dim)
        size = t.shape[self.dim]
        k = _compute_nparams_toprune(self.amount, size)
        _validate_pruning_amount(k, size)
        keep = self._keep(t, size, k)
        if k == 0:
            return default_mask
        mask = ops.zeros_like(t)
        mask[tuple(keep() if d == self.dim % t.dim() else slice(None) for d in range(t.dim()))] = 1
        mask *= default_mask.to(dtype=mask.dtype)
        return mask


class RandomStructured(_Structured):
    """Prunes `amount` whole channels along `dim`, chosen at random."""

    def _keep(self, t: Tensor, size: int, k: int):
        def keep():
            prob = ops.rand(size)
            return prob > ops.kthvalue(prob, k).values
        return keep

    @classmethod
    def apply(cls, module: Module, name: str, amount: int | float, dim: int = -1):
        return super().apply(module, name, amount=amount, dim=dim)


class LnStructured(_Structured):
    """Prunes the `amount` channels along `dim` of smallest `n`-norm."""

    def __init__(self, amount: int | float, n, dim: int = -1) -> None:
        super().__init__(amount, dim)
        self.n = n

    def _keep(self, t: Tensor, size: int, k: int):
        norm = _compute_norm(t.detach(), self.n, self.dim)    # (checks n even when k is 0)
        return lambda: ops.tensor(topk_set(norm.numpy(), size - k, largest=True))

    @classmethod
    def apply(cls, module: Module, name: str, amount: int | float, n, dim: int,
              importance_scores: Tensor | None = None):
        return super().apply(module, name, amount=amount, n=n, dim=dim, importance_scores=importance_scores)


class CustomFromMask(BasePruningMethod):
    """Prunes where the given `mask` is zero."""

    PRUNING_TYPE = "global"

    def __init__(self, mask: Tensor) -> None:
        self.mask = mask

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        if default_mask.shape != self.mask.shape:
            raise AssertionError(f"default_mask shape {default_mask.shape} must match self.mask shape "
                                 f"{self.mask.shape}")
        return default_mask * self.mask.to(dtype=default_mask.dtype)

    @classmethod
    def apply(cls, module: Module, name: str, mask: Tensor):
        return super().apply(module, name, mask=mask)


def identity(module: Module, name: str) -> Module:
    """Prune nothing, but set up ``<name>_orig``, ``<name>_mask`` and the hook."""
    Identity.apply(module, name)
    return module


def random_unstructured(module: Module, name: str, amount: int | float) -> Module:
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module: Module, name: str, amount: int | float,
                    importance_scores: Tensor | None = None) -> Module:
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module: Module, name: str, amount: int | float, dim: int) -> Module:
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(module: Module, name: str, amount: int | float, n, dim: int,
                  importance_scores: Tensor | None = None) -> Module:
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def custom_from_mask(module: Module, name: str, mask: Tensor) -> Module:
    CustomFromMask.apply(module, name, mask)
    return module


def global_unstructured(parameters, pruning_method, importance_scores: dict | None = None, **kwargs) -> None:
    """Prune the (module, name) pairs in `parameters` together: `pruning_method` (an
    unstructured method class, built with `kwargs`) chooses over all their entries at once."""
    from . import parameters_to_vector
    if not isinstance(parameters, Iterable):
        raise TypeError("global_unstructured(): parameters is not an Iterable")
    importance_scores = importance_scores if importance_scores is not None else {}
    if not isinstance(importance_scores, dict):
        raise TypeError("global_unstructured(): importance_scores must be of type dict")
    scores = parameters_to_vector([importance_scores.get((m, n), getattr(m, n)) for m, n in parameters])
    default_mask = parameters_to_vector([getattr(m, n + "_mask", ops.ones_like(getattr(m, n)))
                                         for m, n in parameters])
    container = PruningContainer()
    container._tensor_name = "temp"
    method = pruning_method(**kwargs)
    method._tensor_name = "temp"
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError(f'Only "unstructured" PRUNING_TYPE supported for the `pruning_method`. Found '
                        f"method {pruning_method} of type {method.PRUNING_TYPE}")
    container.add_pruning_method(method)
    final_mask = container.compute_mask(scores, default_mask)
    start = 0
    for module, name in parameters:
        param = getattr(module, name)
        n = param.numel()
        custom_from_mask(module, name, mask=final_mask[start:start + n].view_as(param))
        start += n


def remove(module: Module, name: str) -> Module:
    """Make the pruning of ``module.<name>`` permanent and drop its hook."""
    for k, hook in module._forward_pre_hooks.items():
        if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"Parameter '{name}' of module {module} has to be pruned before pruning can be removed")


def is_pruned(module: Module) -> bool:
    """Whether `module` or a submodule has a pruning hook."""
    return any(isinstance(hook, BasePruningMethod)
               for _, sub in module.named_modules() for hook in sub._forward_pre_hooks.values())


# ---- amounts and dims, checked as PyTorch checks them
def _validate_pruning_amount_init(amount) -> None:
    if not isinstance(amount, numbers.Real):
        raise TypeError(f"Invalid type for amount: {amount}. Must be int or float.")
    if (isinstance(amount, numbers.Integral) and amount < 0) or (
            not isinstance(amount, numbers.Integral) and (float(amount) > 1.0 or float(amount) < 0.0)):
        raise ValueError(f"amount={amount} should either be a float in the range [0, 1] or a "
                         f"non-negative integer")


def _validate_pruning_amount(amount, tensor_size: int) -> None:
    if isinstance(amount, numbers.Integral) and amount > tensor_size:
        raise ValueError(f"amount={amount} should be smaller than the number of parameters to "
                         f"prune={tensor_size}")


def _validate_structured_pruning(t: Tensor) -> None:
    if len(t.shape) <= 1:
        raise ValueError(f"Structured pruning can only be applied to multidimensional tensors. Found "
                         f"tensor of shape {t.shape} with {len(t.shape)} dims")


def _compute_nparams_toprune(amount, tensor_size: int) -> int:
    return amount if isinstance(amount, numbers.Integral) else round(amount * tensor_size)


def _validate_pruning_dim(t: Tensor, dim: int) -> None:
    if dim >= t.dim():
        raise IndexError(f"Invalid index {dim} for tensor of size {t.shape}")


def _compute_norm(t: Tensor, n, dim: int) -> Tensor:
    dims = list(range(t.dim()))
    del dims[dim]
    return ops.norm(t, p=n, dim=dims)


def _scores(importance_scores, t: Tensor, what: str) -> Tensor:
    """`importance_scores`, checked to have `t`'s shape (PyTorch's AssertionError), or `t`."""
    if importance_scores is None:
        return t
    if importance_scores.shape != t.shape:
        raise AssertionError(f"importance_scores should have the same shape as {what}, got "
                             f"{importance_scores.shape} vs {t.shape}")
    return importance_scores
