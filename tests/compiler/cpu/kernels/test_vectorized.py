"""Large eager elementwise ops through kernels made from the op record (tracejit/compiler/cpu/kernels/vectorized.py).

The size threshold is lowered so the arrays stay small; kernels compile in the compile
workers into a private disk cache, as they would for a user (never on the caller's time).
"""
from __future__ import annotations

import time

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler import prepare
from tracejit.compiler.cpu.kernels import loader, vectorized as V
from tracejit.ops.gelu_prim import gelu_backward as _gelu_backward
from tracejit.ops.elementwise import pow_backward, sigmoid_backward, tanh_backward
from tracejit.ops.registry import REGISTRY

N = 4096


@pytest.fixture
def kernels(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRACEJIT_COMPILE", "background")
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")
    monkeypatch.setattr(V, "MIN_ELEMENTS", 1024)
    _forget_plans()
    monkeypatch.setattr(V, "_entries", {})
    monkeypatch.setattr(V, "_stats", dict.fromkeys(V._stats, 0))
    # The preparation thread starts at once (not a second later, as for a user's first step).
    monkeypatch.setattr(loader, "_GO_AFTER_S", 0.0)
    # Kernels an earlier test loaded from the user's cache stay in this process (keyed by
    # source): forget them, so a first call here really finds nothing to load.
    from tracejit.compiler import diskcache, tiers
    diskcache.clear_memory_cache()
    # Pair modules' jobs are kept per process (prepare.module_job): one from an earlier test,
    # for another cache directory (or stranded by a pool an earlier test shut down), is not
    # this test's.
    monkeypatch.setattr(prepare, "_module_jobs", {})
    yield
    # No preparation thread of this test may outlive it: a late one would count its load
    # in the next test's counters.
    V.settle(timeout=600.0)
    _forget_plans()


def _forget_plans():
    for p in REGISTRY.values():
        if p.plans:
            p.plans.clear()


def _wait_and_run(fn, timeout=600.0):
    """Call fn until its kernel launches (the first calls use numpy while it compiles);
    fail at once when it will never come: since the fixture zeroed the counters, an op
    whose scalar rule could not be emitted (``unsupported``) or a kernel given up (a
    failed compile or load) means no launch is coming, however long we wait."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = V.stats()["launches"]
        out = fn()
        after = V.stats()
        if after["launches"] > before:
            return out
        if after["failed"] or after["unsupported"]:
            raise AssertionError(f"the eager kernel will not come: {after}")
        time.sleep(0.1)
    raise AssertionError("the eager kernel never became available")


def _settle(pred, timeout=120.0):
    """Wait until `pred()` holds: the kernel's preparation runs in a thread of its own."""
    import time
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "the kernel's preparation did not finish"
        time.sleep(0.02)


def _x(dtype=np.float32, n=N, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(dtype)


@pytest.mark.parametrize("name,fn,exact", [
    ("tanh", lambda t: tj.tanh(t), False),
    ("erf", lambda t: tj.erf(t), False),
    ("sqrt", lambda t: tj.sqrt(tj.abs(t)), True),
    ("cube", lambda t: t ** 3, True),
    ("pow", lambda t: tj.abs(t) ** 1.7, False),
    ("gelu", lambda t: tj.nn.functional.gelu(t, approximate="tanh"), False),
    ("gelu_erf", lambda t: tj.nn.functional.gelu(t), False),
    ("gelu_backward", lambda t: _gelu_backward(t * 0.5 + 1.0, t, "tanh"), False),
])
def test_kernel_matches_numpy_path(kernels, name, fn, exact):
    x = tj.tensor(_x())
    first = fn(x)  # numpy result; the kernel is only submitted
    assert V.stats()["launches"] == 0
    got = _wait_and_run(lambda: fn(x))
    assert got.dtype is first.dtype and got.shape == first.shape
    if exact:
        np.testing.assert_array_equal(got.numpy(), first.numpy())
    else:  # mathlib's float32 functions are within a few ulps of numpy's (gelu's
        # 1 + tanh(u) for negative u turns tanh's last-bit difference into ~4e-7 absolute)
        atol = 1e-6 if name.startswith("gelu") else 2e-7
        np.testing.assert_allclose(got.numpy(), first.numpy(), rtol=2e-6, atol=atol)


def test_first_call_never_waits_for_a_compile(kernels):
    x = tj.tensor(_x(seed=1))
    before = V.stats()
    y = tj.sigmoid(x)  # new signature: a thread renders the kernel and submits its compile
    assert V.stats()["launches"] == before["launches"]  # this call ran on numpy
    np.testing.assert_allclose(y.numpy(), 1 / (1 + np.exp(-x.numpy())), rtol=1e-6)
    _settle(lambda: V.stats()["submitted"] == before["submitted"] + 1)


def test_kernel_on_disk_loads_off_the_callers_thread(kernels, monkeypatch):
    """Background mode: a kernel on disk is loaded by a thread (numba's import is not the
    first call's wait), calls use numpy meanwhile; sync mode loads it in the call."""
    from tracejit.compiler import diskcache
    x = tj.tensor(_x(seed=8))
    want = tj.exp(x).numpy()
    _wait_and_run(lambda: tj.exp(x))  # compiled by a worker into the disk cache
    for mode in ("background", "sync"):
        monkeypatch.setenv("TRACEJIT_COMPILE", mode)
        monkeypatch.setattr(V, "_entries", {})
        monkeypatch.setattr(V, "_stats", dict.fromkeys(V._stats, 0))
        diskcache.clear_memory_cache()
        _forget_plans()
        if mode == "background":
            gate = __import__("threading").Event()
            load = V._load
            monkeypatch.setattr(V, "_load", lambda e, p: gate.wait(30) and load(e, p))
            got = tj.exp(x)  # the load is held back: this call must not wait for it
            assert V.stats()["launches"] == 0
            gate.set()
            got = _wait_and_run(lambda: tj.exp(x))
            monkeypatch.setattr(V, "_load", load)
        else:
            got = tj.exp(x)  # on disk: loaded in the call
            assert V.stats()["launches"] == 1
        assert V.stats()["submitted"] == 0 and V.stats()["loaded"] == 1
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-6, atol=2e-7)


def test_gradients_through_kernels(kernels):
    xa = _x(np.float64, seed=2)
    x = tj.tensor(xa, requires_grad=True)

    def step():
        x.grad = None
        tj.tanh(x * 0.5).sum().backward()
        return x.grad
    ref = step().numpy().copy()
    got = _wait_and_run(step)
    np.testing.assert_allclose(got.numpy(), 0.5 * (1 - np.tanh(0.5 * xa) ** 2), rtol=1e-12)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12)


@pytest.mark.parametrize("case", ["small", "broadcast", "int", "noncontiguous", "arithmetic"])
def test_ineligible_calls_stay_on_numpy(kernels, case):
    if case == "small":
        a, b = tj.tensor(_x(n=512)), 2.0
    elif case == "broadcast":
        a, b = tj.tensor(_x().reshape(64, 64)), tj.tensor(_x(n=64))
    elif case == "int":
        a, b = tj.tensor(np.arange(N)), 3
    elif case == "noncontiguous":
        a, b = tj.tensor(_x().reshape(64, 64)).t(), 2.0
    else:  # arithmetic below ARITH_MIN_ELEMENTS: numpy's one loop is as fast
        a, b = tj.tensor(_x()), tj.tensor(_x(seed=5))
    for _ in range(3):
        out = tj.pow(a, b) if case != "arithmetic" else a * b + a
        cmp = (a > b) if case == "arithmetic" else None
    with np.errstate(invalid="ignore"):  # negative bases to fractional powers: nan, as in numpy
        want = (a.numpy() ** (b.numpy() if hasattr(b, "numpy") else b) if case != "arithmetic"
                else a.numpy() * b.numpy() + a.numpy())
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)
    if cmp is not None:
        np.testing.assert_array_equal(cmp.numpy(), a.numpy() > b.numpy())
    assert V.stats()["submitted"] == 0 and V.stats()["launches"] == 0


def test_switched_off(kernels, monkeypatch):
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "0")
    _forget_plans()
    x = tj.tensor(_x(seed=3))
    for _ in range(3):
        tj.exp(x)
    assert V.stats()["submitted"] == 0 and V.stats()["launches"] == 0


def _entry_of(name):
    (entry,) = [e for k, e in V._entries.items() if k[0] == name]
    _settle(lambda: entry.spec is not None or entry.failed)  # rendered by its preparation
    return entry


def test_large_op_kernel_is_the_compiled_kernels_rendering(kernels, monkeypatch):
    """One lowering: the eager kernel is the CPU backend's rendering of the op as a group
    of one equation, and at PARALLEL_MIN elements it is the parallel variant (numba's
    parfor kernel here: no GIL-free pair, as on a machine without two CPUs and a pthreads
    OpenBLAS; the paired form: the next test)."""
    from tracejit.compiler import codegen_chunks, codegen_cpu, loopnest
    from tracejit.threads import PARALLEL_MIN
    monkeypatch.setattr(codegen_chunks, "flat_pairs", lambda: False)
    x = tj.tensor(_x(n=PARALLEL_MIN, seed=6))
    first = tj.tanh(x)
    spec = _entry_of("tanh").spec
    nest = loopnest.lower_op(REGISTRY["tanh"], ["array"], {}, "float32", "float32")
    assert spec.parallel and spec.source == codegen_cpu.render(nest, parallel=True).source
    assert "prange(" in spec.source and "tanh_f32(x0)" in spec.source
    got = _wait_and_run(lambda: tj.tanh(x))
    np.testing.assert_allclose(got.numpy(), first.numpy(), rtol=2e-6, atol=2e-7)
    # loaded by the CPU backend, as a compiled plan's parallel kernel is
    # Loaded by the CPU backend like a compiled plan's parallel kernel: wrapped by
    # coreshare.guard_parallel (its threads follow coreshare), unless neither applies.
    from tracejit.compiler.cpu.runtime import coreshare
    fn = _entry_of("tanh").fn
    assert hasattr(fn, "unguarded") or not (coreshare.ENABLED or coreshare.workqueue_active())


def test_large_op_kernel_is_the_paired_chunk_kernel_where_flat_pairs_hold(kernels, monkeypatch):
    """Where `codegen_chunks.flat_pairs` holds, the CPU backend renders a flat kernel as its
    chunk kernel with a GIL-free pair, eager's too: the worker compiles the kernel, then the
    pair's own module, and two-share calls run through it (OpenBLAS's worker)."""
    from tracejit.compiler.cpu.runtime import sharepool
    from tracejit.compiler import codegen_chunks, loopnest
    from tracejit.compiler.cpu.runtime import cshares
    from tracejit.threads import PARALLEL_MIN
    if sharepool.pool_shares.find() is None:
        pytest.skip("numpy's BLAS is not a pthreads OpenBLAS with a pool of two")
    monkeypatch.setattr(codegen_chunks, "flat_pairs", lambda: True)
    monkeypatch.setattr(cshares, "pool_threads", lambda: 2)
    x = tj.tensor(_x(n=PARALLEL_MIN, seed=6))
    first = tj.tanh(x)
    spec = _entry_of("tanh").spec
    nest = loopnest.lower_op(REGISTRY["tanh"], ["array"], {}, "float32", "float32")
    assert spec.chunked and spec.pair and spec.source == codegen_chunks.render(nest).source
    got = _wait_and_run(lambda: tj.tanh(x))
    fn = _entry_of("tanh").fn
    assert isinstance(fn, cshares.ChunkKernel)
    import time
    deadline = time.monotonic() + 600
    while fn.pair is None and fn.pending is not None and time.monotonic() < deadline:
        time.sleep(0.1)
        got = tj.tanh(x)          # polls the pair's module (compiled by a worker)
    assert fn.pair is not None
    np.testing.assert_array_equal(tj.tanh(x).numpy(), got.numpy())
    np.testing.assert_allclose(got.numpy(), first.numpy(), rtol=2e-6, atol=2e-7)


def test_settle_waits_for_the_pair_of_a_loaded_chunk_kernel(kernels, monkeypatch):
    """The kernel's preparation readies its GIL-free pair too, before `settle` returns, with
    no two-share call in between (calls on one thread never ask for it): the first
    two-share call after `settle` runs on the pair, and no compile is left to run beside
    the calls that follow (the bench's eager rows timed their calls while it ran)."""
    from tracejit.compiler.cpu.runtime import sharepool
    from tracejit.compiler import codegen_chunks, diskcache, tiers
    from tracejit.compiler.cpu.runtime import cshares
    from tracejit.threads import PARALLEL_MIN
    if sharepool.pool_shares.find() is None:
        pytest.skip("numpy's BLAS is not a pthreads OpenBLAS with a pool of two")
    monkeypatch.setattr(codegen_chunks, "flat_pairs", lambda: True)
    monkeypatch.setattr(cshares, "pool_threads", lambda: 1)   # no call polls the pair
    monkeypatch.setattr(prepare, "_module_jobs", {})   # (an earlier test's job for this pair)
    x = tj.tensor(_x(n=PARALLEL_MIN, seed=16))
    first = tj.tanh(x)                 # numpy; the preparation starts
    assert V.settle(timeout=600.0)
    fn = _entry_of("tanh").fn
    assert isinstance(fn, cshares.ChunkKernel) and fn.pair is None
    pending = fn.pending
    assert diskcache.in_memory(pending.source, pending.llvm_options)   # loaded by settle's end
    monkeypatch.setattr(cshares, "pool_threads", lambda: 2)
    got = tj.tanh(x)                   # the first two-share call: the pair is there
    assert fn.pair is not None and fn.pending is None
    np.testing.assert_allclose(got.numpy(), first.numpy(), rtol=2e-6, atol=2e-7)


def test_below_parallel_min_runs_the_serial_twin(kernels):
    """Smaller sizes (only with a lowered MIN_ELEMENTS) get the serial twin of the same
    nest, as compiled plans do; a Python scalar is a one-element operand."""
    from tracejit.compiler import codegen_cpu, loopnest
    x = tj.tensor(np.abs(_x(seed=7)))
    tj.pow(x, 1.7)
    spec = _entry_of("pow").spec
    nest = loopnest.lower_op(REGISTRY["pow"], ["array", "scalar"], {}, "float32", "float32")
    assert not spec.parallel and spec.source == codegen_cpu.render(nest, parallel=False).source
    assert "prange" not in spec.source and "x1 = in1[0]" in spec.source


def _special(n, seed):
    x = _x(n=n, seed=seed)
    x[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3.0, 3.0]
    return x


@pytest.mark.parametrize("name,fn", [
    ("mul", lambda a, b: a * b),
    ("add", lambda a, b: a + b),
    ("sub", lambda a, b: 2.5 - a),
    ("div", lambda a, b: a / b),
    ("maximum", lambda a, b: tj.maximum(a, b)),
    ("gt", lambda a, b: a > b),
    ("neg", lambda a, b: -a),
    ("tanh_backward", lambda a, b: tanh_backward(a, b)),
    ("sigmoid_backward", lambda a, b: sigmoid_backward(a, b)),
    ("pow_backward3", lambda a, b: pow_backward(a, b, 3)),
    ("pow_backward2", lambda a, b: pow_backward(a, b, 2.0)),
])
def test_large_arithmetic_runs_a_kernel_bitwise_as_numpy(kernels, monkeypatch, name, fn):
    """Arithmetic from ARITH_MIN_ELEMENTS (lowered here) runs the op's kernel, on the
    cores left free: IEEE operations without fastmath, so bitwise numpy's result,
    special values included."""
    monkeypatch.setattr(V, "ARITH_MIN_ELEMENTS", 2048)
    monkeypatch.setattr(V, "_CPUS", 2)
    monkeypatch.setattr(V, "_one_core_free", lambda: False)
    a, b = tj.tensor(_special(N, 8)), tj.tensor(_special(N, 9)[::-1].copy())
    with np.errstate(all="ignore"):
        first = fn(a, b)
        got = _wait_and_run(lambda: fn(a, b))
    assert got.dtype is first.dtype and got.shape == first.shape
    np.testing.assert_array_equal(got.numpy(), first.numpy())
    assert np.signbit(got.numpy()).tolist() == np.signbit(first.numpy()).tolist()


def test_mid_size_arithmetic_runs_only_as_the_gil_free_pair(kernels, monkeypatch):
    """Arithmetic from PAIR_ARITH_MIN_ELEMENTS (lowered here) to ARITH_MIN_ELEMENTS runs its
    kernel only as the two-share GIL-free pair right after a two-thread job, whatever share
    count the free cores would give: bitwise numpy's result. Where the pair cannot run
    (OpenBLAS's pool without a second thread, no job just before) numpy's loop runs, not
    sharepool's threads."""
    from tracejit.compiler import codegen_chunks
    from tracejit.compiler.cpu.runtime import cshares, sharepool
    from tracejit.threads import PARALLEL_MIN
    if sharepool.pool_shares.find() is None:
        pytest.skip("numpy's BLAS is not a pthreads OpenBLAS with a pool of two")
    monkeypatch.setattr(V, "_flat_pairs", lambda: True)
    monkeypatch.setattr(codegen_chunks, "flat_pairs", lambda: True)
    monkeypatch.setattr(V, "PAIR_ARITH_MIN_ELEMENTS", PARALLEL_MIN)
    monkeypatch.setattr(V, "_CPUS", 2)
    monkeypatch.setattr(V, "_one_core_free", lambda: False)
    monkeypatch.setattr(cshares, "pool_threads", lambda: 4)
    monkeypatch.setattr(cshares, "_run_shares", lambda *a: pytest.fail("sharepool's threads ran it"))
    monkeypatch.setattr(sharepool, "warm", lambda: True)
    pairs = []
    call = cshares.CShares.__call__
    monkeypatch.setattr(cshares.CShares, "__call__", lambda self, args, nt=2: (pairs.append(1), call(self, args, nt))[1])
    a, b = tj.tensor(_special(PARALLEL_MIN, 20)), tj.tensor(_special(PARALLEL_MIN, 21)[::-1].copy())
    with np.errstate(all="ignore"):
        want = a.numpy() * b.numpy()
        got = _wait_and_run(lambda: a * b)
        assert pairs
        np.testing.assert_array_equal(got.numpy(), want)
        assert np.signbit(got.numpy()).tolist() == np.signbit(want).tolist()
        real_find = sharepool.pool_shares.find
        monkeypatch.setattr(sharepool.pool_shares, "find", lambda: None)
        before, n = V.stats()["launches"], len(pairs)
        np.testing.assert_array_equal((a * b).numpy(), want)
        assert V.stats()["launches"] == before and len(pairs) == n
        assert not V.declines(REGISTRY["mul"], (PARALLEL_MIN,))
        assert V.declines(REGISTRY["mul"], (PARALLEL_MIN - 1,))
        monkeypatch.setattr(sharepool.pool_shares, "find", real_find)
        monkeypatch.setattr(sharepool, "warm", lambda: False)    # the worker gone to sleep
        assert V.declines(REGISTRY["mul"], (PARALLEL_MIN,))
        np.testing.assert_array_equal((a * b).numpy(), want)
    assert V.stats()["launches"] == before and len(pairs) == n


def test_broadcast_value_operand_is_a_scalar_to_the_kernel(kernels, monkeypatch):
    """A gradient expanded from one value (sum's backward) meets the kernel as a scalar
    operand instead of sending the op back to numpy."""
    monkeypatch.setattr(V, "ARITH_MIN_ELEMENTS", 2048)
    monkeypatch.setattr(V, "_CPUS", 2)
    monkeypatch.setattr(V, "_one_core_free", lambda: False)
    x = tj.tensor(_x(seed=10))
    g = tj.tensor(np.array([1.5], np.float32)).expand(N)
    assert not g.numpy().flags.c_contiguous
    first = g * x
    got = _wait_and_run(lambda: g * x)
    np.testing.assert_array_equal(got.numpy(), first.numpy())
    np.testing.assert_array_equal(got.numpy(), 1.5 * x.numpy())


def test_arithmetic_stays_on_numpy_with_one_cpu(kernels, monkeypatch):
    monkeypatch.setattr(V, "ARITH_MIN_ELEMENTS", 2048)
    monkeypatch.setattr(V, "_CPUS", 1)
    a = tj.tensor(_x(seed=11))
    for _ in range(3):
        a * 3.5
    assert V.stats()["submitted"] == 0 and V.stats()["launches"] == 0


def test_settle_waits_for_submitted_compiles(kernels):
    x = tj.tensor(_x(seed=12))
    tj.exp(x)                       # runs on numpy; its preparation thread submits the compile
    assert V.settle(timeout=600.0)  # waits for the preparation: compile, then load
    assert V.stats()["submitted"] == 1
    before = V.stats()["launches"]
    tj.exp(x)
    assert V.stats()["launches"] == before + 1


def test_arithmetic_goes_to_numpy_while_one_core_is_free(kernels, monkeypatch):
    """With other processes on all but one core, a parallel launch cannot gain over
    numpy's loop for arithmetic: the op stays on numpy (math ops keep their kernels)."""
    monkeypatch.setattr(V, "ARITH_MIN_ELEMENTS", 2048)
    monkeypatch.setattr(V, "_CPUS", 2)
    monkeypatch.setattr(V, "_one_core_free", lambda: True)
    a = tj.tensor(_x(seed=13))
    for _ in range(3):
        out = a * 2.5
    np.testing.assert_array_equal(out.numpy(), a.numpy() * np.float32(2.5))
    # the kernel's compile is started (by its preparation thread), for when cores are free
    # again, but never launched
    assert V.settle(timeout=600.0)
    assert V.stats()["submitted"] == 1
    for _ in range(2):
        out = a * 2.5
    np.testing.assert_array_equal(out.numpy(), a.numpy() * np.float32(2.5))
    assert V.stats()["launches"] == 0
    tj.exp(a)
    assert V.settle(timeout=600.0)
    assert V.stats()["submitted"] == 2


def test_engine_accumulates_large_gradients_through_add_kernel(kernels, monkeypatch):
    """The backward engine's in-place accumulation (a tensor used three times) runs add's
    kernel into the buffer it owns: the values of numpy's in-place add."""
    monkeypatch.setattr(V, "ARITH_MIN_ELEMENTS", 2048)
    monkeypatch.setattr(V, "_CPUS", 2)
    monkeypatch.setattr(V, "_one_core_free", lambda: False)
    xa = _x(seed=14)
    x = tj.tensor(xa, requires_grad=True)

    def step():
        x.grad = None
        a = x * 1.0
        (a * 2.0 + a * 3.0 + a * a).sum().backward()
        return x.grad
    first = step().numpy().copy()           # numpy accumulation (kernels not built yet)
    _wait_and_run(lambda: x.detach() + x.detach())   # add's kernel for this size
    into = []
    real = V.run
    monkeypatch.setattr(V, "run", lambda *a, **kw: (into.append(kw.get("out") is not None), real(*a, **kw))[1])
    got = step()
    assert any(into)
    np.testing.assert_allclose(got.numpy(), 5.0 + 2.0 * xa.astype(np.float64), rtol=1e-6)
    np.testing.assert_array_equal(got.numpy(), first)


def test_add_into_writes_in_place(kernels, monkeypatch):
    monkeypatch.setattr(V, "ARITH_MIN_ELEMENTS", 2048)
    monkeypatch.setattr(V, "_CPUS", 2)
    monkeypatch.setattr(V, "_one_core_free", lambda: False)
    a, b = _x(seed=15), _x(seed=16)
    _wait_and_run(lambda: tj.tensor(a) + tj.tensor(b))
    dst = a.copy()
    before = V.stats()["launches"]
    V.add_into(dst, b)
    assert V.stats()["launches"] == before + 1
    np.testing.assert_array_equal(dst, a + b)


def test_leaf_gradient_copy_runs_copy_kernel(kernels, monkeypatch):
    """A gradient a leaf cannot take as it is (add's VJP hands one tensor to both inputs:
    z's in ``x * y + z``) is copied by copy's kernel: the same values, z.grad its own
    memory (the other input's gradient and z's do not share it)."""
    monkeypatch.setattr(V, "ARITH_MIN_ELEMENTS", 2048)
    monkeypatch.setattr(V, "_CPUS", 2)
    monkeypatch.setattr(V, "_one_core_free", lambda: False)
    xs = [_x(seed=s) for s in (17, 18, 19)]
    x, y, z = (tj.tensor(a, requires_grad=True) for a in xs)

    def step():
        x.grad = y.grad = z.grad = None
        (x * y + z).sum().backward()
    step()                                        # numpy's copy (kernel not built yet)
    _wait_and_run(lambda: V.copy_of(xs[0]))
    before = V.stats()["launches"]
    step()
    assert V.stats()["launches"] > before
    np.testing.assert_array_equal(z.grad.numpy(), np.ones_like(xs[2]))
    np.testing.assert_array_equal(x.grad.numpy(), xs[1])
    assert not np.shares_memory(z.grad.numpy(), x.grad.numpy())
    got = V.copy_of(xs[0])
    assert got is not None and got.flags.c_contiguous and not np.shares_memory(got, xs[0])
    np.testing.assert_array_equal(got, xs[0])


def test_settle_starts_a_preparation_that_waits_for_the_next_call(kernels, monkeypatch):
    """A user's first call only records the op (its preparation starts at a call a second
    later); `settle` must start it rather than wait for a call that never comes."""
    monkeypatch.setattr(loader, "_GO_AFTER_S", 3600.0)
    x = tj.tensor(_x(seed=15))
    tj.exp(x)                          # recorded, preparation not started
    assert V.stats()["submitted"] == 0
    assert V.settle(timeout=600.0)     # starts it, then waits for compile and load
    assert V.stats()["submitted"] == 1
    assert [e.fn is not None for e in V._entries.values()] == [True]   # exp's kernel is in
    before = V.stats()["launches"]
    tj.exp(x)
    assert V.stats()["launches"] == before + 1


def test_pending_since_names_only_the_kernels_asked_for_since(kernels, monkeypatch):
    """bench_tiers waits for the kernels a compiled step asks for: `pending(since)` names an
    eager kernel whose op was called at or after `since`, not one asked for only before
    (an op of tier 0 the compiled step no longer runs), and neither once it is loaded."""
    monkeypatch.setattr(loader, "_GO_AFTER_S", 3600.0)   # asked for, preparations not started
    x = tj.tensor(_x(seed=16))
    tj.exp(x)
    mark = time.monotonic()
    tj.sin(x)
    assert sorted(V.pending()) == ["eager_exp", "eager_sin"]
    assert V.pending(mark) == ["eager_sin"]
    tj.exp(x)                                         # exp asked for again: pending since too
    assert sorted(V.pending(mark)) == ["eager_exp", "eager_sin"]
    assert V.pending(time.monotonic() + 1.0) == []
    assert V.settle(timeout=600.0)
    assert V.pending() == [] and V.pending(mark) == []


def test_sync_mode_asks_the_disk_for_a_missing_kernel_only_now_and_then(kernels, monkeypatch):
    """Sync mode with the kernel not on disk: numpy, and the disk is asked again only after
    `_RECHECK_S` (the look cost ~350 us a call); a kernel put there later is still found."""
    from tracejit.compiler import diskcache
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    looks = []
    real = diskcache.is_cached
    monkeypatch.setattr(diskcache, "is_cached", lambda *a, **k: looks.append(1) or False)
    monkeypatch.setattr(V, "_RECHECK_S", 3600.0)  # no second look within this test's time
    x = tj.tensor(_x(seed=11))
    want = np.sin(x.numpy())
    for _ in range(5):
        np.testing.assert_array_equal(tj.sin(x).numpy(), want)   # numpy's own result
    assert len(looks) == 1 and V.stats()["launches"] == 0
    (entry,) = [e for k, e in V._entries.items() if k[0] == "sin"]
    entry.checked -= V._RECHECK_S  # as if the interval had passed
    tj.sin(x)
    assert len(looks) == 2
    monkeypatch.setattr(diskcache, "is_cached", real)


def test_a_kernel_only_tier0_forwards_ask_for_queues_behind_the_others(kernels, monkeypatch):
    """An elementwise op's kernel asked for only inside a compiled function's tier-0 forward
    (whose plan fuses the op into kernels of its own) is queued at rank LATER; one that eager
    code asks for keeps rank EAGER. Results are the op's either way."""
    from tracejit.compiler import workers
    ranks = {}
    submit = workers.submit

    def spy(source, name_hint, llvm_options=(), *args, rank=None, **kw):
        ranks.setdefault(name_hint, rank)
        return submit(source, name_hint, llvm_options, *args, rank=rank, **kw)
    monkeypatch.setattr(workers, "submit", spy)
    x = tj.tensor(_x(seed=5))
    with V.serving_tier0():
        assert not V.outside()
        y = tj.exp(x)
    assert V.outside()
    z = tj.sigmoid(x)
    V.settle(timeout=600.0)
    assert ranks["eager_exp"] == workers.LATER
    assert ranks["eager_sigmoid"] == workers.EAGER
    np.testing.assert_allclose(y.numpy(), np.exp(x.numpy()), rtol=2e-6)
    np.testing.assert_allclose(z.numpy(), 1 / (1 + np.exp(-x.numpy())), rtol=1e-6)
    np.testing.assert_array_equal(_wait_and_run(lambda: tj.exp(x)).numpy(), tj.exp(x).numpy())


def test_an_ask_outside_tier0_makes_the_kernel_an_eager_codes():
    class Holder:
        last, gap, outside = None, 0.0, False
    h = Holder()
    with V.serving_tier0():
        with V.serving_tier0():
            loader.note_ask(h)
        loader.note_ask(h)
        assert h.outside is False
    loader.note_ask(h)
    assert h.outside is True and V.outside()


def test_tier0_forwards_run_inside_serving_tier0(monkeypatch):
    from tracejit.compiler import tier0
    seen = []
    monkeypatch.setattr(tier0, "straight_line",
                        lambda graph, drops, steps: lambda ins: seen.append(V.outside()) or ins)
    monkeypatch.setattr(tier0, "last_uses", lambda graph: {})
    monkeypatch.setattr(tier0, "_unbind_steps", lambda graph: None)
    t0 = tier0.Tier0.__new__(tier0.Tier0)
    t0.graph, t0._drops, t0._steps, t0._run = None, None, None, None
    assert t0([1, 2]) == [1, 2]
    assert seen == [False] and V.outside()


def test_the_backward_of_a_tier0_forwards_ops_serves_tier0_too(monkeypatch):
    """The nodes a tier-0 forward records (autograd/node.py's `Tier0PrimNode`) run their
    backward inside `serving_tier0`, so its kernels queue as tier 0's (the compiled step's
    backward is the plan's own kernels); the eager ops around it keep PrimNodes, whose
    backward asks as eager code. Gradients equal a plain eager run's bit for bit."""
    from tracejit.autograd import node as N
    seen = []
    real = N.PrimNode.apply

    def apply(self, grads, create_graph, retain_graph):
        seen.append((self.prim.name, V.outside()))
        return real(self, grads, create_graph, retain_graph)
    monkeypatch.setattr(N.PrimNode, "apply", apply)
    xs = _x(seed=7)[:64]

    def run(tier0: bool):
        x = tj.tensor(xs.copy(), requires_grad=True)
        if tier0:
            with V.serving_tier0():
                assert V.TIER0_THREADS[0] == 1
                y = tj.tanh(x * 2.0)
        else:
            y = tj.tanh(x * 2.0)
        assert V.TIER0_THREADS[0] == 0 and V.outside()
        z = (y * 3.0).sum()                        # the eager code around it
        z.backward()
        return x, y, z
    x, y, z = run(True)
    assert type(y.grad_fn) is N.Tier0PrimNode and type(z.grad_fn) is N.PrimNode
    assert set(seen) == {("sum", True), ("mul", True), ("tanh", False), ("mul", False)}, seen
    assert V.outside()                             # the block ended with each node's backward
    ex, ey, ez = run(False)
    assert type(ey.grad_fn) is N.PrimNode
    np.testing.assert_array_equal(x.grad.numpy(), ex.grad.numpy())
    np.testing.assert_array_equal(y.detach().numpy(), ey.detach().numpy())


def _select_operands(dtype, n=N + 37):
    rng = np.random.default_rng(0)
    g = rng.standard_normal(n).astype(dtype)
    y = rng.standard_normal(n).astype(dtype)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-30, -1e-30], dtype)
    g[:49] = np.repeat(special, 7)   # every special value of g against every one of y
    y[:49] = np.tile(special, 7)
    tiny = np.finfo(dtype).smallest_subnormal
    y[49:51] = (tiny, -tiny)
    return g, y


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_select_runs_a_kernel_from_min_elements_bitwise(kernels, monkeypatch, dtype):
    """A select (ReLU's gradient: numpy needs a comparison pass and a select pass) runs its
    one-pass kernel from MIN_ELEMENTS, like a math function, even with one core free: the
    kept elements keep their bits (nan, inf, -0.0), the others are +0.0."""
    from tracejit.ops.elementwise import relu_backward
    monkeypatch.setattr(V, "_one_core_free", lambda: True)
    g, y = _select_operands(dtype)
    want = np.where(y > 0, g, dtype(0))
    first = relu_backward(tj.tensor(g), tj.tensor(y))
    got = _wait_and_run(lambda: relu_backward(tj.tensor(g), tj.tensor(y)))
    bits = np.dtype(f"i{np.dtype(dtype).itemsize}")
    for out in (first, got):
        assert out.dtype == first.dtype and out.shape == g.shape
        np.testing.assert_array_equal(out.numpy().view(bits), want.view(bits))


def test_relu_gradient_through_autograd_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 1024)).astype(np.float32)
    w = rng.standard_normal((64, 1024)).astype(np.float32)
    xt = tj.tensor(x, requires_grad=True)
    (tj.relu(xt) * tj.tensor(w)).sum().backward()
    xr = torch.tensor(x, requires_grad=True)
    (torch.relu(xr) * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(xt.grad.numpy(), xr.grad.numpy())


def test_an_erf_rule_runs_a_kernel_below_min_elements(kernels):
    # numpy has no erf loop (ops/_special.py makes float32 erf of ~30 passes), so exact
    # GELU runs as a kernel at any size; tanh (one numpy loop) waits for MIN_ELEMENTS.
    rng = np.random.default_rng(3)
    x = tj.tensor(rng.standard_normal((8, 16)).astype(np.float32))
    want = tj.nn.functional.gelu(x).numpy()
    got = _wait_and_run(lambda: tj.nn.functional.gelu(x))
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-6, atol=1e-6)
    before = V.stats()["launches"]
    th = tj.tanh(x)
    assert V.stats()["launches"] == before
    np.testing.assert_array_equal(th.numpy(), np.tanh(x.numpy()))
    gelu = REGISTRY["gelu"]
    assert V.eligible(gelu, [(8, 16)], tj.float32, tj.float32, (8, 16), {"approximate": "none"})
    assert not V.eligible(gelu, [(8, 16)], tj.float32, tj.float32, (8, 16), {"approximate": "tanh"})


@pytest.mark.parametrize("name,fn", [
    ("relu", lambda a, b: tj.relu(a)),
    ("gelu_erf", lambda a, b: tj.nn.functional.gelu(a)),
    ("exp", lambda a, b: tj.exp(a)),
    ("add", lambda a, b: a + b),
    ("mul_number", lambda a, b: a * 1.7),
])
def test_an_op_on_bf16_words_is_one_kernel_of_the_float32_values_rounded(kernels, name, fn):
    """bf16 operands: one kernel widens on load and rounds on store, bitwise the float32
    op's result (its kernel's, where a float32 op runs one) rounded to nearest even."""
    from tracejit import bf16
    a = tj.tensor(_x(seed=3)).bfloat16()
    b = tj.tensor(_x(seed=4)).bfloat16()
    af, bf = a.float(), b.float()
    want = fn(af, bf)
    if V.eligible(REGISTRY[name.split("_")[0]] if name != "gelu_erf" else REGISTRY["gelu"],
                  [af.shape], tj.float32, tj.float32, af.shape):
        want = _wait_and_run(lambda: fn(af, bf))    # (the float32 kernel's last bits)
    got = _wait_and_run(lambda: fn(a, b))
    assert got.dtype is tj.bfloat16
    np.testing.assert_array_equal(got._data, bf16.to_bfloat16(want.numpy()))
    assert V.stats()["unsupported"] == 0


def test_bf16_words_below_their_size_stay_on_numpy(kernels):
    a = tj.tensor(_x(seed=5)[: min(V.MIN_ELEMENTS, V.WORDS_MIN_ELEMENTS) - 1]).bfloat16()
    before = V.stats()
    for _ in range(3):
        got = a * 3.0
    V.settle(timeout=60.0)
    assert (a * 3.0).tolist() == got.tolist() and V.stats() == before
    b = tj.tensor(_x(seed=5)[: V.WORDS_MIN_ELEMENTS]).bfloat16()
    _wait_and_run(lambda: b * 3.0)     # (the size from which they do not)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,view", [
    ((64, 96), lambda t: t.chunk(2, -1)),                    # a chunk's halves
    ((8, 16, 40), lambda t: (t[:, :, 3:23], t[:, :, 20:])),  # slices along the last dim
    ((48, 70), lambda t: (t.narrow(1, 5, 32), t.narrow(1, 38, 32))),   # column blocks
])
def test_unit_stride_row_views_run_the_kernel_as_pytorch(kernels, dtype, shape, view):
    """A view of unit-stride rows (a chunk's half, a narrowed column block) runs the flat
    kernel on its copy in C order, bitwise the result of the contiguous operand's kernel;
    values and gradients as PyTorch's."""
    import torch
    xa = np.random.default_rng(7).standard_normal(shape).astype(dtype)
    x = tj.tensor(xa, requires_grad=True)

    def step():
        x.grad = None
        a, b = view(x)
        assert not a.detach().numpy().flags.c_contiguous
        y = tj.tanh(a) * tj.sigmoid(b) + tj.nn.functional.silu(a)
        y.backward(tj.ones_like(y))
        return y, x.grad
    y, g = _wait_and_run(step)
    assert V.stats()["loaded"] >= 1
    a, b = view(x.detach())
    for fn in (tj.tanh, tj.sigmoid, tj.nn.functional.silu):
        got = _wait_and_run(lambda: fn(b), 120.0)   # the strided call's kernel value ...
        want = _wait_and_run(lambda: fn(tj.tensor(np.ascontiguousarray(b.numpy()))))
        np.testing.assert_array_equal(got.numpy(), want.numpy())   # ... bitwise the C copy's
    xt = torch.tensor(xa, requires_grad=True)
    at, bt = view(xt)
    yt = torch.tanh(at) * torch.sigmoid(bt) + torch.nn.functional.silu(at)
    yt.backward(torch.ones_like(yt))
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), **tol)
    np.testing.assert_allclose(g.numpy(), xt.grad.numpy(), **tol)
