"""Max pooling by gathered windows (ops/pooling_nd.py `_max_windows`: adaptive bins, 3-D and
ceil-mode windows): values, indices and gradients as PyTorch's, the gradient going to the one
element each window takes; windows of -inf and nan; the compiled path."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

_CASES = {
    "adaptive 2d, overlapping bins": ("adaptive_max_pool2d", (2, 3, 14, 11), {"output_size": (5, 4)}),
    "adaptive 1d": ("adaptive_max_pool1d", (2, 3, 13), {"output_size": 5}),
    "adaptive 3d": ("adaptive_max_pool3d", (1, 2, 7, 6, 5), {"output_size": (3, 4, 2)}),
    "3d, padded, dilated": ("max_pool3d", (1, 2, 7, 8, 6), {"kernel_size": 3, "stride": 2, "padding": 1,
                                                          "dilation": (1, 2, 1)}),
    "1d with indices": ("max_pool1d", (2, 3, 17), {"kernel_size": 4, "stride": 3, "padding": 2,
                                                   "return_indices": True}),
}


@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize("values", ["random", "ties", "all -inf", "nan"])
def test_values_indices_and_gradient_match_pytorch(case, values):
    fn, shape, kw = _CASES[case]
    rng = np.random.default_rng(len(case))
    x = rng.standard_normal(shape).astype(np.float32)
    if values == "ties":
        x = np.round(x)            # many equal maxima: the first in window order is taken
    elif values == "all -inf":
        x[:] = -np.inf
    elif values == "nan":
        x.reshape(-1)[::7] = np.nan
    tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    ty, jy = getattr(torch.nn.functional, fn)(tx, **kw), getattr(tj.nn.functional, fn)(jx, **kw)
    if kw.get("return_indices"):
        np.testing.assert_array_equal(jy[1].numpy(), ty[1].numpy())
        ty, jy = ty[0], jy[0]
    np.testing.assert_array_equal(jy.detach().numpy(), ty.detach().numpy())
    g = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
    ty.backward(torch.tensor(g))
    jy.backward(tj.tensor(g))
    if values in ("all -inf", "nan"):
        # (which element of an all -inf window takes it is PyTorch's own; of a window with
        # nans PyTorch's loop takes the last nan, these gathered windows the first)
        np.testing.assert_allclose(jx.grad.numpy().sum(), tx.grad.numpy().sum(), rtol=1e-5)
    else:
        np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_compiled_matches_eager():
    x = np.random.default_rng(1).standard_normal((2, 3, 14, 11)).astype(np.float32)
    f = lambda a: (tj.nn.functional.adaptive_max_pool2d(a, (5, 4)) ** 2).sum()
    jx, ex = tj.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    tj.compile(f)(jx).backward()
    with tj.eager():
        f(ex).backward()
    np.testing.assert_allclose(jx.grad.numpy(), ex.grad.numpy(), rtol=1e-6, atol=1e-6)
