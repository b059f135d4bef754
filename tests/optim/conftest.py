"""Helpers shared by the optimizer tests."""
import pytest


@pytest.fixture
def fused_launches(monkeypatch):
    """``watch(name, record)``: every call of ``tracejit.optim.fused.<name>`` (the fused
    update launchers) appends ``record(ps, kwargs)`` to the list it returns, then runs."""
    from tracejit.optim import fused

    def watch(name, record=lambda ps, kw: [p.size for p in ps]):
        calls = []
        real = getattr(fused, name)
        monkeypatch.setattr(fused, name, lambda ps, *a, **k: (calls.append(record(ps, k)), real(ps, *a, **k))[1])
        return calls
    return watch
