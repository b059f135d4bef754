"""clamp's one-call numpy form (ops/clamp_kernels.py) must be bitwise clamp's select
``where(x < lo, lo, x)`` / ``where(x > hi, hi, x)``, special values included, at every
length and offset; where it cannot promise that, it declines (None) and clamp selects."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.ops import clamp_kernels as ck

SPECIAL = [1.5, -0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, -2.25, 1e-40, 6.0, -6.0, 1.0, -1.0]


def _select(x, lo, hi):
    dt = x.dtype.type
    out = x
    if lo is not None:
        out = np.where(out < lo, dt(lo), out)
    if hi is not None:
        out = np.where(out > hi, dt(hi), out)
    return out


def _bits(a):
    return np.asarray(a).reshape(-1).view(np.uint8)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("bounds", [(0, None), (0.0, None), (-0.0, None), (None, 0), (None, -0.0),
                                    (0, 6.0), (-1.0, 1), (float("-inf"), 0.0), (0, float("inf")),
                                    (2.0, -2.0)])
def test_bits_equal_select(dtype, bounds):
    lo, hi = bounds
    rng = np.random.default_rng(0)
    base = np.array(SPECIAL * 5400, dtype=dtype)
    rng.shuffle(base)
    for n in (1, 2, 7, 15, 16, 17, 31, 33, 64, 65, 100, 256, 300, 1031, 6400, 70000):
        for off in (0, 1, 5):
            x = base[off:off + n]
            got = ck.clamp_numpy(x, lo, hi)
            if got is None:
                assert not ck._keeps_operand(np.dtype(dtype))
                continue
            want = _select(x, lo, hi)
            assert got.dtype == want.dtype
            assert np.array_equal(_bits(got), _bits(want)), (n, off)


def test_declines_what_it_cannot_promise():
    x = np.array([0.5, -0.5, np.nan], np.float32)
    assert ck.clamp_numpy(x, 0.1) is None             # 0.1 is not a float32
    assert ck.clamp_numpy(x, float("nan")) is None    # maximum would return the nan bound
    assert ck.clamp_numpy(x, None, 2 ** 40 + 1) is None
    assert ck.clamp_numpy(np.array([1, -2]), 0) is None  # integers: clamp's own form
    assert ck.clamp_numpy(x, np.float32(0)) is None   # only Python numbers as bounds


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tensor_clamp_keeps_bits_strided_and_0d(dtype):
    x = np.array(SPECIAL * 4, dtype=dtype).reshape(4, -1)[:, ::2]   # not contiguous
    got = tj.tensor(x).clamp(min=0).numpy()
    assert np.array_equal(_bits(got), _bits(_select(x, 0, None)))
    for v in (-0.0, np.nan, -3.0):
        z = np.array(v, dtype)
        assert _bits(tj.tensor(z).clamp(min=0).numpy()).tobytes() == _bits(_select(z, 0, None)).tobytes()


def test_many_bounds_keep_at_most_eight_buffers(monkeypatch):
    # Dispatch plans hold their bound's kept view (clamp_fast), so kept buffers are never
    # dropped for new ones (that would leave plans holding any number of them): a ninth
    # bound is passed as a scalar, with the same result.
    from tracejit.ops import elementwise
    monkeypatch.setattr(ck, "_bound_arrays", {})
    monkeypatch.setattr(ck, "_bound_views", {})
    elementwise.CLAMP.plans.clear()
    x = tj.tensor(np.linspace(-1, 1, 6400, dtype=np.float32).reshape(64, 100))
    bounds = [i * 0.25 - 2 for i in range(20)]
    for b in bounds:
        for _ in range(2):   # the second call through the plan
            np.testing.assert_array_equal(x.clamp(min=b).numpy(), np.maximum(x.numpy(), np.float32(b)))
            np.testing.assert_array_equal(x.clamp(max=b).numpy(), np.minimum(x.numpy(), np.float32(b)))
    kept = {bits for _, bits in ck._bound_arrays}
    assert kept == {np.float32(b).tobytes() for b in bounds[:ck._MAX_BOUND_ARRAYS]}
    elementwise.CLAMP.plans.clear()   # (their views are of this test's buffers)
