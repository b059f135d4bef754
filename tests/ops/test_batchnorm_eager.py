"""Eager training-mode batch norm as one record (ops/normalization.py `_train_in_one`) and
its backward's parts (ops/batchnorm_prim.py `_eager_parts`): the same values, gradients and
running statistics as the general path of eager ops, bit for bit, and PyTorch's."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.ops import batchnorm_prim as B
from tracejit.ops import normalization as N

torch = pytest.importorskip("torch")


def _step(m, x, w):
    xt = tj.tensor(x, requires_grad=True)
    y = m(xt)
    (y * tj.tensor(w)).sum().backward()
    return y, xt.grad


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(128, 64), (6, 3, 5), (4, 3, 2, 5)])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_one_record_equals_the_general_path_bit_for_bit(monkeypatch, dtype, shape, momentum):
    rng = np.random.default_rng(0)
    layer = tj.nn.BatchNorm1d if len(shape) < 4 else tj.nn.BatchNorm2d
    fast, slow = (layer(shape[1], momentum=momentum, dtype=dtype) for _ in range(2))
    inputs = [((rng.standard_normal(shape) * 2 + 0.5).astype(dtype), rng.standard_normal(shape).astype(dtype))
              for _ in range(3)]
    ours = []
    for m, general in ((fast, False), (slow, True)):
        with monkeypatch.context() as mp:
            if general:
                mp.setattr(N, "_train_in_one", lambda *a: None)
                mp.setattr(B, "_eager_parts", lambda *a: None)
            ours.append([_step(m, x, w) for x, w in inputs])
    for (y1, g1), (y2, g2) in zip(*ours):
        assert y1.grad_fn.name() == y2.grad_fn.name() == "NativeBatchNormBackward0"
        np.testing.assert_array_equal(y1.detach().numpy(), y2.detach().numpy())
        np.testing.assert_array_equal(g1.numpy(), g2.numpy())
    for (name, a), (_, b) in zip(fast.named_parameters(), slow.named_parameters()):
        np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy(), err_msg=name)
    for (name, a), (_, b) in zip(fast.named_buffers(), slow.named_buffers()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
    assert fast.num_batches_tracked.item() == 3


def test_running_statistics_match_torch_and_bump_their_versions():
    rng = np.random.default_rng(1)
    t = torch.nn.BatchNorm1d(16)
    m = tj.nn.BatchNorm1d(16)
    version = m.running_mean._version
    for _ in range(4):
        x = rng.standard_normal((32, 16)).astype(np.float32) * 3 + 1
        np.testing.assert_allclose(m(tj.tensor(x)).detach().numpy(), t(torch.tensor(x)).detach().numpy(),
                                   rtol=1e-5, atol=1e-5)
    assert m.running_mean._version == version + 4
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(getattr(m, name).numpy(), getattr(t, name).numpy(), rtol=1e-6,
                                   atol=1e-7, err_msg=name)


def test_statistics_that_are_views_take_the_general_path():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((20, 4))
    store = tj.zeros(8, dtype=tj.float64)
    rm, rv = store[:4], store[4:] + 1.0
    w, b = tj.ones(4, dtype=tj.float64), tj.zeros(4, dtype=tj.float64)
    assert N._train_in_one(tj.tensor(x), rm, rv, w, b, 0.1, 1e-5, 20, False) is None
    assert store.numpy().sum() == 0.0     # (declined before writing anything)
    tm, tv = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    want = torch.nn.functional.batch_norm(torch.tensor(x), tm, tv, torch.ones(4, dtype=torch.float64),
                                          torch.zeros(4, dtype=torch.float64), True, 0.1, 1e-5)
    got = tj.nn.functional.batch_norm(tj.tensor(x), rm, rv, w, b, True, 0.1, 1e-5)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(store.numpy()[:4], tm.numpy(), rtol=1e-12, atol=1e-15)
