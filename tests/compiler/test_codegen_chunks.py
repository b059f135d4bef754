"""Chunk kernels (tracejit/compiler/codegen_chunks.py, cshares.py): parallel CPU kernels
without numba's parfor pass, behind ``TRACEJIT_PARALLEL=chunks``.

Each loop shape the rewriting knows runs through a chunk kernel split over two shares
(whatever the machine's cores: the share count is forced) and matches eager; a shape it
does not know keeps its parfor kernel; a reduction folds its partials once.
"""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.cpu.runtime import sharepool
from tracejit.compiler import codegen_chunks, loopnest
from tracejit.compiler.cpu.runtime import cshares
from tracejit.ops.registry import REGISTRY

from launches import count_launches


@pytest.fixture
def chunks(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACEJIT_PARALLEL", "chunks")
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    monkeypatch.setattr(cshares, "pool_threads", lambda: 2)
    # every launch through sharepool.run_shares (a flat kernel's GIL-free pair: tests below)
    monkeypatch.setattr(cshares.CShares, "make", classmethod(lambda cls, g, fast_entry: None))
    return count_launches(monkeypatch, cshares, "_run_shares")


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


CASES = {
    # name: (function, input shapes); every output has at least PARALLEL_MIN elements
    "map": (lambda x: tj.tanh(x * 0.5) + x, [(128, 256)]),
    "nested_map": (lambda x, b: tj.tanh(x + b), [(128, 256), (256,)]),
    "rows": (lambda x: (x * x).sum(1), [(128, 256)]),
    "flat_blocked_sum": (lambda x: (x * 2.0).sum(), [(128, 256)]),
    "flat_reduce": (lambda x: tj.tanh(x).amax(), [(128, 256)]),
    # ReLU's gradient with the bias gradient (the Transformer's feed-forward backward)
    "column_blocks": (lambda g, x: (g * (x > 0.0)).sum(0), [(128, 600), (128, 600)]),
}
# tolerance of a sum's result against eager's (another order of additions)
_SUMS = {"flat_blocked_sum": dict(rtol=1e-5), "column_blocks": dict(rtol=2e-5, atol=1e-4)}


@pytest.mark.parametrize("name", list(CASES))
def test_chunk_kernel_matches_eager(chunks, monkeypatch, name):
    fn, shapes = CASES[name]
    args = [tj.tensor(_x(s, seed=k)) for k, s in enumerate(shapes)]
    want = fn(*args).numpy()
    f = tj.trace(fn)
    got = f(*args).numpy()
    assert chunks and all(nt == 2 for nt in chunks)  # ran split over two shares
    assert (name, True) in _forms(f)                   # through the loop shape named
    np.testing.assert_allclose(got, want, **_SUMS.get(name, dict(rtol=2e-6, atol=2e-6)))


COLUMN_CASES = {
    # name: (function, input); sums over every dim but the last, split into row chunks x
    # column blocks (codegen_cpu._leading_reduction) that 2 or 3 shares divide unevenly
    "bias_grad": (lambda x: (x + 1.0).sum(0), _x((128, 600), seed=3)),
    "odd_two_blocks": (lambda x: (x * x).sum(0), _x((67, 5001), seed=5)),
    "three_d": (lambda x: (x * 0.5).sum((0, 1)), _x((5, 13, 301), seed=6)),
    "float64_max": (lambda x: (x - 2.0).amax(0), _x((129, 257), seed=7).astype(np.float64)),
}


@pytest.mark.parametrize("name", list(COLUMN_CASES))
def test_column_sums_run_as_chunk_kernels_and_match_eager(chunks, monkeypatch, name):
    """A sum over every dim but the last keeps per-row-chunk partial sums: the launcher
    passes one array for all shares and the fold runs once after them, so every share
    count gives the same result, equal to eager (before, each share folded only its own
    rows)."""
    fn, a = COLUMN_CASES[name]
    x = tj.tensor(a)
    want = fn(x).numpy()
    f = tj.trace(fn)
    results = []
    for nt in (1, 2, 3):
        monkeypatch.setattr(cshares, "pool_threads", lambda nt=nt: nt)
        results.append(f(x).numpy())
    assert _forms(f) == [("column_blocks", True)]        # a chunk kernel
    assert chunks and set(chunks) == {2, 3}               # launched in 2 and 3 shares
    assert want.shape == results[0].shape
    for got in results:
        np.testing.assert_array_equal(got, results[0])   # the share count changes nothing
        np.testing.assert_allclose(got, want, rtol=2e-5 if a.dtype == np.float32 else 1e-12,
                                   atol=1e-4 if a.dtype == np.float32 else 0)


def test_column_partials_fit_every_row_count():
    """The launcher sizes a column sum's partials from the column count alone: enough for
    the row chunks the kernel picks for any row count."""
    from tracejit.compiler.codegen_cpu import PARTIAL_CAP, ROW_CHUNKS, column_partial_len
    for cols in (0, 1, 7, 1000, PARTIAL_CAP // 8, PARTIAL_CAP, 3 * PARTIAL_CAP):
        for rows in (0, 1, 5, 8, 1000):
            nrc = max(1, min(ROW_CHUNKS, rows, PARTIAL_CAP // max(cols, 1)))  # the kernel's
            assert nrc * cols <= column_partial_len(cols)


def _nest(form):
    """A nest of the given loop form, lowered as the eager path does for one op or as a
    compiled group (for the shapes the eager lowering does not make)."""
    if form == "map":
        return loopnest.lower_op(REGISTRY["tanh"], ["array"], {}, "float32", "float32")
    raise AssertionError(form)


def test_rewritten_source_has_no_prange_and_takes_the_share(monkeypatch):
    spec = codegen_chunks.render(_nest("map"))
    assert spec.chunked and spec.partial_dtype is None
    assert "prange" not in spec.source and "parallel=False, nogil=True" in spec.source
    assert "def kernel(in0, out0, n, chunk_t, chunk_nt):" in spec.source
    assert "np.uintp(chunk_i)" in spec.source


def test_shares_give_the_same_result_as_one(chunks, monkeypatch):
    """Chunk bounds do not depend on the share count: 1, 2 or 3 shares, the same sum."""
    x = tj.tensor(_x((300, 301), seed=3))
    f = tj.trace(lambda x: (x * 3.0).sum())
    results = []
    for nt in (1, 2, 3):
        monkeypatch.setattr(cshares, "pool_threads", lambda nt=nt: nt)
        results.append(float(f(x).numpy()))
    assert results[0] == results[1] == results[2]


def test_strided_full_reduction_folds_once_after_every_share(chunks, monkeypatch):
    """A full reduction over strided operands ("strided_full": one partial per index of
    the first dim, sized by that dim's argument): every share count gives the same sum."""
    x = tj.tensor(_x((257, 131), seed=4))
    f = tj.trace(lambda x: (x.t() * 2.0).sum())
    results = []
    for nt in (1, 2, 3):
        monkeypatch.setattr(cshares, "pool_threads", lambda nt=nt: nt)
        results.append(float(f(x).numpy()))
    assert ("strided_full", True) in _forms(f) and set(chunks) == {2, 3}
    assert results[0] == results[1] == results[2]
    np.testing.assert_allclose(results[0], (x.numpy().astype(np.float64) * 2.0).sum(), rtol=1e-5)


def test_unknown_loop_shape_keeps_its_parfor_kernel():
    """A nest deeper than codegen_cpu.MAX_NESTED_RANK ("deep") is not rewritten (checked on
    the rendering: compiling a rank-13 parfor kernel takes ~30 s)."""
    from tracejit import dtypes
    from tracejit.compiler.fusion import Group
    from tracejit.jit.ir import Eqn, Var
    from tracejit.ops.registry import Aval
    shape = (2,) * 12 + (4,)
    x = Var(Aval(shape, dtypes.as_dtype("float32")))
    out = Var(Aval(shape, dtypes.as_dtype("float32")))
    group = Group(0, shape, [Eqn(REGISTRY["tanh"], (x,), (out,), {})], None, [x], [out])
    nest = loopnest.lower(group, ("nd",), "kernel", sequential_sums=True)
    assert codegen_chunks.render_cpu(nest, True).form == "deep"
    assert codegen_chunks.render(nest) is None


def test_a_failing_share_raises_in_the_caller():
    def boom(*args):
        if args[-2] == 1:   # share 1 of 2 (runs on a pool thread)
            raise ValueError("share 1 failed")
    with pytest.raises(ValueError, match="share 1 failed"):
        cshares._run_shares(boom, (), (), 2)
    cshares._run_shares(lambda *a: None, (), (), 2)   # the pool still works


def _forms(f) -> list:
    """(loop form, chunked) of every rendered kernel variant of `f`."""
    return [(s.form, s.chunked)
            for e in f.entries for p in _plans(e.executor) for k in p.kernels
            for s in k._specs.values()]


def _plans(ex):
    plans = [ex._infer] if getattr(ex, "_infer", None) else []
    for fwd, bwd, _ in getattr(ex, "_train", {}).values():
        plans += [p for p in (fwd, bwd) if p is not None]
    return plans


def test_pool_threads_keep_no_reference_to_a_finished_launch():
    # A pool thread that held its last job's arguments kept the launch's arrays alive and
    # made the engine's exclusivity check (reference counts) depend on the share count.
    import sys
    out = np.zeros(8)
    before = sys.getrefcount(out)
    cshares._run_shares(lambda a, t, nt: None, (out,), (), 2)
    assert sys.getrefcount(out) == before


# ---------------------------------------------------------------- flat kernels' GIL-free pairs


def test_flat_chunk_kernels_carry_a_gil_free_pair(monkeypatch):
    """A flat kernel's chunk form comes with cshares' ``pack`` and ``share_entry`` over its
    arguments (a folded reduction's ``partial`` among them, ``chunk_fold`` 0 in the call);
    so does a nested map's (its arrays with their 2-D shapes, the dims after them)."""
    spec = codegen_chunks.render(_nest("map"))
    assert spec.form == "map" and "def share_entry(rec):" in spec.pair
    assert "def pack(itab, ftab, in0, out0, n):" in spec.pair
    assert "kernel, (in0, out0, n, r[0], r[3],))" in spec.pair
    x = tj.tensor(_x((128, 256)))
    b = tj.tensor(_x((256,), seed=1))
    specs = {}
    for fn, args in ((lambda x: (x * 2.0).sum(), (x,)), (lambda x, b: tj.tanh(x + b), (x, b))):
        f = tj.trace(fn)
        with monkeypatch.context() as m:
            m.setenv("TRACEJIT_PARALLEL", "chunks")
            f(*args)
        specs.update({s.form: s for e in f.entries for p in _plans(e.executor) for k in p.kernels
                      for s in k._specs.values() if s.parallel})
    total = specs["flat_blocked_sum"]
    assert total.chunked and "partial, r[0], r[3], 0,))" in total.pair and "float64[::1])" in total.pair
    # ... and the share that ends last folds (no fold call from Python after the launch)
    assert "FOLDS = True" in total.pair and "partial, r[3], r[3], 1,))" in total.pair
    assert "FOLDS = False" in spec.pair
    nested = specs["nested_map"]
    assert nested.chunked and "def pack(itab, ftab, in0, in1, out0, d0, d1):" in nested.pair
    assert "in0 = table_array(it, 0, 2, np.float32)" in nested.pair   # (slots 0-2: address, shape)
    assert "kernel, (in0, in1, out0, d0, d1, r[0], r[3],))" in nested.pair


@pytest.fixture
def paired(monkeypatch, tmp_path):
    """Flat kernels as paired chunk kernels run in two shares (whatever this machine's
    cores), sync compiles; the pair launches counted (each share's q with it)."""
    if sharepool.pool_shares.find() is None:
        pytest.skip("numpy's BLAS is not a pthreads OpenBLAS with a pool of two")
    from tracejit.compiler.cpu.runtime import cshares
    monkeypatch.delenv("TRACEJIT_PARALLEL", raising=False)
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    monkeypatch.setattr(codegen_chunks, "flat_pairs", lambda: True)
    monkeypatch.setattr(cshares, "pool_threads", lambda: 2)
    launches = []
    call = cshares.CShares.__call__

    def counted(self, args, nt=2):
        launches.append(len(args))
        return call(self, args, nt)
    monkeypatch.setattr(cshares.CShares, "__call__", counted)
    return launches, count_launches(monkeypatch, cshares, "_run_shares")


@pytest.mark.parametrize("name", ["map", "flat_blocked_sum", "flat_reduce", "nested_map",
                                  "column_blocks"])
def test_paired_flat_kernels_run_gil_free_and_match_one_share(paired, monkeypatch, name):
    """Without TRACEJIT_PARALLEL=chunks, a flat kernel, a nested map or a column sum where
    `flat_pairs` holds is a chunk kernel whose two shares run through its pair (OpenBLAS's
    worker, no Python): the same bits as one share, and eager's values."""
    pairs, pooled = paired
    fn, shapes = CASES[name]
    folds = []     # the fold calls a launch of two shares makes from Python (chunk_fold 1)
    init = cshares.ChunkKernel.__init__

    def counting(self, kernel, entry, *rest, **kw):
        def counted_entry(*a):
            if a[-3:] == (2, 2, 1):
                folds.append(1)
            return entry(*a)
        init(self, kernel, counted_entry, *rest, **kw)
    monkeypatch.setattr(cshares.ChunkKernel, "__init__", counting)
    args = [tj.tensor(_x(s, seed=k)) for k, s in enumerate(shapes)]
    want = fn(*args).numpy()
    # (eager may run an op's own vectorized kernel on sharepool's threads where an earlier
    # test loaded it, e.g. test_tiers: only the traced call's launches count)
    del pairs[:], pooled[:]
    f = tj.trace(fn)
    got = f(*args).numpy()
    assert (name, True) in _forms(f)
    assert pairs and not pooled                      # through the pair, not sharepool's threads
    assert folds == []                               # a reduction's pair folded it itself
    monkeypatch.setattr(cshares, "pool_threads", lambda: 1)
    one = f(*args).numpy()
    assert len(pairs) == 1                           # (one share: no launch)
    np.testing.assert_array_equal(got, one)
    np.testing.assert_allclose(got, want, **_SUMS.get(name, dict(rtol=2e-6, atol=2e-6)))


def test_paired_kernel_runs_n_shares_without_the_gil_where_more_cores_are_free(paired, monkeypatch):
    """On more than two free cores a paired flat kernel launches one share per core through
    its GIL-free entry (more shares than the pool's threads too): the same bits as one share."""
    pairs, pooled = paired
    fn, shapes = CASES["flat_blocked_sum"]
    args = [tj.tensor(_x(s, seed=k)) for k, s in enumerate(shapes)]
    f = tj.trace(fn)
    results = []
    for nt in (1, 4, 6):
        monkeypatch.setattr(cshares, "pool_threads", lambda nt=nt: nt)
        del pairs[:], pooled[:]
        results.append(f(*args).numpy())
        assert not pooled and len(pairs) == (0 if nt == 1 else 1)
    assert ("flat_blocked_sum", True) in _forms(f)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])


def test_paired_kernel_declines_to_sharepool_without_the_blas_worker(paired, monkeypatch):
    """Where OpenBLAS's pool has no second thread at the call (BLAS set to one thread), the
    pair is not used: sharepool's threads run the two shares, with the same result."""
    pairs, pooled = paired
    x = tj.tensor(_x((128, 256)))
    f = tj.trace(lambda x: (x * 2.0).sum())
    first = float(f(x).numpy())
    monkeypatch.setattr(sharepool.pool_shares, "find", lambda: None)
    assert float(f(x).numpy()) == first
    assert len(pairs) == 1 and pooled == [2]


def _no_pool():
    raise OSError("no pool here")


def test_flat_pairs_decline_without_a_pool_of_two(monkeypatch):
    """`flat_pairs` holds with two usable CPUs or more and a worker pool that starts:
    without one the flat kernel stays numba's parfor kernel. The CPU count is no condition
    beyond two (no path for exactly two CPUs)."""
    from tracejit import threads
    from tracejit.compiler.backends import CpuBackend
    from tracejit.compiler.cpu.runtime import workpool
    real_pool = workpool.pool
    monkeypatch.delenv("TRACEJIT_PARALLEL", raising=False)
    nest = _nest("map")

    def machine(cpus, pthreads):
        monkeypatch.setattr(codegen_chunks, "_flat_machine", None)
        monkeypatch.setattr(sharepool, "pool_shares", sharepool.PoolShares())
        monkeypatch.setattr(workpool, "pool", real_pool if pthreads else _no_pool)
        monkeypatch.setattr(threads, "usable_cpus", lambda: cpus)
        return codegen_chunks.flat_pairs()

    assert not machine(2, False)
    spec = CpuBackend().render(nest, True)
    assert not spec.chunked and "prange(" in spec.source
    assert not machine(1, True)
    assert machine(4, True) == machine(2, True) == machine(16, True)
    if machine(2, True):
        assert CpuBackend().render(nest, True).chunked
        monkeypatch.setenv("TRACEJIT_CHUNK_FLAT_PAIRS", "0")
        assert not codegen_chunks.flat_pairs() and not CpuBackend().render(nest, True).chunked


def test_paired_bias_relu_after_its_product(paired, monkeypatch):
    """The Transformer's feed-forward bias + ReLU: a nested map over a GEMM's output runs as
    a paired chunk kernel: eager's values, and the same bits in one share and in two."""
    import tracejit.nn.functional as F
    from tracejit.compiler.cpu.runtime import coreshare
    pairs, pooled = paired
    # The product's route held fixed across the calls (BLAS on two threads): the adaptive
    # policy's count moves with other processes' load; under AVX2 code OpenBLAS's one- and
    # two-thread sgemm differ in the last bits here, which is not what this test is about (the ReLU kernel's shares).
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 2)

    def bias_relu(x, w, b):
        return tj.relu(F.linear(x, w, b))
    args = [tj.tensor(_x((512, 64), seed=1)), tj.tensor(_x((256, 64), seed=2)), tj.tensor(_x((256,), seed=3))]
    want = bias_relu(*args).numpy()
    f = tj.trace(bias_relu)
    got = f(*args).numpy()
    assert ("nested_map", True) in _forms(f)
    assert pairs and not pooled
    monkeypatch = pytest.MonkeyPatch()
    with monkeypatch.context() as m:
        m.setattr(cshares, "pool_threads", lambda: 1)
        one = f(*args).numpy()
    np.testing.assert_array_equal(got, one)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def test_nested_map_without_a_table_form_keeps_its_parfor_kernel(paired, monkeypatch):
    """A nested map whose operand is strided (no table form for cshares' pair) would run
    its shares through sharepool's Python launch: outside TRACEJIT_PARALLEL=chunks it keeps
    numba's parfor kernel; with it, the chunk kernel."""
    from tracejit.compiler.backends import CpuBackend
    x = tj.tensor(_x((256, 128)))
    b = tj.tensor(_x((128,), seed=1))
    f = tj.trace(lambda x, b: tj.tanh(x + b))
    f(x, b)
    (kern,) = [k for e in f.entries for p in _plans(e.executor) for k in p.kernels]
    layouts = tuple("nd" if lay == "flat" else lay for lay in next(iter(kern._specs))[0])
    nest = kern.nest(layouts)
    spec = CpuBackend().render(nest, True)
    assert spec.form == "nested_map" and not spec.chunked and "prange(" in spec.source
    contiguous = CpuBackend().render(kern.nest(next(iter(kern._specs))[0]), True)
    assert contiguous.chunked and contiguous.pair
    monkeypatch.setenv("TRACEJIT_PARALLEL", "chunks")
    forced = CpuBackend().render(nest, True)
    assert forced.chunked and forced.pair == ""
