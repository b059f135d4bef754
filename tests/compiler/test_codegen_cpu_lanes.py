"""Rows nests rendered in lanes (compiler/codegen_cpu_lanes.py): which kernels get the
lanes body (the serial rows kernels of nests folding a float max, for short rows; a kernel
of its own over a middle dim), and the rows kernels' values on both sides of the switch
against PyTorch: rows of one, odd and short lengths, fewer rows than the lane dim needs,
rank 3, non-contiguous input, float32 and float64, forward and backward."""
import numpy as np
import pytest

from tracejit.compiler import codegen_cpu_lanes as lanes
from tracejit.compiler.codegen_cpu_rows import render_rows
from tracejit.compiler.cpu.kernels import row_forms
from tracejit.ops.layer_norm_prim import LAYER_NORM_BACKWARD
from tracejit.ops.log_softmax_prim import LOG_SOFTMAX, LOG_SOFTMAX_BACKWARD
from tracejit.ops.softmax_prim import SOFTMAX, SOFTMAX_BACKWARD

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _nest(prim, arity, params, rank=2):
    return row_forms._lower(prim, [((2,) * rank, "float32")] * arity, params)[1]


def test_serial_rows_kernels_of_max_folds_get_the_lanes_body():
    cond = f"if d1 <= {lanes.LANE_ROW_MAX} and d0 >= {lanes.LANE_ROWS_MIN}:"
    for prim, arity, params in ((SOFTMAX, 1, {"dim": 1, "scale": 1.0}), (LOG_SOFTMAX, 1, {"dim": 1})):
        nest = _nest(prim, arity, params)
        serial, parallel = render_rows(nest, False).source, render_rows(nest, True).source
        assert cond in serial and "t_in0[i1, j]" in serial
        assert cond not in parallel and serial.count("for row in range(nrows)") == 1
    # sums alone fold well along a row: no lanes body
    for prim, params in ((SOFTMAX_BACKWARD, {"dim": 1, "scale": 1.0}), (LOG_SOFTMAX_BACKWARD, {"dim": 1})):
        assert "ntile" not in render_rows(_nest(prim, 2, params), False).source


def test_which_nests_run_in_lanes():
    assert lanes.takes_lanes(_nest(SOFTMAX, 1, {"dim": 2, "scale": 1.0}, rank=3))
    assert lanes.takes_lanes(_nest(LOG_SOFTMAX_BACKWARD, 2, {"dim": 2}, rank=3))
    # sums over the rows (LayerNorm's weight gradient) fold across rows: never in lanes
    ln = row_forms._lower(LAYER_NORM_BACKWARD, [((2, 2), "float32")] * 3 + [((1, 2), "float32")] * 2
                          + [((1,), "float32")], {"n": 1, "eps": 1e-5, "has_w": True, "sums": True})[1]
    assert ln.cols and not lanes.takes_lanes(ln)
    with pytest.raises(ValueError, match="does not run in lanes"):
        lanes.render_lanes(ln, False)
    src = lanes.render_lanes(_nest(SOFTMAX, 1, {"dim": 2, "scale": 1.0}, rank=3), False).source
    assert "in0[i0, i2, i1]" in src and "out0[i0, i2, i1]" in src   # (A, R, B) memory, B innermost


def _torch_rows(op, x, g):
    t = torch.tensor(x, requires_grad=True)
    y = getattr(torch, op)(t, -1)
    y.backward(torch.tensor(g))
    return y.detach().numpy(), t.grad.numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(200, 1), (65, 3), (130, 7), (9, 12), (8, 10), (7, 10), (100, 13),
                                   (3, 70, 5), (2, 5, 9)])
def test_short_rows_match_torch(shape, dtype, monkeypatch):
    """Both sides of the lanes switch (rows of up to LANE_ROW_MAX, LANE_ROWS_MIN rows across
    the lane dim), partial tiles, rank 3, a Fortran-ordered copy."""
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")
    r = np.random.default_rng(sum(shape))
    x = (r.standard_normal(shape) * 5).astype(dtype)
    g = r.standard_normal(shape).astype(dtype)
    tol = 2e-6 if dtype is np.float32 else 1e-13
    for xv in (x, np.asfortranarray(x)):
        for op, fwd, bwd in (("softmax", row_forms.softmax, row_forms.softmax_backward),
                             ("log_softmax", row_forms.log_softmax, row_forms.log_softmax_backward)):
            y_want, dx_want = _torch_rows(op, x, g)
            y = fwd(xv, dim=x.ndim - 1)
            dx = bwd(g, y_want.astype(dtype), dim=x.ndim - 1)
            assert y is not None and dx is not None, f"{op}'s rows kernels did not run"
            np.testing.assert_allclose(y, y_want, rtol=tol, atol=tol)
            np.testing.assert_allclose(dx, dx_want, rtol=10 * tol, atol=10 * tol)


def test_short_rows_special_values(monkeypatch):
    """A row of -inf, a row holding nan and +inf, -0 against +0: as the numpy form."""
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")
    x = np.random.default_rng(1).standard_normal((16, 4)).astype(np.float32)
    x[1] = -np.inf
    x[2, 1] = np.nan
    x[3, 2] = np.inf
    x[4] = [-0.0, 0.0, -1.0, -2.0]
    with np.errstate(invalid="ignore", over="ignore"):
        want = SOFTMAX.impl(np, x, dim=1)
        got = row_forms.softmax(x, dim=1)
        want_l = LOG_SOFTMAX.impl(np, x, dim=1)
        got_l = row_forms.log_softmax(x, dim=1)
    for a, b in ((got, want), (got_l, want_l)):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_allclose(a[~np.isnan(a)], b[~np.isnan(b)], rtol=2e-6, atol=1e-7)
