"""A plan's call of a primitive with registered implementations (compiler/plan.py
`_table_call`): where the table binds a call to the eqn's static signature (ops/impls.py
`specialized`), the plan calls it, not the per-call table; values as PyTorch's."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import tracejit as tj

pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _shift(lib, w, s):
    t = lib.cat([w[-1:], w, w[:1]])
    return lib.nn.functional.conv1d(t.view(1, 1, -1), s.view(1, 1, -1)).view(-1) * 2


def test_a_bound_signature_is_the_plans_call():
    rng = np.random.default_rng(0)
    w, s = rng.standard_normal(128).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    cf = tj.script(lambda a, b: _shift(tj, a, b))
    got = cf(tj.tensor(w), tj.tensor(s))
    np.testing.assert_allclose(got.numpy(), _shift(torch, torch.tensor(w), torch.tensor(s)).numpy(), rtol=1e-5,
                               atol=1e-5)
    src = cf._entries[-1].executor._infer.source
    assert "I_conv2d_gemm" not in src and re.search(r"= _fix\(S\d+_conv2d_gemm\(v\d+, v\d+\)", src), src
