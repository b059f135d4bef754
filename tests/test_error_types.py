"""Bad arguments raise the exception type PyTorch raises (tracejit/errors.py): an
out-of-range argument value is an `ArgumentError`, both a RuntimeError (PyTorch's type)
and a ValueError, and its message names the op and the culprit."""
import warnings

import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.errors import ArgumentError

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _f(m):
    return TF if m is torch else F


CASES = {   # name: (call(module), a word the message must hold)
    "conv2d_stride": (lambda m: _f(m).conv2d(m.ones(1, 2, 4, 4), m.ones(2, 2, 3, 3), stride=0), "stride"),
    "conv1d_padding": (lambda m: _f(m).conv1d(m.ones(1, 2, 4), m.ones(2, 2, 3), padding=-1), "padding"),
    "max_pool2d_kernel": (lambda m: _f(m).max_pool2d(m.ones(1, 2, 4, 4), 0), "kernel_size"),
    "avg_pool2d_padding": (lambda m: _f(m).avg_pool2d(m.ones(1, 2, 4, 4), 2, 1, 2), "padding"),
    "max_pool1d_kernel": (lambda m: _f(m).max_pool1d(m.ones(1, 2, 4), 0), "kernel_size"),
    "avg_pool1d_padding": (lambda m: _f(m).avg_pool1d(m.ones(1, 2, 4), 2, 1, 2), "padding"),
    "adaptive_avg_pool2d": (lambda m: _f(m).adaptive_avg_pool2d(m.ones(1, 2, 4, 4), -1), "output_size"),
    "pad_length": (lambda m: _f(m).pad(m.ones(1, 2, 4, 4), (1,)), "padding"),
    "group_norm_groups": (lambda m: _f(m).group_norm(m.ones(1, 2, 4, 4), 3), "group_norm"),
    "unfold_kernel": (lambda m: _f(m).unfold(m.ones(1, 2, 4, 4), 0), "kernel_size"),
    "gelu_approximate": (lambda m: _f(m).gelu(m.ones(3), approximate="foo"), "approximate"),
    "softshrink_lambda": (lambda m: _f(m).softshrink(m.ones(3), -1.0), "lambda"),
    "diagonal_dims": (lambda m: m.ones(3, 4).diagonal(0, 0, 0), "dim1"),
    "unfold_step": (lambda m: m.ones(3, 4).unfold(0, 2, 0), "step"),
    "repeat_interleave": (lambda m: m.ones(3, 4).repeat_interleave(m.tensor([1, 2]), 0), "repeats"),
    "rot90_dims": (lambda m: m.ones(3, 4).rot90(1, (0, 0)), "dims"),
    "arange_step": (lambda m: m.arange(0, 5, 0), "step"),
    "randint_bounds": (lambda m: m.randint(5, 2, (3,)), "high"),
    "multinomial_samples": (lambda m: m.multinomial(m.ones(3), 5), "samples"),
    "normal_std": (lambda m: m.normal(0.0, -1.0, (3,)), "std"),
    "clamp_bounds": (lambda m: m.ones(3).clamp(), "min"),
    "bincount_negative": (lambda m: m.tensor([-1]).bincount(), "non-negative"),
    "quantile_q": (lambda m: m.ones(3).quantile(1.5), "q"),
    "einsum_label": (lambda m: m.einsum("ij->ijk", m.ones(3, 4)), "'k'"),
    "norm_p": (lambda m: m.ones(3).norm(p="foo"), "'foo'"),
    "masked_scatter_source": (lambda m: m.ones(3, 4).masked_scatter(m.ones(3, 4, dtype=m.bool), m.ones(2)),
                              "source"),
    "device_type": (lambda m: m.ones(3).to("foo"), "'foo'"),
    "narrow_length": (lambda m: m.ones(3, 4).narrow(0, 2, 5), "length"),
    "kthvalue_k": (lambda m: m.ones(3, 4).kthvalue(9), "k (9)"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_argument_raises_pytorchs_exception_type(name):
    call, word = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as theirs:
            call(torch)
        with pytest.raises(Exception) as ours:
            call(tj)
    assert isinstance(ours.value, theirs.type), (type(ours.value).__mro__, theirs.type)
    assert word in str(ours.value), str(ours.value)


def test_argument_error_is_both_runtime_and_value_error():
    with pytest.raises(ArgumentError) as e:
        F.conv2d(tj.ones(1, 2, 4, 4), tj.ones(2, 2, 3, 3), stride=0)
    assert isinstance(e.value, RuntimeError) and isinstance(e.value, ValueError)
    assert str(e.value) == "conv2d: stride must be positive, got 0"


@pytest.mark.parametrize("form", ["a // 0", "a % b", "tj.fmod(a, 0)", "tj.div(a, b, rounding_mode='trunc')"])
def test_integer_division_by_zero_is_a_runtime_error_as_torch_and_a_zero_division_error(form):
    with pytest.raises(RuntimeError):
        eval(form.replace("tj.", "torch."), {"torch": torch, "a": torch.tensor([1, 2]), "b": torch.tensor([0, 1])})
    for f in (lambda a, b: eval(form, {"tj": tj, "a": a, "b": b}), tj.compile(lambda a, b: eval(form, {"tj": tj, "a": a, "b": b}))):
        with pytest.raises(RuntimeError, match="division by zero") as info:
            f(tj.tensor([1, 2]), tj.tensor([0, 1]))
        assert isinstance(info.value, ZeroDivisionError)
