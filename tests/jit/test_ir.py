"""The IR: its text form (exact expected strings), the verifier, and the graph passes."""
from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

import tracejit as tj
from tracejit.jit import passes
from tracejit.jit.ir import Eqn, Graph, Literal, Var, VerifyError, verify
from tracejit.ops.registry import REGISTRY, Aval

F32, F64 = tj.float32, tj.float64


def graph_of(fn, *args, optimized=False, mode="trace"):
    cf = (tj.trace if mode == "trace" else tj.script)(fn, compiler="interpret")
    cf(*args)
    (entry,) = cf.entries
    return entry.opt_graph if optimized else entry.graph


def text(fn, *args, **kw) -> str:
    return graph_of(fn, *args, **kw).text(with_locations=False)


# --------------------------------------------------------------------------- text form
def test_text_of_a_small_function_with_source_locations():
    def mlp(x, w, b):
        h = (x @ w + b).relu()
        return h.sum(1), h

    first = inspect.getsourcelines(mlp)[1]
    g = graph_of(mlp, tj.ones(4, 3), tj.ones(3, 2), tj.ones(2))
    base = os.path.basename(__file__)
    l1, l2 = f"{base}:{first + 1}", f"{base}:{first + 2}"
    assert str(g) == (
        "mlp(%x: f32[4,3], %w: f32[3,2], %b: f32[2]) {\n"
        f"  %0: f32[4,2] = matmul %x %w                   # {l1}\n"
        f"  %1: f32[4,2] = add %0 %b                      # {l1}\n"
        f"  %2: f32[4,2] = relu %1                        # {l1}\n"
        f"  %3: f32[4] = sum[dims=(1,),keepdim=False] %2  # {l2}\n"
        "  return %3, %2\n"
        "}")
    # every equation remembers the user's file, not tracejit's
    assert all(e.loc[0] == __file__ for e in g.eqns)


def test_text_shows_promotion_casts_and_specialized_scalars():
    def f(x, n):
        return x.to(tj.float64) * n + 1

    assert text(f, tj.ones(2, dtype=tj.int32), 3) == (
        "f(%x: i32[2]) {\n"
        "  %0: f64[2] = cast[dtype=f64] %x\n"
        "  %1: f64[2] = mul %0 3.0\n"
        "  %2: f64[2] = add %1 1.0\n"
        "  return %2\n"
        "}")


def test_text_of_cond_with_both_branches_as_subgraphs():
    def s(x, t: float):
        if x.sum() > t:
            y = x * 2
        else:
            y = x - t
        return y

    assert text(s, tj.ones(3), 1.0, mode="script") == (
        "s(%x: f32[3], %t: f32[]) {\n"
        "  %0: f32[] = sum[dims=(0,),keepdim=False] %x\n"
        "  %1: bool[] = gt %0 %t\n"
        "  %2: f32[3] = cond %1 %x %t\n"
        "    true_graph: true(%3: f32[3], %4: f32[]) {\n"
        "      %5: f32[3] = mul %3 2.0\n"
        "      return %5\n"
        "    }\n"
        "    false_graph: false(%6: f32[3], %7: f32[]) {\n"
        "      %8: f32[3] = sub %6 %7\n"
        "      return %8\n"
        "    }\n"
        "  return %2\n"
        "}")


def test_text_of_a_loop_over_a_runtime_range():
    def w(x, n: int):
        for i in range(n):
            x = x * 2
        return x

    assert text(w, tj.ones(3), 2, mode="script", optimized=True) == (
        "w(%x: f32[3], %n: i64[]) {\n"
        "  %0: i64[] = maximum %n 0\n"
        "  %1: f32[3] = scan[n_carry=1,n_xs=0,reverse=False,trip=None] %0 %x\n"
        "    body_graph: body(%2: i64[], %3: f32[3]) {\n"
        "      %4: f32[3] = mul %3 2.0\n"
        "      return %4\n"
        "    }\n"
        "  return %1\n"
        "}")


def test_text_of_symbolic_dims():
    def f(x):
        return x.mean(0)

    cf = tj.trace(f, compiler="interpret")
    cf(tj.ones(2, 3))
    cf(tj.ones(5, 3))  # differs in dim 0 only: the next capture makes it symbolic
    assert cf.entries[-1].graph.text(with_locations=False) == (
        "f(%x: f32[s0,3]) {\n"
        "  %0: f32[3] = sum[dims=(0,),keepdim=False] %x\n"
        "  %1: f32[3] = div %0 s0\n"
        "  return %1\n"
        "}")


# --------------------------------------------------------------------------- verifier
def v(shape, dtype=F32, hint=""):
    return Var(Aval(shape, dtype), hint)


def eqn(name, ins, outs, **params):
    return Eqn(REGISTRY[name], tuple(ins), tuple(outs), params)


def test_verifier_accepts_a_well_formed_graph():
    x, y = v((2,), hint="x"), v((2,))
    g = Graph((x,), (eqn("mul", [x, Literal(2.0, Aval((), F32, weak=True))], [y]),), (y,))
    verify(g)
    assert g.text() == "graph(%x: f32[2]) {\n  %0: f32[2] = mul %x 2.0\n  return %0\n}"


def test_verifier_catches_use_before_definition():
    x, y, z = v((2,)), v((2,)), v((2,))
    g = Graph((x,), (eqn("mul", [x, y], [z]), eqn("neg", [x], [y])), (z,))
    with pytest.raises(VerifyError, match=r"eqn 0 \(mul\) uses an undefined value"):
        verify(g)


def test_verifier_catches_redefinition():
    x, y = v((2,)), v((2,))
    with pytest.raises(VerifyError, match=r"eqn 1 \(neg\) redefines"):
        verify(Graph((x,), (eqn("neg", [x], [y]), eqn("neg", [y], [y])), (y,)))
    with pytest.raises(VerifyError, match=r"eqn 0 \(neg\) redefines"):
        verify(Graph((x,), (eqn("neg", [x], [x]),), (x,)))  # an input redefined


def test_verifier_catches_wrong_output_type():
    x = v((2,))
    with pytest.raises(VerifyError, match=r"output typed f32\[3\] but its rule gives f32\[2\]"):
        verify(Graph((x,), (eqn("neg", [x], [v((3,))]),), (x,)))
    with pytest.raises(VerifyError, match=r"output typed f64\[2\] but its rule gives f32\[2\]"):
        verify(Graph((x,), (eqn("neg", [x], [v((2,), F64)]),), (x,)))


def test_verifier_catches_bad_operand_dtype():
    x, d, y = v((2,)), v((2,), F64), v((2,))
    # promotion must be explicit (a cast equation): mixed operands are a type error
    with pytest.raises(VerifyError, match="not of the compute dtype f64"):
        verify(Graph((x, d), (eqn("add", [x, d], [y]),), (y,)))
    i = v((2,), tj.int64)
    with pytest.raises(VerifyError, match="inputs do not type-check"):
        verify(Graph((i,), (eqn("exp", [i], [y]),), (y,)))


def test_verifier_catches_wrong_arity_and_undefined_output():
    x, y = v((2,)), v((2,))
    with pytest.raises(VerifyError, match=r"eqn 0 \(add\) has 1 operands; it takes 2"):
        verify(Graph((x,), (eqn("add", [x], [y]),), (y,)))
    with pytest.raises(VerifyError, match="graph output .* is undefined"):
        verify(Graph((x,), (), (y,)))


def _operand_range(fn, params=()):
    """The operands `fn` takes after `xp` (params aside), as inspect.signature says."""
    ps = list(inspect.signature(fn).parameters.values())[1:]
    if any(p.kind == p.VAR_POSITIONAL for p in ps):
        return None
    pos = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in params]
    return sum(p.default is p.empty for p in pos), len(pos)


def _checked_range(fn, params=()):
    """The operand counts the verifier accepts for an implementation `fn`."""
    from tracejit.jit.ir import _check_arity
    prim = type("P", (), {"impl": staticmethod(fn), "name": "p"})()
    ok = [n for n in range(16)
          if not _raises(lambda n=n: _check_arity(0, Eqn(prim, (None,) * n, (), dict.fromkeys(params))))]
    return None if ok == list(range(16)) else (ok[0], ok[-1])


def _raises(f) -> bool:
    try:
        f()
    except VerifyError:
        return True
    return False


def test_verifier_arity_agrees_with_inspect_for_every_impl_and_odd_signatures():
    def odd1(xp, a, b=1, *rest, k=2): ...
    def odd2(xp, a, /, b, c=3, *, d, e=4, **kw): ...
    def odd3(*args): ...
    def odd4(xp): ...
    def odd5(xp, a, b, c=1): ...
    cases = [(p.impl, ()) for p in REGISTRY.values()] + [
        (odd1, ()), (odd2, ()), (odd2, ("b",)), (odd3, ()), (odd4, ()), (odd5, ("c",)), (odd5, ("a",))]
    for fn, params in cases:
        assert _checked_range(fn, params) == _operand_range(fn, params), (fn, params)


def test_verifier_checks_subgraphs_are_closed_and_typed():
    def s(x, t: float):
        if x.sum() > t:
            y = x * 2
        else:
            y = x - t
        return y

    g = graph_of(s, tj.ones(3), 1.0, mode="script")
    verify(g)
    (c,) = [e for e in g.eqns if e.prim.name == "cond"]
    tg = c.params["true_graph"]
    # a branch reading an outer value directly (not through its inputs) is invalid
    outer = g.inputs[0]
    leak = Graph(tg.inputs, (eqn("neg", [outer], [v((3,))]),), tg.outputs, "true")
    bad = Graph(g.inputs, g.eqns[:-1] + (Eqn(c.prim, c.inputs, c.outs, {**c.params, "true_graph": leak}),),
                g.outputs, g.name)
    with pytest.raises(VerifyError, match=r"sub-graph 'true'.*undefined"):
        verify(bad)
    # branch results must match the cond's outputs
    wrong = Graph(tg.inputs, (), (tg.inputs[1],), "true")
    bad = Graph(g.inputs, g.eqns[:-1] + (Eqn(c.prim, c.inputs, c.outs, {**c.params, "true_graph": wrong}),),
                g.outputs, g.name)
    with pytest.raises(VerifyError, match="outputs of true_graph do not match"):
        verify(bad)


# --------------------------------------------------------------------------- passes
def _passes_input():
    def f(x):
        a = x.exp()
        b = x.exp()          # same as a: CSE
        dead = x.sin()       # unused: DCE  # noqa: F841
        c = tj.add(2.0, 3.0)  # literals only: folded
        d = tj.mul(c, 2.0)
        y = (a + b) * d
        z = -(-y)            # double negation
        w = z * 1 + 0        # x*1, x+0
        return w - 0
    return graph_of(f, tj.ones(2))


def test_dce_removes_unused_equations():
    assert passes.dce(_passes_input()).text(with_locations=False) == (
        "f(%x: f32[2]) {\n"
        "  %0: f32[2] = exp %x\n"
        "  %1: f32[2] = exp %x\n"
        "  %2: f32[] = add 2.0 3.0\n"
        "  %3: f32[] = mul %2 2.0\n"
        "  %4: f32[2] = add %0 %1\n"
        "  %5: f32[2] = mul %4 %3\n"
        "  %6: f32[2] = neg %5\n"
        "  %7: f32[2] = neg %6\n"
        "  %8: f32[2] = mul %7 1.0\n"
        "  %9: f32[2] = add %8 0.0\n"
        "  %10: f32[2] = sub %9 0.0\n"
        "  return %10\n"
        "}")


def test_cse_merges_repeated_computations():
    out = passes.cse(_passes_input()).text(with_locations=False)
    assert out.count("= exp %x") == 1
    assert "  %4: f32[2] = add %0 %0\n" in out


def test_cse_never_merges_random_ops():
    def f(x):
        return tj.rand(2) + tj.rand(2) + x

    g = passes.cse(graph_of(f, tj.ones(2)))
    assert [e.prim.name for e in g.eqns].count("rand") == 2


def test_fold_constants_evaluates_literal_only_equations():
    out = passes.fold_constants(_passes_input()).text(with_locations=False)
    assert "add 2.0 3.0" not in out
    assert "  %4: f32[2] = mul %3 10.0\n" in out


def test_fold_constants_keeps_outputs_as_tensors():
    def f(x):
        return tj.add(2.0, 3.0)

    cf = tj.trace(f, compiler="interpret")
    r = cf(tj.ones(1))
    assert isinstance(r, tj.Tensor) and r.item() == 5.0
    assert [e.prim.name for e in cf.entries[0].opt_graph.eqns] == ["add"]


def test_simplify_removes_identities_and_double_negation():
    out = passes.dce(passes.simplify(_passes_input())).text(with_locations=False)
    assert out == (
        "f(%x: f32[2]) {\n"
        "  %0: f32[2] = exp %x\n"
        "  %1: f32[2] = exp %x\n"
        "  %2: f32[] = add 2.0 3.0\n"
        "  %3: f32[] = mul %2 2.0\n"
        "  %4: f32[2] = add %0 %1\n"
        "  %5: f32[2] = mul %4 %3\n"
        "  return %5\n"
        "}")


def test_simplify_keeps_broadcasting_and_promoting_identities():
    def f(x):
        return x * tj.ones(3, 2), x.to(tj.float64) + 0

    out = passes.simplify(graph_of(f, tj.ones(2))).text(with_locations=False)
    assert "mul %x %0" in out       # x*1 that broadcasts to a new shape stays
    assert "cast[dtype=f64]" in out  # a real cast stays


def test_simplify_drops_products_with_computed_ones():
    def f(x):
        e = x.exp()
        return e * tj.ones(2), tj.full((2,), 1.0).expand(2) * e, e * tj.full((2,), 2.0)

    out = passes.dce(passes.simplify(graph_of(f, tj.ones(2)))).text(with_locations=False)
    assert out.count("mul") == 1 and "full[shape=(2,),value=2.0" in out, out   # only 2.0 stays
    assert out.count("exp") == 1 and "value=1" not in out, out


def test_a_loss_gradient_kernel_never_multiplies_by_its_unit_cotangent():
    from tracejit.jit.autodiff import loss_joint

    def f(x, y):
        a = x * y
        return (a * a.tanh()).sum()

    g = graph_of(f, tj.ones(4), tj.ones(4))
    joint = passes.optimize(loss_joint(g, [True, True], 0))
    names = [e.prim.name for e in joint.eqns]
    assert "full" not in names and "expand" not in names, joint.text(with_locations=False)
    x, y = tj.randn(4, requires_grad=True), tj.randn(4, requires_grad=True)
    loss = tj.script(f)(x, y)
    loss.backward()
    xe, ye = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    f(xe, ye).backward()
    np.testing.assert_allclose(x.grad.numpy(), xe.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(y.grad.numpy(), ye.grad.numpy(), rtol=1e-6)


def test_simplify_writes_the_transpose_of_a_product_as_a_product_of_transposes():
    from tracejit.jit.interpreter import interpret

    def f(a, w, c):
        p = a @ c                                       # used twice: left alone
        return (a @ w.t()).t(), p.t(), p * 2.0

    a, w, c = tj.randn(4, 3), tj.randn(5, 3), tj.randn(3, 2)
    g = graph_of(f, a, w, c)
    out = passes.dce(passes.simplify(g)).text(with_locations=False)
    # (a @ w.T).T == w @ a.T: w is read untransposed, the result is C-contiguous.
    assert "matmul %w %" in out, out
    assert out.count("matmul") == 2 and "matmul %a %c" in out, out
    want = [t.numpy() for t in interpret(g, [a, w, c])]
    got = [t.numpy() for t in interpret(passes.simplify(g), [a, w, c])]
    for x, y in zip(want, got):
        np.testing.assert_allclose(y, x, rtol=1e-6)
    assert got[0].flags.c_contiguous


def test_simplify_never_returns_an_input_as_an_output():
    def f(x):
        return x * 1

    cf = tj.trace(f, compiler="interpret")
    x = tj.ones(2)
    y = cf(x)
    assert y is not x
    y.add_(1)
    assert x.tolist() == [1.0, 1.0]


def test_optimize_pipeline_gives_the_minimal_graph():
    assert passes.optimize(_passes_input()).text(with_locations=False) == (
        "f(%x: f32[2]) {\n"
        "  %0: f32[2] = exp %x\n"
        "  %1: f32[2] = add %0 %0\n"
        "  %2: f32[2] = mul %1 10.0\n"
        "  return %2\n"
        "}")


def test_passes_recurse_into_subgraphs():
    def s(x):
        if x.sum() > 0:
            y = -(-x) * 1 + x.exp() + x.exp()
        else:
            y = x
        return y

    g = passes.optimize(graph_of(s, tj.ones(2), mode="script"))
    (c,) = [e for e in g.eqns if e.prim.name == "cond"]
    assert [e.prim.name for e in c.params["true_graph"].eqns] == ["exp", "add", "add"]
    verify(g)
