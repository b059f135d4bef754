"""A plan's compiled Python source, kept in the disk cache root for the next process (and
a disk entry's kernel module's: diskcache.py).

Compiling a planned program's source (0.1-0.6 M characters) was a quarter of a warm
start's planning. ``<cache root>/plans/<key>`` holds a sha256 of the rest of the file, then
marshal's bytes of the code; the key hashes the source and the Python build, so another
Python never reads it, and a damaged file is compiled again (and rewritten).
"""
from __future__ import annotations

import hashlib
import marshal
import os
import sys
import tempfile
import types

from . import cacheroot

__all__ = ["compiled", "DIR"]

DIR = "plans"


def compiled(source: str, filename: str) -> types.CodeType:
    """``compile(source, filename, "exec")``, read from the disk cache where a previous
    process compiled the same source."""
    root = cacheroot.root()
    if root is None:
        return compile(source, filename, "exec")
    path = os.path.join(root, DIR, hashlib.sha256(f"{sys.version}\n{source}".encode()).hexdigest())
    try:
        with open(path, "rb") as f:
            data = f.read()
        if hashlib.sha256(data[32:]).digest() == data[:32]:
            return _named(marshal.loads(data[32:]), filename)
    except (OSError, ValueError, EOFError, TypeError):
        pass
    code = compile(source, filename, "exec")
    tmp = None
    try:
        body = marshal.dumps(code)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
        with os.fdopen(fd, "wb") as f:
            f.write(hashlib.sha256(body).digest() + body)
        os.replace(tmp, path)   # (readers see the whole file or none)
    except (OSError, ValueError):
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return code


def _named(code: types.CodeType, filename: str) -> types.CodeType:
    """`code` and the code objects in it named after `filename` (this process's pseudo-file,
    which tracebacks and the plan's line map use)."""
    consts = tuple(_named(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)
