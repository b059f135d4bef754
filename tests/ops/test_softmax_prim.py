"""softmax and LayerNorm as primitives (ops/softmax_prim.py, ops/layer_norm_prim.py) with
their row kernels (rendered from their rows forms, forward and backward:
compiler/cpu/kernels/row_forms.py): values and gradients against the formulas, the
kernels against the numpy forms (edge sizes, strides, special values), the same
primitives recorded when traced, compiled gradients equal to eager ones, and LayerNorm's
second derivatives (its backward's own VJP) against PyTorch."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.ops import layer_norm_prim, softmax_prim
from tracejit.compiler.cpu.kernels import row_forms


@pytest.fixture(params=["kernel", "numpy"])
def path(request, monkeypatch):
    """Run a test with the row kernels (sync mode loads them at once) and without."""
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1" if request.param == "kernel" else "0")
    return request.param


def _np_softmax(x, dim):
    e = np.exp(x - x.max(dim, keepdims=True))
    return e / e.sum(dim, keepdims=True)


def test_softmax_values_and_gradients(path):
    r = np.random.default_rng(0)
    for dt, tol in ((np.float32, 2e-6), (np.float64, 1e-14)):
        xv = (r.standard_normal((3, 7, 19)) * 4).astype(dt)
        gv = r.standard_normal(xv.shape).astype(dt)
        for dim in (0, 1, 2):
            x = tj.tensor(xv, requires_grad=True)
            y = tj.softmax(x, dim)
            assert y.grad_fn.name() == "SoftmaxBackward0"
            ref = _np_softmax(xv.astype(np.float64), dim)
            np.testing.assert_allclose(y.detach().numpy(), ref, rtol=tol, atol=tol)
            (y * tj.tensor(gv)).sum().backward()
            gref = ref * (gv - (gv * ref).sum(dim, keepdims=True))
            np.testing.assert_allclose(x.grad.numpy(), gref, rtol=20 * tol, atol=20 * tol)


def test_softmax_edge_cases(path):
    x = tj.tensor(1.5, requires_grad=True)          # 0-d: a one-element row
    y = tj.softmax(x, 0)
    y.backward()
    assert y.item() == 1.0 and x.grad.item() == 0.0
    with np.errstate(invalid="ignore"):
        rows = tj.softmax(tj.tensor([[1.0, -np.inf], [-np.inf, -np.inf], [0.0, np.nan],
                                     [np.inf, 1.0]]), -1).numpy()
    assert rows[0].tolist() == [1.0, 0.0]
    assert np.isnan(rows[1:]).all()                 # as numpy's formula (and PyTorch for the first)
    assert tj.softmax(tj.zeros(2, 0), -1).shape == (2, 0)
    big = tj.tensor(np.array([[1000.0, 0.0, -1000.0]], np.float32))
    assert tj.softmax(big, -1).numpy().tolist() == [[1.0, 0.0, 0.0]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_kernel_max_orders_signed_values(dtype, monkeypatch):
    """The kernels take the row max on the floats' bits as ordered integers: rows whose max
    is negative, -0 against +0, a tiny subnormal, huge magnitudes and a masked (-inf) row
    element give numpy's softmax (a wrong shift would overflow exp or flatten the row)."""
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")
    tiny = np.finfo(dtype).smallest_subnormal
    rows = np.array([[-3.0, -7.5, -0.5, -100.0], [-0.0, -1.0, -2.0, -3.0], [0.0, -0.0, -5.0, -1.0],
                     [-tiny, -1e30, -1e-30, -2.0], [1e30 if dtype is np.float32 else 1e300, 0.0, -1.0, 2.0],
                     [-80.0, -90.0, -85.0, -np.inf]], dtype)
    for scale in (1.0, 0.125):
        z = rows * dtype(scale)
        e = np.exp(z - z.max(-1, keepdims=True))
        ref = e / e.sum(-1, keepdims=True)
        y = row_forms.softmax(rows, dim=1, scale=scale)
        assert y is not None, "the row kernel did not load"
        np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-30)
        mask = np.array([0.0, -np.inf, 0.0, 0.0], dtype)
        zm = z + mask
        em = np.exp(zm - zm.max(-1, keepdims=True))
        ym = row_forms.softmax(rows, mask, dim=1, scale=scale)
        np.testing.assert_allclose(ym, em / em.sum(-1, keepdims=True), rtol=1e-6, atol=1e-30)
        # attention rows masked everywhere (a 2-d mask over 3-d scores): nan, as PyTorch
        full = np.zeros((2, 4), dtype)
        full[1] = -np.inf
        scores = np.stack([rows[:2], rows[2:4]])
        with np.errstate(invalid="ignore"):
            got = row_forms.softmax(scores, full, dim=2, scale=scale)
        assert got is not None and np.isnan(got[:, 1]).all()
        np.testing.assert_allclose(got[:, 0], softmax_prim._softmax_impl(np, scores[:, 0], dim=1, scale=scale),
                                   rtol=1e-6, atol=1e-30)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rows_form_kernels_match_the_numpy_forms(dtype, monkeypatch):
    """Kernel vs numpy form on edge row lengths (the kernels' 16-lane max has a tail) and a
    non-contiguous input (the kernels take a contiguous copy)."""
    r = np.random.default_rng(3)
    tol = 3e-6 if dtype is np.float32 else 1e-13
    for k in (1, 2, 15, 16, 17, 33, 300):
        x = (r.standard_normal((5, k)) * 3).astype(dtype)
        g = r.standard_normal((5, k)).astype(dtype)
        for xv in (x, np.asfortranarray(x)):
            monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "0")
            y0 = softmax_prim._softmax_impl(np, xv, dim=1)
            b0 = softmax_prim._softmax_backward_impl(np, g, y0, 1)
            monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")
            y1 = row_forms.softmax(xv, dim=1)
            b1 = row_forms.softmax_backward(g, y0, dim=1)
            assert y1 is not None and b1 is not None, "the row kernels did not load"
            np.testing.assert_allclose(y1, y0, rtol=tol, atol=tol)
            np.testing.assert_allclose(b1, b0, rtol=tol, atol=tol)
        w = r.standard_normal(k).astype(dtype)
        b = r.standard_normal(k).astype(dtype)
        for wb in ((w, b), (w, None), (None, b), (None, None)):
            args = tuple(a for a in wb if a is not None)
            affine = (wb[0] is not None, wb[1] is not None)
            monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "0")
            o0 = layer_norm_prim._layer_norm_impl(np, x + 5, *args, n=1, eps=1e-5, affine=affine)
            d0 = layer_norm_prim._layer_norm_backward_impl(np, g, x + 5, *args[:affine[0]], n=1, eps=1e-5,
                                                           has_w=affine[0])
            monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")
            # the rows form's kernel: one serves every row length k of the loop (1 / k is
            # its operand), a Fortran-ordered input through a contiguous copy
            for xf in (x + 5, np.asfortranarray(x + 5)):
                of = row_forms.layer_norm(xf, *args, n=1, eps=1e-5, affine=affine)
                assert of is not None, "the LayerNorm rows-form kernel did not load"
                np.testing.assert_allclose(of, o0, rtol=10 * tol, atol=10 * tol)
            # the backward's rows form: dx, and the weight and bias gradients summed over
            # the rows in the same kernel
            for gf, xf in ((g, x + 5), (np.asfortranarray(g), np.asfortranarray(x + 5))):
                d1 = row_forms.layer_norm_backward(gf, xf, *args[:affine[0]], n=1, eps=1e-5,
                                                   has_w=affine[0])
                assert d1 is not None, "the LayerNorm backward rows-form kernel did not load"
                np.testing.assert_allclose(d1, d0, rtol=10 * tol, atol=10 * tol * max(1, k))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_kernel_over_several_normalized_dims(dtype, monkeypatch):
    """The rows form runs over the (M, K) view of the last `n` dims, any leading dims."""
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")
    r = np.random.default_rng(5)
    tol = 3e-6 if dtype is np.float32 else 1e-13
    for shape, n in (((3, 5, 6), 2), ((2, 3, 4, 7), 3), ((4, 1), 1), ((1, 9), 2)):
        x = (r.standard_normal(shape) * 2 + 3).astype(dtype)
        w = r.standard_normal(shape[len(shape) - n:]).astype(dtype)
        y = row_forms.layer_norm(x, w, n=n, eps=1e-5, affine=(True, False))
        assert y is not None and y.shape == shape
        x2 = x.reshape(-1, w.size).astype(np.float64)
        ref = (x2 - x2.mean(1, keepdims=True)) / np.sqrt(x2.var(1, keepdims=True) + 1e-5) * w.reshape(-1)
        np.testing.assert_allclose(y.reshape(ref.shape), ref, rtol=10 * tol, atol=10 * tol)


def test_layer_norm_values_and_gradients(path):
    r = np.random.default_rng(1)
    xv, wv, bv = r.standard_normal((6, 3, 8)), r.standard_normal((3, 8)), r.standard_normal((3, 8))
    x, w, b = (tj.tensor(v, requires_grad=True) for v in (xv, wv, bv))
    y = tj.nn.functional.layer_norm(x, (3, 8), w, b)
    mu = xv.mean((-2, -1), keepdims=True)
    rstd = 1 / np.sqrt(((xv - mu) ** 2).mean((-2, -1), keepdims=True) + 1e-5)
    xh = (xv - mu) * rstd
    np.testing.assert_allclose(y.detach().numpy(), xh * wv + bv, rtol=1e-12, atol=1e-12)
    g = r.standard_normal(y.shape)
    (y * tj.tensor(g)).sum().backward()
    gw = g * wv
    dx = rstd * (gw - gw.mean((-2, -1), keepdims=True) - xh * (gw * xh).mean((-2, -1), keepdims=True))
    np.testing.assert_allclose(x.grad.numpy(), dx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), (g * xh).sum(0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), g.sum(0), rtol=1e-10, atol=1e-12)


def test_layer_norm_mixed_float_dtypes_are_refused_as_pytorch():
    from tracejit.errors import DTypeError
    x = tj.randn(4, 5)
    w = tj.randn(5, dtype=tj.float64)
    with pytest.raises(DTypeError, match="weight is float64"):
        tj.nn.functional.layer_norm(x, (5,), w, None)
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="mixed dtype"):
        torch.nn.functional.layer_norm(torch.randn(4, 5), (5,), torch.randn(5, dtype=torch.float64))


def test_traced_programs_record_the_primitives():
    from tracejit.jit.tracer import trace_graph
    from tracejit.ops.registry import Aval

    def f(x, w):
        return tj.softmax(x, -1) + tj.nn.functional.layer_norm(x, (4,), w, None)
    ctx, out = trace_graph(f, [Aval((3, 4), tj.float32), Aval((4,), tj.float32)])
    names = {e.prim.name for e in ctx.eqns}
    assert {"softmax", "layer_norm"} <= names and not names & {"exp", "rsqrt", "amax"}


def _grads(f, args):
    ts = [tj.tensor(a, requires_grad=True) for a in args]
    out = f(*ts)
    (out * tj.tensor(np.linspace(-1, 1, out.numel()).reshape(out.shape))).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in ts]


def test_compiled_gradients_equal_eager():
    r = np.random.default_rng(2)

    def f(x, w, b):
        h = tj.nn.functional.layer_norm(x, (8,), w, b)
        return tj.softmax(h * 2.0, -1) * h
    args = [r.standard_normal((4, 5, 8)), r.standard_normal(8), r.standard_normal(8)]
    y0, g0 = _grads(f, args)
    y1, g1 = _grads(tj.trace(f), args)
    np.testing.assert_allclose(y1, y0, rtol=1e-12, atol=1e-13)
    for a, c in zip(g1, g0):
        np.testing.assert_allclose(a, c, rtol=1e-10, atol=1e-12)


def test_layer_norm_second_derivatives_vs_torch():
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(4)
    xv, wv, bv, gv = (r.standard_normal(s) for s in ((5, 6), (6,), (6,), (5, 6)))
    vx, vw = r.standard_normal((5, 6)), r.standard_normal(6)

    def second(T, f):
        x, w, b = (T.tensor(v, requires_grad=True) for v in (xv, wv, bv))
        y = f(x, w, b)
        gx, gw, gb = T.autograd.grad((y * T.tensor(gv)).sum(), (x, w, b), create_graph=True)
        total = (gx * T.tensor(vx)).sum() + (gw * T.tensor(vw)).sum() + gb.sum()
        return [t.detach().numpy() for t in T.autograd.grad(total, (x, w))]

    ref = second(torch, lambda x, w, b: torch.nn.functional.layer_norm(x, (6,), w, b))
    got = second(tj, lambda x, w, b: tj.nn.functional.layer_norm(x, (6,), w, b))
    compiled = second(tj, tj.trace(lambda x, w, b: tj.nn.functional.layer_norm(x, (6,), w, b)))
    for a, c, d in zip(got, compiled, ref):
        np.testing.assert_allclose(a, d, rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(c, d, rtol=1e-9, atol=1e-11)


def test_eager_row_kernels_pick_their_variant_by_work(monkeypatch):
    """Below the work that pays for waking the threads the serial variant runs, from it
    the parallel one (equal to an ulp: LLVM vectorizes the two loops on its own)."""
    from tracejit import threads
    from tracejit.compiler import codegen_cpu_rows
    picked = []
    real = codegen_cpu_rows.runs_parallel

    def spy(nest, elements, threads=0):
        picked.append(real(nest, elements, threads=2))
        return picked[-1]
    monkeypatch.setattr(codegen_cpu_rows, "runs_parallel", spy)
    monkeypatch.setattr(row_forms, "_calls", {})
    x = np.random.default_rng(5).standard_normal((256, 64)).astype(np.float32)
    small = row_forms.softmax(x, dim=1)
    monkeypatch.setattr(threads, "WAKE_WORK", 1)
    row_forms._calls.clear()
    large = row_forms.softmax(x, dim=1)
    assert picked == [False, True]
    assert small is not None and large is not None
    np.testing.assert_allclose(small, large, rtol=3e-7, atol=0)
    np.testing.assert_allclose(small, softmax_prim._softmax_impl(np, x, dim=1), rtol=3e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 50, 37), (4, 1), (1, 9)])
def test_layer_norm_backward_kernel_matches_torch(dtype, shape, monkeypatch):
    """The backward's rows-form kernel (dx, and dweight and dbias summed over the rows in
    blocks of rows: several here) against PyTorch, a transposed (non-contiguous) input too."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")
    r = np.random.default_rng(6)
    k = shape[-1]
    xv, gv = (r.standard_normal(shape).astype(dtype) * 2 + 1 for _ in range(2))
    wv, bv = (r.standard_normal(k).astype(dtype) for _ in range(2))
    tol = 2e-4 if dtype == np.float32 else 1e-10
    for xs in (xv, np.swapaxes(np.swapaxes(xv, 0, -2).copy(), 0, -2)):
        grads = []
        for T in (torch, tj):
            x, w, b = (T.tensor(v, requires_grad=True) for v in (xs, wv, bv))
            y = T.nn.functional.layer_norm(x, (k,), w, b)
            (y * T.tensor(gv)).sum().backward()
            grads.append([t.grad.detach().numpy() for t in (x, w, b)])
        for a, c in zip(*grads):
            np.testing.assert_allclose(c, a, rtol=tol, atol=tol * max(1, shape[0]))
