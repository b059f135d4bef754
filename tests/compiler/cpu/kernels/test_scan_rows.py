"""cumsum, cumprod and prod along the last dim(s) by their row kernels
(compiler/cpu/kernels/scan_rows.py): the numpy form's values bit for bit (nan, inf, signed
zeros included), PyTorch's through eager tensors and autograd, and declines for what the
kernels do not take."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")
torch = pytest.importorskip("torch")

import tracejit as tj  # noqa: E402
from special_values import eager_kernels_sync, with_specials  # noqa: E402,F401
from tracejit.compiler.cpu.kernels import scan_rows  # noqa: E402
from tracejit.ops.reductions import CUMSUM, PROD  # noqa: E402
from tracejit.ops.tensorfns import CUMPROD  # noqa: E402


pytestmark = pytest.mark.usefixtures("eager_kernels_sync")


def _bits_equal(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all()


_SHAPES = [(1,), (5,), (4, 1), (3, 7), (16, 8, 32), (2, 3, 4, 33)]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("prim,fn", [(CUMSUM, scan_rows.cumsum), (CUMPROD, scan_rows.cumprod)], ids=["cumsum", "cumprod"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", _SHAPES, ids=str)
@pytest.mark.parametrize("special", [False, True])
def test_scans_are_the_numpy_forms_bits(prim, fn, dtype, shape, special):
    x = (np.random.default_rng(0).standard_normal(shape) * 0.3 + 1).astype(dtype)
    if special:
        x = with_specials(x)
    got = fn(x, dim=-1)
    assert got is not None, "the kernel declined a call it takes"
    _bits_equal(got, prim.impl(np, x, dim=x.ndim - 1))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,dims", [((64, 1), (1,)), ((70, 7), (1,)), ((4, 16, 33), (2,)),
                                        ((2, 32, 4, 5), (2, 3)), ((2, 32, 4, 5), (3, 2))])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("special", [False, True])
def test_prod_is_the_numpy_forms_bits(dtype, shape, dims, keepdim, special):
    x = (np.random.default_rng(1).standard_normal(shape) * 0.3 + 1).astype(dtype)
    if special:
        x = with_specials(x)
    got = scan_rows.prod(x, dims=dims, keepdim=keepdim)
    assert got is not None, "the kernel declined a call it takes"
    _bits_equal(got, PROD.impl(np, x, dims=dims, keepdim=keepdim))


@pytest.mark.parametrize("x,dims", [
    (np.ones((300, 4), np.int64), (1,)),                    # integers: numpy's int64 rule
    (np.ones((4, 300), np.float32).T, (1,)),                # strided
    (np.ones((600, 0), np.float32), (1,)),                  # empty rows
    (np.ones((0, 600), np.float32), (1,)),                  # no rows
    (np.ones((300, 4), np.float32), (0,)),                  # not the last dim
])
def test_the_kernels_decline_what_they_do_not_take(x, dims):
    assert scan_rows.prod(x, dims=dims, keepdim=False) is None
    assert scan_rows.cumsum(x, dim=dims[0]) is None
    assert scan_rows.cumprod(x, dim=dims[0]) is None


def test_products_of_few_rows_are_left_to_numpy():
    x = np.ones((scan_rows.PROD_ROWS_MIN - 1, 5), np.float32)
    assert scan_rows.prod(x, dims=(1,), keepdim=False) is None
    assert scan_rows.prod(np.ones((scan_rows.PROD_ROWS_MIN, 5), np.float32), dims=(1,), keepdim=False) is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_eager_scans_and_gradients_are_pytorchs(dtype, op):
    x = torch.randn(6, 5, 32, dtype=dtype, generator=torch.Generator().manual_seed(2)) * 0.3 + 1
    tx = x.clone().requires_grad_(True)
    jx = tj.tensor(x.numpy(), requires_grad=True)
    want, got = getattr(tx, op)(-1), getattr(jx, op)(-1)
    # PyTorch's CPU scans also run in double and round each value: the same bits
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    g = torch.randn(want.shape, dtype=dtype, generator=torch.Generator().manual_seed(3))
    want.backward(g)
    got.backward(tj.tensor(g.numpy()))
    tol = 1e-5 if dtype is torch.float32 else 1e-12
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_eager_prod_and_gradient_are_pytorchs(dtype):
    x = torch.randn(8, 10, 32, dtype=dtype, generator=torch.Generator().manual_seed(4)) * 0.3 + 1
    x[0, 0, 3] = 0.0     # one zero in a row: the others' product is its gradient
    tx = x.clone().requires_grad_(True)
    jx = tj.tensor(x.numpy(), requires_grad=True)
    want, got = tx.prod(-1), jx.prod(-1)
    tol = 1e-5 if dtype is torch.float32 else 1e-13   # (PyTorch multiplies in vector lanes)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=tol, atol=0)
    want.sum().backward()
    got.sum().backward()
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=tol, atol=tol)


def test_eager_calls_on_other_layouts_keep_the_numpy_forms_values():
    x = np.random.default_rng(5).standard_normal((80, 70)).astype(np.float32)
    t = tj.tensor(x)
    np.testing.assert_array_equal(t.t().cumsum(-1).numpy(), CUMSUM.impl(np, x.T, dim=1))
    np.testing.assert_array_equal(t.cumsum(0).numpy(), CUMSUM.impl(np, x, dim=0))
    np.testing.assert_array_equal(t.t().prod(-1).numpy(), PROD.impl(np, x.T, dims=(1,), keepdim=False))
    np.testing.assert_array_equal(tj.tensor(np.arange(1, 7)).cumsum(0).numpy(), np.cumsum(np.arange(1, 7)))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_plan_calls_are_the_numpy_forms_for_every_layout(dtype):
    x = with_specials((np.random.default_rng(6).standard_normal((70, 9)) * 0.3 + 1).astype(dtype))
    for prim, params in [(CUMSUM, {"dim": 1}), (CUMPROD, {"dim": 1}), (CUMSUM, {"dim": 0}),
                         (PROD, {"dims": (1,), "keepdim": False}), (PROD, {"dims": (1,), "keepdim": True}),
                         (PROD, {"dims": (0,), "keepdim": False})]:
        make = scan_rows.specialize_prod if prim is PROD else scan_rows.specialize_scan(prim)
        call = make(((70, 9),), dtype, params)
        for a in (x, np.asfortranarray(x)):   # (a strided operand of the signature: numpy's form)
            _bits_equal(call(a), prim.impl(np, a, **params))
