"""Graph passes (jit/passes.py): constant folding computes a comparison of Python numbers
in the operands' dtype, not in its bool result's (which made ``lt(1, 2)`` False)."""
import operator

import pytest

from tracejit.jit.ir import Literal

import tracejit as tj

# (tracejit's comparison of two numbers, operands): PyTorch takes no such call, so its
# side of the comparison is Python's
COMPARISONS = [("lt", operator.lt, 1, 2), ("lt", operator.lt, -1000, 0), ("gt", operator.gt, 0.5, -1000.0),
               ("eq", operator.eq, 1, 1.0), ("ne", operator.ne, 3, 3), ("ge", operator.ge, -2, 7)]


@pytest.mark.parametrize("name,py,a,b", COMPARISONS)
def test_a_folded_comparison_of_numbers_is_pythons(name, py, a, b):
    x = tj.tensor([100, -1, 3], dtype=tj.int16)
    fn = lambda x: tj.where(getattr(tj, name)(a, b), x, 0)   # noqa: E731
    want = x.tolist() if py(a, b) else [0, 0, 0]
    assert fn(x).tolist() == want
    assert tj.compile(fn)(x).tolist() == want


@pytest.mark.parametrize("divisor", [-1000, -3, 7])
def test_compiled_integer_trunc_division_by_a_number_matches_pytorch(divisor):
    torch = pytest.importorskip("torch")
    vals = [100, -1, 3, -128, 32766]
    want = torch.div(torch.tensor(vals, dtype=torch.int16), divisor, rounding_mode="trunc").tolist()
    fn = lambda x: tj.div(x, divisor, rounding_mode="trunc")   # noqa: E731
    assert fn(tj.tensor(vals, dtype=tj.int16)).tolist() == want
    assert tj.compile(fn)(tj.tensor(vals, dtype=tj.int16)).tolist() == want


def _no_grad_graph():
    from tracejit.device import CPU
    from tracejit.ops.registry import Aval
    from tracejit.jit.tracer import trace_graph

    def fn(x, w):
        with tj.no_grad():
            k = (x @ w).relu()   # each op under no_grad is followed by a detach
        return (x * k).sum(), k
    ctx, out = trace_graph(fn, [Aval((4, 3), tj.float32, CPU), Aval((3, 3), tj.float32, CPU)])
    return ctx.graph([t._var for t in out])


def test_drop_detach_keeps_only_the_detach_of_an_output():
    from tracejit.jit.passes import drop_detach
    from tracejit.jit.tracer import DETACH
    g = _no_grad_graph()
    before = [e for e in g.eqns if e.prim is DETACH]
    after = [e for e in drop_detach(g).eqns if e.prim is DETACH]
    assert len(before) >= 2 and [e.out for e in after] == [g.outputs[1]]
    assert all(a in {e.out for e in drop_detach(g).eqns} | set(g.inputs) for e in drop_detach(g).eqns
               for a in e.inputs if not isinstance(a, Literal))


def test_a_compiled_no_grad_region_gives_eager_values_and_gradients():
    x = tj.tensor([[1.0, -2.0, 3.0], [0.5, 0.25, -1.0]], requires_grad=True)
    w = tj.tensor([[1.0, 2.0, 0.0], [-1.0, 1.0, 1.0], [0.5, -0.5, 2.0]], requires_grad=True)

    def fn(x, w):
        with tj.no_grad():
            k = (x @ w).relu()
        return (x * k).sum(), k
    (want, wk), (got, gk) = fn(x, w), tj.compile(fn)(x, w)
    assert got.item() == want.item() and gk.tolist() == wk.tolist() and not gk.requires_grad
    gx, gw = tj.autograd.grad(got, (x, w), allow_unused=True)
    assert gx.tolist() == wk.tolist() and gw is None
