"""The CPU cast implementation between float32 and bf16 words against the numpy form."""
import numpy as np

import tracejit as tj
from tracejit.bf16 import to_bfloat16, to_float32
from tracejit.compiler.cpu import bf16_casts
from tracejit.ops.elementwise_logic import CAST


def _values(n):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)).astype(np.float32)
    x[:6] = [np.nan, -np.nan, np.inf, -np.inf, 3.4e38, -0.0]
    x[6:10] = np.array([0x3F808000, 0x3F818000, 0x3F80FFFF, 0x00008000], np.uint32).view(np.float32)
    return x


def test_rounding_matches_numpy_form_bit_for_bit():
    for n in (10, 5000, 100_003):
        x = _values(n)
        np.testing.assert_array_equal(bf16_casts.cast(x, tj.bfloat16), to_bfloat16(x))
        np.testing.assert_array_equal(CAST.run(np, x, dtype=tj.bfloat16), to_bfloat16(x))


def test_widening_is_exact_and_strided_views_keep_values():
    w = to_bfloat16(_values(64 * 300)).reshape(64, 300)
    for v in (w, w.T, w[:, ::3]):
        out = bf16_casts.cast(v, tj.float32)
        assert out.dtype == np.float32 and out.shape == v.shape
        np.testing.assert_array_equal(out.view(np.uint32), to_float32(v).view(np.uint32))


def test_checker_takes_only_float32_bf16_pairs():
    x = np.ones(8, np.float32)
    assert bf16_casts.converts(x, tj.bfloat16)
    assert bf16_casts.converts(to_bfloat16(x), tj.float32)
    assert not bf16_casts.converts(x.astype(np.float64), tj.bfloat16)
    assert not bf16_casts.converts(x, tj.float64)
    assert not bf16_casts.converts(to_bfloat16(x), tj.float64)


def test_eager_cast_round_trip_values():
    x = _values(20_000)
    t = tj.from_numpy(x).to(tj.bfloat16)
    back = t.float()._data
    np.testing.assert_array_equal(back.view(np.uint32), to_float32(to_bfloat16(x)).view(np.uint32))


def test_rounding_in_float32_is_the_widened_rounding_bit_for_bit():
    from tracejit import bf16
    from tracejit.compiler.cpu.gemm.bf16 import round_values
    assert bf16.FASTER[0] is round_values     # (registered by the CPU backend)
    for n in (10, 5000, 100_003):
        x = _values(n)
        want = to_float32(to_bfloat16(x)).view(np.uint32)
        for got in (round_values(x), bf16.round_values(x), round_values(x[::2].copy())):
            assert got.dtype == np.float32
        np.testing.assert_array_equal(round_values(x).view(np.uint32), want)
        np.testing.assert_array_equal(bf16.round_values(x.reshape(1, -1)).view(np.uint32), want.reshape(1, -1))
