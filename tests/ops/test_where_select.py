"""where(c, x, 0) / where(c, 0, x) take a bit-mask path on numpy (ops/elementwise.py
`_select_or_zero`): its results must be bit-identical to numpy's where, special values included."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.ops.elementwise import _select_or_zero

SPECIAL = [1.5, -0.0, 0.0, np.nan, np.inf, -np.inf, -2.25, 1e-40]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("x_first", [True, False])
def test_bits_equal_numpy_where(dtype, x_first):
    x = np.array(SPECIAL * 2, dtype=dtype)
    c = np.array([True, False] * len(SPECIAL))
    got = _select_or_zero(c, x, 0.0) if x_first else _select_or_zero(c, 0.0, x)
    want = np.where(c, x, dtype(0)) if x_first else np.where(c, dtype(0), x)
    assert got.dtype == want.dtype
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


def test_broadcasting_and_0d():
    c = np.array([[True], [False]])
    x = np.arange(6, dtype=np.float32).reshape(1, 6) - 2.5
    np.testing.assert_array_equal(_select_or_zero(c, x, 0.0), np.where(c, x, 0.0))
    np.testing.assert_array_equal(_select_or_zero(np.array(True), np.array(3.0, np.float32), 0.0), 3.0)
    np.testing.assert_array_equal(_select_or_zero(np.array(False), np.array(3.0, np.float32), 0.0), 0.0)


def test_other_forms_are_left_to_numpy():
    c = np.array([True, False])
    x = np.array([1.0, 2.0], np.float32)
    assert _select_or_zero(c, x, -0.0) is None          # -0.0 fill: numpy's where keeps its sign
    assert _select_or_zero(c, x, 1.0) is None
    assert _select_or_zero(c, x, x) is None
    assert _select_or_zero(c, np.array([1, 2]), 0) is None  # integers: numpy's where


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf * 0 in the forward product
def test_relu_gradient_through_where_matches_mask():
    x = tj.tensor(np.array([-1.0, 0.0, 2.0, 3.0], np.float32), requires_grad=True)
    (tj.relu(x) * tj.tensor(np.array([np.inf, 5.0, np.nan, -7.0], np.float32))).sum().backward()
    g = x.grad.numpy()
    assert g[0] == 0.0 and g[1] == 0.0 and np.isnan(g[2]) and g[3] == -7.0


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("bounds", [(0, None), (0.0, None), (None, 0), (0, 0.0), (-1.0, 0), (0, 2.0)])
def test_clamp_at_zero_bits_equal_numpy_where(dtype, bounds):
    # clamp(min=0) (ReLU) and clamp(max=0) take the same select; the kept elements keep
    # their bits (-0.0 stays -0.0, nan stays nan), as with clamp's two-sided where
    lo, hi = bounds
    x = np.array(SPECIAL * 2, dtype=dtype)
    want = x
    if lo is not None:
        want = np.where(want < lo, dtype(lo), want)
    if hi is not None:
        want = np.where(want > hi, dtype(hi), want)
    got = tj.tensor(x).clamp(lo, hi).numpy()
    assert got.dtype == want.dtype
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))
    assert tj.tensor(np.array(-0.0, dtype)).clamp(min=0).numpy().tobytes() == np.array(-0.0, dtype).tobytes()


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_where_refuses_non_bool_condition_like_pytorch(dtype):
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="condition"):
        torch.where(torch.ones(3, dtype=getattr(torch, dtype)), torch.ones(3), torch.zeros(3))
    cond = tj.ones(3, dtype=getattr(tj, dtype))
    with pytest.raises(tj.errors.DTypeError, match=f"condition to be a bool tensor.*{dtype}"):
        tj.where(cond, tj.ones(3), tj.zeros(3))
    with pytest.raises(tj.errors.DTypeError, match="condition"):
        tj.compile(lambda c, x: tj.where(c, x, 0.0))(cond, tj.ones(3))
    with pytest.raises(RuntimeError, match="condition"):
        tj.ones(3).where(cond, 0.0)


def test_where_takes_a_uint8_condition_with_a_warning():
    cond = tj.tensor([1, 0, 2], dtype=tj.uint8)
    with pytest.warns(UserWarning, match="uint8 condition"):
        out = tj.where(cond, tj.ones(3), tj.zeros(3))
    assert out.tolist() == [1.0, 0.0, 1.0]


@pytest.mark.parametrize("form", ["scalar_other", "detached_other", "both", "scalar_first"])
def test_gradients_of_the_branches_that_take_one_match_pytorch(form):
    """The VJP builds only the branches that take a gradient: the others (a number, a
    detached tensor) get none, the rest PyTorch's values, also differentiated again."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    a, b, g = (rng.standard_normal((6, 7)) for _ in range(3))
    got = []
    for lib in (torch, tj):
        x, y = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=form == "both")
        c = x > 0.2
        out = {"scalar_other": lambda: lib.where(c, x * x, 0.0),
               "detached_other": lambda: lib.where(c, x * x, y * 2.0),
               "both": lambda: lib.where(c, x * x, y * y),
               "scalar_first": lambda: lib.where(c, 1.5, x * x)}[form]()
        (gx,) = lib.autograd.grad((out * lib.tensor(g)).sum(), x, create_graph=True)
        (ggx,) = lib.autograd.grad(gx.sum(), x)
        got.append((gx.detach().numpy(), ggx.numpy(), y.grad))
    np.testing.assert_array_equal(got[1][0], got[0][0])
    np.testing.assert_array_equal(got[1][1], got[0][1])
    if form == "both":
        for lib in (torch, tj):
            x, y = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
            (lib.where(x > 0.2, x, y * y) * lib.tensor(g)).sum().backward()
            got.append(y.grad.numpy())
        np.testing.assert_array_equal(got[3], got[2])
