"""Fixtures shared by the autocast tests."""
import pytest

from tracejit.ops import autocast as policy


@pytest.fixture
def cast_calls(monkeypatch):
    """The tensors autocast casts, in order: round_bf16 (the float32 way) and cast (others)."""
    from tracejit.ops import bf16_eager
    calls = []
    real_round, real_cast = bf16_eager.round_bf16, policy._CAST_OP
    monkeypatch.setattr(bf16_eager, "round_bf16", lambda t: calls.append(t) or real_round(t))
    monkeypatch.setattr(policy, "_CAST_OP", lambda t, d: calls.append(t) or real_cast(t, d))
    return calls
