"""Optimizer's shared options: PyTorch's implementation choices (foreach, capturable,
differentiable) are accepted by every optimizer, kept in its groups, checked, and change no
numbers."""
import numpy as np
import pytest

import tracejit as tj


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adadelta", "Adagrad", "Adamax",
                                  "NAdam", "RAdam", "ASGD", "Rprop"])
def test_implementation_options_are_accepted_as_pytorch_keeps_them(name):
    p = tj.nn.Parameter(tj.ones(3))
    opt = getattr(tj.optim, name)([p], lr=0.1, foreach=True)
    assert opt.param_groups[0]["foreach"] is True
    assert opt.param_groups[0]["differentiable"] is False
    with pytest.raises(NotImplementedError, match=f"{name}: differentiable=True"):
        getattr(tj.optim, name)([p], lr=0.1, differentiable=True)
    with pytest.raises(TypeError, match="foreach"):
        getattr(tj.optim, name)([p], lr=0.1, foreach="yes")


def test_foreach_gives_the_same_steps_as_pytorch():
    torch = pytest.importorskip("torch")
    w = np.linspace(-1, 1, 6)
    out = []
    for lib in (tj, torch):
        p = lib.nn.Parameter(lib.tensor(w))
        opt = lib.optim.RMSprop([p], lr=0.01, momentum=0.9, weight_decay=1e-3, foreach=True)
        for _ in range(3):
            opt.zero_grad()
            (p * p * p).sum().backward()
            opt.step()
        out.append(p.detach().numpy())
    np.testing.assert_allclose(out[0], out[1], rtol=1e-12)


def _steps(compiled: bool, body) -> list:
    p = tj.nn.Parameter(tj.tensor([1.0, 2.0]))
    opt = tj.optim.SGD([p], lr=0.1, momentum=0.9)
    fn = tj.compile(lambda: body(p, opt)) if compiled else (lambda: body(p, opt))
    seen = []
    for _ in range(4):
        (p * p).sum().backward()
        fn()
        seen.append((p.detach().numpy().tolist(), None if p.grad is None else p.grad.numpy().tolist()))
    return seen


def _step(p, opt):
    opt.step()


def _zero(p, opt):
    opt.step()
    opt.zero_grad()


def _zero_in_place(p, opt):
    opt.zero_grad(set_to_none=False)


def _clip(p, opt):
    tj.nn.utils.clip_grad_value_([p], 0.5)
    opt.step()


@pytest.mark.parametrize("body", [_step, _zero, _zero_in_place, _clip])
def test_a_compiled_step_or_zero_grad_acts_on_every_call(body):
    # They change parameters, state and gradients outside the graph: a replay of the
    # capture would skip them, so the compiled function runs them eagerly.
    with pytest.warns(RuntimeWarning, match="outside the graph"):
        got = _steps(True, body)
    assert got == _steps(False, body)
