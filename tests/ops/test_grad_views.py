"""VJP array shortcuts (ops/grad_views.py): when a graph may record, and g's pieces."""
import numpy as np

import tracejit as tj
from tracejit.ops.grad_views import pieces, recording


def test_recording_only_with_grad_mode_a_tracer_or_a_non_array():
    x = tj.ones(3)
    assert recording(x)                       # grad mode on
    with tj.no_grad():
        assert not recording(x)
        assert not recording()
        traced = []
        tj.jit.trace(lambda t: traced.append(recording(t)) or t * 2)(x)
        assert traced == [True]


def test_pieces_are_views_of_slices_and_single_indexes():
    a = np.arange(24.0).reshape(2, 3, 4)
    g = tj.tensor(a)
    got = pieces(g, 2, [1, 3])
    assert [p.shape for p in got] == [(2, 3, 1), (2, 3, 3)]
    np.testing.assert_array_equal(got[1].numpy(), a[:, :, 1:])
    assert np.shares_memory(got[1].numpy(), a) or np.shares_memory(got[1].numpy(), g.numpy())
    one = pieces(tj.tensor(np.array([5.0, 6.0])), 0, [None, None])
    assert [type(p.numpy()) for p in one] == [np.ndarray] * 2 and one[1].item() == 6.0
