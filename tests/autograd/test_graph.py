"""``autograd.graph`` (Node, increment_version, saved-tensor hooks, save_on_cpu),
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
def test_once_differentiable_refuses_a_second_order_through_a_gradient_with_history(m):
    # (the gradient reaching Cube's backward depends on x: a second order would need
    # Cube's backward differentiated, which once_differentiable forbids)
    x = m.tensor([1.0, -2.0], requires_grad=True)
    (g,) = m.autograd.grad((_cube(m).apply(x) * x).sum(), [x], create_graph=True)
    assert g.tolist() == [4.0, -32.0] and g.requires_grad
    with pytest.raises(RuntimeError, match="once_differentiable"):
        g.sum().backward()


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


def _hooked_run(m, body):
    """(shapes the pack hook saw, unpack calls, the leaf's gradient) for `body(m, x)` run
    inside saved_tensors_hooks whose unpack doubles every saved tensor."""
    packed, unpacked = [], []

    def pack(t):
        packed.append(tuple(t.shape))
        return ("packed", t)

    def unpack(p):
        unpacked.append(1)
        return p[1] * 2
    x = m.tensor([0.5, -1.0, 2.0], requires_grad=True)
    with m.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = body(m, x)
    y.backward(retain_graph=True)
    y.backward()
    return packed, len(unpacked), x.grad.tolist()


_BODIES = {"mul": lambda m, x: (x * x).sum(),
           "exp_output": lambda m, x: x.exp().sum(),
           "linear_tanh": lambda m, x: (m.ones(2, 3) @ x.reshape(3, 1)).tanh().sum(),
           "add_saves_nothing": lambda m, x: (x + 1).sum()}


@pytest.mark.parametrize("body", list(_BODIES))
def test_saved_tensors_hooks_pack_and_unpack_as_torch(body):
    got = _hooked_run(tj, _BODIES[body])
    want = _hooked_run(torch, _BODIES[body])
    assert got[:2] == want[:2]
    np.testing.assert_allclose(got[2], want[2], rtol=1e-5)


def test_saved_tensors_hooks_nest_disable_and_reach_compiled_functions():
    graph = tj.autograd.graph
    seen = []
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    with graph.saved_tensors_hooks(lambda t: seen.append("outer") or t, lambda t: t):
        with graph.saved_tensors_hooks(lambda t: seen.append("inner") or t, lambda t: t):
            (x * x).sum().backward()
        f = tj.compile(lambda v: (v * v).sum())
        f(x).backward()   # (runs eagerly: each op's saved tensors go through the hooks)
    assert seen == ["inner", "inner", "outer", "outer"] and x.grad.tolist() == [4.0, 8.0]
    assert f(x).item() == 5.0 and f.cache_stats()["compiles"] == 1   # (after the block: compiled)
    for lib in (tj, torch):
        with lib.autograd.graph.disable_saved_tensors_hooks("no hooks in here"):
            with pytest.raises(RuntimeError, match="no hooks in here"):
                with lib.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                    pass
        with lib.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            pass   # (allowed again after the block)
    with pytest.raises(TypeError, match="unpack_hook must be callable"):
        graph.saved_tensors_hooks(lambda t: t, None)
    with graph.saved_tensors_hooks(lambda t: t, lambda p: "not a tensor"):
        y = (x * x).sum()
    with pytest.raises(TypeError, match="unpack hook must return a tensor, got str"):
        y.backward()


def test_saved_tensors_hooks_see_a_custom_functions_saved_tensors():
    got = []
    for m in (tj, torch):
        seen = []
        x = m.tensor([1.0, -2.0], requires_grad=True)
        with m.autograd.graph.saved_tensors_hooks(lambda t: seen.append(t.tolist()) or t, lambda t: t * 10):
            y = _cube(m).apply(x)
        y.sum().backward()
        got.append((seen, x.grad.tolist()))
    assert got[0] == got[1] == ([[1.0, -2.0]], [300.0, 1200.0])   # (3 (10 x)^2)


def _multi_grad_log(lib):
    a = lib.tensor([1.0, 2.0], requires_grad=True)
    b = lib.tensor([3.0], requires_grad=True)
    c = a * 3
    seen, first = [], []
    h = lib.autograd.graph.register_multi_grad_hook(
        (c, b, a), lambda gs: seen.append([None if g is None else g.tolist() for g in gs]))
    (c.sum() * 2 + b.sum()).backward(retain_graph=True)
    c.sum().backward(retain_graph=True)
    (b * b).sum().backward()
    h.remove()
    c.sum().backward()
    x, y = lib.tensor([1.0], requires_grad=True), lib.tensor([2.0], requires_grad=True)
    lib.autograd.graph.register_multi_grad_hook([x, y], lambda g: first.append(g.tolist()), mode="any")
    (x * 3 + y * 3).sum().backward()   # (both reached: one call, whichever comes first)
    (x * 5).sum().backward()
    return seen, first


def test_multi_grad_hooks_fire_once_a_backward_as_pytorchs():
    torch = pytest.importorskip("torch")
    got = _multi_grad_log(tj)
    assert got == _multi_grad_log(torch)
    assert got[0][1] == [[1.0, 1.0], None, [3.0, 3.0]] and got[1] == [[3.0], [5.0]]
    with pytest.raises(ValueError, match="mode"):
        tj.autograd.graph.register_multi_grad_hook([tj.ones(1, requires_grad=True)], print, mode="some")
