"""group_norm (ops/normalization.py), whose groups are rows of LayerNorm's primitive with
the per-channel affine after: values, first and second order gradients as PyTorch's."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("shape,groups", [((3, 6, 5, 7), 3), ((2, 5, 9), 5), ((4, 4), 2),
                                          ((1, 9, 3, 2, 3), 1)])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-5), (np.float64, 1e-11)])
@pytest.mark.parametrize("compiled", [False, True])
def test_group_norm_values_and_gradients_match_pytorch(shape, groups, affine, dtype, tol, compiled):
    rng = np.random.default_rng(sum(shape) + groups)
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    w, b = (rng.standard_normal(shape[1]).astype(dtype) for _ in range(2))
    g = rng.standard_normal(shape).astype(dtype)
    got = []
    for lib in (torch, tj):
        ts = [lib.tensor(v, requires_grad=True) for v in ((x, w, b) if affine else (x,))]

        def f(xv, *wb):
            return lib.nn.functional.group_norm(xv, groups, *wb, eps=1e-3)
        out = (tj.compile(f) if compiled and lib is tj else f)(*ts)
        out.backward(lib.tensor(g))
        got.append([out.detach().numpy()] + [t.grad.numpy() for t in ts])
    for a, e in zip(got[1], got[0]):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (np.float64, 1e-10)])
def test_group_norm_second_order_gradients_match_pytorch(dtype, tol):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 6, 3, 5)).astype(dtype)
    w, b = (rng.standard_normal(6).astype(dtype) for _ in range(2))
    v = rng.standard_normal((2, 6, 3, 5)).astype(dtype)
    got = []
    for lib in (torch, tj):
        xt, wt, bt = (lib.tensor(a, requires_grad=True) for a in (x, w, b))
        y = lib.nn.functional.group_norm(xt, 2, wt, bt)
        gx, gw = lib.autograd.grad((y * lib.tensor(v)).sum(), (xt, wt), create_graph=True)
        second = lib.autograd.grad((gx * gx).sum() + (gw * gw).sum(), (xt, wt, bt),
                                   allow_unused=True)
        got.append([t.numpy() for t in second if t is not None])
    assert len(got[1]) == len(got[0]) == 2
    for a, e in zip(got[1], got[0]):
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol)
