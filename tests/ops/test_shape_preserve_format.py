"""clone and the *_like factories keep their input's memory order (PyTorch's default
preserve_format): a dense input's strides, dense strides in the dims' order for any other.
Strides against PyTorch, eager and compiled."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")

A = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)

VIEWS = {
    "transposed": lambda x: x.transpose(1, 3),
    "permuted": lambda x: x.permute(2, 0, 3, 1),
    "strided slice": lambda x: x.permute(3, 1, 0, 2)[:, ::2],
    "sliced inner": lambda x: x.permute(0, 2, 3, 1)[..., 1:],
    "expanded": lambda x: x[:, :1].expand(2, 5, 4, 5),
    "expanded, transposed": lambda x: x[:, :, :1].expand(2, 3, 6, 5).transpose(0, 3),
    "row-major": lambda x: x,
}
MAKERS = {
    "clone": lambda m, x: x.clone(),
    "zeros_like": lambda m, x: m.zeros_like(x),
    "ones_like": lambda m, x: m.ones_like(x, dtype=m.float64),
    "empty_like": lambda m, x: m.empty_like(x),
    "full_like": lambda m, x: m.full_like(x, 2.5),
    "rand_like": lambda m, x: m.rand_like(x),
    "randn_like": lambda m, x: m.randn_like(x),
    "randint_like": lambda m, x: m.randint_like(x, 5),
}


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("maker", MAKERS)
def test_keeps_the_inputs_strides(view, maker):
    want = MAKERS[maker](torch, VIEWS[view](torch.tensor(A)))
    got = MAKERS[maker](tj, VIEWS[view](tj.tensor(A)))
    assert got.shape == want.shape and got.stride() == want.stride()
    if maker in ("clone", "zeros_like", "ones_like", "full_like"):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("view", ["transposed", "permuted", "strided slice"])
def test_keeps_the_inputs_strides_compiled(view):
    def fn(m, x):
        return x.clone(), m.zeros_like(x), m.empty_like(x, dtype=m.float64)

    want = fn(torch, VIEWS[view](torch.tensor(A)))
    got = tj.compile(lambda x: fn(tj, x))(VIEWS[view](tj.tensor(A)))
    for g, w in zip(got, want):
        assert g.stride() == w.stride() and g.dtype.itemsize == w.dtype.itemsize
    np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
    np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())


def test_named_formats():
    for m in (torch, tj):
        x = m.tensor(A).transpose(1, 3)
        assert x.clone(memory_format=m.contiguous_format).stride() == (60, 12, 3, 1)
        assert m.zeros_like(x, memory_format=m.contiguous_format).stride() == (60, 12, 3, 1)
        assert m.empty_like(m.tensor(A), memory_format=m.channels_last).stride() == (60, 1, 15, 3)
        assert m.tensor(A).clone(memory_format=m.preserve_format).stride() == (60, 20, 5, 1)


def test_clone_is_new_memory_with_torchs_gradient():
    def run(m):
        x = m.tensor(A[0], requires_grad=True)
        y = x.transpose(0, 2).clone()
        assert y._base is None and y.is_leaf is False
        y[:, 0] += 1                       # (x keeps its values)
        loss = (y * y * m.arange(4.0)[None, :, None]).sum()
        loss.backward()
        return x.detach().numpy(), y.detach().numpy(), x.grad.numpy()

    for got, want in zip(run(tj), run(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_like_with_requires_grad_is_a_leaf():
    z = tj.zeros_like(tj.tensor(A).transpose(0, 2), requires_grad=True)
    assert z.is_leaf and z.requires_grad and z.stride() == (5, 20, 60, 1)
    (z * 3).sum().backward()
    np.testing.assert_array_equal(z.grad.numpy(), np.full(z.shape, 3.0, np.float32))


@pytest.mark.parametrize("compiled", [False, True])
def test_cat_of_one_tensor_is_row_major_unless_channels_last(compiled):
    def fn(m, x):
        return m.cat([x.transpose(1, 3)]), m.cat([x.contiguous(memory_format=m.channels_last)], 1)

    want = fn(torch, torch.tensor(A))
    got = (tj.compile(lambda x: fn(tj, x)) if compiled else lambda x: fn(tj, x))(tj.tensor(A))
    for g, w in zip(got, want):
        assert g.stride() == w.stride()
        np.testing.assert_array_equal(g.numpy(), w.numpy())


@pytest.mark.parametrize("compiled", [False, True])
def test_repeat_is_row_major_whatever_its_input(compiled):
    """repeat copies into row-major memory, as PyTorch's, so a later view of it works even
    where the input is permuted or has size-1 dims."""
    def fn(m, x):
        y = x[:, 0].transpose(1, 2).unsqueeze(1).unsqueeze(-1).unsqueeze(3)
        r = y.repeat(1, 1, 1, 2, 1, 3)
        return r, r.view(2, 1, 10, 12)

    want = fn(torch, torch.tensor(A))
    got = (tj.compile(lambda x: fn(tj, x)) if compiled else lambda x: fn(tj, x))(tj.tensor(A))
    assert got[0].stride() == want[0].stride() == (120, 120, 24, 12, 3, 1)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
