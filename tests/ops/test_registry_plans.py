"""Eager dispatch plans (ops/registry.py): which calls get one, and that a call taking a
plan gives what the general path gives."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.ops import indexing


def test_basic_indexing_has_a_plan_per_index_spec():
    x = tj.tensor(np.arange(24, dtype=np.float32).reshape(4, 6))
    indexing.GETITEM.plans.clear()
    first = [x[1].numpy().copy(), x[1:3, ::2].numpy().copy()]
    assert len(indexing.GETITEM.plans) == 2  # one per (shape, dtype, spec)
    # The second calls take the plans: the same values, and still views of x.
    assert np.array_equal(x[1].numpy(), first[0]) and np.array_equal(x[1:3, ::2].numpy(), first[1])
    assert np.array_equal(x[2].numpy(), np.arange(12, 18, dtype=np.float32))  # another spec
    v = x[1]
    assert v._base is x and v._vbox is x._vbox
    x.add_(1.0)
    assert v._version == x._version and v.numpy()[0] == 7.0


def test_a_spec_with_a_non_constant_item_takes_the_general_path():
    # A slice bound that is not a plain int (a 0-d numpy integer here) keeps no plan key.
    x = tj.tensor(np.arange(10, dtype=np.float32))
    indexing.GETITEM.plans.clear()
    r = x[np.int64(2):np.int64(5)]
    np.testing.assert_array_equal(r.numpy(), [2.0, 3.0, 4.0])
    assert r._base is x and not indexing.GETITEM.plans


def test_kept_index_specs_are_taken_by_identity_and_other_tuples_still_checked():
    # basic indexing keeps its spec per index (remember_plain): bind takes it again without
    # checking its items; an equal spec holding a numpy integer takes the general path
    from tracejit.ops import eager
    x = tj.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    indexing.GETITEM.plans.clear()
    indexing._SPECS.clear()
    first = x[1:3]
    spec = indexing._SPECS[(2, slice, ((1, 3, None),))]
    assert eager._PLAIN.get(id(spec)) is spec and len(indexing.GETITEM.plans) == 1
    np.testing.assert_array_equal(x[1:3].numpy(), first.numpy())
    indexing.GETITEM.plans.clear()
    odd = (("s", np.int64(1), 3, None),)
    eager.remember_plain(odd)   # (not plain: ignored)
    r = eager.bind(indexing.GETITEM, x, spec=odd)
    np.testing.assert_array_equal(r.numpy(), x.numpy()[1:3])
    assert not indexing.GETITEM.plans and eager._PLAIN.get(id(odd)) is None


def test_a_permute_plan_is_lean_and_a_view():
    from tracejit.ops import shape
    x = tj.tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    shape.PERMUTE.plans.clear()
    ys = [x.permute(1, 0, 2) for _ in range(2)]
    (plan,) = shape.PERMUTE.plans.values()
    assert plan.lean is not None
    for y in ys:
        np.testing.assert_array_equal(y.numpy(), x.numpy().transpose(1, 0, 2))
        assert y._base is x and np.shares_memory(y.numpy(), x.numpy())


@pytest.mark.parametrize("grad", [False, True])
def test_indexing_through_a_plan_records_its_gradient(grad):
    x = tj.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=grad)
    for _ in range(2):  # the second call takes the plan
        y = x[1]
    assert y.requires_grad is grad
    if grad:
        (y * 2).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), [[0, 0, 0], [2, 2, 2]])


def test_a_plan_keeps_the_records_numpy_call():
    # clamp's record gives its plans the one numpy call of that signature (extra["fast"]):
    # the second call takes it and gives what the impl gives, here bitwise (-0.0 and nan kept)
    from tracejit.ops import elementwise
    a = np.array([-1.0, -0.0, 0.0, np.nan, 2.0] * 60, np.float32).reshape(20, 15)
    want = elementwise._clamp_impl(np, a, 0, None)
    elementwise.CLAMP.plans.clear()
    x = tj.tensor(a)
    results = [x.clamp(min=0).numpy() for _ in range(2)]
    (plan,) = elementwise.CLAMP.plans.values()
    assert plan.fn is not None
    for r in results:
        assert np.array_equal(r.view(np.int32), want.view(np.int32))


def test_a_negative_zero_param_does_not_share_the_plan_of_zero():
    # -0.0 == 0 as a dict key; clamp's bound decides the sign of the result where x is below it
    x = tj.tensor(np.array([-1.0, 2.0], np.float32))
    for _ in range(2):
        assert not np.signbit(x.clamp(min=0).numpy()[0])
        assert np.signbit(x.clamp(min=-0.0).numpy()[0])
        assert np.signbit(x.clamp(max=-0.0).numpy()[0]) and x.clamp(max=-0.0).numpy()[1] == 0.0


def test_replacing_an_impl_drops_the_plans_made_with_the_old_one(monkeypatch):
    # Tests count an op's calls by replacing its impl: plans made before (with the record's
    # numpy call) must not bypass the replacement; putting the impl back restores the call.
    from tracejit.ops import linalg
    a, b = tj.tensor(np.ones((3, 4), np.float32)), tj.tensor(np.ones((4, 2), np.float32))
    a @ b  # a plan with the record's numpy call
    calls = []
    impl = linalg.MATMUL.impl
    monkeypatch.setattr(linalg.MATMUL, "impl", lambda xp, x, y: calls.append(x.shape) or impl(xp, x, y))
    assert np.array_equal((a @ b).numpy(), np.full((3, 2), 4.0, np.float32))
    assert calls == [(3, 4)]
    monkeypatch.undo()
    a @ b
    assert calls == [(3, 4)] and linalg.MATMUL.fast is not None
    assert next(iter(linalg.MATMUL.plans.values())).fn is not None


@pytest.mark.parametrize("name,arity", [("clamp", 1), ("clamp_backward", 2)])
def test_a_record_fast_call_takes_the_impls_defaults_for_params_not_given(name, arity):
    """bind(prim, ...) without params runs the impl with its defaults (min = max = None);
    the record's fast call must accept that too (it read params["min"]: KeyError)."""
    from tracejit.ops import registry
    prim = registry.REGISTRY[name]
    arrays = [np.random.default_rng(s).standard_normal(64).astype(np.float32) for s in range(arity)]
    for _ in range(2):                                  # the second call takes the plan
        out = registry.bind(prim, *[tj.tensor(a) for a in arrays])
        np.testing.assert_array_equal(out.numpy(), prim.impl(np, *arrays))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("layout", ["c", "transposed", "strided"])
def test_a_full_sum_through_its_plan_is_a_0d_array_bitwise_numpys_sum(dtype, layout):
    # A loss's .sum() over every dim: the plan's call reduces into a new 0-d array
    # (reductions._full_sum) instead of making one from numpy's scalar; same bits.
    rng = np.random.default_rng(3)
    base = (rng.standard_normal((67, 129)) * 100).astype(dtype)
    a = {"c": base, "transposed": base.T, "strided": base[::2, 1::3]}[layout]
    x = tj.tensor(base)
    x = {"c": x, "transposed": x.T, "strided": x[::2, 1::3]}[layout]
    want = np.asarray(np.add.reduce(a, axis=None), dtype=dtype)
    for _ in range(2):  # the second call takes the plan
        got = x.sum()._data
        assert type(got) is np.ndarray and got.shape == () and got.dtype == dtype
        assert got.tobytes() == want.tobytes()
    from tracejit.ops.reductions import SUM
    fns = [p.fn for k, p in SUM.plans.items() if k[0] == x._data.shape and k[1] == x.dtype]
    assert any(getattr(f, "__name__", "") == "full_sum" for f in fns)  # the path under test
    kept = x.sum(dim=(0, 1), keepdim=True)._data  # not a full sum to 0-d: numpy's own call
    assert kept.shape == (1, 1) and kept.tobytes() == want.tobytes()


@pytest.mark.parametrize("shape", [(3,), (4, 5), (2, 1, 3)])
def test_expanding_a_0d_value_through_its_plan_is_the_impls_read_only_view(shape):
    # sum's VJP expands the loss's 0-d gradient to the input's shape: the plan's call
    # (shape._expand_fast) makes the stride-0 view `_expand_impl` makes, a view of g.
    from tracejit.ops import registry
    from tracejit.ops.shape import EXPAND
    g = tj.tensor(np.float32(2.5))
    for _ in range(2):  # the second call takes the plan
        out = registry.bind(EXPAND, g, shape=shape)
        d = out._data
        assert d.shape == shape and d.strides == (0,) * len(shape) and d.dtype == np.float32
        assert not d.flags.writeable and np.shares_memory(d, g._data)
        np.testing.assert_array_equal(d, np.full(shape, 2.5, np.float32))
        assert out._base is g and out._vbox is g._vbox   # a view, as any expand
    fns = [p.fn for k, p in EXPAND.plans.items()
           if k[:2] == ((), g.dtype) and k[2] == (("shape", shape),)]
    assert [getattr(f, "__name__", "") for f in fns] == ["expand_view"]  # the path under test
    x = tj.tensor(np.ones((1, 3), np.float32))     # a non-0-d operand: its own strides kept
    assert registry.bind(EXPAND, x, shape=(2, 3))._data.strides == (0, 4)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_expanding_through_its_plan_keeps_each_operands_strides(dtype):
    # the plan's call keeps the view's strides per operand strides met C-contiguous; a
    # strided operand of the same signature takes the impl's broadcast
    import torch
    from tracejit.ops import registry
    from tracejit.ops.shape import EXPAND
    base = np.arange(32, dtype=dtype).reshape(16, 2)
    item = np.dtype(dtype).itemsize
    whole = tj.tensor(base)
    for x, strides in ((tj.tensor(base[:, :1].copy()), (0, item, 0)), (whole[:, :1], (0, 2 * item, 0)),
                       (tj.tensor(base[:, 1:].copy()), (0, item, 0)), (whole[:, 1:], (0, 2 * item, 0))):
        for _ in range(2):  # the second call takes the plan
            out = registry.bind(EXPAND, x, shape=(3, 16, 5))
            d = out._data
            assert d.shape == (3, 16, 5) and d.strides == strides and not d.flags.writeable
            assert np.shares_memory(d, x._data) and out._vbox is x._vbox
            np.testing.assert_array_equal(d, torch.from_numpy(x.numpy().copy()).expand(3, 16, 5).numpy())
    fns = [p.fn for k, p in EXPAND.plans.items() if k[:2] == ((16, 1), x.dtype)]
    assert [getattr(f, "__name__", "") for f in fns] == ["expand_view"]  # the path under test


# ---- lean plans (registry `_Plan.lean`): a plan whose numpy call is the whole op
def _fields(t):
    return (t.dtype, t.device, t._requires_grad, t.grad_fn, t._vbox, t._base, t._data.dtype,
            t._data.shape)


@pytest.mark.parametrize("op", ["mul", "add_scalar", "tanh", "reshape", "full_sum"])
def test_a_lean_plan_gives_what_the_first_call_gave_and_a_plain_result(op):
    from tracejit.ops import elementwise, reductions, shape
    a = np.array([1.5, -2.0, 0.25, 3.0, -0.0, 7.0], np.float32)
    b = np.array([2.0, 0.5, -4.0, 1.0, 3.0, -1.0], np.float32)
    x, y = tj.tensor(a), tj.tensor(b)
    prim, run, want = {
        "mul": (elementwise.MUL, lambda: x * y, a * b),
        "add_scalar": (elementwise.ADD, lambda: x + 0.5, a + np.float32(0.5)),
        "tanh": (elementwise.TANH, lambda: tj.tanh(x), np.tanh(a)),
        "reshape": (shape.RESHAPE, lambda: x.reshape(2, 3), a.reshape(2, 3)),
        "full_sum": (reductions.SUM, lambda: x.sum(), np.add.reduce(a)),
    }[op]
    prim.plans.clear()
    first = run()                      # the general path: makes the plan
    (plan,) = prim.plans.values()
    assert plan.lean is None
    second = run()                     # the plan's call: shows it needs nothing more
    assert plan.lean is not None and plan.lean is plan.fn
    third = run()                      # the lean call
    if op == "reshape":   # a lean view is still a view: x's memory and version counter
        assert third._base is x and third._vbox is x._vbox and np.shares_memory(third._data, x._data)
    for r in (first, second, third):
        assert np.array_equal(r.numpy().view(np.int32), np.asarray(want, np.float32).view(np.int32))
    # a lean result is the Tensor `Tensor._wrap` makes (no grad, its own version counter)
    ref = tj.Tensor._wrap(third._data, third.dtype, third.device)
    assert _fields(third)[:4] == _fields(ref)[:4] and third._vbox == [0]
    if op == "reshape":   # a view still shares its base's memory and version counter
        assert third._base is x and third._vbox is x._vbox
    else:
        assert third._base is None and third._vbox is not x._vbox


def test_no_lean_plan_where_the_call_casts_or_gives_a_numpy_scalar():
    from tracejit.ops import elementwise
    # float32 * float64: the plan casts an operand first, so its ufunc is not the whole op
    x32 = tj.tensor(np.array([1.0, 2.0], np.float32))
    x64 = tj.tensor(np.array([0.5, 0.25], np.float64))
    # 0-d operands: numpy's ufunc gives a numpy scalar, which the plan makes an array
    s1, s2 = tj.tensor(np.float32(3.0)), tj.tensor(np.float32(0.5))
    elementwise.MUL.plans.clear()
    for _ in range(3):
        r = x32 * x64
        z = s1 * s2
    assert r.dtype is tj.float64 and np.array_equal(r.numpy(), [0.5, 0.5])
    assert type(z._data) is np.ndarray and z._data.shape == () and float(z) == 1.5
    assert len(elementwise.MUL.plans) == 2
    assert all(p.lean is None for p in elementwise.MUL.plans.values())


def test_a_lean_plan_records_the_gradient_as_before():
    a = np.array([0.5, -1.0, 2.0], np.float32)
    x = tj.tensor(a, requires_grad=True)
    y = tj.tensor(np.array([3.0, 4.0, -2.0], np.float32))
    for _ in range(3):      # general path, plan path, lean path
        x.grad = None
        out = tj.tanh(x * y)
        assert out.requires_grad and out.grad_fn is not None
        out.sum().backward()
        t = np.tanh(a * y.numpy())
        np.testing.assert_allclose(x.grad.numpy(), (1 - t * t) * y.numpy(), rtol=1e-6)


def test_coarse_ops_keep_plans_and_give_the_general_paths_values():
    # softmax and argsort are "other" ops: their rules are pure too, so a signature keeps
    # a plan; the second call takes it and still reads the new values
    import torch
    from tracejit.ops import softmax_prim, tensorfns
    softmax_prim.SOFTMAX.plans.clear()
    tensorfns.ARGSORT.plans.clear()
    rng = np.random.default_rng(0)
    for _ in range(3):
        a = rng.standard_normal((4, 7)).astype(np.float32)
        got = tj.softmax(tj.tensor(a), dim=-1).numpy()
        np.testing.assert_allclose(got, torch.softmax(torch.from_numpy(a), -1).numpy(), rtol=1e-6, atol=1e-7)
        idx = tj.argsort(tj.tensor(a), dim=1, descending=True).numpy()
        np.testing.assert_array_equal(idx, torch.argsort(torch.from_numpy(a), dim=1, descending=True, stable=True).numpy())
    assert len(softmax_prim.SOFTMAX.plans) == 1 and len(tensorfns.ARGSORT.plans) == 1


def test_a_call_with_a_device_param_keeps_no_plan():
    # a plan's result is a CPU tensor: a call that names where its result lives keeps none
    from tracejit.ops import shape
    x = tj.tensor(np.arange(3, dtype=np.float32))
    shape.TO_DEVICE.plans.clear()
    for _ in range(2):
        r = tj.ops.eager.bind(shape.TO_DEVICE, x, device=x.device)
        np.testing.assert_array_equal(r.numpy(), [0.0, 1.0, 2.0])
    assert not shape.TO_DEVICE.plans


def test_a_three_operand_plan_is_lean_and_records_the_gradient():
    from tracejit.ops.elementwise_logic import WHERE
    c = tj.tensor(np.array([True, False, True]))
    a = np.array([0.5, -1.0, 2.0], np.float32)
    b = np.array([3.0, 4.0, -2.0], np.float32)
    x = tj.tensor(a, requires_grad=True)
    y = tj.tensor(b)
    WHERE.plans.clear()
    for _ in range(3):      # general path, plan path, lean path
        x.grad = None
        out = tj.where(c, x, y)
        np.testing.assert_array_equal(out.detach().numpy(), np.where(c.numpy(), a, b))
        assert out.requires_grad and out.grad_fn is not None
        (out * 2.0).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), [2.0, 0.0, 2.0])
    plan = WHERE.plans[((3,), tj.bool, (3,), tj.float32, (3,), tj.float32)]
    assert plan.lean is np.where
