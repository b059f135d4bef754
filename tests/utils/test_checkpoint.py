"""utils.checkpoint against PyTorch: the same losses and gradients with and without
recomputation (use_reentrant True and False), the random state replayed for dropout, and
checkpoint_sequential over a Sequential."""
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
