"""A module whose forward is compiled: the wrapper ``trace``/``script``/``compile`` return
for an ``nn.Module``, and ``Module.compile()`` (the same compiled forward, in place).

`CompiledModule` is an ``nn.Module`` that holds no state of its own: every attribute read
or write goes to the wrapped module, every ``nn.Module`` method runs on it (so a subclass's
own ``train`` or ``state_dict`` is the one that runs, and ``state_dict`` keys have no
prefix, unlike PyTorch's ``_orig_mod.``), indexing, ``len`` and iteration are the wrapped
module's, and a method that returns the wrapped module returns the wrapper instead, so
``model = model.eval()`` keeps the compiled forward. Only calling differs: the forward is
the `CompiledFunction`, with the wrapped module's forward hooks run around it.

Imported by ``tracejit.jit``, which installs `compile_module` as ``Module.compile``.
"""
from __future__ import annotations

import functools
import inspect

from ..errors import explain_module_error
from ..nn.module import Module
from ..nn.module_hooks import any_global_hooks
from .compile_api import compile_settings
from .function import CompiledFunction
from .module_guard import ModuleStateGuard

__all__ = ["CompiledModule", "wrap_module", "compile_module", "compiled_forward"]


class CompiledModule(Module):
    """A module whose forward is compiled; everything else is the wrapped module's."""

    def __init__(self, module: Module, forward: CompiledFunction):   # (no Module.__init__: no state)
        d = self.__dict__
        d["_orig_mod"] = module
        d["forward"] = forward
        # the wrapped module's own hook tables (not copies): registering on either is seen
        d["_forward_hooks"] = module._forward_hooks
        d["_forward_pre_hooks"] = module._forward_pre_hooks

    def __call__(self, *args, **kwargs):
        if self._forward_pre_hooks or self._forward_hooks or self._backward_hooks or self._backward_pre_hooks \
                or any_global_hooks():
            return Module.__call__(self, *args, **kwargs)   # the hooks, eagerly, around the forward
        try:
            return self.forward(*args, **kwargs)
        except Exception as exc:
            explain_module_error(self._orig_mod, args, exc)
            raise

    # the wrapped module's backward hook tables, as for the forward hooks above
    _backward_hooks = property(lambda self: self._orig_mod._backward_hooks)
    _backward_pre_hooks = property(lambda self: self._orig_mod._backward_pre_hooks)
    _forward_hooks_always_called = property(lambda self: self._orig_mod._forward_hooks_always_called)

    def _hook_table(self, name: str):
        return self._orig_mod._hook_table(name)

    def __getattr__(self, name: str):
        if name == "_orig_mod":   # (not set yet: a half-built object, as copy makes)
            raise AttributeError(name)
        orig = self._orig_mod
        attr = getattr(orig, name)
        if inspect.ismethod(attr) and attr.__self__ is orig:
            @functools.wraps(attr)
            def method(*args, **kwargs):
                out = attr(*args, **kwargs)
                return self if out is orig else out
            return method
        return attr

    def __setattr__(self, name: str, value) -> None:
        setattr(self._orig_mod, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._orig_mod, name)

    def __dir__(self):
        return sorted(set(dir(self._orig_mod)) | {"cache_stats", "explain", "compile", "_orig_mod"})

    # containers (Sequential, ModuleList, ModuleDict): the wrapped module's, or its TypeError
    def __getitem__(self, idx):
        return self._orig_mod[idx]

    def __setitem__(self, idx, value) -> None:
        self._orig_mod[idx] = value

    def __delitem__(self, idx) -> None:
        del self._orig_mod[idx]

    def __len__(self) -> int:
        return len(self._orig_mod)

    def __iter__(self):
        return iter(self._orig_mod)

    def __contains__(self, item) -> bool:
        return item in self._orig_mod

    def __bool__(self) -> bool:   # (a module is true even where __len__ is not defined)
        return True

    def cache_stats(self) -> dict:
        return self.forward.cache_stats()

    def explain(self, *args, **kwargs):
        return self.forward.explain(*args, **kwargs)

    def compile(self, *args, **kwargs) -> None:
        """Compile the forward for these example inputs now (`CompiledFunction.compile`);
        without inputs, nothing: the forward is compiled already."""
        if args or kwargs:
            self.forward.compile(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Compiled{self._orig_mod!r}"


def _delegate(name: str):
    def method(self, *args, **kwargs):
        orig = self.__dict__["_orig_mod"]
        out = getattr(orig, name)(*args, **kwargs)
        return self if out is orig else out
    method.__name__ = method.__qualname__ = name
    method.__doc__ = getattr(Module, name).__doc__
    return method


# Every public nn.Module method runs on the wrapped module (its class's override, if any).
for _name in {n for c in Module.__mro__[:-1] for n, v in vars(c).items() if callable(v)}:
    if not _name.startswith("_") and _name not in vars(CompiledModule) and _name != "forward":
        setattr(CompiledModule, _name, _delegate(_name))
# (private, but a parent's load_state_dict calls them on its children: the wrapped class's)
for _name in ("_get_name", "_overrides", "_load_from_state_dict"):
    setattr(CompiledModule, _name, _delegate(_name))
del _name


def compiled_forward(module: Module, mode: str, kw: dict) -> CompiledFunction:
    """A `CompiledFunction` of ``type(module).forward`` bound to `module`, guarded on the
    train/eval flags of its submodules, its parameters named by their state_dict names."""
    def named_tensors():
        names = {id(b): n for n, b in module.named_buffers()}
        names.update({id(p): n for n, p in module.named_parameters()})
        return names

    forward = type(module).forward
    cf = CompiledFunction(forward, mode=mode, bound_self=module, extra_guard=ModuleStateGuard(module),
                          tensor_names=named_tensors, **kw)
    cf.__name__ = type(module).__name__ + ".forward"
    cf.__qualname__ = type(module).__qualname__ + ".forward"
    return cf


def wrap_module(mode: str, module: Module, kw: dict) -> CompiledModule:
    if isinstance(module, CompiledModule):   # compiling a compiled module: its module, afresh
        module = module._orig_mod
    return CompiledModule(module, compiled_forward(module, mode, kw))


def compile_module(self: Module, *args, **kwargs) -> None:
    """Compile this module's forward in place (``torch.nn.Module.compile``): its calls run
    ``tracejit.compile``'s compiled forward from now on; parameters, state_dict, hooks and
    the module's type stay as they are. Keyword arguments are tracejit.compile's (mode,
    dynamic, fullgraph, backend, options); example inputs, when given, are captured and
    compiled now (``CompiledFunction.compile``)."""
    disable = kwargs.pop("disable", False)
    unknown = set(kwargs) - {"mode", "dynamic", "fullgraph", "backend", "options"}
    if unknown:
        raise TypeError(f"{type(self).__name__}.compile() got unexpected keyword arguments "
                        f"{sorted(unknown)}; it takes tracejit.compile's: mode, dynamic, "
                        f"fullgraph, backend, options, disable")
    capture, kw = compile_settings(**kwargs)
    if disable:
        return
    forward = compiled_forward(self, capture, kw)
    object.__setattr__(self, "forward", forward)
    if args:
        forward.compile(*args)


compile_module.__name__ = "compile"
compile_module.__qualname__ = "Module.compile"
Module.compile = compile_module
