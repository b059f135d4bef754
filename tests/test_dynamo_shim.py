"""tracejit._dynamo / _inductor / compiler: the torch._dynamo and torch.compiler names
training scripts touch run, and the recompile limit set through them is the one used."""
import warnings

import pytest

import tracejit as tj
from tracejit.jit import function


def test_cache_size_limit_sets_the_recompile_limit_of_later_compiles():
    old = tj._dynamo.config.cache_size_limit
    try:
        tj._dynamo.config.cache_size_limit = 2
        assert tj._dynamo.config.recompile_limit == 2
        f = tj.compile(lambda x: x * 2)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for n in (1, 2, 3, 4):   # (each rank a capture of its own: the third passes the limit)
                assert f(tj.ones(*[3] * n)).sum().item() == 2 * 3 ** n
        assert any("recompile" in str(w.message).lower() for w in seen)
        with pytest.raises(ValueError, match="cache_size_limit must be an int >= 1"):
            tj._dynamo.config.cache_size_limit = 0
    finally:
        function.DEFAULT_RECOMPILE_LIMIT = old


def test_dynamo_and_compiler_names_run():
    tj._dynamo.config.suppress_errors = True
    assert tj._dynamo.config.suppress_errors is True
    with pytest.raises(AttributeError, match="no setting 'not_a_setting'"):
        tj._dynamo.config.not_a_setting
    tj._dynamo.reset()
    assert tj._dynamo.mark_dynamic(tj.zeros(3), 0) is None
    assert tj.compiler.disable(lambda x: x + 1)(tj.ones(1)).item() == 2.0
    assert tj._dynamo.optimize("inductor")(lambda x: x * 3)(tj.ones(2)).tolist() == [3.0, 3.0]
    assert tj.compiler.is_compiling() is False
    seen = []
    tj.trace(lambda x: (seen.append(tj.compiler.is_compiling()), x + 1)[1])(tj.ones(2))
    assert seen == [True]
    tj._inductor.config.coordinate_descent_tuning = True
    tj._inductor.config.triton.cudagraphs = False
    assert tj._inductor.config.coordinate_descent_tuning is True and tj._inductor.config.freezing is None
    tj.compiler.cudagraph_mark_step_begin()


def test_inductor_options_are_ignored_with_a_warning_and_others_refused():
    with pytest.warns(UserWarning, match="'triton.cudagraphs' is an Inductor option"):
        f = tj.compile(lambda x: x + 1, options={"triton.cudagraphs": False, "max_autotune": True})
    assert f(tj.ones(2)).tolist() == [2.0, 2.0]
    with pytest.raises(ValueError, match="unknown option 'colour'"):
        tj.compile(lambda x: x, options={"colour": "red"})


def test_config_modules_import_by_path():
    import importlib
    assert importlib.import_module("tracejit._dynamo.config") is tj._dynamo.config
    inductor = importlib.import_module("tracejit._inductor.config")
    inductor.coordinate_descent_tuning = True
    assert tj._inductor.config.coordinate_descent_tuning is True


def test_graph_break_keeps_the_values():
    def f(x):
        y = x * 2
        tj._dynamo.graph_break()
        return y + 1
    g = tj.compile(f)
    assert g(tj.ones(2)).tolist() == [3.0, 3.0] and g.cache_stats()["eager_fallbacks"] == 0


def _no_break(x):
    return (x * 2).relu().sum(0)


def _data_dependent_break(x):
    if x.sum() > 0:
        return x + 1
    return x - 1


def test_explain_counts_graphs_and_breaks_as_torch():
    torch = pytest.importorskip("torch")
    for lib in (tj, torch):
        ok = lib._dynamo.explain(_no_break)(lib.randn(3, 4))
        assert (ok.graph_count, ok.graph_break_count, ok.break_reasons) == (1, 0, [])
        broken = lib._dynamo.explain(_data_dependent_break)(lib.randn(3, 4))
        assert broken.graph_break_count == 1 and len(broken.break_reasons) == 1
    ok = tj._dynamo.explain(_no_break)(tj.randn(3, 4))
    assert ok.ops_per_graph == [["mul", "relu", "sum"]] and ok.op_count == 3
    assert str(ok).startswith("Graph Count: 1\nGraph Break Count: 0\nOp Count: 3\n")
    broken = tj._dynamo.explain(_data_dependent_break)(tj.randn(3, 4))
    assert "bool(tensor)" in broken.break_reasons[0].reason
    assert tj._dynamo.explain(tj.compile(tj.nn.Linear(3, 2)))(tj.randn(2, 3)).graph_count == 1
    with pytest.warns(FutureWarning, match="explain\\(f\\)\\(\\*args"):
        assert tj._dynamo.explain(_no_break, tj.randn(2, 2)).graph_count == 1


def test_compiled_module_is_an_optimized_module_and_backends_are_listed():
    from tracejit._dynamo.eval_frame import OptimizedModule
    lin = tj.nn.Linear(2, 2)
    m = tj.compile(lin)
    assert isinstance(m, OptimizedModule) and m._orig_mod is lin and not isinstance(lin, tj._dynamo.OptimizedModule)
    assert "inductor" in tj.compiler.list_backends() and "eager" not in tj.compiler.list_backends()
    assert "eager" in tj._dynamo.list_backends(exclude_tags=())
    assert tj.compiler.is_exporting() is False
    assert tj.compiler.compile(lambda x: x * 3)(tj.ones(2)).tolist() == [3.0, 3.0]
    from tracejit.random import fork_rng
    with fork_rng():
        a = tj.rand(3)
    assert tj.rand(3).tolist() == a.tolist()
