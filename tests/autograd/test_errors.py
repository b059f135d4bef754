"""Autograd and eager errors: clear messages naming the op and shapes, and no state change
when an op fails."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import DTypeError, GraphFreedError, InplaceModifiedError, ShapeError


def test_backward_on_non_scalar_without_gradient():
    x = tj.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"only for scalar outputs.*\(3,\)"):
        (x * 2).backward()


def test_backward_gradient_of_wrong_shape():
    x = tj.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"\(2,\).*\(3,\)"):
        (x * 2).backward(tj.ones(2))


def test_backward_on_tensor_without_graph():
    with pytest.raises(RuntimeError, match="does not require grad"):
        tj.ones(1).sum().backward()


def test_second_backward_through_freed_graph():
    x = tj.ones(3, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(GraphFreedError, match="retain_graph=True") as info:
        y.backward()
    assert isinstance(info.value, RuntimeError)  # catchable as PyTorch users expect


def test_retain_graph_allows_second_backward():
    x = tj.ones(3, requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 4.0, 4.0])


def test_inplace_change_of_saved_tensor_detected_naming_the_op():
    x = tj.ones(3, requires_grad=True)
    h = x * 2
    y = h.sin()  # SinBackward saves h
    h.add_(1)
    with pytest.raises(InplaceModifiedError, match=r"SinBackward.*version 0.*version 1") as info:
        y.sum().backward()
    assert isinstance(info.value, RuntimeError)


def test_inplace_change_of_saved_output_detected():
    x = tj.ones(3, requires_grad=True)
    y = x.exp()  # ExpBackward saves its output
    y.mul_(2)
    with pytest.raises(InplaceModifiedError, match="output of ExpBackward"):
        y.sum().backward()


def test_inplace_through_a_view_is_detected():
    x = tj.ones(2, 3, requires_grad=True)
    h = x * 1.0
    y = h.cos()  # CosBackward saves h
    with tj.no_grad():
        h[0].mul_(3)  # a view of h: shares its memory and version counter
    assert h._version == 1 and h[0].tolist() == [3.0, 3.0, 3.0]
    with pytest.raises(InplaceModifiedError, match="CosBackward"):
        y.sum().backward()


def test_inplace_on_view_of_leaf_requiring_grad_is_refused():
    x = tj.ones(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="in-place operation on a view"):
        x[0].mul_(3)
    assert x._version == 0


def test_inplace_on_input_only_needed_for_shape_is_fine():
    # sum/reshape/indexing keep only shapes: changing the values later is allowed (PyTorch too).
    x = tj.ones(2, 3, requires_grad=True)
    h = x * 1.0
    y = h.sum() + h.reshape(6)[0] + h[1, 2]
    with tj.no_grad():
        h.add_(1)
    y.backward()
    assert x.grad.sum().item() == 8.0


def test_inplace_on_leaf_requiring_grad():
    w = tj.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad.*no_grad"):
        w.add_(1)
    with pytest.raises(RuntimeError, match="leaf"):
        w *= 2
    with pytest.raises(RuntimeError, match="leaf"):
        w[0] = 5.0
    assert w._version == 0 and w.tolist() == [1.0, 1.0, 1.0]
    with tj.no_grad():
        w.sub_(0.5)  # what optimizers do
    assert w.tolist() == [0.5, 0.5, 0.5] and w._version == 1 and w.is_leaf


@pytest.mark.parametrize("f, pattern", [
    (lambda: tj.ones(2, 3) + tj.ones(3, 2), r"add: shapes \(2, 3\) and \(3, 2\) cannot be broadcast"),
    (lambda: tj.ones(2, 3) * tj.ones(4), r"mul: shapes \(2, 3\) and \(4,\)"),
    (lambda: tj.where(tj.ones(2) > 0, tj.ones(3), tj.ones(2)), r"where: shapes"),
    (lambda: tj.ones(2, 3) @ tj.ones(2, 3), r"matmul: shapes \(2, 3\) and \(2, 3\) cannot be multiplied"),
    (lambda: tj.matmul(tj.ones(3), tj.ones(4)), r"matmul: shapes \(3,\) and \(4,\)"),
    (lambda: tj.mm(tj.ones(2, 3), tj.ones(2, 3)), r"mm: shapes \(2, 3\) and \(2, 3\)"),
    (lambda: tj.bmm(tj.ones(2, 3), tj.ones(2, 3)), r"bmm: expected 3-D tensors, got shapes \(2, 3\)"),
    (lambda: tj.linear(tj.ones(2, 3), tj.ones(4, 2)), r"linear: input of shape \(2, 3\).*\(4, 2\)"),
    (lambda: tj.cat([tj.ones(2, 3), tj.ones(2, 4)]), r"cat: .*\(2, 3\), \(2, 4\)"),
    (lambda: tj.stack([tj.ones(2), tj.ones(3)]), r"stack: .*\(2,\), \(3,\)"),
    (lambda: tj.ones(2, 3).reshape(4, 2), r"reshape: shape \(4, 2\) is invalid for input of shape \(2, 3\)"),
    (lambda: tj.ones(2, 3).expand(3, 3), r"expand: .*\(2, 3\) -> \(3, 3\)"),
    (lambda: tj.ones(2, 3).permute(0, 0), r"permute: dims \(0, 0\)"),
    (lambda: tj.mse_loss(tj.ones(2), tj.ones(3)), r"mse_loss: input shape \(2,\) and target shape \(3,\)"),
    (lambda: tj.conv2d(tj.ones(1, 3, 5, 5), tj.ones(2, 2, 3, 3)), r"conv2d: input of shape \(1, 3, 5, 5\)"),
    (lambda: tj.layer_norm(tj.ones(2, 3), (4,)), r"layer_norm: normalized_shape \(4,\).*\(2, 3\)"),
    (lambda: tj.ones(6).add_(tj.ones(2, 6)), r"add_: output of shape \(2, 6\) doesn't match .* \(6,\)"),
])
def test_shape_errors_name_the_op_and_shapes(f, pattern):
    with pytest.raises(ShapeError, match=pattern) as info:
        f()
    assert isinstance(info.value, (RuntimeError, ValueError))


@pytest.mark.parametrize("f, exc, pattern", [
    (lambda: tj.ones(2, 3).sum(2), IndexError, r"sum: dim 2 is out of range.*rank 2"),
    (lambda: tj.softmax(tj.ones(2, 3), 2), IndexError, r"softmax: dim 2"),
    (lambda: tj.ones(2, 3)[5], IndexError, r"index 5 is out of bounds for dimension 0 with size 2"),
    (lambda: tj.ones(2, 3)[0, 0, 0], IndexError, r"too many indices"),
    (lambda: tj.gather(tj.ones(2, 3), 1, tj.tensor([[5]])), IndexError, r"gather: index 5.*size 3"),
    (lambda: tj.nn.functional.embedding(tj.tensor([5]), tj.ones(3, 2)), IndexError, r"embedding: index 5.*size 3"),
    (lambda: tj.cross_entropy(tj.ones(2, 3), tj.tensor([0, 5])), IndexError, r"nll_loss: index 5.*size 3"),
    (lambda: tj.ones(2).item(), ValueError, r"2 elements"),
    (lambda: bool(tj.ones(2)), RuntimeError, r"ambiguous"),
    (lambda: tj.ones(2) + "a", TypeError, r"add: expected a Tensor or a number, got str"),
    (lambda: tj.ones(2, 3).masked_fill(tj.ones(2, 3), 0), TypeError, r"mask must be a bool tensor"),
    (lambda: tj.argmax(tj.ones(0)), RuntimeError, r"argmax.*empty"),
    (lambda: tj.amax(tj.ones(0, 3), 0), RuntimeError, r"amax: cannot reduce over a zero-size dim"),
])
def test_other_errors_are_clear(f, exc, pattern):
    with pytest.raises(exc, match=pattern):
        f()


def test_dtype_mismatch_in_matmul():
    with pytest.raises(DTypeError, match="matmul: expected both operands to have the same dtype, got float32 and float64"):
        tj.ones(2, 3) @ tj.ones(3, 2, dtype=tj.float64)
    with pytest.raises(TypeError):  # DTypeError is a TypeError too
        tj.mm(tj.ones(2, 3), tj.ones(3, 2, dtype=tj.float64))


def test_requires_grad_on_int_tensor():
    with pytest.raises(DTypeError, match="floating-point"):
        tj.tensor([1, 2], requires_grad=True)
    t = tj.tensor([1, 2])
    with pytest.raises(RuntimeError, match="int64"):
        t.requires_grad_()
    assert not t.requires_grad


def test_device_mismatch_message():
    from tracejit.errors import DeviceMismatchError
    from tracejit.ops import registry

    class FakeDev:  # a second device without needing a GPU
        type = "cuda"
        index = 0

        def __str__(self):
            return "cuda:0"

    a = tj.ones(2)
    b = tj.ones(2)
    b.device = FakeDev()
    with pytest.raises(DeviceMismatchError, match="add: expected all tensors on the same device, got cpu and cuda:0"):
        registry.bind(registry.REGISTRY["add"], a, b)


@pytest.mark.parametrize("bad", [
    lambda t: t.add_(tj.ones(2, 3)),               # would broadcast the target
    lambda t: t.mul_(tj.ones(4)),                  # shape mismatch
    lambda t: t.copy_(tj.ones(5)),                 # cannot expand
    lambda t: t.__setitem__(7, 1.0),               # index out of range
    lambda t: t.__setitem__(slice(None), tj.ones(2)),  # value does not fit
    lambda t: t.clamp_(),                          # no bounds
    lambda t: t.div_("x"),                         # not a number
])
def test_failed_inplace_op_leaves_data_and_version_unchanged(bad):
    t = tj.tensor([1.0, 2.0, 3.0])
    before = t.numpy().copy()
    with pytest.raises(Exception):
        bad(t)
    np.testing.assert_array_equal(t.numpy(), before)
    assert t._version == 0


def test_failed_inplace_on_int_tensor_keeps_state():
    t = tj.tensor([1, 2, 3])
    with pytest.raises(DTypeError, match="can't be cast"):
        t += 1.5
    assert t.tolist() == [1, 2, 3] and t._version == 0 and t.dtype is tj.int64
    t += 2  # same category is fine
    assert t.tolist() == [3, 4, 5] and t._version == 1


def test_inplace_on_expanded_tensor_is_refused():
    t = tj.ones(3).expand(2, 3)
    with pytest.raises(RuntimeError, match="single memory location"):
        t.add_(1)


def test_numpy_on_tensor_requiring_grad():
    with pytest.raises(RuntimeError, match="detach"):
        tj.ones(2, requires_grad=True).numpy()


_SECOND_BACKWARD = {
    "add": lambda m, x, y: x + y,
    "add_number": lambda m, x, y: x + 2,
    "sub_number": lambda m, x, y: 2 - x,
    "neg": lambda m, x, y: -x,
    "mul": lambda m, x, y: x * y,
    "pow_number": lambda m, x, y: x ** 2,
    "exp": lambda m, x, y: x.exp(),
    "relu": lambda m, x, y: x.relu(),
    "mean": lambda m, x, y: x.mean(),
    "views": lambda m, x, y: x.reshape(2, 3).t().reshape(6) - y[1:].expand(2, 5).reshape(10)[:6],
    "cat": lambda m, x, y: m.cat([x, y]),
    "clone_double": lambda m, x, y: x.clone().double(),
    "sum_dim": lambda m, x, y: x.reshape(2, 3).sum(1),
    "chain": lambda m, x, y: (x + 1) * y,
}


@pytest.mark.parametrize("case", sorted(_SECOND_BACKWARD))
def test_second_backward_raises_only_where_pytorch_freed_a_saved_tensor(case):
    """A second backward without retain_graph fails only through a node that kept values
    (PyTorch's rule); one through nodes that kept shapes alone accumulates again."""
    torch = pytest.importorskip("torch")
    f = _SECOND_BACKWARD[case]
    vals = np.linspace(-1.0, 2.0, 6, dtype=np.float32)
    results = []
    for m in (torch, tj):
        x = m.tensor(vals, requires_grad=True)
        y = m.tensor(vals[::-1].copy(), requires_grad=True)
        out = f(m, x, y).sum()
        out.backward()
        try:
            out.backward()
            results.append((x.grad.detach().numpy().copy(), y.grad if y.grad is None else y.grad.numpy().copy()))
        except RuntimeError as exc:
            assert m is torch or isinstance(exc, GraphFreedError)
            results.append("freed")
    if results[0] == "freed" or results[1] == "freed":
        assert results[0] == results[1]
    else:
        for a, b in zip(results[0], results[1]):
            assert (a is None) == (b is None)
            if a is not None:
                np.testing.assert_allclose(b, a, rtol=1e-6)


def _custom(m, save, read):
    class Twice(m.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            if save:
                ctx.save_for_backward(x)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            if read:
                ctx.saved_tensors
            return g * 2
    return Twice


@pytest.mark.parametrize("save,read", [(False, False), (True, False), (True, True)])
def test_second_backward_through_custom_function_as_pytorch(save, read):
    torch = pytest.importorskip("torch")
    outcomes = []
    for m in (torch, tj):
        x = m.ones(3, requires_grad=True)
        out = _custom(m, save, read).apply(x).sum()
        out.backward()
        try:
            out.backward()
            outcomes.append(x.grad.detach().numpy().tolist())
        except RuntimeError as exc:
            assert m is torch or isinstance(exc, GraphFreedError)
            outcomes.append("freed")
    assert outcomes[0] == outcomes[1]
    assert outcomes[0] == ("freed" if read else [4.0, 4.0, 4.0])


def test_second_backward_through_a_number_product_runs_again():
    """``x * 2`` keeps the number, not a tensor (PyTorch wraps it as one and refuses the
    second backward; mean's division by the count keeps one too, and PyTorch allows that)."""
    x = tj.ones(3, requires_grad=True)
    out = (x * 2).sum()
    out.backward()
    out.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 4.0, 4.0])


def _function_returning(grad_shape):
    class Doubled(tj.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return tj.ones(grad_shape), None
    return Doubled


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_custom_backward_of_the_wrong_shape_raises_as_pytorch(compiled):
    # PyTorch's RuntimeError, naming the Function, the argument and both shapes (numpy's
    # "cannot reshape array" before); the leaf's grad is untouched and a broadcast gradient
    # (summed to the input's shape) is still taken.
    def loss(fn, x):
        return fn.apply(x, 2.0).sum()
    x = tj.ones(1, 3, requires_grad=True)
    run = tj.compile(loss) if compiled else loss
    for bad in [(5,), (2, 4), (3,)]:
        with pytest.raises(RuntimeError, match=rf"Function DoubledBackward returned an invalid gradient at index 0 - "
                                               rf"got \[{', '.join(map(str, bad))}\] but expected shape compatible "
                                               rf"with \[1, 3\]") as info:
            run(_function_returning(bad), x).backward()
        assert isinstance(info.value, ShapeError) and x.grad is None
    run(_function_returning((2, 3)), x).backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((1, 3), 2.0, np.float32))
