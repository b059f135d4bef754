"""Every implementation a backend registers for a primitive (ops/impls.py) computes the
primitive's numpy form, over the op database's samples, forward and backward.

The op database's samples are run eagerly once (forward, then backward where the op is
differentiable), recording each call of a primitive that has a registered implementation.
For each registered implementation, every recorded call its checker accepts is run through
it and through the primitive's numpy form (``prim.impl``), on copies of the same operands;
the two must agree to the dtype's rounding. An implementation that no sample reaches, or
that declines every call it accepts (its kernel never loads), fails: such a row would be
untested. The table also has its own checks below (bad registrations, the runner's order).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tracejit as tj
from tracejit import bf16
from opdb import OPS, samples_for
from tracejit.compiler.cpu.gemm import bf16 as bf16_gemm
from tracejit.ops import impls

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

_PER_PRIM = 400    # recorded calls kept per primitive: the first of each operand signature


def _copy(v):
    """A fresh copy of an array operand in its own dim order (a transposed view stays one);
    an expanded one (zero strides) stays expanded, as the implementations that take only
    such operands see it."""
    if not isinstance(v, np.ndarray):
        return v
    if v.size > 1 and 0 in v.strides:
        return np.broadcast_to(v[tuple(slice(0, 1) if s == 0 else slice(None) for s in v.strides)].copy(), v.shape)
    return v.copy(order="K")


def _record(monkeypatch) -> dict:
    """{primitive: [(arrays, params)]}: calls of every primitive with a CPU implementation
    (its `run` wrapped; a replaced run makes no eager plan bypass it)."""
    calls: dict = {}
    signatures: set = set()
    for prim, platform, _ in impls.registered():
        if platform != "cpu" or prim in calls:
            continue
        calls[prim] = []

        def recorded(xp, *arrays, _prim=prim, _run=prim.run, **params):
            seen = calls[_prim]
            key = (_prim.name, repr(params)) + tuple((getattr(a, "shape", None), str(getattr(a, "dtype", type(a))))
                                                     for a in arrays)
            if xp is np and len(seen) < _PER_PRIM and key not in signatures:
                signatures.add(key)
                seen.append((tuple(_copy(a) for a in arrays), dict(params)))
            return _run(xp, *arrays, **params)
        monkeypatch.setattr(prim, "run", recorded)
    return calls


@pytest.fixture(scope="module")
def recorded_calls():
    """Every op-database sample run once in float32 and float64 (each op's float dtypes),
    forward and, where the op has gradients, backward with a seeded cotangent."""
    mp = pytest.MonkeyPatch()
    calls = _record(mp)
    # bf16 products reach their rows on the words only where MKL's bf16 GEMM runs them
    # (elsewhere the graph widens them first): the recording takes the words path on every
    # machine, where the rows compute with MKL or, without it, their float32 way
    for fn in (bf16_gemm.matmul, bf16_gemm.matmul_nt, bf16_gemm.matmul_tn):
        mp.setattr(fn, "bf16_words", lambda: True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for op in OPS:
                if op.random:
                    continue
                dtypes = [d for d in op.dtypes if d in (tj.float32, tj.float64)]
                for dt, s in samples_for(op, dtypes):
                    _run_sample(op, s)
    finally:
        mp.undo()
    # kernels that never compile in the caller under sync mode (`sync_compiles` False: the
    # suite's mode) are loaded now, so their implementations are checked too
    from tracejit.compiler.cpu.kernels import loader
    for kern in list(loader._kernels.values()):
        if not kern.sync_compiles:
            kern.load_now()
    return calls


def _run_sample(op, s) -> None:
    grad = op.grad and s.grad
    ts = s.tensors(requires_grad=bool(grad))
    try:
        out = s.fn(*ts)
    except Exception:
        return          # (a sample that checks an error: nothing to record)
    outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,))
            if isinstance(o, tj.Tensor) and o.requires_grad and o.dtype.is_floating_point]
    if not grad or not outs:
        return
    rng = np.random.default_rng(1)
    total = None
    for o in outs:
        term = (o * tj.tensor(rng.standard_normal(o.shape).astype(o.dtype.np))).sum()
        total = term if total is None else total + term
    total.backward()


def _cpu_rows():
    return [(prim, impl) for prim, platform, impl in impls.registered() if platform == "cpu"]


def _tolerance(a):
    if a.dtype == np.float32:
        return dict(rtol=3e-5, atol=3e-5 * max(1.0, float(np.nanmax(np.abs(a), initial=0.0))))
    if a.dtype == np.float64:
        return dict(rtol=1e-10, atol=1e-10 * max(1.0, float(np.nanmax(np.abs(a), initial=0.0))))
    return dict(rtol=0, atol=0)


@pytest.mark.parametrize("prim,impl", _cpu_rows(), ids=[f"{p.name}:{i.name}" for p, i in _cpu_rows()])
def test_implementation_equals_the_numpy_form(recorded_calls, prim, impl):
    calls = recorded_calls[prim]
    assert calls, f"no op-database sample runs {prim.name}: add one (tests/opdb*.py)"
    ran = 0
    for arrays, params in calls:
        if impl.checker is not None and not impl.checker(*arrays, **params):
            continue
        got = impl.fn(*(_copy(a) for a in arrays), **params)
        if got is None:
            continue          # declined (its kernel is not loaded for this call)
        want = prim.impl(np, *(_copy(a) for a in arrays), **params)
        got, want = np.asarray(got), np.asarray(want)
        assert got.shape == want.shape and got.dtype == want.dtype, (prim.name, params)
        if want.dtype == bf16.STORAGE:   # bf16 words: within one bf16 unit (another summation order)
            got, want = bf16.to_float32(got), bf16.to_float32(want)
            np.testing.assert_allclose(got, want, rtol=2 ** -7, atol=1e-6, err_msg=f"{prim.name} bf16")
            ran += 1
            continue
        np.testing.assert_allclose(got, want, err_msg=f"{prim.name} {params}", **_tolerance(want))
        ran += 1
    assert ran, f"{impl.name} took none of {len(calls)} calls of {prim.name} its samples make"


def test_every_primitive_with_a_kernel_runs_through_the_table():
    """The primitives whose records used to call hand kernels themselves run them through the
    table now: each has a CPU implementation, and its run is the table's."""
    names = {p.name for p, _ in _cpu_rows()}
    for name in ("matmul", "softmax", "layer_norm", "cross_entropy", "max_pool2d",
                 "batch_norm_forward", "lstm_layer", "gru_layer", "rnn_layer", "attention_weights",
                 "index_add"):
        assert name in names
    prim = next(p for p, _ in _cpu_rows() if p.name == "softmax")
    assert prim.table_runs() and prim.run is prim.dispatch


def test_a_registration_needs_a_known_platform_and_callables():
    from tracejit.ops.softmax_prim import SOFTMAX
    with pytest.raises(ValueError, match="unknown platform 'tpu'"):
        impls.register(SOFTMAX, lambda *a, **k: None, platform="tpu")
    with pytest.raises(TypeError, match="softmax's implementation and checker must be callable"):
        impls.register(SOFTMAX, "not a function")
    assert all(p.name != "softmax" or i.name != "not a function" for p, _, i in impls.registered())


def test_the_runner_tries_implementations_in_order_then_the_numpy_form(monkeypatch):
    from tracejit.ops.registry import Aval, defprim
    seen = []
    prim = defprim("_impls_probe", lambda xp, x: seen.append("numpy") or x + 1,
                   lambda x: Aval(x.shape, x.dtype), kind="other")
    monkeypatch.setattr(impls, "_TABLE", dict(impls._TABLE))
    impls.register(prim, lambda x: seen.append("declines") or None, name="declines")
    impls.register(prim, lambda x: seen.append("refused"), checker=lambda x: False, name="refused")
    x = np.ones(3)
    assert np.array_equal(prim.run(np, x), x + 1) and seen == ["declines", "numpy"]
    impls.register(prim, lambda x: seen.append("takes") or x * 5, name="takes")
    seen.clear()
    assert np.array_equal(tj.ops.eager.bind(prim, tj.tensor(x)).numpy(), x * 5)
    assert seen == ["declines", "takes"]
