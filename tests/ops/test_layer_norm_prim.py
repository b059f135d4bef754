"""LayerNorm's backward primitive without an affine (ops/layer_norm_prim.py): dx alone, the
weight and bias column sums skipped, dx the same bits as with them; layer_norm, group_norm
and instance_norm without an affine, values and first and second order gradients as
PyTorch's, and the affine backward still (dx, dweight, dbias)."""
import time

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.cpu.kernels import row_forms
from tracejit.ops import layer_norm_prim

torch = pytest.importorskip("torch")


def _loaded(call):
    """`call()` once its kernel has loaded (the eager kernels compile in the background)."""
    start = time.monotonic()
    while (got := call()) is None:
        assert time.monotonic() - start < 300, "the LayerNorm backward kernel did not load"
        time.sleep(0.05)
    return got


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 50, 37), (16, 1024), (5, 1)])
@pytest.mark.parametrize("has_w", [False, True])
def test_backward_without_sums_is_dx_alone_with_the_same_bits(dtype, shape, has_w, monkeypatch):
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")
    r = np.random.default_rng(len(shape) + shape[-1])
    x, g = (r.standard_normal(shape).astype(dtype) * 2 + 1 for _ in range(2))
    w = (r.standard_normal(shape[-1]).astype(dtype),) if has_w else ()
    m = x.size // shape[-1]
    kw = dict(n=1, eps=1e-5, has_w=has_w)
    full = layer_norm_prim._layer_norm_backward_impl(np, g, x, *w, **kw)
    dx = layer_norm_prim._layer_norm_backward_impl(np, g, x, *w, **kw, sums=False)
    assert full.shape == (m + 2, shape[-1]) and dx.shape == (m, shape[-1])
    np.testing.assert_array_equal(dx, full[:m])
    kfull = _loaded(lambda: row_forms.layer_norm_backward(g, x, *w, **kw))
    kdx = _loaded(lambda: row_forms.layer_norm_backward(g, x, *w, **kw, sums=False))
    assert kfull.shape == full.shape and kdx.shape == dx.shape
    np.testing.assert_array_equal(kdx, kfull[:m])
    # the kernel's column sums still those of the numpy form
    tol = 1e-4 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(kfull, full, rtol=tol, atol=tol * m)


def _norm(lib, name, x, wb):
    F = lib.nn.functional
    if name == "layer_norm":
        return F.layer_norm(x, tuple(x.shape[-2:]), *wb, eps=1e-3)
    if name == "group_norm":
        return F.group_norm(x, 2, *wb, eps=1e-3)
    return F.instance_norm(x, weight=wb[0] if wb else None, bias=wb[1] if wb else None, eps=1e-3)


@pytest.mark.parametrize("name", ["layer_norm", "group_norm", "instance_norm"])
@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (np.float64, 1e-10)])
def test_norms_match_pytorch_to_second_order(name, affine, dtype, tol):
    rng = np.random.default_rng(7)
    shape = (3, 4, 5, 6)
    x, v = ((rng.standard_normal(shape) * 3 + 1).astype(dtype) for _ in range(2))
    ps = shape[-2:] if name == "layer_norm" else shape[1:2]
    wb = [rng.standard_normal(ps).astype(dtype) for _ in range(2)] if affine else []
    got = []
    for lib in (torch, tj):
        xt = lib.tensor(x, requires_grad=True)
        wbt = [lib.tensor(a, requires_grad=True) for a in wb]
        y = _norm(lib, name, xt, wbt)
        first = lib.autograd.grad((y * lib.tensor(v)).sum(), [xt] + wbt, create_graph=True)
        second = lib.autograd.grad(sum((t * t).sum() for t in first), [xt] + wbt,
                                   allow_unused=True)
        got.append([y.detach().numpy()] + [t.detach().numpy() for t in first]
                   + [None if t is None else t.numpy() for t in second])
    assert len(got[1]) == len(got[0]) == 3 + 2 * len(wb)
    for a, e in zip(got[1], got[0]):
        assert (a is None) == (e is None)
        if e is not None:
            assert a.dtype == dtype
            np.testing.assert_allclose(a, e, rtol=tol, atol=tol)
