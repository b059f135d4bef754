"""Tensor hooks, node hooks, custom autograd.Function, higher-order gradients, autograd.grad."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import GraphFreedError, InplaceModifiedError


# --------------------------------------------------------------------------- tensor hooks
def test_tensor_hook_replaces_gradient_of_intermediate():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    seen = []
    h.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 10)
    h.sum().backward()
    np.testing.assert_allclose(seen[0], [1.0, 1.0])
    np.testing.assert_allclose(x.grad.numpy(), [20.0, 20.0])


def test_tensor_hook_on_leaf_registered_before_use():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    x.register_hook(lambda g: g * 3)
    import gc
    gc.collect()  # the hook must survive until the leaf is used
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 12.0])


def test_tensor_hook_returning_none_observes_only_and_remove():
    x = tj.tensor(2.0, requires_grad=True)
    calls = []
    handle = x.register_hook(lambda g: calls.append(g.item()))
    (x * 3).backward()
    assert calls == [3.0] and x.grad.item() == 3.0
    handle.remove()
    (x * 3).backward()
    assert calls == [3.0] and x.grad.item() == 6.0


def test_hook_sees_total_gradient_of_a_tensor_used_twice():
    x = tj.tensor(1.0, requires_grad=True)
    h = x * 1.0
    seen = []
    h.register_hook(lambda g: seen.append(g.item()))
    (h * 2 + h * 3).backward()
    assert seen == [5.0]


def test_hook_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="does not require grad"):
        tj.ones(2).register_hook(lambda g: g)


# --------------------------------------------------------------------------- node hooks
def test_node_post_hook_can_replace_grad_inputs():
    x = tj.tensor(3.0, requires_grad=True)
    y = x * x
    seen = {}

    def hook(grad_inputs, grad_outputs):
        seen["in"] = [g.item() for g in grad_inputs if g is not None]
        seen["out"] = [g.item() for g in grad_outputs]
        return tuple(None if g is None else g * 0.5 for g in grad_inputs)

    y.grad_fn.register_hook(hook)
    y.backward()
    assert seen["out"] == [1.0]
    assert seen["in"] == [3.0, 3.0]
    assert x.grad.item() == 3.0  # (3 + 3) * 0.5


def test_node_prehook_can_replace_grad_outputs():
    x = tj.tensor(3.0, requires_grad=True)
    y = x.exp()
    y.grad_fn.register_prehook(lambda grad_outputs: (grad_outputs[0] * 0.0 + 2.0,))
    y.backward()
    assert x.grad.item() == pytest.approx(2.0 * math.exp(3.0), rel=1e-6)


# --------------------------------------------------------------------------- custom Function
class Exp(tj.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        ctx.seen_needs = ctx.needs_input_grad
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y


def test_custom_function_exp():
    x = tj.tensor([0.0, 1.0], requires_grad=True)
    y = Exp.apply(x)
    assert y.grad_fn.name() == "ExpBackward"
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp([0.0, 1.0]), rtol=1e-6)


def test_custom_function_needs_input_grad_and_no_grad_inputs():
    class MulConst(tj.autograd.Function):
        @staticmethod
        def forward(ctx, a, b, k):
            ctx.save_for_backward(a, b)
            ctx.k = k
            ctx.needs = ctx.needs_input_grad
            return a * b * k

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            assert ctx.needs_input_grad == (True, False, False)
            return g * b * ctx.k, None, None

    a = tj.tensor([1.0, 2.0], requires_grad=True)
    b = tj.tensor([3.0, 4.0])
    out = MulConst.apply(a, b, 2.0)
    out.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [6.0, 8.0])
    # Without any input requiring grad, apply just runs forward.
    plain = MulConst.apply(b, b, 1.0)
    assert plain.grad_fn is None and not plain.requires_grad


def test_custom_function_second_derivative_through_saved_output():
    x = tj.tensor(0.7, dtype=tj.float64, requires_grad=True)
    y = Exp.apply(x)
    (g,) = tj.autograd.grad(y, x, create_graph=True)
    (gg,) = tj.autograd.grad(g, x)
    assert gg.item() == pytest.approx(math.exp(0.7))


def test_custom_function_saved_tensors_freed_and_inplace_detected():
    x = tj.tensor([1.0], requires_grad=True)
    y = Exp.apply(x * 1.0)
    y.sum().backward()
    with pytest.raises(GraphFreedError, match="retain_graph=True"):
        y.sum().backward()
    z = Exp.apply(x * 1.0)
    with tj.no_grad():
        z.add_(1)
    with pytest.raises(InplaceModifiedError, match="ExpBackward"):
        z.sum().backward()



def test_custom_function_graph_is_freed_without_the_cycle_collector():
    """ctx and its node hold no reference cycle: the graph goes when its output goes
    (the recurrent layers make such nodes every step)."""
    import gc
    import weakref
    x = tj.tensor([0.5, 1.5], requires_grad=True)
    gc.disable()
    try:
        y = Exp.apply(x * 2.0)
        node = weakref.ref(y.grad_fn)
        ctx = weakref.ref(y.grad_fn.ctx)
        del y
        assert node() is None and ctx() is None
    finally:
        gc.enable()
    y = Exp.apply(x * 2.0)  # and the saved output still unpacks for backward
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp([1.0, 3.0]), rtol=1e-6)

# --------------------------------------------------------------------------- higher order
def test_second_derivative_of_cube():
    x = tj.tensor(2.0, requires_grad=True)
    y = x ** 3
    (dy,) = tj.autograd.grad(y, x, create_graph=True)
    assert dy.item() == pytest.approx(12.0)  # 3 x^2
    (d2y,) = tj.autograd.grad(dy, x, create_graph=True)
    assert d2y.item() == pytest.approx(12.0)  # 6 x
    (d3y,) = tj.autograd.grad(d2y, x)
    assert d3y.item() == pytest.approx(6.0)


def test_second_derivative_of_tanh():
    x = tj.tensor(0.5, dtype=tj.float64, requires_grad=True)
    y = tj.tanh(x)
    (dy,) = tj.autograd.grad(y, x, create_graph=True)
    t = math.tanh(0.5)
    assert dy.item() == pytest.approx(1 - t * t)
    (d2y,) = tj.autograd.grad(dy, x)
    assert d2y.item() == pytest.approx(-2 * t * (1 - t * t))


def test_backward_with_create_graph_then_backward_again():
    x = tj.tensor(3.0, dtype=tj.float64, requires_grad=True)
    y = x ** 2
    y.backward(create_graph=True)
    g = x.grad
    assert g.item() == 6.0 and g.requires_grad
    x.grad = None
    g.backward()
    assert x.grad.item() == 2.0


def test_hessian_vector_product():
    w = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
    f = (w[0] ** 2) * w[1] + w[1] ** 3  # H = [[2 w1, 2 w0], [2 w0, 6 w1]]
    (g,) = tj.autograd.grad(f, w, create_graph=True)
    v = tj.tensor([1.0, -1.0], dtype=tj.float64)
    (hv,) = tj.autograd.grad((g * v).sum(), w)
    np.testing.assert_allclose(hv.numpy(), [4 - 2, 2 - 12])


# --------------------------------------------------------------------------- autograd.grad
def test_grad_with_grad_outputs_does_not_touch_dot_grad():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    (g,) = tj.autograd.grad(y, x, grad_outputs=tj.tensor([1.0, 10.0]))
    np.testing.assert_allclose(g.numpy(), [2.0, 40.0])
    assert x.grad is None


def test_grad_allow_unused():
    x = tj.tensor(1.0, requires_grad=True)
    z = tj.tensor(1.0, requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="allow_unused"):
        tj.autograd.grad(y, [x, z], retain_graph=True)
    gx, gz = tj.autograd.grad(y, [x, z], allow_unused=True)
    assert gx.item() == 2.0 and gz is None


def test_grad_retain_graph():
    x = tj.tensor(2.0, requires_grad=True)
    y = x.exp()
    (a,) = tj.autograd.grad(y, x, retain_graph=True)
    (b,) = tj.autograd.grad(y, x)
    assert a.item() == b.item()
    with pytest.raises(GraphFreedError, match="retain_graph=True"):
        tj.autograd.grad(y, x)


def test_grad_wrt_intermediate_and_multiple_outputs():
    x = tj.tensor(2.0, requires_grad=True)
    h = x * 3
    y1 = h * h
    y2 = h + x
    gh, gx = tj.autograd.grad([y1, y2], [h, x])
    assert gh.item() == 2 * 6.0 + 1.0
    assert gx.item() == (2 * 6.0 + 1.0) * 3 + 1.0


def test_grad_input_that_does_not_require_grad():
    with pytest.raises(RuntimeError, match="does not require grad"):
        tj.autograd.grad(tj.ones(1, requires_grad=True).sum(), tj.ones(1))


def test_backward_on_multiple_roots():
    x = tj.tensor(1.0, requires_grad=True)
    tj.autograd.backward([x * 2, x * 3])
    assert x.grad.item() == 5.0


def test_custom_function_multiple_outputs_and_non_differentiable():
    class SortLike(tj.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            idx = tj.tensor([1, 0])
            ctx.mark_non_differentiable(idx)
            ctx.save_for_backward(idx)
            return x[idx] * 2, idx

        @staticmethod
        def backward(ctx, g, g_idx):
            (idx,) = ctx.saved_tensors
            assert g_idx is None or float(g_idx.abs().sum()) == 0.0
            out = tj.zeros(2, dtype=g.dtype)
            out[idx] = g * 2
            return out

    x = tj.tensor([3.0, 5.0], requires_grad=True)
    y, idx = SortLike.apply(x)
    assert not idx.requires_grad and y.requires_grad
    (y * tj.tensor([1.0, 10.0])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [20.0, 2.0])


def test_custom_function_unused_output_gets_zero_gradient():
    class Two(tj.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, ga, gb):
            assert ga is not None and gb is not None  # materialized as zeros
            return ga * 2 + gb * 3

    x = tj.tensor(1.0, requires_grad=True)
    a, b = Two.apply(x)
    a.backward()
    assert x.grad.item() == 2.0


def _setup_context_style(m):
    class MatMul(m.autograd.Function):
        @staticmethod
        def forward(x, w):
            return x @ w

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            return (g @ w.T if ctx.needs_input_grad[0] else None,
                    x.T @ g if ctx.needs_input_grad[1] else None)
    return MatMul


@pytest.mark.parametrize("compiled", [False, True])
def test_a_function_with_setup_context_matches_pytorch(compiled):
    """PyTorch 2's style: forward without ctx, then setup_context(ctx, inputs, output)."""
    torch = pytest.importorskip("torch")
    x, w = np.arange(6, dtype=np.float32).reshape(2, 3) / 5, np.ones((3, 2), np.float32) / 3
    got = []
    for m in (torch, tj):
        fn = _setup_context_style(m)
        a, b = m.tensor(x, requires_grad=True), m.tensor(w, requires_grad=True)
        f = (lambda a, b: fn.apply(a, b).sin().sum())
        if compiled and m is tj:
            f = tj.compile(f, fullgraph=True)
        f(a, b).backward()
        got.append([a.grad.numpy(), b.grad.numpy()])
    for t, j in zip(*got):
        np.testing.assert_allclose(j, t, rtol=1e-6)


@pytest.mark.parametrize("write", ["mul_", "setitem", "twice", "view", "relu_"])
def test_retain_grad_follows_an_in_place_write_as_pytorch(write):
    """After an in-place op the retained ``.grad`` is the gradient of the tensor's latest
    value (PyTorch moves the retains_grad hook); a hook registered before still sees the
    gradient of the value it was registered on."""
    torch = pytest.importorskip("torch")

    def run(lib):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x * 1
        y.retain_grad()
        seen = []
        y.register_hook(lambda g: seen.append(g.detach().numpy().copy()))
        if write == "mul_":
            y.mul_(2)
        elif write == "setitem":
            y[0] = 7.0
        elif write == "twice":
            y.add_(1)
            y.mul_(3)
        elif write == "view":
            y[:2].mul_(2)
        else:
            y.relu_()
        (y * y).sum().backward()
        return [x.grad.numpy(), y.grad.numpy(), *seen], y.retains_grad

    (want, want_flag), (got, got_flag) = run(torch), run(tj)
    assert got_flag is want_flag is True
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w)


@pytest.mark.parametrize("hook,match", [(lambda g: g.double(), "changed the type of value"),
                                        (lambda g: g[:1], "changed the size of value"),
                                        (lambda g: g.sum(), "changed the size of value")])
@pytest.mark.parametrize("leaf", [False, True])
def test_a_hook_changing_the_gradients_type_or_size_raises_as_torch(hook, match, leaf):
    torch = pytest.importorskip("torch")
    for m in (torch, tj):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        y = x if leaf else x * 2
        y.register_hook(hook)
        with pytest.raises(RuntimeError, match=match):
            (y * 3).sum().backward()
