"""Streaming (non-temporal) stores (tracejit/compiler/ntstores.py, ntstores_llvm.py) and
the kernels that use them (codegen_cpu's "blocked_map").

What is checked: the policy (which kernels have a streaming path, and from which size);
`stream_block` against plain assignment for every start alignment and length around a
cache line; generated kernels with streaming forced on give bitwise the results of the
plain kernels (odd lengths, outputs not starting on a line, several outputs, float64 and
bool outputs, strided inputs); and the switch that turns it off. Nothing here depends on
the instruction set (no assembly is read) or on timing.
"""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler import backends, codegen_cpu, loopnest, ntstores
from tracejit.ops.registry import REGISTRY
from tracejit.threads import PARALLEL_MIN


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    monkeypatch.delenv("TRACEJIT_STREAM_STORES", raising=False)


@pytest.fixture
def stream_all(monkeypatch, cache):
    """Every parallel flat map streams from one element on (a last-level cache of 1 byte)."""
    monkeypatch.setattr(ntstores, "_LLC", 1)


def _map_nest(op="mul", operands=("array", "array"), dtype="float32", out_dtype=None):
    return loopnest.lower_op(REGISTRY[op], list(operands), {}, dtype, out_dtype or dtype)


def _load(nest):
    spec = codegen_cpu.render(nest, True)
    return spec, backends.get("cpu").load(spec, "test_ntstores", True)


# ----------------------------------------------------------------------------- policy


def test_threshold_is_the_last_level_cache_over_the_bytes_per_element(monkeypatch, cache):
    monkeypatch.setattr(ntstores, "_LLC", 48 << 20)
    assert ntstores.stream_min(16) == 3 << 20          # 3 float32 inputs + 1 output
    assert ntstores.stream_min(12) == 4 << 20
    assert ntstores.stream_min(7) == -(-(48 << 20) // 7)  # rounded up
    monkeypatch.setenv("TRACEJIT_STREAM_STORES", "0")
    assert ntstores.stream_min(16) is None
    assert ntstores.llc_bytes() > 0


def test_large_flat_map_has_a_streaming_path_from_the_policy_size(monkeypatch, cache):
    monkeypatch.setattr(ntstores, "_LLC", 48 << 20)
    nest = _map_nest()                                   # out = a * b, float32: 12 B/element
    par, ser = codegen_cpu.render(nest, True), codegen_cpu.render(nest, False)
    assert par.form == "blocked_map" and ser.form == "map"
    assert f"stream = n >= {4 << 20}" in par.source
    assert "stream_block(out0, lo, buf0, hi - lo)" in par.source and "stack_buffer(out0, 1024)" in par.source and "stream_fence()" in par.source
    assert ntstores.IMPORT in par.source
    # the serial twin (small sizes) never streams
    assert "stream" not in ser.source
    # scalars do not count towards the bytes an element touches
    s = codegen_cpu.render(_map_nest(operands=("array", "scalar")), True)
    assert f"stream = n >= {6 << 20}" in s.source


def test_reductions_nested_loops_and_the_switch_keep_ordinary_stores(monkeypatch, cache):
    monkeypatch.setattr(ntstores, "_LLC", 1)
    x = tj.tensor(np.ones((128, 256), np.float32))
    b = tj.tensor(np.ones(256, np.float32))
    f = tj.trace(lambda x, b: (tj.tanh(x + b), (x * 2.0).sum()))
    f(x, b)
    forms = _forms(f)
    assert forms and "blocked_map" not in forms          # nested map and a blocked sum
    assert all("stream_block" not in s.source for s in _specs(f))
    monkeypatch.setenv("TRACEJIT_STREAM_STORES", "0")
    spec = codegen_cpu.render(_map_nest(), True)
    assert spec.form == "map" and "stream" not in spec.source


# ----------------------------------------------------------------------------- stream_block


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.bool_])
def test_stream_block_writes_exactly_the_range_for_every_alignment(dtype):
    from numba import njit

    from tracejit.compiler.ntstores_llvm import stream_block as block, stream_fence

    @njit(cache=False)
    def stream_block(dst, lo, buf, m):
        block(dst, lo, buf, m)
        stream_fence()
    per_line = 64 // np.dtype(dtype).itemsize
    rng = np.random.default_rng(0)
    base = np.empty(8 * per_line + 64, dtype)
    shift = (-base.ctypes.data % 64) // base.itemsize   # base[shift] starts a line
    buf = (rng.standard_normal(4 * per_line + 3) > 0 if dtype is np.bool_
           else rng.standard_normal(4 * per_line + 3).astype(dtype))
    for start in range(shift, shift + per_line + 1):
        for m in (0, 1, per_line - 1, per_line, per_line + 1, 2 * per_line + 5, len(buf)):
            sentinel = np.ones_like(base) if dtype is np.bool_ else np.full_like(base, -7)
            dst = sentinel.copy()
            stream_block(dst, start, buf, m)
            want = sentinel.copy()
            want[start:start + m] = buf[:m]
            assert np.array_equal(dst.view(np.uint8), want.view(np.uint8)), (start, m)


# ----------------------------------------------------------------------------- kernels


@pytest.mark.parametrize("n", [0, 1, 1000, 1024, 1025, 3 * 1024 + 17, 70001])
@pytest.mark.parametrize("offset", [0, 1, 5])
def test_streaming_kernel_is_bitwise_the_plain_one(monkeypatch, cache, n, offset):
    """Outputs starting anywhere (a view `offset` elements into a buffer), any length:
    the streaming variant and the plain flat map give the same bits, and nothing outside
    the output changes."""
    nest = _map_nest("tanh", ("array",))
    monkeypatch.setattr(ntstores, "_LLC", 1)
    spec_s, stream = _load(nest)
    monkeypatch.setenv("TRACEJIT_STREAM_STORES", "0")
    spec_p, plain = _load(nest)
    assert spec_s.form == "blocked_map" and spec_p.form == "map"
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    x[::97] = np.nan
    bufs = [np.full(n + 16, -3.0, np.float32) for _ in range(2)]
    for fn, buf in zip((stream, plain), bufs):
        fn(x, buf[offset:offset + n], n)
    assert np.array_equal(bufs[0].view(np.uint32), bufs[1].view(np.uint32))
    assert (bufs[0][:offset] == -3.0).all() and (bufs[0][offset + n:] == -3.0).all()


def test_compiled_multi_output_float64_and_bool_maps_match_plain(monkeypatch, stream_all):
    """Compiled end to end (a plan allocating its outputs): two outputs of different
    dtypes, float64 and bool, odd sizes over PARALLEL_MIN; and a transposed (strided)
    input, which takes the nested loops. Same bits as with streaming off."""
    rng = np.random.default_rng(1)
    n = PARALLEL_MIN + 12345
    a64 = rng.standard_normal(n)
    a32 = rng.standard_normal((181, 131)).astype(np.float32)

    def two(x):
        return tj.tanh(x) * 3.0, x > 0.25

    def strided(x):
        return tj.tanh(x.t() * 0.5) + 1.0
    runs = []
    for off in (False, True):
        if off:
            monkeypatch.setenv("TRACEJIT_STREAM_STORES", "0")
        f, g = tj.trace(two), tj.trace(strided)
        y, m = f(tj.tensor(a64))
        s = g(tj.tensor(a32))
        runs.append((y.numpy(), m.numpy(), s.numpy(), _forms(f)))
    (y1, m1, s1, forms1), (y0, m0, s0, forms0) = runs
    assert "blocked_map" in forms1 and "blocked_map" not in forms0
    assert y1.dtype == np.float64 and m1.dtype == np.bool_
    assert np.array_equal(y1.view(np.uint64), y0.view(np.uint64))
    assert np.array_equal(m1, m0) and np.array_equal(s1.view(np.uint32), s0.view(np.uint32))
    np.testing.assert_allclose(y1, np.tanh(a64) * 3.0, rtol=1e-14)
    assert np.array_equal(m1, a64 > 0.25)


def test_compiled_gelu_chain_streams_and_matches_eager(stream_all):
    rng = np.random.default_rng(2)
    xs = [tj.tensor(rng.standard_normal(PARALLEL_MIN * 2 + 3).astype(np.float32)) for _ in range(3)]

    def gelu(x, y, z):
        a = x * y + z
        return 0.5 * a * (1 + tj.tanh(0.79788456 * (a + 0.044715 * a ** 3)))
    f = tj.trace(gelu)
    got = f(*xs).numpy()
    assert "blocked_map" in _forms(f)
    np.testing.assert_allclose(got, gelu(*xs).numpy(), rtol=2e-6, atol=2e-6)


def _specs(f) -> list:
    out = []
    for e in f.entries:
        ex = e.executor
        plans = [ex._infer] if getattr(ex, "_infer", None) else []
        for fwd, bwd, _ in getattr(ex, "_train", {}).values():
            plans += [p for p in (fwd, bwd) if p is not None]
        out += [s for p in plans for k in p.kernels for s in k._specs.values()]
    return out


def _forms(f) -> list:
    return [s.form for s in _specs(f)]
