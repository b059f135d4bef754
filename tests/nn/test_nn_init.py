"""nn.init: PyTorch's gains and fan formulas, in-place fills, reproducibility, errors."""
import math

import numpy as np
import pytest

import tracejit as tj
from tracejit import nn
from tracejit.nn import init


def test_calculate_gain_table():
    assert init.calculate_gain("linear") == 1.0
    assert init.calculate_gain("conv2d") == 1.0
    assert init.calculate_gain("sigmoid") == 1.0
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert init.calculate_gain("leaky_relu") == pytest.approx(math.sqrt(2 / (1 + 0.01 ** 2)))
    assert init.calculate_gain("leaky_relu", math.sqrt(5)) == pytest.approx(math.sqrt(1 / 3))
    assert init.calculate_gain("selu") == 0.75
    with pytest.raises(ValueError, match="unsupported nonlinearity 'swish'"):
        init.calculate_gain("swish")


def test_fills_are_in_place_and_return_the_tensor():
    p = nn.Parameter(tj.empty(3, 4))
    data = p._data
    for fn, args in [(init.zeros_, ()), (init.ones_, ()), (init.constant_, (2.5,)),
                     (init.uniform_, (-1, 1)), (init.normal_, (0, 1)), (init.xavier_uniform_, ()),
                     (init.kaiming_normal_, ()), (init.trunc_normal_, ()), (init.eye_, ())]:
        assert fn(p, *args) is p, fn.__name__
        assert p._data is data and p.grad_fn is None and p.requires_grad
    init.constant_(p, 2.5)
    assert p.detach().numpy().tolist() == [[2.5] * 4] * 3
    init.eye_(p)
    np.testing.assert_array_equal(p.detach().numpy(), np.eye(3, 4))


def test_distributions_have_pytorch_bounds_and_stds():
    tj.manual_seed(0)
    t = tj.empty(400, 300)  # fan_in 300, fan_out 400
    init.xavier_uniform_(t, gain=2.0)
    a = 2.0 * math.sqrt(6 / 700)
    v = t.numpy()
    assert np.abs(v).max() <= a and np.abs(v).max() > 0.99 * a
    init.xavier_normal_(t)
    assert t.numpy().std() == pytest.approx(math.sqrt(2 / 700), rel=0.02)
    init.kaiming_uniform_(t, nonlinearity="relu")
    bound = math.sqrt(2) * math.sqrt(3 / 300)
    assert np.abs(t.numpy()).max() <= bound and np.abs(t.numpy()).max() > 0.99 * bound
    init.kaiming_normal_(t, mode="fan_out", nonlinearity="relu")
    assert t.numpy().std() == pytest.approx(math.sqrt(2 / 400), rel=0.02)
    init.normal_(t, 3.0, 0.5)
    assert t.numpy().mean() == pytest.approx(3.0, abs=0.01)
    init.trunc_normal_(t, mean=0.0, std=1.0, a=-0.5, b=1.0)
    assert t.numpy().min() >= -0.5 and t.numpy().max() <= 1.0
    # conv weights: fan_in = in_channels * receptive field
    w = tj.empty(16, 8, 3, 3)
    init.kaiming_uniform_(w, a=math.sqrt(5))
    assert np.abs(w.numpy()).max() <= 1 / math.sqrt(72)


def test_init_reproducible_and_errors():
    tj.manual_seed(7)
    a = init.trunc_normal_(tj.empty(50)).numpy().copy()
    tj.manual_seed(7)
    np.testing.assert_array_equal(a, init.trunc_normal_(tj.empty(50)).numpy())
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.xavier_uniform_(tj.empty(5))
    with pytest.raises(ValueError, match="mode 'fan_avg'"):
        init.kaiming_uniform_(tj.empty(3, 3), mode="fan_avg")
    with pytest.raises(TypeError, match="expected a Tensor"):
        init.zeros_(np.zeros(3))
    with pytest.raises(ValueError, match="a < b"):
        init.trunc_normal_(tj.empty(3), a=1.0, b=-1.0)
    with pytest.raises(ValueError, match="too little"):
        init.trunc_normal_(tj.empty(3), a=50.0, b=60.0)


@pytest.mark.parametrize("name", ["uniform_", "normal_", "xavier_uniform_", "xavier_normal_",
                                  "kaiming_uniform_", "kaiming_normal_", "trunc_normal_"])
def test_init_draws_from_the_generator_given(name):
    fill = getattr(tj.nn.init, name)
    first = fill(tj.empty(4, 3), generator=tj.Generator().manual_seed(3)).tolist()
    tj.manual_seed(0)
    tj.rand(5)                                   # the global stream moves; the generator's does not
    assert fill(tj.empty(4, 3), generator=tj.Generator().manual_seed(3)).tolist() == first
    assert fill(tj.empty(4, 3)).tolist() != first
