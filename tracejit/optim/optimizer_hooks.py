"""The hooks an optimizer runs around ``step``, ``state_dict`` and ``load_state_dict``, as
PyTorch's ``register_step_pre_hook`` and friends (training frameworks log and clip there).

Every subclass's own ``step`` is wrapped once (`OptimizerHooks.__init_subclass__`); the
wrapper looks for hooks first and is one call otherwise. A ``step`` that calls
``super().step()`` runs the hooks once, in the outermost call.
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Callable

from ..nn.module import RemovableHandle

__all__ = ["OptimizerHooks", "register_optimizer_step_pre_hook", "register_optimizer_step_post_hook"]

_GLOBAL_PRE: OrderedDict = OrderedDict()
_GLOBAL_POST: OrderedDict = OrderedDict()


def register_optimizer_step_pre_hook(hook: Callable) -> RemovableHandle:
    """hook(optimizer, args, kwargs) -> None or new (args, kwargs), before every optimizer's step."""
    return RemovableHandle.add(_GLOBAL_PRE, hook)


def register_optimizer_step_post_hook(hook: Callable) -> RemovableHandle:
    """hook(optimizer, args, kwargs), after every optimizer's step."""
    return RemovableHandle.add(_GLOBAL_POST, hook)


def _hooked_step(step):
    @functools.wraps(step)
    def run(self, *args, **kwargs):
        d = self.__dict__
        d["_opt_called"] = True   # (an LR scheduler stepped before any optimizer step warns)
        pre, post = d.get("_step_pre_hooks"), d.get("_step_post_hooks")
        if not (pre or post or _GLOBAL_PRE or _GLOBAL_POST) or d.get("_in_step"):
            return step(self, *args, **kwargs)
        d["_in_step"] = True
        try:
            # the hooks see step's arguments with the optimizer first, as PyTorch's (its wrapper
            # hands them the bound call's args), and a pre-hook's new args include it too
            args = (self, *args)
            for hook in (*_GLOBAL_PRE.values(), *(pre or {}).values()):
                res = hook(self, args, kwargs)
                if res is not None:
                    if not (isinstance(res, tuple) and len(res) == 2):
                        raise RuntimeError(f"optimizer step pre-hook must return None or a tuple of "
                                           f"(new_args, new_kwargs), but got {res!r}")
                    args, kwargs = res
            out = step(self, *args[1:], **kwargs)
            # (post-hooks: the optimizer's own before the global ones, as PyTorch's)
            for hook in (*(post or {}).values(), *_GLOBAL_POST.values()):
                hook(self, args, kwargs)
            return out
        finally:
            d["_in_step"] = False
    return run


class OptimizerHooks:
    """Hook registration for `Optimizer` (its base class)."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "step" in cls.__dict__:
            cls.step = _hooked_step(cls.__dict__["step"])

    def _register(self, kind: str, hook: Callable, prepend: bool = False) -> RemovableHandle:
        return RemovableHandle.add(self.__dict__.setdefault(kind, OrderedDict()), hook, prepend)

    def register_step_pre_hook(self, hook: Callable) -> RemovableHandle:
        """hook(optimizer, args, kwargs) -> None or new (args, kwargs), before this one's step."""
        return self._register("_step_pre_hooks", hook)

    def register_step_post_hook(self, hook: Callable) -> RemovableHandle:
        """hook(optimizer, args, kwargs), after this one's step."""
        return self._register("_step_post_hooks", hook)

    def register_state_dict_pre_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """hook(optimizer), before ``state_dict`` builds its dict."""
        return self._register("_state_dict_pre_hooks", hook, prepend)

    def register_state_dict_post_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """hook(optimizer, state_dict) -> None or the dict to return instead."""
        return self._register("_state_dict_post_hooks", hook, prepend)

    def register_load_state_dict_pre_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """hook(optimizer, state_dict) -> None or the dict to load instead."""
        return self._register("_load_state_dict_pre_hooks", hook, prepend)

    def register_load_state_dict_post_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """hook(optimizer), after ``load_state_dict``."""
        return self._register("_load_state_dict_post_hooks", hook, prepend)

    def _run_state_hooks(self, kind: str, *args):
        """Run the hooks of `kind` on (self, *args); the last non-None result replaces
        args[0] (the state dict) for the hooks after it and the caller."""
        for hook in list(self.__dict__.get(kind, {}).values()):
            res = hook(self, *args)
            if res is not None and args:
                args = (res,) + args[1:]
        return args[0] if args else None
