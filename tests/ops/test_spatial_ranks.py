"""adaptive_avg_pool2d/3d (ops/spatial.py, ops/pooling_nd.py) on inputs of other ranks and
empty dims: PyTorch takes an all-ones output as a mean before its rank check."""
import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

CASES = [("2d", (3, 4), 1), ("2d", (3, 4), (1, 1)), ("2d", (2, 3, 4, 5, 6), 1), ("2d", (2, 3, 4, 5, 6), (1, 1)),
         ("2d", (2, 3, 4, 5, 6), (None, 1)), ("2d", (2, 0, 3), 1), ("2d", (2, 0, 3), (None, 1)),
         ("2d", (1, 1, 0, 3), 2), ("2d", (0, 2, 3, 3), (None, 1)), ("2d", (2, 3, 4), 2), ("2d", (4,), 1),
         ("3d", (3, 4, 5), 1), ("3d", (2, 3, 4, 5, 6, 2), 1), ("3d", (2, 3, 4, 5), (1, 1, 1))]


@pytest.mark.parametrize("nd,shape,size", CASES)
def test_adaptive_avg_pool_matches_pytorch_on_any_rank(nd, shape, size):
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    name = f"adaptive_avg_pool{nd}"
    try:
        want = getattr(TF, name)(torch.tensor(a), size).numpy()
    except (RuntimeError, ValueError, IndexError) as e:
        with pytest.raises(type(e) if not isinstance(e, IndexError) else (IndexError, RuntimeError)):
            getattr(F, name)(tj.tensor(a), size)
        return
    for fn in (getattr(F, name), tj.compile(getattr(F, name))):
        got = fn(tj.tensor(a), size).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_layer_on_a_2d_input_gives_the_mean_and_its_gradient():
    x = tj.arange(12.0).reshape(3, 4).requires_grad_()
    out = tj.nn.AdaptiveAvgPool2d(1)(x)
    assert out.shape == (1, 1) and out.item() == 5.5
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((3, 4), 1 / 12), rtol=1e-6)
