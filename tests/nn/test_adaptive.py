"""AdaptiveLogSoftmaxWithLoss against PyTorch with the same weights: output, loss,
gradients, log_prob, predict, unbatched input and the errors."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import IndexRangeError

torch = pytest.importorskip("torch", reason="compares with PyTorch")


def _pair(**kw):
    ref = torch.nn.AdaptiveLogSoftmaxWithLoss(8, 20, [5, 12], div_value=2.0, **kw).double()
    mine = tj.nn.AdaptiveLogSoftmaxWithLoss(8, 20, [5, 12], div_value=2.0, dtype=tj.float64, **kw)
    assert sorted(mine.state_dict()) == sorted(ref.state_dict())
    mine.load_state_dict({k: tj.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    return ref, mine


@pytest.mark.parametrize("head_bias", [False, True])
def test_output_loss_and_gradients_equal_pytorch(head_bias):
    ref, mine = _pair(head_bias=head_bias)
    x = np.random.default_rng(0).standard_normal((7, 8))
    target = [0, 4, 6, 13, 19, 11, 5]
    rx, mx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    ro, rl = ref(rx, torch.tensor(target))
    mo, ml = mine(mx, tj.tensor(target))
    np.testing.assert_allclose(mo.detach().numpy(), ro.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(float(ml), float(rl.detach()), rtol=1e-12)
    rl.backward()
    ml.backward()
    np.testing.assert_allclose(mx.grad.numpy(), rx.grad.numpy(), rtol=1e-10, atol=1e-14)
    rp, mp = dict(ref.named_parameters()), dict(mine.named_parameters())
    for name in rp:
        np.testing.assert_allclose(mp[name].grad.numpy(), rp[name].grad.numpy(), rtol=1e-10, atol=1e-14)


def test_log_prob_predict_and_unbatched():
    ref, mine = _pair()
    x = np.random.default_rng(1).standard_normal((4, 8))
    np.testing.assert_allclose(mine.log_prob(tj.tensor(x)).detach().numpy(),
                               ref.log_prob(torch.tensor(x)).detach().numpy(), rtol=1e-12)
    assert mine.predict(tj.tensor(x)).tolist() == ref.predict(torch.tensor(x)).tolist()
    mo, _ = mine(tj.tensor(x[0]), tj.tensor(13))
    ro, _ = ref(torch.tensor(x[0]), torch.tensor(13))
    assert tuple(mo.shape) == () and abs(float(mo) - float(ro)) < 1e-12


def test_bad_cutoffs_and_targets_are_refused():
    with pytest.raises(ValueError, match="cutoffs should be a sequence of unique"):
        tj.nn.AdaptiveLogSoftmaxWithLoss(8, 20, [12, 5])
    with pytest.raises(ValueError, match="cutoffs"):
        tj.nn.AdaptiveLogSoftmaxWithLoss(8, 20, [5, 20])
    m = tj.nn.AdaptiveLogSoftmaxWithLoss(8, 20, [5, 12])
    with pytest.raises(IndexRangeError, match=r"target values should be in \[0, 19\]"):
        m(tj.randn(2, 8), tj.tensor([3, 20]))
    f = tj.compile(m, fullgraph=True)
    f(tj.randn(2, 8), tj.tensor([3, 19]))
    for bad in (20, -1):   # compiled, the same error class (a RuntimeError, as PyTorch's)
        with pytest.raises(IndexRangeError, match=f"index {bad} is out of range"):
            f(tj.randn(2, 8), tj.tensor([3, bad]))
    with pytest.raises(RuntimeError, match="same size in the batch"):
        m(tj.randn(3, 8), tj.tensor([3, 2]))


def test_compiled_is_one_graph_equal_to_pytorch():
    """Captured, the targets' values are unknown: every tail runs on every row and each row
    keeps its cluster's entry (no eager fallback); outputs and gradients stay PyTorch's."""
    ref, mine = _pair()
    f = tj.compile(mine, fullgraph=True)
    rng = np.random.default_rng(1)
    for target in ([0, 4, 6, 13, 19, 11, 5], [1, 2, 3, 0, 4, 2, 2], [19, 18, 12, 5, 6, 7, 11]):
        x = rng.standard_normal((7, 8))
        rx, mx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
        ro, rl = ref(rx, torch.tensor(target))
        mo, ml = f(mx, tj.tensor(target))
        np.testing.assert_allclose(mo.detach().numpy(), ro.detach().numpy(), rtol=1e-12)
        rl.backward()
        ml.backward()
        np.testing.assert_allclose(mx.grad.numpy(), rx.grad.numpy(), rtol=1e-10, atol=1e-14)
    st = f.cache_stats()
    assert st["compiles"] == 1 and st["eager_fallbacks"] == 0
