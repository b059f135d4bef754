"""embedding_bag's argument checks: what PyTorch refuses (offsets not starting at 0,
float indices) is refused with a message naming the argument, not computed or failed deep
inside; int32 indices and offsets work as PyTorch's do."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import DTypeError

W = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)


def _bag():
    m = tj.nn.EmbeddingBag(10, 4, mode="sum")
    m.load_state_dict({"weight": tj.tensor(W)})
    return m


def test_int32_indices_and_offsets_sum_bags():
    got = _bag()(tj.tensor([1, 2, 3, 4], dtype=tj.int32), tj.tensor([0, 2], dtype=tj.int32))
    np.testing.assert_allclose(got.detach().numpy(), [W[1] + W[2], W[3] + W[4]], rtol=1e-6)


@pytest.mark.parametrize("ids,offsets,error,match", [
    ([1, 2, 3, 4], [1, 2], ValueError, "offsets\\[0\\] must be 0 .* got 1"),
    ([1.0, 2.0], [0], DTypeError, "input must be an integer tensor of indices, got float32"),
    ([1, 2], [0.0], DTypeError, "offsets must be an integer tensor, got float32"),
])
def test_bad_indices_and_offsets_are_refused(ids, offsets, error, match):
    with pytest.raises(error, match=match):
        _bag()(tj.tensor(ids), tj.tensor(offsets))
