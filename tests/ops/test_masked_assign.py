"""``a[mask] = b[mask]`` and ``a[mask] = v`` inside a compiled function
(ops/masked_assign.py): captured as a ``where`` (one compile, no eager fallback), with
PyTorch's values and gradients; other uses of ``b[mask]`` compile with a data-dependent
size (ops/host_steps.py)."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

A = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
B = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)


def _same_mask(lib, a, b):
    a = a * 1.0
    m = b < a
    a[m] = b[m]
    return a


def _rows(lib, a, b):
    a = a * 1.0
    m = b[:, 0] > 0
    a[m] = b[m]
    return a


def _row_value(lib, a, b):
    a = a * 1.0
    m = b[:, 0] > 0
    a[m] = b[0]
    return a


def _number(lib, a, b):
    a = a * 1.0
    m = b > 0
    a[m] = 0.5
    return a


def _zero_dim(lib, a, b):
    a = a * 1.0
    a[(b > 0,)] = b.sum()
    return a


def _integers(lib, a, b):
    a = (a * 10).long()
    m = b > 0
    a[m] = (b * 10).long()[m]
    return a.float() * 1.0


def _mask_written_twice(lib, a, b):
    a = a * 1.0
    a[b > 0] = b[b > 0]
    return a


def _updates(lib, a, b):
    a = a * 1.0
    m = b > 0
    a[m] += 1.0
    a[m] *= 2.0
    a[b < 0] = -b[b < 0] / 4.0 + 1.0
    return a


def _rows_per_selected(lib, a, b):
    a = a * 1.0
    a[lib.tensor(ROW_MASK)] = b[:3] * 3.0   # (a row per selected row)
    return a


ROW_MASK = np.array([True, False, True, True, False])
CAPTURED = [_same_mask, _rows, _row_value, _number, _zero_dim, _integers, _mask_written_twice, _updates,
            _rows_per_selected]


@pytest.mark.parametrize("fn", CAPTURED, ids=lambda f: f.__name__)
def test_captured_as_a_where_with_torchs_values_and_gradients(fn):
    at, bt = (torch.tensor(v, requires_grad=True) for v in (A, B))
    want = fn(torch, at, bt)
    w = np.arange(want.numel(), dtype=np.float32).reshape(tuple(want.shape))
    if want.requires_grad:
        (want * torch.tensor(w)).sum().backward()
    aj, bj = (tj.tensor(v, requires_grad=True) for v in (A, B))
    f = tj.compile(lambda a, b: fn(tj, a, b))
    got = f(aj, bj)
    if got.requires_grad:
        (got * tj.tensor(w)).sum().backward()
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
    for t, j in ((at, aj), (bt, bj)):
        assert (t.grad is None) == (j.grad is None)
        if t.grad is not None:
            np.testing.assert_allclose(j.grad.numpy(), t.grad.numpy(), rtol=1e-6)
    stats = f.cache_stats()
    assert stats["compiles"] == 1 and stats["eager_fallbacks"] == 0
    f(tj.tensor(B, requires_grad=True), tj.tensor(A, requires_grad=True))   # other values, same graph
    assert f.cache_stats()["compiles"] == 1


def test_in_place_into_an_argument():
    def fn(a, b):
        m = b < a
        a[m] = b[m]
        return a.sum()
    at, bt = torch.tensor(A), torch.tensor(B)
    want = fn(at, bt)
    aj = tj.tensor(A)
    f = tj.compile(fn)
    got = f(aj, tj.tensor(B))
    np.testing.assert_allclose(aj.numpy(), at.numpy())
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-6)
    assert f.cache_stats()["compiles"] == 1


def test_value_of_the_selected_size():
    """``a[mask] = v`` with v holding one element (row) per True, in order: captured as a
    where of v's rows, its count checked on every call as eager's."""
    def fn(lib, a, v):
        a = a * 1.0
        a[a > 0] = v * v
        return a
    n = int((A > 0).sum())
    v = np.arange(n, dtype=np.float32)
    at, vt = torch.tensor(A, requires_grad=True), torch.tensor(v, requires_grad=True)
    want = fn(torch, at, vt)
    want.pow(2).sum().backward()
    aj, vj = tj.tensor(A, requires_grad=True), tj.tensor(v, requires_grad=True)
    f = tj.compile(lambda a, v: fn(tj, a, v))
    got = f(aj, vj)
    got.pow(2).sum().backward()
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    np.testing.assert_array_equal(vj.grad.numpy(), vt.grad.numpy())
    np.testing.assert_array_equal(aj.grad.numpy(), at.grad.numpy())
    other = -A   # (another count of True: the same graph checks it)
    m = int((other > 0).sum())
    assert m != n
    with pytest.raises(tj.errors.ShapeError, match="cannot be broadcast"):
        f(tj.tensor(other), vj)
    assert f.cache_stats()["compiles"] == 1 and f.cache_stats()["eager_fallbacks"] == 0


def test_an_empty_value_refuses_a_selecting_mask_on_every_path():
    f = tj.compile(lambda a, m, v: _put(a, m, v))
    with pytest.raises(tj.errors.ShapeError, match="cannot be broadcast"):
        f(tj.zeros(3), tj.tensor([True, False, False]), tj.zeros(0))
    assert f(tj.arange(3.0), tj.tensor([False, False, False]), tj.zeros(0)).tolist() == [0.0, 1.0, 2.0]


def _put(t, mask, v):
    """A copy of `t` with ``t[mask] = v`` (returned, so its values are compared)."""
    t = t.clone()
    t[mask] = v
    return t


OTHER_USES = {
    "reduced": lambda a, b: a[b > 0].sum(),
    "returned": lambda a, b: a[b > 0],
    "another_mask": lambda a, b: _put(a, b > 0, a[b < 0]),
    "another_operand": lambda a, b: _put(a, b > 0, b[a > 0]),
    "other_shape": lambda a, b: _put(b[:, :2], b[:, :2] > 0, a[b > 0]),
    "arithmetic": lambda a, b: a[b > 0] * 2.0,
    "with_a_tensor": lambda a, b: _put(a, b > 0, a[b > 0] * b[b > 0]),
}


@pytest.mark.parametrize("name", list(OTHER_USES))
def test_other_uses_compile_with_a_data_dependent_size(name):
    fn = OTHER_USES[name]
    f = tj.compile(fn)
    try:
        want = fn(torch.tensor(A), torch.tensor(B))
    except Exception:   # (a mask of another count: PyTorch raises too, and so does the call)
        with pytest.raises(Exception):
            f(tj.tensor(A), tj.tensor(B))
        return
    for a, b in ((A, B), (B, A)):   # (another count of True: the same entry)
        want = fn(torch.tensor(a), torch.tensor(b))
        got = f(tj.tensor(a), tj.tensor(b))
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    stats = f.cache_stats()
    assert stats["compiles"] == 1 and stats["eager_fallbacks"] == 0
