"""A compiled call's autograd node (compiler/compiled_node.py): before the call's own in-place
update of an input, `keep_input` keeps the value the forward read where the backward reads
it, and keeps no copy of an input the backward never reads; gradients as PyTorch's."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tracejit as tj

pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _step(w, s, r):
    loss = (w * s).sum() + (w * w).sum()
    s.mul_(2)           # read by the backward: d loss / d w = s as the forward saw it
    r.add_(1)           # read by nothing the backward does
    return loss


def test_only_inputs_the_backward_reads_are_kept():
    rng = np.random.default_rng(0)
    wv, sv, rv = (rng.standard_normal(5).astype(np.float32) for _ in range(3))
    # (PyTorch's eager backward refuses the write into s; torch.compile's keeps its value)
    tw = torch.tensor(wv, requires_grad=True)
    ((tw * torch.tensor(sv)).sum() + (tw * tw).sum()).backward()
    cf = tj.compile(_step)
    w, s, r = tj.tensor(wv, requires_grad=True), tj.tensor(sv), tj.tensor(rv)
    loss = cf(w, s, r)
    node = loss.grad_fn
    assert any(x is r for x in node.inputs) and not any(x is s for x in node.inputs)
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(s.numpy(), sv * 2)
    np.testing.assert_allclose(r.numpy(), rv + 1)
