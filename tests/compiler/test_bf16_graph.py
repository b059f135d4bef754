"""bf16 in compiled graphs: the widening rewrite, and kernels that load and store bf16
words (compiler/bf16_graph.py, bf16math.py, Emitter.cast)."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit import bf16
from tracejit.compiler.bf16_graph import has_bf16, widen
from tracejit.compiler.emitter import NUMBA_TYPE


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
    assert NUMBA_TYPE["bfloat16"] == "uint16"


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
    x.view(np.uint32)[5:8] = [0x7F800001, 0xFF80FFFF, 0x7FBF8000]   # NaNs whose payload is low bits
    w = np.empty(x.size, np.uint16)
    down(x, w)
    np.testing.assert_array_equal(w, bf16.to_bfloat16(x))
    f = np.empty(x.size, np.float32)
    up(w, f)
    np.testing.assert_array_equal(f.view(np.uint32), bf16.to_float32(w).view(np.uint32))


def _widened_reads(bwd, n_in, n_saved):
    """The backward's widenings of saved bf16 values (what save_wide removes here)."""
    from tracejit.ops.elementwise_logic import CAST
    saved = set(bwd.inputs[n_in:n_in + n_saved])
    return [e for e in bwd.eqns if e.prim is CAST and e.inputs[0] in saved]


def test_backward_takes_the_forwards_widened_operands():
    from tracejit.compiler.bf16_graph import save_wide
    from tracejit.compiler.cpu.gemm import bf16 as bf16_gemm
    from tracejit.jit.autodiff import split
    from tracejit.jit.interpreter import interpret

    def f(x, w1, b1, w2):   # (products of bf16 operands: linear widens them itself)
        h = (x.bfloat16() @ w1.bfloat16().t() + b1.bfloat16()).tanh()
        return h @ w2.bfloat16().t()
    prev = bf16_gemm.force("float32")   # (the way whose products widen in the graph)
    try:
        g = _graph(f, ((6, 5), tj.float32), ((7, 5), tj.float32), ((7,), tj.float32),
                   ((3, 7), tj.float32))
        fwd, bwd, n = split(g, [False, True, True, True])
        ref_f, ref_b = widen(fwd), widen(bwd)
        new_f, new_b = save_wide(fwd, bwd, 4, 1, n)
    finally:
        bf16_gemm.force(prev)
    # the weights' transposes go over in float32 (their forward widening feeds a product);
    # the first product's result is widened for the bias add, recomputed in the backward
    saved = {tuple(v.aval.shape): v.aval.dtype for v in new_b.inputs[4:4 + n]}
    assert saved == {(5, 7): tj.float32, (6, 7): tj.bfloat16, (7, 3): tj.float32}
    assert len(_widened_reads(new_b, 4, n)) == 1 < len(_widened_reads(ref_b, 4, n))
    r = np.random.default_rng(2)
    args = [tj.tensor(r.standard_normal(s).astype(np.float32)) for s in ((6, 5), (7, 5), (7,), (3, 7))]
    ct = [tj.tensor(r.standard_normal((6, 3)).astype(np.float32), dtype=tj.bfloat16)]
    outs = []
    for fg, bg in ((ref_f, ref_b), (new_f, new_b)):
        fo = interpret(fg, args)
        outs.append([fo[0]] + interpret(bg, args + list(fo[1:]) + ct))
    assert outs[1][0].dtype is tj.bfloat16
    for a, b in zip(*outs):
        if a is not None:
            np.testing.assert_array_equal(a._data, b._data)


def _rewidened(g):
    """The graph's casts to float32 of a value it has just rounded to bf16."""
    from tracejit.ops.elementwise_logic import CAST
    rounded = {e.out for e in g.eqns if e.prim is CAST and e.params["dtype"] is tj.bfloat16}
    return [e for e in g.eqns if e.prim is CAST and e.params["dtype"] is tj.float32 and e.inputs[0] in rounded]


@pytest.mark.parametrize("op", ["relu", "max_pool", "exp"])
def test_a_selection_of_bf16_values_is_not_rounded_again(op):
    from tracejit.compiler.cpu.gemm import bf16 as bf16_gemm
    F = tj.nn.functional
    first, k = {"relu": (lambda a: a.relu(), 6), "exp": (lambda a: a.exp(), 6),
                "max_pool": (lambda a: F.max_pool2d(a.reshape(1, 1, 8, 6), 2).reshape(4, 3), 3)}[op]

    def f(a, b):
        return first(a).neg() @ b
    r = np.random.default_rng(3)
    a = tj.tensor(r.standard_normal((8, 6)).astype(np.float32), dtype=tj.bfloat16)
    b = tj.tensor(r.standard_normal((k, 5)).astype(np.float32), dtype=tj.bfloat16)
    prev = bf16_gemm.force("float32")   # (the way whose products widen in the graph)
    try:
        g = widen(_graph(f, ((8, 6), tj.bfloat16), ((k, 5), tj.bfloat16)))
        cf = tj.compile(f)
        cf(a, b)
        tj.compiler.wait()
        got, want = cf(a, b), f(a, b)
    finally:
        bf16_gemm.force(prev)
    # relu, neg and max pooling select bf16 values: the product reads them unrounded;
    # exp's result is rounded, and that rounding is kept
    assert bool(_rewidened(g)) == (op == "exp")
    np.testing.assert_array_equal(got._data, want._data)


def test_a_selection_of_integers_is_rounded(bf16_gemm_way):
    from tracejit.jit.interpreter import interpret

    def f(c, n, a):     # 257 has no bf16 form: where's result rounds it to 256
        return tj.where(c, n, a.relu()).neg() * 1
    c = tj.tensor([True, False, True])
    n = tj.tensor([257, 3, -1025])
    a = tj.tensor([1.5, -2.0, 3.0], dtype=tj.bfloat16)
    g = widen(_graph(f, ((3,), tj.bool), ((3,), tj.int64), ((3,), tj.bfloat16)))
    assert _rewidened(g)
    got, want = interpret(g, [c, n, a])[0], f(c, n, a)
    np.testing.assert_array_equal(want.float().numpy(), [-256.0, -0.0, 1024.0])
    np.testing.assert_array_equal(got._data, want._data)


@pytest.mark.parametrize("n", [3, 5000])
def test_where_of_integers_and_bf16_compiles_like_eager(n, bf16_gemm_way):
    """where(bool, int64, bf16) in a compiled kernel: the integers round to bf16 as eager's
    (257 -> 256), forward and gradient, in either operand order."""
    r = np.random.default_rng(5)
    c = tj.tensor(r.random(n) > 0.5)
    i = tj.tensor(r.integers(-2000, 2000, n))
    i._data[:3] = [257, 3, -1025]

    def f(c, i, a):
        return tj.where(c, i, a) * a + tj.where(c, a.exp(), i)
    outs = []
    for fn in (f, tj.compile(f)):
        a = tj.tensor(r.standard_normal(n).astype(np.float32), dtype=tj.bfloat16) if not outs else a0
        a = a.detach().requires_grad_()
        a0 = a.detach()
        y = fn(c, i, a)
        y.float().sum().backward()
        outs.append((y.detach(), a.grad))
    (ye, ge), (yc, gc) = outs
    assert ye.dtype is yc.dtype is tj.bfloat16 and gc.dtype is tj.bfloat16
    np.testing.assert_array_equal(yc._data, ye._data)
    np.testing.assert_array_equal(gc._data, ge._data)
    np.testing.assert_array_equal(tj.where(c, i, a0)[:3].float().numpy()[c.numpy()[:3]],
                                  np.array([256.0, 3.0, -1024.0])[c.numpy()[:3]])
