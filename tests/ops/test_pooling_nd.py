"""Window arguments of the n-d pools (ops/pooling_nd.py) and F.unfold: a kernel, stride or
dilation below 1 or a negative padding is refused, as PyTorch refuses it (max_pool1d with
dilation 0 returned values, and a stride of 0 divided by zero); max pools send the
gradient to the index taken, ties included."""
import numpy as np
import pytest

import tracejit as tj

CALLS = [("max_pool1d", (3, 5), dict(kernel_size=2, dilation=0)),
         ("max_pool3d", (1, 1, 3, 3, 3), dict(kernel_size=1, dilation=0)),
         ("avg_pool1d", (3, 5), dict(kernel_size=2, stride=0)),
         ("lp_pool2d", (1, 1, 5, 5), dict(norm_type=2, kernel_size=2, stride=0)),
         ("max_pool2d", (1, 1, 5, 5), dict(kernel_size=2, dilation=-1, ceil_mode=True, return_indices=True)),
         ("unfold", (1, 1, 5, 5), dict(kernel_size=2, dilation=-1)),
         ("unfold", (1, 1, 5, 5), dict(kernel_size=2, stride=0)),
         ("unfold", (1, 1, 5, 5), dict(kernel_size=2, padding=-1))]


@pytest.mark.parametrize("name,shape,kw", CALLS)
def test_bad_window_arguments_are_refused_like_pytorch(name, shape, kw):
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        getattr(torch.nn.functional, name)(torch.ones(shape), **kw)
    bad = next(k for k in ("dilation", "stride", "padding") if k in kw)
    with pytest.raises(ValueError, match=f"{name}: {bad} must be"):
        getattr(tj.nn.functional, name)(tj.ones(shape), **kw)


@pytest.mark.parametrize("name, args, shape", [("max_pool1d", (3,), (1, 2, 6)),
                                               ("max_pool3d", (2,), (1, 1, 2, 4, 4)),
                                               ("adaptive_max_pool1d", (2,), (1, 2, 6)),
                                               ("adaptive_max_pool3d", (1,), (1, 1, 2, 4, 4))])
def test_max_pools_give_the_gradient_to_the_index_taken(name, args, shape):
    # ties (a window of equal values) send the gradient to one element, as PyTorch's; the
    # output may be written in place before backward
    torch = pytest.importorskip("torch")
    a = np.round(np.random.default_rng(2).uniform(0, 2, shape))   # many ties
    grads = []
    for m in (torch, tj):
        x = m.tensor(a, requires_grad=True)
        y = getattr(m.nn.functional, name)(x * 1.0, *args)
        y.mul_(2.0)
        (y * m.arange(y.numel(), dtype=m.float64).reshape(y.shape)).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[1], grads[0])


@pytest.mark.parametrize("name, kw", [("max_pool1d", dict(kernel_size=2)), ("avg_pool3d", dict(kernel_size=2)),
                                      ("max_pool3d", dict(kernel_size=2, return_indices=True)),
                                      ("adaptive_max_pool1d", dict(output_size=2)),
                                      ("adaptive_max_pool3d", dict(output_size=(0, 1, 2)))])
def test_empty_batch_and_empty_output_match_pytorch(name, kw):
    torch = pytest.importorskip("torch")
    n = int(name[-2])
    for shape in [(0, 3) + (4,) * n, (2, 3) + (4,) * n]:
        x = np.random.default_rng(0).standard_normal(shape)
        ot = getattr(torch.nn.functional, name)(torch.tensor(x), **kw)
        xj = tj.tensor(x, requires_grad=True)
        oj = getattr(tj.nn.functional, name)(xj, **kw)
        ot, oj = (ot[0], oj[0]) if isinstance(ot, tuple) else (ot, oj)
        np.testing.assert_allclose(oj.detach().numpy(), ot.numpy())
        oj.sum().backward()
        assert tuple(xj.grad.shape) == shape


@pytest.mark.parametrize("n", [1, 2, 3])
def test_adaptive_max_pool_refuses_a_negative_output_size(n):
    with pytest.raises(ValueError, match=f"adaptive_max_pool{n}d: output_size must be non-negative"):
        getattr(tj.nn.functional, f"adaptive_max_pool{n}d")(tj.ones((1, 2) + (4,) * n), -1)


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("p", [float("inf"), -float("inf")])
def test_lp_pool_with_an_infinite_norm_takes_pytorchs_limit(n, p):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(n)
    x = rng.standard_normal((2, 3) + (5,) * n)
    xt, xj = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    name = f"lp_pool{n}d"
    ot = getattr(torch.nn.functional, name)(xt, p, 2, ceil_mode=True)
    oj = getattr(tj.nn.functional, name)(xj, p, 2, ceil_mode=True)
    np.testing.assert_allclose(oj.detach().numpy(), ot.detach().numpy())
    g = rng.standard_normal(tuple(ot.shape))
    ot.backward(torch.tensor(g))
    oj.backward(tj.tensor(g))
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy())


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, padding=1, count_include_pad=False),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                dict(kernel_size=2, divisor_override=3)])
def test_int64_avg_pools_truncate_like_pytorch(n, kw):
    torch = pytest.importorskip("torch")
    if n == 1 and "divisor_override" in kw:
        pytest.skip("avg_pool1d has no divisor_override")
    x = np.random.default_rng(n).integers(-9, 9, (2, 3) + (5,) * n)
    name = f"avg_pool{n}d"
    ot = getattr(torch.nn.functional, name)(torch.tensor(x), **kw)
    oj = getattr(tj.nn.functional, name)(tj.tensor(x), **kw)
    assert oj.dtype == tj.int64
    np.testing.assert_array_equal(oj.numpy(), ot.numpy())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name, kw", [("avg_pool1d", dict(kernel_size=3)), ("avg_pool2d", dict(kernel_size=3)),
                                      ("avg_pool2d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                                          count_include_pad=False)),
                                      ("adaptive_avg_pool1d", dict(output_size=4)),
                                      ("adaptive_avg_pool2d", dict(output_size=(4, 5)))])
def test_half_avg_pools_round_once_from_float32_like_pytorch(dtype, name, kw):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(2).standard_normal((4, 8, 16, 15)).astype(np.float32)
    x = np.ascontiguousarray(x[0].swapaxes(1, 2)) if "1d" in name else x   # 1-D: length 16
    xt = torch.tensor(x).to(getattr(torch, dtype))
    ot = getattr(torch.nn.functional, name)(xt, **kw)
    oj = getattr(tj.nn.functional, name)(tj.tensor(xt.float().numpy()).to(getattr(tj, dtype)), **kw)
    assert oj.dtype == getattr(tj, dtype)
    np.testing.assert_array_equal(oj.float().numpy(), ot.float().numpy())


@pytest.mark.parametrize("compiled", [False, True])
def test_max_unpool_names_an_index_past_its_output(compiled):
    x = tj.tensor([[[0.0, 1, 2, 3, 4, 5]]])
    out, idx = tj.nn.functional.max_pool1d(x, 2, return_indices=True)
    f = lambda o, i: tj.nn.functional.max_unpool1d(o * 2, i, 2, output_size=(5,))  # noqa: E731
    with pytest.raises(IndexError, match="max_unpool1d: index 5 is out of range for size 5"):
        (tj.compile(f) if compiled else f)(out, idx)
    np.testing.assert_array_equal(tj.nn.functional.max_unpool1d(out, idx, 2).numpy(), [[[0, 1, 0, 3, 0, 5]]])


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("shape, kw", [((2, 3, 11), dict(kernel_size=4)),
                                       ((3, 10), dict(kernel_size=3, stride=2, padding=1)),
                                       ((2, 2, 12), dict(kernel_size=2, stride=1, dilation=3))])
def test_max_pool1d_values_and_gradient_match_pytorch_ties_included(shape, kw, compiled):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).integers(0, 3, shape).astype(np.float32)   # many ties
    g = np.random.default_rng(1).standard_normal(torch.nn.functional.max_pool1d(
        torch.tensor(x), **kw).shape).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    (torch.nn.functional.max_pool1d(xt, **kw) * torch.tensor(g)).sum().backward()
    xj = tj.tensor(x, requires_grad=True)
    f = lambda v: tj.nn.functional.max_pool1d(v, **kw)   # noqa: E731
    out = (tj.compile(f) if compiled else f)(xj)
    (out * tj.tensor(g)).sum().backward()
    np.testing.assert_array_equal(out.detach().numpy(), torch.nn.functional.max_pool1d(xt, **kw).detach().numpy())
    np.testing.assert_array_equal(xj.grad.numpy(), xt.grad.numpy())


@pytest.mark.parametrize("kw", [dict(kernel_size=25, stride=1), dict(kernel_size=4, stride=3, padding=2),
                                dict(kernel_size=3, padding=1, count_include_pad=False),
                                dict(kernel_size=3, stride=2, ceil_mode=True)])
@pytest.mark.parametrize("compiled", [False, True])
def test_float_avg_pool1d_values_and_gradients_as_pytorchs(kw, compiled):
    # (a series decomposition's moving average: windows of 25 one step apart)
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((3, 4, 30)).astype(np.float32)
    g = np.random.default_rng(1).standard_normal(tuple(torch.nn.functional.avg_pool1d(torch.tensor(x), **kw).shape))
    f = lambda t: tj.nn.functional.avg_pool1d(t, **kw)
    for inp, grad in ((x, g), (x[0], g[0])):   # batched and unbatched
        xt, xj = torch.tensor(inp, requires_grad=True), tj.tensor(inp, requires_grad=True)
        ot, oj = torch.nn.functional.avg_pool1d(xt, **kw), (tj.compile(f) if compiled else f)(xj)
        np.testing.assert_allclose(oj.detach().numpy(), ot.detach().numpy(), rtol=1e-6, atol=1e-7)
        ot.backward(torch.tensor(grad, dtype=torch.float32))
        oj.backward(tj.tensor(grad, dtype=tj.float32))
        np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name, kw", [("avg_pool3d", dict(kernel_size=2)),
                                      ("avg_pool3d", dict(kernel_size=(3, 2, 3), stride=(2, 1, 2),
                                                          padding=(1, 0, 1))),
                                      ("avg_pool2d", dict(kernel_size=3, stride=2, padding=1)),
                                      ("lp_pool2d", dict(norm_type=2, kernel_size=3, stride=2)),
                                      ("lp_pool2d", dict(norm_type=1.5, kernel_size=(2, 3)))])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("compiled", [False, True])
def test_offset_view_avg_pools_values_and_gradients_as_pytorchs(name, kw, dtype, compiled):
    # (the default avg_pool options of every rank run avg_pool2d's window-offset primitive;
    # avg_pool2d here is its unbatched 3-D input)
    torch = pytest.importorskip("torch")
    rank = 3 if name == "avg_pool3d" else 2
    shape = (2, 3, 7, 9, 11)[-rank - 2:] if name != "avg_pool2d" else (3, 9, 11)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    if name == "lp_pool2d":
        x = np.abs(x) + 0.5   # (a fractional power of a negative window sum is nan in both)
    ref = getattr(torch.nn.functional, name)
    g = rng.standard_normal(tuple(ref(torch.tensor(x), **kw).shape)).astype(dtype)
    xt, xj = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    f = lambda t: getattr(tj.nn.functional, name)(t, **kw)   # noqa: E731
    ot, oj = ref(xt, **kw), (tj.compile(f) if compiled else f)(xj)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(oj.detach().numpy(), ot.detach().numpy(), **tol)
    ot.backward(torch.tensor(g))
    oj.backward(tj.tensor(g))
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), **tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_avg_pool3d_second_order_gradient_as_pytorchs(dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 5, 6, 7)).astype(dtype)
    w = rng.standard_normal((2, 3, 3, 3, 4)).astype(dtype)

    def second(m, xv, wv):
        y = m.nn.functional.avg_pool3d(xv, 3, 2, 1)
        (gx,) = m.autograd.grad((y * wv).sum(), xv, create_graph=True)
        (gw,) = m.autograd.grad((gx * xv).sum(), wv)
        return gx.detach().numpy(), gw.numpy()

    got = second(tj, tj.tensor(x, requires_grad=True), tj.tensor(w, requires_grad=True))
    want = second(torch, torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _nan_input(shape, seed):
    """Rounded values (ties) with NaNs (fewer where windows are 3-D), so windows hold one,
    several or none."""
    r = np.random.default_rng(seed)
    x = np.round(r.standard_normal(shape) * 2)
    x[r.random(shape) < (0.3 if len(shape) < 5 else 0.06)] = np.nan
    return x


NAN_CALLS = [("max_pool1d", (2, 3, 11), dict(kernel_size=3, stride=1)),
             ("max_pool1d", (2, 3, 11), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
             ("max_pool2d", (2, 3, 7, 8), dict(kernel_size=2)),
             ("max_pool2d", (2, 3, 7, 8), dict(kernel_size=3, stride=1, padding=1)),
             ("max_pool2d", (2, 3, 7, 8), dict(kernel_size=(2, 3), stride=2, dilation=(2, 1),
                                               ceil_mode=True)),
             ("max_pool3d", (1, 2, 5, 6, 5), dict(kernel_size=2, stride=1)),
             ("max_pool3d", (1, 2, 5, 6, 5), dict(kernel_size=3, stride=2, padding=1)),
             ("max_pool3d", (2, 2, 5, 6, 7), dict(kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))),
             ("max_pool3d", (2, 2, 5, 6, 7), dict(kernel_size=(1, 2, 3), stride=(2, 1, 2), dilation=(3, 2, 1))),
             ("adaptive_max_pool1d", (2, 3, 11), dict(output_size=4)),
             ("adaptive_max_pool2d", (2, 3, 7, 8), dict(output_size=(3, 5))),
             ("adaptive_max_pool2d", (2, 3, 8, 8), dict(output_size=4)),
             ("adaptive_max_pool3d", (1, 2, 5, 6, 5), dict(output_size=(2, 4, 3)))]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("indices", [False, True])
@pytest.mark.parametrize("name,shape,kw", NAN_CALLS)
def test_nan_windows_take_pytorchs_index_and_gradient(name, shape, kw, indices, dtype):
    """A window holding NaNs: PyTorch takes its last NaN (a NaN replaces the running maximum
    and no later value beats it): the same index, and the gradient lands there."""
    torch = pytest.importorskip("torch")
    x0 = _nan_input(shape, len(name) + len(kw)).astype(dtype)
    got = []
    for lib in (tj, torch):
        x = lib.tensor(x0, requires_grad=True)
        res = getattr(lib.nn.functional, name)(x, return_indices=indices, **kw)
        out = res[0] if indices else res
        w = lib.tensor(np.arange(1.0, out.numel() + 1).reshape(tuple(out.shape)).astype(dtype))
        (out * w).sum().backward()
        got.append((out.detach().numpy(), res[1].numpy() if indices else None, x.grad.numpy()))
    (out, idx, grad), (tout, tidx, tgrad) = got
    assert np.isnan(tout).any() and not np.isnan(tout).all()
    np.testing.assert_array_equal(out, tout)
    if indices:
        np.testing.assert_array_equal(idx, tidx)
    np.testing.assert_array_equal(grad, tgrad)


@pytest.mark.parametrize("name,shape,kw", [NAN_CALLS[3], NAN_CALLS[5], NAN_CALLS[7], NAN_CALLS[10]])
def test_nan_windows_compiled_take_the_eager_index(name, shape, kw):
    """Compiled (the offset record's kernels, the gathered windows traced) as eager and
    PyTorch: the gradient at each NaN window's last NaN."""
    torch = pytest.importorskip("torch")
    x0 = _nan_input(shape, 4).astype(np.float32)
    fn = lambda x: getattr(tj.nn.functional, name)(x, **kw)   # noqa: E731
    compiled = tj.compile(fn)
    grads = []
    for f in (fn, compiled, compiled):
        x = tj.tensor(x0, requires_grad=True)
        f(x).sum().backward()
        grads.append(x.grad.numpy())
    xt = torch.tensor(x0, requires_grad=True)
    getattr(torch.nn.functional, name)(xt, **kw).sum().backward()
    assert np.isnan(x0).any()
    for g in grads:
        np.testing.assert_array_equal(g, xt.grad.numpy())


@pytest.mark.parametrize("shape, kw", [
    ((2, 3, 4, 9, 8), dict(kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))),
    ((3, 4, 9, 8), dict(kernel_size=(1, 2, 2))),                        # unbatched
    ((2, 3, 5, 9, 8), dict(kernel_size=(1, 3, 2), stride=(3, 1, 2))),   # planes skipped
])
def test_max_pool3d_one_plane_deep_matches_torch(shape, kw):
    """A window one plane deep runs as max_pool2d over the planes it keeps (ties included:
    the input holds repeated values), values and gradients PyTorch's, on a strided input."""
    torch = pytest.importorskip("torch")
    x0 = np.random.default_rng(3).integers(0, 4, shape).astype(np.float32)
    got = []
    for lib in (tj, torch):
        x = lib.tensor(x0.swapaxes(-1, -2).copy(), requires_grad=True)
        out = lib.nn.functional.max_pool3d(x.transpose(-1, -2), **kw)
        w = lib.tensor(np.arange(1.0, out.numel() + 1, dtype=np.float32).reshape(tuple(out.shape)))
        (out * w).sum().backward()
        got.append((out.detach().numpy(), x.grad.numpy()))
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)
