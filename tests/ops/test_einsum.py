"""einsum (ops/einsum.py): a repeated label within one operand takes the diagonal as a view,
as PyTorch's, so writes into the result reach the operand; values and gradients."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("eq, shape", [("ii->i", (4, 4)), ("ii", (4, 4)), ("bii->bi", (2, 3, 3)),
                                       ("iji->ij", (3, 2, 3))])
def test_repeated_labels_take_the_diagonal_as_a_view(eq, shape):
    a = np.random.default_rng(0).standard_normal(shape)
    res = []
    for m in (torch, tj):
        x = m.tensor(a, requires_grad=True)
        h = x * 1.0
        y = m.einsum(eq, h)
        if y.ndim:
            y.mul_(2.0)   # reaches h where y is a view
        (y * y).sum().backward()
        res.append((y.detach().numpy(), h.detach().numpy(), x.grad.numpy(), y._base is not None))
    for got, want in zip(res[1], res[0]):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_compiled_diagonal_einsum_matches_eager():
    a = np.random.default_rng(1).standard_normal((2, 3, 3))
    f = tj.compile(lambda h: tj.einsum("bii->bi", h) * 2.0)
    np.testing.assert_allclose(f(tj.tensor(a)).numpy(), np.einsum("bii->bi", a) * 2.0, rtol=1e-12)
