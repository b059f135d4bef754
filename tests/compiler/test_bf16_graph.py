"""bf16 in compiled graphs: the widening rewrite, and kernels that load and store bf16
words (compiler/bf16_graph.py, bf16math.py, Emitter.cast)."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit import bf16
from tracejit.compiler.bf16_graph import has_bf16, widen
from tracejit.compiler.emitter import NUMBA_TYPE, storage


def _graph(fn, *avals):
    from tracejit.jit.tracer import TraceContext
    from tracejit.ops.registry import Aval
    ctx = TraceContext()
    with ctx:
        ts = [ctx.new_input(Aval(s, d), f"x{i}") for i, (s, d) in enumerate(avals)]
        out = fn(*ts)
    return ctx.graph([ctx.atom(out)])


def test_widen_computes_in_float32_and_keeps_words_for_moves_and_products(bf16_gemm_way):
    g = _graph(lambda a, b: (a @ b.t()).exp().reshape(-1),
               ((4, 3), tj.bfloat16), ((5, 3), tj.bfloat16))
    assert has_bf16(g)
    w = widen(g)
    prims = [(e.prim.name, e.out.aval.dtype.name) for e in w.eqns]
    # the transpose and the reshape keep bf16; exp runs in float32 between casts; the
    # product keeps bf16 words where MKL's bf16 GEMM runs it, else it is widened too
    product = [p for p in prims if p[0].startswith("matmul")]
    assert product == [(product[0][0], "bfloat16" if bf16_gemm_way != "float32" else "float32")]
    i = prims.index(("exp", "float32"))
    assert prims[i - 1] == ("cast", "float32") and prims[i + 1] == ("cast", "bfloat16")
    assert prims[-1] == ("reshape", "bfloat16")
    assert not has_bf16(_graph(lambda a: a.exp(), ((3,), tj.float32)))


def test_kernel_storage_is_uint16():
    assert NUMBA_TYPE["bfloat16"] == "uint16" and storage("bfloat16") == "uint16"
    assert storage("float32") == "float32"


@pytest.mark.parametrize("n", [7, 5000])
def test_compiled_elementwise_chain_rounds_like_eager(n, bf16_gemm_way):
    r = np.random.default_rng(0)
    x = tj.tensor(r.standard_normal(n).astype(np.float32), dtype=tj.bfloat16)
    y = tj.tensor(r.standard_normal(n).astype(np.float32), dtype=tj.bfloat16)

    def f(a, b):
        return ((a * b + 1.5).tanh() - a).sigmoid()
    want = f(x, y)
    cf = tj.compile(f)
    cf(x, y)
    tj.compiler.wait()
    got = cf(x, y)
    assert got.dtype is tj.bfloat16 and cf.cache_stats()["tiers"] == ["compiled"]
    # each primitive rounds in eager code; the kernel, computing in float32 between a load
    # and a store, rounds wherever the graph has a cast: after every primitive too
    np.testing.assert_array_equal(got._data, want._data)


def test_kernel_conversions_are_numpys_bits():
    import numba
    from tracejit.compiler.bf16math import bf16_to_f32, f32_to_bf16

    @numba.njit
    def down(a, out):
        for i in range(a.size):
            out[i] = f32_to_bf16(a[i])

    @numba.njit
    def up(a, out):
        for i in range(a.size):
            out[i] = bf16_to_f32(a[i])
    r = np.random.default_rng(1)
    x = (r.standard_normal(20000) * np.exp(r.uniform(-80, 80, 20000))).astype(np.float32)
    x[:5] = [np.nan, -np.nan, np.inf, -np.inf, 3.3961514e38]   # (the last rounds up to inf)
    w = np.empty(x.size, np.uint16)
    down(x, w)
    np.testing.assert_array_equal(w, bf16.to_bfloat16(x))
    f = np.empty(x.size, np.float32)
    up(w, f)
    np.testing.assert_array_equal(f.view(np.uint32), bf16.to_float32(w).view(np.uint32))
