"""Products of ops/linalg.py against PyTorch."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("x_shape,w_shape", [((4, 3, 2), (0, 2)), ((4, 3, 0), (5, 0)), ((0, 3, 2), (5, 2))])
def test_linear_backward_with_a_zero_size_dim(compiled, x_shape, w_shape):
    """A layer of no output features (or no inputs) over a 3-D input: the weight's gradient
    flattened the leading dims as (-1, 0), which cannot be inferred."""
    rng = np.random.default_rng(0)
    xa, wa = rng.standard_normal(x_shape), rng.standard_normal(w_shape)

    def run(m, f):
        x = m.tensor(xa, requires_grad=True)
        w = m.tensor(wa, requires_grad=True)
        f(x, w).backward()
        return x.grad.numpy(), w.grad.numpy()
    f = (lambda x, w: (tj.nn.functional.linear(x, w) * 2).sum())
    got = run(tj, tj.compile(f) if compiled else f)
    want = run(torch, lambda x, w: (torch.nn.functional.linear(x, w) * 2).sum())
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-10)


def test_ger_is_outer_as_function_and_method():
    """torch.ger, the deprecated spelling Transformer-XL's positional encoding calls."""
    a, b = np.arange(1.0, 4.0), np.array([0.5, -2.0])
    want = torch.ger(torch.tensor(a), torch.tensor(b)).numpy()
    np.testing.assert_array_equal(tj.ger(tj.tensor(a), tj.tensor(b)).numpy(), want)
    np.testing.assert_array_equal(tj.tensor(a).ger(tj.tensor(b)).numpy(), want)
