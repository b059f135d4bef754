"""In-place methods written straight into the tensor's memory (tensor_inplace.py `_into`,
ops/eager_into.py `run_into`): the same values, versions and errors as the out-of-place
result copied back (`_assign`), which still handles everything autograd or tracing sees."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import DTypeError, ShapeError
from tracejit.ops import eager_into


def _twice(fn):
    """Run `fn` twice: the first call of a signature makes its plan (out-of-place path),
    the second takes the in-place path."""
    fn()
    fn()


def test_sgd_style_update_writes_into_the_same_memory():
    r = np.random.default_rng(0)
    w0 = r.standard_normal((50, 20)).astype(np.float32)
    g = r.standard_normal((50, 20)).astype(np.float32)
    w = tj.tensor(w0.copy(), requires_grad=True)
    w.grad = tj.tensor(g)
    data = w._data
    expected = w0.copy()
    with tj.no_grad():
        for _ in range(3):
            w -= 0.01 * w.grad
            expected = expected - np.float32(0.01) * g
    assert w._data is data                      # no new array, nothing rebound
    np.testing.assert_array_equal(w.detach().numpy(), expected)  # bitwise the out-of-place result
    assert w._version == 3
    assert w.requires_grad and w.grad_fn is None


@pytest.mark.parametrize("method, other, ref", [
    ("add_", 2.5, lambda x: x + np.float32(2.5)),
    ("sub_", 3, lambda x: x - np.float32(3)),
    ("mul_", -1.5, lambda x: x * np.float32(-1.5)),
    ("div_", 7.0, lambda x: x / np.float32(7.0)),
    ("neg_", None, lambda x: -x),
    ("exp_", None, np.exp),
    ("sqrt_", None, lambda x: np.sqrt(np.abs(x))),
])
def test_each_method_matches_the_out_of_place_op(method, other, ref):
    r = np.random.default_rng(1)
    base = r.standard_normal(33).astype(np.float32)
    if method == "sqrt_":
        base = np.abs(base)
    for _ in range(2):   # plan first, then the in-place path
        x = tj.tensor(base.copy())
        data = x._data
        getattr(x, method)(*(() if other is None else (other,)))
        assert x._data is data
        np.testing.assert_array_equal(x.numpy(), ref(base))


def test_tensor_operand_broadcast_and_alpha():
    x0 = np.arange(12, dtype=np.float64).reshape(3, 4)
    b = np.array([1.0, -2.0, 0.5, 4.0])
    for _ in range(2):
        x = tj.tensor(x0.copy())
        x.add_(tj.tensor(b), alpha=3)
        np.testing.assert_array_equal(x.numpy(), x0 + 3 * b)
        x.sub_(tj.tensor(b))
        np.testing.assert_array_equal(x.numpy(), x0 + 2 * b)


_OVERLAPS = {   # written-to tensor and input: partly the same memory (PyTorch raises) or not
    "y[1:] = y[:-1]": lambda L, y: y.__setitem__(slice(1, None), y[:-1]),
    "y[1:].copy_(y[:-1])": lambda L, y: y[1:].copy_(y[:-1]),
    "y[1:].add_(y[:-1])": lambda L, y: y[1:].add_(y[:-1]),
    "y[1:] *= y[:-1]": lambda L, y: y[1:].__imul__(y[:-1]),
    "y[1:3].copy_(y[2])": lambda L, y: y[1:3].copy_(y[2]),
    "y.view(2, 4).copy_(y[:4])": lambda L, y: y.view(2, 4).copy_(y[:4]),
    "y.view(2, 4).copy_(y.view(4, 2).t())": lambda L, y: y.view(2, 4).copy_(y.view(4, 2).t()),
    "y[:4] = y[4:]": lambda L, y: y.__setitem__(slice(None, 4), y[4:]),
    "y[1:3] = y[2]": lambda L, y: y.__setitem__(slice(1, 3), y[2]),
    "y.add_(y)": lambda L, y: y.add_(y),
    "y.copy_(y.view(2, 4).view(8))": lambda L, y: y.copy_(y.view(2, 4).view(8)),
    "y[::2].add_(y[1::2])": lambda L, y: y[::2].add_(y[1::2]),
    "y[:, :2] = y[:2] (gaps)": lambda L, y: y.view(4, 2)[:, :1].__setitem__(slice(None), y.view(2, 4)[:, :2].reshape(4, 1)),
    "y[1:].clamp_(min=y[:-1])": lambda L, y: y[1:].clamp_(min=y[:-1]),
    "y[1:].clamp_(min=y[2])": lambda L, y: y[1:].clamp_(min=y[2]),
    "y.index_add_(0, i, y[:2])": lambda L, y: y.index_add_(0, L.tensor([0, 1]), y[:2]),
    "y[1:].scatter_(0, i, y[:2])": lambda L, y: y[1:].scatter_(0, L.tensor([0, 1]), y[:2]),
    "y[1:].index_put_((i,), y[2])": lambda L, y: y[1:].index_put_((L.tensor([0, 1]),), y[2]),
    "y.scatter_add_(0, i, y) (all shared)": lambda L, y: y.scatter_add_(0, L.arange(8), y),
    "y.put_(i, y) (all shared)": lambda L, y: y.put_(L.arange(8).flip(0), y),
    "y[i] = y[:2]": lambda L, y: y.__setitem__(L.tensor([5, 6]), y[:2]),
    "y[i] = y[2]": lambda L, y: y.__setitem__(L.tensor([5, 6]), y[2]),
    "y[y > 5] = y[2]": lambda L, y: y.__setitem__(y > 5, y[2]),
    "y[...] = y": lambda L, y: y.__setitem__(Ellipsis, y),
    "y[1:].lerp_(y[:-1], 0.5)": lambda L, y: y[1:].lerp_(y[:-1], 0.5),
    "y[1:].addcmul_(y[:-1], y[:-1])": lambda L, y: y[1:].addcmul_(y[:-1], y[:-1]),
    "y[1:].sub_(y[:-1], alpha=2)": lambda L, y: y[1:].sub_(y[:-1], alpha=2),
    "y[1:].pow_(y[:-1])": lambda L, y: y[1:].pow_(y[:-1]),
    "y[1:].masked_fill_(m, y[2])": lambda L, y: y[1:].masked_fill_(y[1:] > 2, y[2]),
    "y[1:].index_fill_(0, i, y[2])": lambda L, y: y[1:].index_fill_(0, L.tensor([0]), y[2]),
    "y[:4].view(2, 2).addmm_(y[1:5], y[4:])": lambda L, y: y[:4].view(2, 2).addmm_(y[1:5].view(2, 2),
                                                                                    y[4:].view(2, 2)),
}


@pytest.mark.parametrize("form", list(_OVERLAPS))
def test_partial_overlap_of_input_and_written_tensor_raises_as_pytorch(form):
    torch = pytest.importorskip("torch")
    f, y = _OVERLAPS[form], torch.arange(8.0)
    try:
        f(torch, y)
        want = None
    except RuntimeError as e:
        want = str(e)
    for _ in range(2):   # (the second call takes the kept plan)
        x = tj.arange(8.0)
        if want is None:
            with tj.no_grad():
                f(tj, x)
            assert x.tolist() == y.tolist()
            continue
        with pytest.raises(RuntimeError) as got, tj.no_grad():
            f(tj, x)
        assert str(got.value).endswith(want) and x.tolist() == list(range(8))   # (nothing written)


def test_kernel_path_refuses_partial_overlap():
    x = np.arange(10.0)
    assert eager_into._apart((x, 2.0), x)
    assert eager_into._apart((np.ones(10),), x)
    assert not eager_into._apart((x[:-1],), x[1:])


def test_errors_unchanged():
    for _ in range(2):
        i = tj.tensor(np.arange(4))
        with pytest.raises(DTypeError):
            i.add_(0.5)                          # int result type can't hold a float
        assert i.numpy().tolist() == [0, 1, 2, 3]
        x = tj.zeros(3)
        with pytest.raises(ShapeError):
            x.add_(tj.ones(2, 3))               # in-place ops cannot broadcast the target
        e = tj.ones(1).expand(4)
        with pytest.raises(RuntimeError, match="single memory location"):
            e.mul_(2.0)
        leaf = tj.ones(3, requires_grad=True)
        with pytest.raises(RuntimeError, match="leaf"):
            leaf.mul_(2.0)


def test_wider_operand_casts_back_as_before():
    # float32 tensor += float64 tensor: the result type is float64, stored as float32
    for _ in range(2):
        x = tj.ones(3)
        x.add_(tj.tensor(np.full(3, 0.1)))
        assert x.dtype is tj.float32
        np.testing.assert_array_equal(x.numpy(), np.float32(1.0 + 0.1))


def test_recorded_update_still_differentiable():
    for _ in range(2):
        a = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = a * 2.0
        y.mul_(a)                                   # recorded: y = 2a * a
        assert y.grad_fn is not None
        y.sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), 4 * np.array([1.0, 2.0, 3.0]))


def test_view_of_leaf_refused_with_grad_and_allowed_without():
    for _ in range(2):
        leaf = tj.zeros(4, requires_grad=True)
        with tj.no_grad():
            v = leaf[1:3]
        with pytest.raises(RuntimeError):
            v.add_(1.0)
        with tj.no_grad():
            v.add_(1.0)
        np.testing.assert_array_equal(leaf.detach().numpy(), [0, 1, 1, 0])


@pytest.mark.parametrize("call,want", [
    (lambda x, t1, t2: x.add_(-0.5, t1), lambda x, t1, t2: x - 0.5 * t1),
    (lambda x, t1, t2: x.sub_(2.0, t1), lambda x, t1, t2: x - 2.0 * t1),
    (lambda x, t1, t2: tj.add(x, 3.0, t1), lambda x, t1, t2: x + 3.0 * t1),
    (lambda x, t1, t2: x.addcdiv_(0.5, t1, t2), lambda x, t1, t2: x + 0.5 * t1 / t2),
    (lambda x, t1, t2: x.addcmul(0.5, t1, t2), lambda x, t1, t2: x + 0.5 * t1 * t2),
])
def test_deprecated_scalar_first_overloads_compute_pytorchs_values(call, want):
    # older optimizers write p.data.add_(-lr, grad) and exp_avg.addcdiv_(-step, m, denom)
    x = tj.tensor([1.0, -2.0, 3.0])
    t1, t2 = tj.tensor([2.0, 4.0, 8.0]), tj.tensor([4.0, 2.0, 0.5])
    expected = want(x.clone(), t1, t2).numpy()
    with pytest.warns(UserWarning, match="This overload of .* is deprecated"):
        got = call(x.clone(), t1, t2)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)


def test_two_tensors_after_add_is_a_clear_error():
    with pytest.raises(TypeError, match=r"add_: expected \(add_\(other, \*, alpha"):
        tj.ones(2).add_(tj.ones(2), tj.ones(2))


@pytest.mark.parametrize("dtype", [tj.float32, tj.float64, tj.int32, tj.int64])
@pytest.mark.parametrize("width", [1, 2, 3, 4, 5, 8, 9, 16])
def test_inplace_unary_through_strided_column(dtype, width):
    """An in-place op on a column view writes each element's own result (numpy's SIMD
    negative once mixed up elements of outputs strided by 4 or 8 elements)."""
    x0 = np.arange(7 * width, dtype=np.float64).reshape(7, width) - 9.0
    for op, ref in (("neg_", np.negative), ("abs_", np.abs), ("mul_", lambda v: v * 3)):
        for _ in range(2):   # (the second call takes the in-place path)
            t = tj.tensor(x0, dtype=dtype)
            getattr(t[:, 0], op)(*((3,) if op == "mul_" else ()))
        want = x0.copy()
        want[:, 0] = ref(want[:, 0])
        np.testing.assert_array_equal(t.numpy(), want.astype(t.numpy().dtype))


@pytest.mark.parametrize("src_shape", [(3,), (1,)])
def test_copy_from_a_leaf_that_requires_grad_carries_its_gradient(src_shape):
    """``x.copy_(y)`` makes x part of y's graph (PyTorch's CopyBackwards), also when y is
    a leaf of x's own shape and dtype."""
    x = tj.zeros(3)
    y = tj.ones(*src_shape, requires_grad=True)
    x.copy_(y)
    assert x.requires_grad and x.grad_fn is not None
    (x * tj.tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [1.0, 2.0, 3.0] if src_shape == (3,) else [6.0])



OPS = [lambda w: w.add_(1), lambda w: w.mul_(2), lambda w: w.neg_(), lambda w: w.clamp_(0, 1),
       lambda w: w.copy_(w * 0 + 1)]


@pytest.mark.parametrize("op", OPS)
def test_in_place_ops_on_an_expanded_tensor_raise_as_in_pytorch(op):
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="single memory location"):
        op(torch.zeros(3, 1).expand(3, 4))
    x = tj.zeros(3, 1)
    with pytest.raises(RuntimeError, match="single memory location"):
        op(x.expand(3, 4))
    with pytest.warns(RuntimeWarning), pytest.raises(RuntimeError, match="single memory location"):
        tj.compile(lambda a: op(a.expand(3, 4)))(x)
    np.testing.assert_array_equal(x.numpy(), np.zeros((3, 1), np.float32))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("grad", [False, True])
def test_in_place_ops_on_overlapping_windows_raise(op, grad):
    """Overlapping unfold windows share elements as an expanded tensor does: the result would
    depend on the order the elements are stored in (PyTorch's does), so it is refused alike,
    on the in-place (`_into`) path too, changing nothing."""
    x = tj.zeros(4, 6)
    with tj.set_grad_enabled(grad), pytest.raises(RuntimeError, match="single memory location"):
        op(x.unfold(1, 3, 1))
    np.testing.assert_array_equal(x.numpy(), np.zeros((4, 6), np.float32))
    with pytest.warns(RuntimeWarning), pytest.raises(RuntimeError, match="single memory location"):
        tj.compile(lambda a: op(a.unfold(1, 4, 2)))(x)


def test_in_place_writes_into_disjoint_strided_views_match_pytorch():
    torch = pytest.importorskip("torch")
    got = []
    for m in (tj, torch):
        x = m.arange(24.).reshape(4, 6)
        x.unfold(1, 3, 1)[:, :, 0].add_(1)         # (one element of each window: disjoint)
        x.unfold(1, 2, 2).mul_(3)                  # (windows that do not overlap)
        x.t()[::2].sub_(m.arange(4.))
        x[1:].unfold(0, 2, 1).fill_(0.5)            # (overlapping, but one value: allowed)
        got.append(x.numpy())
    np.testing.assert_array_equal(got[0], got[1])


def test_setitem_into_overlapping_windows_writes_the_indexed_view_as_pytorch():
    """``w[0] = 5`` on overlapping windows writes window 0's elements only (a view without
    overlap), where copying the whole updated tensor back wrote each shared element once."""
    torch = pytest.importorskip("torch")
    got = []
    for m in (tj, torch):
        b = m.zeros(8)
        w = b.unfold(0, 3, 1)
        w[0] = 5
        w[2, 1:] = m.tensor([7., 8.])
        w[-1, ::2] = -1
        got.append(b.numpy().copy())
    np.testing.assert_array_equal(got[0], got[1])
    b = tj.zeros(6)
    with pytest.raises(RuntimeError, match="selects a copy"):
        b.unfold(0, 3, 1)[[0, 2]] = 1              # (an advanced index selects a copy)
    np.testing.assert_array_equal(b.numpy(), np.zeros(6, np.float32))


def _torch_hardswish_grads(x_np):
    torch = pytest.importorskip("torch")
    tx = torch.tensor(x_np, requires_grad=True)
    ty = tx * 2.0
    torch.nn.functional.hardswish(ty, inplace=True)
    (ty * ty).sum().backward()
    return ty.detach().numpy(), tx.grad.numpy()


def test_inplace_activation_takes_the_result_when_nothing_else_sees_the_memory():
    x_np = np.linspace(-5, 5, 24, dtype=np.float32).reshape(4, 6)
    want_y, want_g = _torch_hardswish_grads(x_np)
    x = tj.tensor(x_np, requires_grad=True)
    y = x * 2.0
    before = y._data.__array_interface__["data"][0]
    assert tj.nn.functional.hardswish(y, inplace=True) is y
    # (no copy: y now holds the result's memory, and the gradient still read the old value)
    assert y._data.__array_interface__["data"][0] != before
    (y * y).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), want_y, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), want_g, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("holder", ["tensor_view", "numpy_view", "numpy_alias"])
def test_inplace_activation_writes_the_memory_others_see(holder):
    x_np = np.linspace(-5, 5, 24, dtype=np.float32).reshape(4, 6)
    want_y, want_g = _torch_hardswish_grads(x_np)
    x = tj.tensor(x_np, requires_grad=True)
    y = x * 2.0
    seen = {"tensor_view": lambda: y[1:], "numpy_view": lambda: y._data[1:],
            "numpy_alias": lambda: y._data}[holder]()
    tj.nn.functional.hardswish(y, inplace=True)
    got = seen.detach().numpy() if holder == "tensor_view" else seen
    np.testing.assert_allclose(got, want_y[1:] if holder != "numpy_alias" else want_y, rtol=1e-6, atol=1e-6)
    if holder != "tensor_view":     # (a view of a graph tensor: its history is rebased)
        (y * y).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), want_g, rtol=1e-5, atol=1e-6)


def test_inplace_activation_of_a_saved_tensor_still_trips_the_version_check():
    x = tj.tensor(np.linspace(-5, 5, 8, dtype=np.float32), requires_grad=True)
    y = x * 2.0
    z = y * y      # (saves y)
    tj.nn.functional.relu6(y, inplace=True)
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        z.sum().backward()


def test_inplace_activation_without_grad_matches():
    x_np = np.linspace(-5, 5, 24, dtype=np.float32)
    y = tj.tensor(x_np)
    out = tj.nn.functional.relu6(y, inplace=True)
    assert out is y
    np.testing.assert_array_equal(y.numpy(), np.clip(x_np, 0, 6))


def test_in_place_activation_copies_where_reference_counts_are_not_trusted(monkeypatch):
    from tracejit import tensor_inplace as ti
    assert ti._counts_hold() in (True, False)   # (probed once per interpreter)
    monkeypatch.setattr(ti, "_COUNTS_HOLD", [False])
    x = tj.tensor([-2.0, 0.5, 7.0], requires_grad=True)
    y = x * 1.0
    data = y._data
    out = tj.nn.functional.relu6(y, inplace=True)
    assert out is y and y._data is data            # written into the same memory
    np.testing.assert_array_equal(y.detach().numpy(), [0.0, 0.5, 6.0])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0, 0.0])


_EXPANDED_WRITES = {
    "item": lambda e: e.__setitem__(0, 5.0),
    "item_tensor": lambda e: e.__setitem__(0, e.new_tensor(5.0)),
    "slice_of_one": lambda e: e.__setitem__(slice(0, 1), 5.0),
    "item_add_": lambda e: e[1].add_(1.0),
    "fill_": lambda e: e.fill_(5.0),
    "zero_": lambda e: e.zero_(),
    "whole_slice": lambda e: e.__setitem__(slice(None), 5.0),
    "add_": lambda e: e.add_(1.0),
}


@pytest.mark.parametrize("name", sorted(_EXPANDED_WRITES))
def test_writes_into_an_expanded_tensor_as_pytorch(name):
    """PyTorch writes an expanded tensor where no element of the written-to tensor is
    written twice (one element, ``fill_``) and refuses the others."""
    torch = pytest.importorskip("torch")
    got = {}
    for lib in (torch, tj):
        base = lib.tensor([7.0, 2.0])
        e = base[:1].expand(3)
        try:
            _EXPANDED_WRITES[name](e)
        except RuntimeError as ex:
            assert "single memory location" in str(ex)
            got[lib] = None
        else:
            got[lib] = (base.tolist(), e.tolist(), base._version == e._version > 0)
    assert got[tj] == got[torch]


def test_a_read_only_numpy_array_still_refuses_writes():
    a = np.arange(3, dtype=np.float32)
    a.flags.writeable = False
    x = tj.from_numpy(a)
    with pytest.raises(RuntimeError, match="read-only"):
        x[0] = 5.0
    assert a.tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("mode", ["floor", "trunc"])
@pytest.mark.parametrize("dtype", ["int64", "float32"])
def test_div_in_place_takes_a_rounding_mode(mode, dtype):
    torch = pytest.importorskip("torch")
    a = np.array([[-7, 2, 0, 5], [7, -1, 4, 1]]).astype(dtype)
    res = []
    for lib in (torch, tj):
        x = lib.tensor(a)
        v = x[0]
        x.div_(-3, rounding_mode=mode)
        res.append((v.tolist(), str(x.dtype).split(".")[-1]))
    assert res[1] == res[0]


@pytest.mark.parametrize("form", ["x.fill_(v)", "x.masked_fill(m, v)", "x.masked_fill_(m, v)"])
@pytest.mark.parametrize("value", ["300", "2+1j", "1e40", "[2.0]", "2.7"])
def test_a_tensor_fill_value_converts_or_raises_as_torch(form, value):
    torch = pytest.importorskip("torch")

    def run(lib):
        dt = {"300": lib.int8, "2.7": lib.int64}.get(value, lib.float32)
        v = lib.tensor(eval(value), dtype=lib.float64 if value == "1e40" else None)
        x = lib.zeros(3, dtype=dt)
        return eval(form, {"x": x, "v": v, "m": lib.tensor([True, False, True])}).tolist()
    try:
        want = run(torch)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            run(tj)
        return
    assert run(tj) == want
