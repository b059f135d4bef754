"""clamp through the public path must be bitwise clamp's select ``where(x < lo, lo, x)`` /
``where(x > hi, hi, x)``, special values included, at every length and offset (large
eager calls may run the generated one-pass kernel: the same bits)."""
import numpy as np
import pytest

import tracejit as tj

SPECIAL = [1.5, -0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, -2.25, 1e-40, 6.0, -6.0, 1.0, -1.0]


def _select(x, lo, hi):
    dt = x.dtype.type
    out = x
    if lo is not None:
        out = np.where(out < lo, dt(lo), out)
    if hi is not None:
        out = np.where(out > hi, dt(hi), out)
    return out


def _bits(a):
    return np.asarray(a).reshape(-1).view(np.uint8)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("bounds", [(0, None), (0.0, None), (-0.0, None), (None, 0), (None, -0.0),
                                    (0, 6.0), (-1.0, 1), (float("-inf"), 0.0), (0, float("inf")),
                                    (2.0, -2.0), (1e-7, 1 - 1e-7), (-1.5, None), (None, 2)])
def test_bits_equal_select(dtype, bounds):
    lo, hi = bounds
    rng = np.random.default_rng(0)
    base = np.array(SPECIAL * 5400, dtype=dtype)
    rng.shuffle(base)
    with np.errstate(invalid="ignore"):
        for n in (1, 2, 7, 15, 16, 17, 31, 33, 64, 65, 100, 256, 300, 1031, 6400, 70000):
            for off in (0, 1, 5):
                x = base[off:off + n]
                got = tj.tensor(x).clamp(lo, hi).numpy()
                want = _select(x, lo, hi)
                assert got.dtype == want.dtype
                assert np.array_equal(_bits(got), _bits(want)), (n, off)


@pytest.mark.parametrize("bound", [0.1, 2 ** 40 + 1])
def test_bounds_not_exact_in_the_dtype_select_as_the_definition(bound):
    x = np.array([0.5, -0.5, 0.1, np.nan, -0.0], np.float32)
    for lo, hi in ((bound, None), (None, bound)):
        got = tj.tensor(x).clamp(lo, hi).numpy()
        assert np.array_equal(_bits(got), _bits(_select(x, lo, hi))), (lo, hi)


def test_integer_clamp():
    x = np.array([1, -2, 7, 0], np.int64)
    np.testing.assert_array_equal(tj.tensor(x).clamp(0, 5).numpy(), np.clip(x, 0, 5))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tensor_clamp_keeps_bits_strided_and_0d(dtype):
    x = np.array(SPECIAL * 4, dtype=dtype).reshape(4, -1)[:, ::2]   # not contiguous
    got = tj.tensor(x).clamp(min=0).numpy()
    assert np.array_equal(_bits(got), _bits(_select(x, 0, None)))
    for v in (-0.0, np.nan, -3.0):
        z = np.array(v, dtype)
        assert _bits(tj.tensor(z).clamp(min=0).numpy()).tobytes() == _bits(_select(z, 0, None)).tobytes()


def test_many_bounds_through_one_plan():
    x = tj.tensor(np.linspace(-1, 1, 6400, dtype=np.float32).reshape(64, 100))
    for b in [i * 0.25 - 2 for i in range(20)]:
        for _ in range(2):   # the second call through the plan
            np.testing.assert_array_equal(x.clamp(min=b).numpy(), np.maximum(x.numpy(), np.float32(b)))
            np.testing.assert_array_equal(x.clamp(max=b).numpy(), np.minimum(x.numpy(), np.float32(b)))


def test_clamp_and_its_gradient_match_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal((64, 100)).astype(np.float32)
    w = np.random.default_rng(2).standard_normal((64, 100)).astype(np.float32)
    xt = tj.tensor(x, requires_grad=True)
    yt = xt.clamp(-0.5, 0.75)
    (yt * tj.tensor(w)).sum().backward()
    xr = torch.tensor(x, requires_grad=True)
    yr = xr.clamp(-0.5, 0.75)
    (yr * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(yt.detach().numpy(), yr.detach().numpy())
    np.testing.assert_array_equal(xt.grad.numpy(), xr.grad.numpy())


@pytest.mark.parametrize("dtype,lo,hi", [("bool", None, -1000), ("bool", -5, 5), ("bool", 2, 3.5), ("bool", 0.5, None),
                                         ("int8", None, 50), ("int8", -3, 2.5), ("uint8", 1, None)])
@pytest.mark.parametrize("compiled", [False, True])
def test_clamp_of_integer_and_bool_tensors_promotes_like_pytorch(dtype, lo, hi, compiled):
    torch = pytest.importorskip("torch")
    vals = [True, False, True] if dtype == "bool" else [100, 0, 7]
    want = torch.clamp(torch.tensor(vals, dtype=getattr(torch, dtype)), lo, hi)
    fn = lambda x: tj.clamp(x, lo, hi)   # noqa: E731
    got = (tj.compile(fn) if compiled else fn)(tj.tensor(vals, dtype=getattr(tj, dtype if dtype != "bool" else "bool_")))
    assert got.dtype.name == str(want.dtype).split(".")[-1].replace("bool", "bool")
    assert got.tolist() == want.tolist()


def test_clamp_with_tensor_bounds_passes_the_whole_gradient_at_a_bound():
    torch = pytest.importorskip("torch")
    cases = [([1.0, 2.0, 3.0], [2.0, 2.0, 2.0], [1.0, 1.0, 3.0]), ([-1.0, 0.0, 1.0], [-1.0, 0.0, 1.0], [1.0, 0.0, 2.0]),
             ([1.0, 5.0, 0.5], [float("nan"), 0.0, 0.0], [2.0, 2.0, 2.0])]
    for xs, los, his in cases:
        res = []
        for lib in (torch, tj):
            x, lo, hi = (lib.tensor(v, requires_grad=True) for v in (xs, los, his))
            y = lib.clamp(x, lo, hi)
            y.sum().backward()
            res.append((y.detach().numpy(), x.grad.numpy(), hi.grad.numpy()))
        for got, want in zip(res[1], res[0]):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("lo,hi", [(-3, None), (None, -3), (-2, 3), (2.0, 1.0), (-255, 255)])
@pytest.mark.parametrize("compiled", [False, True])
def test_out_of_range_bounds_wrap_and_the_max_bound_wins_as_pytorch(lo, hi, compiled):
    torch = pytest.importorskip("torch")
    vals = [5, 200, 3, 1] * 1000
    dt = "float32" if isinstance(lo, float) else "uint8"
    want = (torch.tensor(vals, dtype=getattr(torch, dt)) + 1).clamp(lo, hi) * 2
    fn = lambda x: (x + 1).clamp(lo, hi) * 2   # noqa: E731
    x = tj.tensor(vals, dtype=getattr(tj, dt))
    if compiled:   # (the second call, once the kernel is built, runs it)
        fn = tj.compile(fn)
        fn(x)
        tj.compiler.wait()
    assert fn(x).tolist() == want.tolist()


@pytest.mark.parametrize("dtype,bound", [("uint8", 300), ("uint8", -256), ("int8", -129), ("int64", 2 ** 63)])
def test_a_bound_beyond_the_dtype_is_refused(dtype, bound):
    with pytest.raises(RuntimeError, match=f"value {bound} cannot be converted to type {dtype}"):
        tj.tensor([1, 2], dtype=getattr(tj, dtype)).clamp(min=bound)
