"""bench/gemm_forms.py: every form of a product multiplies the same operands (padding,
transposed output, one thread), the product is the step's, and a wrong form is caught."""
from __future__ import annotations

import numpy as np
import pytest

from bench import gemm_forms


def test_padded_array_holds_the_same_values_with_rows_apart():
    a = gemm_forms._array(3, 4, 0, np.random.default_rng(1))
    b = gemm_forms._array(3, 4, 16, np.random.default_rng(1))
    assert np.array_equal(a, b)
    assert b.strides == (80, 4) and a.strides == (16, 4)
    f = gemm_forms._operand((4, 3), "F", 16, np.random.default_rng(1))
    assert f.shape == (4, 3) and np.array_equal(f, a.T) and f.strides == (4, 80)


@pytest.mark.parametrize("label,m,k,n,lay", [p for p in gemm_forms.PRODUCTS if p[0].startswith(("dW3", "dX3"))])
def test_forms_of_a_head_product(label, m, k, n, lay):
    res = gemm_forms.forms(m, k, n, lay, calls=2)
    assert set(res) == {"as in the step", "1 thread", "out^T", "ld+16", "w ld+16", "out ld+16"}
    for med, best in res.values():
        assert 0 < best <= med


def test_a_form_computing_another_product_is_caught(monkeypatch):
    real = np.matmul

    def wrong(a, b, out=None):
        r = real(a, b, out=out)
        if a.shape[0] == 1024 and a.shape[1] == 10:     # the out^T form of dX3 only
            out[0, 0] += 1.0
        return r
    monkeypatch.setattr(gemm_forms.np, "matmul", wrong)
    with pytest.raises(AssertionError, match="out\\^T of 256x10x1024"):
        gemm_forms.forms(256, 10, 1024, "CC", calls=1)


def test_products_are_the_mlp_steps():
    flops = sum(2 * m * k * n for _, m, k, n, _ in gemm_forms.PRODUCTS)
    assert round(flops / 1e9, 2) == 2.45      # the breakdown's GFLOP per step
