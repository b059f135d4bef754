"""Counting a pool launcher's launches in tests (a module of its own, not conftest: a test
that imports ``conftest`` by name gets whichever directory's conftest was imported first)."""
from __future__ import annotations


def count_launches(monkeypatch, module, name: str = "run_shares") -> list:
    """Wrap `module`'s pool launcher (tracejit/compiler/cpu/runtime/sharepool.py's ``run_shares`` or a name
    bound to it) so each launch's share count is recorded; returns that list."""
    launches = []
    run = getattr(module, name)

    def counted(fn, args, tail, nt):
        launches.append(nt)
        return run(fn, args, tail, nt)
    monkeypatch.setattr(module, name, counted)
    return launches
