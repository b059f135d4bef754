"""Module backward hooks against PyTorch: full hooks, pre-hooks, replaced gradients,
inputs that do not require grad, removal, and compiled modules."""
import warnings

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _pair():
    w = np.random.default_rng(0).standard_normal((4, 3)).astype("float32")
    b = np.random.default_rng(1).standard_normal(4).astype("float32")
    x = np.random.default_rng(2).standard_normal((5, 3)).astype("float32")
    m, tm = tj.nn.Linear(3, 4), torch.nn.Linear(3, 4)
    m.load_state_dict({"weight": tj.tensor(w), "bias": tj.tensor(b)})
    tm.load_state_dict({"weight": torch.tensor(w), "bias": torch.tensor(b)})
    return m, tm, x


def _run(lib, m, x, requires_grad):
    seen = []

    def full(mod, gin, gout):
        seen.append(("full", [None if g is None else g.detach().numpy().copy() for g in gin],
                     [g.detach().numpy().copy() for g in gout]))
        return None if gin[0] is None else (gin[0] * 3,)

    def pre(mod, gout):
        seen.append(("pre", [g.detach().numpy().copy() for g in gout]))
        return (gout[0] * 2,)

    h1 = m.register_full_backward_hook(full)
    h2 = m.register_full_backward_pre_hook(pre)
    xt = lib.tensor(x, requires_grad=requires_grad)
    (m(xt) ** 2).sum().backward()
    h1.remove(), h2.remove()
    return seen, (xt.grad.numpy() if requires_grad else None), m.weight.grad.numpy()


@pytest.mark.parametrize("requires_grad", [True, False])
def test_full_and_pre_hooks_match_pytorch(requires_grad):
    m, tm, x = _pair()
    seen, xg, wg = _run(tj, m, x, requires_grad)
    tseen, txg, twg = _run(torch, tm, x, requires_grad)
    assert [s[0] for s in seen] == [s[0] for s in tseen] == ["pre", "full"]
    np.testing.assert_allclose(seen[0][1][0], tseen[0][1][0], rtol=1e-5)
    if requires_grad:
        np.testing.assert_allclose(seen[1][1][0], tseen[1][1][0], rtol=1e-5)
        np.testing.assert_allclose(xg, txg, rtol=1e-5)
    else:
        assert seen[1][1] == [None] and tseen[1][1] == [None]
    np.testing.assert_allclose(seen[1][2][0], tseen[1][2][0], rtol=1e-5)
    np.testing.assert_allclose(wg, twg, rtol=1e-5)


def test_removed_hooks_do_not_run_and_bad_hook_is_named():
    m, _, x = _pair()
    calls = []
    h = m.register_full_backward_hook(lambda *a: calls.append(1))
    h.remove()
    m(tj.tensor(x, requires_grad=True)).sum().backward()
    assert calls == []
    with pytest.raises(TypeError, match="expected a callable, got int"):
        m.register_full_backward_hook(3)


def test_compiled_module_runs_backward_hooks_eagerly():
    m, tm, x = _pair()
    got, want = [], []
    cm = tj.compile(m)
    cm.register_full_backward_hook(lambda mod, gin, gout: got.append(gin[0].numpy().copy()))
    tm.register_full_backward_hook(lambda mod, gin, gout: want.append(gin[0].numpy().copy()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm(tj.tensor(x, requires_grad=True)).sum().backward()
    tm(torch.tensor(x, requires_grad=True)).sum().backward()
    assert len(got) == 1
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)


def test_hook_on_a_submodule_of_a_compiled_model_falls_back_to_eager():
    m, tm, x = _pair()
    net, tnet = tj.nn.Sequential(m, tj.nn.Tanh()), torch.nn.Sequential(tm, torch.nn.Tanh())
    got, want = [], []
    m.register_full_backward_hook(lambda mod, gin, gout: got.append(gout[0].numpy().copy()))
    tm.register_full_backward_hook(lambda mod, gin, gout: want.append(gout[0].numpy().copy()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tj.compile(net)(tj.tensor(x)).sum().backward()
    tnet(torch.tensor(x)).sum().backward()
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)


def _mixed(lib, replace_input: bool, pre: bool, x_grad: bool):
    """A module of a tensor, a tensor and a float returning two tensors; its hooks' tuples."""
    class Mix(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lib.nn.Linear(3, 2)

        def forward(self, x, y, scale):
            h = self.lin(x) * y
            return h * scale, h.sum(1)

    m, seen = Mix(), []
    w = np.random.default_rng(3).standard_normal((2, 3)).astype("float32")
    m.lin.load_state_dict({"weight": lib.tensor(w), "bias": lib.zeros(2)})

    def hook(mod, grad_input, grad_output):
        seen.append([None if g is None else g.detach().numpy().copy() for g in grad_input + grad_output])
        if replace_input:
            return tuple(None if g is None else g * 2 for g in grad_input)
    m.register_full_backward_hook(hook)
    if pre:
        m.register_full_backward_pre_hook(lambda mod, go: (go[0] * 3, go[1]))
    rng = np.random.default_rng(0)
    x = lib.tensor(rng.standard_normal((4, 3)), dtype=lib.float32, requires_grad=x_grad)
    y = lib.tensor(rng.standard_normal((4, 2)), dtype=lib.float32, requires_grad=True)
    a, b = m(x, y, 0.5)
    (a.sum() + (b * b).sum()).backward()
    return [g.numpy() for g in [y.grad, m.lin.weight.grad] + ([x.grad] if x_grad else [])], seen[0]


@pytest.mark.parametrize("replace_input,pre,x_grad", [(False, False, True), (True, True, True),
                                                      (False, True, False)])
def test_grad_input_has_an_entry_per_argument_as_in_pytorch(replace_input, pre, x_grad):
    """grad_input: None at the float argument, zeros at an input without grad; grad_output
    one entry per output."""
    (got, seen_j), (want, seen_t) = (_mixed(lib, replace_input, pre, x_grad) for lib in (tj, torch))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert [s is None for s in seen_j] == [s is None for s in seen_t] and len(seen_j) == 5
    for a, b in zip(seen_j, seen_t):
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_grad_output_has_none_at_a_non_tensor_output():
    shapes = []
    for lib in (tj, torch):
        lib.manual_seed(0)
        m = lib.nn.LSTM(3, 4)
        m.register_full_backward_pre_hook(lambda mod, go: shapes.append([None if g is None else
                                                                         tuple(g.shape) for g in go]))
        out, _ = m(lib.ones(2, 1, 3, requires_grad=True))
        out.sum().backward()
    assert shapes[0] == shapes[1] == [(2, 1, 4), None]


class _Scaled:
    """A module whose forward takes a keyword (``scale``), built in either library."""

    @staticmethod
    def make(lib):
        class Scaled(lib.nn.Module):
            def forward(self, x, scale=1.0):
                return x * scale
        return Scaled()


@pytest.mark.parametrize("lib", [torch, tj], ids=["torch", "tracejit"])
def test_hooks_with_kwargs_and_prepend(lib):
    m = _Scaled.make(lib)
    order = []
    m.register_forward_pre_hook(lambda mod, args, kwargs: (order.append("pre-kw"), ((args[0] + 1,), {"scale": 3.0}))[1],
                                with_kwargs=True)
    m.register_forward_pre_hook(lambda mod, args: order.append("pre-first"), prepend=True)
    m.register_forward_hook(lambda mod, args, kwargs, out: (order.append(("post-kw", kwargs["scale"])), out * 2)[1],
                            with_kwargs=True)
    h = m.register_forward_hook(lambda mod, args, out: order.append("post-first"), prepend=True, always_call=True)
    out = m(lib.ones(2), scale=5.0)
    assert out.tolist() == [12.0, 12.0]   # (1 + 1) * 3, doubled
    assert order == ["pre-first", "pre-kw", "post-first", ("post-kw", 3.0)]
    h.remove()
    with pytest.raises(RuntimeError, match="tuple of \\(new_args, new_kwargs\\)"):
        m.register_forward_pre_hook(lambda mod, args, kwargs: 1.0, with_kwargs=True)
        m(lib.ones(2))


@pytest.mark.parametrize("lib", [torch, tj], ids=["torch", "tracejit"])
def test_module_bfloat16_type_and_parameter_list_extend(lib):
    m = lib.nn.Linear(2, 2)
    assert m.bfloat16().weight.dtype is lib.bfloat16 and m.type(lib.float64).weight.dtype is lib.float64
    pl = lib.nn.ParameterList([lib.nn.Parameter(lib.ones(1))])
    pl.extend([lib.nn.Parameter(lib.zeros(2))])
    pl += [lib.nn.Parameter(lib.zeros(3))]
    assert [tuple(p.shape) for p in pl] == [(1,), (2,), (3,)] and len(list(pl.parameters())) == 3


def test_hooks_with_kwargs_compiled():
    m = _Scaled.make(tj)
    m.register_forward_pre_hook(lambda mod, args, kwargs: (args, {"scale": kwargs.get("scale", 1.0) * 2}),
                                with_kwargs=True)
    f = tj.compile(m)
    assert f(tj.ones(2), scale=3.0).tolist() == [6.0, 6.0]


@pytest.mark.parametrize("lib", [torch, tj], ids=["torch", "tracejit"])
def test_always_call_hooks_run_when_forward_raises(lib):
    class Failing(lib.nn.Module):
        def forward(self, x, scale=1.0):
            raise ValueError("no forward")
    m, seen = Failing(), []
    m.register_forward_hook(lambda mod, args, out: seen.append(("plain", out)))
    m.register_forward_hook(lambda mod, args, out: seen.append(("always", len(args), out)), always_call=True)
    m.register_forward_hook(lambda mod, args, kwargs, out: seen.append(("kw", kwargs, out)), always_call=True,
                            with_kwargs=True)

    def failing_hook(mod, args, out):
        raise KeyError("hook")
    m.register_forward_hook(failing_hook, always_call=True)
    with pytest.warns(UserWarning, match="always_call=True.*silenced"), pytest.raises(ValueError, match="no forward"):
        m(lib.ones(1), scale=2.0)
    assert seen == [("always", 1, None), ("kw", {"scale": 2.0}, None)]


@pytest.mark.parametrize("lib", [torch, tj], ids=["torch", "tracejit"])
def test_an_always_call_hook_that_ran_is_not_run_again(lib):
    m, seen = lib.nn.Identity(), []
    m.register_forward_hook(lambda mod, args, out: seen.append("always"), always_call=True)

    def failing_hook(mod, args, out):
        raise KeyError("hook")
    m.register_forward_hook(failing_hook)
    with pytest.raises(KeyError):
        m(lib.ones(1))
    assert seen == ["always"]


def test_grad_output_is_none_for_an_output_the_loss_does_not_use():
    res = []
    for L in (torch, tj):
        class Two(L.nn.Module):
            def forward(self, a, b):
                return a * b, a + b
        m, seen = Two(), []
        m.register_full_backward_pre_hook(lambda mod, gout: seen.append(("pre", [g is None for g in gout])))
        m.register_full_backward_hook(
            lambda mod, gin, gout: seen.append(("full", [None if g is None else g.tolist() for g in gin],
                                                [None if g is None else g.tolist() for g in gout])))
        a = L.tensor([1.0, 2.0], requires_grad=True)
        x, _ = m(a, L.tensor([3.0, 4.0]))
        (x * 2).sum().backward()
        res.append((seen, a.grad.tolist()))
    assert res[1] == res[0]
    assert res[0][0][0] == ("pre", [False, True])


def _global_hooks_run(L):
    M = L.nn.modules.module
    m = L.nn.Sequential(L.nn.Linear(2, 2), L.nn.ReLU(), L.nn.Linear(2, 1))
    m.load_state_dict({"0.weight": L.tensor([[1.0, -1.0], [0.5, 2.0]]), "0.bias": L.zeros(2),
                       "2.weight": L.tensor([[1.0, 3.0]]), "2.bias": L.ones(1)})
    order, grads = [], []
    m[0].register_forward_pre_hook(lambda mod, a: order.append("own pre"))
    m[0].register_forward_hook(lambda mod, a, o: order.append("own post"))
    handles = [
        M.register_module_forward_pre_hook(lambda mod, a: order.append(("pre", type(mod).__name__))),
        M.register_module_forward_hook(
            lambda mod, a, kw, o: (order.append(("post", type(mod).__name__)),
                                   o * 2 if isinstance(mod, L.nn.Linear) else None)[1], with_kwargs=True),
        M.register_module_full_backward_pre_hook(lambda mod, go: grads.append(("pre", type(mod).__name__))),
        M.register_module_full_backward_hook(lambda mod, gi, go: grads.append((type(mod).__name__, go[0].tolist())))]
    x = L.tensor([[1.0, 2.0], [-1.0, 0.5]], requires_grad=True)
    try:
        y = m(x)
        y.sum().backward()
    finally:
        for h in handles:
            h.remove()
    return y.tolist(), x.grad.tolist(), order, grads, m(x).tolist()


def test_hooks_of_every_module_as_pytorch():
    """torch.nn.modules.module.register_module_*: before each module's own, on every module,
    gone once removed."""
    assert _global_hooks_run(tj) == _global_hooks_run(torch)


def test_a_compiled_module_follows_hooks_of_every_module_registered_after_it():
    M = tj.nn.modules.module
    m = tj.nn.Sequential(tj.nn.Linear(2, 2), tj.nn.Tanh(), tj.nn.Linear(2, 1))
    f = tj.compile(m)
    x = tj.tensor([[1.0, 2.0], [-1.0, 0.5]])
    want = m[2](m[1](m[0](x)))
    np.testing.assert_allclose(f(x).detach().numpy(), want.detach().numpy(), rtol=1e-6)
    h = M.register_module_forward_hook(lambda mod, a, o: o * 1.5 if isinstance(mod, tj.nn.Linear) else o)
    try:
        got = f(x)
    finally:
        h.remove()
    np.testing.assert_allclose(got.detach().numpy(), (m[2](m[1](m[0](x) * 1.5)) * 1.5).detach().numpy(),
                               rtol=1e-6)
    np.testing.assert_allclose(f(x).detach().numpy(), want.detach().numpy(), rtol=1e-6)


@pytest.mark.parametrize("where", ["module", "compiled"])
def test_always_call_hooks_of_a_compiled_module(where):
    class Failing(tj.nn.Module):
        def forward(self, x):
            if x.sum() > 100:   # (a graph break: the compiled call runs it eagerly)
                raise ValueError("too large")
            return x * 2
    m, seen = Failing(), []
    f = tj.compile(m)
    (m if where == "module" else f).register_forward_hook(lambda mod, args, out: seen.append(out), always_call=True)
    f(tj.ones(2))
    with pytest.raises(ValueError, match="too large"):
        f(tj.full((2,), 100.0))
    assert seen[0].tolist() == [2.0, 2.0] and seen[1:] == [None]
