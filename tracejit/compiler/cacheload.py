"""Load numba's cached kernels without first loading numba's whole compiler.

Why: numba's ``Cache.load_overload`` calls ``target_context.refresh()`` before it reads
an entry. A refresh imports and installs every lowering and typing registry numba has
(cpython builtins, numpy arrays, linalg, random, typed containers, jitclass, ...; and
``numba.np.linalg`` imports scipy when it is installed). Measured in a clean venv
(numpy, numba, llvmlite only) that is 0.17 s of the 0.38 s first call of the two-layer
training step in a process whose kernels are all on disk; with scipy installed it
is 0.14-0.2 s more.

Loading machine code needs none of those registries. It needs the CPU context itself
(its codegen and C math symbols are made when the context is created), numba's
runtime (NRT) symbols, which ``rtsys.initialize`` installs (numba does that in the
refresh, so we do it here), and the entry's own ``reload_init`` hooks (the parallel
backend's thread pool), which numba runs while rebuilding the entry.

Why skipping is safe: every numba path that compiles refreshes on its own
(``CompilerBase.__init__`` refreshes both contexts; ``BaseContext.get_function``
refreshes on a miss), so the refresh is deferred to the first compile in the process,
which would have paid it anyway; it is not lost. The replacement only leaves the
refresh out and is installed only inside `deferred_refresh`, under numba's global
compiler lock (which ``Dispatcher.compile``, the caller of ``load_overload``, takes
too), so user numba code never sees it. If numba's ``Cache`` lacks the methods we
call (a future numba), nothing is replaced and loads refresh as before.
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
