"""ops/step_slices.py: a tensor's pieces as one autograd node whose backward is one cat
(chunk_pieces) or stack (unbind_steps), against PyTorch's chunk and unbind."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.ops.step_slices import chunk_pieces, unbind_steps

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dim", [0, -1])
def test_chunk_pieces_is_one_node_with_torchs_gradient(dim):
    x = np.random.default_rng(0).standard_normal((6, 8)).astype("float32")
    a, b = tj.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    pa, pb = chunk_pieces(a, 2, dim), torch.chunk(b, 2, dim)
    assert pa[0].grad_fn is pa[1].grad_fn is not None
    for p, q in zip(pa, pb):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
    (pa[1] * 3).sum().backward()      # (the first piece gets no gradient: zeros there)
    (pb[1] * 3).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())


def test_unbind_steps_and_chunk_pieces_without_gradients_are_plain_ops():
    x = tj.arange(12.0).reshape(3, 4)
    assert chunk_pieces(x, 2, 1)[0].grad_fn is None
    assert [t.tolist() for t in unbind_steps(x, 1)] == [[0.0, 4.0, 8.0], [1.0, 5.0, 9.0],
                                                        [2.0, 6.0, 10.0], [3.0, 7.0, 11.0]]
    a = tj.tensor(x.numpy(), requires_grad=True)
    s = unbind_steps(a, 1)
    (s[0] + 2 * s[3]).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.tile([1.0, 0.0, 0.0, 2.0], (3, 1)).astype("float32"))
