"""A custom autograd.Function inside a compiled function, against PyTorch: outputs marked
non-differentiable carry no gradient (and the backward gets zeros for them), with
``set_materialize_grads(False)`` the backward gets None for an output no gradient reached,
plain outputs are constants of the capture, and a tensor inside a list argument runs the
function eagerly (it raised)."""
from __future__ import annotations

import contextlib

import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _non_diff(m):
    class F(m.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            a, b = x * 2, x * 3
            ctx.mark_non_differentiable(b)
            return a, b

        @staticmethod
        def backward(ctx, g, gb):
            return g * 2 + gb * 5 + 1

    def f(x):
        a, b = F.apply(x)
        return a * 1, b * 1
    return f


def _unmaterialized(m):
    class F(m.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, a, b):
            return a * 2 if b is None else a * 2 + b + 7

    def f(x):
        a, _ = F.apply(x)
        return a * 1, a * 0
    return f


@pytest.mark.parametrize("make", [_non_diff, _unmaterialized])
def test_function_outputs_in_a_compiled_function_match_torch(make):
    got = []
    for m in (torch, tj):
        f = make(m)
        x = m.tensor([1.0, -2.0, 3.0], requires_grad=True)
        outs = (tj.compile(f, fullgraph=True) if m is tj else f)(x)
        flags = [o.requires_grad for o in outs]
        sum(o.sum() for o in outs if o.requires_grad).backward()
        got.append(([o.tolist() for o in outs], flags, x.grad.tolist()))
    assert got[1] == got[0]


def _plain_outputs(m):
    class F(m.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return "scaled", x * x, 3

        @staticmethod
        def backward(ctx, tag, g, count):
            (x,) = ctx.saved_tensors
            assert tag is None and count is None
            return g * 2 * x

    def f(x):
        tag, y, n = F.apply(x)
        return y * n + len(tag)
    return f


def test_function_with_plain_outputs_compiles_without_a_graph_break_as_torch():
    got = []
    for m in (torch, tj):
        f = _plain_outputs(m)
        x = m.tensor([1.0, -2.0, 3.0], requires_grad=True)
        y = (tj.compile(f, fullgraph=True) if m is tj else f)(x)
        (g,) = m.autograd.grad(y.sum(), x, create_graph=True)
        (g2,) = m.autograd.grad(g.sum(), x)
        got.append((y.tolist(), g.tolist(), g2.tolist()))
    assert got[1] == got[0]


def test_a_tensor_inside_a_list_argument_runs_eagerly_with_torchs_gradients():
    def make(m):
        class ListArg(m.autograd.Function):
            @staticmethod
            def forward(ctx, xs, y):
                return xs[0] * y

            @staticmethod
            def backward(ctx, g):
                return None, g * 2
        return lambda x, w: ListArg.apply([x], w)
    got = []
    for m in (torch, tj):
        x, w = m.tensor([1.0, 2.0], requires_grad=True), m.tensor([0.5, -1.0], requires_grad=True)
        f = make(m)
        if m is tj:
            f = tj.compile(f)
        with pytest.warns(RuntimeWarning, match="inside a list") if m is tj else contextlib.nullcontext():
            y = f(x, w)
        y.sum().backward()
        got.append((y.tolist(), x.grad, w.grad.tolist()))
    assert got[1] == got[0]


def test_needs_input_grad_in_a_compiled_function_is_eagers():
    def make(m, seen):
        class F(m.autograd.Function):
            @staticmethod
            def forward(ctx, x, y, k):
                seen.add(("forward", ctx.needs_input_grad))
                ctx.save_for_backward(x, y)
                return x * y * k

            @staticmethod
            def backward(ctx, g):
                seen.add(("backward", ctx.needs_input_grad))
                x, y = ctx.saved_tensors
                return g * y * 2, g * x * 3, None
        return lambda a, b: F.apply(a * 2, b.detach() + 1, 3.0) + F.apply(a, b, 1.0)
    got = []
    for m in (torch, tj):
        seen = set()
        f = make(m, seen)
        a, b = m.tensor([1.0, 2.0], requires_grad=True), m.tensor([3.0, 4.0])
        (tj.compile(f, fullgraph=True) if m is tj else f)(a, b).sum().backward()
        got.append((seen, a.grad.tolist()))
    assert got[1] == got[0]
