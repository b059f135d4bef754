"""`Module`: the base class of layers and models, with PyTorch's semantics.

Assigning a `Parameter`, a `Module`, or (after ``register_buffer``) a Tensor to an
attribute registers it, so ``parameters()``, ``state_dict()``, ``to()`` and friends
find it by walking the tree. Parameters are never replaced, only updated in place
(``to()`` swaps the array inside the same Parameter object): the JIT and the
optimizers hold parameters by identity.
"""
from __future__ import annotations

import sys
from collections import OrderedDict
from typing import Callable, Iterator

from .. import dtypes as _dt
from ..autograd.grad_mode import no_grad
from ..device import as_device
from ..errors import explain_module_error
from ..formats import check_memory_format
from ..ops.eager import refuse_effect, trace_state as _trace_state
from ..tensor import Tensor
from .module_hooks import (GLOBAL_ALWAYS_CALLED, GLOBAL_BACKWARD, GLOBAL_BACKWARD_PRE, GLOBAL_FORWARD,
                           GLOBAL_FORWARD_PRE, GLOBAL_WITH_KWARGS, BackwardHooks, hook_inputs, hook_outputs,
                           run_always_called)
from .module_state import StateDict
from .parameter import Buffer, Parameter

__all__ = ["Module", "RemovableHandle"]

def _add_hook(hooks: dict, with_kwargs_ids: set, hook, prepend: bool, with_kwargs: bool) -> "RemovableHandle":
    h = RemovableHandle.add(hooks, hook, prepend)
    if with_kwargs:
        with_kwargs_ids.add(h.id)
    return h


def _hook_args_kwargs(res, hook) -> tuple:
    """A with_kwargs pre-hook's (args, kwargs) result, checked."""
    if not (isinstance(res, tuple) and len(res) == 2 and isinstance(res[1], dict)):
        raise RuntimeError(f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), "
                           f"but got {res!r} from {getattr(hook, '__qualname__', hook)}")
    args = res[0] if isinstance(res[0], tuple) else (res[0],)
    return args, res[1]


class RemovableHandle:
    """Returned by hook registration; ``remove()`` unregisters the hook."""

    _next_id = 0

    def __init__(self, hooks: dict):
        self._hooks = hooks
        self.id = RemovableHandle._next_id
        RemovableHandle._next_id += 1
        state_epoch[0] += 1   # (a compiled module looks at its hooks again)

    @classmethod
    def add(cls, hooks: OrderedDict, hook, prepend: bool = False) -> "RemovableHandle":
        """`hook` registered in the table `hooks` (first of all with `prepend`): its handle."""
        h = cls(hooks)
        hooks[h.id] = hook
        if prepend:
            hooks.move_to_end(h.id, last=False)
        return h

    def remove(self) -> None:
        self._hooks.pop(self.id, None)
        state_epoch[0] += 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


# Moved by every change of a module's attributes or registered state (setattr, delattr,
# register_*): a compiled module's guard (jit/compiled_module.py) looks at its module tree
# again only when this moved since it last looked.
state_epoch = [0]


def _addindent(s: str, n: int) -> str:
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    return lines[0] + "\n" + "\n".join(" " * n + line for line in lines[1:])


def _parse_to(args, kwargs):
    """-> (device or None, dtype or None) from the arguments of ``Module.to``."""
    dtype = kwargs.pop("dtype", None)
    dev = kwargs.pop("device", None)
    kwargs.pop("non_blocking", None)
    fmt = kwargs.pop("memory_format", None)
    check_memory_format(fmt, "to")
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, Tensor):
            dtype, dev = a.dtype, a.device
        elif isinstance(a, _dt.DType) or isinstance(a, type):
            dtype = a
        elif isinstance(a, str) and a.split(":")[0] not in ("cpu", "cuda"):
            dtype = a
        else:
            dev = a
    if dtype is not None:
        dtype = _dt.as_dtype(dtype)
        if not dtype.is_floating_point:
            raise TypeError(f"Module.to only accepts floating point dtypes, got {dtype}")
    return (as_device(dev) if dev is not None else None), dtype, fmt


def _capture_effects():
    """The effect log of the capture running now (the root trace's, for nested ones)."""
    ctx = _trace_state.tracer
    while getattr(ctx, "parent", None) is not None:
        ctx = ctx.parent
    return getattr(ctx, "effects", None) or _NO_EFFECTS


class _NoEffects:
    """Under tracers that keep no effect log (vmap's): note nothing."""

    def hook(self, *args) -> None:
        pass

    attribute_write = watch = watch_object = watch_function = watch_generator = hook


_NO_EFFECTS = _NoEffects()


class Module(BackwardHooks, StateDict):
    """Base class for all neural network modules; subclass it and define ``forward``."""

    training: bool
    _version = 1

    def __init__(self) -> None:
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_non_persistent_buffers_set"] = set()
        d["_modules"] = OrderedDict()
        d["_forward_hooks"] = OrderedDict()
        d["_forward_pre_hooks"] = OrderedDict()
        d["_forward_hooks_with_kwargs"] = set()       # ids of hooks taking the call's kwargs
        d["_forward_pre_hooks_with_kwargs"] = set()

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def __call__(self, *args, **kwargs):
        ran = 0   # forward hooks called (an always_call hook runs once, even if forward raises)
        try:
            pre = {**GLOBAL_FORWARD_PRE, **self._forward_pre_hooks} if GLOBAL_FORWARD_PRE else self._forward_pre_hooks
            if pre:
                for hid, hook in list(pre.items()):
                    if _trace_state.tracer is not None:
                        _capture_effects().watch_function(hook)
                    if hid in self._forward_pre_hooks_with_kwargs:
                        res = hook(self, args, kwargs)
                        if res is not None:
                            args, kwargs = _hook_args_kwargs(res, hook)
                            continue
                    else:
                        res = hook(self, args)
                    if res is not None:
                        args = res if isinstance(res, tuple) else (res,)
                    elif _trace_state.tracer is not None:   # run for its effect: not in a graph
                        _capture_effects().hook(self, hook, "pre-hook")
            call = None
            if self._backward_hooks or self._backward_pre_hooks or GLOBAL_BACKWARD or GLOBAL_BACKWARD_PRE:
                call, args = hook_inputs(self, args)
            if args and _trace_state.tracer is not None and getattr(type(args[0]), "numpy_stand_in", False) \
                    and type(self).__module__.startswith("tracejit."):
                # a numpy array argument given to a built-in layer: eagerly its TypeError
                raise args[0]._numpy(f"{type(self).__name__}'s input")
            try:
                out = self.forward(*args, **kwargs)
            except Exception as exc:
                explain_module_error(self, args, exc)
                raise
            post = self._forward_hooks if not GLOBAL_FORWARD else {**GLOBAL_FORWARD, **self._forward_hooks}
            if post:
                for hid, hook in list(post.items()):
                    ran += 1
                    if _trace_state.tracer is not None:
                        _capture_effects().watch_function(hook)
                    res = (hook(self, args, kwargs, out) if hid in self._forward_hooks_with_kwargs
                           or hid in GLOBAL_WITH_KWARGS else hook(self, args, out))
                    if res is not None:
                        out = res
                    elif _trace_state.tracer is not None:
                        _capture_effects().hook(self, hook, "hook")
            return out if call is None else hook_outputs(call, out)
        except Exception:
            if self._forward_hooks_always_called or GLOBAL_ALWAYS_CALLED:
                run_always_called(self, args, kwargs, ran)
            raise

    # Module.compile: installed by jit/compiled_module.py (the compiler is built on this module)

    # ---- registration -------------------------------------------------------------------
    def _check_init(self, what: str) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign {what} before Module.__init__() call "
                                 f"(call super().__init__() first in {type(self).__name__}.__init__)")

    def _check_name(self, name, kind: str, existing: dict) -> None:
        """A KeyError or TypeError unless `name` may name a new `kind` (or one in `existing`)."""
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string, got {type(name).__name__}")
        if "." in name:
            raise KeyError(f'{kind} name can\'t contain ".", got {name!r}')
        if name == "":
            raise KeyError(f'{kind} name can\'t be empty string ""')
        if hasattr(self, name) and name not in existing:
            raise KeyError(f"attribute {name!r} already exists")

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        self._check_init("parameters")
        self._check_name(name, "parameter", self._parameters)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter {name!r} "
                            f"(nn.Parameter or None required)")
        if param is not None and param.grad_fn is not None:
            raise ValueError(f"cannot assign non-leaf Tensor to parameter {name!r}")
        self._parameters[name] = param
        state_epoch[0] += 1

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        self._check_init("buffers")
        self._check_name(name, "buffer", self._buffers)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer {name!r} "
                            f"(Tensor or None required)")
        self._buffers[name] = tensor
        state_epoch[0] += 1
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module: "Module | None") -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._check_init("child modules")
        self._check_name(name, "module", self._modules)
        self._modules[name] = module
        state_epoch[0] += 1

    register_module = add_module

    def __setattr__(self, name: str, value) -> None:
        tracer = _trace_state.tracer
        if tracer is not None:
            if tracer.write_attribute(self, name, value):
                return  # a tensor or number set inside a compiled forward: each call writes it back
            if not isinstance(value, (Tensor, Module)) and self.__dict__.get(name, value) is not value:
                _capture_effects().attribute_write(self, name)   # Python state: jit/side_effects.py
        state_epoch[0] += 1
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Buffer):   # nn.Buffer(t, persistent=...): register t as a buffer
            self._check_init("buffers")
            self._remove_from(name, d, self._parameters, self._modules)
            self._buffers.pop(name, None)
            self.register_buffer(name, value.as_tensor(), value.persistent)
        elif isinstance(value, Parameter):
            self._check_init("parameters")
            self._remove_from(name, d, self._buffers, self._modules)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter {name!r} "
                                f"(nn.Parameter or None expected)")
            params[name] = None
        elif isinstance(value, Module):
            self._check_init("child modules")
            self._remove_from(name, d, self._parameters, self._buffers)
            self._modules[name] = value
        elif d.get("_modules") is not None and name in d["_modules"]:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module {name!r} "
                                f"(nn.Module or None expected)")
            d["_modules"][name] = None
        elif d.get("_buffers") is not None and name in d["_buffers"]:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer {name!r} "
                                f"(Tensor or None expected)")
            d["_buffers"][name] = value
        else:
            object.__setattr__(self, name, value)

    @staticmethod
    def _remove_from(name, d, *dicts) -> None:
        d.pop(name, None)
        for dd in dicts:
            dd.pop(name, None)

    def __getattr__(self, name: str):
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            group = d.get(key)
            if group is not None and name in group:
                return group[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        state_epoch[0] += 1
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            if name in d.get(key, ()):
                del d[key][name]
                d["_non_persistent_buffers_set"].discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        keys = list(super().__dir__()) + list(self._parameters) + list(self._buffers) + list(self._modules)
        return sorted(k for k in set(keys) if not k[0].isdigit())

    # ---- traversal -------------------------------------------------------------------------
    def named_modules(self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True):
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            yield from m.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator["Module"]:
        for _, m in self.named_children():
            yield m

    def _named_members(self, get, prefix: str, recurse: bool, remove_duplicate: bool = True):
        seen = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for k, v in get(m):
                if v is None or (remove_duplicate and id(v) in seen):
                    continue
                seen.add(id(v))
                yield mprefix + ("." if mprefix else "") + k, v

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members(lambda m: m._parameters.items(), prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members(lambda m: m._buffers.items(), prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target: str) -> "Module":
        if target == "":
            return self
        mod = self
        for i, item in enumerate(target.split(".")):
            sub = mod._modules.get(item)
            if sub is None:
                path = ".".join(target.split(".")[:i]) or "<root>"
                raise AttributeError(f"{type(mod).__name__} ({path}) has no submodule {item!r}")
            mod = sub
        return mod

    def set_submodule(self, target: str, module: "Module", strict: bool = False) -> None:
        """Put `module` at the dotted path `target`, replacing the submodule there; with
        ``strict=True`` there must be one to replace."""
        if target == "":
            raise ValueError("Cannot set the submodule without a target name!")
        if not isinstance(module, Module):
            raise ValueError(f"`module` is not an nn.Module, found {type(module).__name__}")
        parent_path, _, name = target.rpartition(".")
        parent = self.get_submodule(parent_path)
        if hasattr(parent, name):
            if not isinstance(getattr(parent, name), Module):
                raise AttributeError(f"`{name}` is not an nn.Module")
        elif strict:
            raise AttributeError(f"{parent._get_name()} has no attribute `{name}`")
        setattr(parent, name, module)

    def get_parameter(self, target: str) -> Parameter:
        return self._get_registered(target, "_parameters", "parameter")

    def get_buffer(self, target: str) -> Tensor:
        return self._get_registered(target, "_buffers", "buffer")

    def _get_registered(self, target: str, table: str, kind: str):
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        found = getattr(mod, table)
        if name not in found:
            raise AttributeError(f"{type(mod).__name__} has no {kind} {name!r}")
        return found[name]

    # ---- modes and bulk changes ---------------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        if not isinstance(mode, bool):
            raise ValueError(f"training mode is expected to be boolean, got {type(mode).__name__}")
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            _zero_grad(p, set_to_none)

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> "Module":
        """Apply `fn` to every parameter (in place: same Parameter objects), grad and buffer."""
        for m in (self.modules() if recurse else (self,)):
            for p in m._parameters.values():
                if p is None:
                    continue
                with no_grad():
                    new = fn(p)
                if new is not p:
                    p.data = new
                if p.grad is not None:
                    with no_grad():
                        g = fn(p.grad)
                    if g is not p.grad:
                        p.grad = g
            for k, b in m._buffers.items():
                if b is not None:
                    with no_grad():
                        m._buffers[k] = fn(b)
        state_epoch[0] += 1   # (buffers rebound: a compiled module's guard looks again)
        return self

    def to(self, *args, **kwargs) -> "Module":
        """``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(tensor)``: in place, returns self.

        dtype casts apply to floating-point parameters and buffers only, as in PyTorch;
        ``memory_format=`` lays out the 4-D and 5-D ones (``channels_last`` conv weights).
        """
        dev, dtype, fmt = _parse_to(args, dict(kwargs))

        def convert(t: Tensor) -> Tensor:
            kw = {}
            if dev is not None:
                kw["device"] = dev
            if dtype is not None and t.dtype.is_floating_point:
                kw["dtype"] = dtype
            if fmt is not None and t.ndim in (4, 5):
                kw["memory_format"] = fmt
            return t.to(**kw) if kw else t
        return self._apply(convert)

    def to_empty(self, *, device, recurse: bool = True) -> "Module":
        """Parameters and buffers (of submodules too, unless ``recurse=False``) replaced by
        uninitialized tensors of the same shapes and dtypes on `device`."""
        from ..ops import empty_like
        return self._apply(lambda t: empty_like(t, device=device), recurse)

    def cpu(self) -> "Module":
        return self.to("cpu")

    def share_memory(self) -> "Module":
        """Calls ``share_memory_`` on every tensor (tensors stay in this process's memory)."""
        for t in list(self.parameters()) + list(self.buffers()):
            t.share_memory_()
        return self

    def cuda(self, device=None) -> "Module":
        return self.to("cuda" if device is None else (f"cuda:{device}" if isinstance(device, int) else device))

    def float(self) -> "Module":
        return self.to(_dt.float32)

    def double(self) -> "Module":
        return self.to(_dt.float64)

    def half(self) -> "Module":
        return self.to(_dt.float16)

    def bfloat16(self) -> "Module":
        return self.to(_dt.bfloat16)

    def type(self, dst_type) -> "Module":
        """Every floating-point parameter and buffer cast to `dst_type`."""
        return self.to(dst_type)

    # ---- hooks -------------------------------------------------------------------------------------
    def register_forward_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """hook(module, args, output) -> new output or None, run after ``forward``;
        hook(module, args, kwargs, output) ``with_kwargs``; first of all with ``prepend``.
        ``always_call``: also when forward (or a hook before it) raises, with output None."""
        h = _add_hook(self._forward_hooks, self._forward_hooks_with_kwargs, hook, prepend, with_kwargs)
        if always_call:   # (the table of ids: a compiled wrapper's is its module's)
            self._hook_table("_forward_hooks_always_called")[h.id] = True
        return h

    def register_forward_pre_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False) -> RemovableHandle:
        """hook(module, args) -> new args or None, run before ``forward``; ``with_kwargs``,
        hook(module, args, kwargs) -> None or a new (args, kwargs) pair."""
        return _add_hook(self._forward_pre_hooks, self._forward_pre_hooks_with_kwargs, hook, prepend, with_kwargs)

    # ---- printing ----------------------------------------------------------------------------------
    # attributes `extra_repr` shows as name=value: layers whose repr is only their options
    _repr_fields: tuple = ()

    def extra_repr(self) -> str:
        return ", ".join(f"{name}={getattr(self, name)}" for name in self._repr_fields)

    def _get_name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        for key, m in self._modules.items():
            lines.append(f"({key}): " + _addindent(repr(m), 2))
        main = self._get_name() + "("
        if lines:
            if len(lines) == 1 and not self._modules:
                main += lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"


def layer_class(name: str, base: type, fn: Callable | None = None, **fields) -> type:
    """The layer class `name` of the calling module: `base` with class `fields`, and with `fn`
    as the op its forward calls (``_fn``), for layers that differ only in those."""
    if fn is not None:
        fields["_fn"] = staticmethod(fn)
    module = sys._getframe(1).f_globals["__name__"]
    return type(name, (base,), {"__module__": module, "__qualname__": name, **fields})


def _zero_grad(p: Tensor, set_to_none: bool) -> None:
    if p.grad is None:
        return
    if set_to_none:
        p.grad = None
        return
    refuse_effect("zero_grad(set_to_none=False) zeroes gradients in place")
    g = p.grad
    if g.grad_fn is not None:
        g.detach_()
    else:
        g.requires_grad_(False)
    g._data[...] = 0
    g._vbox[0] += 1
