"""Rows groups (fusion.py, loopnest.py, rowpasses.py, codegen_cpu_rows.py): row composites
written with reductions over the last dim compile to one kernel, and agree with eager
and the IR interpreter, forward and backward, in float32 and float64, for rows of length
1 and odd lengths, strided inputs, all ``-inf`` rows, and sizes on both sides of the
plan's parallel threshold."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.fusion import Group, partition
from tracejit.compiler.loopnest import lower, operand_layouts
from tracejit.compiler.rowpasses import schedule
from differential import assert_compiled_matches, assert_valid_partition

from tests.cuda.kernel_cases import graph_of

pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def softmax_rows(x):
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(-1, keepdim=True)


def layer_norm_gelu(x, w, b):
    mu = x.mean(-1, keepdim=True)
    d = x - mu
    var = (d * d).mean(-1, keepdim=True)
    return F.gelu(d * (var + 1e-5).rsqrt() * w + b)


def log_softmax(x):
    return F.log_softmax(x, -1)


def rms_norm(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, 1e-6)


def cross_entropy_rows(x, onehot):
    # the logsumexp rows, the picked logit as a row sum, the mean over rows
    return (tj.logsumexp(x, -1, keepdim=True) - (x * onehot).sum(-1, keepdim=True)).mean()


def _train(cf):
    prog = cf._entries[-1].executor
    return next(iter(prog._train.values()))


def _groups(plan):
    return [it for it in plan.items if isinstance(it, Group)]


def _rng():
    return np.random.default_rng(0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5, 1), (7, 33), (3, 4, 17), (64, 512)])
def test_softmax_and_layer_norm_rows_match_eager(dtype, shape):
    rng = _rng()
    x = tj.tensor(rng.standard_normal(shape).astype(dtype), requires_grad=True)
    w = tj.tensor(rng.standard_normal(shape[-1:]).astype(dtype), requires_grad=True)
    b = tj.tensor(rng.standard_normal(shape[-1:]).astype(dtype), requires_grad=True)
    assert_compiled_matches(softmax_rows, x)
    assert_compiled_matches(layer_norm_gelu, x, w, b)
    assert_compiled_matches(log_softmax, x)
    assert_compiled_matches(rms_norm, x, w)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_entropy_rows_match_eager(dtype):
    rng = _rng()
    x = tj.tensor(rng.standard_normal((9, 13)).astype(dtype), requires_grad=True)
    onehot = tj.tensor(np.eye(13, dtype=dtype)[rng.integers(0, 13, 9)])
    assert_compiled_matches(cross_entropy_rows, x, onehot)


def test_strided_rows_match_eager():
    rng = _rng()
    base = rng.standard_normal((33, 8)).astype(np.float32)
    x = tj.tensor(base, requires_grad=True)
    assert_compiled_matches(lambda t: softmax_rows(t.t()), x)
    assert_compiled_matches(lambda t: log_softmax(t.t()), x)


def test_all_masked_rows_give_nan_as_eager():
    x = np.random.default_rng(1).standard_normal((4, 9)).astype(np.float32)
    mask = np.zeros((4, 9), np.float32)
    mask[2] = -np.inf
    got = tj.compile(lambda a, m: softmax_rows(a + m))(tj.tensor(x), tj.tensor(mask)).numpy()
    assert np.isnan(got[2]).all()
    np.testing.assert_allclose(got[[0, 1, 3]].sum(-1), 1.0, rtol=1e-6)
    # log_softmax's logsumexp shifts an all -inf row by 0: -inf - -inf = nan, as eager
    ls = tj.compile(lambda a, m: log_softmax(a + m))(tj.tensor(x), tj.tensor(mask)).numpy()
    eager = log_softmax(tj.tensor(x) + tj.tensor(mask)).numpy()
    np.testing.assert_array_equal(np.isnan(ls), np.isnan(eager))


@pytest.mark.parametrize("rows", [4, 64])     # the serial twin, and the parallel variant
def test_max_rows_keep_nan_and_inf(rows):
    x = np.random.default_rng(2).standard_normal((rows, 512)).astype(np.float32)
    x[1, 100] = np.nan
    x[2, 7] = np.inf
    x[3] = -np.inf
    f = tj.compile(lambda a: tj.amax(a, -1, keepdim=True) + tj.amin(a, -1, keepdim=True) * a)
    got = f(tj.tensor(x)).numpy()
    ref = x.max(-1, keepdims=True) + x.min(-1, keepdims=True) * x
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_allclose(got[~np.isnan(ref)], ref[~np.isnan(ref)], rtol=1e-6)


def test_large_rows_run_the_parallel_variant(monkeypatch):
    # (the work rule made to say parallel on any thread count: codegen_cpu_rows)
    from tracejit.compiler import codegen_cpu_rows
    monkeypatch.setattr(codegen_cpu_rows, "parallel_elements_min", lambda nest, threads=0: 1 << 18)
    rng = _rng()
    x = tj.tensor(rng.standard_normal((512, 1024)).astype(np.float32), requires_grad=True)
    w = tj.tensor(rng.standard_normal(1024).astype(np.float32), requires_grad=True)
    b = tj.tensor(rng.standard_normal(1024).astype(np.float32), requires_grad=True)
    cf = assert_compiled_matches(layer_norm_gelu, x, w, b, interpreter=False)
    fwd, bwd, _ = _train(cf)
    # numba's parallel kernel, or a chunk kernel whose shares run on the runtime's threads
    # (codegen_chunks.paired): a share of the rows each
    src = "".join(fwd.kernel_sources())
    assert "prange(nrows)" in src or "for row in range(chunk_t * nrows // chunk_nt" in src, src
    # leading dims split per row (attention scores: batch x heads x rows)
    s = tj.tensor(rng.standard_normal((4, 8, 32, 33)).astype(np.float32), requires_grad=True)
    assert_compiled_matches(softmax_rows, s, interpreter=False)


def test_softmax_is_one_rows_kernel_forward_and_backward():
    x = tj.tensor(_rng().standard_normal((6, 10)).astype(np.float32), requires_grad=True)
    cf = assert_compiled_matches(softmax_rows, x)
    fwd, bwd, _ = _train(cf)
    for plan in (fwd, bwd):
        assert_valid_partition(plan.items, plan.graph)
        (g,) = _groups(plan)
        assert g.rows and all(e.prim.name in ("sum", "amax") for e in g.rows), plan.describe()
    # forward: the max, then the sum of exp(x - max): two passes, then the output's
    nest = lower(_groups(fwd)[0], operand_layouts(_groups(fwd)[0]))
    sched = schedule(nest)
    assert [p.folds for p in sched.passes] == [(0,), (1,), ()]
    # sums that read no other share one pass (LayerNorm's statistics in one sweep)
    def moments(a):
        mu = a.mean(-1, keepdim=True)
        return (a - mu) * ((a * a).mean(-1, keepdim=True) - mu * mu + 1e-5).rsqrt()
    cf = assert_compiled_matches(moments, x)
    fwd, bwd, _ = _train(cf)
    (g,) = _groups(fwd)
    assert [p.folds for p in schedule(lower(g, operand_layouts(g))).passes] == [(0, 1), ()]
    # the backward's two row sums (the second reads the first) are one rows group
    xs = [tj.tensor(_rng().standard_normal(s).astype(np.float32), requires_grad=True)
          for s in ((6, 10), (10,), (10,))]
    cf = assert_compiled_matches(layer_norm_gelu, *xs)
    fwd, bwd, _ = _train(cf)
    assert [len(g.rows) for g in _groups(bwd) if g.rows] == [2], bwd.describe()


def test_softmax_keeps_exp_for_its_last_pass():
    """The sum's pass stores exp(x - max) into the output; the last pass reads it back
    and divides: one exp per element (rowpasses `_kept`), not one per pass."""
    x = tj.tensor(_rng().standard_normal((6, 10)).astype(np.float32), requires_grad=True)
    cf = assert_compiled_matches(softmax_rows, x)
    fwd, _, _ = _train(cf)
    (g,) = _groups(fwd)
    nest = lower(g, operand_layouts(g))
    sched = schedule(nest)
    exp = next(st.name for st in nest.steps if st.prim.name == "exp")
    assert [[n for _, n in p.stash] for p in sched.passes] == [[], [exp], []]
    assert [n for _, n in sched.passes[-1].restore] == [exp]
    assert [st.prim.name for st in sched.passes[-1].steps] == ["div"]
    assert not any(p.stash or p.restore for p in schedule(nest, stash=False).passes)
    # LayerNorm's centred value is one subtraction: recomputed, not kept
    fwd, _, _ = _train(assert_compiled_matches(layer_norm_gelu, x, *[
        tj.tensor(np.ones(10, np.float32)) for _ in range(2)]))
    (g,) = [g for g in _groups(fwd) if g.rows]
    assert not any(p.stash for p in schedule(lower(g, operand_layouts(g))).passes)


def layer_norm_backward_by_hand(g, x):
    # its two row sums, dx, and the weight and bias gradients: sums over the rows
    d = x - x.mean(-1, keepdim=True)
    xh = d * ((d * d).mean(-1, keepdim=True) + 1e-5).rsqrt()
    dx = g - g.mean(-1, keepdim=True) - xh * (g * xh).mean(-1, keepdim=True)
    lead = tuple(range(x.ndim - 1))
    return dx, (g * xh).sum(lead, keepdim=True), g.sum(lead, keepdim=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5, 1), (1, 7), (130, 33), (3, 50, 17)])
def test_sums_over_the_rows_fold_in_the_rows_group(dtype, shape, monkeypatch):
    """Sums over every dim but the last (LayerNorm's weight and bias gradients) fold in the
    rows group's last pass into a partial row per block of rows, added in order at the end:
    one kernel, the same bits from its serial and parallel variants."""
    rng = _rng()
    g, x = (rng.standard_normal(shape).astype(dtype) * 3 for _ in range(2))
    (grp,) = _groups_of(layer_norm_backward_by_hand, g, x)
    assert grp.rows and [e.prim.name for e in grp.cols] == ["sum", "sum"]
    assert schedule(lower(grp, operand_layouts(grp))).passes[-1].cols == (0, 1)
    ref = [t.numpy() for t in layer_norm_backward_by_hand(tj.tensor(g), tj.tensor(x))]
    serial = [t.numpy() for t in tj.compile(layer_norm_backward_by_hand)(tj.tensor(g), tj.tensor(x))]
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for got, want in zip(serial, ref):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * shape[-2])
    from tracejit.compiler import codegen_cpu_rows
    monkeypatch.setattr(codegen_cpu_rows, "parallel_elements_min", lambda nest, threads=0: 1)
    par = tj.compile(layer_norm_backward_by_hand)(tj.tensor(g), tj.tensor(x))
    for a, b in zip(par, serial):
        np.testing.assert_array_equal(a.numpy(), b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float32_row_sums_fold_float32_blocks(dtype):
    """A float32 row sum adds SUM_BLOCK elements in float32 (full-width vector lanes),
    then each block into its float64 accumulator, as the flat sums do; float64 sums
    have no blocks. Long rows (three blocks) keep float32 precision against numpy."""
    from tracejit.compiler import codegen_cpu
    x = _rng().standard_normal((5, 700)).astype(dtype) * 100
    g = graph_of(softmax_rows, [x])
    (grp,) = [it for it in partition(g) if isinstance(it, Group)]
    src = codegen_cpu.generate(grp, operand_layouts(grp), parallel=True).source
    assert ("blk1 += " in src) == (dtype == np.float32)
    got = tj.compile(lambda a: a.sum(-1, keepdim=True) * a.amax(-1, keepdim=True))(tj.tensor(x)).numpy()
    ref = x.astype(np.float64).sum(-1, keepdims=True) * x.max(-1, keepdims=True)
    np.testing.assert_allclose(got, ref, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_lone_row_sum_stays_an_epilogue():
    # a group whose one row reduction nothing reads is the old epilogue form
    x = tj.tensor(_rng().standard_normal((6, 10)).astype(np.float32))
    cf = tj.trace(lambda a: (a * a).sum(-1, keepdim=True))
    with tj.no_grad():
        cf(x)
    (g,) = _groups(cf._entries[-1].executor.infer_plan())
    assert g.reduction is not None and not g.rows


def test_rows_kernels_run_parallel_from_their_work():
    from tracejit.compiler.codegen_cpu_rows import WAKE_WORK, parallel_work_min, runs_parallel
    (group,) = _groups_of(softmax_rows, np.zeros((4, 8), np.float32))
    nest = lower(group, operand_layouts(group))
    passes = len(schedule(nest).passes)
    assert passes == 3   # max, sum of exponentials, the outputs
    assert parallel_work_min(1) > 1 << 60   # one thread: never
    assert parallel_work_min(2) == 2 * WAKE_WORK
    assert parallel_work_min(4) == WAKE_WORK * 4 // 3
    least = -(-2 * WAKE_WORK // passes)   # elements from which 2 threads pay
    assert not runs_parallel(nest, least - 1, threads=2)
    assert runs_parallel(nest, least, threads=2)
    assert not runs_parallel(nest, 1 << 40, threads=1)


def _groups_of(fn, *args):
    return [it for it in partition(graph_of(fn, args)) if isinstance(it, Group)]


def test_plan_of_rows_is_the_same_under_any_load(monkeypatch):
    # A plan's source is cached on disk and names the variants it compiles: the count the
    # load policy holds while the compile workers run must not change it.
    from tracejit import threads
    from tracejit.compiler import codegen_cpu_rows
    from tracejit.compiler.plan import Plan
    graph = graph_of(softmax_rows, (np.zeros((512, 1024), np.float32),))
    sources = []
    for busy in (1, 4):
        monkeypatch.setattr(threads, "get_num_threads", lambda: busy)
        monkeypatch.setattr(codegen_cpu_rows, "get_num_threads", lambda: busy, raising=False)
        sources.append(Plan(graph, name="rows").source)
    assert sources[0] == sources[1]
