"""tracejit.func.vmap against torch.func.vmap: ensembles by stack_module_state, per-sample
gradients, Jacobians and Hessians per sample, nested vmap, in_dims/out_dims, chunk_size,
randomness, gradients through vmap; a batched call runs each primitive once for the
batch, and a function that cannot batch still maps (once per sample)."""
import logging

import numpy as np
import pytest

import tracejit as tj
from tracejit.ops.registry import REGISTRY

torch = pytest.importorskip("torch")


def _mlp(lib, seed=0):
    lib.manual_seed(seed)
    return lib.nn.Sequential(lib.nn.Linear(3, 6), lib.nn.Softplus(), lib.nn.Linear(6, 2))


def _pair(seed=0):
    ref, m = _mlp(torch, seed), _mlp(tj, seed)
    m.load_state_dict({k: tj.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    return ref, m


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _leaves(r):
    return [t for x in r for t in _leaves(x)] if isinstance(r, (tuple, list)) else [r.detach().numpy()]


def _both(fn, *arrays, rtol=1e-5, atol=1e-6):
    """fn(lib, *tensors) under torch and tracejit, the results (trees of tensors) equal."""
    outs = []
    for lib in (torch, tj):
        outs.append(_leaves(fn(lib, *[lib.tensor(a) for a in arrays])))
    for a, b in zip(*outs):
        assert a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol)


def test_ensemble_forward_and_gradients_match_torch():
    pairs = [_pair(s) for s in range(3)]
    x = _x(4, 3)
    grads = []
    for lib, ms in ((torch, [p[0] for p in pairs]), (tj, [p[1] for p in pairs])):
        params, buffers = lib.func.stack_module_state(ms)
        y = lib.func.vmap(lambda p, b, xi: lib.func.functional_call(ms[0], (p, b), (xi,)),
                          in_dims=(0, 0, None))(params, buffers, lib.tensor(x))
        (y.sin() * y).sum().backward()
        grads.append([y.detach().numpy()] + [params[k].grad.numpy() for k in sorted(params)])
    for a, b in zip(*grads):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("loss", ["mse", "cross_entropy"])
def test_per_sample_gradients_of_an_mlp_loss(loss):
    ref, m = _pair()
    x, y = _x(5, 3), np.random.default_rng(1).integers(0, 2, 5)
    out = []
    for lib, model in ((torch, ref), (tj, m)):
        F = lib.func
        params = {k: v.detach() for k, v in model.named_parameters()}

        def f(p, xi, yi):
            z = F.functional_call(model, p, (xi.unsqueeze(0),))
            if loss == "mse":
                return ((z - yi.to(z.dtype)) ** 2).mean()
            return lib.nn.functional.cross_entropy(z, yi.unsqueeze(0))
        g = F.vmap(F.grad(f), in_dims=(None, 0, 0))(params, lib.tensor(x), lib.tensor(y))
        out.append([g[k].numpy() for k in sorted(g)])
    for a, b in zip(*out):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_jacobians_and_hessians_per_sample():
    def f(lib, x):
        F = lib.func
        g = lambda v: (v.sin() * v.roll(1, 0)).sum()   # noqa: E731
        h = lambda v: lib.tanh(v) * v.sum()            # noqa: E731
        return (F.vmap(F.hessian(g))(x), F.vmap(F.jacrev(h))(x), F.vmap(F.jacfwd(h))(x),
                F.vmap(F.jacrev(F.jacrev(h)))(x))
    _both(f, _x(4, 3))


def test_in_dims_out_dims_and_nested_vmap():
    a, b, c = _x(3, 4), _x(3, 2, seed=1), _x(5, seed=2)
    _both(lambda lib, a, b, c: (
        lib.vmap(lambda r, s: r @ s, in_dims=(1, None))(a, b),
        lib.vmap(lambda r, s: (r * s.sum(), r.softmax(-1)), in_dims=(0, None), out_dims=(1, 0))(a, c),
        lib.vmap(lib.vmap(lambda u, v: u * v + u.exp(), in_dims=(0, None)), in_dims=(None, 0))(c, a),
        lib.vmap(lambda p: p[0] - p[1].mean(), in_dims=((1, 0),))((a, a.T * 2)),
        lib.vmap(lambda r: lib.stack([r.flip(0), r.cumsum(0)]).permute(1, 0)[1:, :].reshape(-1))(a)), a, b, c)


def test_chunk_size_and_closed_over_tensors():
    w = _x(4, 4, seed=3)
    _both(lambda lib, x, w: [lib.vmap(lambda r: (r @ w).relu().amax(0, keepdim=True), chunk_size=k)(x)
                             for k in (None, 2)], _x(5, 4), w)


def test_randomness():
    x = tj.ones(4, 3)
    with pytest.raises(RuntimeError, match="randomness"):
        tj.vmap(lambda r: r + tj.rand(3))(x)
    tj.manual_seed(0)
    same = tj.vmap(lambda r: r + tj.rand(3), randomness="same")(x).numpy()
    diff = tj.vmap(lambda r: r + tj.randn(3), randomness="different")(x).numpy()
    assert (same == same[0]).all() and same.shape == (4, 3)
    assert len({tuple(row) for row in diff}) == 4


def test_randomness_of_a_function_mapped_per_sample():
    x = tj.ones(4, 3)

    def f(r):   # (reads a value in Python: mapped once per sample)
        return r * float(r.sum()) + tj.rand(3)
    with pytest.raises(RuntimeError, match="randomness"):
        tj.vmap(f)(x)
    tj.manual_seed(0)
    same = tj.vmap(f, randomness="same")(x).numpy()
    diff = tj.vmap(f, randomness="different")(x).numpy()
    assert (same == same[0]).all() and same.shape == (4, 3)
    assert len({tuple(row) for row in diff}) == 4
    assert (tj.vmap(lambda r: r * float(r.sum()))(x).numpy() == 3.0).all()   # (no draw: no error)


def _matmul_calls(fn) -> int:
    """How many matrix products `fn` runs."""
    calls, prims = [], [p for p in REGISTRY.values() if p.kind == "matmul"]
    impls = [p.impl for p in prims]

    def counting(impl):
        def run(xp, *a, **k):
            calls.append(1)
            return impl(xp, *a, **k)
        return run
    for p, impl in zip(prims, impls):
        p.impl = counting(impl)
    try:
        fn()
    finally:
        for p, impl in zip(prims, impls):
            p.impl = impl
    return len(calls)


def test_a_batched_call_runs_each_primitive_once():
    _, m = _pair()
    params = {k: v.detach() for k, v in m.named_parameters()}
    x, y = tj.tensor(_x(16, 3)), tj.tensor(_x(16, 2, seed=1))

    def loss(p, xi, yi):
        return ((tj.func.functional_call(m, p, (xi,)) - yi) ** 2).sum()
    batched = _matmul_calls(lambda: tj.func.vmap(tj.func.grad(loss), in_dims=(None, 0, 0))(params, x, y))
    looped = _matmul_calls(lambda: [tj.func.grad(loss)(params, x[i], y[i]) for i in range(16)])
    assert looped >= 16 * 4 and batched * 8 <= looped


def test_a_function_that_cannot_batch_maps_per_sample(caplog):
    """A convolution (no batching rule) per sample: the per-sample gradients of a small
    CNN as torch's; a Python branch on a value maps too."""
    def cnn(lib):
        lib.manual_seed(0)
        return lib.nn.Sequential(lib.nn.Conv2d(1, 2, 3), lib.nn.ReLU(), lib.nn.Flatten(), lib.nn.Linear(32, 2))
    ref, m = cnn(torch), cnn(tj)
    m.load_state_dict({k: tj.tensor(v.numpy()) for k, v in ref.state_dict().items()})

    def f(lib, x):
        model = ref if lib is torch else m
        p = {k: v.detach() for k, v in model.named_parameters()}
        loss = lambda p, xi: lib.func.functional_call(model, p, (xi.unsqueeze(0),)).pow(2).sum()  # noqa: E731
        return list(lib.func.vmap(lib.func.grad(loss), in_dims=(None, 0))(p, x).values())
    with caplog.at_level(logging.INFO, logger="tracejit.fallback"):
        _both(f, _x(3, 1, 6, 6))
    assert any("no batching rule for conv" in r.getMessage() for r in caplog.records)
    x = _x(4, 2)
    out = tj.vmap(lambda r: r * 2 if float(r.sum()) > 0 else -r)(tj.tensor(x)).numpy()
    np.testing.assert_array_equal(out, np.where(x.sum(1, keepdims=True) > 0, x * 2, -x))


def test_an_in_place_write_to_a_mapped_input_reaches_it():
    """As torch.func.vmap: writes through the mapped dim, the batch's own storage changed."""
    ref, x = torch.ones(3, 4), tj.ones(3, 4)
    torch.func.vmap(lambda r: r.mul_(2), in_dims=1)(ref)
    tj.func.vmap(lambda r: r.mul_(2), in_dims=1)(x)

    def put(r):
        r[0] = 5.0
        return r + 1
    ref_out, out = torch.func.vmap(put)(ref), tj.func.vmap(put)(x)
    np.testing.assert_array_equal(x.numpy(), ref.numpy())
    np.testing.assert_array_equal(out.numpy(), ref_out.numpy())


def test_a_function_that_cannot_batch_changes_python_state_once_per_sample():
    """The traced attempt's list and dict changes are put back before the per-sample loop."""
    seen, count = [], {"n": 0}

    def f(r):
        seen.append(r.shape[0])
        count["n"] += 1
        return r * 2 if float(r.sum()) > 0 else r * 3
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    out = tj.func.vmap(f)(tj.tensor(x))
    assert seen == [4, 4, 4] and count["n"] == 3
    np.testing.assert_allclose(out.numpy(), np.where(x.sum(1, keepdims=True) > 0, 2 * x, 3 * x))


def test_a_write_at_a_tensor_index_maps():
    def f(lib):
        def g(r):
            y = r * 1.0
            y[0] += r[1]
            y[lib.tensor([2, 1])] = 0.5
            return y
        return g
    x = np.random.default_rng(1).standard_normal((3, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(tj.func.vmap(f(tj))(tj.tensor(x)).numpy(),
                               torch.func.vmap(f(torch))(torch.tensor(x)).numpy())


def test_a_batched_input_gradient_runs_no_weight_gradient():
    """vmap(grad w.r.t. the input): the traced backward's weight gradients (read by
    nothing) do not run batched, and the gradients are torch's."""
    ref, m = _pair()
    x = _x(16, 3)

    def per_sample(lib, mod):
        return lambda xi: lib.func.grad(lambda v: (mod(v) ** 2).sum())(xi)
    want = torch.func.vmap(per_sample(torch, ref))(torch.tensor(x)).detach().numpy()
    got = []
    calls = _matmul_calls(lambda: got.append(tj.func.vmap(per_sample(tj, m))(tj.tensor(x))))
    np.testing.assert_allclose(got[0].detach().numpy(), want, rtol=1e-5, atol=1e-6)
    assert calls == 4   # two layers' forward products and their input gradients


def test_an_unread_random_draw_still_raises_under_randomness_error():
    def f(r):
        tj.rand(3)
        return r * 2
    with pytest.raises(RuntimeError, match="randomness"):
        tj.vmap(f)(tj.ones(4, 3))


def test_a_batched_call_leaves_no_reference_cycle(monkeypatch):
    """A batched call's trace (its equations, values, tracers) is freed when the call
    returns, not left as a cycle for the garbage collector. (Only the contexts this thread
    makes are watched: a compile worker's garbage is not the call's.)"""
    import gc
    import threading
    import weakref
    from tracejit.jit import tracer
    made: list = []
    me = threading.get_ident()

    class Watched(tracer.TraceContext):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            if threading.get_ident() == me:
                made.append(weakref.ref(self))
    monkeypatch.setattr(tracer, "TraceContext", Watched)
    _, m = _pair()
    params = {k: v.detach() for k, v in m.named_parameters()}

    def f(xi):
        g = tj.func.grad(lambda v: tj.func.functional_call(m, params, (v.reshape(1, 3),)).sum())(xi)
        return g.unsqueeze(0).t()[0] * 2
    x = tj.tensor(_x(8, 3))
    want = tj.func.vmap(f)(x).numpy()
    gc.collect()
    made.clear()
    enabled = gc.isenabled()
    gc.disable()
    try:
        got = tj.func.vmap(f)(x).numpy()
        assert made, "the batched call made no trace context"
        alive = [r for r in made if r() is not None]
        assert not alive, f"{len(alive)} of {len(made)} trace contexts outlived the call"
    finally:
        if enabled:
            gc.enable()
    np.testing.assert_array_equal(got, want)
