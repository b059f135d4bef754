"""@tracejit.script: Python control flow becomes graph control flow; scalar arguments
are runtime inputs; the tutorial model trains with one compilation."""
from __future__ import annotations

import functools
import inspect

import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import ScriptError


def _np(t):
    return t.detach().numpy() if isinstance(t, tj.Tensor) else np.asarray(t)


def check_against_eager(fn, calls, compiles=1, compiler="interpret"):
    """Run every call compiled and under tj.eager(); results must agree; return the
    compiled function (compiles counts captures)."""
    cf = tj.script(fn, compiler=compiler)
    for args in calls:
        got = cf(*args)
        with tj.eager():
            exp = cf(*args)
        got_t = got if isinstance(got, tuple) else (got,)
        exp_t = exp if isinstance(exp, tuple) else (exp,)
        assert len(got_t) == len(exp_t)
        for g, e in zip(got_t, exp_t):
            assert type(g) is type(e), (args, g, e)
            np.testing.assert_allclose(_np(g), _np(e), rtol=1e-6, atol=1e-6, err_msg=str(args))
    assert cf.cache_stats()["compiles"] == compiles
    return cf


def T(*v):
    return tj.tensor(list(v))


# --------------------------------------------------------------------------- if / elif / else
def test_if_elif_else_on_tensors():
    def f(x):
        if x.sum() > 0:
            y = x * 2
        elif x.sum() < -5:
            y = x * 3
        else:
            y = -x
        return y + 1

    cf = check_against_eager(f, [(T(1.0, 2.0),), (T(-10.0, 2.0),), (T(-1.0, 0.5),), (T(0.0, 0.0),)])
    assert [e.prim.name for e in cf.entries[0].graph.eqns].count("cond") == 1  # elif: nested cond


def test_if_on_scalar_arguments_which_are_runtime_inputs():
    # ints and floats are graph inputs (their ifs become conds); a bool is a flag that
    # steers Python structure: specialized, one entry per value
    def f(x, n: int, t: float, flag: bool):
        y = x
        if n > 2:
            y = y + n
        if t < 0.5 and flag:
            y = y * t
        if not flag:
            y = -y
        return y

    cf = check_against_eager(f, [(T(1.0, 2.0), 1, 0.25, True), (T(1.0, 2.0), 3, 0.25, True),
                                 (T(1.0, 2.0), 3, 0.75, True), (T(1.0, 2.0), 5, 0.25, False)],
                             compiles=2)
    text = cf.entries[0].graph.text(False)
    assert "%n: i64[]" in text and "%t: f32[]" in text  # graph inputs, not constants
    assert "%flag" not in text


def test_scalar_type_change_recompiles():
    def f(x, n):
        return x * n

    cf = tj.script(f, compiler="interpret")
    cf(T(1.0), 2)
    cf(T(1.0), 3)
    cf(T(1.0), 2.5)
    st = cf.cache_stats()
    assert st["compiles"] == 2
    assert st["recompile_reasons"] == ["input 'n': type guard failed: int -> float"]


def test_conditional_expressions_and_boolean_operators():
    def f(x, k: float):
        a = x * 2 if x.mean() > k else x - 1
        b = 1.0 if (x.max() > 1 and k > 0) or x.min() < -3 else 2.0
        c = x if not (x.sum() > 0) else -x
        return a * b + c

    check_against_eager(f, [(T(1.0, 2.0), 0.5), (T(1.0, 2.0), 3.0), (T(-4.0, 0.0), 1.0),
                            (T(0.5, 0.5), -1.0)])


def test_chained_comparisons():
    def f(x, k: int):
        if 0 < x.sum() < 5:
            y = x * 2
        else:
            y = x
        z = 1 if 0 < k <= 3 else 2
        return y, z

    check_against_eager(f, [(T(v), k) for v in (1.0, 10.0, -1.0) for k in (0, 2, 4)])


def test_return_inside_both_branches_and_early_return():
    def both(x):
        if x.sum() > 0:
            return x * 2, x.sum()
        else:
            return x * 3, x.max()

    def early(x, n: int):
        if n > 1:
            return x + n
        y = x * 10
        return y

    check_against_eager(both, [(T(1.0, 2.0),), (T(-1.0, -2.0),)])
    check_against_eager(early, [(T(1.0), 0), (T(1.0), 2)])


# --------------------------------------------------------------------------- loops
def test_while_with_tensor_condition():
    def f(x):
        i = 0
        while x.sum() < 100:
            x = x * 2
            i = i + 1
        return x, i

    cf = check_against_eager(f, [(T(1.0, 2.0),), (T(30.0, 40.0),), (T(200.0, 0.0),)])
    assert "while" in cf.entries[0].graph.text(False)
    assert cf(T(1.0, 2.0))[1] == 6  # the count comes back as a Python int, as in Python


def test_for_over_range_with_runtime_bound():
    def f(x, n: int):
        acc = x * 0
        k = 0
        for i in range(n):
            acc = acc + x * i
            k = k + i
        return acc, k

    cf = check_against_eager(f, [(T(1.0, 2.0), 4), (T(1.0, 2.0), 0), (T(1.0, 2.0), 7)])
    assert "scan" in cf.entries[0].graph.text(False)   # its trip count is known when it starts


def test_loop_body_temporaries():
    def f(x, n: int):
        acc = x * 0
        for i in range(n):
            y = x * i  # first bound inside the body
            acc = acc + y
        while acc.sum() < 50:
            t = acc + 1
            acc = t * 2
        return acc

    check_against_eager(f, [(T(1.0, 2.0), 3), (T(1.0, 2.0), 5), (T(30.0, 40.0), 1)])


def test_for_over_range_with_start_and_negative_step():
    def f(x, a: int, b: int):
        for i in range(a, b, -2):
            x = x + i
        return x

    check_against_eager(f, [(T(0.0), 10, 1), (T(0.0), 3, 5), (T(0.0), 6, -6)])


def test_for_over_static_range_is_unrolled():
    def f(x):
        for j in range(3):
            x = x * 2 + j
        return x

    cf = check_against_eager(f, [(T(1.0),), (T(5.0),)])
    text = cf.entries[0].graph.text(False)
    assert "while" not in text and text.count("mul") == 3


def test_for_over_python_list_is_unrolled():
    def f(xs):
        total = xs[0] * 0
        for x in xs:
            total = total + x
        return total

    check_against_eager(f, [([T(1.0), T(2.0), T(3.0)],)])


def test_nested_control_flow():
    def f(x, n: int):
        for i in range(n):
            if x.sum() > 10:
                x = x - 1
            else:
                while x.max() < 5:
                    x = x + 2
        y = x * 2 if n > 1 else x
        return y

    check_against_eager(f, [(T(1.0, 2.0), 3), (T(20.0, 2.0), 3), (T(20.0, 2.0), 0),
                            (T(1.0, 2.0), 1)])


def test_break_in_loop_stays_python():
    def f(x):
        for i in range(10):
            if i == 3:
                break
            x = x + 1
        return x

    check_against_eager(f, [(T(0.0),)])


def test_branches_disagreeing_on_shape_are_a_script_error():
    def f(x):
        if x.sum() > 0:
            y = x
        else:
            y = x.sum()
        return y

    with pytest.raises(ScriptError, match="`y` is a tensor of type f32\\[2\\] on one path"):
        tj.script(f, compiler="interpret")(T(1.0, 2.0))


def test_control_flow_gradients_match_eager():
    def f(x, w, n: int):
        h = x * w
        for i in range(n):
            h = h * w
        if h.sum() > 0:
            out = h.exp()
        else:
            out = h * 3
        return out.sum()

    cf = tj.script(f, compiler="interpret")
    for x0 in ([0.1, 0.2], [-0.5, -0.1]):
        xs = [tj.tensor(x0, requires_grad=True) for _ in range(2)]
        ws = [tj.tensor([0.5, 1.5], requires_grad=True) for _ in range(2)]
        cf(xs[0], ws[0], 2).backward()
        f(xs[1], ws[1], 2).backward()
        np.testing.assert_allclose(_np(xs[0].grad), _np(xs[1].grad), rtol=1e-6)
        np.testing.assert_allclose(_np(ws[0].grad), _np(ws[1].grad), rtol=1e-6)
    assert cf.cache_stats()["compiles"] == 1


# --------------------------------------------------------------------------- the tutorial model
def model(x, y, w1, w2a, w2b, prev_loss):
    w2 = w2a if prev_loss < 5.0 else w2b
    y_pred = x.mm(w1).clamp(min=0).mm(w2)
    return (y_pred - y).pow(2).sum()


def test_tutorial_model_trains_with_one_compilation(compiler):
    rng = np.random.default_rng(0)
    x = tj.tensor(rng.standard_normal((16, 4)).astype(np.float32))
    y = tj.tensor(rng.standard_normal((16, 2)).astype(np.float32) * 0.3)
    init = [rng.standard_normal((4, 8)).astype(np.float32) * 0.5,
            rng.standard_normal((8, 2)).astype(np.float32) * 2.0,   # w2a: large loss
            rng.standard_normal((8, 2)).astype(np.float32) * 0.05]  # w2b: small loss
    compiled = [tj.tensor(a, requires_grad=True) for a in init]
    reference = [tj.tensor(a, requires_grad=True) for a in init]
    cmodel = tj.script(model, compiler=compiler)
    prev_c = prev_e = 10.0
    branches = []

    def grad(w):
        return _np(w.grad) if w.grad is not None else np.zeros(tuple(w.shape), np.float32)

    for step in range(50):
        loss_c = cmodel(x, y, *compiled, prev_c)
        with tj.eager():
            loss_e = cmodel(x, y, *reference, prev_e)
        loss_c.backward()
        loss_e.backward()
        np.testing.assert_allclose(loss_c.item(), loss_e.item(), rtol=1e-5)
        for wc, we in zip(compiled, reference):
            np.testing.assert_allclose(grad(wc), grad(we), rtol=1e-4, atol=1e-5, err_msg=f"step {step}")
        branches.append(prev_c < 5.0)
        prev_c, prev_e = loss_c.item(), loss_e.item()
        with tj.no_grad():
            for w in compiled + reference:
                if w.grad is not None:
                    w.sub_(w.grad * 1e-3)
                    w.grad = None
    assert sum(branches) >= 10 and len(branches) - sum(branches) >= 10  # flipped both ways
    st = cmodel.cache_stats()
    assert (st["compiles"], st["hits"]) == (1, 49)
    assert "cond" in cmodel.entries[0].graph.text(False)


# --------------------------------------------------------------------------- unsupported Python
COUNTER = 0


def f_try(x):
    try:
        return x * 2
    except ValueError:
        return x


def f_yield(x):
    yield x


def f_global(x):
    global COUNTER
    COUNTER += 1
    return x


def f_class(x):
    class C:
        pass
    return x


def f_with_partial_return(x):
    if x.sum() > 0:
        return x
    else:
        y = x
    return y * 2


@pytest.mark.parametrize("fn,construct,marker", [
    (f_try, "try/except", "try:"),
    (f_yield, "yield", "yield x"),
    (f_global, "global", "global COUNTER"),
    (f_class, "class definitions", "class C"),
    (f_with_partial_return, "`return` inside only some paths", "if x.sum() > 0"),
])
def test_unsupported_constructs_name_the_construct_and_line(fn, construct, marker):
    lines, first = inspect.getsourcelines(fn)
    line = first + next(i for i, s in enumerate(lines) if marker in s)
    cf = tj.script(fn, compiler="interpret")
    with pytest.raises(ScriptError) as ei:
        cf(T(1.0))
    assert construct in str(ei.value)
    assert f"{__file__}:{line}" in str(ei.value)
    assert ei.value.lineno == line
    assert cf.cache_stats()["entries"] == 0


def test_arguments_of_unsupported_type_name_the_argument():
    def f(x, opts):
        return x

    with pytest.raises(ScriptError, match="argument 'opts' has type object"):
        tj.script(f, compiler="interpret")(T(1.0), object())
    with pytest.raises(ScriptError, match=r"argument 'xs\[1\]' has type set"):
        tj.script(lambda_free_nested, compiler="interpret")([T(1.0), {1}])


def lambda_free_nested(xs):
    return xs[0]


def test_functions_without_source_are_traced():
    # nothing to convert: tracing gives the same program ...
    assert tj.script(eval("lambda x: x * 2"), compiler="interpret")(T(1.0)).tolist() == [2.0]
    # ... and control flow on a tensor still says what to do
    with pytest.raises(tj.errors.TraceError, match="bool\\(tensor\\)"):
        tj.script(eval("lambda x: x if x.sum() > 0 else -x"), compiler="interpret")(T(1.0))


def test_script_supports_closures_and_globals():
    scale = 3.0
    bias = tj.tensor([1.0])

    def f(x):
        if x.sum() > 0:
            y = x * scale + bias
        else:
            y = np_free_helper(x)
        return y

    check_against_eager(f, [(T(1.0),), (T(-1.0),)])


def np_free_helper(x):
    return x - 1


class _State:
    calls = 0


def f_attr_in_traced_branch(x):
    if x.sum() > 0:
        _State.calls = _State.calls + 1
        y = x
    else:
        y = -x
    return y


def test_attribute_assignment_in_a_runtime_branch_is_a_script_error():
    line = inspect.getsourcelines(f_attr_in_traced_branch)[1] + 2
    with pytest.raises(ScriptError, match=f"assigning `_State.calls` at {__file__}:{line}"):
        tj.script(f_attr_in_traced_branch, compiler="interpret")(T(1.0))

    def static_branch(x, flag):  # a string argument is a constant: the branch is Python
        if flag == "count":
            _State.calls = _State.calls + 1
        return x

    before = _State.calls
    tj.script(static_branch, compiler="interpret")(T(1.0), "count")
    assert _State.calls == before + 1


def test_annotations_are_not_evaluated_again():
    def f(x: UndefinedTensorType, n: int) -> AlsoUndefined:  # noqa: F821 (string annotations)
        if n > 1:
            return x * n
        return x

    check_against_eager(f, [(T(1.0, 2.0), 3), (T(1.0, 2.0), 0)])


def test_python_value_of_a_runtime_scalar_is_specialized_and_guarded():
    def f(x, n: int):
        return x * [1.0, 2.0, 3.0][int(n)]

    cf = tj.script(f, compiler="interpret")
    assert cf(T(1.0), 1).tolist() == [2.0]
    assert cf(T(1.0), 1).tolist() == [2.0]
    assert cf(T(1.0), 2).tolist() == [3.0]
    st = cf.cache_stats()
    assert (st["compiles"], st["hits"]) == (2, 1)
    line = f.__code__.co_firstlineno + 1
    assert st["recompile_reasons"] == [f"int(tensor) at test_script.py:{line} specialized n to 1, now 2"]
    assert f"n == 1  [int(tensor) at test_script.py:{line}: specialized]" in str(cf.explain(T(1.0), 1))


def test_python_value_in_a_loop_body_is_a_clear_error():
    def f(x, n: int):
        i = 0
        while i < n:
            x = x * [1.0, 2.0, 3.0][int(i)]
            i = i + 1
        return x

    with pytest.raises(tj.errors.TraceError, match="runtime scalar argument.*inside a loop body"):
        tj.script(f, compiler="interpret")(T(1.0), 2)


# --------------------------------------------------------------------------- what script accepts
def test_a_lambda_is_scripted_and_its_conditional_expression_becomes_a_cond():
    cf = tj.script(lambda x: x * 2 if x.sum() > 0 else -x, compiler="interpret")
    assert cf(T(1.0, 2.0)).tolist() == [2.0, 4.0]
    assert cf(T(-1.0, -2.0)).tolist() == [1.0, 2.0]
    assert cf.cache_stats()["compiles"] == 1
    assert "cond" in [e.prim.name for e in cf.entries[0].graph.eqns]


def test_two_lambdas_on_one_line_are_told_apart():
    f, g = tj.script(lambda x: x + 1, compiler="interpret"), tj.script(lambda x: x - 1, compiler="interpret")
    assert f(T(1.0)).tolist() == [2.0] and g(T(1.0)).tolist() == [0.0]


def test_partial_bound_method_and_callable_object_are_scripted():
    def scale(x, k, flip):
        return -x * k if flip > 0 else x * k

    class Model:
        def __init__(self, k):
            self.k = k

        def __call__(self, x):
            return x * self.k if x.sum() > 0 else x

        def shifted(self, x, s):
            return x + s if x.sum() > 0 else x - s

    part = tj.script(functools.partial(scale, k=3.0), compiler="interpret")
    assert part(T(1.0), flip=1).tolist() == [-3.0] and part(T(1.0), flip=0).tolist() == [3.0]
    assert part.cache_stats()["compiles"] == 1        # flip is a runtime int: one cond
    m = Model(2.0)
    called = tj.script(m, compiler="interpret")
    assert called(T(1.0)).tolist() == [2.0] and called(T(-1.0)).tolist() == [-1.0]
    method = tj.script(m.shifted, compiler="interpret")
    assert method(T(1.0), 0.5).tolist() == [1.5] and method(T(-1.0), 0.5).tolist() == [-1.5]
    for cf in (called, method):
        assert cf.cache_stats()["compiles"] == 1
        assert "cond" in [e.prim.name for e in cf.entries[0].graph.eqns]


def test_a_callable_without_source_is_traced():
    cf = tj.script(tj.tanh, compiler="interpret")
    assert cf(T(0.0, 1.0)).tolist() == pytest.approx([0.0, np.tanh(1.0)])


# --------------------------------------------------------------------------- errors users should get
def _too_big(x):
    if x.sum() > 100:
        raise ValueError("too big")
    return x * 2


def test_raise_in_a_branch_the_capture_does_not_take_raises_at_run_time(compiler):
    cf = tj.script(_too_big, compiler=compiler)
    assert cf(T(1.0, 2.0)).tolist() == [2.0, 4.0]          # captured: no error
    with pytest.raises(ValueError, match="too big"):        # the branch is taken: as in Python
        cf(T(100.0, 2.0))
    assert cf(T(3.0, 1.0)).tolist() == [6.0, 2.0]
    assert cf.cache_stats()["compiles"] == 1


def test_a_variable_bound_on_one_path_names_the_variable_and_the_if():
    def f(x):
        if x.sum() > 0:
            y = x * 2
        return y

    def g(x):
        if x.sum() > 0:
            y = x * 2
        return x + y

    def unused(x):
        if x.sum() > 0:
            y = x * 2   # noqa: F841 - bound on one path and never read: fine, as in Python
        return x + 1

    line = f.__code__.co_firstlineno + 1
    with pytest.raises(ScriptError, match=rf"`y` is assigned on only one path of the if/else at .*test_script.py:{line} "
                                          r"and returned from the function"):
        tj.script(f, compiler="interpret")(T(1.0))
    line = g.__code__.co_firstlineno + 1
    with pytest.raises(ScriptError, match=rf"`y` .* if/else at .*test_script.py:{line} and read at .*test_script.py:{line + 2}"):
        tj.script(g, compiler="interpret")(T(1.0))
    assert tj.script(unused, compiler="interpret")(T(1.0)).tolist() == [2.0]


def _halve(x, n: int):
    if n <= 0:
        return x
    return _halve(x * 0.5, n - 1)


def test_recursion_says_it_cannot_be_scripted():
    with pytest.raises(ScriptError, match=r"recursion cannot be compiled: `_halve` \(test_script.py:\d+\) calls itself"):
        tj.script(_halve, compiler="interpret")(T(1.0), 3)
    # under trace the int is specialized, so the recursion ends at capture
    assert tj.trace(_halve, compiler="interpret")(T(1.0), 3).tolist() == [0.125]


def test_a_functools_wraps_wrapper_is_scripted_as_itself():
    def inner(x):
        return x * 2

    @functools.wraps(inner)
    def wrapper(x):
        return inner(x) + 1 if x.sum() > 0 else inner(x) - 1

    cf = tj.script(wrapper, compiler="interpret")
    assert cf(T(1.0)).tolist() == [3.0] and cf(T(-1.0)).tolist() == [-3.0]
    assert cf.cache_stats()["compiles"] == 1


class _Base:
    def forward(self, x):
        return x * 2


class _WithSuper(_Base):
    def forward(self, x):
        y = super().forward(x)
        if y.sum() > 0:
            return y + 1
        return y - 1


class _WithoutSuper(_Base):
    def forward(self, x):
        if x.sum() > 0:
            return x + 1
        return x - 1


def test_zero_argument_super_in_a_scripted_method_and_a_method_without_it():
    import sys
    mod = sys.modules["tracejit.jit.script"]   # (tracejit.jit.script is the decorator)
    for obj, pos, neg in ((_WithSuper(), [4.0, 6.0], [-6.0, -8.0]), (_WithoutSuper(), [2.5, 3.5], [-3.5, -4.5])):
        conv = mod.convert(obj.forward)
        src = conv.__func__.__tracejit_source__
        assert ("super(__class__, self)" in src) == isinstance(obj, _WithSuper)
        check_against_eager(obj.forward, [(T(1.5, 2.5),), (T(-2.5, -3.5),)])
        np.testing.assert_allclose(_np(tj.script(obj.forward, compiler="interpret")(T(1.5, 2.5))), pos)
        np.testing.assert_allclose(_np(tj.script(obj.forward, compiler="interpret")(T(-2.5, -3.5))), neg)


def _branchy(x):
    if x.sum() > 0:
        return x * 2
    return x


def test_converted_source_is_the_rewritten_function():
    import sys
    src = sys.modules["tracejit.jit.script"].convert(_branchy).__tracejit_source__
    assert "__tj.cond_return(x.sum() > 0" in src and src.splitlines()[0] == "def _branchy(x):"


def _straight(x, w):
    y = (x @ w).relu().reshape(-1, 2)       # (-1, a unary minus, is no control flow)
    return y.sum(1) * 2 + (y.shape[0] < 3)   # (nor one comparison)


def _chained(x):
    return x * (0 < x.shape[0] < 3)


def _negated(x):
    return x * (not x.shape[0])


def _straight_try(x):
    try:
        return x + 1
    finally:
        pass


class _StraightWithSuper(_Base):
    def forward(self, x):
        return super().forward(x) * 3


def test_a_function_without_control_flow_is_its_own_conversion():
    # Nothing for the rewrite to change: tracing the function itself gives the program,
    # and the first call does not compile a copy of it.
    import sys
    mod = sys.modules["tracejit.jit.script"]
    assert mod.convert(_straight) is _straight
    for f in (_branchy, _chained, _negated):   # rewritten: a new function
        assert mod.convert(f) is not f
    obj = _StraightWithSuper()
    assert mod.convert(obj.forward).__func__ is _StraightWithSuper.forward
    with pytest.raises(ScriptError, match="try/except"):   # still refused, control flow or not
        mod.convert(_straight_try)
    x, w = T([[1.0, -2.0], [3.0, 0.5]]), T([[0.5, 1.0], [-1.0, 2.0]])
    np.testing.assert_allclose(_np(tj.script(_straight)(x, w)), _np(_straight(x, w)))
    check_against_eager(obj.forward, [(T(1.5, -2.5),)])
