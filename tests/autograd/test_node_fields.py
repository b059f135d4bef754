"""A recorded op's node is the same whichever recording path made it: `record_binary` and
`record_unary` set a PrimNode's fields themselves (one call less per recorded op), the
general `_record` through `_attach`; the three must agree field by field."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.autograd import node as N
from tracejit.ops import elementwise as E

_FIELDS = ("_next", "_nrs", "next_functions", "num_outputs", "_hooks", "_freed", "_meta", "prim",
           "params", "saved", "versions", "out", "_out_v", "_out_dtype", "_out_device")


def _same(u, v) -> bool:
    if isinstance(u, tuple) and isinstance(v, tuple):
        return len(u) == len(v) and all(_same(a, b) for a, b in zip(u, v))
    if isinstance(u, (np.ndarray, list, tj.Tensor)) or isinstance(v, (np.ndarray, list, tj.Tensor)):
        return u is v
    return u == v


def _general(prim, args, params, result_of):
    """The node `_record` (the general path, through `_attach`) makes for these operands."""
    r = result_of()
    N._record(prim, args, params, r, None)
    return r


@pytest.mark.parametrize("case", ["both", "left", "right", "scalar", "unary_keep", "unary_out"])
def test_the_fast_recording_paths_make_the_general_paths_node(case):
    a = tj.tensor(np.array([0.5, -1.5, 2.0], np.float32), requires_grad=True)
    b = tj.tensor(np.array([3.0, 0.25, -2.0], np.float32), requires_grad=case != "left")
    c = tj.tensor(np.array([1.0, 2.0, 4.0], np.float32))
    if case in ("both", "left"):
        prim, args, params = E.MUL, (a, b), {}
    elif case == "right":
        prim, args, params = E.MUL, (c, b), {}
    elif case == "scalar":
        prim, args, params = E.SUB, (a, 2.0), {}
    elif case == "unary_keep":
        prim, args, params = E.SIN, (a,), {}
    else:   # tanh keeps its output, not its input
        prim, args, params = E.TANH, (a,), {}
    out = tj.ops.registry.bind(prim, *args, **params)
    out = tj.ops.registry.bind(prim, *args, **params)   # (the plan's path: record_*)
    fast = out.grad_fn
    ref = _general(prim, args, params, lambda: tj.Tensor._wrap(out._data, out.dtype, out.device))
    # (the output snapshot holds the result's own version counter: compare it by value)
    ref_node = ref.grad_fn
    for f in _FIELDS:
        u, v = getattr(fast, f, None), getattr(ref_node, f, None)   # (no _out_* when out is None)
        if f == "_meta":   # (the general path builds it as a list when no plan gave it)
            assert tuple(u) == tuple(v), f
        elif f == "out" and u is not None:
            assert u is v and fast._out_box == ref_node._out_box, f
        else:
            assert _same(u, v), (f, u, v)
    assert out.requires_grad and ref.requires_grad and type(fast) is type(ref_node) is N.PrimNode
    # and the gradient through the fast node is the right one
    out.sum().backward()
    x = a.detach().numpy()
    want = {"both": b.detach().numpy(), "left": b.detach().numpy(), "right": None,
            "scalar": np.ones(3, np.float32), "unary_keep": np.cos(x),
            "unary_out": 1 - np.tanh(x) ** 2}[case]
    if want is None:
        assert a.grad is None and np.array_equal(b.grad.numpy(), c.numpy())
    else:
        np.testing.assert_allclose(a.grad.numpy(), want, rtol=1e-6)


def test_after_an_in_place_write_view_operands_keep_the_binary_path(monkeypatch):
    # the first in-place write under autograd makes views checked from then on; an op on
    # two operands, views or not, still records through record_binary's own path (which
    # checks a view operand itself), and the gradients are the same
    from tracejit.autograd import views
    was = views.ACTIVE[0]
    views.ACTIVE[0] = True
    try:
        _check_view_recording(monkeypatch)
    finally:
        views.ACTIVE[0] = was


def _check_view_recording(monkeypatch):
    calls = []
    real = N._record
    monkeypatch.setattr(N, "_record", lambda *a: (calls.append(a[0].name), real(*a))[1])
    a = tj.tensor(np.array([0.5, -1.5, 2.0], np.float32), requires_grad=True)
    b = tj.tensor(np.array([3.0, 0.25, -2.0], np.float32), requires_grad=True)
    y = a * b
    assert calls == []
    v = a[1:]                     # a view of a leaf: checked on the binary path
    z = v * b[:2]
    assert "mul" not in calls
    (y.sum() + z.sum()).backward()
    np.testing.assert_array_equal(a.grad.numpy(), [3.0, 0.25 + 3.0, -2.0 + 0.25])
    np.testing.assert_array_equal(b.grad.numpy(), [0.5 - 1.5, -1.5 + 2.0, 2.0])


def test_nodes_that_keep_no_tensor_share_their_saved_tuples():
    """Whatever a node keeps that is no tensor (a shape stand-in, nothing) is one shared
    tuple, so recording a reshape or an add makes no container the collector counts; the
    gradients are those of the ops."""
    x = tj.tensor(np.arange(6.0), requires_grad=True)
    a, b = x.reshape(2, 3), x.reshape(3, 2)
    s, t = x + x, x - x
    assert a.grad_fn.saved is b.grad_fn.saved and len(a.grad_fn.saved) == 1
    assert s.grad_fn.saved is t.grad_fn.saved == (None, None)
    assert (x * x).grad_fn.versions is (x * s).grad_fn.versions == (0, 0)   # (never written)
    (a.sum() * 2 + b.sum() + s.sum() + t.sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(6, 5.0))
