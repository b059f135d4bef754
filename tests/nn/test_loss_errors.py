"""Loss errors that used to mislead: class-index dtype, BCE target range and dtype, int32 targets."""
import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F


def test_float_class_indices_report_dtype_not_shape():
    logits = tj.randn(4, 3)
    with pytest.raises(TypeError, match=r"class indices but has dtype float32.*integer"):
        F.cross_entropy(logits, tj.tensor([0.0, 2.0, 1.0, 1.0]))
    with pytest.raises(TypeError, match="dtype float32"):
        tj.nn.CrossEntropyLoss()(tj.randn(2, 3, 5), tj.zeros(2, 5))
    # Probability targets of the input's shape still work; a wrong probability shape is a shape error.
    p = tj.softmax(tj.randn(4, 3), 1)
    assert F.cross_entropy(logits, p).ndim == 0
    with pytest.raises(tj.errors.ShapeError):
        F.cross_entropy(logits, tj.zeros(4, 2))


def test_int32_class_targets_accepted_like_int64():
    logits = tj.randn(5, 4)
    t = np.array([0, 3, 1, 2, 3])
    a = F.cross_entropy(logits, tj.tensor(t.astype(np.int32)))
    b = F.cross_entropy(logits, tj.tensor(t.astype(np.int64)))
    assert a.item() == b.item()


def test_bce_rejects_integer_targets_and_out_of_range_values():
    p = tj.sigmoid(tj.randn(6))
    with pytest.raises(TypeError, match="binary_cross_entropy: target must be a floating point.*int64"):
        F.binary_cross_entropy(p, tj.tensor([0, 1, 1, 0, 1, 0]))
    with pytest.raises(ValueError, match=r"elements of target should be between 0 and 1.*\[0.0, 2.0\]"):
        F.binary_cross_entropy(p, tj.tensor([0.0, 1.0, 2.0, 0.0, 1.0, 0.5]))
    with pytest.raises(ValueError, match="elements of target"):
        tj.nn.BCELoss()(p, tj.tensor([0.0, -0.5, 1.0, 0.0, 1.0, 0.5]))
    with pytest.raises(ValueError, match="elements of input should be between 0 and 1"):
        F.binary_cross_entropy(tj.randn(6) + 5, tj.zeros(6))
    # The boundary values themselves are fine (PyTorch clamps the log at -100).
    out = F.binary_cross_entropy(tj.tensor([0.0, 1.0, 0.3]), tj.tensor([0.0, 1.0, 1.0]))
    assert np.isfinite(out.item())


@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"])
def test_regression_losses_broadcast_another_target_shape_with_a_warning(name):
    x = np.array([[0.5], [1.0], [3.0]], np.float32)
    t = np.array([1.0, 2.0, 0.0], np.float32)
    with pytest.warns(UserWarning, match=r"target size \(3,\) that is different to the input size \(3, 1\)"):
        got = getattr(F, name)(tj.tensor(x), tj.tensor(t), reduction="none")
    d = np.abs(x - t)                                   # (3, 3), as PyTorch broadcasts
    want = {"mse_loss": d * d, "l1_loss": d, "smooth_l1_loss": np.where(d < 1, 0.5 * d * d, d - 0.5),
            "huber_loss": np.where(d < 1, 0.5 * d * d, d - 0.5)}[name]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    with pytest.raises(tj.errors.ShapeError):
        getattr(F, name)(tj.zeros(2, 3), tj.zeros(4))   # not broadcastable: still an error


def test_binary_cross_entropy_gradient_at_saturated_inputs_is_pytorchs():
    torch = pytest.importorskip("torch")
    x = [0.0, 1.0, 0.0, 1.0, 0.5, 0.25]
    t = [0.0, 1.0, 1.0, 0.0, 0.5, 1.0]
    a = tj.tensor(x, requires_grad=True)
    b = torch.tensor(x, requires_grad=True)
    la = tj.nn.functional.binary_cross_entropy(a, tj.tensor(t))
    lb = torch.nn.functional.binary_cross_entropy(b, torch.tensor(t))
    la.backward(), lb.backward()
    np.testing.assert_allclose(la.item(), lb.item(), rtol=1e-6)
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5)
    c = tj.tensor(x, requires_grad=True)
    tj.compile(lambda p: tj.nn.functional.binary_cross_entropy(p, tj.tensor(t)))(c).backward()
    np.testing.assert_allclose(c.grad.numpy(), b.grad.numpy(), rtol=1e-5)


LOSSES_OF_INTEGERS = {
    "cross_entropy": lambda F, x, t, y: F.cross_entropy(x, t),
    "cross_entropy_none": lambda F, x, t, y: F.cross_entropy(x, t, reduction="none"),
    "nll_loss": lambda F, x, t, y: F.nll_loss(x, t),
    "log_softmax": lambda F, x, t, y: F.log_softmax(x, 1),
    "softmax": lambda F, x, t, y: F.softmax(x, 1),
    "mse_loss_none": lambda F, x, t, y: F.mse_loss(x, y, reduction="none"),
    "smooth_l1_loss": lambda F, x, t, y: F.smooth_l1_loss(x, y),
    "huber_loss": lambda F, x, t, y: F.huber_loss(x, y),
    "kl_div": lambda F, x, t, y: F.kl_div(x, y, reduction="sum"),
    "bce_with_logits": lambda F, x, t, y: F.binary_cross_entropy_with_logits(x, y),
    "soft_margin_loss": lambda F, x, t, y: F.soft_margin_loss(x, y),
    "multilabel_soft_margin_loss": lambda F, x, t, y: F.multilabel_soft_margin_loss(x, y),
    "multi_margin_loss": lambda F, x, t, y: F.multi_margin_loss(x, t),
    "multilabel_margin_loss": lambda F, x, t, y: F.multilabel_margin_loss(x, y),
    "gaussian_nll_loss": lambda F, x, t, y: F.gaussian_nll_loss(x, y, y),
}


@pytest.mark.parametrize("name", sorted(LOSSES_OF_INTEGERS))
@pytest.mark.parametrize("compiled", [False, True])
def test_float_only_losses_refuse_integer_input_like_pytorch(name, compiled):
    torch = pytest.importorskip("torch")
    call = LOSSES_OF_INTEGERS[name]
    tx = torch.ones(2, 3, dtype=torch.int64)
    with pytest.raises(RuntimeError) as want:
        call(torch.nn.functional, tx, torch.tensor([0, 1]), tx)
    fn = lambda x, t, y: call(F, x, t, y)   # noqa: E731
    x = tj.ones(2, 3, dtype=tj.int64)
    with pytest.raises(RuntimeError, match="input|int64") as got:
        (tj.compile(fn) if compiled else fn)(x, tj.tensor([0, 1]), x)
    # the same kind as PyTorch's (its NotImplementedError "... not implemented for 'Long'")
    assert isinstance(got.value, type(want.value)), (got.value, want.value)


def test_integer_logits_with_a_float_dtype_are_fine():
    x = tj.tensor([[1, 2, 3]])
    assert abs(F.log_softmax(x, 1, dtype=tj.float32).exp().sum().item() - 1.0) < 1e-6
