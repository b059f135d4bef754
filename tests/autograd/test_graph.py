"""``autograd.graph`` (Node, increment_version, save_on_cpu, disable_saved_tensors_hooks),
``autograd.function``'s ``once_differentiable`` and ``InplaceFunction``, and the
submodules at PyTorch's paths, each against PyTorch."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _cube(m):
    from importlib import import_module
    fn = import_module(m.__name__ + ".autograd.function")

    class Cube(fn.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        @fn.once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x ** 2
    return Cube


@pytest.mark.parametrize("m", [tj, torch], ids=["tracejit", "torch"])
def test_once_differentiable_gives_the_gradient_and_refuses_a_second(m):
    x = m.tensor([1.0, -2.0], requires_grad=True)
    (g,) = m.autograd.grad(_cube(m).apply(x).sum(), [x])
    assert g.tolist() == [3.0, 12.0]
    (g,) = m.autograd.grad(_cube(m).apply(x).sum(), [x], create_graph=True)
    with pytest.raises(RuntimeError):
        m.autograd.grad(g.sum(), [x])


@pytest.mark.parametrize("m", [tj, torch], ids=["tracejit", "torch"])
def test_graph_helpers(m):
    from importlib import import_module
    graph = import_module(m.__name__ + ".autograd.graph")
    fn = import_module(m.__name__ + ".autograd.function")
    assert issubclass(fn.InplaceFunction, fn.Function)
    x = m.tensor([1.0, 2.0], requires_grad=True)
    with graph.disable_saved_tensors_hooks("no hooks here"):
        y = (x * 3).sum()
    with graph.save_on_cpu():
        y = y + (x * x).sum()
    assert isinstance(y.grad_fn, graph.Node)
    y.backward()
    assert x.grad.tolist() == [5.0, 7.0]
    a = m.tensor([1.0, 2.0], requires_grad=True) * 1.0
    z = (a * a).sum()
    graph.increment_version(a)   # as an in-place write: the saved value is stale
    with pytest.raises(RuntimeError):
        z.backward()


@pytest.mark.parametrize("m", [tj, torch], ids=["tracejit", "torch"])
def test_submodules_at_pytorchs_paths(m):
    from importlib import import_module
    gc = import_module(m.__name__ + ".autograd.gradcheck")
    assert callable(m.autograd.gradcheck) and issubclass(gc.GradcheckError, RuntimeError)
    x = m.tensor(np.array([0.3, 0.7]), requires_grad=True)
    with pytest.raises(gc.GradcheckError):
        gc.gradcheck(_wrong(m), (x,))
    assert import_module(m.__name__ + ".autograd.variable").Variable(m.ones(2)).tolist() == [1.0, 1.0]
    with import_module(m.__name__ + ".autograd.anomaly_mode").detect_anomaly():
        pass


def _wrong(m):
    class Wrong(m.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 3
    return Wrong.apply


@pytest.mark.parametrize("m", [tj, torch], ids=["tracejit", "torch"])
def test_grad_layout_policy_as_context_and_switch(m):
    p = m.ones(4, 3).t().requires_grad_()
    with m.autograd.enforce_grad_layout_policy(False):
        (p * 2).sum().backward()
    assert p.grad.tolist() == [[2.0] * 4] * 3
    m.autograd.enforce_grad_layout_policy(True)
    with pytest.raises(TypeError):
        m.autograd.enforce_grad_layout_policy("no")
