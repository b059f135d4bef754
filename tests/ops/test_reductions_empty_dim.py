"""dim=() and dim=[] as PyTorch 2.13 reads them: every dim for the reductions (sum, mean,
amax, var, norm, ...), none for all and any; values and gradients, eager and compiled."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")
X = np.arange(6.0).reshape(2, 3) - 2.5
CALLS = {
    "sum": lambda m, a, d, k: a.sum(d, keepdim=k), "mean": lambda m, a, d, k: m.mean(a, d, keepdim=k),
    "nansum": lambda m, a, d, k: m.nansum(a, d, keepdim=k),
    "nanmean": lambda m, a, d, k: m.nanmean(a, d, keepdim=k),
    "amax": lambda m, a, d, k: m.amax(a, d, keepdim=k), "amin": lambda m, a, d, k: a.amin(d, keepdim=k),
    "var": lambda m, a, d, k: m.var(a, d, keepdim=k), "std": lambda m, a, d, k: a.std(d, keepdim=k),
    "var_mean": lambda m, a, d, k: m.var_mean(a, d, keepdim=k)[0],
    "norm": lambda m, a, d, k: a.norm(dim=d, keepdim=k),
    "vector_norm": lambda m, a, d, k: m.linalg.vector_norm(a, 1, dim=d, keepdim=k),
    "logsumexp": lambda m, a, d, k: m.logsumexp(a, d, keepdim=True),
    "count_nonzero": lambda m, a, d, k: m.count_nonzero(a, dim=d),
    "normalize": lambda m, a, d, k: m.nn.functional.normalize(a, dim=d),
    "any": lambda m, a, d, k: (a > 0).any(d, keepdim=k), "all": lambda m, a, d, k: m.all(a > 0, d, keepdim=k),
}


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [(), []], ids=["tuple", "list"])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_empty_dim_reduces_as_pytorch(name, dim, keepdim):
    ref = CALLS[name](torch, torch.tensor(X), dim, keepdim)
    out = CALLS[name](tj, tj.tensor(X), dim, keepdim)
    assert tuple(out.shape) == tuple(ref.shape)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-12)


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "std", "logsumexp"])
def test_gradients_and_compiled_calls_agree(name):
    # (PyTorch's std backward reads dim=() as no dim, giving inf: the reference names both)
    xt, xj = torch.tensor(X, requires_grad=True), tj.tensor(X, requires_grad=True)
    CALLS[name](torch, xt, (0, 1), False).sum().backward()
    CALLS[name](tj, xj, (), False).sum().backward()
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-12)
    compiled = tj.compile(lambda a: CALLS[name](tj, a, [], True))
    np.testing.assert_allclose(compiled(tj.tensor(X)).numpy(), CALLS[name](torch, torch.tensor(X), [], True).numpy(),
                               rtol=1e-12)


def test_an_empty_normalized_shape_is_refused():
    x = tj.ones(2, 3)
    for fn in (tj.nn.functional.layer_norm, tj.nn.functional.rms_norm):
        with pytest.raises(ValueError, match=r"normalized_shape \(\) is empty"):
            fn(x, ())


@pytest.mark.parametrize("shape, normalized", [((2, 0), (0,)), ((0, 3), (3,)), ((2, 0, 3), (0, 3))])
def test_layer_norm_over_empty_rows_matches_pytorch(shape, normalized):
    x = tj.ones(*shape, requires_grad=True)
    ln = tj.nn.LayerNorm(normalized)
    y = ln(x)
    (y * 2).sum().backward()
    xt = torch.ones(*shape, requires_grad=True)
    lt = torch.nn.LayerNorm(normalized)
    yt = lt(xt)
    (yt * 2).sum().backward()
    assert tuple(y.shape) == tuple(yt.shape) and tuple(x.grad.shape) == tuple(xt.grad.shape)
    np.testing.assert_array_equal(ln.weight.grad.numpy(), lt.weight.grad.numpy())
    np.testing.assert_array_equal(ln.bias.grad.numpy(), lt.bias.grad.numpy())


@pytest.mark.parametrize("dims, keepdim", [(0, True), ((0, 1), False)])
def test_logsumexp_over_an_empty_dim_stays_on_the_autograd_graph(dims, keepdim):
    res = []
    for m in (torch, tj):
        x = m.zeros(0, 3, requires_grad=True)
        y = x.logsumexp(dims, keepdim=keepdim)
        assert y.requires_grad
        y.sum().backward()
        res.append((y.detach().numpy(), x.grad.numpy()))
    np.testing.assert_array_equal(res[1][0], res[0][0])
    assert res[1][1].shape == res[0][1].shape
