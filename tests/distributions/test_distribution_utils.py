"""torch.distributions.utils' helpers, which custom distributions import, against PyTorch."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.distributions.utils import broadcast_all, clamp_probs, logits_to_probs, probs_to_logits

torch = pytest.importorskip("torch")
from torch.distributions import utils as U  # noqa: E402

X = np.array([[0.2, -1.0, 3.0], [0.0, 0.5, -2.0]], np.float32)
P = np.array([0.0, 0.2, 0.5, 1.0], np.float32)


@pytest.mark.parametrize("binary", [False, True])
def test_helpers_match_torch(binary):
    np.testing.assert_allclose(logits_to_probs(tj.tensor(X), is_binary=binary).numpy(),
                               U.logits_to_probs(torch.tensor(X), is_binary=binary).numpy(), rtol=1e-6)
    np.testing.assert_allclose(probs_to_logits(tj.tensor(P), is_binary=binary).numpy(),
                               U.probs_to_logits(torch.tensor(P), is_binary=binary).numpy(), rtol=1e-5)
    np.testing.assert_allclose(clamp_probs(tj.tensor(P)).numpy(), U.clamp_probs(torch.tensor(P)).numpy())
    assert [tuple(t.shape) for t in broadcast_all(tj.ones(2, 1), 1.0, tj.zeros(3))] == [(2, 3)] * 3
