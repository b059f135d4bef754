"""The bf16 GEMM (compiler/cpu/gemm/bf16.py), both ways, whatever this CPU has."""
from __future__ import annotations

import numpy as np
import pytest

from tracejit import bf16
from tracejit.compiler.cpu.gemm import bf16 as g


def _words(shape, seed):
    return bf16.to_bfloat16(np.random.default_rng(seed).standard_normal(shape))


def _reference(a, b):
    """The exact product of the bf16 values, rounded to bf16 once."""
    return bf16.to_bfloat16(bf16.to_float32(a).astype(np.float64) @ bf16.to_float32(b).astype(np.float64))


def _close_words(got, want):
    """Within one bf16 unit: float32 accumulation in another order may round the other bf16_gemm_way."""
    assert got.dtype == np.uint16 and got.shape == want.shape
    diff = np.abs(bf16.to_float32(got).astype(np.float64) - bf16.to_float32(want))
    ulp = np.abs(bf16.to_float32(want)) * 2.0 ** -7 + 1e-30
    assert (diff <= ulp).all(), f"{(diff > ulp).sum()} elements off by more than one bf16 unit"


@pytest.mark.parametrize("m,k,n", [(64, 48, 32), (5, 7, 3), (1, 300, 1), (129, 65, 257)])
def test_products_of_every_layout_match_the_exact_product(bf16_gemm_way, m, k, n):
    a, b = _words((m, k), 0), _words((k, n), 1)
    _close_words(g.matmul(a, b), _reference(a, b))
    at, bt = np.ascontiguousarray(a.T).T, np.ascontiguousarray(b.T).T     # column-major operands
    _close_words(g.matmul(at, bt), _reference(a, b))
    _close_words(g.matmul_nt(a, np.ascontiguousarray(b.T)), _reference(a, b))
    _close_words(g.matmul_tn(np.ascontiguousarray(a.T), b), _reference(a, b))
    _close_words(g.matmul(a[:, ::1], b[::1, :]), _reference(a, b))
    if k > 2:
        _close_words(g.matmul(a[:, ::2], b[::2, :]), _reference(a[:, ::2], b[::2, :]))   # strided


def test_batched_and_broadcast_products(bf16_gemm_way):
    a, b = _words((3, 4, 6), 2), _words((6, 5), 3)
    _close_words(g.matmul(a, b), _reference(a, b))
    b3 = _words((1, 6, 5), 4)
    _close_words(g.matmul(a, b3), _reference(a, b3))


def test_the_float32_way_is_the_rounded_sgemm():
    prev = g.force("float32")
    try:
        a, b = _words((33, 17), 5), _words((17, 9), 6)
        np.testing.assert_array_equal(g.matmul(a, b),
                                      bf16.to_bfloat16(np.matmul(bf16.to_float32(a), bf16.to_float32(b))))
    finally:
        g.force(prev)


def test_the_choice_follows_the_cpu_flags_and_the_switches(monkeypatch):
    monkeypatch.setenv("NUMBA_CPU_FEATURES", "+avx2,+fma,-avx512f")
    assert not g.has_bf16_units()          # an AVX2 target: no bf16 units, whatever the host
    monkeypatch.setenv("NUMBA_CPU_FEATURES", "+avx512f,+avx512bf16")
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    assert not g.has_bf16_units()
    prev = g.force(None)
    try:
        monkeypatch.setenv("TRACEJIT_BF16_GEMM", "float32")
        assert g.choice() == "float32"
        g.force(None)
        monkeypatch.setenv("TRACEJIT_BF16_GEMM", "fast")
        with pytest.raises(ValueError, match="TRACEJIT_BF16_GEMM='fast'"):
            g.choice()
    finally:
        g.force(prev)
    with pytest.raises(ValueError, match="'sgemm'"):
        g.force("sgemm")


def test_mkl_is_chosen_only_on_an_intel_cpu_with_bf16_units(monkeypatch):
    for var in ("NUMBA_CPU_FEATURES", "MKL_ENABLE_INSTRUCTIONS", "TRACEJIT_BF16_GEMM"):
        monkeypatch.delenv(var, raising=False)
    info = {"flags": "fpu avx512f avx512_bf16", "vendor_id": "AuthenticAMD"}
    monkeypatch.setattr(g, "_cpuinfo", lambda field: info.get(field, ""))
    from tracejit.compiler.cpu.gemm import bf16_tile
    prev = g.force(None)
    try:
        monkeypatch.setattr(g, "mkl_gemm", lambda: print)   # (MKL as if installed)
        monkeypatch.setattr(bf16_tile, "address", lambda: None)      # (the kernel as if it failed)
        assert g.has_bf16_units() and not g.mkl_runs_units()   # MKL's generic path: slower
        assert g.choice() == "words" and g.on_words()
        monkeypatch.setattr(bf16_tile, "address", lambda: 1)         # (as if compiled here)
        monkeypatch.setattr(bf16_tile, "supported", lambda: True)
        g.force(None)
        assert g.choice() == "dot" and g.on_words()     # AMD's bf16 units: tracejit's kernel
        info["vendor_id"] = "GenuineIntel"
        g.force(None)
        assert g.mkl_runs_units() and g.choice() == "mkl"
        info["flags"] = "fpu avx512f"
        g.force(None)
        assert not g.dot_runs() and not g.mkl_runs_units()
        assert g.choice() == "float32" and not g.on_words()
        with pytest.raises(RuntimeError, match="avx512_bf16"):
            g.force("dot")
    finally:
        monkeypatch.undo()     # (this CPU's flags back before the previous way)
        g.force(prev)


def test_the_checker_takes_bf16_words_only():
    w = _words((2, 2), 7)
    assert g.takes(w, w)
    assert not g.takes(w.view(np.float16), w) and not g.takes(np.ones((2, 2), np.float32), w)


def test_the_cast_kernels_take_the_thread_count_coreshare_gives(monkeypatch):
    """The rounding, widening and rounding-in-float32 kernels set the threads the machine
    gives before each call, as every parallel kernel does, and keep numpy's bits."""
    from tracejit.compiler.cpu.runtime import coreshare
    if g._kernels() is None or not (coreshare.ENABLED or coreshare.workqueue_active()):
        pytest.skip("numba unusable here, or thread adaptation turned off")
    calls = []
    monkeypatch.setattr(coreshare, "adapt", lambda: calls.append(1) or 0)
    f = np.random.default_rng(0).standard_normal(3 * 4096).astype(np.float32)
    words = g.round_words(f)
    np.testing.assert_array_equal(words, bf16.to_bfloat16(f))
    np.testing.assert_array_equal(g.widen_words(words), bf16.to_float32(words))
    np.testing.assert_array_equal(g.round_values(f), bf16.to_float32(words))
    assert len(calls) == 3
