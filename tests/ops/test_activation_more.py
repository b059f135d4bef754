"""glu (ops/activation_more.py): values, first and second order gradients as PyTorch's over
every dim, odd sizes, float32 and float64, eager and compiled."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("shape, dim", [((5, 6), -1), ((6, 3, 5), 0), ((3, 4, 7), 1),
                                        ((2, 3, 10), 2)])
@pytest.mark.parametrize("dtype, tol", [("float32", 2e-6), ("float64", 1e-13)])
@pytest.mark.parametrize("compiled", [False, True])
def test_glu_values_and_gradients_match_pytorch(shape, dim, dtype, tol, compiled):
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    half = list(shape)
    half[dim] //= 2
    g = rng.standard_normal(half).astype(dtype)
    got = []
    for lib in (tj, torch):
        xt = lib.tensor(x, requires_grad=True)

        def f(v):
            return lib.nn.functional.glu(v, dim)
        out = (tj.compile(f) if compiled and lib is tj else f)(xt)
        (gx,) = lib.autograd.grad(out, xt, lib.tensor(g), create_graph=not compiled)
        res = [out.detach().numpy(), gx.detach().numpy()]
        if not compiled:
            res.append(lib.autograd.grad((gx * gx).sum(), xt)[0].numpy())
        got.append(res)
    for a, b in zip(*got):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
