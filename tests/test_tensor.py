"""The Tensor API: creation, attributes, conversions, printing, in-place methods, __setitem__."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj


# --------------------------------------------------------------------------- creation
def test_tensor_infers_dtypes_like_pytorch():
    assert tj.tensor([1, 2]).dtype is tj.int64
    assert tj.tensor([1.0, 2]).dtype is tj.float32
    assert tj.tensor([True, False]).dtype is tj.bool_
    assert tj.tensor(3).shape == () and tj.tensor(3).dtype is tj.int64
    assert tj.tensor([]).dtype is tj.float32 and tj.tensor([]).shape == (0,)
    assert tj.tensor([[1, 2], [3, 4]]).shape == (2, 2)
    assert tj.tensor(np.arange(3, dtype=np.int32)).dtype is tj.int32  # numpy keeps its dtype
    assert tj.tensor(np.float64(1.5)).dtype is tj.float64
    assert tj.tensor([1, 2], dtype=tj.float64).dtype is tj.float64
    assert tj.tensor([1, 2], dtype="float16").dtype is tj.float16
    assert tj.tensor([1.0], dtype=float).dtype is tj.float32
    with pytest.raises(ValueError, match="ragged"):
        tj.tensor([[1, 2], [3]])
    with pytest.raises(TypeError):
        tj.tensor(["a"])


def test_the_tensor_class_takes_sizes_as_pytorchs_legacy_constructor():
    torch = pytest.importorskip("torch")
    for args in [(3, 2), (5,), (torch.Size([2, 3]),), (0,)]:
        targs = tuple(tj.Size(a) if isinstance(a, torch.Size) else a for a in args)
        got, want = tj.Tensor(*targs), torch.Tensor(*args)
        assert got.shape == tuple(want.shape) and got.dtype is tj.float32
    np.testing.assert_array_equal(tj.Tensor([1, 2]).numpy(), torch.Tensor([1, 2]).numpy())
    assert tj.Tensor().shape == (0,)
    p = tj.nn.Parameter(tj.Tensor(4, 3).normal_())   # a layer's parameter, made as old code does
    assert p.shape == (4, 3) and p.requires_grad
    with pytest.raises(TypeError, match=r"Tensor\(\): expected sizes .*\(2, 'a'\)"):
        tj.Tensor(2, "a")


def test_split_takes_its_keywords_as_pytorch_spells_them():
    torch = pytest.importorskip("torch")
    a = np.arange(12, dtype=np.float32).reshape(2, 6)
    x, t = tj.tensor(a), torch.tensor(a)
    for got, want in [(x.split(split_size=[2, 4], dim=-1), t.split(split_size=[2, 4], dim=-1)),
                      (x.split(4, 1), t.split(4, 1)),
                      (tj.split(x, split_size_or_sections=3, dim=1), torch.split(t, split_size_or_sections=3, dim=1))]:
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w.numpy())


def test_tensor_copies_but_as_tensor_and_from_numpy_share():
    a = np.zeros(3, dtype=np.float32)
    t = tj.tensor(a)
    s = tj.as_tensor(a)
    f = tj.from_numpy(a)
    a[0] = 7
    assert t[0].item() == 0.0
    assert s[0].item() == 7.0 and f[0].item() == 7.0
    f[1] = 5.0  # writes through to the numpy array
    assert a[1] == 5.0
    assert tj.as_tensor(t) is t
    assert tj.as_tensor(t, dtype=tj.float64).dtype is tj.float64
    with pytest.raises(TypeError):
        tj.from_numpy([1, 2])


def test_tensor_from_tensors_and_nested():
    a = tj.tensor([1.0, 2.0])
    assert tj.tensor(a).tolist() == [1.0, 2.0]
    assert tj.tensor([tj.tensor(1.0), tj.tensor(2.0)]).tolist() == [1.0, 2.0]
    assert tj.Tensor([1, 2]).dtype is tj.float32  # like torch.Tensor


@pytest.mark.parametrize("fn, value", [(tj.zeros, 0.0), (tj.ones, 1.0), (tj.empty, None)])
def test_zeros_ones_empty(fn, value):
    for args in [(2, 3), ((2, 3),), ([2, 3],)]:
        t = fn(*args)
        assert t.shape == (2, 3) and t.dtype is tj.float32
        if value is not None:
            assert (t.numpy() == value).all()
    assert fn(()).shape == () and fn(0).shape == (0,)
    assert fn(2, dtype=tj.int32).dtype is tj.int32
    assert fn(2, requires_grad=True).requires_grad
    with pytest.raises(ValueError, match="negative"):
        fn(-1)
    with pytest.raises(TypeError):
        fn(2.5)


def test_full_infers_dtype_from_fill_value():
    assert tj.full((2,), 1.5).dtype is tj.float32
    assert tj.full((2,), 7).dtype is tj.int64
    assert tj.full((2,), True).dtype is tj.bool_
    assert tj.full((2, 2), 3, dtype=tj.float64).tolist() == [[3.0, 3.0], [3.0, 3.0]]


def test_like_functions():
    a = tj.ones(2, 3, dtype=tj.float64)
    for fn in (tj.zeros_like, tj.ones_like, tj.empty_like):
        t = fn(a)
        assert t.shape == (2, 3) and t.dtype is tj.float64
    assert tj.full_like(a, 4).tolist() == [[4.0] * 3] * 2
    assert tj.zeros_like(a, dtype=tj.int32).dtype is tj.int32
    assert tj.rand_like(a).dtype is tj.float64 and tj.randn_like(a).shape == (2, 3)


def test_arange_linspace_eye():
    assert tj.arange(5).tolist() == [0, 1, 2, 3, 4] and tj.arange(5).dtype is tj.int64
    assert tj.arange(1, 7, 2).tolist() == [1, 3, 5]
    assert tj.arange(5, 0, -2).tolist() == [5, 3, 1]
    assert tj.arange(0.0, 1.0, 0.25).tolist() == [0.0, 0.25, 0.5, 0.75]
    assert tj.arange(0.0, 1.0, 0.25).dtype is tj.float32
    assert tj.arange(3, dtype=tj.float64).dtype is tj.float64
    assert tj.arange(0).shape == (0,)
    with pytest.raises(ValueError):
        tj.arange(0, 5, 0)
    np.testing.assert_allclose(tj.linspace(0, 1, 5).numpy(), [0, 0.25, 0.5, 0.75, 1.0])
    assert tj.linspace(0, 1, 5).dtype is tj.float32
    assert tj.eye(3).tolist() == np.eye(3).tolist()
    assert tj.eye(2, 3).shape == (2, 3)


def test_random_creation_and_manual_seed():
    tj.manual_seed(123)
    a, b, c = tj.rand(3, 4), tj.randn(2, 2), tj.randint(0, 10, (5,))
    tj.manual_seed(123)
    a2, b2, c2 = tj.rand(3, 4), tj.randn(2, 2), tj.randint(0, 10, (5,))
    assert a.tolist() == a2.tolist() and b.tolist() == b2.tolist() and c.tolist() == c2.tolist()
    assert a.dtype is tj.float32 and c.dtype is tj.int64
    assert ((a.numpy() >= 0) & (a.numpy() < 1)).all()
    assert tj.rand(2, dtype=tj.float64).dtype is tj.float64
    r = tj.randint(10, (1000,))  # randint(high, size), as in PyTorch
    assert r.min().item() >= 0 and r.max().item() <= 9
    assert tj.randint(3, 5, (2, 2)).shape == (2, 2)
    assert sorted(tj.randperm(5).tolist()) == [0, 1, 2, 3, 4]
    with pytest.raises(TypeError):
        tj.rand(2, dtype=tj.int64)
    n = tj.randn(20000)
    assert abs(n.mean().item()) < 0.05 and abs(n.std().item() - 1) < 0.05
    tj.manual_seed(5)
    x = tj.empty(3).uniform_(2, 3)
    assert ((x.numpy() >= 2) & (x.numpy() < 3)).all()
    y = tj.empty(1000).normal_(5.0, 0.1)
    assert abs(y.mean().item() - 5.0) < 0.05


def test_dropout_statistics_and_gradient():
    tj.manual_seed(0)
    x = tj.ones(200, 100, requires_grad=True)
    y = tj.dropout(x, p=0.3)
    kept = (y.detach().numpy() != 0)
    assert abs(kept.mean() - 0.7) < 0.02
    np.testing.assert_allclose(y.detach().numpy()[kept], 1 / 0.7, rtol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), kept / 0.7, rtol=1e-6)  # gradient follows the mask
    assert tj.dropout(x, p=0.5, training=False) is x
    assert (tj.dropout(x, p=1.0).detach().numpy() == 0).all()
    with pytest.raises(ValueError):
        tj.dropout(x, p=1.5)


# --------------------------------------------------------------------------- attributes
def test_attributes():
    t = tj.zeros(2, 3, 4)
    assert t.shape == (2, 3, 4) and isinstance(t.shape, tuple)
    assert t.size() == (2, 3, 4) and t.size(1) == 3 and t.size(-1) == 4
    assert t.ndim == 3 and t.dim() == 3
    assert t.numel() == 24 and tj.numel(t) == 24
    assert t.dtype is tj.float32
    assert t.device == tj.device("cpu") and t.device == "cpu" and str(t.device) == "cpu"
    assert not t.is_cuda and t.is_floating_point()
    assert t.element_size() == 4
    assert len(t) == 2
    s = tj.tensor(1.0)
    assert s.shape == () and s.ndim == 0 and s.numel() == 1
    with pytest.raises(TypeError):
        len(s)
    with pytest.raises(IndexError):
        t.size(3)


def test_transpose_attribute_T():
    m = tj.arange(6).reshape(2, 3)
    assert m.T.shape == (3, 2) and m.T.tolist() == [[0, 3], [1, 4], [2, 5]]
    assert tj.ones(2, 3, 4).T.shape == (4, 3, 2)
    assert m.mT.shape == (3, 2)


def test_iteration():
    rows = [r.tolist() for r in tj.arange(6).reshape(3, 2)]
    assert rows == [[0, 1], [2, 3], [4, 5]]


# --------------------------------------------------------------------------- conversions
def test_numpy_item_tolist():
    t = tj.tensor([[1.5, 2.0], [3.0, 4.0]])
    a = t.numpy()
    assert isinstance(a, np.ndarray) and a.dtype == np.float32
    a[0, 0] = 9.0  # numpy() shares memory, like PyTorch
    assert t[0, 0].item() == 9.0
    assert t.tolist() == [[9.0, 2.0], [3.0, 4.0]]
    assert tj.tensor([7]).item() == 7 and isinstance(tj.tensor([7]).item(), int)
    assert isinstance(tj.tensor(2.5).item(), float)
    assert tj.tensor(True).item() is True
    assert tj.tensor(3).tolist() == 3


def test_python_number_conversions():
    assert float(tj.tensor(2.5)) == 2.5 and int(tj.tensor(2.7)) == 2
    assert bool(tj.tensor([1])) and not bool(tj.tensor(0.0))
    assert [10, 20, 30][tj.tensor(1)] == 20  # __index__
    with pytest.raises(TypeError):
        [1, 2][tj.tensor(1.0)]
    assert f"{tj.tensor(3.14159):.2f}" == "3.14"


@pytest.mark.parametrize("method, dtype", [("float", tj.float32), ("double", tj.float64), ("half", tj.float16),
                                           ("int", tj.int32), ("long", tj.int64), ("bool", tj.bool_)])
def test_cast_methods(method, dtype):
    t = tj.tensor([0.0, 1.7, -2.2])
    c = getattr(t, method)()
    assert c.dtype is dtype
    np.testing.assert_array_equal(c.numpy(), t.numpy().astype(dtype.np))


def test_to_and_type():
    t = tj.tensor([1.0, 2.0])
    assert t.to(tj.float32) is t
    assert t.to(tj.float64).dtype is tj.float64
    assert t.to(dtype=tj.int64).tolist() == [1, 2]
    assert t.to("cpu") is t and t.cpu() is t
    assert t.to(tj.ones(1, dtype=tj.float64)).dtype is tj.float64
    assert t.to(tj.float32, copy=True) is not t
    assert t.type(tj.int32).dtype is tj.int32 and t.type() == "torch.FloatTensor"  # PyTorch's type string
    assert t.type_as(tj.tensor([1])).dtype is tj.int64
    x = tj.tensor([1.5], requires_grad=True)
    y = x.to(tj.float64)
    y.sum().backward()  # casts are differentiable
    assert x.grad.dtype is tj.float32 and x.grad.item() == 1.0


def test_numpy_interop_asarray_and_operators():
    t = tj.tensor([1.0, 2.0], requires_grad=True)
    a = np.asarray(t)  # works even for tensors requiring grad (a detached view)
    assert a.tolist() == [1.0, 2.0]
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    r = np.float32(2.0) * tj.tensor([1.0, 2.0])  # numpy scalar on the left defers to Tensor
    assert isinstance(r, tj.Tensor) and r.tolist() == [2.0, 4.0]


def test_dlpack_round_trip_with_numpy():
    t = tj.arange(6, dtype=tj.float32).reshape(2, 3)
    a = np.from_dlpack(t)
    assert a.shape == (2, 3) and a.dtype == np.float32
    a[0, 0] = 42.0  # zero-copy
    assert t[0, 0].item() == 42.0
    back = tj.from_dlpack(np.arange(4, dtype=np.int32))
    assert back.dtype is tj.int32 and back.tolist() == [0, 1, 2, 3]
    again = tj.from_dlpack(t)
    assert again.tolist() == t.tolist() and t.__dlpack_device__()[0] == 1  # kDLCPU


# --------------------------------------------------------------------------- printing
@pytest.mark.parametrize("make, text", [
    (lambda: tj.tensor([1.0, 2.0]), "tensor([1., 2.])"),
    (lambda: tj.tensor([0.5, 1.0]), "tensor([0.5000, 1.0000])"),
    (lambda: tj.tensor(3.0), "tensor(3.)"),
    (lambda: tj.tensor([1, 2]), "tensor([1, 2])"),
    (lambda: tj.tensor([True, False]), "tensor([ True, False])"),
    (lambda: tj.tensor([True, True]), "tensor([True, True])"),
    (lambda: tj.tensor([[True], [True]]), "tensor([[True],\n        [True]])"),
    (lambda: tj.tensor([1.0, 2.0], dtype=tj.float64), "tensor([1., 2.], dtype=tracejit.float64)"),
    (lambda: tj.tensor([1, 2], dtype=tj.int32), "tensor([1, 2], dtype=tracejit.int32)"),
    (lambda: tj.tensor([1.0, 2.0], requires_grad=True), "tensor([1., 2.], requires_grad=True)"),
    (lambda: tj.tensor([1.0, 2.0], requires_grad=True) * 1, "tensor([1., 2.], grad_fn=<MulBackward0>)"),
    (lambda: tj.tensor([1.0, 2.0], requires_grad=True) + 1, "tensor([2., 3.], grad_fn=<AddBackward0>)"),
    (lambda: tj.tensor([]), "tensor([])"),
    (lambda: tj.zeros(0, 3), "tensor([], size=(0, 3))"),
    (lambda: tj.tensor([], dtype=tj.int64), "tensor([], dtype=tracejit.int64)"),
    (lambda: tj.tensor([1e-5, 1.0]), "tensor([1.0000e-05, 1.0000e+00])"),
    (lambda: tj.ones(2, 2), "tensor([[1., 1.],\n        [1., 1.]])"),
])
def test_repr(make, text):
    assert repr(make()) == text


# --------------------------------------------------------------------------- in-place
@pytest.mark.parametrize("name, arg, expect", [
    ("add_", 2.0, [3.0, 4.0]), ("sub_", 1.0, [0.0, 1.0]), ("mul_", 3.0, [3.0, 6.0]),
    ("div_", 2.0, [0.5, 1.0]), ("pow_", 2.0, [1.0, 4.0]),
])
def test_inplace_arithmetic(name, arg, expect):
    t = tj.tensor([1.0, 2.0])
    data_before = t.numpy()
    out = getattr(t, name)(arg)
    assert out is t and t.tolist() == expect and t._version == 1
    assert t.numpy() is data_before  # same memory


def test_inplace_with_tensor_argument_broadcasts_the_argument():
    t = tj.ones(2, 3)
    t.add_(tj.tensor([1.0, 2.0, 3.0]))
    assert t.tolist() == [[2.0, 3.0, 4.0]] * 2
    t.sub_(tj.ones(2, 3), alpha=2)
    assert t.tolist() == [[0.0, 1.0, 2.0]] * 2


def test_augmented_assignment_operators():
    t = tj.tensor([1.0, 2.0])
    alias = t
    t += 1
    t -= 0.5
    t *= 4
    t /= 2
    assert t is alias and t.tolist() == [3.0, 5.0] and t._version == 4


def test_zero_fill_copy_clamp():
    t = tj.tensor([[-2.0, 0.5], [3.0, 1.0]])
    assert t.clamp_(-1, 1).tolist() == [[-1.0, 0.5], [1.0, 1.0]]
    assert t.clamp_(min=0.75).tolist() == [[0.75, 0.75], [1.0, 1.0]]
    assert t.fill_(7).tolist() == [[7.0, 7.0], [7.0, 7.0]]
    assert t.fill_(tj.tensor(2.0)).tolist() == [[2.0, 2.0], [2.0, 2.0]]
    assert t.zero_().tolist() == [[0.0, 0.0], [0.0, 0.0]]
    t.copy_(tj.tensor([1.0, 2.0]))  # broadcasts the source
    assert t.tolist() == [[1.0, 2.0], [1.0, 2.0]]
    t.copy_(tj.tensor([[5, 6], [7, 8]]))  # casts the source
    assert t.tolist() == [[5.0, 6.0], [7.0, 8.0]] and t.dtype is tj.float32
    t.copy_(np.array([[1, 1], [1, 1]]))
    assert t.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    i = tj.tensor([1, 2])
    i.fill_(3.9)
    assert i.tolist() == [3, 3] and i.dtype is tj.int64


def test_other_inplace_methods():
    t = tj.tensor([-1.0, 4.0])
    assert t.neg_().tolist() == [1.0, -4.0]
    assert t.relu_().tolist() == [1.0, 0.0]
    assert tj.tensor([0.0]).exp_().tolist() == [1.0]
    assert tj.tensor([4.0]).sqrt_().tolist() == [2.0]
    m = tj.tensor([1.0, 2.0, 3.0])
    m.masked_fill_(m > 1.5, 0.0)
    assert m.tolist() == [1.0, 0.0, 0.0]


def test_inplace_on_int_tensor():
    t = tj.tensor([1, 2])
    t *= 3
    t += tj.tensor([1, 1], dtype=tj.int32)
    assert t.tolist() == [4, 7] and t.dtype is tj.int64
    with pytest.raises(TypeError):
        t /= 2  # true division gives floats: cannot be stored in int64


def test_inplace_on_view_writes_through_to_base():
    base = tj.zeros(2, 3)
    base[0].add_(1)
    base.t()[2].fill_(5)
    assert base.tolist() == [[1.0, 1.0, 5.0], [0.0, 0.0, 5.0]]
    assert base._version == 2


# --------------------------------------------------------------------------- __setitem__
def test_setitem_forms():
    t = tj.zeros(3, 4)
    t[0] = 1.0
    t[1, 2] = 5
    t[:, 3] = tj.tensor([7.0, 8.0, 9.0])
    t[2, :2] = tj.tensor([[2.0, 3.0]])  # broadcasts
    assert t.tolist() == [[1, 1, 1, 7], [0, 0, 5, 8], [2, 3, 0, 9]]
    t[t > 4] = -1.0
    assert t.tolist() == [[1, 1, 1, -1], [0, 0, -1, -1], [2, 3, 0, -1]]
    t[[0, 2]] = 0.0
    assert t.tolist() == [[0, 0, 0, 0], [0, 0, -1, -1], [0, 0, 0, 0]]
    t[tj.tensor([1, 1]), tj.tensor([0, 1])] = tj.tensor([4.0, 6.0])
    assert t[1].tolist() == [4, 6, -1, -1]
    t[...] = 2
    assert (t.numpy() == 2).all()
    t[:] = np.arange(4.0)
    assert t[2].tolist() == [0, 1, 2, 3]
    assert t._version == 9


def test_setitem_casts_value_and_rejects_bad_values():
    t = tj.zeros(3, dtype=tj.int64)
    t[0] = 2.9
    t[1:] = tj.tensor([1.5, 2.5])
    assert t.tolist() == [2, 1, 2] and t.dtype is tj.int64
    with pytest.raises(TypeError):
        t[0] = "x"
    with pytest.raises(ValueError):
        t[:] = tj.ones(2)
    assert t.tolist() == [2, 1, 2]


def test_getitem_views_share_memory():
    t = tj.arange(6.0).reshape(2, 3)
    row = t[1]
    t[1, 1] = 100.0
    assert row.tolist() == [3.0, 100.0, 5.0]  # basic indexing is a view, as in PyTorch
    picked = t[[1]]
    t[1, 0] = -1.0
    assert picked.tolist() == [[3.0, 100.0, 5.0]]  # advanced indexing copies


# --------------------------------------------------------------------------- misc
def test_eq_with_non_tensor_objects():
    t = tj.ones(2)
    assert (t == None) is False  # noqa: E711
    assert (t != None) is True  # noqa: E711
    assert t != "x"
    assert hash(t) != hash(tj.ones(2))
    assert t in {t: 1}


def test_method_forms_match_functions():
    x = tj.tensor([[1.0, -2.0], [3.0, 4.0]])
    assert x.where(x > 0, 0.0).tolist() == [[1.0, 0.0], [3.0, 4.0]]  # PyTorch's argument order
    assert x.sum(dim=1).tolist() == [-1.0, 7.0]
    assert x.max(dim=1).values.tolist() == [1.0, 4.0] and x.max(dim=1).indices.tolist() == [0, 1]
    v, i = x.min(0)
    assert v.tolist() == [1.0, -2.0] and i.tolist() == [0, 0]
    assert x.abs().amax().item() == 4.0
    assert x.nonzero().tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert x.softmax(-1).sum(-1).tolist() == pytest.approx([1.0, 1.0])
    assert x.view(4).shape == (4,) and x.view(-1, 1).shape == (4, 1)
    assert x.unsqueeze(0).squeeze().shape == (2, 2)
    assert x.var(1, correction=0).tolist() == [2.25, 0.25]


def test_new_factories():
    x = tj.ones(2, dtype=tj.float64)
    assert x.new_zeros(3).dtype is tj.float64 and x.new_ones(2, 2).shape == (2, 2)
    assert x.new_full((2,), 5).tolist() == [5.0, 5.0]
    assert x.new_tensor([1, 2]).dtype is tj.float64


def test_is_contiguous_in_a_memory_format_reads_the_strides():
    x = tj.zeros(2, 3, 4, 5)
    assert x.is_contiguous() and not x.is_contiguous(memory_format=tj.channels_last)
    nhwc = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    assert nhwc.is_contiguous(memory_format=tj.channels_last) and not nhwc.is_contiguous()
    assert tj.zeros(2, 1, 4, 5).is_contiguous(memory_format=tj.channels_last)   # one channel: both
    assert not tj.zeros(2, 3, 4).is_contiguous(memory_format=tj.channels_last)
    assert tj.zeros(2, 3, 4, 5, 6).permute(0, 2, 3, 4, 1).contiguous().permute(0, 4, 1, 2, 3).is_contiguous(
        memory_format=tj.channels_last_3d)


@pytest.mark.parametrize("how", ["contiguous", "to", "clone"])
def test_a_channels_last_conversion_has_pytorchs_strides_eagerly_and_traced(how):
    torch = pytest.importorskip("torch")
    xa = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)

    def fn(lib, x):
        y = getattr(x * 1.0, how)(memory_format=lib.channels_last)
        if y.is_contiguous(memory_format=lib.channels_last) and not y.is_contiguous():
            return y.permute(0, 2, 3, 1).sum(-1) * 2.0   # (a ConvNeXt LayerNorm's channels_last branch)
        return y.sum(1)
    y, want = getattr(tj.tensor(xa), how)(memory_format=tj.channels_last), getattr(
        torch.tensor(xa), how)(memory_format=torch.channels_last)
    assert y.stride() == want.stride() and y.tolist() == want.tolist()
    x = tj.tensor(xa, requires_grad=True)
    f = tj.compile(lambda t: fn(tj, t))
    got = f(x)
    xt = torch.tensor(xa, requires_grad=True)
    ref = fn(torch, xt)
    np.testing.assert_allclose(got.detach().numpy(), ref.detach().numpy(), rtol=1e-6)
    got.sum().backward()
    ref.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy())
    assert f.cache_stats()["compiles"] == 1 and f.cache_stats()["eager_fallbacks"] == 0


def test_reading_grad_of_a_non_leaf_warns_like_pytorch():
    import warnings
    torch = pytest.importorskip("torch")
    for lib in (torch, tj):
        a = lib.ones(3, requires_grad=True)
        b = a * 2
        b.sum().backward()
        with pytest.warns(UserWarning, match="not a leaf Tensor"):
            assert b.grad is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert a.grad is not None           # a leaf: no warning
            c = a * 3
            c.retain_grad()
            c.sum().backward()
            assert c.grad.tolist() == [1.0, 1.0, 1.0]   # retained: no warning
            assert lib.ones(2).grad is None      # no grad at all: no warning
            d = a * 4
            lib.autograd.backward([d.sum()], inputs=[d])   # .grad filled by backward(inputs=)
            assert d.grad.tolist() == [1.0, 1.0, 1.0]


def test_writes_through_data_are_not_seen_by_autograd_as_in_pytorch():
    # .data has a version counter of its own (detach() shares it): the backward reads the
    # new values instead of raising, as PyTorch's does
    torch = pytest.importorskip("torch")
    a = np.array([0.5, 1.0, 2.0])
    res = []
    for m in (torch, tj):
        x = m.tensor(a, requires_grad=True)
        h = x * 1.0
        y = m.atan2(h, h + 1.0)
        h.data.mul_(3.0)
        y.sum().backward()
        res.append((x.grad.numpy(), h.detach().numpy()))
    for got, want in zip(res[1], res[0]):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    x = tj.tensor(a, requires_grad=True)
    h = x * 1.0
    y = tj.atan2(h, h + 1.0)
    h.detach().mul_(3.0)   # shares the counter: refused, as in PyTorch
    with pytest.raises(tj.errors.InplaceModifiedError):
        y.sum().backward()


def test_detach_in_place_refuses_a_view_as_pytorch():
    """A view's history is its base's: PyTorch refuses detach_() on any view (detach() is
    the way), which here used to cut the view's history alone."""
    torch = pytest.importorskip("torch")
    for lib in (torch, tj):
        x = lib.zeros(3, requires_grad=True)
        y = x * 2
        for v in (y[1:], y.view(3), lib.zeros(3)[1:]):
            with pytest.raises(RuntimeError, match="Can't detach views in-place"):
                v.detach_()
        assert v.requires_grad is False and y[1:].requires_grad
        y.detach_()
        assert not y.requires_grad and y.grad_fn is None
