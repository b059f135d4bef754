"""tracejit.func against torch.func: per-sample gradients (functional_call + vmap + grad,
as PyTorch's tutorial writes them), jacrev/jacfwd/hessian, vjp, grad_and_value with aux,
vmap's in_dims/out_dims, torch.cond, an ensemble by stack_module_state, and the errors
for bad input."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _model(lib):
    lib.manual_seed(0)
    return lib.nn.Sequential(lib.nn.Linear(3, 5), lib.nn.Tanh(), lib.nn.Linear(5, 2))


def test_per_sample_gradients_match_torch():
    ref = _model(torch)
    m = _model(tj)
    m.load_state_dict({k: tj.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((4, 3)), rng.integers(0, 2, 4)
    out = []
    for lib, model in ((torch, ref), (tj, m)):
        F = lib.func
        params = {k: v.detach() for k, v in model.named_parameters()}

        def loss(p, xi, yi):
            logits = F.functional_call(model, p, (xi.unsqueeze(0),))
            return lib.nn.functional.cross_entropy(logits, yi.unsqueeze(0))
        g = F.vmap(F.grad(loss), in_dims=(None, 0, 0))(params, lib.tensor(x, dtype=lib.float32),
                                                        lib.tensor(y))
        out.append({k: v.numpy() for k, v in g.items()})
    assert out[1].keys() == out[0].keys()
    for k in out[0]:
        assert out[1][k].shape == (4,) + tuple(ref.state_dict()[k].shape)
        np.testing.assert_allclose(out[1][k], out[0][k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_jacobians_and_hessian_match_torch():
    a = np.random.default_rng(1).standard_normal(3)

    def f(lib):
        return lambda x: lib.stack([(x * x).sum(), x.sin().prod(), x[0] * x[2]])
    for name in ("jacrev", "jacfwd"):
        got = getattr(tj.func, name)(f(tj))(tj.tensor(a)).numpy()
        want = getattr(torch.func, name)(f(torch))(torch.tensor(a)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12)
    h = tj.func.hessian(lambda x: (x.sin() * x.exp()).sum() * x[1])(tj.tensor(a)).numpy()
    hw = torch.func.hessian(lambda x: (x.sin() * x.exp()).sum() * x[1])(torch.tensor(a)).numpy()
    np.testing.assert_allclose(h, hw, rtol=1e-10, atol=1e-12)
    j = tj.func.jacrev(lambda x, w: x @ w, argnums=(0, 1))(tj.tensor(a), tj.ones(3, 2, dtype=tj.float64))
    jw = torch.func.jacrev(lambda x, w: x @ w, argnums=(0, 1))(torch.tensor(a), torch.ones(3, 2, dtype=torch.float64))
    for g, w in zip(j, jw):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12)


def test_vjp_grad_and_value_with_aux():
    a = np.array([0.3, -1.2, 2.0])
    outs = []
    for lib in (tj, torch):
        x = lib.tensor(a)
        y, fn = lib.func.vjp(lambda t: t.exp() * 2, x)
        (gx,) = fn(lib.ones(3, dtype=lib.float64))
        g, (v, aux) = lib.func.grad_and_value(lambda t: ((t ** 3).sum(), t.max()), has_aux=True)(x)
        outs.append([y.numpy(), gx.numpy(), g.numpy(), v.item(), aux.item()])
    for got, want in zip(*outs):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_vmap_dims_and_cond():
    x = tj.tensor(np.arange(6.0).reshape(2, 3))
    out = tj.vmap(lambda r, s: (r * s, r.sum()), in_dims=(1, None), out_dims=(1, 0))(x, tj.tensor(2.0))
    np.testing.assert_array_equal(out[0].numpy(), x.numpy() * 2)
    np.testing.assert_array_equal(out[1].numpy(), x.numpy().sum(0))
    assert tj.cond(tj.tensor(True), lambda t: t + 1, lambda t: t - 1, (x,)).numpy()[0, 0] == 1.0
    assert tj.cond(False, lambda t: t + 1, lambda t: t - 1, [x]).numpy()[0, 0] == -1.0
    with pytest.raises(RuntimeError, match="one-element tensor"):
        tj.cond(x > 0, lambda t: t, lambda t: t, (x,))
    with pytest.raises(ValueError, match="different sizes"):
        tj.vmap(lambda a, b: a + b)(tj.ones(2), tj.ones(3))
    with pytest.raises(ValueError, match="out of range"):
        tj.vmap(lambda a: a, in_dims=2)(tj.ones(2, 3))
    with pytest.raises(RuntimeError, match="one element"):
        tj.func.grad(lambda t: t * 2)(tj.ones(2))


def test_functional_call_restores_the_module_and_checks_names():
    m = _model(tj)
    w0 = m[0].weight
    zero = {k: tj.zeros_like(v) for k, v in m.state_dict().items()}
    out = tj.func.functional_call(m, zero, (tj.ones(1, 3),))
    np.testing.assert_array_equal(out.detach().numpy(), [[0.0, 0.0]])
    assert m[0].weight is w0
    with pytest.raises(ValueError, match=r"no parameter or buffer named \['nope'\]"):
        tj.func.functional_call(m, {"nope": tj.ones(1)}, (tj.ones(1, 3),))
    with pytest.raises(RuntimeError, match="missing"):
        tj.func.functional_call(m, {"0.weight": tj.ones(5, 3)}, (tj.ones(1, 3),), strict=True)
    assert m[0].weight is w0


def test_stateless_functional_call_is_the_same_function():
    m = _model(tj)
    zero = {k: tj.zeros_like(v) for k, v in m.state_dict().items()}
    out = tj.nn.utils.stateless.functional_call(m, zero, (tj.ones(1, 3),))
    np.testing.assert_array_equal(out.detach().numpy(), [[0.0, 0.0]])


def test_ensemble_by_stack_module_state_matches_torch():
    refs = [torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)) for _ in range(3)]
    mods = [tj.nn.Sequential(tj.nn.Linear(3, 4), tj.nn.BatchNorm1d(4)) for _ in range(3)]
    for ref, m in zip(refs, mods):
        m.load_state_dict({k: tj.tensor(v.numpy()) for k, v in ref.state_dict().items()})
        ref.eval(); m.eval()
    x = np.random.default_rng(0).standard_normal((3, 2, 3)).astype(np.float32)
    outs = []
    for lib, ms in ((torch, refs), (tj, mods)):
        params, buffers = lib.func.stack_module_state(ms)
        assert params["0.weight"].shape == (3, 4, 3) and params["0.weight"].requires_grad
        assert params["0.weight"].is_leaf and not buffers["1.running_mean"].requires_grad
        y = lib.func.vmap(lambda p, b, xi: lib.func.functional_call(ms[0], (p, b), (xi,)))(
            params, buffers, lib.tensor(x))
        y.pow(2).sum().backward()
        outs.append((y.detach().numpy(), params["0.weight"].grad.numpy()))
    for a, b in zip(*outs):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_stack_module_state_refuses_mixed_models():
    with pytest.raises(RuntimeError, match="at least one model"):
        tj.func.stack_module_state([])
    with pytest.raises(RuntimeError, match="same class"):
        tj.func.stack_module_state([tj.nn.Linear(2, 2), tj.nn.Conv1d(2, 2, 1)])
    a, b = tj.nn.Linear(2, 2), tj.nn.Linear(2, 2).eval()
    with pytest.raises(RuntimeError, match="training/eval mode"):
        tj.func.stack_module_state([a, b])
    b.train(); b.bias.requires_grad_(False)
    with pytest.raises(RuntimeError, match="bias from each model"):
        tj.func.stack_module_state([a, b])


def test_transforms_stay_differentiable_in_closed_over_parameters():
    """``vmap(jacrev(net))(x)`` with x not requiring grad still depends on net's parameters
    (closed over, or passed as another argument): the result keeps that graph, as torch.func's
    does, so a loss on input derivatives trains the net; under no_grad it does not."""
    rng = np.random.default_rng(0)
    xa = rng.standard_normal((5, 2)).astype(np.float32)
    state = {k: rng.standard_normal(s).astype(np.float32) * 0.5
             for k, s in (("0.weight", (8, 2)), ("0.bias", (8,)), ("2.weight", (1, 8)), ("2.bias", (1,)))}
    got = {}
    for m in (torch, tj):
        net = m.nn.Sequential(m.nn.Linear(2, 8), m.nn.Tanh(), m.nn.Linear(8, 1))
        net.load_state_dict({k: m.tensor(v) for k, v in state.items()})
        x = m.tensor(xa)
        jac = m.func.vmap(m.func.jacrev(lambda z: net(z).squeeze(-1)))(x)
        params = dict(net.named_parameters())
        g = m.func.vmap(m.func.grad(lambda p, z: m.func.functional_call(net, p, (z,)).squeeze(-1), argnums=1),
                        in_dims=(None, 0))(params, x)
        assert jac.requires_grad and g.requires_grad
        (jac.square().sum() + g.sum()).backward()
        got[m] = net[0].weight.grad.numpy().copy()
        with m.no_grad():
            assert not m.func.vmap(m.func.jacrev(lambda z: net(z).squeeze(-1)))(x).requires_grad
    np.testing.assert_allclose(got[tj], got[torch], rtol=1e-5, atol=1e-6)


def test_jvp_matches_torch_with_aux_and_a_trained_parameter():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, v, w = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (3, 4), (4, 4)))
    got = []
    for m in (torch, tj):
        W = m.tensor(w, requires_grad=True)
        f = lambda a, t: ((a @ W).tanh() * t, a * 2)  # noqa: E731  (output, aux)
        u, du, aux = m.func.jvp(f, (m.tensor(x), m.tensor(0.5)), (m.tensor(v), m.tensor(1.0)), has_aux=True)
        loss = ((u - (m.tensor(v) - 0.3 * du).detach()) ** 2).mean()   # (MeanFlow's target)
        loss.backward()
        got.append([u.detach().numpy(), du.detach().numpy(), aux.numpy(), W.grad.numpy()])
        assert u.requires_grad and not aux.requires_grad
        with pytest.raises(RuntimeError, match="Expected primals to be a tuple"):
            m.func.jvp(f, m.tensor(x), (m.tensor(v),))
    for a, b in zip(*got):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    out, jv = tj.func.jvp(lambda a: a.exp(), (tj.tensor(x),), (tj.tensor(v),))
    assert not jv.requires_grad
    np.testing.assert_allclose(jv.numpy(), np.exp(x) * v, rtol=1e-5)


def test_linearize_functionalize_and_batch_norm_replacement_as_torch():
    x = np.array([0.3, -0.7, 1.1], np.float32)
    t = np.array([1.0, 2.0, -1.0], np.float32)
    got = []
    for m in (torch, tj):
        out, jvp_fn = m.func.linearize(lambda a: (a * a).sin(), m.tensor(x))
        got.append((out.numpy(), jvp_fn(m.tensor(t)).numpy(),
                    m.func.functionalize(lambda a: a.clone().add_(1))(m.tensor(x)).numpy()))
        net = m.func.replace_all_batch_norm_modules_(m.nn.Sequential(m.nn.Linear(3, 3), m.nn.BatchNorm1d(3)))
        bn = net[1]
        assert bn.running_mean is None and bn.running_var is None and not bn.track_running_stats
        assert tuple(net(m.ones(4, 3)).shape) == (4, 3)
    for a, b in zip(*got):
        np.testing.assert_allclose(b, a, rtol=1e-6)


def test_nested_transforms_over_another_argument_are_differentiable_when_compiled():
    # a Lagrangian's mixed second derivative d2L/dv dq (jacrev over v inside jacrev over q)
    # and dL/dq through closed-over weights: compiled, their gradients reach the weights
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal(3).astype(np.float32), rng.standard_normal(6).astype(np.float32)

    def f(lib, p, x):
        def L(q, v):
            return (lib.tanh(q * p) * v).sum() + (q * v * v).sum()
        q, v = x[:3], x[3:]
        mixed = lib.func.jacrev(lib.func.jacrev(L, argnums=1), argnums=0)(q, v)
        return (mixed @ v + lib.func.jacrev(L, argnums=0)(q, v)).pow(2).sum()

    want_p = torch.tensor(w, requires_grad=True)
    want = f(torch, want_p, torch.tensor(x))
    want.backward()
    p = tj.tensor(w, requires_grad=True)
    fn = tj.compile(lambda x: f(tj, p, x), fullgraph=True)
    got = fn(tj.tensor(x))
    got.backward()
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
    np.testing.assert_allclose(p.grad.numpy(), want_p.grad.numpy(), rtol=1e-5)


def _tied(m):
    class Tied(m.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = m.nn.Linear(2, 2, bias=False)
            self.b = m.nn.Linear(2, 2, bias=False)
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x))
    return Tied()


def test_functional_call_tied_weights_given_twice_as_torch():
    for m in (torch, tj):
        net, x, w = _tied(m), m.ones(1, 2), m.eye(2) * 2
        # one value for both names (the same tensor twice) is not ambiguous
        out = m.func.functional_call(net, {"a.weight": w, "b.weight": w}, (x,))
        np.testing.assert_array_equal(out.detach().numpy(), [[4.0, 4.0]])
        with pytest.raises(ValueError, match=r"multiple values for keys \['a.weight', 'b.weight'\], which are tied"):
            m.func.functional_call(net, {"a.weight": w, "b.weight": m.eye(2)}, (x,))
        out = m.func.functional_call(net, {"a.weight": w, "b.weight": m.eye(2) * 3}, (x,), tie_weights=False)
        np.testing.assert_array_equal(out.detach().numpy(), [[6.0, 6.0]])


def _leaves(x):
    if isinstance(x, (tuple, list)):
        return [type(x).__name__] + [v for e in x for v in _leaves(e)]
    if isinstance(x, dict):
        return [sorted(x)] + [v for k in sorted(x) for v in _leaves(x[k])]
    return [x.detach().numpy()]


@pytest.mark.parametrize("case", ["tuple_out", "dict_in", "argnums", "hessian", "chunked"])
def test_jacrev_of_structured_inputs_and_outputs_matches_torch(case):
    v = np.array([0.3, -1.2, 0.7], np.float32)
    got = {}
    for m in (torch, tj):
        x, y = m.tensor(v), m.tensor(v[::-1].copy())
        if case == "tuple_out":
            r = m.func.jacrev(lambda a: (a.sin() * a.sum(), {"s": (a ** 2).sum()}))(x)
        elif case == "dict_in":
            r = m.func.jacfwd(lambda d: d["a"].exp() * d["b"].sum())({"a": x, "b": y[:2]})
        elif case == "argnums":
            r = m.func.jacrev(lambda a, b: [a * b, (a - b).sum()], argnums=(0, 1))(x, y)
        elif case == "hessian":
            r = m.func.hessian(lambda a, b: (a * b ** 2).sum() + (a ** 3).sum(), argnums=(0, 1))(x, y)
        else:
            r = m.func.jacrev(lambda a: (a.exp(), a[:2] * 2), chunk_size=2)(x)
        got[m] = _leaves(r)
    assert len(got[tj]) == len(got[torch])
    for a, b in zip(got[tj], got[torch]):
        if isinstance(b, np.ndarray):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        else:
            assert a == b
