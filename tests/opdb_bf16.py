"""Op records for bf16 operands: products of bf16 values (cast inside the op, so the
database's float32 samples reach the matmul primitives on bf16 words, forward and
backward), compared with numpy's float64 product within bf16's precision."""
from __future__ import annotations

from opdb import F32, Sample, arr, register


def _bf16_product(m, a, b):
    return (a.to(m.bfloat16) @ b.to(m.bfloat16)).float()


def _samples(d, r):
    return [Sample((arr(r, a, d), arr(r, b, d)), desc=f"{a} @ {b}")
            for a, b in (((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 6)), ((1, 1), (1, 1)))]


# the bf16 inputs differ from the float32 samples by up to 2**-9 relative, the product's
# rounding by 2**-9 more: 2e-2 covers both for these small sums
register("matmul.bf16", _bf16_product, lambda a, b: a @ b, _samples, dtypes=(F32,),
         atol=2e-2, rtol=2e-2)
