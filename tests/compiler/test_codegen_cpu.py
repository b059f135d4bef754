"""The CPU renderer's loop shapes, seen through compiled functions: which form a
group gets, and that each form computes what eager does.

Values are compared with `assert_compiled_matches` (eager, compiled, IR interpreter,
gradients included); the forms are asserted on the rendered specs (``spec.form``, the
loop shape `codegen_cpu.loop_form` picked, and ``spec.nest``, the loop-nest description).
"""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from differential import assert_compiled_matches


pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _specs(cf) -> list:
    """Rendered specs of every kernel variant `cf`'s plans compiled (inference and training)."""
    out = []
    for entry in cf._entries:
        ex = entry.executor
        plans = [ex._infer] if ex._infer is not None else []
        for fwd, bwd, _ in ex._train.values():
            plans += [fwd] + ([bwd] if bwd is not None else [])
        for p in plans:
            out += p.kernel_specs()
    return out


def _forms(cf) -> set:
    return {s.form for s in _specs(cf)}


def _t(*shape, seed=0, grad=False):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return tj.tensor(a, requires_grad=grad)


def bias_grad_like(x, s, b):
    # (N, C) work with a per-row and a per-column operand, summed over the batch
    return ((x * s + b) ** 2).sum(dim=0)


# (N, C): C below, at and above the 256-column block, not a multiple of it; N*C above and
# below the parallel threshold (the serial twin has the same loops)
@pytest.mark.parametrize("n,c", [(5, 3), (7, 300), (64, 256), (40, 1000)])
def test_sum_over_leading_dim_matches_eager_and_uses_column_blocks(n, c):
    x, s, b = _t(n, c, grad=True), _t(n, 1, seed=1, grad=True), _t(c, seed=2, grad=True)
    cf = assert_compiled_matches(bias_grad_like, x, s, b)
    # the serial twin (small sizes) has the same loops with range for prange; the parallel
    # variant is a parfor kernel, or a paired chunk kernel (codegen_chunks.paired) ranging
    # over its share of the tasks
    blocks = [s for s in _specs(cf) if s.form == "column_blocks"]
    assert blocks, _forms(cf)
    for spec in blocks:
        red = spec.nest.reduction
        assert red.leading and red.kept == (1,) and red.dims == (0,)
        chunked = getattr(spec, "chunked", False)
        assert ("prange(" in spec.source) == (spec.parallel and not chunked)
        assert ("chunk_t" in spec.source) == chunked
    # the forward writes x*s+b per element while reducing: rows sliced, inner loop from 0
    assert any(s.nest.outputs for s in blocks)


def test_column_sum_over_many_rows_and_wide_rows_stays_accurate():
    """Row chunks, several float32 blocks of SUM_BLOCK rows per chunk, and more than one
    4096-column block: the sums match float64 within float32 rounding of the result."""
    from tracejit.compiler.codegen_cpu import COLUMN_BLOCK
    from tracejit.compiler.loopnest import SUM_BLOCK
    for n, c in [(8 * SUM_BLOCK + 37, 3), (9, COLUMN_BLOCK + 5)]:
        x = np.random.default_rng(n).standard_normal((n, c)).astype(np.float32) + np.float32(3.0)
        f = tj.trace(lambda a: (a * a).sum(dim=0))
        got = f(tj.tensor(x)).numpy()
        want = (x.astype(np.float64) ** 2).sum(axis=0)
        np.testing.assert_allclose(got, want, rtol=2e-7 * 4)
        (spec,) = [s for s in _specs(f) if s.nest.reduction is not None]
        assert spec.form == "column_blocks" and ("bacc" in spec.source) == (spec.nest.reduction.block_dtype is not None)


@pytest.mark.parametrize("op", ["sum", "amax", "amin", "mean"])
def test_reductions_over_several_leading_dims(op):
    x, b = _t(3, 4, 513, grad=op != "amax" and op != "amin"), _t(513, seed=1)

    def f(x, b):
        y = tj.tanh(x + b)
        return getattr(y, op)(dim=(0, 1)) if op != "mean" else y.mean(dim=(0, 1))
    cf = assert_compiled_matches(f, x, b)
    assert "column_blocks" in _forms(cf)


# Reductions with a kept dim inside a reduced one (BatchNorm1d's statistics of an (N, C, L)
# value, a mean over L of (N, L, C)): odd sizes, length-1 dims, several kept dims, a transposed operand,
# sizes on both sides of the parallel threshold
@pytest.mark.parametrize("shape, dims, op", [((7, 5, 3), (0, 2), "sum"), ((1, 9, 1), (0, 2), "sum"),
                                             ((130, 13, 11), (0, 2), "sum"), ((6, 4, 3, 7), (0, 1, 3), "amax"),
                                             ((70, 21, 13), (1,), "sum"), ((3, 4, 5, 6), (1, 3), "amax")])
def test_reductions_keeping_an_inner_dim_walk_memory_order(shape, dims, op):
    raw = _t(*(shape[:1] + shape[-1:] + shape[2:-1] + shape[1:2]), grad=op == "sum")
    w = _t(*((shape[1],) + (1,) * (len(shape) - 2)), seed=1, grad=op == "sum")

    def f(raw, w):
        y = tj.sigmoid(raw.transpose(1, -1) * w) + 0.5
        return getattr(y, op)(dim=dims), y * y
    cf = assert_compiled_matches(f, raw, w)
    specs = [s for s in _specs(cf) if s.form == "outer_chunks"]
    assert specs, _forms(cf)
    assert all(s.nest.reduction.dims[0] < s.nest.reduction.kept[-1] for s in specs)


def test_a_short_kept_last_dim_keeps_the_rows_form():
    # (a kept last dim of 3: its partial sums would be updated one by one)
    x = _t(9, 40, 3)
    f = tj.trace(lambda a: (a * 2.0).sum(1))
    np.testing.assert_allclose(f(x).numpy(), (x.numpy() * 2.0).sum(1), rtol=1e-5)
    assert {s.form for s in _specs(f)} == {"rows"}


@pytest.mark.parametrize("op", ["any", "all"])
def test_bool_reductions_over_the_leading_dim(op):
    x = _t(40, 300)
    f = tj.trace(lambda a: getattr(a > 0.5, op)(dim=0))
    got = f(x).numpy()
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, getattr(x.numpy() > 0.5, op)(axis=0))
    # any/all are one amax/amin over the bools along the leading dim, in column blocks
    (spec,) = [s for s in _specs(f) if s.nest.reduction is not None]
    assert spec.form == "column_blocks", spec.form
    assert spec.nest.reduction.acc_dtype == "bool"


def test_nan_and_inf_reach_their_column_only():
    x = np.random.default_rng(0).standard_normal((50, 600)).astype(np.float32)
    x[7, 3] = np.nan
    x[9, 500] = np.inf
    t = tj.tensor(x)
    f = tj.trace(lambda a: (a * 2.0).amax(dim=0))
    g = tj.trace(lambda a: (a * 2.0).sum(dim=0))
    mx, sm = f(t).numpy(), g(t).numpy()
    assert np.isnan(mx[3]) and mx[500] == np.inf and np.isnan(sm[3]) and sm[500] == np.inf
    others = np.ones(600, bool)
    others[[3, 500]] = False
    np.testing.assert_allclose(mx[others], (x * 2).max(axis=0)[others], rtol=1e-6)
    np.testing.assert_allclose(sm[others], (x * 2).astype(np.float64).sum(axis=0)[others],
                               rtol=1e-5, atol=1e-4)


def test_contiguous_broadcast_operands_are_typed_contiguous_strided_ones_are_not():
    x, s = _t(64, 512), _t(64, 1, seed=1)
    wide = _t(1024, seed=2)
    # no math call: strided operands are read in place (math kernels copy them instead)
    f = tj.trace(lambda x, s, b: tj.relu(x * s + b))
    contiguous = f(x, s, tj.tensor(wide.numpy()[:512].copy()))
    # the (512,) bias and the (64, 1) scale are 'ndc', typed 'C' (vectorizable), not 'A'
    assert {spec.nest.layouts for spec in _specs(f)} == {("flat", "ndc", "ndc")}
    src = _specs(f)[0].source
    assert "Array(float32, 1, 'C', readonly=True)" in src and "'A'" not in src
    strided = wide[::2]                                      # a (512,) view, stride 8 bytes
    assert not strided.numpy().flags.c_contiguous
    out = f(x, s, strided)
    want = np.maximum(x.numpy() * s.numpy() + wide.numpy()[::2], 0)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, atol=1e-6)
    assert ("flat", "ndc", "nd") in {spec.nest.layouts for spec in _specs(f)}  # a strided variant
    assert "'A'" in str(f.explain(x, s, strided))      # ... typed with any strides
    np.testing.assert_allclose(contiguous.numpy(), np.maximum(x.numpy() * s.numpy() + wide.numpy()[:512], 0),
                               rtol=1e-6, atol=1e-6)


def _innermost_loop(source: str) -> list:
    """The lines of the kernel function's innermost ``for`` loop body."""
    lines = source.split("def kernel(", 1)[1].splitlines()
    depth = [len(ln) - len(ln.lstrip()) for ln in lines]
    loops = [k for k, ln in enumerate(lines) if ln.lstrip().startswith("for ")]
    k = max(loops, key=lambda k: depth[k])
    body = []
    for ln, d in zip(lines[k + 1:], depth[k + 1:]):
        if ln.strip() and d <= depth[k]:
            break
        body.append(ln)
    return [lines[k]] + body


# Rank 13 (past MAX_NESTED_RANK): a map with a broadcast operand, a reduction over the last
# dim only, and one over middle dims; small sizes so only the serial twin runs.
@pytest.mark.parametrize("dims", [None, (12,), (3, 7)])
def test_deep_rank_loops_keep_divisions_out_of_the_innermost_loop(dims):
    from tracejit.compiler.codegen_cpu import MAX_NESTED_RANK
    shape = (2, 1, 3) + (1,) * 8 + (2, 3)
    assert len(shape) > MAX_NESTED_RANK
    x, y = _t(*shape, grad=True), _t(3, 1, 3, seed=1, grad=True)  # x is transposed (0, 12)

    def f(x, y):
        z = tj.exp(x * 0.5) * y[:, :, :, None, None, None, None, None, None, None, None, None, None]
        return z if dims is None else z.sum(dims)

    cf = assert_compiled_matches(f, x, y, prep=lambda x, y: (x.transpose(0, 12), y))
    deep = [s for s in _specs(cf) if s.form == "deep"]
    assert deep, _forms(cf)
    for spec in deep:
        # The last dim is a plain loop of its own: index division runs once per row, and
        # LLVM's vectorizer never sees a division chain (a rank-14 backward map took minutes
        # to compile with one).
        body = _innermost_loop(spec.source)
        assert body[0].lstrip().startswith("for i") and "range(d" in body[0], body
        assert not any("//" in ln or "%" in ln for ln in body[1:]), "\n".join(body)


def gelu_loss_like(x, y, z):
    # the GELU bench's loss: a flat blocked sum with three gradient outputs
    a = x * y + z
    return (0.5 * a * (1 + tj.tanh(0.7978846 * (a + 0.044715 * a ** 3)))).sum()


def _loss_and_grads(n):
    ins = [_t(n, seed=k, grad=True) for k in range(3)]
    f = tj.script(gelu_loss_like)
    loss = f(*ins)
    loss.backward()
    return f, loss.detach().numpy(), [t.grad.numpy().copy() for t in ins], ins


def test_large_flat_blocked_sums_give_the_loss_and_its_gradients():
    n = 1 << 20          # 3 inputs + 3 gradients of float32: 24 MiB, past the L2 caches
    f, loss, grads, ins = _loss_and_grads(n)
    assert any(s.form == "flat_blocked_sum" for s in _specs(f))
    # the values are the loss's and its gradients' (float64 reference)
    x, y, z = (t.detach().numpy().astype(np.float64) for t in ins)
    a = x * y + z
    u = 0.7978846 * (a + 0.044715 * a ** 3)
    t = np.tanh(u)
    want = (0.5 * a * (1 + t)).sum()
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)
    ga = 0.5 * (1 + t) + 0.5 * a * (1 - t * t) * 0.7978846 * (1 + 3 * 0.044715 * a * a)
    for g, w in zip(grads, (ga * y, ga * x, ga)):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


def test_smaller_blocked_sums_match_eager():
    # a size whose chunk kernel is parallel: the values are those of eager and the interpreter
    x, y, z = (_t(300_000, seed=k, grad=True) for k in range(3))
    cf = assert_compiled_matches(gelu_loss_like, x, y, z)
    assert any(s.form == "flat_blocked_sum" for s in _specs(cf))


def test_a_batch_of_one_spreads_the_parallel_loop_over_two_dims(thread_counts_back):
    # (1, C, H, W) in a nested map and in a sum keeping a dim inside the reduced one: a
    # parallel loop over the batch dim alone would keep every core but one idle
    x, b = _t(1, 8, 40, 60), _t(8, 40, 1, seed=1)
    f = tj.trace(lambda x, b: tj.relu(x.transpose(2, 3) * 2 + b.transpose(1, 2)))
    g = tj.trace(lambda x: (x.transpose(2, 3) * 2).sum(2))
    xt = x.numpy().transpose(0, 1, 3, 2) * 2
    sums = {}
    for n in (1, 2, 4):
        tj.set_num_threads(n)
        np.testing.assert_array_equal(f(x, b).numpy(), np.maximum(xt + b.numpy().transpose(0, 2, 1), 0))
        sums[n] = g(x).numpy()
        np.testing.assert_array_equal(sums[n], sums[1])
    np.testing.assert_allclose(sums[1], xt.astype(np.float64).sum(2), rtol=1e-5, atol=1e-5)
    par = [s for s in _specs(f) + _specs(g) if s.parallel]
    assert {s.form for s in par} == {"nested_map", "outer_chunks"}
    for s in par:
        assert "in prange(d0 * d1):" in s.source or "chunk_t * d0 * d1 // chunk_nt" in s.source, s.source
