"""compiler/cpu/gemm/epilogue.py's template side: a plan's product with an epilogue
``act(x @ w + bias + residual)`` on the chosen configuration equals numpy over shapes of
1..300 in each dim (1xK, Kx1, odd sizes, transposed operands, N-d x), float32 and float64;
the BLAS side where the choice is BLAS; and a compiled plan's step on either side agrees
with eager."""
import itertools

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler import diskcache
from tracejit.compiler.cpu.gemm import choice, epilogue, template

pytest.importorskip("numba", reason="the template is numba code")
pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")

_mods: dict = {}

# (m, k, n): ones, a row, a column, odd sizes past every tile and vector, up to 300
SHAPES = [(1, 1, 1), (1, 300, 1), (1, 37, 300), (300, 1, 1), (300, 7, 300), (13, 300, 29),
          (97, 61, 131), (257, 33, 17), (3, 5, 2)]
CFGS = [template.CONFIGS[0], template.Config(8, 3, False, 2), template.Config(4, 5, dot=True)]


def _loaded(dtype: str, cfg):
    key = (dtype, cfg, template.vector_width(dtype))
    if key not in _mods:
        _mods[key] = diskcache.load_module(template.source(dtype, cfg), name_hint="test_gemm").kernel
    fn = _mods[key]
    return type("K", (), {"get": lambda self: fn, "fn": staticmethod(fn)})()


@pytest.fixture
def chosen(monkeypatch):
    """Every key chosen for the configuration the test sets (``chosen[0]``), its kernel loaded."""
    pick = [choice.BLAS]
    monkeypatch.setattr(choice, "choose", lambda key: pick[0])
    monkeypatch.setattr(choice, "bind", lambda key, install: install(choice.choose(key)))
    monkeypatch.setattr(epilogue.products, "_eligible", lambda a, b: True)
    monkeypatch.setattr(template, "kernel_for", _loaded)
    return pick


def _site(act):
    cell = []
    first = epilogue.template_site(act, cell.append)
    return first, cell


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cfg", CFGS, ids=lambda c: c.name)
def test_template_epilogue_equals_numpy(chosen, cfg, dtype):
    chosen[0] = cfg
    rng = np.random.default_rng(4)
    for (m, k, n), tb, (bias_on, res_on, act) in itertools.product(
            SHAPES, (False, True), ((True, False, None), (True, True, "relu"), (False, True, None))):
        x = rng.standard_normal((m, k)).astype(dtype)
        w = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
        w = w.T if tb else w
        b = rng.standard_normal(n).astype(dtype) if bias_on else None
        r = rng.standard_normal((m, n)).astype(dtype) if res_on else None
        first, cell = _site(act)
        got = first(x, w, b, r)
        assert cell and cell[-1] is not epilogue._blas_side
        want = x.astype(np.float64) @ w.astype(np.float64)
        want = want + (0 if b is None else b) + (0 if r is None else r)
        want = np.maximum(want, 0) if act == "relu" else want
        tol = (1e-5 if dtype == "float32" else 1e-12) * max(1, k) ** 0.5 * 4
        assert got.dtype == np.dtype(dtype) and got.shape == (m, n)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 4)
        np.testing.assert_allclose(cell[-1](x, w, b, r), got, rtol=0, atol=0)   # the installed launch


def test_nd_operand_and_a_row_vector_bias(chosen):
    chosen[0] = template.CONFIGS[0]
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 41, 57))
    w = rng.standard_normal((57, 23))
    b = rng.standard_normal((1, 1, 23))
    r = rng.standard_normal((3, 41, 23))
    first, _ = _site("relu")
    got = first(x, w, b, r)
    assert got.shape == (3, 41, 23)
    np.testing.assert_allclose(got, np.maximum(x @ w + b + r, 0), rtol=1e-12, atol=1e-12)


def test_blas_choice_leaves_the_plan_its_blas_side(chosen):
    chosen[0] = choice.BLAS
    first, cell = _site(None)
    x, w = np.ones((70, 300)), np.ones((300, 90))
    assert first(x, w, np.ones(90), None) is None and cell == [epilogue._blas_side]


@pytest.mark.parametrize("side", ["template", "blas"])
def test_compiled_step_on_either_side_agrees_with_eager(chosen, side, monkeypatch):
    from differential import assert_compiled_matches
    from tracejit.compiler.gemm_steps import GemmStep
    chosen[0] = template.CONFIGS[0] if side == "template" else choice.BLAS
    calls = []
    real = template.run

    def run(*a, **k):
        calls.append(k.get("act"))
        return real(*a, **k)
    monkeypatch.setattr(template, "run", run)

    def f(x, w, b, r):
        return tj.relu(F.linear(x, w, b) + r)
    rng = np.random.default_rng(6)
    args = [tj.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((80, 96), (70, 96), (70,), (80, 70))]
    cf = assert_compiled_matches(f, *args, rtol=2e-5, atol=2e-5)
    plan = cf._entries[-1].executor.infer_plan()
    assert [type(it) for it in plan.items if isinstance(it, GemmStep)] == [GemmStep], plan.source
    # (the training variant's bare products run on the template too: act None)
    assert ("relu" in calls) if side == "template" else not calls
