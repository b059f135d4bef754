"""``max_pool2d(relu(x))`` captured as ``relu(max_pool2d(x))`` (jit/passes.py `_pooled_relu`,
and `_pooled_relu_record` for floating max-pooling's record + values pair, ops/pool_offsets.py):
the ReLU runs on the pooled value, forward and backward, with the same values and gradients."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.jit import passes
from tracejit.jit.interpreter import interpret
from inputs import captured_graph, op_names

_graph, _names = captured_graph, op_names


def _data(shape, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    x[0, 0, :2, :2] = -1.0          # a window with no positive value: zero gradient
    x[0, 1, :2, :2] = 0.0           # a window of ties at zero
    x[1, 0, 2:4, 2:4] = 0.5         # ties at a positive maximum: the first one takes it
    return x


def test_pool_of_a_relu_becomes_a_relu_of_the_pool():
    def f(x):
        a = F.max_pool2d(tj.relu(x), 2)            # relu used once: rewritten
        r = tj.relu(x * 2.0)
        b = F.max_pool2d(r, 2)                     # relu used twice: left alone
        return a, b, r

    x = tj.tensor(_data((2, 3, 6, 6)))
    g = _graph(f, x)
    opt = passes.dce(passes.simplify(g))
    names = _names(opt)
    assert names.count("relu") == 2 and names.count("max_pool2d_values") == 2, opt.text(with_locations=False)
    assert names.count("max_pool2d_with_offsets") == 2     # the relu's record is gone
    # the first output is now a relu of the pooled values of the graph input
    prod = {o: e for e in opt.eqns for o in e.outs}
    first = prod[opt.outputs[0]]
    assert first.prim.name == "relu" and prod[first.inputs[0]].prim.name == "max_pool2d_values"
    rec, src = prod[first.inputs[0]].inputs
    assert src is opt.inputs[0] and prod[rec].inputs[0] is opt.inputs[0]
    assert prod[opt.outputs[1]].prim.name == "max_pool2d_values"
    want = [t.numpy() for t in interpret(g, [x])]
    got = [t.numpy() for t in interpret(opt, [x])]
    for w, v in zip(want, got):
        np.testing.assert_array_equal(v, w)


def test_pool_primitive_of_a_relu_becomes_a_relu_of_the_pool():
    # the max_pool2d primitive (other dtypes, windows past the record's limit) gets the same
    from tracejit.ops import pooling_prim as P

    def f(x):
        return P.max_pool2d(tj.relu(x), (2, 2), (2, 2))

    x = tj.tensor(_data((2, 3, 6, 6)))
    g = _graph(f, x)
    opt = passes.dce(passes.simplify(g))
    prod = {o: e for e in opt.eqns for o in e.outs}
    first = prod[opt.outputs[0]]
    assert first.prim.name == "relu" and prod[first.inputs[0]].prim.name == "max_pool2d"
    assert prod[first.inputs[0]].inputs[0] is opt.inputs[0]
    np.testing.assert_array_equal(interpret(opt, [x])[0].numpy(), interpret(g, [x])[0].numpy())


@pytest.mark.parametrize("geometry", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                      dict(kernel_size=(2, 3), stride=(1, 2))])
def test_gradient_compiled_matches_eager(geometry):
    def loss(x, w):
        y = F.max_pool2d(tj.relu(x), **geometry)
        return (y * w).sum()

    x0 = _data((2, 3, 7, 8))
    xe = tj.tensor(x0, requires_grad=True)
    pooled = F.max_pool2d(tj.relu(tj.tensor(x0)), **geometry)
    w = tj.tensor(np.random.default_rng(2).standard_normal(tuple(pooled.shape)).astype(np.float32))
    loss(xe, w).backward()
    cf = tj.script(loss)
    for _ in range(2):
        xc = tj.tensor(x0, requires_grad=True)
        out = cf(xc, w)
        out.backward()
        np.testing.assert_allclose(out.detach().numpy(), loss(tj.tensor(x0), w).numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(xc.grad.numpy(), xe.grad.numpy())
    (entry,) = cf.entries
    names = _names(entry.opt_graph)
    assert names.index("max_pool2d_values") < names.index("relu"), names


def test_cnn_block_compiled_matches_torch():
    torch = pytest.importorskip("torch")
    tj.manual_seed(0)

    class Block(tj.nn.Module):
        def __init__(self, nn):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4)

        def forward(self, x):
            return (nn_f(self).max_pool2d(nn_f(self).relu(self.bn(self.conv(x))), 2))

    def nn_f(m):
        return torch.nn.functional if isinstance(m, torch.nn.Module) else F

    class TBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(2, 4, 3), torch.nn.BatchNorm2d(4)

        forward = Block.forward

    m, ref = Block(tj.nn), TBlock()
    ref.load_state_dict({k: torch.tensor(v.numpy()) for k, v in m.state_dict().items()})
    x = np.random.default_rng(3).standard_normal((3, 2, 10, 10)).astype(np.float32)
    cm = tj.script(m)
    for _ in range(2):
        m.zero_grad()
        ref.zero_grad()
        y = cm(tj.tensor(x))
        (y * y).sum().backward()
        yt = ref(torch.tensor(x))
        (yt * yt).sum().backward()
        np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
        grads = dict(ref.named_parameters())
        for k, p in m.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), grads[k].grad.numpy(), rtol=1e-4, atol=1e-4,
                                       err_msg=k)
