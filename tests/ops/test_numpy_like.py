"""ops/numpy_like.py, the Tensor-method spellings in tensor_compat.py and the in-place
functions of the tracejit namespace, against PyTorch: the same expression written once
and run with each library."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _a(m):
    return m.arange(12, dtype=m.float32).reshape(3, 4) / 3 - 1.5


def _b(m):
    return m.tensor([[0.5, -1.0, 2.0, 0.0]])


def _n(m):
    return m.tensor([[1.0, float("nan"), 3.0, 2.0]])


def _ip(name, *args, **kw):
    def f(m):
        x = _a(m).clone()
        out = getattr(x, name)(*[arg(m) if callable(arg) else arg for arg in args], **kw)
        assert out is x
        return x
    return f


CASES = {
    "broadcast_tensors": lambda m: m.broadcast_tensors(_a(m)[:, :1], _b(m)),
    "fmax": lambda m: m.fmax(_n(m), _b(m)), "fmin": lambda m: m.fmin(_n(m), _b(m)),
    "gcd": lambda m: m.gcd(m.tensor([12, 18, 7, 0]), m.tensor([8, 12, 0, 5])),
    "lcm": lambda m: m.lcm(m.tensor([12, 18, 7, 0]), m.tensor([8, 12, 3, 5])),
    "nextafter": lambda m: m.nextafter(m.tensor([1.0, 0.0], dtype=m.float64), m.tensor([2.0, -1.0], dtype=m.float64)),
    "cov": lambda m: m.cov(_a(m)), "cov1d": lambda m: m.cov(_a(m)[0]),
    "cov_weights": lambda m: m.cov(_a(m), correction=0, fweights=m.tensor([1, 2, 1, 3]),
                                   aweights=m.tensor([0.5, 1.0, 2.0, 1.0])),
    "cov_aweights": lambda m: m.cov(_a(m), aweights=m.tensor([0.5, 1.0, 2.0, 1.0])),
    "corrcoef": lambda m: m.corrcoef(_a(m) + m.tensor([[0.0], [1.0], [4.0]]) * m.tensor([1.0, -2, 0.5, 3])),
    "histogram": lambda m: m.histogram(_a(m), bins=4),
    "histogram_range": lambda m: m.histogram(_a(m), bins=3, range=(-1.0, 1.0), density=True),
    "unravel_index": lambda m: m.unravel_index(m.tensor([5, 11, -1]), (3, 4)),
    "diagflat": lambda m: m.diagflat(m.tensor([[1.0, 2.0], [3.0, 4.0]]), 1),
    "msort": lambda m: m.msort(_a(m).flip(0)), "ravel": lambda m: _a(m).t().ravel(),
    "logspace": lambda m: m.logspace(0, 2, 5), "logspace_base": lambda m: m.logspace(0, 3, 4, base=2),
    "select_scatter": lambda m: m.select_scatter(_a(m), m.ones(4), 0, 1),
    "slice_scatter": lambda m: m.slice_scatter(_a(m), m.zeros(3, 2), 1, 0, 4, 2),
    "diagonal_scatter": lambda m: m.diagonal_scatter(_a(m), m.tensor([9.0, 8.0, 7.0]), 1),
    "diagonal_scatter_below": lambda m: m.diagonal_scatter(_a(m), m.tensor([9.0, 8.0]), -1),
    "diagonal_scatter_dims": lambda m: m.diagonal_scatter(m.zeros(2, 3, 3), m.ones(3, 2), 0, 0, 2),
    "movedim_tuple": lambda m: m.movedim(m.zeros(2, 3, 4, 5), (0, 1), (3, 0)).shape,
    "concatenate": lambda m: m.concatenate([_a(m), _b(m)]),
    "rsub": lambda m: m.rsub(_a(m), 2.0, alpha=3), "vdot": lambda m: m.vdot(_a(m)[0], _a(m)[1]),
    "greater": lambda m: m.greater(_a(m), 0), "less_equal": lambda m: _a(m).less_equal(_b(m)),
    "not_equal": lambda m: m.not_equal(_a(m), _a(m).round()),
    "mvlgamma": lambda m: m.mvlgamma(_a(m).abs() + 2, 2), "mvlgamma_method": lambda m: (_a(m).abs() + 2).mvlgamma(3),
    "fill": lambda m: m.fill(_a(m), 2.5),
    "abs_": _ip("abs_"), "cos_": _ip("cos_"), "sigmoid_": _ip("sigmoid_"), "floor_": _ip("floor_"),
    "eq_": _ip("eq_", _b), "gt_": _ip("gt_", 0), "logical_not_": _ip("logical_not_"), "clip_": _ip("clip_", -1, 1),
    "remainder_": _ip("remainder_", 0.7), "arctan2_": _ip("arctan2_", _b),
    "nan_to_num_": lambda m: _n(m).clone().nan_to_num_(7.0),
    "top abs_": lambda m: m.abs_(_a(m).clone()), "top sqrt_": lambda m: m.sqrt_(_a(m).abs()),
    "top clamp_": lambda m: m.clamp_(_a(m).clone(), 0, 1),
    "fill_diagonal_wrap": lambda m: m.zeros(5, 3).fill_diagonal_(2.0, wrap=True),
    "fill_diagonal": lambda m: m.zeros(5, 3).fill_diagonal_(2.0),
    "fill_diagonal_cube": lambda m: m.zeros(2, 2, 2).fill_diagonal_(1.0),
    "fill_diagonal_wide": lambda m: m.zeros(2, 4).fill_diagonal_(1.0, wrap=True),
    "byte": lambda m: (_a(m) * 3).byte(), "char": lambda m: (_a(m) * 3).char(), "short": lambda m: (_a(m) * 3).short(),
    "resize_": lambda m: _a(m).clone().resize_(2, 3), "resize_as_": lambda m: _a(m).clone().resize_as_(m.ones(12)),
    "sum_to_size": lambda m: _a(m).sum_to_size(1, 4), "sum_to_size_lead": lambda m: m.ones(2, 3, 4).sum_to_size(3, 1),
    "split_with_sizes": lambda m: _a(m).split_with_sizes([1, 3], 1), "narrow_copy": lambda m: _a(m).narrow_copy(1, 1, 2),
    "index_put_accumulate": lambda m: m.zeros(4).index_put_((m.tensor([0, 1, 1, 3]),), m.tensor(1.0), accumulate=True),
    "index_put": lambda m: _a(m).index_put((m.tensor([0, 2]), m.tensor([1, 3])), m.tensor([7.0, 8.0])),
    "top index_put": lambda m: m.index_put(_a(m), (m.tensor([0, 0]),), m.ones(4), True),
    "scatter_add_": lambda m: m.zeros(3, 4).scatter_add_(0, m.tensor([[0, 1, 2, 0], [0, 0, 0, 0]]), m.ones(2, 4)),
    "scatter_reduce_": lambda m: m.zeros(3, 4).scatter_reduce_(0, m.tensor([[0, 1, 2, 0]]), _a(m)[:1], "amax",
                                                               include_self=False),
    "normal_fixed": lambda m: m.normal(2.0, 0.0, (2, 3)), "normal_std_tensor": lambda m: m.normal(1.0, m.zeros(2)),
    "poisson_zero": lambda m: m.poisson(m.zeros(3)),
    "binomial_sure": lambda m: m.binomial(m.tensor([5.0, 3.0]), m.tensor([1.0, 0.0])),
    "stft_method": lambda m: m.view_as_real(m.linspace(-1, 1, 16).stft(8, hop_length=4, return_complex=True,
                                                                        window=m.hann_window(8))),
    "igamma_method": lambda m: m.tensor([1.0, 2.0]).igamma(m.tensor([0.5, 1.0])),
    "igammac_": lambda m: m.tensor([1.0, 2.0]).igammac_(m.tensor([0.5, 1.0])),
    "matrix_exp_method": lambda m: (_a(m)[:, :3] / 4).matrix_exp(),
    "cholesky_inverse_method": lambda m: m.tensor([[2.0, 0.0], [1.0, 3.0]]).cholesky_inverse(),
    "bernoulli_p": lambda m: m.bernoulli(_a(m), 1.0), "bernoulli_method": lambda m: _a(m).sigmoid().round().bernoulli(),
    # integers: `& | ^ ~` are bitwise (5 & 3 is 1), bool tensors logical, shifts keep the sign
    "int and": lambda m: m.tensor([5, 6, -1]) & m.tensor([3, 3, 2]), "int and scalar": lambda m: m.tensor([5, 6, -1]) & 1,
    "int or": lambda m: 1 | m.tensor([4, 6, -1]), "int xor": lambda m: m.tensor([5, 6, -1]) ^ 3,
    "int invert": lambda m: ~m.tensor([5, 0, -1]), "bool invert": lambda m: ~m.tensor([True, False]),
    "bool and": lambda m: m.tensor([True, False]) & m.tensor([True, True]), "bool or": lambda m: m.tensor([True, False]) | True,
    "bool xor": lambda m: m.tensor([True, False]) ^ m.tensor([True, True]),
    "shifts": lambda m: m.tensor([1, 2, -8]) << 2, "rshift": lambda m: m.tensor([9, 2, -8]) >> m.tensor([1, 1, 2]),
    "rlshift": lambda m: 1 << m.tensor([0, 3]), "shift fns": lambda m: m.bitwise_right_shift(m.tensor([64]), 3),
    "copysign scalar": lambda m: m.copysign(_a(m), -1.0), "copysign int": lambda m: m.copysign(m.tensor([1, -2]), 1.0),
    "index_reduce prod": lambda m: m.ones(3, 2).index_reduce(0, m.tensor([0, 2, 0]), _a(m)[:, :2], "prod"),
    "index_reduce amax": lambda m: m.zeros(2, 4).index_reduce(1, m.tensor([1, 1, 3, 0]), _a(m)[:2], "amax",
                                                               include_self=False),
    "index_reduce mean": lambda m: m.ones(3, 4).index_reduce(0, m.tensor([2, 2, 0]), _a(m), "mean"),
    "as_strided": lambda m: m.as_strided(_a(m), (3, 3), (1, 3), 1), "as_strided method": lambda m: _a(m).as_strided((2, 2), (4, 1)),
    "diagonal view": lambda m: (lambda x: (x.diagonal().fill_(7.0), x)[1])(_a(m).clone()),
    "diagonal offset view": lambda m: (lambda x: (x.diagonal(-1).add_(1.0), x)[1])(_a(m).clone()),
    "diagonal batched": lambda m: m.ones(2, 3, 4).diagonal(1, 2, 1),
    "flip separate dims": lambda m: _a(m).flip(0, 1), "flip keyword": lambda m: m.flip(_a(m), dims=[1]),
    "view dtype": lambda m: _a(m).view(m.int32), "view dtype narrower": lambda m: _a(m).view(m.int16),
}


def _as_np(v):
    if isinstance(v, (tuple, list)):
        return [_as_np(x) for x in v]
    if hasattr(v, "detach"):
        v = v.detach()
        return np.asarray(v.numpy(), np.float64), str(v.dtype).split(".")[-1]
    return v


def _close(got, want):
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w)
    elif isinstance(want, tuple) and len(want) == 2 and isinstance(want[0], np.ndarray):
        assert got[1] == want[1], (got[1], want[1])
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    else:
        assert tuple(got) == tuple(want) if isinstance(want, (tuple, torch.Size)) else got == want


@pytest.mark.parametrize("case", list(CASES))
def test_same_values_as_pytorch(case):
    _close(_as_np(CASES[case](tj)), _as_np(CASES[case](torch)))


def test_gradients_of_composites_match_pytorch():
    for m in (tj, torch):
        g = _a(m).clone().requires_grad_()
        m.diagonal_scatter(g, g[0, :3] * 2, 1).sum().backward()
        f = _a(m).clone().requires_grad_()
        m.fmax(f, _b(m)).sum().backward()
        if m is tj:
            got = (g.grad.numpy(), f.grad.numpy())
        else:
            np.testing.assert_array_equal(got[0], g.grad.numpy())
            np.testing.assert_array_equal(got[1], f.grad.numpy())


def test_dtype_queries():
    assert tj.result_type(tj.ones(2, dtype=tj.int32), 2.5) is tj.float32
    assert tj.result_type(tj.ones(2), tj.tensor(1.0, dtype=tj.float64)) is tj.float32
    assert (tj.can_cast(tj.float64, tj.float32), tj.can_cast(tj.float32, tj.int32)) == (True, False)
    assert tuple(tj.broadcast_shapes((3, 1), (1, 4), 4)) == (3, 4)
    x = tj.ones(3, 4)
    assert (x.itemsize, x.nbytes, x.double().nbytes) == (4, 48, 96)
    assert isinstance(tj.float32, tj.dtype) and x.get_device() == -1
    assert tj.is_nonzero(tj.tensor([0.5])) and not tj.is_same_size(x, x.t())
    assert (tj.is_signed(x), tj.ones(2, dtype=tj.uint8).is_signed(), tj.tensor([1]).is_signed()) == (True, False, True)


def test_random_draws_have_pytorchs_shapes_and_gradients():
    assert tuple(tj.normal(tj.zeros(3, 1), tj.ones(1, 4)).shape) == (3, 4)
    m, s = tj.zeros(3, requires_grad=True), tj.ones(3, requires_grad=True)
    (tj.normal(m, s) ** 2).sum().backward()
    assert m.grad.shape == (3,) and s.grad.shape == (3,)
    with pytest.raises(TypeError, match="give size"):
        tj.normal(0.0, 1.0)
    x = tj.randint_like(tj.zeros(100), 2, 5)
    assert x.dtype is tj.float32 and set(np.unique(x.numpy())) <= {2.0, 3.0, 4.0}
    gen = tj.Generator().manual_seed(3)
    first = tj.poisson(tj.full((50,), 4.0), generator=gen)
    again = tj.poisson(tj.full((50,), 4.0), generator=tj.Generator().manual_seed(3))
    assert first.tolist() == again.tolist() and first.mean().item() > 2


def test_runtime_switches():
    tj.manual_seed(123)
    assert tj.initial_seed() == 123
    tj.set_anomaly_enabled(True)
    assert tj.is_anomaly_enabled()
    tj.set_anomaly_enabled(False)
    assert not tj.is_anomaly_enabled()
    assert tj.set_flush_denormal(True) is False


def test_bad_arguments_name_the_culprit():
    with pytest.raises(TypeError, match="gcd: expected integer"):
        tj.gcd(tj.ones(2), tj.ones(2))
    with pytest.raises(ValueError, match="fill_diagonal_: all dims must be equal"):
        tj.zeros(2, 3, 4).fill_diagonal_(1.0)
    with pytest.raises(RuntimeError, match="resize_: cannot resize a tensor that requires grad"):
        tj.zeros(2, requires_grad=True).resize_(3)
    with pytest.raises(ValueError, match="movedim: source and destination"):
        tj.movedim(tj.zeros(2, 3), (0, 1), (1,))
    with pytest.raises(IndexError, match="unravel_index: an index is out of range"):
        tj.unravel_index(tj.tensor([12]), (3, 4))


def test_bitwise_operators_refuse_floats_and_as_strided_checks_its_reach():
    with pytest.raises(TypeError, match="float32"):
        ~tj.ones(2)
    with pytest.raises(TypeError, match="bitwise_and"):
        tj.ones(2) & tj.ones(2)
    with pytest.raises(RuntimeError, match="reach storage element 12, outside the input's 12"):
        tj.as_strided(tj.ones(3, 4), (2, 2), (6, 6))
    g = _a(tj).clone().requires_grad_()
    tj.as_strided(g, (2, 3), (1, 1)).sum().backward()          # overlapping windows add up
    assert g.grad.reshape(-1).tolist()[:5] == [1.0, 2.0, 2.0, 1.0, 0.0]


@pytest.mark.parametrize("write", [
    lambda x: x.as_strided((2, 2), (1, 2)).add_(10),
    lambda x: x.as_strided((3,), (2,), 1).mul_(-1),
    lambda x: x[1:].as_strided((2,), (2,)).fill_(0),          # offsets from the view's own
    lambda x: x[2:].as_strided((2,), (1,), 3).fill_(7)])      # storage offset counts the base's
def test_as_strided_is_a_view_writes_reach_the_input_as_in_pytorch(write):
    torch = pytest.importorskip("torch")
    got, want = tj.arange(6.0), torch.arange(6.0)
    write(got)
    write(want)
    assert got.tolist() == want.tolist()


def test_as_strided_in_place_on_a_graph_value_differentiates_as_pytorch():
    torch = pytest.importorskip("torch")
    grads = []
    for m in (tj, torch):
        x = m.arange(6.0, requires_grad=True)
        y = x * 2
        v = y.as_strided((2, 2), (1, 2), 1)
        v.mul_(3)
        (y.sum() + v.sum()).backward()
        grads.append(x.grad.tolist())
    assert grads[0] == grads[1] == [2.0, 12.0, 12.0, 12.0, 12.0, 2.0]


@pytest.mark.parametrize("name", ["fmax", "fmin"])
def test_fmax_and_fmin_give_a_ties_gradient_to_the_first_operand(name):
    nan = float("nan")
    a0, b0 = [nan, 2.0, 1.0, nan, 0.0], [1.0, 1.0, 1.0, nan, 3.0]
    res = []
    for lib in (torch, tj):
        a, b = lib.tensor(a0, requires_grad=True), lib.tensor(b0, requires_grad=True)
        y = getattr(lib, name)(a, b)
        y.sum().backward()
        res.append((y.detach().numpy(), a.grad.numpy(), b.grad.numpy()))
    for got, want in zip(res[1], res[0]):
        np.testing.assert_array_equal(got, want)


def test_logspace_of_a_complex_bound_is_complex_as_pytorch():
    for args, kw in [((0, 1j, 3), {}), ((1j, 2.0, 4), {"base": 2.0})]:
        want = torch.logspace(*args, **kw)
        got = tj.logspace(*args, **kw)
        assert got.dtype is tj.complex64 and want.dtype == torch.complex64
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_view_as_another_dtype_inside_a_compiled_function_runs_eagerly():
    x = np.array([[1.0, -2.5], [0.0, 3.0]], np.float32)
    want = (torch.tensor(x).view(torch.int32) + 1).numpy()
    with pytest.warns(RuntimeWarning, match=r"view\(int32\) reinterprets"):
        got = tj.compile(lambda a: a.view(tj.int32) + 1)(tj.tensor(x))
    np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(tj.errors.TraceError, match=r"view\(int16\) reinterprets"):
        tj.compile(lambda a: a.view(tj.int16), fullgraph=True)(tj.tensor(x))


@pytest.mark.parametrize("compiled", [False, True])
def test_nextafter_passes_the_gradient_to_its_input(compiled):
    def fn(m, a, b):
        return m.nextafter(a, b) * m.arange(6.0).reshape(2, 3)

    got, want = [], []
    for m, out in ((torch, want), (tj, got)):
        a, b = m.tensor([[1.0], [2.0]], requires_grad=True), m.tensor([0.0, 3.0, 5.0], requires_grad=True)
        f = tj.compile(lambda a, b: fn(tj, a, b)) if compiled and m is tj else lambda a, b: fn(m, a, b)
        f(a, b).sum().backward()
        out += [a.grad.numpy(), b.grad.numpy()]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_histogram_and_quantile_take_tensors_that_require_grad():
    v = np.random.default_rng(0).random(20).astype(np.float32)
    got, want = [], []
    for m, out in ((torch, want), (tj, got)):
        x = m.tensor(v, requires_grad=True)
        h = m.histogram(x, bins=m.tensor([0.0, 0.3, 1.0], requires_grad=True), weight=x * 2)
        q = m.quantile(x, m.tensor([0.2, 0.5], requires_grad=True))
        q.sum().backward()
        out += [h.hist.detach().numpy(), h.bin_edges.detach().numpy(), q.detach().numpy(), x.grad.numpy()]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_integer_logspace_truncates_its_bounds_first():
    # (exponents on halves: no rounding order moves a value across an integer)
    for start, end, steps, base in ((0.5, 2.5, 5, 10.0), (-0.5, 3.9, 4, 2.0)):
        want = torch.logspace(start, end, steps, base=base, dtype=torch.int64)
        got = tj.logspace(start, end, steps, base=base, dtype=tj.int64)
        assert got.tolist() == want.tolist()


_FILLS = {
    "fill number": lambda L, x, v: L.fill(x * 2, 2.5),
    "fill tensor": lambda L, x, v: L.fill(x * 2, v),
    "fill_ tensor": lambda L, x, v: (x * 1).fill_(v),
    "fill_ into a fresh tensor": lambda L, x, v: L.zeros(3).fill_(v) + x,
    "zero_ then use": lambda L, x, v: (x * 1).zero_() + x * v,
}


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name", sorted(_FILLS))
def test_fill_stays_in_the_graph_as_torch(name, compiled):
    """A filled tensor requires grad where PyTorch's does: the input's old values get a zero
    gradient and a tensor value the sum of the result's."""
    f = _FILLS[name]
    res = []
    for L in (torch, tj):
        x = L.tensor([1.0, -2.0, 3.0], requires_grad=True)
        v = L.tensor(2.5, requires_grad=True)
        run = tj.compile(lambda x, v: f(tj, x, v)) if compiled and L is tj else (lambda x, v: f(L, x, v))
        y = run(x, v)
        (y * L.tensor([1.0, 2.0, 3.0])).sum().backward()
        res.append((y.requires_grad, y.tolist(), x.grad.tolist(), None if v.grad is None else v.grad.item()))
    assert res[1] == res[0]
