"""Common user mistakes: each raises on every path (eager, the interpreter, compiled) with
the exception type PyTorch raises (or a subclass of it), a message that names the culprit,
and no state changed.
"""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import DTypeError, IndexRangeError, ShapeError, ValueRangeError

F = tj.nn.functional


def X(*shape, dtype=np.float32):
    return tj.tensor(np.random.default_rng(1).standard_normal(shape).astype(dtype))


def refused(fn, *args, exc, match):
    """fn(*args) raises `exc` matching `match` eagerly, on the interpreter and compiled,
    also after the compiled function served other shapes (its dims symbolic)."""
    for run in (fn, tj.trace(fn, compiler="interpret"), tj.trace(fn), tj.compile(fn)):
        with pytest.raises(exc, match=match):
            run(*args)


def test_bce_refuses_probabilities_outside_the_unit_interval_on_every_path():
    # Compiled, the eager check on the data was skipped: the loss came back nan.
    t = X(4).sigmoid()
    for bad, name in ((X(4), "input"), (tj.tensor([0.5, 1.5, 0.2, 0.1]), "input")):
        refused(lambda x, t: F.binary_cross_entropy(x, t), bad, t, exc=ValueRangeError,
                match=rf"binary_cross_entropy: all elements of {name} should be between 0 and 1, got values in")
    refused(lambda x, t: F.binary_cross_entropy(x, t), t, tj.tensor([0.0, 1.0, 2.0, 1.0]),
            exc=ValueRangeError, match=r"elements of target should be between 0 and 1.*\[0.0, 2.0\]")
    refused(lambda x, t: F.binary_cross_entropy(x, t), tj.tensor([0.5, float("nan"), 0.2, 0.1]), t,
            exc=ValueRangeError, match="between 0 and 1")
    assert issubclass(ValueRangeError, RuntimeError) and issubclass(ValueRangeError, ValueError)
    f = tj.compile(lambda x, t: F.binary_cross_entropy(x, t))
    for n in (3, 5, 7):   # the check also runs on the symbolic-batch entry
        f(X(n).sigmoid(), X(n).sigmoid())
    with pytest.raises(ValueRangeError, match="between 0 and 1"):
        f(X(7), X(7).sigmoid())


def test_bce_check_passes_values_and_gradients_through():
    torch = pytest.importorskip("torch")
    x0, t0 = np.array([0.2, 0.7, 0.9], np.float32), np.array([0.0, 1.0, 1.0], np.float32)
    xt = torch.tensor(x0, requires_grad=True)
    want = torch.nn.functional.binary_cross_entropy(xt, torch.tensor(t0))
    want.backward()
    for run in (lambda x, t: F.binary_cross_entropy(x, t), tj.compile(lambda x, t: F.binary_cross_entropy(x, t))):
        x = tj.tensor(x0).requires_grad_()
        got = run(x, tj.tensor(t0))
        got.backward()
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-6)
        np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5)


def test_bmm_batch_mismatch_is_named_alike_compiled():
    # Compiled, bmm's check was skipped and matmul's rule spoke of shapes (2,) and (3,).
    refused(lambda a, b: tj.bmm(a, b), X(2, 3, 4), X(3, 4, 5), exc=ShapeError,
            match=r"bmm: batch sizes differ: \(2, 3, 4\) and \(3, 4, 5\)")
    refused(lambda a, b: tj.mm(a, b), X(2, 3), X(4, 5), exc=ShapeError,
            match=r"mm: shapes \(2, 3\) and \(4, 5\) cannot be multiplied \(3 != 4\)")


@pytest.mark.parametrize("layer", ["Linear", "Conv2d", "Embedding", "LayerNorm", "LSTM", "Dropout", "Flatten"])
@pytest.mark.parametrize("compiled", [False, True])
def test_a_layer_given_a_list_or_an_array_says_it_wants_a_tensor(layer, compiled):
    make = {"Linear": lambda: tj.nn.Linear(3, 2), "Conv2d": lambda: tj.nn.Conv2d(3, 2, 1),
            "Embedding": lambda: tj.nn.Embedding(4, 2), "LayerNorm": lambda: tj.nn.LayerNorm(3),
            "LSTM": lambda: tj.nn.LSTM(3, 2), "Dropout": lambda: tj.nn.Dropout(0.5),
            "Flatten": lambda: tj.nn.Flatten()}[layer]
    m = make()
    state = {k: v.numpy().copy() for k, v in m.state_dict().items()}
    run = tj.compile(m) if compiled else m
    # (it was "'list' object has no attribute 'ndim'", and for an array "input is float32
    # but weight is float32")
    with pytest.raises(TypeError, match=rf"(?i){layer}: expected the input to be a Tensor, got list; "
                                        r"tracejit.tensor"):
        run([[1.0, 2.0, 3.0]])
    with pytest.raises(TypeError, match=rf"(?i){layer}: expected the input to be a Tensor, got ndarray; "
                                        r"tracejit.from_numpy"):
        run(np.ones((2, 3), np.float32))
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), state[k])


def test_the_innermost_layer_is_named_and_user_errors_are_kept():
    seq = tj.nn.Sequential(tj.nn.Linear(3, 2), tj.nn.ReLU())
    with pytest.raises(TypeError, match=r"^linear: expected the input to be a Tensor, got ndarray"):
        seq(np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match=r"^linear: expected the input to be a Tensor, got list"):
        F.linear([[1.0, 2.0, 3.0]], tj.ones(2, 3))

    class Mine(tj.nn.Module):   # a user's forward may take lists: its own error stands
        def forward(self, xs):
            raise ValueError("mine")
    with pytest.raises(ValueError, match="^mine$"):
        Mine()([1.0, 2.0])
    assert tj.cat([tj.ones(2), tj.ones(1)]).shape == (3,)   # a list of tensors is an input
    with pytest.raises(ValueError, match="non-empty"):
        tj.cat([])


@pytest.mark.parametrize("case", [
    # (what, call, the type PyTorch raises, our type, message)
    ("item of many", lambda: X(2, 3).item(), RuntimeError, ShapeError, "6 elements cannot be converted"),
    ("float of many", lambda: float(X(2, 3)), ValueError, ShapeError, "6 elements cannot be converted"),
    ("gather out of range", lambda: tj.gather(X(3, 2), 1, tj.tensor([[0], [2], [1]])), RuntimeError,
     IndexRangeError, "gather: index 2 is out of range for dim 1 of size 2"),
    ("embedding out of range", lambda: tj.nn.Embedding(10, 3)(tj.tensor([1, 10])), IndexError,
     IndexRangeError, "embedding: index 10 is out of range for size 10"),
    ("target out of range", lambda: F.cross_entropy(X(4, 3), tj.tensor([0, 1, 5, 1])), IndexError,
     IndexRangeError, "nll_loss: index 5 is out of range for size 3"),
    ("embedding of floats", lambda: tj.nn.Embedding(10, 3)(tj.tensor([1.0, 2.0])), RuntimeError,
     DTypeError, "embedding: indices must be an integer tensor, got float32"),
    ("float class targets", lambda: F.cross_entropy(X(4, 3), tj.tensor([0.0, 1.0, 2.0, 1.0])),
     RuntimeError, DTypeError, r"target of shape \(4,\) holds class indices but has dtype float32"),
    ("one_hot of floats", lambda: F.one_hot(tj.tensor([0.0, 1.0]), 3), RuntimeError, DTypeError,
     "one_hot: expected an integer tensor, got float32"),
    ("negative size", lambda: tj.zeros(2, -1), RuntimeError, ShapeError, r"negative dimension -1 in size \(2, -1\)"),
    ("permute of too many dims", lambda: X(2, 3).permute(0, 2, 1), RuntimeError, ShapeError,
     r"permute: the order \(0, 2, 1\) names 3 dims, but the tensor of shape \(2, 3\) has 2"),
], ids=lambda c: c[0])
def test_error_types_are_pytorchs(case):
    _, call, torch_type, ours, message = case
    with pytest.raises(ours, match=message) as info:
        call()
    assert isinstance(info.value, torch_type)


class _Block(tj.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = tj.nn.Linear(8, 16)
        self.fc2 = tj.nn.Linear(8, 4)   # (a mistake: fc1 gives 16 features)

    def forward(self, x):
        return self.fc2(tj.relu(self.fc1(x)))


class _Net(tj.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = tj.nn.Sequential(tj.nn.Linear(8, 8), _Block())

    def forward(self, x):
        return self.enc(x)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_layer_error_names_the_submodule_path(compiled):
    net = _Net()
    run = tj.compile(net) if compiled else net
    for _ in range(2):   # (the same note on a second failing call)
        with pytest.raises(ShapeError, match=r"linear: input of shape \(2, 16\) does not match weight of shape "
                                             r"\(4, 8\)") as info:
            run(X(2, 8))
        assert info.value.__notes__ == ["raised in submodule enc.1.fc2 (Linear) of _Net"]
    seq = tj.compile(tj.nn.Sequential(tj.nn.Linear(3, 4), tj.nn.ReLU(), tj.nn.Linear(5, 1)))
    with pytest.raises(ShapeError) as info:
        seq(X(2, 3))
    assert info.value.__notes__ == ["raised in submodule 2 (Linear) of Sequential"]
    with pytest.raises(ShapeError) as info:   # one module: the message names the op already
        tj.nn.Linear(3, 2)(X(2, 4))
    assert not getattr(info.value, "__notes__", None)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_pytorch_tensor_given_to_an_op_or_a_layer_is_named_as_one(compiled):
    """A torch.Tensor passed by mistake (its class is also called Tensor): the error says it
    is PyTorch's and how to convert it, eagerly and compiled (it read "expected a Tensor or
    a number, got Tensor")."""
    torch = pytest.importorskip("torch")
    t = torch.ones(2, 3)
    lin = tj.nn.Linear(3, 2)
    calls = [lambda x: tj.ones(2, 3) * x, lambda x: x @ tj.ones(3, 2), lambda x: lin(x)]
    for fn in calls:
        run = tj.compile(lambda x, fn=fn: fn(x)) if compiled else fn
        with pytest.raises(TypeError, match=r"^(mul|matmul|linear): expected (a Tensor or a number|the input to "
                                            r"be a Tensor), got a PyTorch tensor \(torch.Tensor\); "
                                            r"tracejit.from_numpy\(t.numpy\(\)\)"):
            run(t)
