"""The row-form kernels' call caching (compiler/cpu/kernels/row_forms.py): a call whose
kernel is still compiling plans once, and the calls until it is loaded reuse that plan."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from tracejit.compiler.cpu.kernels import row_forms  # noqa: E402
from tracejit.ops import softmax_prim  # noqa: E402


class _Compiling:
    """A kernel that stays unloaded for `pending` asks, then gives the real one's entry."""

    def __init__(self, real, pending: int):
        self.real, self.pending, self.asks = real, pending, 0

    def get(self):
        self.asks += 1
        return None if self.asks <= self.pending else self.real.get()


def test_a_compiling_kernel_is_planned_once(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")
    plans, kernels = [], []
    real_plan, real_kernel = row_forms._plan, row_forms._kernel

    def kernel(key, make):
        kernels.append(_Compiling(real_kernel(key, make), pending=4))
        return kernels[-1]

    def plan(*args):
        plans.append(args)
        return real_plan(*args)
    monkeypatch.setattr(row_forms, "_kernel", kernel)
    monkeypatch.setattr(row_forms, "_plan", plan)
    monkeypatch.setattr(row_forms, "_calls", {})
    monkeypatch.setattr(row_forms, "_waiting", {})
    x = np.random.default_rng(0).standard_normal((6, 37)).astype(np.float32)
    ref = softmax_prim._softmax_impl(np, x, dim=1)
    # four calls while the kernel compiles: the numpy form runs (None), one plan
    assert [row_forms.softmax(x, dim=1) for _ in range(4)] == [None] * 4
    assert len(plans) == 1 and len(kernels) == 1 and kernels[0].asks == 4
    # then it lands: the kernel's result, still from the one plan, and no plan after it
    for _ in range(3):
        y = row_forms.softmax(x, dim=1)
        assert y is not None
        np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-30)
    assert len(plans) == 1 and kernels[0].asks == 5 and not row_forms._waiting
    # another shape is another plan
    assert row_forms.softmax(x[:3], dim=1) is None and len(plans) == 2
