"""`Module`'s state dict: ``state_dict``, ``load_state_dict``, their hooks and extra state.

The walk is PyTorch's: each module saves (``_save_to_state_dict``) and loads
(``_load_from_state_dict``) its own entries, then its children's, with the pre- and
post-hooks of each around its part and ``_metadata`` (the version of every module) on the
dict, so a subclass that overrides one step or reads its version behaves as in PyTorch.
One difference: a ``load_state_dict`` that raises puts back every tensor it had already
copied, so bad input changes no parameter or buffer.
"""
from __future__ import annotations

import functools
from collections import OrderedDict, namedtuple
from collections.abc import Mapping
from typing import Any, Callable

from ..autograd.grad_mode import no_grad
from ..tensor import Tensor
from .module_hooks import EMPTY_HOOKS
from .parameter import Parameter


def _moved() -> None:
    """A buffer rebound in place of a setattr: a compiled module's guard looks again."""
    from .module import state_epoch
    state_epoch[0] += 1

__all__ = ["StateDict"]

_EXTRA_STATE = "_extra_state"


class _IncompatibleKeys(namedtuple("_IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class StateDict:
    """The state-dict methods `Module` inherits (the hook tables are made on first use)."""

    _state_dict_hooks = _state_dict_pre_hooks = EMPTY_HOOKS
    _load_state_dict_pre_hooks = _load_state_dict_post_hooks = EMPTY_HOOKS
    # the undo log of the load_state_dict running now: (module, name, tensor, old value)
    _undo: list | None = None

    # ---- hooks ------------------------------------------------------------------------------
    def register_state_dict_pre_hook(self, hook: Callable):
        """hook(module, prefix, keep_vars) -> None, run before this module saves its state."""
        return self._add_hook("_state_dict_pre_hooks", hook, False)

    def register_state_dict_post_hook(self, hook: Callable):
        """hook(module, state_dict, prefix, local_metadata) -> None, run after this module and
        its children saved their state; it may change `state_dict` in place."""
        hook._from_public_api = True
        return self._add_hook("_state_dict_hooks", hook, False)

    def _register_state_dict_hook(self, hook: Callable):
        """As ``register_state_dict_post_hook``, but a dict the hook returns replaces the state
        dict (at the module ``state_dict`` was called on)."""
        if getattr(hook, "_from_public_api", False):
            raise RuntimeError("Cannot register the same function as the state dict post hook that "
                               "was previously registered via register_state_dict_post_hook")
        return self._add_hook("_state_dict_hooks", hook, False)

    def register_load_state_dict_pre_hook(self, hook: Callable):
        """hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs) -> None, run before this module loads its entries."""
        return self._register_load_state_dict_pre_hook(hook, with_module=True)

    def _register_load_state_dict_pre_hook(self, hook: Callable, with_module: bool = False):
        if not callable(hook):
            raise TypeError(f"load_state_dict pre-hook: expected a callable, got {type(hook).__name__}")
        return self._add_hook("_load_state_dict_pre_hooks",
                              functools.partial(hook, self) if with_module else hook, False)

    def register_load_state_dict_post_hook(self, hook: Callable):
        """hook(module, incompatible_keys) -> None, run after this module and its children
        loaded; changing ``incompatible_keys``' lists in place changes what strict loading
        reports."""
        return self._add_hook("_load_state_dict_post_hooks", hook, False)

    # ---- extra state --------------------------------------------------------------------------
    def get_extra_state(self) -> Any:
        """Override (with ``set_extra_state``) to save any picklable object as the
        ``_extra_state`` entry of this module's state dict."""
        raise RuntimeError("get_extra_state is only called where a subclass overrides it")

    def set_extra_state(self, state: Any) -> None:
        """Override (with ``get_extra_state``) to take back what ``get_extra_state`` saved."""
        raise RuntimeError("set_extra_state is only called where a subclass overrides it")

    def _overrides(self, name: str) -> bool:
        return getattr(type(self), name) is not getattr(StateDict, name)

    # ---- saving -------------------------------------------------------------------------------
    def _save_to_state_dict(self, destination, prefix: str, keep_vars: bool) -> None:
        """This module's own parameters, persistent buffers and extra state into `destination`."""
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else b.detach()
        if self._overrides("get_extra_state"):
            destination[prefix + _EXTRA_STATE] = self.get_extra_state()

    def state_dict(self, destination=None, prefix: str = "", keep_vars: bool = False):
        """Parameters, persistent buffers and extra state by dotted name; tensors share memory
        with the module."""
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()
        local_metadata = dict(version=self._version)
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = local_metadata
        for hook in self._state_dict_pre_hooks.values():
            hook(self, prefix, keep_vars)
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        for hook in self._state_dict_hooks.values():
            result = hook(self, destination, prefix, local_metadata)
            if getattr(hook, "_from_public_api", False):
                if result is not None:
                    raise RuntimeError("state_dict post-hook must return None")
            elif result is not None:
                destination = result
        return destination

    # ---- loading ------------------------------------------------------------------------------
    def _load_from_state_dict(self, state_dict, prefix: str, local_metadata: dict, strict: bool,
                              missing_keys: list, unexpected_keys: list, error_msgs: list) -> None:
        """Load this module's own entries of `state_dict` (keys start with `prefix`); report
        missing and unexpected keys and errors in the lists."""
        for hook in self._load_state_dict_pre_hooks.values():
            hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
        local = {k: v for k, v in self._parameters.items() if v is not None}
        local.update((k, v) for k, v in self._buffers.items()
                     if v is not None and k not in self._non_persistent_buffers_set)
        assign = local_metadata.get("assign_to_params_buffers", False)
        for name, dst in local.items():
            key = prefix + name
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            src = state_dict[key]
            if not isinstance(src, Tensor):
                error_msgs.append(f'While copying the parameter named "{key}", expected a Tensor in '
                                  f"the state_dict, got {type(src).__name__}.")
                continue
            if dst.ndim == 0 and tuple(src.shape) == (1,):   # a 1-element tensor of old checkpoints
                src = src[0]
            if tuple(src.shape) != tuple(dst.shape):
                error_msgs.append(f"size mismatch for {key}: copying a param with shape "
                                  f"{tuple(src.shape)} from checkpoint, the shape in current model "
                                  f"is {tuple(dst.shape)}.")
                continue
            self._load_one(name, dst, src, assign)
        extra = prefix + _EXTRA_STATE
        if self._overrides("set_extra_state"):
            if extra in state_dict:
                self.set_extra_state(state_dict[extra])
            elif strict:
                missing_keys.append(extra)
        elif strict and extra in state_dict:
            unexpected_keys.append(extra)
        if strict:
            for key in state_dict:
                if key.startswith(prefix) and key != extra:
                    head = key[len(prefix):].split(".", 1)
                    if (head[0] not in self._modules) if len(head) > 1 else (head[0] not in local):
                        unexpected_keys.append(key)

    def _load_one(self, name: str, dst: Tensor, src: Tensor, assign: bool) -> None:
        undo = StateDict._undo
        if undo is not None:   # what _put_back needs to undo this
            undo.append((self, name, dst, dst.data if assign else dst.detach().clone(), assign))
        with no_grad():
            if not assign:
                dst.copy_(src)
            elif isinstance(dst, Parameter):   # the same Parameter object: optimizers hold it
                dst.data = src.to(dst.device)
            else:
                self._buffers[name] = src
                _moved()

    def load_state_dict(self, state_dict: Mapping, strict: bool = True, assign: bool = False):
        """Copy tensors from `state_dict` into this module's parameters and buffers (with
        ``assign=True``, take the state dict's tensors). Returns ``(missing_keys,
        unexpected_keys)``; on an error nothing is changed."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"expected state_dict to be dict-like, got {type(state_dict).__name__}")
        missing, unexpected, errors = [], [], []
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(state_dict)
        if metadata is not None:
            state_dict._metadata = metadata

        def load(module, local_sd, prefix=""):
            local_metadata = {} if metadata is None else metadata.get(prefix[:-1], {})
            if assign:
                local_metadata["assign_to_params_buffers"] = assign
            module._load_from_state_dict(local_sd, prefix, local_metadata, True, missing, unexpected,
                                         errors)
            for name, child in module._modules.items():
                if child is not None:
                    cp = prefix + name + "."
                    load(child, {k: v for k, v in local_sd.items() if k.startswith(cp)}, cp)
            keys = _IncompatibleKeys(missing, unexpected)
            for hook in module._load_state_dict_post_hooks.values():
                if hook(module, keys) is not None:
                    raise AssertionError("a load_state_dict post-hook must change incompatible_keys "
                                         "in place and return None")

        outer, StateDict._undo = StateDict._undo, []
        try:
            load(self, state_dict)
            if strict:
                if unexpected:
                    errors.insert(0, "Unexpected key(s) in state_dict: "
                                  + ", ".join(f'"{k}"' for k in unexpected) + ". ")
                if missing:
                    errors.insert(0, "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ". ")
            if errors:
                raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                                   + "\n\t".join(errors))
        except BaseException:
            _put_back(StateDict._undo)
            raise
        else:
            if outer is not None:   # a load inside a load: the outer one may still fail
                outer.extend(StateDict._undo)
        finally:
            StateDict._undo = outer
        return _IncompatibleKeys(missing, unexpected)


def _put_back(undo: list) -> None:
    with no_grad():
        for module, name, dst, old, assigned in reversed(undo):
            if not assigned:
                dst.copy_(old)
            elif isinstance(dst, Parameter):
                dst.data = old
            else:
                module._buffers[name] = dst
                _moved()
