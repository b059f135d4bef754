"""``tracejit.random.fork_rng`` as PyTorch's: draws and a manual_seed inside the block leave
the default generator's stream where it was."""
import numpy as np

import tracejit as tj


def test_fork_rng_restores_the_default_stream():
    tj.manual_seed(1)
    want = tj.randn(3).numpy()
    tj.manual_seed(1)
    with tj.random.fork_rng():
        tj.randn(5)
        tj.manual_seed(7)
        inside = tj.rand(3).numpy()
    np.testing.assert_array_equal(tj.randn(3).numpy(), want)
    tj.manual_seed(7)
    np.testing.assert_array_equal(tj.rand(3).numpy(), inside)   # the seed applied inside
    tj.manual_seed(1)
    with tj.random.fork_rng(enabled=False):
        tj.randn(3)
    assert not np.array_equal(tj.randn(3).numpy(), want)        # not forked: the stream moved
