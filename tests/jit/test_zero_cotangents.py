"""An output of a compiled forward that gets no gradient adds nothing to the backward, as
in PyTorch's eager backward, even where its local derivative is infinite (zeros times inf
would make every shared gradient NaN)."""
import numpy as np
import pytest

import tracejit as tj
from tracejit import nn
from tracejit.jit.ir import Eqn, Graph, Var
from tracejit.jit.zero_cotangents import without_cotangents
from tracejit.ops.elementwise import ADD, MUL


class _AuxOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.extra = nn.Parameter(tj.ones(3))

    def forward(self, x):
        h = self.lin(x)
        dist = (h * 0 * self.extra).sum(-1).sqrt()   # sqrt at 0: an infinite derivative
        return (h * h).sum(), dist


@pytest.mark.parametrize("use_aux", [False, True])
def test_an_unused_output_leaves_the_gradients_as_eager(use_aux):
    x = tj.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 5)
    grads = []
    for compiled in (False, True):
        tj.manual_seed(0)
        m = _AuxOut()
        f = tj.compile(m) if compiled else m
        for _ in range(2):   # (the second call reuses the plan it made)
            m.zero_grad()
            loss, dist = f(x)
            (loss + dist.sum() if use_aux else loss).backward()
        grads.append((m.lin.weight.grad.numpy(), m.extra.grad))
    (we, xe), (wc, xc) = grads
    np.testing.assert_allclose(wc, we, rtol=1e-6)
    if use_aux:   # (the sum's own infinite derivative: NaN in both)
        assert np.isnan(xc.numpy()).all() and np.isnan(xe.numpy()).all()
    else:
        assert np.isfinite(wc).all() and xe is None and xc is None


def _backward(join):
    """inputs (x, g1, g2) -> join(g1 * x, g2 * x), as a backward's graph."""
    from tracejit.ops.registry import Aval
    av = Aval((3,), tj.float32)
    x, g1, g2, a, b, c = (Var(av) for _ in range(6))
    eqns = (Eqn(MUL, (g1, x), (a,), {}), Eqn(MUL, (g2, x), (b,), {}), Eqn(join, (a, b), (c,), {}))
    return Graph((x, g1, g2), eqns, (c,), "bwd"), (g1, g2), a


def test_an_absent_term_of_a_sum_is_dropped():
    g, cts, kept = _backward(ADD)
    part = without_cotangents(g, list(cts), {cts[1]})
    assert part.outputs == (kept,) and [e.prim for e in part.eqns] == [MUL]
    assert part.inputs == g.inputs   # (the plan is called with every cotangent still)
    assert without_cotangents(g, list(cts), set()).outputs == g.outputs


def test_an_absent_value_met_otherwise_than_by_a_sum_is_refused():
    g, cts, _ = _backward(MUL)
    assert without_cotangents(g, list(cts), {cts[1]}) is None
