"""nn.functional re-exports the ops (one definition each) and adapts a few PyTorch signatures."""
import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit import ops


@pytest.mark.parametrize("name", ["gelu", "layer_norm", "dropout", "embedding",
                                  "one_hot", "conv2d", "max_pool2d", "avg_pool2d", "linear", "mse_loss",
                                  "l1_loss", "cross_entropy", "nll_loss", "binary_cross_entropy",
                                  "binary_cross_entropy_with_logits", "sigmoid", "tanh",
                                  "softplus", "logsigmoid"])
def test_functional_is_the_op(name):
    assert getattr(F, name) is getattr(ops, name)


def test_relu_and_leaky_relu_inplace():
    x = tj.tensor([-1.0, 2.0])
    assert F.relu(x).tolist() == [0.0, 2.0] and x.tolist() == [-1.0, 2.0]
    assert F.relu(x, inplace=True) is x and x.tolist() == [0.0, 2.0]
    y = tj.tensor([-1.0, 2.0])
    assert F.leaky_relu(y, 0.5).tolist() == [-0.5, 2.0]
    assert F.leaky_relu(y, 0.5, inplace=True) is y and y.tolist() == [-0.5, 2.0]
    z = tj.tensor([-1.0, 2.0])
    want = (z * z.sigmoid()).tolist()
    assert F.silu(z).tolist() == want and z.tolist() == [-1.0, 2.0]
    assert F.silu(z, inplace=True) is z and z.tolist() == want   # (PyTorch's inplace= too)


def test_dropout_training_flag():
    x = tj.ones(100)
    assert F.dropout(x, 0.5, training=False) is x
    tj.manual_seed(0)
    assert (F.dropout(x, 0.5).numpy() == 0).any()


def test_pad_constant_values_and_grad():
    x = tj.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = F.pad(x, (1, 2, 0, 1), value=-1.0)
    np.testing.assert_array_equal(y.detach().numpy(),
                                  np.pad(x.detach().numpy(), ((0, 1), (1, 2)), constant_values=-1.0))
    (y * y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 2 * x.detach().numpy())
    assert F.pad(x, (0, 0)).shape == (2, 2)
    with pytest.raises(ValueError, match="even"):
        F.pad(x, (1,))
    with pytest.raises(NotImplementedError, match="symmetric"):
        F.pad(x, (1, 1), mode="symmetric")


def test_unfold_fold_pytorch_argument_order():
    x = tj.randn(1, 2, 5, 5)
    cols = F.unfold(x, kernel_size=3, dilation=1, padding=1, stride=2)
    assert cols.shape == (1, 2 * 9, 9)
    np.testing.assert_array_equal(cols.numpy(), ops.unfold(x, 3, 2, 1, 1).numpy())
    back = F.fold(cols, (5, 5), kernel_size=3, padding=1, stride=2)
    assert back.shape == (1, 2, 5, 5)


def test_unfold_and_fold_take_one_unbatched_image():
    x = tj.randn(1, 2, 5, 4)
    cols = F.unfold(x, 2, padding=1)
    np.testing.assert_array_equal(F.unfold(x[0], 2, padding=1).numpy(), cols[0].numpy())
    np.testing.assert_array_equal(tj.nn.Unfold(2, padding=1)(x[0]).numpy(), cols[0].numpy())
    back = F.fold(cols, (5, 4), 2, padding=1)
    np.testing.assert_array_equal(F.fold(cols[0], (5, 4), 2, padding=1).numpy(), back[0].numpy())
    np.testing.assert_array_equal(tj.nn.Fold((5, 4), 2, padding=1)(cols[0]).numpy(), back[0].numpy())
    torch = pytest.importorskip("torch")
    want = torch.nn.functional.unfold(torch.tensor(x[0].numpy()), 2, padding=1).numpy()
    np.testing.assert_allclose(cols[0].numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "softmin"])
@pytest.mark.parametrize("shape,dim", [((4,), 0), ((2, 3), 1), ((2, 3, 4), 0), ((2, 3, 4, 5), 1)])
def test_softmax_without_dim_takes_pytorchs_legacy_dim(name, shape, dim):
    x = tj.tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    with pytest.warns(UserWarning, match=f"Implicit dimension choice for {name}"):
        got = getattr(F, name)(x)
    np.testing.assert_allclose(got.numpy(), getattr(F, name)(x, dim).numpy(), rtol=1e-6)


def test_fold_names_a_wrong_block_count_and_channel_count():
    from tracejit.errors import ShapeError
    with pytest.raises(ShapeError, match="9 blocks, got 12"):
        F.fold(tj.zeros(1, 8, 12), (4, 5), 2, padding=1, stride=2)
    with pytest.raises(ShapeError, match="divisible by the product of kernel_size"):
        F.fold(tj.zeros(1, 7, 9), (4, 5), 2, padding=1, stride=2)
    assert tuple(F.fold(tj.ones(8, 9), (4, 5), 2, padding=1, stride=2).shape) == (2, 4, 5)


@pytest.mark.parametrize("how", ["dims", "int argument"])
def test_fold_of_unfold_over_a_changing_height_captures_twice(how):
    """``F.fold(F.unfold(x, ...), ...)`` with the height changing every call, the output size
    read off x's shape or given as an int argument: symbolic after the first sizes, values and
    gradients as PyTorch's; a height that does not match the columns still raises."""
    torch = pytest.importorskip("torch")

    def f(L, x, h):
        Fm = L.nn.functional
        u = Fm.unfold(x, kernel_size=3, padding=1)
        size = x.shape[-2:] if how == "dims" else (h, x.shape[3])
        return Fm.fold(u * u, size, kernel_size=3, padding=1)

    cf = tj.compile(lambda x, h: f(tj, x, h))
    rng = np.random.default_rng(0)
    for h in range(3, 12):
        v = rng.standard_normal((2, 3, h, 5)).astype(np.float32)
        x, t = tj.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
        y, yt = cf(x, h), f(torch, t, h)
        np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
        (y * y).sum().backward()
        (yt * yt).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-4)
    st = cf.cache_stats()
    assert st["compiles"] == 2, st["recompile_reasons"]
    if how == "int argument":
        with pytest.raises(tj.errors.ShapeError, match="must be 7 \\* 5 = 35 blocks, got 45"):
            cf(tj.randn(2, 3, 9, 5), 7)


def test_one_hot_of_an_empty_tensor_needs_num_classes_as_in_pytorch():
    torch = pytest.importorskip("torch")
    for m in (torch, tj):
        with pytest.raises(RuntimeError, match="empty"):
            m.nn.functional.one_hot(m.zeros(0, dtype=m.int64))
        assert tuple(m.nn.functional.one_hot(m.zeros(0, dtype=m.int64), 3).shape) == (0, 3)
