"""binomial (ops/random_more.py) takes what PyTorch's sampler takes: fractional counts
(whole trials), counts or probabilities <= 0 (no successes), probabilities >= 1 (the count),
and above a probability of 0.5 the count less its failures."""
import numpy as np
import pytest

import tracejit as tj


def test_binomial_edges_match_pytorch():
    torch = pytest.importorskip("torch")
    count = [2.7, 2.7, -1.5, 2.7, 0.4, 3.0]
    prob = [1.0, 1.5, 0.5, -0.5, 1.0, 0.0]
    want = torch.binomial(torch.tensor(count), torch.tensor(prob)).numpy()
    got = tj.binomial(tj.tensor(count), tj.tensor(prob)).numpy()
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="floating.point"):
        torch.binomial(torch.tensor([3]), torch.tensor([0.5]))
    with pytest.raises(ValueError, match="floating.point"):
        tj.binomial(tj.tensor([3]), tj.tensor([0.5]))


def test_binomial_of_a_fractional_count_draws_its_whole_trials():
    tj.manual_seed(0)
    c = tj.tensor([0.5, 2.7, 10.2] * 2000)
    r = tj.binomial(c, tj.full_like(c, 0.5)).numpy().reshape(2000, 3)
    assert r.max(0).tolist() == [0.0, 2.0, 10.0]
    np.testing.assert_allclose(r.mean(0), [0.0, 1.0, 5.0], atol=0.1)


def test_binomial_above_one_half_keeps_a_fractional_count_as_pytorch():
    torch = pytest.importorskip("torch")
    count, prob = [0.7, 0.3, 0.9, 0.2], [0.9, 0.6, 0.4, 0.51]
    want = torch.binomial(torch.tensor(count), torch.tensor(prob)).numpy()
    got = tj.binomial(tj.tensor(count), tj.tensor(prob)).numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, [0.7, 0.3, 0.0, 0.2])
    tj.manual_seed(0)
    c = tj.full((6000,), 10.0)
    r = tj.binomial(c, tj.full_like(c, 0.8)).numpy()
    np.testing.assert_allclose([r.mean(), r.var()], [8.0, 1.6], atol=0.1)
