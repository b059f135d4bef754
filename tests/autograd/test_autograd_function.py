"""Function.apply's node (autograd/function.py): its edges, output numbers and gradients
against PyTorch's, for leaf and non-leaf inputs, a non-tensor argument, an integer tensor,
an output that is an input, and grad mode off."""
import numpy as np
import torch

import tracejit as tj


def _function(m):
    class Mix(m.autograd.Function):
        @staticmethod
        def forward(ctx, a, scale, b, idx):
            ctx.save_for_backward(a, b)
            ctx.scale = scale
            return a * b * scale, b, idx + 1

        @staticmethod
        def backward(ctx, g0, g1, g2):
            a, b = ctx.saved_tensors
            return g0 * b * ctx.scale, None, g0 * a * ctx.scale + g1, None
    return Mix


def _run(m):
    rng = np.random.default_rng(3)
    a = m.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    w = m.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    b = w * 2.0
    idx = m.tensor(np.arange(4))
    y, b_out, i_out = _function(m).apply(a, 1.5, b, idx)
    node = y.grad_fn
    edges = [(None if n is None else type(n).__name__, nr) for n, nr in node.next_functions]
    info = (edges, y.requires_grad, b_out.requires_grad, i_out.requires_grad, b_out is not b,
            b_out.grad_fn is node)
    (y.sum() + (b_out * b_out).sum()).backward()
    return info, a.grad.numpy(), w.grad.numpy()


def test_node_and_gradients_match_torch():
    (info, ga, gw), (tinfo, tga, tgw) = _run(tj), _run(torch)
    edges, *flags = info
    tedges, *tflags = tinfo
    # an edge per argument (PyTorch's skip the non-tensor one: the tensors' edges agree)
    assert [nr for _, nr in edges] == [0, 0, 0, 0]
    assert [n is None for n, _ in edges] == [False, True, False, True]
    assert [n is None for n, _ in tedges] == [False, False, True]
    assert edges[0][0] == tedges[0][0] == "AccumulateGrad" and edges[2][0] != "AccumulateGrad"
    assert flags == tflags == [True, True, False, True, True]
    np.testing.assert_allclose(ga, tga, rtol=1e-12)
    np.testing.assert_allclose(gw, tgw, rtol=1e-12)


def test_second_output_number_and_no_grad():
    a = tj.tensor([1.0, 2.0], requires_grad=True)
    _, b_out, _ = _function(tj).apply(a, 2.0, a * 1.0, tj.tensor([0]))
    assert b_out._output_nr == 1
    with tj.no_grad():
        y, *_ = _function(tj).apply(a, 2.0, a, tj.tensor([0]))
    assert y.grad_fn is None and not y.requires_grad
