"""compiler/cpu/gemm/template.py: every configuration of the GEMM template against numpy's
matmul over sampled shapes of 1..300 in each dim (1xK, Kx1, odd sizes, transposed and
batched operands), float32 and float64, the epilogues, and the same bits on 1, 2 and 4
shares of the output."""
import itertools

import numpy as np
import pytest

from tracejit.compiler import diskcache
from tracejit.compiler.cpu.gemm import template

pytest.importorskip("numba", reason="the template is numba code")

_mods: dict = {}


def _kernel(dtype: str, cfg):
    key = (dtype, cfg, template.vector_width(dtype))
    if key not in _mods:
        _mods[key] = diskcache.load_module(template.source(dtype, cfg), name_hint="test_gemm").kernel
    return _mods[key]


# (m, k, n): ones, a row, a column, odd sizes past every tile and vector, up to 300
SHAPES = [(1, 1, 1), (1, 300, 1), (1, 37, 300), (300, 1, 1), (300, 7, 300), (13, 300, 29),
          (64, 100, 10), (97, 61, 131), (8, 24, 48), (257, 33, 17), (3, 5, 2), (41, 256, 100)]


def _operands(rng, m, k, n, dtype, ta=False, tb=False, batch=()):
    a = rng.standard_normal(batch + ((k, m) if ta else (m, k))).astype(dtype)
    b = rng.standard_normal(batch + ((n, k) if tb else (k, n))).astype(dtype)
    return (a.swapaxes(-1, -2) if ta else a), (b.swapaxes(-1, -2) if tb else b)


def _close(got, want, dtype, k):
    tol = (1e-5 if dtype == "float32" else 1e-12) * max(1, k) ** 0.5 * 4
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 4)


def _check_config(dtype, cfg, shapes):
    fn = _kernel(dtype, cfg)
    rng = np.random.default_rng(1)
    for (m, k, n), (ta, tb) in itertools.product(shapes, [(False, False), (True, False), (False, True), (True, True)]):
        a, b = _operands(rng, m, k, n, dtype, ta, tb)
        want = a.astype(np.float64) @ b.astype(np.float64)
        _close(template.run(fn, cfg, a, b, threads=2), want, dtype, k)


@pytest.mark.parametrize("cfg", template.CONFIGS, ids=lambda c: c.name)
def test_every_configuration_equals_numpy_float32(cfg):
    _check_config("float32", cfg, SHAPES)


def test_two_vector_tiles_fill_a_32_column_output():
    """8 x 2 tiles on outputs of two vectors' columns and on edges past and short of them."""
    cfg = template.Config(8, 2)
    assert cfg in template.CONFIGS
    _check_config("float32", cfg, [(576, 448, 32), (37, 65, 32), (9, 17, 33), (13, 5, 31)])


@pytest.mark.parametrize("cfg", [template.CONFIGS[0], template.Config(4, 2, True, 2),
                                 template.Config(4, 4, dot=True), template.Config(3, 2, True, 2, True)],
                         ids=lambda c: c.name)
def test_configurations_equal_numpy_float64(cfg):
    _check_config("float64", cfg, SHAPES)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cfg", template.CONFIGS, ids=lambda c: c.name)
def test_every_configuration_over_a_sweep(dtype, cfg):
    """Every configuration and dtype over a wider sweep of sizes 1..300."""
    sizes = [1, 2, 3, 7, 15, 16, 17, 31, 33, 48, 64, 65, 127, 200, 300]
    rng = np.random.default_rng(2)
    shapes = [tuple(rng.choice(sizes, 3)) for _ in range(40)]
    _check_config(dtype, cfg, shapes)


@pytest.mark.parametrize("avx512", [True, False], ids=["wide", "narrow"])
def test_both_vector_widths(monkeypatch, avx512):
    """The source for either vector width runs anywhere (LLVM splits or joins vectors)."""
    monkeypatch.setattr(template, "_WIDE", avx512)
    _check_config("float32", template.CONFIGS[0], SHAPES[:8])


@pytest.mark.parametrize("cfg", [template.CONFIGS[0], template.Config(4, 4, dot=True)], ids=lambda c: c.name)
def test_batched_operands_and_a_shared_weight(cfg):
    rng = np.random.default_rng(3)
    fn = _kernel("float32", cfg)
    a, b = _operands(rng, 19, 40, 35, "float32", batch=(2, 3))
    _close(template.run(fn, cfg, a, b, threads=2), a @ b, "float32", 40)
    a, b = _operands(rng, 19, 40, 35, "float32", ta=True, tb=True, batch=(4,))
    _close(template.run(fn, cfg, a, b, threads=3), a @ b, "float32", 40)
    w = rng.standard_normal((40, 35)).astype(np.float32)
    _close(template.run(fn, cfg, a, w, threads=2), a @ w, "float32", 40)


@pytest.mark.parametrize("cfg", [template.CONFIGS[0], template.Config(8, 3, False, 2), template.Config(4, 5, dot=True),
                                 template.Config(2, 3, False, 2, True)], ids=lambda c: c.name)
def test_epilogues(cfg):
    """act(a @ b + bias + residual), the residual strided or broadcast."""
    rng = np.random.default_rng(4)
    fn = _kernel("float64", cfg)
    a, b = _operands(rng, 37, 50, 70, "float64")
    bias = rng.standard_normal(70)
    res = rng.standard_normal((70, 37)).T
    want = a @ b
    _close(template.run(fn, cfg, a, b, bias=bias), want + bias, "float64", 50)
    _close(template.run(fn, cfg, a, b, act="relu"), np.maximum(want, 0), "float64", 50)
    _close(template.run(fn, cfg, a, b, bias=bias, residual=res, act="relu", threads=2),
           np.maximum(want + bias + res, 0), "float64", 50)
    _close(template.run(fn, cfg, a, b, residual=bias[None, :]), want + bias, "float64", 50)


@pytest.mark.parametrize("cfg", [template.CONFIGS[0], template.Config(8, 3, False, 2)], ids=lambda c: c.name)
def test_a_launch_while_another_holds_the_threads_runs_every_share_here(cfg):
    """(K parts' sums included: one call of every share on this thread.)"""
    from tracejit.compiler.cpu.runtime import sharepool
    rng = np.random.default_rng(5)
    fn = _kernel("float32", cfg)
    a, b = _operands(rng, 64, 48, 80, "float32")
    want = template.run(fn, cfg, a, b, threads=1)
    assert sharepool.try_launch()
    try:
        for t in (2, 3):
            np.testing.assert_array_equal(template.run(fn, cfg, a, b, threads=t), want)
    finally:
        sharepool.end_launch()
    _close(want, a @ b, "float32", 48)


@pytest.mark.parametrize("cfg", [template.CONFIGS[0], template.Config(8, 3, False, 2), template.CONFIGS[4],
                                 template.Config(4, 4, dot=True), template.Config(4, 5, True, 1, True)],
                         ids=lambda c: c.name)
def test_thread_counts_give_the_same_bits(cfg):
    """The output is cut into shares by rows or columns of tiles; each element's sum is in
    the same order on 1, 2 or 4 shares."""
    rng = np.random.default_rng(5)
    fn = _kernel("float32", cfg)
    for m, k, n in [(100, 300, 70), (9, 120, 290), (1, 64, 1)]:
        a, b = _operands(rng, m, k, n, "float32")
        one = template.run(fn, cfg, a, b, threads=1)
        for t in (2, 4):
            np.testing.assert_array_equal(template.run(fn, cfg, a, b, threads=t), one)
            # one share on the calling thread (the serial twin) on any threads: the same bits
            np.testing.assert_array_equal(template.run(fn, cfg._replace(serial=True), a, b, threads=t), one)


def test_shares_follow_the_threads_not_a_fixed_count():
    assert template.shares_for(1000, 100, 4, template.Config(8, 3, serial=True)) == 1
    assert template.shares_for(4, 1000, 4, template.Config(4, 4, dot=True)) == 4   # 250 column tiles
    assert template.shares_for(4, 8, 4, template.Config(4, 4, dot=True)) == 2
    cfg = template.Config(8, 3)
    assert template.shares_for(1000, 100, 4, cfg) == 4
    assert template.shares_for(1000, 100, 1, cfg) == 1
    assert template.shares_for(16, 8, 16, cfg) == 2    # at most one share per unit of the cut side
    assert template.shares_for(1, 1, 64, cfg) == 1


def test_an_operand_of_negative_strides_is_declined():
    fn = _kernel("float32", template.CONFIGS[0])
    a = np.ones((4, 5), np.float32)[::-1]
    assert template.run(fn, template.CONFIGS[0], a, np.ones((5, 3), np.float32)) is None


def test_configurations_that_differ_in_launch_arguments_share_one_module():
    """``pack``, ``ksplit`` and ``serial`` are a launch's arguments: one compile serves
    them, and no module holds a parallel region (a launch of several shares runs the
    serial kernel once per share)."""
    base = template.Config(8, 3)
    for cfg in (template.Config(8, 3, True), template.Config(8, 3, False, 2), template.Config(8, 3, serial=True),
                template.Config(8, 3, True, 2, serial=True)):
        assert cfg.compiled == base
        assert template.source("float32", cfg) == template.source("float32", base)
        assert template.kernel_for("float32", cfg) is template.kernel_for("float32", base)
    assert template.Config(4, 5, dot=True).compiled == template.Config(4, 5, dot=True)
    modules = {template.source("float32", c) for c in template.CONFIGS}
    assert len(modules) == len({c.compiled for c in template.CONFIGS}) < len(template.CONFIGS)
    assert not any("parallel=True" in m or "prange" in m for m in modules)
