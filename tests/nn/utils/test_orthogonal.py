"""nn.utils.parametrizations.orthogonal against PyTorch with the same weights: each map with
and without trivialization gives PyTorch's matrix, gradients and state_dict names;
assignment sets the parametrization (or raises as PyTorch does); rectangular weights come
out with orthonormal columns or rows; training steps match eager and compiled."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

_W = np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32) * 0.5
_X = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)


def _orth(lib, shape, **kw):
    lin = lib.nn.Linear(shape[1], shape[0])
    with lib.no_grad():
        lin.weight.copy_(lib.tensor(np.random.default_rng(5).standard_normal(shape).astype(np.float32)))
        lin.bias.zero_()
    return lib.nn.utils.parametrizations.orthogonal(lin, **kw)


@pytest.mark.parametrize("orthogonal_map", ["matrix_exp", "cayley", "householder"])
@pytest.mark.parametrize("triv", [True, False])
def test_square_as_pytorch(orthogonal_map, triv):
    got = []
    for lib in (torch, tj):
        lin = _orth(lib, (4, 4), orthogonal_map=orthogonal_map, use_trivialization=triv)
        w = lin.weight
        lin(lib.tensor(_X)).pow(3).sum().backward()
        got.append((list(lin.state_dict()), w.detach().numpy(),
                    lin.parametrizations.weight.original.grad.numpy()))
    (tk, tw, tg), (jk, jw, jg) = got
    assert jk == tk
    np.testing.assert_allclose(jw, tw, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(jg, tg, rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(jw.T @ jw, np.eye(4), atol=2e-6)


@pytest.mark.parametrize("orthogonal_map", ["matrix_exp", "cayley", "householder"])
def test_assignment(orthogonal_map):
    q = np.linalg.qr(_W)[0].astype(np.float32)
    lin = _orth(tj, (4, 4), orthogonal_map=orthogonal_map)
    lin.weight = tj.tensor(q)
    np.testing.assert_allclose(lin.weight.detach().numpy(), q, atol=2e-6)
    with pytest.raises(ValueError, match="Expected a matrix or batch of matrices of shape"):
        lin.weight = tj.zeros(3, 4)
    if orthogonal_map != "householder":
        lin = _orth(tj, (4, 4), orthogonal_map=orthogonal_map, use_trivialization=False)
        with pytest.raises(NotImplementedError, match="not possible to assign"):
            lin.weight = tj.tensor(q)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5)])
def test_rectangular(shape):
    for m in ("matrix_exp", "cayley", "householder"):
        w = _orth(tj, shape, orthogonal_map=m).weight.detach().numpy()
        g = w @ w.T if shape[0] < shape[1] else w.T @ w
        np.testing.assert_allclose(g, np.eye(min(shape)), atol=3e-6)
    # without trivialization nothing is random: PyTorch's matrix exactly
    want = _orth(torch, shape, use_trivialization=False).weight.detach().numpy()
    got = _orth(tj, shape, use_trivialization=False).weight.detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


def test_errors():
    P = tj.nn.utils.parametrizations
    with pytest.raises(ValueError, match="Got a tensor of 1 dimensions"):
        P.orthogonal(tj.nn.Linear(3, 3), "bias")
    with pytest.raises(ValueError, match='orthogonal_map has to be one of'):
        P.orthogonal(tj.nn.Linear(3, 3), orthogonal_map="x")
    with pytest.raises(ValueError, match="has no parameter or buffer with name 'nope'"):
        P.orthogonal(tj.nn.Linear(3, 3), "nope")


@pytest.mark.parametrize("orthogonal_map", ["matrix_exp", "cayley", "householder"])
def test_trains_as_pytorch_eager_and_compiled(orthogonal_map):
    def loss_fn(m, x):
        return m(x).tanh().sum()

    runs = []
    for lib, compiled in ((torch, False), (tj, False), (tj, True)):
        lin = _orth(lib, (4, 4), orthogonal_map=orthogonal_map)
        opt = lib.optim.SGD(lin.parameters(), lr=0.1)
        f = lib.compile(loss_fn) if compiled else loss_fn
        losses = []
        for i in range(3):
            loss = f(lin, lib.tensor(_X * (i + 1)))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        runs.append((losses, lin.weight.detach().numpy()))
    for losses, w in runs[1:]:
        np.testing.assert_allclose(losses, runs[0][0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(w, runs[0][1], rtol=1e-4, atol=1e-5)
