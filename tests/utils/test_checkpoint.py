"""utils.checkpoint against PyTorch: the same losses and gradients with and without
recomputation (use_reentrant True and False), the random state replayed for dropout,
checkpoint_sequential over a Sequential, and BatchNorm's running statistics moved by the
recomputation as PyTorch's."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _mlp(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 1))


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_gives_pytorchs_gradients(reentrant):
    torch.manual_seed(0)
    ref = _mlp(torch)
    m = _mlp(tj)
    m.load_state_dict({k: tj.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    out = {}
    for lib, model in ((torch, ref), (tj, m)):
        xt = lib.tensor(x, requires_grad=True)
        h = model[0](xt)
        h = lib.utils.checkpoint.checkpoint(lambda t: model[2](model[1](t)), h, use_reentrant=reentrant)
        loss = model[4](model[3](h)).pow(2).sum()
        loss.backward()
        out[lib.__name__] = [loss.item(), xt.grad.numpy()] + [p.grad.numpy() for p in model.parameters()]
    for a, b in zip(out["tracejit"], out["torch"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_reentrant_checkpoint_replays_the_random_state():
    tj.manual_seed(3)
    x = tj.ones(64, requires_grad=True)
    y = tj.utils.checkpoint.checkpoint(lambda t: tj.nn.functional.dropout(t * 3, 0.5), x,
                                       use_reentrant=True)
    mask = (y.detach().numpy() != 0)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.where(mask, 6.0, 0.0))


def test_checkpoint_sequential_and_errors():
    m = _mlp(tj)
    x = tj.randn(3, 4)
    want = m(x).detach().numpy()
    got = tj.utils.checkpoint.checkpoint_sequential(m, 2, x, use_reentrant=False)
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-6)
    with pytest.raises(ValueError, match="segments"):
        tj.utils.checkpoint.checkpoint_sequential(m, 9, x, use_reentrant=False)
    with pytest.raises(ValueError, match="use_reentrant=False"):
        tj.utils.checkpoint.checkpoint(lambda t, s: t * s, x, s=2, use_reentrant=True)
    with pytest.warns(UserWarning, match="use_reentrant"):
        tj.utils.checkpoint.checkpoint(lambda t: t * 2, x)


def _bn_block(lib):
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(2, 3, 1), nn.BatchNorm2d(3), nn.ReLU(), nn.Conv2d(3, 3, 1),
                         nn.BatchNorm2d(3))


@pytest.mark.parametrize("form", ["module", "closure", "sequential", "no_backward"])
def test_batchnorm_in_a_checkpoint_updates_as_pytorchs(form):
    # PyTorch's recomputation in the backward pass runs the BatchNorms again: in a
    # checkpointed block their running statistics move twice per step
    torch.manual_seed(0)
    ref = _bn_block(torch)
    m = _bn_block(tj)
    m.load_state_dict({k: tj.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((4, 2, 3, 3)).astype(np.float32)
    out = {}
    for lib, model in ((torch, ref), (tj, m)):
        cp = lib.utils.checkpoint
        xt = lib.tensor(x, requires_grad=form != "no_backward")
        for _ in range(2):
            if form == "module" or form == "no_backward":
                y = cp.checkpoint(model, xt, use_reentrant=False)
            elif form == "closure":
                def closure(t):
                    return model(t)
                y = cp.checkpoint(closure, xt, use_reentrant=False)
            else:
                y = cp.checkpoint_sequential(model, 2, xt, use_reentrant=False)
            if form != "no_backward":
                y.pow(2).sum().backward()
        out[lib.__name__] = [v.numpy().astype(np.float64) for v in model.state_dict().values()]
    for a, b in zip(out["tracejit"], out["torch"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_selective_checkpoint_policy_and_helpers_as_torch():
    import functools
    grads = []
    for m in (torch, tj):
        ck = m.utils.checkpoint
        m.manual_seed(0)
        lin = m.nn.Linear(3, 3)
        lin.load_state_dict({"weight": m.tensor(np.eye(3, dtype=np.float32) * 0.5),
                             "bias": m.tensor(np.arange(3, dtype=np.float32))})
        policy = lambda ctx, op, *a, **k: ck.CheckpointPolicy.PREFER_RECOMPUTE  # noqa: E731
        x = m.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), requires_grad=True)
        y = ck.checkpoint(lambda v: lin(v).tanh(), x, use_reentrant=False,
                          context_fn=functools.partial(ck.create_selective_checkpoint_contexts, policy))
        y.sum().backward()
        grads.append((x.grad.numpy(), lin.weight.grad.numpy()))
        with pytest.raises(TypeError, match="policy_fn_or_list must be either a function or a list of ops"):
            ck.create_selective_checkpoint_contexts(3)
        d = ck.detach_variable((x, 2))
        assert d[1] == 2 and d[0].requires_grad and d[0].grad_fn is None and d[0] is not x
        with pytest.raises(RuntimeError, match="Only tuple of tensors is supported"):
            ck.detach_variable([x])
        with ck.noop_context_fn()[0], ck.set_checkpoint_early_stop(False):
            pass
        assert issubclass(ck.CheckpointError, RuntimeError)
    for a, b in zip(*grads):
        np.testing.assert_allclose(b, a, rtol=1e-6)
