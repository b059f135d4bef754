"""Load numba's cached kernels without first loading numba's whole compiler.

Why: numba's ``Cache.load_overload`` calls ``target_context.refresh()``, which imports and
installs every lowering and typing registry (scipy too, when installed): 0.17 s of a warm
process's 0.38 s first call. Loading machine code needs only the CPU context, the NRT
symbols (``rtsys.initialize``) and the entry's ``reload_init`` hooks.

Safe: every numba path that compiles refreshes on its own, so the refresh is deferred to
the first compile, not lost. The replacement is installed only inside `deferred_refresh`,
under numba's compiler lock, so user code never sees it; if numba's ``Cache`` lacks the
methods we call, nothing is replaced.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

__all__ = ["deferred_refresh"]


def _replacement(cache_cls: type) -> Any:
    """numba's ``load_overload`` without the refresh, or None if `cache_cls` has changed shape."""
    if "load_overload" not in vars(cache_cls) or not all(
            callable(getattr(cache_cls, name, None))
            for name in ("_load_overload", "_guard_against_spurious_io_errors")):
        return None
    from numba.core.runtime import rtsys

    def load_overload(self: Any, sig: Any, target_context: Any) -> Any:
        rtsys.initialize(target_context)  # NRT symbols, which the refresh would install
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)
        return None  # the guard swallowed a spurious I/O error: a miss, as in numba

    load_overload.__qualname__ = "tracejit.deferred_refresh.load_overload"
    return load_overload


@contextlib.contextmanager
def deferred_refresh() -> Iterator[bool]:
    """Inside the block, numba cache loads skip the context refresh; yields whether they do."""
    from numba.core import caching
    from numba.core.compiler_lock import global_compiler_lock

    replacement = _replacement(caching.Cache)
    if replacement is None:
        yield False
        return
    with global_compiler_lock:
        original = vars(caching.Cache)["load_overload"]
        caching.Cache.load_overload = replacement
        try:
            yield True
        finally:
            caching.Cache.load_overload = original
