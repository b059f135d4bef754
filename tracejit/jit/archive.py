"""``torch.jit.save`` and ``torch.jit.load`` for what ``trace`` and ``script`` made.

A TorchScript archive holds the model's code, to run without its Python source (or in
C++); tracejit's compiled modules are Python, so ``save`` writes the wrapped module
itself, pickled in ``torch.save``'s format, with how it was compiled (``trace`` or
``script``) and any ``_extra_files``; ``load`` unpickles it (its classes must be
importable, as for ``torch.load(weights_only=False)``) and compiles it the same way again.
A TorchScript archive written by PyTorch cannot be read here: the error says so.
"""
from __future__ import annotations

from typing import Optional

__all__ = ["save", "load"]

_MARK = "tracejit.jit archive"


def save(m, f, _extra_files: Optional[dict] = None) -> None:
    """Write `m` (a module or function ``trace``/``script`` returned) to `f` (a path or
    a binary file), with `_extra_files` (name -> str or bytes) beside it."""
    from ..serialization import save as _save
    from .compiled_module import CompiledModule
    from .function import CompiledFunction
    if isinstance(m, CompiledModule):
        target, mode = m._orig_mod, m.forward._mode
    elif isinstance(m, CompiledFunction):
        target, mode = m._fn, m._mode
    else:
        raise TypeError(f"jit.save: expected what jit.trace or jit.script returned, got "
                        f"{type(m).__name__} (use torch.save for a plain module)")
    _save({_MARK: 1, "mode": mode, "module": target, "extra_files": dict(_extra_files or {})}, f)


def load(f, map_location=None, _extra_files: Optional[dict] = None):
    """What `save` wrote to `f`, compiled again as it was (``trace`` or ``script``);
    `_extra_files`' keys are filled in from the archive's files of those names."""
    from ..serialization import load as _load
    from . import _decorate
    try:
        obj = _load(f, map_location=map_location, weights_only=False)
    except Exception as exc:   # noqa: BLE001  (a TorchScript archive, or no archive at all)
        raise RuntimeError(f"jit.load: {f!r} is not an archive jit.save wrote ({type(exc).__name__}: "
                           f"{exc}); TorchScript archives from PyTorch cannot be read") from exc
    if not (isinstance(obj, dict) and obj.get(_MARK) == 1):
        raise RuntimeError(f"jit.load: {f!r} holds no jit.save archive (torch.save's files load "
                           f"with torch.load)")
    if _extra_files is not None:
        for name in _extra_files:
            _extra_files[name] = obj["extra_files"].get(name, _extra_files[name])
    return _decorate(obj["mode"], obj["module"], {})
