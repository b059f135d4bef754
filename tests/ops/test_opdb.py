"""Per-op checks driven by the op database (tests/opdb.py).

For every record: forward vs numpy (values, shapes, result dtypes), gradients vs float64
central finite differences (the <g, J v> check), second derivatives the same way (VJPs
are written with ops, so they must themselves be differentiable), and, when PyTorch is
installed, forward values/dtypes and gradients vs PyTorch.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tracejit as tj
from opdb import OPS

try:
    import torch
except Exception:  # pragma: no cover - optional reference
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
# Samples include inf/nan on purpose; numpy's "invalid value" warnings are expected noise.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

DIFF_OPS = [op for op in OPS if op.grad and not op.random and tj.float64 in op.dtypes]
TORCH_OPS = [op for op in OPS if op.torch]
EPS = 1e-6


def _ids(ops):
    return [op.name for op in ops]


def _outs(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _samples(op, dtype, seed=0):
    return op.sample_inputs(dtype, np.random.default_rng(seed))


def _expected_dtype(sample, ref_dtype: np.dtype):
    """What PyTorch's promotion gives: floats follow the floating inputs (or the default
    float when there are none), ints follow the reference, comparisons give bool."""
    if ref_dtype.kind == "f":
        floats = [tj.dtypes.as_dtype(a.dtype) for a in sample.inputs if a.dtype.kind == "f"]
        out = None
        for d in floats:
            out = d if out is None else tj.dtypes.promote_types(out, d)
        return out or tj.get_default_dtype()
    return tj.dtypes.as_dtype(ref_dtype)


def _tols(op, dtype):
    if dtype is tj.float64:
        return 1e-7, 1e-10
    return op.rtol, op.atol


def _assert_close(actual: np.ndarray, expect: np.ndarray, rtol, atol, what):
    expect = np.asarray(expect)
    assert actual.shape == expect.shape, f"{what}: shape {actual.shape} != expected {expect.shape}"
    if actual.dtype.kind in "biu" and expect.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expect, err_msg=what)
    else:
        np.testing.assert_allclose(actual.astype(np.float64), expect.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=what)


# --------------------------------------------------------------------------- forward
@pytest.mark.parametrize("op", OPS, ids=_ids(OPS))
def test_forward_vs_numpy(op):
    for dtype in op.dtypes:
        for s in _samples(op, dtype):
            out = _outs(s.fn(*s.tensors()))
            if op.random:
                for o, a in zip(out, [s.inputs[0]]):
                    assert tuple(o.shape) == a.shape and o.dtype is dtype
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                expect = _outs(s.ref_fn(*s.inputs))
            assert len(out) == len(expect), f"{s}: {len(out)} outputs, expected {len(expect)}"
            rtol, atol = _tols(op, dtype)
            for k, (o, e) in enumerate(zip(out, expect)):
                e = np.asarray(e)
                assert isinstance(o, tj.Tensor), f"{s}: output {k} is {type(o).__name__}"
                want = _expected_dtype(s, e.dtype)
                assert o.dtype is want, f"{s}: output {k} dtype {o.dtype.name}, expected {want.name}"
                _assert_close(o.detach().numpy(), e, rtol, atol, f"{s} output {k}")


# --------------------------------------------------------------------------- gradients
def _float_positions(outs):
    return [k for k, o in enumerate(outs) if o.dtype.is_floating_point]


def _eval(s, xs, positions):
    with tj.no_grad():
        outs = _outs(s.fn(*[tj.tensor(x) for x in xs]))
    return [outs[k].numpy().astype(np.float64) for k in positions]


def _vjp(s, xs, gs_np, positions, create_graph=False):
    """(input tensors, gradients w.r.t. the sample's grad positions)."""
    ts = [tj.tensor(x) for x in xs]
    for i in s.grad:
        ts[i].requires_grad_()
    outs = _outs(s.fn(*ts))
    pairs = [(outs[k], g) for k, g in zip(positions, gs_np) if outs[k].requires_grad]
    if not pairs:
        return ts, [None] * len(s.grad)
    grads = tj.autograd.grad([o for o, _ in pairs], [ts[i] for i in s.grad],
                             grad_outputs=[tj.tensor(g) for _, g in pairs],
                             allow_unused=True, create_graph=create_graph)
    return ts, list(grads)


def _dot(grads, vs):
    total = 0.0
    for g, v in zip(grads, vs):
        if g is not None:
            total += float((g.detach().numpy().astype(np.float64) * v).sum())
    return total


def _f64_inputs(s):
    return [a.astype(np.float64) if a.dtype.kind == "f" else a for a in s.inputs]


@pytest.mark.parametrize("op", DIFF_OPS, ids=_ids(DIFF_OPS))
def test_grad_vs_finite_differences(op):
    rng = np.random.default_rng(1)
    for s in _samples(op, tj.float64):
        if not s.grad or not s.check_fd:
            continue
        xs = _f64_inputs(s)
        probe = _outs(s.fn(*[tj.tensor(x) for x in xs]))
        positions = _float_positions(probe)
        gs = [rng.standard_normal(probe[k].shape) for k in positions]
        vs = [rng.standard_normal(xs[i].shape) for i in s.grad]
        ts, grads = _vjp(s, xs, gs, positions)
        for i, g in zip(s.grad, grads):
            if g is not None:
                assert tuple(g.shape) == xs[i].shape, f"{s}: grad {i} shape {tuple(g.shape)} != {xs[i].shape}"
                assert g.dtype is tj.float64, f"{s}: grad {i} dtype {g.dtype}"
        analytic = _dot(grads, vs)
        plus = [x + EPS * v if i in s.grad else x for i, x in enumerate(xs)
                for v in [vs[s.grad.index(i)] if i in s.grad else None]]
        minus = [x - EPS * v if i in s.grad else x for i, x in enumerate(xs)
                 for v in [vs[s.grad.index(i)] if i in s.grad else None]]
        fp, fm = _eval(s, plus, positions), _eval(s, minus, positions)
        numeric = sum(float((((p - m) / (2 * EPS)) * g).sum()) for p, m, g in zip(fp, fm, gs))
        scale = max(1.0, abs(numeric))
        assert abs(analytic - numeric) <= 1e-5 * scale, f"{s}: <vjp, v> = {analytic}, finite differences {numeric}"


GRADGRAD_OPS = [op for op in DIFF_OPS]


@pytest.mark.parametrize("op", GRADGRAD_OPS, ids=_ids(GRADGRAD_OPS))
def test_second_derivative_vs_finite_differences(op):
    """d/dx <vjp(x; g), w> checked against finite differences of the first-order vjp."""
    rng = np.random.default_rng(2)
    checked = 0
    for s in _samples(op, tj.float64):
        if not s.grad or not s.check_fd or not s.gradgrad or checked >= 3:
            continue
        checked += 1
        xs = _f64_inputs(s)
        probe = _outs(s.fn(*[tj.tensor(x) for x in xs]))
        positions = _float_positions(probe)
        gs = [rng.standard_normal(probe[k].shape) for k in positions]
        ws = [rng.standard_normal(xs[i].shape) for i in s.grad]
        vs = [rng.standard_normal(xs[i].shape) for i in s.grad]

        def h(x_list):
            _, grads = _vjp(s, x_list, gs, positions)
            return _dot(grads, ws)

        ts, grads = _vjp(s, xs, gs, positions, create_graph=True)
        terms = [(g * tj.tensor(w)).sum() for g, w in zip(grads, ws) if g is not None and g.requires_grad]
        if terms:
            total = terms[0]
            for t in terms[1:]:
                total = total + t
            second = tj.autograd.grad(total, [ts[i] for i in s.grad], allow_unused=True)
            analytic = _dot(second, vs)
        else:
            analytic = 0.0  # the vjp does not depend on the inputs (a linear op)
        eps = 1e-5
        plus = list(xs)
        minus = list(xs)
        for i, v in zip(s.grad, vs):
            plus[i] = xs[i] + eps * v
            minus[i] = xs[i] - eps * v
        numeric = (h(plus) - h(minus)) / (2 * eps)
        scale = max(1.0, abs(numeric))
        assert abs(analytic - numeric) <= 1e-4 * scale, f"{s}: second-order {analytic} vs finite differences {numeric}"


# --------------------------------------------------------------------------- vs PyTorch
def _to_torch(a, requires_grad=False):
    t = torch.from_numpy(np.array(a, copy=True))
    if requires_grad:
        t.requires_grad_()
    return t


def _torch_dtype_name(t):
    return str(t.dtype).replace("torch.", "")


@needs_torch
@pytest.mark.parametrize("op", TORCH_OPS, ids=_ids(TORCH_OPS))
def test_forward_vs_torch(op):
    for dtype in op.dtypes:
        for s in _samples(op, dtype):
            ours = _outs(s.fn(*s.tensors()))
            theirs = _outs(s.torch_fn(*[_to_torch(a) for a in s.inputs]))
            assert len(ours) == len(theirs), f"{s}: {len(ours)} outputs vs torch {len(theirs)}"
            rtol, atol = _tols(op, dtype)
            for k, (o, t) in enumerate(zip(ours, theirs)):
                assert o.dtype.name == _torch_dtype_name(t), \
                    f"{s}: output {k} dtype {o.dtype.name}, torch gives {t.dtype}"
                assert tuple(o.shape) == tuple(t.shape), f"{s}: output {k} shape {tuple(o.shape)} vs torch {tuple(t.shape)}"
                if not op.random:
                    _assert_close(o.detach().numpy(), t.detach().numpy(), rtol, atol, f"{s} output {k} vs torch")


@needs_torch
@pytest.mark.parametrize("op", [op for op in DIFF_OPS if op.torch], ids=_ids([op for op in DIFF_OPS if op.torch]))
def test_grad_vs_torch(op):
    rng = np.random.default_rng(3)
    for s in _samples(op, tj.float64):
        if not s.grad:
            continue
        xs = _f64_inputs(s)
        probe = _outs(s.fn(*[tj.tensor(x) for x in xs]))
        positions = _float_positions(probe)
        gs = [rng.standard_normal(probe[k].shape) for k in positions]
        _, grads = _vjp(s, xs, gs, positions)
        tts = [_to_torch(x, requires_grad=i in s.grad) for i, x in enumerate(xs)]
        touts = _outs(s.torch_fn(*tts))
        pairs = [(touts[k], g) for k, g in zip(positions, gs) if touts[k].requires_grad]
        if not pairs:
            assert all(g is None for g in grads)
            continue
        tgrads = torch.autograd.grad([o for o, _ in pairs], [tts[i] for i in s.grad],
                                     grad_outputs=[torch.from_numpy(g) for _, g in pairs], allow_unused=True)
        for i, g, tg in zip(s.grad, grads, tgrads):
            ours = np.zeros(xs[i].shape) if g is None else g.detach().numpy()
            theirs = np.zeros(xs[i].shape) if tg is None else tg.numpy()
            _assert_close(ours, theirs, 1e-7, 1e-9, f"{s}: gradient of input {i} vs torch")


# --------------------------------------------------------------------------- dtype promotion
def _t(dtype, shape=(2,)):
    return tj.ones(*shape, dtype=dtype)


@pytest.mark.parametrize("make, expect", [
    (lambda: _t(tj.float32) * 2.5, tj.float32),          # a Python float does not widen f32
    (lambda: _t(tj.float16) + 1.0, tj.float16),
    (lambda: _t(tj.float64) * 2, tj.float64),
    (lambda: _t(tj.int64) / 2, tj.float32),              # true division of ints -> default float
    (lambda: _t(tj.int32) / _t(tj.int32), tj.float32),
    (lambda: _t(tj.int64) * 1.5, tj.float32),            # int tensor * Python float -> default float
    (lambda: _t(tj.int32) + 1, tj.int32),                # a Python int does not widen int32
    (lambda: _t(tj.uint8) + 300, tj.uint8),
    (lambda: _t(tj.float32) + _t(tj.float64), tj.float64),
    (lambda: _t(tj.int32) + _t(tj.int64), tj.int64),
    (lambda: _t(tj.int64) + _t(tj.float32), tj.float32),   # not numpy's float64
    (lambda: _t(tj.int32) * _t(tj.float16), tj.float16),
    (lambda: _t(tj.uint8) + _t(tj.int8), tj.dtypes.int16),
    (lambda: _t(tj.bool_) + _t(tj.bool_), tj.bool_),
    (lambda: _t(tj.bool_) + 1, tj.int64),
    (lambda: _t(tj.bool_) * 1.5, tj.float32),
    (lambda: _t(tj.float32) + _t(tj.float64, ()), tj.float32),  # 0-d tensors rank below dimensioned ones
    (lambda: _t(tj.int64) + _t(tj.float64, ()), tj.float64),    # ...unless of a higher category
    (lambda: _t(tj.int32, ()) + _t(tj.int64, ()), tj.int64),
    (lambda: _t(tj.float32) < 1, tj.bool_),
    (lambda: _t(tj.int64) == _t(tj.float32), tj.bool_),
    (lambda: tj.where(_t(tj.bool_), _t(tj.int64), 1.5), tj.float32),
    (lambda: tj.where(_t(tj.bool_), _t(tj.float32), _t(tj.float64)), tj.float64),
    (lambda: tj.cat([_t(tj.int64), _t(tj.float32)]), tj.float32),
    (lambda: tj.exp(_t(tj.int64)), tj.float32),
    (lambda: tj.sqrt(_t(tj.int32)), tj.float32),
    (lambda: tj.sum(_t(tj.int32)), tj.int64),
    (lambda: tj.sum(_t(tj.bool_)), tj.int64),
    (lambda: tj.abs(_t(tj.int32)), tj.int32),
    (lambda: tj.clamp(_t(tj.int64), min=0.5), tj.float32),
    (lambda: tj.clamp(_t(tj.int64), min=0), tj.int64),
    (lambda: tj.div(_t(tj.int64), 2, rounding_mode="floor"), tj.int64),
    (lambda: tj.div(_t(tj.int64), 2, rounding_mode="trunc"), tj.int64),
    (lambda: _t(tj.int64) // 2, tj.int64),
    (lambda: _t(tj.float32) ** 2, tj.float32),
    (lambda: 2 ** _t(tj.int64), tj.int64),
    (lambda: 2.0 ** _t(tj.int64), tj.float32),
    (lambda: tj.argmax(_t(tj.float32)), tj.int64),
    (lambda: tj.mean(_t(tj.float16)), tj.float16),
])
def test_result_dtypes_follow_pytorch(make, expect):
    assert make().dtype is expect


def test_default_dtype_changes_float_results():
    tj.set_default_dtype(tj.float64)
    try:
        assert (_t(tj.int64) / 2).dtype is tj.float64
        assert tj.tensor([1.5]).dtype is tj.float64
        assert (_t(tj.float32) * 2.5).dtype is tj.float32
    finally:
        tj.set_default_dtype(tj.float32)


_PROMO_DTYPES = [tj.bool_, tj.uint8, tj.int8, tj.dtypes.int16, tj.int32, tj.int64, tj.float16, tj.float32, tj.float64]


@needs_torch
@pytest.mark.parametrize("shape_b", [(2,), ()], ids=["tensor", "0-d"])
def test_promotion_table_matches_torch(shape_b):
    for da in _PROMO_DTYPES:
        for db in _PROMO_DTYPES:
            ours = (_t(da) + _t(db, shape_b)).dtype if not (da is db is tj.bool_) else tj.bool_
            ta = torch.ones(2, dtype=getattr(torch, da.name))
            tb = torch.ones(shape_b, dtype=getattr(torch, db.name))
            assert ours.name == _torch_dtype_name(ta + tb), f"{da.name} + {db.name}{list(shape_b)}"
        for scalar in (True, 2, 2.5):
            ours = (_t(da) * scalar).dtype
            theirs = torch.ones(2, dtype=getattr(torch, da.name)) * scalar
            assert ours.name == _torch_dtype_name(theirs), f"{da.name} * {scalar!r}"


def test_integer_division_is_exact_for_large_values():
    big = tj.tensor([2**25 + 3, -(2**40 + 7)])
    assert (big // 2).tolist() == [(2**25 + 3) // 2, -(2**40 + 7) // 2]
    assert (big % 7).tolist() == [(2**25 + 3) % 7, -(2**40 + 7) % 7]
    assert tj.div(big, 2, rounding_mode="trunc").tolist() == [(2**25 + 3) // 2, -((2**40 + 7) // 2)]
    assert (7 // tj.tensor([2, -2])).tolist() == [3, -4] and (7 % tj.tensor([-3])).tolist() == [-2]


# --------------------------------------------------------------------------- shape/dtype rules
@pytest.mark.parametrize("op", [op for op in OPS if op.traceable], ids=_ids([op for op in OPS if op.traceable]))
def test_shape_rules_agree_with_implementations(op, monkeypatch):
    """Every primitive's rule (what tracing and the compiler see) must give exactly the
    shape and dtype its eager implementation produces, for every op in the database."""
    from tracejit.ops import eager, registry

    original = eager._eager
    seen = []

    def checked(prim, args, params):
        result = original(prim, args, params)
        avals = [registry.Aval(a._data.shape, a.dtype, a.device) if isinstance(a, tj.Tensor)
                 else registry.scalar_aval(a, prim) for a in args]
        out_aval, _ = registry.prepare(prim, args, avals, params)
        assert tuple(out_aval.shape) == tuple(result.shape), \
            f"{prim.name}{params}: rule says {out_aval.shape}, implementation gives {result.shape}"
        assert out_aval.dtype is result.dtype, f"{prim.name}: rule says {out_aval.dtype}, got {result.dtype}"
        seen.append(prim.name)
        return result

    monkeypatch.setattr(eager, "_eager", checked)
    for dtype in op.dtypes:
        for s in _samples(op, dtype):
            ts = s.tensors(requires_grad=True)
            out = [o for o in _outs(s.fn(*ts)) if o.requires_grad]
            if out:  # the backward pass runs primitives too
                tj.autograd.grad(out, [ts[i] for i in s.grad], [tj.ones_like(o) for o in out], allow_unused=True)


@pytest.mark.parametrize("args", [(5,), (1, 7, 2), (0.0, 1.0, 0.1), (1.0, -1.0, -0.3), (3, 3), (0.5, 2.25, 0.25)])
def test_arange_rule_length(args):
    from tracejit.ops.creation import ARANGE
    start, end, step = (0, args[0], 1) if len(args) == 1 else (args + (1,))[:3]
    aval = ARANGE.rule(start, end, step, dtype=tj.float64, device=tj.device("cpu"))
    assert aval.shape == np.arange(start, end, step).shape
