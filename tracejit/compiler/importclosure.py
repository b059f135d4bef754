"""The tracejit modules a generated kernel's code depends on, and their hashes (for diskcache's key).

numba bakes every function a kernel calls into its cached machine code and checks only the
kernel's source file, so the key must change when any tracejit module whose code can end
up in the kernel changes: the modules its source imports and theirs, transitively
(`hashes`). Imports are read from source text, never by importing (that would import
numba), at any indentation; ``from P import a`` follows P's submodule ``a`` when there is
one, and P's ``__init__.py`` only for names that are not submodules.
"""
from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

__all__ = ["hashes", "closure", "module_path", "file_hash"]

# tracejit/ (this file is tracejit/compiler/importclosure.py)
_ROOT = Path(__file__).resolve().parent.parent

_IMPORT = re.compile(r"^[ \t]*import[ \t]+(tracejit(?:\.\w+)*)", re.MULTILINE)
_FROM = re.compile(r"^[ \t]*from[ \t]+(\.+|tracejit\b)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)",
                   re.MULTILINE)


def module_path(name: str) -> Path | None:
    """The source file of tracejit module `name` (a package's ``__init__.py``), or None."""
    return _path(_ROOT, name)


# cached: a first kernel's key walks a few hundred modules' imports, ~10,000 lookups of two
# file stats each (1 s of the first load's CPU, while the caller's steps wait on the GIL)
@functools.lru_cache(maxsize=None)
def _path(root: Path, name: str) -> Path | None:
    parts = name.split(".")
    if parts[0] != "tracejit":
        return None
    base = root.joinpath(*parts[1:])
    for path in (base.with_suffix(".py") if len(parts) > 1 else None, base / "__init__.py"):
        if path is not None and path.is_file():
            return path
    return None


@functools.lru_cache(maxsize=None)
def file_hash(name: str) -> str:
    """sha256 of module `name`'s source file; "?" when there is none (running the
    kernel's source will say so)."""
    path = module_path(name)
    if path is None:
        return "?"
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "?"


def _names(clause: str) -> list:
    """The imported names of ``import`` clause `clause` (``a, b as c`` or ``(a,\\n b)``)."""
    clause = re.sub(r"#[^\n]*", "", clause).strip("()\\ \t\n")
    return [part.split()[0] for part in clause.split(",") if part.strip()]


@functools.lru_cache(maxsize=None)
def _imports(name: str) -> tuple:
    """The tracejit modules module `name`'s source imports (directly)."""
    path = module_path(name)
    if path is None:
        return ()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeError):
        return ()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set(_IMPORT.findall(text))
    for dots, rest, clause in _FROM.findall(text):
        if dots == "tracejit":
            base = "tracejit" + rest
        else:
            parts = package.split(".")
            if len(dots) > 1:
                parts = parts[:len(parts) - (len(dots) - 1)]
            base = ".".join(parts + ([rest] if rest else []))
        path = module_path(base)
        whole = path is not None and path.name != "__init__.py"  # a module: its own file
        for n in _names(clause):
            if module_path(f"{base}.{n}") is not None:
                found.add(f"{base}.{n}")
            else:
                whole = True  # an attribute defined in `base` (a package's __init__.py)
        if whole:
            found.add(base)
    return tuple(sorted(m for m in found if module_path(m) is not None))


def closure(names) -> tuple:
    """`names` and every tracejit module reachable from them through imports, sorted."""
    seen: set = set()
    stack = [n for n in names if n.startswith("tracejit")]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(_imports(n))
    return tuple(sorted(seen))


def hashes(names) -> dict:
    """{module: sha256 of its source} for the `closure` of `names`."""
    return {n: file_hash(n) for n in closure(names)}
