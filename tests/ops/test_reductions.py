"""Reductions of tracejit/ops/reductions.py against PyTorch where edge cases meet:
(values, indices) results from compiled functions, 0-d inputs with a dim, var's
divisor when the correction exceeds the count, and numpy's ``axis=``/``keepdims=`` names."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")


@pytest.mark.parametrize("op", ["max", "min", "sort", "topk"])
def test_compiled_values_indices_hold_tensors(op):
    call = {"max": lambda m, x: m.max(x, -1), "min": lambda m, x: m.min(x, 0),
            "sort": lambda m, x: m.sort(x, 1), "topk": lambda m, x: m.topk(x, 2)}[op]
    a = np.array([[1.0, 3.0, 2.0], [4.0, 0.0, 5.0]])
    cf = tj.compile(lambda x: call(tj, x))
    ref = call(torch, torch.tensor(a))
    for _ in range(2):
        got = cf(tj.tensor(a))
        assert isinstance(got.values, tj.Tensor) and isinstance(got.indices, tj.Tensor)
        np.testing.assert_array_equal(got.values.numpy(), ref.values.numpy())
        np.testing.assert_array_equal(got.indices.numpy(), ref.indices.numpy())


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reduction_of_a_0d_tensor_with_keepdim_is_0d(op):
    for dim in (0, -1, None):
        got = getattr(tj, op)(tj.tensor(3.0), dim, keepdim=True)
        ref = getattr(torch, op)(torch.tensor(3.0), dim, keepdim=True)
        assert tuple(got.shape) == tuple(ref.shape) == ()
    assert tuple(tj.max(tj.tensor(3.0), 0, keepdim=True).indices.shape) == ()


@pytest.mark.parametrize("n, correction", [(0, 1), (2, 3), (1, 2), (3, 4)])
def test_var_divides_by_at_least_zero(n, correction):
    a = np.arange(n, dtype=np.float64) * 1.5
    got = tj.var(tj.tensor(a), correction=correction)
    ref = torch.var(torch.tensor(a), correction=correction)
    np.testing.assert_array_equal(got.numpy(), ref.numpy())   # nan or +inf, not -0 or -inf
    got = tj.std(tj.tensor(a), correction=correction)
    np.testing.assert_array_equal(got.numpy(), torch.std(torch.tensor(a), correction=correction).numpy())


@pytest.mark.parametrize("compiled", [False, True])
def test_var_and_std_of_data_far_from_zero_keep_their_digits_as_pytorch(compiled):
    # a spread of 1e-3 around 1e4: the float32 mean's rounding error alone, squared into
    # every term, made the plain two-pass variance several percent too large
    a = (np.random.RandomState(0).randn(8, 64) * 1e-3 + 1e4).astype(np.float32)
    exact = a.astype(np.float64).std(1, ddof=1)
    assert np.abs(torch.tensor(a).std(1).double().numpy() / exact - 1).max() < 1e-6
    call = (lambda t: (t.std(1), t.var(0, correction=0))) if not compiled else \
        tj.compile(lambda t: (t.std(1), t.var(0, correction=0)))
    std, var = call(tj.tensor(a))
    np.testing.assert_allclose(std.numpy(), exact, rtol=1e-6)
    np.testing.assert_allclose(var.numpy(), a.astype(np.float64).var(0), rtol=1e-6)
    const = tj.full((5, 7), 1e4 + 0.3)   # (rounding must not take a variance below zero)
    assert call(const)[0].tolist() == [0.0] * 5 and call(const)[1].tolist() == [0.0] * 7


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_along_a_dim_give_the_gradient_to_the_index_taken(op, keepdim):
    # ties included (PyTorch's value_selecting_reduction_backward); the values may be
    # written in place before backward, as the gradient reads only the indices
    a = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 0.0, 2.0], [5.0, 5.0, 5.0, 5.0]])
    res = []
    for m in (torch, tj):
        x = m.tensor(a, requires_grad=True)
        v, i = getattr(m, op)(x * 1.0, 1, keepdim=keepdim)
        v.mul_(2.0)
        (v * m.tensor([[1.0], [2.0], [3.0]] if keepdim else [1.0, 2.0, 3.0], dtype=m.float64)).sum().backward()
        res.append((v.detach().numpy(), i.numpy(), x.grad.numpy()))
    for got, want in zip(res[1], res[0]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dim,keepdim", [(-1, False), (1, True), (0, False)])
def test_max_min_over_long_rows_match_pytorch_through_their_plans(op, dim, keepdim):
    # (16, 512): rows longer than the CPU kernel's scan take numpy's call in the plan (the
    # second and third calls); dim 0 the kernel's. Ties, a NaN and the gradient's index.
    a = np.random.default_rng(5).integers(0, 40, (16, 512)).astype(np.float32)
    a[3, 7] = np.nan
    for _ in range(3):
        res = []
        for m in (torch, tj):
            x = m.tensor(a, requires_grad=True)
            v, i = getattr(m, op)(x, dim, keepdim=keepdim)
            (v * m.arange(v.numel(), dtype=m.float32).reshape(v.shape)).sum().backward()
            res.append((v.detach().numpy(), i.numpy(), x.grad.numpy()))
        for got, want in zip(res[1], res[0]):
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_along_the_dim_of_a_0d_tensor_keep_its_dtype(op):
    for a in (True, 2.5, 3):
        v, i = getattr(tj, op)(tj.tensor(a), 0, keepdim=True)
        tv, ti = getattr(torch, op)(torch.tensor(a), 0, keepdim=True)
        assert str(v.dtype).split(".")[-1] == str(tv.dtype).split(".")[-1]
        assert v.item() == tv.item() and i.item() == ti.item()


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_max_min_over_a_dim_send_the_gradient_to_the_returned_index(op, keepdim, compiled):
    """PyTorch documents max(dim)'s index as the first extremum's, and its gradient flows to
    that element alone (amax splits it among ties): ReLU zeros pooled by a max tie often."""
    a = np.array([[1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], [2.0, 3.0, 3.0, -1.0]], np.float32)
    w = np.array([1.0, 2.0, 3.0], np.float32)
    grads = {}
    for lib in (torch, tj):
        x = lib.tensor(a, requires_grad=True)

        def f(x, lib=lib):
            v, i = getattr(lib, op)(x, 1, keepdim=keepdim)
            return (v.reshape(-1) * lib.tensor(w)).sum(), i
        fn = tj.compile(f) if compiled and lib is tj else f
        loss, idx = fn(x)
        loss.backward()
        grads[lib] = (x.grad.numpy(), idx.numpy(), loss.item())
    for got, want in zip(grads[tj], grads[torch]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("values", [[1.0, np.nan, 3.0, np.nan], [1.0, 3.0, 3.0, -3.0],
                                    [np.inf, 2.0, -np.inf, np.inf]], ids=["nans", "ties", "infs"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_whole_max_min_split_the_gradient_as_pytorch(op, values, compiled):
    """max()/min() over the whole tensor split the gradient evenly among the extrema, the
    nans when the result is nan (amax's ``x == out`` selects none of them)."""
    a = np.array(values, np.float32)
    got = {}
    for lib in (torch, tj):
        x = lib.tensor(a, requires_grad=True)

        def f(x, lib=lib):
            return getattr(lib, op)(x * 2) * 3
        out = (tj.compile(f) if compiled and lib is tj else f)(x)
        out.backward()
        got[lib] = (x.grad.numpy(), out.detach().numpy())
    for mine, want in zip(got[tj], got[torch]):
        np.testing.assert_array_equal(mine, want)
    # amax keeps its own rule: no element equals a nan result
    x = tj.tensor(a, requires_grad=True)
    tx = torch.tensor(a, requires_grad=True)
    getattr(tj, "a" + op)(x).backward()
    getattr(torch, "a" + op)(tx).backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


@pytest.mark.parametrize("op", ["sum", "prod", "mean", "var", "std", "amax", "amin", "max", "min", "argmax",
                                "argmin", "logsumexp", "all", "any"])
def test_axis_and_keepdims_are_numpys_names_as_in_pytorch(op):
    """Spinning Up's ``log_prob(a).sum(axis=-1)``, StyleGAN2's ``mean([2, 3, 4],
    keepdims=True)``: PyTorch takes numpy's names for dim and keepdim."""
    a = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    for axis in (0, -1):
        want = getattr(torch.tensor(a), op)(axis=axis)
        for got, ndim in ((getattr(tj.tensor(a), op)(axis=axis), 1),
                          (getattr(tj, op)(tj.tensor(a), axis=axis, keepdim=True), 2),
                          (getattr(tj.tensor(a), op)(axis, keepdims=True), 2)):
            got, ref = (got[0], want[0]) if op in ("max", "min") else (got, want)
            assert got.ndim == ndim
            np.testing.assert_allclose(got.numpy().reshape(ref.shape), ref.numpy(), rtol=1e-6)


@pytest.mark.parametrize("row", [[0.0, 0.0, 3.0, 2.0], [0.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 2.0], [1.5, -2.0, 0.5, 3.0]])
def test_prod_second_derivative_with_two_zeros_matches_pytorch(row):
    """With two zeros in the product the gradient is 0 at both, but its derivative along
    the other zero is the product of the rest."""
    got = []
    for lib in (torch, tj):
        x = lib.tensor([row, row[::-1]], requires_grad=True)
        for y in (x.prod(), x.prod(1)):
            (gx,) = lib.autograd.grad((y * (lib.arange(y.numel(), dtype=y.dtype) + 1.0).reshape(y.shape)).sum(),
                                      x, create_graph=True)
            (ggx,) = lib.autograd.grad((gx * lib.tensor([[1.0, 2.0, 3.0, 4.0], [-1.0, 0.5, 2.0, 1.0]])).sum(), x)
            got.append((gx.detach().numpy(), ggx.numpy()))
    for (a, b), (c, d) in zip(got[2:], got[:2]):
        np.testing.assert_allclose(a, c, rtol=1e-6)
        np.testing.assert_allclose(b, d, rtol=1e-6)


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_float32_running_sums_and_products_accumulate_as_pytorchs(op):
    # a synthesizer's phase: the running sum of 2048 float32 increments (PyTorch's CPU
    # kernels carry it in double precision; a float32 carry drifts by ~1e-4)
    x = np.random.default_rng(0).uniform(0.99, 1.01, (3, 2048)).astype(np.float32)
    # along the last dim, another, and a short one of wide slices (summed a step at a time)
    for a, dim in ((x, 1), (x.T.reshape(64, 32, 3), 0), (x.reshape(2, 24, 128), 1)):
        for compiled in (False, True):
            f = (lambda t: getattr(tj, op)(t, dim))
            got = (tj.compile(f) if compiled else f)(tj.tensor(a))
            assert got.dtype == tj.float32
            np.testing.assert_array_equal(got.numpy(), getattr(torch, op)(torch.tensor(a), dim).numpy())


def test_a_device_array_modules_running_sum_keeps_the_dtype():
    # another array module (cupy on a GPU) accumulates in double too and gives float32 back
    from types import SimpleNamespace
    from tracejit.ops.reductions import _accumulate
    xp = SimpleNamespace(cumsum=np.cumsum)
    a = np.random.default_rng(1).uniform(0.99, 1.01, (3, 2048)).astype(np.float32)
    got = _accumulate(xp, np.add, "cumsum", a, 1)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.cumsum(a, axis=1, dtype=np.float64).astype(np.float32))
    assert _accumulate(xp, np.add, "cumsum", a.astype(np.int32), 1).dtype == np.int64


@pytest.mark.parametrize("op", ["std", "var", "norm"])
def test_float16_std_var_and_norm_compute_in_float32_as_torch(op):
    x = np.array([[6e4, 6e4, -6e4, 1.0], [4e4, 1.0, -3e4, 1.0]], dtype=np.float16)
    want = getattr(torch.tensor(x), op)(dim=1).float().numpy()
    for f in (lambda t: getattr(t, op)(dim=1), tj.compile(lambda t: getattr(t, op)(dim=1))):
        np.testing.assert_array_equal(f(tj.tensor(x)).float().numpy(), want)


@pytest.mark.parametrize("form", ["b.argmax()", "b.argmin(0)", "b.median()", "b.nanmedian()", "b.kthvalue(1)", "z.kthvalue(1)", "b.topk(1)",
                                  "h.quantile(0.5)", "h.nanquantile(0.5)", "b.max(0)", "b.min(0)", "b.mode()", "h.median()"])
def test_bool_and_half_inputs_are_refused_or_taken_as_torch(form):
    def run(L):
        return eval(form, {"b": L.tensor([True, False, True]), "z": L.tensor(True), "h": L.tensor([1.0, 2.0], dtype=L.float16)})
    try:
        want = run(torch)
    except (RuntimeError, NotImplementedError):
        with pytest.raises(RuntimeError):
            run(tj)
        return
    got = run(tj)
    assert [t.tolist() for t in got] == [t.tolist() for t in want] if isinstance(want, tuple) else \
        got.tolist() == want.tolist()


@pytest.mark.parametrize("call", [lambda m, x: m.var(x, 1), lambda m, x: x.std(0, correction=0, keepdim=True),
                                  lambda m, x: m.var_mean(x, 1)[0], lambda m, x: m.std_mean(x)[0], lambda m, x: x.std()])
def test_var_and_std_of_a_complex_tensor_are_real_as_pytorch(call):
    """The real and imaginary parts' variances added (a real result), with its gradient."""
    c = (np.arange(12).reshape(3, 4) * np.array(0.7 - 0.3j) + np.cos(np.arange(12)).reshape(3, 4) * 1j).astype(np.complex64)
    want_x = torch.tensor(c, requires_grad=True)
    want = call(torch, want_x)
    want.sum().backward()
    x = tj.tensor(c, requires_grad=True)
    got = call(tj, x)
    got.sum().backward()
    assert got.dtype == tj.float32
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), want_x.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(tj.compile(lambda t: call(tj, t))(tj.tensor(c)).numpy(), want.detach().numpy(), rtol=1e-5)


@pytest.mark.parametrize("call", [lambda m, x: m.prod(x, (0, 1)), lambda m, x: x.prod(dim=[1]),
                                  lambda m, x: m.aminmax(x, dim=(0,)), lambda m, x: x.logsumexp(),
                                  lambda m, x: m.logsumexp(x)])
def test_reductions_without_tuple_dims_or_a_required_dim_raise_as_pytorch(call):
    """prod and aminmax take one dim, logsumexp requires one: where PyTorch raises a
    TypeError, so do eager and compiled calls."""
    with pytest.raises(TypeError):
        call(torch, torch.ones(2, 3))
    with pytest.raises(TypeError):
        call(tj, tj.ones(2, 3))
    with pytest.raises(TypeError):
        tj.compile(lambda x: call(tj, x))(tj.ones(2, 3))


def test_prod_and_aminmax_over_one_dim_keep_working():
    x = np.arange(1.0, 7.0).reshape(2, 3)
    for dim in (0, -1):
        np.testing.assert_array_equal(tj.tensor(x).prod(dim).numpy(), torch.tensor(x).prod(dim).numpy())
        got, want = tj.aminmax(tj.tensor(x), dim=dim, keepdim=True), torch.aminmax(torch.tensor(x), dim=dim, keepdim=True)
        np.testing.assert_array_equal(got.max.numpy(), want.max.numpy())
    got, want = tj.tensor(x).aminmax(keepdim=True), torch.tensor(x).aminmax(keepdim=True)
    assert tuple(got.min.shape) == tuple(want.min.shape)


_KEEPDIM_CALLS = {
    "sum": lambda m, x: x.sum(keepdim=True), "mean": lambda m, x: m.mean(x, keepdim=False),
    "prod": lambda m, x: x.prod(keepdim=True), "max": lambda m, x: x.max(keepdim=True),
    "min": lambda m, x: m.min(x, keepdim=False), "median": lambda m, x: x.median(keepdim=True),
    "nanmedian": lambda m, x: x.nanmedian(keepdim=True), "mean_keepdims": lambda m, x: x.mean(keepdims=True),
    "prod_none": lambda m, x: x.prod(None, True),
}


@pytest.mark.parametrize("name", list(_KEEPDIM_CALLS))
def test_keepdim_without_dim_raises_type_error_as_pytorch(name):
    call, x = _KEEPDIM_CALLS[name], np.arange(6.0).reshape(2, 3)
    with pytest.raises(TypeError):
        call(torch, torch.tensor(x))
    with pytest.raises(TypeError, match="keepdim"):
        call(tj, tj.tensor(x))


def test_an_explicit_dim_none_keeps_every_dim_as_pytorch():
    x = np.arange(6.0).reshape(2, 3)
    for call in (lambda m, t: t.sum(None, keepdim=True), lambda m, t: m.mean(t, dim=None, keepdim=True),
                 lambda m, t: t.sum(axis=None, keepdims=True), lambda m, t: t.amax(None, True)):
        want, got = call(torch, torch.tensor(x)), call(tj, tj.tensor(x))
        assert tuple(got.shape) == tuple(want.shape) == (1, 1)
        np.testing.assert_allclose(got.numpy(), want.numpy())
