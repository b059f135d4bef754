"""Differential fuzzing of ``requires_grad`` and ``is_leaf`` as code inside a compiled function sees it,
against PyTorch's eager answer: values computed from arguments and parameters that
require grad, through detach, ``no_grad`` blocks, integer casts, comparisons and in-place
writes of a grad-requiring value into a plain tensor (user code branches on it)."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

STEPS = [
    ("mul", lambda lib, a, b: a * b), ("add", lambda lib, a, b: a + 1), ("detach", lambda lib, a, b: a.detach()),
    ("no_grad", lambda lib, a, b: _no_grad(lib, lambda: a * b)), ("int", lambda lib, a, b: a.long().float()),
    ("cmp", lambda lib, a, b: (a > b).float()), ("copy_into", lambda lib, a, b: lib.zeros(3).copy_(a)),
    ("add_into", lambda lib, a, b: lib.zeros(3).add_(b)), ("where", lambda lib, a, b: lib.where(a > 0, a, b)),
    ("view", lambda lib, a, b: a.view(3)[1:]), ("data", lambda lib, a, b: a.data * 2),
    ("clone", lambda lib, a, b: a.clone()),
]


def _no_grad(lib, f):
    with lib.no_grad():
        return f()


def _body(lib, steps):
    def f(x, y):
        vals, seen = [x, y], []
        for name, i, j in steps:
            v = dict(STEPS)[name](lib, vals[i % len(vals)], vals[j % len(vals)])
            if v.shape != (3,):
                v = lib.cat([v, v.new_zeros(3 - v.shape[0])])
            seen += [v.requires_grad, v.is_leaf]
            vals.append(v * 2 if v.requires_grad else v - 1)   # (a branch on it)
        return vals[-1], tj.tensor(seen) if lib is tj else torch.tensor(seen)
    return f


@pytest.mark.parametrize("block", range(2))
def test_requires_grad_inside_a_compiled_function_is_eagers(block):
    for seed in range(block * 25, block * 25 + 25):
        r = np.random.default_rng(seed)
        steps = [(STEPS[int(r.integers(len(STEPS)))][0], int(r.integers(8)), int(r.integers(8)))
                 for _ in range(int(r.integers(2, 7)))]
        grads = (bool(r.integers(2)), bool(r.integers(2)))

        def run(lib, compiled):
            x = lib.tensor([1.0, -2.0, 3.0], requires_grad=grads[0])
            y = lib.tensor([0.5, 4.0, -1.0], requires_grad=grads[1])
            f = _body(lib, steps)
            out, seen = (tj.compile(f) if compiled else f)(x, y)
            return out.detach().numpy(), seen.numpy(), out.requires_grad
        want = run(torch, False)
        for compiled in (False, True):
            got = run(tj, compiled)
            what = f"seed {seed} {steps} grads={grads} compiled={compiled}"
            np.testing.assert_array_equal(got[1], want[1], err_msg=what)
            np.testing.assert_allclose(got[0], want[0], err_msg=what)
            assert got[2] == want[2], what


@pytest.mark.parametrize("outer", ["no_grad", "inference_mode"])
def test_enable_grad_inside_a_function_compiled_under_no_grad_records_as_torch(outer):
    def f(lib, x):
        with lib.enable_grad():
            a = x * x
        return a, a * 2
    got = {}
    for lib, fn in ((torch, lambda x: f(torch, x)), (tj, tj.compile(lambda x: f(tj, x)))):
        x = lib.tensor([1.0, -2.0], requires_grad=True)
        with getattr(lib, outer)():
            a, b = fn(x)
        got[lib] = (a.requires_grad, b.requires_grad)
        if a.requires_grad:
            a.sum().backward()
            got[lib] += (x.grad.tolist(),)
    assert got[tj] == got[torch]


def test_clone_of_an_argument_that_requires_grad_is_not_a_leaf_as_torch():
    def f(x):
        y = x.clone()
        return y * 2 if not y.is_leaf else y * 3, y.is_leaf
    want = f(torch.tensor([1.0, -2.0], requires_grad=True))
    x = tj.tensor([1.0, -2.0], requires_grad=True)
    got = tj.compile(f)(x)
    assert got[1] == want[1] is False
    np.testing.assert_array_equal(got[0].detach().numpy(), want[0].detach().numpy())


def test_detach_in_place_stops_the_gradient_inside_a_compiled_function():
    def f(x):
        y = x * 2
        y.detach_()
        return y * x, y.requires_grad, y.is_leaf
    got = []
    for lib, fn in ((torch, f), (tj, tj.compile(f))):
        x = lib.tensor([1.0, -2.0, 3.0], requires_grad=True)
        out, rg, leaf = fn(x)
        out.sum().backward()
        got.append((out.tolist(), x.grad.tolist(), rg, leaf))
    assert got[1] == got[0]


def test_requires_grad_false_on_a_computed_value_inside_a_compiled_function_raises():
    def f(x):
        y = x * 2
        y.requires_grad_(False)
        return y
    with pytest.raises(RuntimeError, match="leaf"):
        f(torch.tensor([1.0], requires_grad=True))
    with pytest.raises(RuntimeError, match="leaf"):
        tj.compile(f, fullgraph=True)(tj.tensor([1.0], requires_grad=True))


def test_is_leaf_asked_under_no_grad_inside_a_compiled_function_as_torch():
    def make(lib):
        def f(x):
            y = x * 2
            with lib.no_grad():
                asked, z = y.is_leaf, x * 3
                inner = z.is_leaf
            return y * 1, asked, inner, z.is_leaf
        return f
    want = make(torch)(torch.ones(2, requires_grad=True))[1:]
    assert tj.compile(make(tj))(tj.ones(2, requires_grad=True))[1:] == want == (False, True, True)
