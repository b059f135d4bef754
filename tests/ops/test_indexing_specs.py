"""Indexes of plain ints, None and Ellipsis keep their spec per (rank, index)
(ops/indexing.py `_plain_spec`): the kept spec must give the first call's values, an
out-of-range or too-long index must raise every time, and other index types
(bool, numpy ints, slices, tensors) keep their own handling."""
import numpy as np
import pytest

import tracejit as tj


def test_int_indexes_give_numpys_values_every_time():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = tj.tensor(a)
    for _ in range(2):
        np.testing.assert_array_equal(x[1].numpy(), a[1])
        np.testing.assert_array_equal(x[-1, 2].numpy(), a[-1, 2])
        assert x[1, -1, 3].item() == a[1, -1, 3]
        np.testing.assert_array_equal(x[None, ..., 0].numpy(), a[None, ..., 0])
        np.testing.assert_array_equal(x[..., 1].numpy(), a[..., 1])
        for y in (x[...], x[()]):     # new views, as PyTorch's
            assert y is not x and y._base is x and y.shape == x.shape
    # the same index on another rank gets that rank's spec
    y = tj.tensor(np.arange(4, dtype=np.float32))
    assert y[..., 1].item() == 1.0 and x[..., 1].shape == (2, 3)


def test_bad_int_indexes_raise_every_time():
    x = tj.tensor(np.zeros((2, 3), np.float32))
    for _ in range(2):
        with pytest.raises(IndexError, match="too many indices"):
            x[0, 0, 0]
        with pytest.raises(IndexError, match="out of bounds"):
            x[2]
        with pytest.raises(IndexError, match="single ellipsis"):
            x[..., 0, ...]


def test_other_index_types_keep_their_handling():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = tj.tensor(a)
    assert x[1].shape == (3,)                       # (1,) kept for rank 2
    np.testing.assert_array_equal(x[np.int64(1)].numpy(), a[1])
    np.testing.assert_array_equal(x[True].numpy(), a[None])   # a bool is not index 1: a new dim, as PyTorch
    np.testing.assert_array_equal(x[1, 0:2].numpy(), a[1, 0:2])


def test_gradient_through_a_kept_spec():
    x = tj.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    for _ in range(2):
        x.grad = None
        (x[1, 2] * 3).backward()
        g = np.zeros((2, 3), np.float32); g[1, 2] = 3
        np.testing.assert_array_equal(x.grad.numpy(), g)


def test_slice_indexes_keep_their_spec_and_values():
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    x = tj.tensor(a)
    for _ in range(2):
        np.testing.assert_array_equal(x[:, 1].numpy(), a[:, 1])
        np.testing.assert_array_equal(x[1:, ::2, -2].numpy(), a[1:, ::2, -2])
        np.testing.assert_array_equal(x[None, :, 1:3, ...].numpy(), a[None, :, 1:3, ...])
        np.testing.assert_array_equal(x[-2:].numpy(), a[-2:])
        np.testing.assert_array_equal(x[5:].numpy(), a[5:])            # empty
        np.testing.assert_array_equal(x.mT[:, 2].numpy(), a.transpose(0, 2, 1)[:, 2])
        assert x[:, 1]._data.base is not None                          # a view
    # a slice's bounds must be ints or None every time: a float is never a kept int
    for _ in range(2):
        with pytest.raises(TypeError, match="slice indices"):
            x[1.0:]
        with pytest.raises(ValueError, match="step"):
            x[::0]
        with pytest.raises(IndexError, match="out of bounds"):
            x[:, 4]


def test_an_all_integer_index_is_a_view_every_time():
    x = tj.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    for _ in range(2):            # the first call (the general path) and a kept plan's
        y = x[1, 2]
        assert y.shape == () and y.item() == 5.0
        with tj.no_grad():
            y.fill_(-1.0)
        assert x[1, 2].item() == -1.0
        x[1, 2] = 5.0


def test_one_element_integer_tensors_bound_slices_as_in_pytorch():
    a = np.arange(20, dtype=np.float32)
    x = tj.tensor(a)
    for i in tj.tensor([3, 7]):                       # iterating gives 0-d int64 tensors
        k = int(i)
        np.testing.assert_array_equal(x[i:i + 4].numpy(), a[k:k + 4])
    np.testing.assert_array_equal(x[tj.tensor(2):tj.tensor(12):tj.tensor(3)].numpy(), a[2:12:3])
    with pytest.raises(TypeError, match="only integer tensors"):
        x[tj.tensor(1.0):4]
    with pytest.raises(ValueError):
        x[tj.tensor([1, 2]):4]


@pytest.mark.parametrize("k", range(7))
def test_slice_gradients_are_pytorchs_to_the_bit_and_differentiable(k):
    # a basic index's backward writes the gradient into fresh zeros (PyTorch's slice
    # backward), a tensor index's adds it (repeats accumulate); both to the sign of zero,
    # and differentiable again
    torch = pytest.importorskip("torch")
    f = [lambda x: x[:, :, :-3], lambda x: -x[:, :, -4:], lambda x: x.chunk(2, dim=1)[0],
         lambda x: x[0, ::2, 1:5], lambda x: x[..., None, 3], lambda x: x[:, [0, 0, 1]],
         lambda x: x[:, :, 2:] * -0.0][k]   # (its gradient holds -0.0s, which adding to 0 loses)
    a = np.random.default_rng(k).standard_normal((2, 4, 10)).astype(np.float32)
    res = []
    for m in (tj, torch):
        x = m.tensor(a, requires_grad=True)
        y = f(x)
        g, = m.autograd.grad((y * y).sum(), x, create_graph=True)
        gg, = m.autograd.grad((g * g).sum(), x)
        res.append((g.detach().numpy(), gg.numpy()))
    for got, want in zip(*res):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("key", [lambda m: m, lambda m: (slice(None), m), lambda m: (Ellipsis, m)])
def test_bool_masks_of_the_wrong_shape_raise_pytorchs_index_error(key):
    """A mask must have the shape of the dims it indexes (fairseq's ``logits[1:][neg_is_pos]``
    with a mask of the wrong rank took its nonzero positions as integer indices)."""
    torch = pytest.importorskip("torch")
    a = np.ones((2, 3, 2), np.float32)
    good = {0: [[True, False, True], [False, False, True]], 1: [True, False, True], 2: [False, True]}
    bad = {0: [[True, False]], 1: [True, False], 2: [True, False, True]}
    form = key(0)
    where = 0 if form == 0 else 1 if isinstance(form, tuple) and form[0] == slice(None) else 2
    for masks, raises in ((good, False), (bad, True)):
        m = np.array(masks[where])
        try:
            want = torch.ones(2, 3, 2)[key(torch.tensor(m))].numpy()
        except IndexError as e:
            assert raises, e
            with pytest.raises(IndexError, match="shape of the mask"):
                tj.tensor(a)[key(tj.tensor(m))]
            x = tj.tensor(a)
            with pytest.raises(IndexError, match="shape of the mask"):
                x[key(tj.tensor(m))] = 5.0
            assert (x.numpy() == 1).all()   # nothing written
        else:
            assert not raises
            np.testing.assert_array_equal(tj.tensor(a)[key(tj.tensor(m))].numpy(), want)


def test_basic_index_gradients_make_no_plan_per_spec():
    """A loop over many distinct int indexes (an RNN-T lattice's x[:, t, u]): their
    gradients are PyTorch's, written without an index_put plan per spec, and with
    create_graph still differentiable."""
    torch = pytest.importorskip("torch")
    from tracejit.ops.indexing import INDEX_PUT
    a = np.random.default_rng(0).standard_normal((3, 30, 25)).astype(np.float32)
    x, xt = tj.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    INDEX_PUT.plans.clear()
    total, want = 0, 0
    for t in range(30):
        for u in range(0, 25, 1 + t % 3):
            total = total + x[:, t, u] * (t - u)
            want = want + xt[:, t, u] * (t - u)
    total.sum().backward()
    want.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())
    assert len(INDEX_PUT.plans) == 0
    x.grad = None
    y = tj.tensor(a, requires_grad=True)
    (g,) = tj.autograd.grad((y[1, 2:5] ** 2).sum(), y, create_graph=True)
    g.sum().backward()
    want = np.zeros_like(a)
    want[1, 2:5] = 2.0
    np.testing.assert_array_equal(y.grad.numpy(), want)


@pytest.mark.parametrize("key", [np.s_[..., ::2], np.s_[..., 1::2], np.s_[..., 1:-1:3]])
def test_a_strided_slice_of_a_changing_length_captures_twice(key):
    """``x[..., ::2]`` (even and odd samples, a stride-2 downsampling) on inputs of a new
    length each call: its length ``(n + 1) // 2`` is symbolic, values and gradients as
    PyTorch's, one capture after the first."""
    torch = pytest.importorskip("torch")
    cf = tj.compile(lambda x: x[key] * 2)
    for n in (5, 6, 7, 9, 12, 16):
        v = np.random.default_rng(n).standard_normal((2, n))
        x, xt = tj.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
        y, yt = cf(x), xt[key] * 2
        np.testing.assert_array_equal(y.detach().numpy(), yt.detach().numpy())
        (y * y).sum().backward(), (yt * yt).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())
    assert cf.cache_stats()["compiles"] == 2, cf.cache_stats()["recompile_reasons"]
