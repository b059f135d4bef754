"""Op records for matmul_nt (``a @ b.T``) and matmul_tn (``a.T @ b``), tracejit/ops/linalg.py:
matmul's gradient products with an operand transposed, one record each instead of a
PERMUTE view and a MATMUL. Bound directly here, so the traced and compiled checks run the
records themselves (matmul's own VJP binds the permute + matmul pair under a tracer)."""
from __future__ import annotations

import numpy as np

from opdb import FLOATS, Sample, arr, register

from tracejit.ops.linalg import MATMUL_NT, MATMUL_TN
from tracejit.ops.registry import bind


def _swap(x):
    return np.swapaxes(x, -1, -2)


def _f(prim, torch_form):
    def f(m, a, b):
        if m.__name__ == "torch":
            return torch_form(a, b)
        return bind(prim, a, b)
    return f


def _samples(pairs):
    def samples(d, r):
        return [Sample((arr(r, a, d), arr(r, b, d)), desc=f"{a}, {b}") for a, b in pairs]
    return samples


# (a, b) shapes: 2-D, a batch against a 2-D operand (matmul_rows' case for nt), batches
# that broadcast, one-sized and empty dims
register("matmul_nt", _f(MATMUL_NT, lambda a, b: a @ b.mT), lambda a, b: a @ _swap(b),
         _samples([((3, 4), (5, 4)), ((2, 3, 4), (5, 4)), ((2, 1, 3, 4), (5, 2, 4)), ((1, 1), (1, 1)),
                   ((0, 4), (3, 4)), ((3, 0), (2, 0))]))
register("matmul_tn", _f(MATMUL_TN, lambda a, b: a.mT @ b), lambda a, b: _swap(a) @ b,
         _samples([((4, 3), (4, 5)), ((2, 4, 3), (4, 5)), ((2, 1, 4, 3), (5, 4, 2)), ((1, 1), (1, 1)),
                   ((4, 0), (4, 3)), ((0, 3), (0, 2))]))
