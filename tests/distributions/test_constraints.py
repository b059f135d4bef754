"""Constraint.holds (tracejit/distributions/constraints.py), argument validation's verdict:
on an eager CPU array it is one numpy pass, and it must say what ``check(value).all()``
says for every constraint, dtype, NaN, empty tensor and tensor bound, as PyTorch's."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.distributions import constraints as C

torch = pytest.importorskip("torch")

NUMBERS = [
    ("real", C.real, torch.distributions.constraints.real),
    ("positive", C.positive, torch.distributions.constraints.positive),
    ("nonnegative", C.nonnegative, torch.distributions.constraints.nonnegative),
    ("unit_interval", C.unit_interval, torch.distributions.constraints.unit_interval),
    ("half_open", C.half_open_interval(0.0, 1.0), torch.distributions.constraints.half_open_interval(0.0, 1.0)),
    ("integer_interval", C.integer_interval(0, 5), torch.distributions.constraints.integer_interval(0, 5)),
    ("nonnegative_integer", C.nonnegative_integer, torch.distributions.constraints.nonnegative_integer),
    ("boolean", C.boolean, torch.distributions.constraints.boolean),
    ("simplex", C.simplex, torch.distributions.constraints.simplex),
    ("real_vector", C.real_vector, torch.distributions.constraints.real_vector),
    ("greater_than", C.greater_than(-1.0), torch.distributions.constraints.greater_than(-1.0)),
]


def _values():
    rng = np.random.default_rng(0)
    yield np.array([0.25, 0.75], np.float32)
    yield np.array([0.0, 1.0, 0.0], np.float64)
    yield np.array([1.0, 0.5], np.float32)          # 1.0: the half-open interval's end
    yield rng.integers(0, 6, (3, 4))
    yield rng.integers(-1, 6, (3, 4)).astype(np.int32)
    yield np.array([2.0, 3.5, 1.0], np.float32)     # not whole
    yield np.array([0.2, np.nan], np.float32)
    yield np.array([[0.2, 0.8], [0.5, 0.5]], np.float32)
    yield np.array([[0.2, 0.7], [0.5, 0.5]], np.float32)   # a row not summing to 1
    yield np.array([True, False])
    yield np.zeros((0, 3), np.float32)
    yield np.array(0.5, np.float32)
    yield rng.uniform(-2, 2, (5, 4)).astype(np.float32)


@pytest.mark.parametrize("name,ours,theirs", NUMBERS, ids=[n for n, _, _ in NUMBERS])
def test_holds_says_what_check_all_and_pytorch_say(name, ours, theirs):
    for v in _values():
        if name in ("simplex", "real_vector") and v.ndim == 0:
            continue   # (PyTorch's needs an event dim)
        want = bool(ours.check(tj.tensor(v)).all())
        assert ours.holds(tj.tensor(v)) is want, (name, v)
        assert ours.holds(tj.tensor(v, requires_grad=v.dtype.kind == "f")) is want
        if v.size and (v.dtype.kind == "f" or name != "simplex"):   # (PyTorch: no empty events)
            assert want is bool(theirs.check(torch.tensor(v)).all()), (name, v)


def test_tensor_bounds_bf16_and_own_checks_take_check():
    lo, hi = tj.tensor([0.0, 10.0]), tj.tensor([1.0, 11.0])
    within = C.interval(lo, hi)
    assert within.holds(tj.tensor([0.5, 10.5]))             # elementwise bounds, broadcast
    assert not within.holds(tj.tensor([0.5, 0.5]))
    bf = tj.tensor([0.25, 2.0]).to(tj.bfloat16)
    assert C.unit_interval.holds(bf) is bool(C.unit_interval.check(bf).all()) is False

    class Even(type(C.nonnegative_integer)):                 # a check of its own
        def check(self, value):
            return value % 2 == 0
    assert not Even().holds(tj.tensor([1, 3]))
    assert Even().holds(tj.tensor([2, 4]))
    assert C.independent(C.unit_interval, 1).holds(tj.tensor([[0.1, 0.9]]))
    assert not C.independent(C.unit_interval, 1).holds(tj.tensor([[0.1, 1.9]]))


def test_validation_still_names_the_bad_argument():
    with pytest.raises(ValueError, match="Expected parameter probs"):
        tj.distributions.Categorical(probs=tj.tensor([[0.5, -0.5]]), validate_args=True)
    d = tj.distributions.Categorical(logits=tj.zeros(2, 3), validate_args=True)
    with pytest.raises(ValueError, match="Expected value argument"):
        d.log_prob(tj.tensor([0, 3]))
    np.testing.assert_allclose(d.log_prob(tj.tensor([0, 2])).numpy(), np.log([1 / 3, 1 / 3]), rtol=1e-6)
