"""affine_grid and grid_sample against PyTorch: every mode, padding mode and
align_corners, 4-D and 5-D, values and the gradients with respect to the input and the
grid, eager and compiled."""
import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F

torch = pytest.importorskip("torch", reason="compares with PyTorch")


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_matches_torch(mode, padding_mode, align_corners):
    r = np.random.default_rng(3)
    x = r.standard_normal((2, 3, 5, 6))
    g = r.uniform(-1.4, 1.4, (2, 4, 7, 2))   # points outside the image too
    outs = []
    for lib, f in ((tj, F), (torch, torch.nn.functional)):
        xt, gt = lib.tensor(x, requires_grad=True), lib.tensor(g, requires_grad=True)
        y = f.grid_sample(xt, gt, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
        (y * lib.tensor(np.arange(y.numel()).reshape(tuple(y.shape)) % 5)).sum().backward()
        gg = gt.grad.numpy() if gt.grad is not None else np.zeros_like(g)
        outs.append((y.detach().numpy(), xt.grad.numpy(), gg))
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10)


def _both(fn, *arrays):
    """fn(lib, functional, *tensors requiring grad) for tracejit and PyTorch: the output,
    then each tensor's gradient for a weighted sum of the output."""
    outs = []
    for lib, f in ((tj, F), (torch, torch.nn.functional)):
        ts = [lib.tensor(a, requires_grad=True) for a in arrays]
        y = fn(lib, f, *ts)
        (y * lib.tensor(np.arange(y.numel()).reshape(tuple(y.shape)) % 7)).sum().backward()
        outs.append([y.detach().numpy()] + [t.grad.numpy() for t in ts])
    return outs


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_5d_matches_torch(mode, padding_mode):
    r = np.random.default_rng(5)
    x, g = r.standard_normal((2, 3, 4, 5, 3)), r.uniform(-1.3, 1.3, (2, 2, 3, 4, 3))
    for align in (False, True):
        ours, theirs = _both(lambda lib, f, a, b: f.grid_sample(a, b, mode=mode, padding_mode=padding_mode,
                                                                 align_corners=align), x, g)
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "reflection"])
def test_grid_sample_float32_views_match_torch(padding_mode, compiled):
    """float32 (the CPU kernels' dtype) from non-contiguous views, eager and compiled."""
    r = np.random.default_rng(6)
    x = r.standard_normal((3, 9, 7, 4)).astype(np.float32)     # read as (3, 4, 9, 7)
    g = r.uniform(-1.2, 1.2, (3, 2, 6, 5)).astype(np.float32)   # read as (3, 6, 5, 2)

    def fn(lib, f, a, b):
        def sample(a, b):
            return f.grid_sample(a.permute(0, 3, 1, 2), b.permute(0, 2, 3, 1), padding_mode=padding_mode,
                                 align_corners=True) * 2
        return tj.compile(sample)(a, b) if compiled and lib is tj else sample(a, b)
    ours, theirs = _both(fn, x, g)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_grid_sample_second_derivative_through_the_input():
    """A gradient of the input's gradient (a penalty on it) as PyTorch's."""
    r = np.random.default_rng(7)
    x, g = r.standard_normal((2, 2, 4, 5)), r.uniform(-1.1, 1.1, (2, 3, 3, 2))
    w = r.standard_normal((2, 2, 4, 5))
    grads = []
    for lib, f in ((tj, F), (torch, torch.nn.functional)):
        xt, gt = lib.tensor(x, requires_grad=True), lib.tensor(g)
        y = f.grid_sample(xt, gt, align_corners=False)
        (gx,) = lib.autograd.grad((y * y).sum(), [xt], create_graph=True)
        (gxx,) = lib.autograd.grad((gx * lib.tensor(w)).sum(), [xt])
        grads.append(gxx.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode, shape", [("bilinear", (2, 3, 4, 5)), ("bicubic", (2, 3, 4, 5)),
                                         ("nearest", (2, 3, 4, 5)), ("bilinear", (1, 2, 3, 4, 5))])
def test_grid_sample_second_derivatives_through_the_grid(mode, shape, padding_mode, align_corners, compiled):
    """Penalties on both first gradients (the input's taken alone too), differentiated again
    with respect to the input and the grid, as PyTorch's; a third derivative through the grid
    is a clear error."""
    r = np.random.default_rng(5)
    d = len(shape) - 2
    x, g = r.standard_normal(shape), r.uniform(-1.2, 1.2, (shape[0],) + (3, 2, 2)[:d] + (d,))
    res = []
    for lib, f in ((torch, torch.nn.functional), (tj, F)):
        def loss(a, b):
            return f.grid_sample(a, b, mode=mode, padding_mode=padding_mode, align_corners=align_corners).pow(2).sum()
        fn = tj.compile(loss) if compiled and lib is tj else loss
        xt, gt = lib.tensor(x, requires_grad=True), lib.tensor(g, requires_grad=True)
        gx, gg = lib.autograd.grad(fn(xt, gt), [xt, gt], create_graph=True)
        (gx_alone,) = lib.autograd.grad(fn(xt, gt), [xt], create_graph=True)
        got = lib.autograd.grad((gg ** 2).sum() + (gx ** 3).sum() + (gx_alone * gx_alone).sum(), [xt, gt])
        res.append([t.detach().numpy() for t in (gx, gg) + got])
    for a, b in zip(*res):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9)
    if mode == "bilinear" and not compiled:
        xt, gt = tj.tensor(x, requires_grad=True), tj.tensor(g, requires_grad=True)
        _, gg = tj.autograd.grad(F.grid_sample(xt, gt).pow(2).sum(), [xt, gt], create_graph=True)
        (h,) = tj.autograd.grad(gg.pow(2).sum(), [gt], create_graph=True)
        with pytest.raises(NotImplementedError, match="grid_sample: derivatives past the second"):
            tj.autograd.grad(h.sum(), [gt])


@pytest.mark.parametrize("size", [(2, 3, 4, 5), (1, 2, 3, 4, 2)])
@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_matches_torch(size, align_corners):
    r = np.random.default_rng(4)
    theta = r.standard_normal((size[0], len(size) - 2, len(size) - 1))
    ours = tj.tensor(theta, requires_grad=True)
    theirs = torch.tensor(theta, requires_grad=True)
    a = F.affine_grid(ours, size, align_corners=align_corners)
    b = torch.nn.functional.affine_grid(theirs, size, align_corners=align_corners)
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-12)
    a.pow(2).sum().backward()
    b.pow(2).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-10)


def test_bad_arguments_name_the_culprit():
    x, g = tj.randn(1, 1, 3, 3), tj.randn(1, 2, 2, 2)
    with pytest.raises(ValueError, match="mode"):
        F.grid_sample(x, g, mode="area")
    with pytest.raises(ValueError, match="padding_mode"):
        F.grid_sample(x, g, padding_mode="wrap")
    with pytest.raises(Exception, match="grid"):
        F.grid_sample(x, tj.randn(2, 2, 2, 2))
    with pytest.raises(ValueError, match="bicubic"):
        F.grid_sample(tj.randn(1, 1, 2, 2, 2), tj.randn(1, 1, 1, 1, 3), mode="bicubic")
    with pytest.raises(TypeError, match="dtype"):
        F.grid_sample(x, tj.randn(1, 2, 2, 2, dtype=tj.float64))
    with pytest.raises(Exception, match="theta"):
        F.affine_grid(tj.randn(2, 2, 2), (2, 1, 3, 3))


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("mode, padding_mode", [("bilinear", "zeros"), ("bicubic", "zeros"), ("bicubic", "border"),
                                                ("bicubic", "reflection"), ("nearest", "zeros"),
                                                ("bilinear", "border")])
def test_grid_sample_at_nan_and_infinite_points_as_torch(mode, padding_mode, compiled):
    """A NaN or infinite point gives NaN where PyTorch's weights are NaN (bilinear with zeros
    padding, bicubic with any; a diverged spatial transformer shows in the loss), and 0 or
    the clipped border's value elsewhere."""
    x = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    g = np.array([[[[np.nan, 0.0], [0.2, np.nan], [0.1, 0.1], [np.inf, 0.0], [-np.inf, 0.5], [0.3, 5.0]]]],
                 np.float32)
    outs = []
    for lib, f in ((tj, F), (torch, torch.nn.functional)):
        def sample(a, b):
            return f.grid_sample(a, b, mode=mode, padding_mode=padding_mode, align_corners=False)
        run = tj.compile(sample) if compiled and lib is tj else sample
        outs.append(run(lib.tensor(x), lib.tensor(g)).numpy())
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6, atol=1e-5)
    assert np.isnan(outs[1]).any() == (padding_mode == "zeros" and mode != "nearest" or mode == "bicubic")


def test_volumetric_grid_sample_reads_zero_at_nan_points_as_torch():
    x = np.arange(48, dtype=np.float32).reshape(1, 2, 2, 3, 4)
    g = np.array([[[[[np.nan, 0.0, 0.0], [0.2, 0.1, np.nan], [0.1, 0.1, 0.1]]]]], np.float32)
    want = torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(g), align_corners=False).numpy()
    got = F.grid_sample(tj.tensor(x), tj.tensor(g), align_corners=False).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_grid_of_another_dtype_raises_a_runtime_error_as_torch():
    """(ours stays a TypeError too)"""
    for m in (torch, tj):
        with pytest.raises(RuntimeError):
            m.nn.functional.grid_sample(m.zeros(1, 1, 3, 4), m.zeros(1, 2, 2, 2, dtype=m.float64),
                                        align_corners=False)
