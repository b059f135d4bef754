"""Tensors made inside ``inference_mode`` are inference tensors, as PyTorch's: they say so
(``is_inference()``, their views and detached aliases too, not what is computed from them
outside), autograd outside refuses to save them for backward, and outside the mode they
refuse in-place updates and requires_grad. Each checked against PyTorch."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _made_inside(m, w):
    with m.inference_mode():
        a = m.ones(3) * 2
        b = w * 3
        c = m.tensor([1.0, 2.0, 3.0])
        v = w[:2]
        inside = (a.is_inference(), b.is_inference(), b.requires_grad, c.is_inference(),
                  v.is_inference(), w.is_inference(), m.is_inference_mode_enabled())
    return a, inside


@pytest.mark.parametrize("m", [tj, torch], ids=["tracejit", "torch"])
def test_tensors_made_inside_are_inference_tensors(m):
    w = m.ones(3, requires_grad=True)
    a, inside = _made_inside(m, w)
    assert inside == (True, True, False, True, False, False, True)
    assert a.is_inference() and m.is_inference(a) and not w.is_inference()
    assert a.view(3).is_inference() and a[0].is_inference() and a.detach().is_inference()
    assert not a.clone().is_inference() and not (a * 2).is_inference() and not m.exp(a).is_inference()
    with m.no_grad():
        assert not m.ones(2).is_inference()
    with m.inference_mode():
        with m.inference_mode(False):
            assert not m.ones(2).is_inference()
        assert m.ones(2).is_inference()

    @m.inference_mode()
    def f(x):
        return x * 2
    assert f(w).is_inference()


SAVED = {"mul": lambda w, a: (w * a).sum(), "matmul": lambda w, a: w @ a,
         "sigmoid then mul": lambda w, a: (w.sigmoid() * a).sum()}
NOT_SAVED = {"add": lambda w, a: (w + a).sum(), "sub": lambda w, a: (w - a).sum(),
             "clone": lambda w, a: (w * a.clone()).sum()}


@pytest.mark.parametrize("name", list(SAVED) + list(NOT_SAVED))
def test_autograd_refuses_to_save_an_inference_tensor_as_pytorch(name):
    fn = {**SAVED, **NOT_SAVED}[name]
    results = []
    for m in (tj, torch):
        w = m.tensor([0.5, -1.0, 2.0], requires_grad=True)
        with m.inference_mode():
            a = m.tensor([1.0, 2.0, 3.0])
        if name in SAVED:
            with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
                fn(w, a)
            with m.no_grad():   # (nothing recorded: nothing saved)
                results.append(fn(w, a).detach().numpy())
        else:
            fn(w, a).backward()
            results.append(w.grad.numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


@pytest.mark.parametrize("m", [tj, torch], ids=["tracejit", "torch"])
def test_a_custom_function_refuses_to_save_an_inference_tensor(m):
    class Scale(m.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(y)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2, None

    w = m.ones(3, requires_grad=True)
    with m.inference_mode():
        a = m.ones(3)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        Scale.apply(w, a)


@pytest.mark.parametrize("m", [tj, torch], ids=["tracejit", "torch"])
def test_outside_the_mode_in_place_updates_and_requires_grad_are_refused(m):
    with m.inference_mode():
        a = m.ones(3)
        a.add_(1)      # (inside: allowed)
        a.mul_(a)
    for update in (lambda: a.add_(1), lambda: a.mul_(2), lambda: a.zero_(),
                   lambda: a.copy_(m.zeros(3)), lambda: a.__setitem__(0, 5.0)):
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside"):
            update()
        with m.no_grad(), pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
            update()
    with pytest.raises(RuntimeError, match="Setting requires_grad=True on inference tensor"):
        a.requires_grad_()
    with pytest.raises(RuntimeError, match="Setting requires_grad=True on inference tensor"):
        m.nn.Parameter(a)
    if m is tj:   # (refused before writing; some of PyTorch's kernels write, then raise)
        assert a.tolist() == [4.0, 4.0, 4.0]
    b = a.clone()
    b.add_(1).requires_grad_()
    assert b.requires_grad and not b.is_inference()


@pytest.mark.parametrize("m", [tj, torch], ids=["tracejit", "torch"])
def test_a_model_evaluated_in_inference_mode_trains_after(m):
    """The common pattern: evaluate under inference_mode, train on fresh inputs after; the
    inference outputs are for reading only."""
    m.manual_seed(0)
    model = m.nn.Linear(3, 2)
    x = m.tensor(np.linspace(-1, 1, 12).reshape(4, 3).astype(np.float32))
    with m.inference_mode():
        y = model(x)
    assert y.is_inference() and not y.requires_grad and not model.weight.is_inference()
    model(x).pow(2).sum().backward()
    assert model.weight.grad is not None
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        (model(x) * y).sum()
