"""Elementwise records' public functions (ops/elementwise.py) against PyTorch."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("mode", ["trunc", "floor"])
@pytest.mark.parametrize("dtype,values", [("uint8", [0, 1, 7, 200, 255]), ("int8", [-100, -7, 0, 5, 100]),
                                          ("int16", [-7, 7, 300])])
def test_rounding_div_wraps_a_python_int_into_the_dtype_first(mode, dtype, values):
    """PyTorch divides in the tensor's dtype: -3 is 253 for uint8, 200 is -56 for int8."""
    x = np.array(values, dtype)
    divide = tj.compile(lambda a, d: tj.div(a, d, rounding_mode=mode), backend="interpret")
    for d in (-3, 200, -200, 300, 3):
        want = torch.div(torch.tensor(x), d, rounding_mode=mode)
        assert tj.div(tj.tensor(x), d, rounding_mode=mode).tolist() == want.tolist(), d
        assert divide(tj.tensor(x), d).tolist() == want.tolist(), d   # d a runtime input
        zero_d = torch.div(torch.tensor(x), torch.tensor(d), rounding_mode=mode)
        assert tj.div(tj.tensor(x), tj.tensor(d), rounding_mode=mode).tolist() == zero_d.tolist(), d
    nz = x[x != 0]
    want = torch.div(-3, torch.tensor(nz), rounding_mode=mode)
    assert tj.div(-3, tj.tensor(nz), rounding_mode=mode).tolist() == want.tolist()


def test_bool_add_in_a_kernel_is_a_logical_or_for_the_ops_after_it():
    """True + True is True: a fused kernel's `+` gave the cast or sum after it a 2."""
    a, b = np.array([True, True, False]), np.array([True, False, False])

    def f(m, x, y):
        s = x + y
        return s.double(), s.sum(), x.clone().add_(y).double(), (x + True).double()
    want = f(torch, torch.tensor(a), torch.tensor(b))
    got = tj.compile(lambda x, y: f(tj, x, y))(tj.tensor(a), tj.tensor(b))
    for g, w in zip(got, want):
        assert g.tolist() == w.tolist()


def test_alpha_scales_in_the_result_dtype():
    """add/sub scale `other` by alpha in the promoted dtype, as PyTorch: float64 + int64 * 0.1
    is not rounded to float32 on the way, bools stay bools, integers refuse a float alpha."""
    cases = [lambda m: m.add(m.zeros(2, dtype=m.float64), m.tensor([1, 3]), alpha=0.1),
             lambda m: m.sub(m.zeros(2, dtype=m.float64), m.tensor([1, 3]), alpha=0.1),
             lambda m: m.add(m.tensor([True, False]), m.tensor([True, True]), alpha=-1),
             lambda m: m.tensor([True, False]).add(True, alpha=2),
             lambda m: m.tensor([1.5]).add_(m.tensor([True]), alpha=-1),
             lambda m: m.add(m.tensor([1, 2], dtype=m.int32), m.tensor([3, 4], dtype=m.int32), alpha=2)]
    for case in cases:
        want, got = case(torch), case(tj)
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        assert got.tolist() == want.tolist()
    with pytest.raises(RuntimeError, match="alpha must not be a floating point"):
        tj.add(tj.tensor([1]), tj.tensor([3]), alpha=0.5)


def test_div_output_may_be_changed_in_place_before_backward():
    """PyTorch's DivBackward saves the operands, not the result: ``y = a / b; y.add_(1)``
    (F.normalize's output edited in place) backpropagates to b; it raised here."""
    rng = np.random.default_rng(0)
    a0, b0 = rng.standard_normal((3, 4)), rng.uniform(0.5, 2.0, (3, 1))
    grads = []
    for m in (torch, tj):
        a, b = m.tensor(a0, requires_grad=True), m.tensor(b0, requires_grad=True)
        y = (a * 1) / (b * 1)
        y.mul_(3.0)
        z = m.nn.functional.normalize(a * 1, dim=1)
        z.add_(1.0)
        ((y + z) * m.tensor(a0)).sum().backward()
        grads.append((a.grad.numpy(), b.grad.numpy()))
    for g, w in zip(grads[1], grads[0]):
        np.testing.assert_allclose(g, w, rtol=1e-12)


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_extremum_gradients_at_ties_and_nans_as_torch(name):
    torch = pytest.importorskip("torch")
    nan = float("nan")
    grads = []
    for lib in (torch, tj):
        a = lib.tensor([1.0, nan, 2.0, 3.0, nan, -1.0], requires_grad=True)
        b = lib.tensor([2.0, 1.0, 2.0, nan, nan, -2.0], requires_grad=True)
        getattr(lib, name)(a, b).sum().backward()
        grads.append((a.grad.numpy(), b.grad.numpy()))
    np.testing.assert_array_equal(grads[1][0], grads[0][0])
    np.testing.assert_array_equal(grads[1][1], grads[0][1])


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_sign_of_nan_and_negative_zero_as_torch(compiled):
    torch = pytest.importorskip("torch")
    data = [float("nan"), -0.0, 0.0, -2.0, float("inf")]
    want = torch.tensor(data).sign().numpy()
    f = tj.compile(lambda a: a.sign() * 1.0) if compiled else (lambda a: a.sign())
    got = f(tj.tensor(data)).numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int64"])
def test_isinf_and_isfinite_of_integer_and_bool_tensors(dtype):
    a = np.array([0, 1, 1, 0]).astype(dtype)
    for name in ("isinf", "isfinite", "isnan"):
        got, want = getattr(tj, name)(tj.tensor(a)), getattr(torch, name)(torch.tensor(a))
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("op", ["remainder", "floor_divide", "fmod"])
def test_integer_division_with_an_empty_result_ignores_zero_divisors(op):
    a, b = np.zeros((0, 4), np.int64), np.array([[[1, 0, 2, 0]], [[0, 0, 0, 0]]])
    got, want = getattr(tj, op)(tj.tensor(a), tj.tensor(b)), getattr(torch, op)(torch.tensor(a), torch.tensor(b))
    assert tuple(got.shape) == tuple(want.shape) == (2, 0, 4)
    with pytest.raises(ZeroDivisionError):
        getattr(tj, op)(tj.ones(2, dtype=tj.int64), tj.zeros(2, dtype=tj.int64))


_SUBTRACTIONS = {
    "bool - bool": lambda L, b, i: b - b, "bool - True": lambda L, b, i: b - True,
    "bool.sub_(bool)": lambda L, b, i: b.clone().sub_(b), "1 - bool": lambda L, b, i: 1 - b,
    "rsub(bool, 1)": lambda L, b, i: L.rsub(b, 1), "sub(bool, int)": lambda L, b, i: L.sub(b, i),
    "int - True": lambda L, b, i: i - True, "sub(int, bool, alpha=2)": lambda L, b, i: L.sub(i, b, alpha=2)}


@pytest.mark.parametrize("form", list(_SUBTRACTIONS))
@pytest.mark.parametrize("compiled", [False, True])
def test_subtraction_with_a_bool_operand_raises_as_pytorch(form, compiled):
    f = _SUBTRACTIONS[form]
    with pytest.raises(RuntimeError) as want:
        f(torch, torch.tensor([True, False]), torch.tensor([1, 2]))
    g = tj.compile(lambda b, i: f(tj, b, i)) if compiled else (lambda b, i: f(tj, b, i))
    with pytest.raises(RuntimeError) as got:
        g(tj.tensor([True, False]), tj.tensor([1, 2]))
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("compiled", [False, True])
def test_integers_to_a_negative_int_power_raise_as_pytorch(compiled):
    with pytest.raises(RuntimeError) as want:
        torch.tensor([1, 2, 3]) ** -2
    f = lambda x: (x * 2) ** -2   # noqa: E731
    with pytest.raises(RuntimeError) as got:
        (tj.compile(f) if compiled else f)(tj.tensor([1, 2, 3]))
    assert str(got.value) == str(want.value)


def test_where_refuses_an_int_beyond_the_integer_tensors_dtype():
    """The Python int beside an integer tensor takes its dtype, checked as PyTorch's (not
    wrapped: 300 was 44 in uint8); a negative one wraps into uint8, as PyTorch's."""
    x = tj.tensor([2, 3], dtype=tj.uint8)
    for a, b in ((x, 300), (300, x), (tj.tensor(3, dtype=tj.int8), 70000)):
        with pytest.raises(RuntimeError, match="without overflow"):
            tj.where(x > 2, a, b)
        with pytest.raises(RuntimeError):
            torch.where(torch.tensor(x.numpy()) > 2, *(torch.tensor(v.numpy()) if isinstance(v, tj.Tensor) else v
                                                       for v in (a, b)))
    assert tj.where(x > 2, x, -1).tolist() == torch.where(torch.tensor([2, 3], dtype=torch.uint8) > 2,
                                                          torch.tensor([2, 3], dtype=torch.uint8), -1).tolist()
    assert tj.where(x > 2, x, 2.5).tolist() == [2.5, 3.0]


def test_where_takes_pytorchs_keyword_names():
    import torch
    for m in (torch, tj):
        x = m.arange(4.0) - 1
        got = m.where(condition=x > 0, input=x, other=m.tensor(0.5))
        assert got.tolist() == [0.5, 0.5, 1.0, 2.0]
