"""A compiled module forward that breaks the graph: its submodules compiled on their own.

torch.compile, at a graph break (``torch.nonzero``, a boolean mask's index), runs that
part in Python and still compiles the code around it, the submodules the forward calls
included. tracejit captures whole functions, so a module's forward that cannot be one
graph runs eagerly (jit/capture.py ``_break_to_eager``); `SubmoduleForwards` then gives
each submodule it calls a compiled forward of its own for the duration of the call, each
captured, guarded, made dynamic on a changing dim and broken further down the same way. A
Mixtral-style layer whose routing finds each expert's tokens by ``torch.where`` keeps
its experts' SwiGLU MLPs (forward and backward) compiled.

The compiled forwards are installed as the submodules' ``forward`` instance attributes
only while the broken forward runs, and never over one the user set (``Module.compile``);
containers without a forward of their own (``ModuleList``, ``ModuleDict``) are looked
through.
"""
from __future__ import annotations

from typing import Callable

__all__ = ["SubmoduleForwards"]


# a plain function's module arguments compiled at the most (each compiled forward is kept)
_MAX_ARG_MODULES = 8


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:   # (a cell not yet assigned)
        return False
    return True


class SubmoduleForwards:
    """Compiled forwards for the submodules of `module`, made on first use with
    `options` (``CompiledFunction``'s keyword arguments, as the broken forward's)."""

    def __init__(self, module, mode: str, options: dict, roots: dict | None = None):
        self._module = module
        self._mode = mode
        self._options = options
        self._roots = roots   # {name: module}: these modules themselves, not `module`'s children
        self._forwards: list | None = None   # [(submodule's __dict__, CompiledFunction, name)]
        self._seen: set = set()
        self._arg_modules = 0

    def _make(self) -> list:
        self._seen = {id(self._module)}
        return self._add(self._module, self._roots, [])

    def _add(self, module, roots: dict | None, out: list) -> list:
        """Append to `out` a compiled forward for each of `module`'s children (None: each
        module of `roots` itself), looking through containers; returns `out`."""
        from ..nn.module import Module
        from .compiled_module import CompiledModule, compiled_forward
        seen = self._seen

        def visit(m, prefix: str) -> None:
            for key, child in (m._modules if m is not None else roots).items():
                if child is None or id(child) in seen:
                    continue
                seen.add(id(child))
                if isinstance(child, CompiledModule) or "forward" in child.__dict__:
                    continue   # compiled already, or a forward the user set: left as it is
                if type(child).forward is Module.forward:   # a container: its members
                    visit(child, prefix + key + ".")
                    continue
                cf = compiled_forward(child, self._mode, self._options)
                cf._quiet_break = True   # (the enclosing forward's warning says why)
                out.append((child.__dict__, cf, prefix + key))
        visit(module, "")
        return out

    def _argument_modules(self, args, kwargs) -> None:
        """A plain function's module arguments (``step(model, x)``): compiled like the
        modules its code names, the first `_MAX_ARG_MODULES` distinct ones (each is kept)."""
        from ..nn.module import Module
        found = {f"argument {i}": a for i, a in enumerate(args) if isinstance(a, Module)}
        found.update((f"argument {k}", v) for k, v in kwargs.items() if isinstance(v, Module))
        new = {k: m for k, m in found.items() if id(m) not in self._seen}
        room = _MAX_ARG_MODULES - self._arg_modules
        if new and room > 0:
            new = dict(list(new.items())[:room])
            self._arg_modules += len(new)
            self._add(None, new, self._forwards)

    @classmethod
    def reached_by(cls, fn: Callable, mode: str, options: dict) -> "SubmoduleForwards":
        """For a plain function that broke the graph (a whole training step: ``loss.backward()``
        and ``opt.step()`` inside): the modules its code names (closure cells, globals, the
        attributes of the object a method is bound to) and the modules passed to it, each
        compiled on its own."""
        from ..nn.module import Module
        roots: dict = {}
        code = getattr(fn, "__code__", None)
        if code is not None:
            pairs = zip(code.co_freevars, fn.__closure__ or ())
            cells = {name: c.cell_contents for name, c in pairs if _filled(c)}
            glob = getattr(fn, "__globals__", {})
            for name in code.co_freevars + code.co_names:
                v = cells.get(name, glob.get(name))
                if isinstance(v, Module):
                    roots.setdefault(name, v)
        owner = getattr(fn, "__self__", None)
        if owner is not None and not isinstance(owner, Module):
            for name, v in vars(owner).items() if hasattr(owner, "__dict__") else ():
                if isinstance(v, Module):
                    roots.setdefault(name, v)
        return cls(None, mode, options, roots)

    def names_modules(self) -> bool:
        """Whether there is a module to compile before any call's arguments are seen."""
        return bool(self._roots) or self._module is not None

    def call(self, fn: Callable, *args, **kwargs):
        """``fn(*args, **kwargs)`` (the module's forward, eagerly) with every submodule call
        it makes running that submodule's compiled forward."""
        forwards = self._forwards
        if forwards is None:
            forwards = self._forwards = self._make()
        if self._module is None and (args or kwargs):
            self._argument_modules(args, kwargs)
        installed = []
        try:
            for d, cf, _ in forwards:
                if "forward" not in d:   # (a call nested in another: installed already)
                    d["forward"] = cf
                    installed.append(d)
            return fn(*args, **kwargs)
        finally:
            for d in installed:
                d.pop("forward", None)

    def stats(self) -> dict:
        """{submodule's name (as named_modules gives it): its forward's cache_stats()}, for
        those called so far."""
        return {name: cf.cache_stats() for _, cf, name in self._forwards or ()
                if cf._stats["misses"] or cf._stats["hits"] or cf._entries}
