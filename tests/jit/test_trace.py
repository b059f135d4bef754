"""@tracejit.trace: arguments and results, specialization of Python values, errors for
value-dependent Python control flow, in-place ops, custom Functions, nesting."""
from __future__ import annotations

import inspect
from collections import namedtuple

import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import TraceError


def _np(t):
    return t.detach().numpy()


def _close(a, b):
    np.testing.assert_allclose(_np(a), _np(b), rtol=1e-5, atol=1e-6)


def _line_of(fn, text: str) -> int:
    """The absolute line number of the first line of `fn` containing `text`."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, s in enumerate(lines) if text in s)


# --------------------------------------------------------------------------- arguments/results
Pair = namedtuple("Pair", "a b")


def test_nested_tuple_list_dict_arguments_and_results(compiler):
    def f(xs, d, pair):
        a, (b, c) = xs
        s = a + b * c + d["w"] * d["k"]
        return {"sum": s, "parts": [a * 2, (pair.a - pair.b,)], "label": d["name"]}, Pair(s, 3)

    cf = tj.trace(f, compiler=compiler)
    rng = np.random.default_rng(0)
    t = [tj.tensor(rng.standard_normal(3).astype(np.float32)) for _ in range(6)]
    args = ((t[0], [t[1], t[2]]), {"w": t[3], "k": 2.0, "name": "lbl"}, Pair(t[4], t[5]))
    got = cf(*args)
    exp = f(*args)
    assert got[0].keys() == exp[0].keys()
    _close(got[0]["sum"], exp[0]["sum"])
    _close(got[0]["parts"][0], exp[0]["parts"][0])
    assert isinstance(got[0]["parts"][1], tuple)
    _close(got[0]["parts"][1][0], exp[0]["parts"][1][0])
    assert got[0]["label"] == "lbl"
    assert isinstance(got[1], Pair) and got[1].b == 3
    _close(got[1].a, exp[1].a)
    # same structure again: a cache hit; new tensor values are used
    args2 = ((t[1], [t[0], t[2]]), {"w": t[3], "k": 2.0, "name": "lbl"}, Pair(t[4], t[5]))
    _close(cf(*args2)[0]["sum"], f(*args2)[0]["sum"])
    st = cf.cache_stats()
    assert (st["compiles"], st["hits"]) == (1, 1)


def test_nested_argument_structure_change_recompiles():
    def f(xs):
        return sum(xs)

    cf = tj.trace(f, compiler="interpret")
    assert cf([tj.ones(2), tj.ones(2)]).tolist() == [2.0, 2.0]
    assert cf([tj.ones(2), tj.ones(2), tj.ones(2)]).tolist() == [3.0, 3.0]
    assert cf((tj.ones(2),)).tolist() == [1.0, 1.0]
    assert cf.cache_stats()["compiles"] == 3


def test_flat_call_never_uses_an_entry_captured_from_nested_arguments():
    def f(a, b):
        return b * 2 if isinstance(a, list) else a + b

    cf = tj.trace(f, compiler="interpret")
    x = tj.ones(2)
    assert cf([], x).tolist() == [2.0, 2.0]      # leaves: [x]
    assert cf(x, x * 5).tolist() == [6.0, 6.0]   # leaf 0 has the same type: must not hit


def test_keyword_arguments_defaults_varargs():
    def f(x, *rest, scale=2.0, **extra):
        return (x + sum(rest)) * scale + extra.get("shift", 0)

    cf = tj.trace(f, compiler="interpret")
    one = tj.ones(2)
    assert cf(one).tolist() == [2.0, 2.0]
    assert cf(one, one, one, scale=3.0, shift=1).tolist() == [10.0, 10.0]
    assert cf(x=one).tolist() == [2.0, 2.0]  # same signature as the first call: a hit
    assert cf.cache_stats()["hits"] == 1


def test_function_without_a_name_can_be_traced():
    import functools

    cf = tj.trace(functools.partial(lambda x, k: x * k, k=3.0), compiler="interpret")
    assert cf(tj.ones(2)).tolist() == [3.0, 3.0]


# --------------------------------------------------------------------------- specialization
def test_python_scalars_are_specialized_and_guarded():
    """Strings, bools and ints are specialized; an int seen with a second value becomes a
    runtime input (torch.compile's automatic dynamic), so later values reuse its entry."""
    def f(x, n, mode):
        return x * n if mode == "mul" else x + n

    cf = tj.trace(f, compiler="interpret")
    x = tj.ones(2)
    assert cf(x, 2, "mul").tolist() == [2.0, 2.0]
    assert "mul %x 2.0" in cf.entries[0].graph.text(False)  # baked in as a constant
    assert cf(x, 2, "mul").tolist() == [2.0, 2.0]
    assert cf(x, 3, "mul").tolist() == [3.0, 3.0]
    assert "%n: i64[]" in cf.entries[1].graph.text(False)    # now an input of the graph
    assert cf(x, 7, "mul").tolist() == [7.0, 7.0]            # (a hit)
    assert cf(x, 3, "add").tolist() == [4.0, 4.0]
    assert cf(x, 3.0, "add").tolist() == [4.0, 4.0]  # float 3.0 is not int 3: its own entry
    assert cf(x, True, "add").tolist() == [2.0, 2.0]
    assert tj.trace(f, compiler="interpret")(tj.ones(2, dtype=tj.int32), 5, "mul").dtype is tj.int32
    st = cf.cache_stats()
    assert (st["compiles"], st["hits"]) == (5, 2)
    r = st["recompile_reasons"]
    assert r[0] == "input 'n': value guard failed: 2 -> 3"
    assert r[1] == "input 'mode': value guard failed: 'mul' -> 'add'"
    assert r[2] == "input 'n': type guard failed: int -> float"


def test_int_argument_made_dynamic_stays_exact_and_weak():
    """A runtime int keeps Python-int semantics: exact beyond float32's 2**24, weakly typed
    (an int32 tensor stays int32), and code needing its value (a view's shape) specializes
    it again."""
    f = tj.compile(lambda x, n: x + n)
    xi = tj.ones(3, dtype=tj.int32)
    for n in (1, 2, 2 ** 30 + 1):
        out = f(xi, n)
        assert out.dtype is tj.int32 and out.tolist() == [n + 1] * 3
    g = tj.compile(lambda x, n: x.view(n, -1).sum(0))
    for n in (1, 2, 3, 6, 2):
        assert g(tj.arange(6.0), n).tolist() == tj.arange(6.0).view(n, -1).sum(0).tolist()
    assert g.cache_stats()["eager_fallbacks"] == 0


def test_float_arguments_are_runtime_inputs():
    def f(x, lr):
        return x - lr * x

    cf = tj.trace(f, compiler="interpret")
    x = tj.ones(2)
    for lr in (0.5, 0.25, -0.0, 0.0, float("nan"), 3.0):
        np.testing.assert_array_equal(cf(x, lr).numpy(), (x - lr * x).numpy())
    assert cf.cache_stats()["compiles"] == 1
    assert "%lr: f32[]" in cf.entries[0].graph.text(False)


def test_numpy_float64_arguments_are_float_runtime_inputs():
    cf = tj.trace(lambda x, tau: (x / tau).softmax(-1), compiler="interpret")
    x = tj.tensor([1.0, 2.0, 4.0])
    for tau in (1.0, np.float64(0.9), np.float64(0.5), 2.0):   # an annealed temperature
        out = cf(x, tau)
        assert out.dtype is tj.float32
        np.testing.assert_allclose(out.numpy(), (x / float(tau)).softmax(-1).numpy(), rtol=1e-6)
    assert cf.cache_stats()["compiles"] == 1, cf.cache_stats()["recompile_reasons"]


def test_branch_on_a_float_is_guarded_on_its_outcome_not_its_value():
    def f(x, w_small, w_big, prev_loss):
        w = w_small if prev_loss < 5.0 else w_big
        return (x * w).sum() * prev_loss

    cf = tj.trace(f, compiler="interpret")
    x, a, b = tj.ones(3), tj.full((3,), 2.0), tj.full((3,), 3.0)
    for loss in (1.0, 2.0, 7.0, 4.9, 100.0, -3.0, 5.0):
        expect = (6.0 if loss < 5.0 else 9.0) * loss
        assert cf(x, a, b, loss).item() == pytest.approx(expect)
    st = cf.cache_stats()
    assert st["compiles"] == 2
    line = f.__code__.co_firstlineno + 1
    assert st["recompile_reasons"] == [
        f"the Python branch at test_trace.py:{line} on (prev_loss < 5.0) was True at capture, now False"]
    text = str(cf.explain(x, a, b, 1.0))
    assert f"(prev_loss < 5.0) is True  [Python branch at test_trace.py:{line}]" in text


def test_a_float_used_as_an_op_parameter_is_specialized():
    def f(x, lo):
        return x.clamp(min=lo) + tj.full((3,), lo)   # clamp takes it as an operand; full's fill is a parameter

    cf = tj.trace(f, compiler="interpret")
    x = tj.tensor([-1.0, 0.0, 1.0])
    assert cf(x, 0.5).tolist() == [1.0, 1.0, 1.5]
    assert cf(x, 0.5).tolist() == [1.0, 1.0, 1.5]
    assert cf(x, -0.5).tolist() == [-1.0, -0.5, 0.5]
    assert cf.cache_stats()["compiles"] == 2
    line = f.__code__.co_firstlineno + 1
    assert cf.cache_stats()["recompile_reasons"] == [
        f"parameter 'value' of full at test_trace.py:{line} specialized lo to 0.5, now -0.5"]


def test_negative_zero_is_not_zero_to_a_guard():
    def f(x, c):
        return x / c if c == 0.0 else x  # the decision is the same for 0.0 and -0.0 ...

    def g(x, c):
        return x / float(c)               # ... a specialized value is not

    x = tj.ones(1)
    cf, cg = tj.trace(f, compiler="interpret"), tj.trace(g, compiler="interpret")
    with np.errstate(divide="ignore"):
        assert cf(x, 0.0).item() == float("inf") and cf(x, -0.0).item() == float("-inf")
        assert cg(x, 0.0).item() == float("inf") and cg(x, -0.0).item() == float("-inf")
    assert cf.cache_stats()["compiles"] == 1 and cg.cache_stats()["compiles"] == 2


def test_control_flow_on_guarded_values_is_fine_under_trace():
    def f(x, n):
        if n > 2 and x.shape[0] == 3:
            return x * n
        return x

    cf = tj.trace(f, compiler="interpret")
    assert cf(tj.ones(3), 5).tolist() == [5.0] * 3
    assert cf(tj.ones(3), 1).tolist() == [1.0] * 3
    assert cf(tj.ones(4), 5).tolist() == [1.0] * 4


def test_if_on_tensor_value_raises_trace_error_naming_the_line():
    def f(x):
        if x.sum() > 0:
            return x
        return -x

    cf = tj.trace(f, compiler="interpret")
    with pytest.raises(TraceError) as ei:
        cf(tj.ones(2))
    msg = str(ei.value)
    assert f"{__file__}:{_line_of(f, 'if x.sum()')}" in msg
    assert "@tracejit.script" in msg
    assert cf.cache_stats()["entries"] == 0


@pytest.mark.parametrize("expr", ["x.sum().item()", "float(x.sum())", "int(x.max())",
                                  "x.tolist()", "x.numpy()", "bool(x.all())"])
def test_reading_a_traced_value_raises_trace_error(expr):
    ns = {}
    exec(f"def f(x):\n    v = {expr}\n    return x\n", ns)
    cf = tj.trace(ns["f"], compiler="interpret")
    with pytest.raises(TraceError, match="@tracejit.script") as ei:
        cf(tj.ones(2))
    assert "<string>:2" in str(ei.value)


def test_item_error_names_user_line():
    def f(x):
        return x * x.item()

    with pytest.raises(TraceError, match=r"tensor\.item\(\)") as ei:
        tj.trace(f, compiler="interpret")(tj.ones(1))
    assert f"{__file__}:{_line_of(f, 'x.item()')}" in str(ei.value)


def test_closure_tensors_are_inputs_read_every_call():
    w = tj.ones(2)

    def f(x):
        return x * w

    cf = tj.trace(f, compiler="interpret")
    assert cf(tj.ones(2)).tolist() == [1.0, 1.0]
    with tj.no_grad():
        w.mul_(3)
    assert cf(tj.ones(2)).tolist() == [3.0, 3.0]
    assert cf.cache_stats()["compiles"] == 1
    assert len(cf.entries[0].graph.inputs) == 2  # x and w: w is not a constant


# --------------------------------------------------------------------------- in-place
def test_inplace_ops_on_tracers_match_eager(compiler):
    def f(x, y):
        z = x * 2
        z.add_(1)
        z.mul_(y)
        z[0] = 5.0
        z.clamp_(max=4.0)
        return z

    cf = tj.trace(f, compiler=compiler)
    x, y = tj.tensor([1.0, 2.0, 3.0]), tj.tensor([0.5, 1.0, 2.0])
    _close(cf(x, y), f(x, y))
    assert cf(x, y).tolist() == [4.0, 4.0, 4.0] and f(x, y).tolist() == [4.0, 4.0, 4.0]


def test_mutation_of_input_tensors_is_written_back(compiler):
    def f(x, y, n):
        x.add_(n)
        y.mul_(2)
        y.sub_(x)
        return x + y

    cf = tj.trace(f, compiler=compiler)
    for _ in range(2):  # capture, then a cache hit
        xe, ye = tj.tensor([1.0, 2.0]), tj.tensor([3.0, 4.0])
        xc, yc = tj.tensor([1.0, 2.0]), tj.tensor([3.0, 4.0])
        vx, vy = xc._version, yc._version
        re, rc = f(xe, ye, 1), cf(xc, yc, 1)
        _close(rc, re)
        _close(xc, xe)
        _close(yc, ye)
        assert xc._version > vx and yc._version > vy
    assert cf.cache_stats()["compiles"] == 1


def test_inplace_through_autograd_matches_eager():
    def f(x):
        y = x * 3
        y.mul_(x)
        y[1] = 0.0
        return y.sum()

    xe = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    xc = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    f(xe).backward()
    tj.trace(f, compiler="interpret")(xc).backward()
    assert xc.grad.tolist() == xe.grad.tolist() == [6.0, 0.0, 18.0]


def test_inplace_on_leaf_requiring_grad_is_the_eager_error():
    def f(x):
        x.add_(1)
        return x

    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        tj.trace(f, compiler="interpret")(tj.ones(2, requires_grad=True))


@pytest.mark.parametrize("compiler", ["interpret", "numba"])
def test_inplace_on_an_argument_with_a_history_matches_torch(compiler):
    # nn.ReLU(inplace=True) compiled on its own (a submodule after a graph break): its
    # input is an activation, which PyTorch lets it overwrite; the history goes on from it
    torch = pytest.importorskip("torch")
    a = np.array([1.0, -2.0, 3.0, -0.5], np.float32)

    def f(m, x):
        x.relu_()
        return x * 2
    res = []
    for m, wrap in ((torch, lambda g: g), (tj, lambda g: tj.trace(g, compiler=compiler))):
        w = m.tensor(a, requires_grad=True)
        h = w * 3
        g = wrap(lambda x: f(m, x))
        y = g(h)
        (y * m.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
        res.append((y.detach().numpy(), h.detach().numpy(), w.grad.numpy()))
        if m is tj:
            # a leaf that requires grad, later, is refused as eagerly, and keeps its values
            leaf = tj.tensor(a, requires_grad=True)
            with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
                g(leaf)
            assert leaf.tolist() == a.tolist()
            with tj.no_grad():
                g(leaf)
            assert leaf.tolist() == np.maximum(a, 0).tolist()
    for got, want in zip(res[1], res[0]):
        np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- custom Functions
class ScaledExp(tj.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        y = (x * k).exp()
        ctx.save_for_backward(y)
        ctx.k = k
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        # deliberately not the true derivative, so the test sees the custom rule is used
        return g * y * ctx.k * 2.0, None


def test_custom_function_forward_and_grads_match_eager(compiler):
    def f(x, w):
        return (ScaledExp.apply(x * w, 0.5) + x).sum()

    cf = tj.trace(f, compiler=compiler)
    x0 = np.array([0.1, -0.4, 0.3], np.float32)
    w0 = np.array([1.0, 2.0, -1.0], np.float32)
    xe, we = tj.tensor(x0, requires_grad=True), tj.tensor(w0, requires_grad=True)
    xc, wc = tj.tensor(x0, requires_grad=True), tj.tensor(w0, requires_grad=True)
    le, lc = f(xe, we), cf(xc, wc)
    _close(lc, le)
    le.backward()
    lc.backward()
    _close(xc.grad, xe.grad)
    _close(wc.grad, we.grad)
    # the custom backward (2x the true derivative) was used, not autodiff of forward
    true_dx = np.exp(0.5 * x0 * w0) * 0.5 * w0 + 1
    assert not np.allclose(_np(xc.grad), true_dx)
    assert "custom_function[fn_cls=ScaledExp" in cf.entries[0].graph.text(False)


# --------------------------------------------------------------------------- composition
def test_compiled_function_called_inside_another_is_inlined():
    @tj.script(compiler="interpret")
    def inner(x, t: float):
        if x.sum() > t:
            return x * 2
        return x * 3

    @tj.trace(compiler="interpret")
    def outer(x):
        return inner(x, 0.0) + 1

    assert outer(tj.ones(2)).tolist() == [3.0, 3.0]
    assert outer(-tj.ones(2)).tolist() == [-2.0, -2.0]  # the cond was captured, not specialized
    assert outer.cache_stats()["compiles"] == 1
    assert inner.cache_stats()["compiles"] == 0


def test_detach_inside_a_compiled_function_stops_gradients():
    def f(x):
        return (x * x.detach()).sum()

    x = tj.tensor([1.0, 2.0], requires_grad=True)
    cf = tj.trace(f, compiler="interpret")
    cf(x).backward()
    assert x.grad.tolist() == [1.0, 2.0]  # d/dx (x * c) = c, not 2x
    assert "detach" in cf.entries[0].graph.text(False)


@pytest.mark.parametrize("compiler", ["interpret", None])
def test_a_detached_output_requires_no_grad_as_in_eager(compiler):
    # A compiled call gave an output computed through detach() requires_grad and a grad_fn,
    # and batch_norm's functional then made the running statistics it writes back into its
    # arguments part of the graph (requires_grad True, a grad_fn: not leaves any more)
    import tracejit.nn.functional as F
    kw = {} if compiler is None else {"compiler": compiler}

    def f(x):
        return (x * 2).detach() + 1, x * 3

    x = tj.tensor([1.0, 2.0], requires_grad=True)
    d, y = tj.trace(f, compile="sync", **kw)(x)
    e, z = f(x)
    assert (d.requires_grad, d.grad_fn) == (e.requires_grad, e.grad_fn) == (False, None)
    assert y.requires_grad and z.requires_grad
    assert d.tolist() == [3.0, 5.0]

    xs = tj.tensor(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32), requires_grad=True)
    rm, rv = tj.zeros(3), tj.ones(3)
    g = tj.trace(lambda x, m, v: F.batch_norm(x, m, v, training=True).sum(), compile="sync", **kw)
    g(xs, rm, rv).backward()
    em, ev = tj.zeros(3), tj.ones(3)
    F.batch_norm(xs.detach(), em, ev, training=True)
    for t, want in ((rm, em), (rv, ev)):
        assert not t.requires_grad and t.grad_fn is None
        np.testing.assert_allclose(t.numpy(), want.numpy(), rtol=1e-6)


def test_softmax_gradient_through_trace_matches_eager():
    def f(x):
        return (x.softmax(-1) * tj.tensor([1.0, 2.0, 3.0])).sum()

    x0 = [[0.1, 0.5, -0.2], [1.0, 0.0, 2.0]]
    xe, xc = tj.tensor(x0, requires_grad=True), tj.tensor(x0, requires_grad=True)
    f(xe).backward()
    tj.trace(f, compiler="interpret")(xc).backward()
    _close(xc.grad, xe.grad)


def test_backward_inside_a_compiled_function_is_a_clear_error():
    def f(x):
        (x * 2).sum().backward()
        return x

    with pytest.raises(TraceError, match="backward"):
        tj.trace(f, compiler="interpret")(tj.ones(2, requires_grad=True))


def test_no_grad_block_inside_a_compiled_function(compiler):
    def f(x, w):
        with tj.no_grad():
            s = x * w  # a constant as far as gradients go
        return (s * w).sum()

    w = tj.tensor([1.0, 2.0], requires_grad=True)
    tj.trace(f, compiler=compiler)(tj.tensor([3.0, 4.0]), w).backward()
    assert w.grad.tolist() == [3.0, 8.0]  # d/dw (c * w) = c = x * w; not 2 * x * w


def _seed_model(x, y, w1, w2a, w2b, prev_loss):
    w2 = w2a if prev_loss < 5.0 else w2b
    y_pred = x.mm(w1).clamp(min=0).mm(w2)
    return (y_pred - y).pow(2).sum()


def test_seed_model_trains_40_steps_with_the_branch_flipping(compiler):
    rng = np.random.default_rng(0)
    x = tj.tensor(rng.standard_normal((16, 20), dtype=np.float32))
    y = tj.tensor(rng.standard_normal((16, 3), dtype=np.float32))

    def params():
        r = np.random.default_rng(1)
        return [tj.tensor(r.standard_normal(s, dtype=np.float32) * 0.3, requires_grad=True)
                for s in ((20, 8), (8, 3), (8, 3))]

    cm = tj.trace(_seed_model, compiler=compiler)
    eager_ps, compiled_ps = params(), params()
    prev = {"eager": 10.0, "compiled": 10.0}
    for step in range(40):
        for key, fn, ps in (("eager", _seed_model, eager_ps), ("compiled", cm, compiled_ps)):
            loss = fn(x, y, *ps, prev[key] if step % 4 else 1.0)   # every 4th step takes the other branch
            loss.backward()
            with tj.no_grad():
                for p in ps:
                    if p.grad is not None:
                        p -= 0.002 * p.grad
                        p.grad = None
            prev[key] = loss.item()   # the previous loss, as a Python float
        assert prev["compiled"] == pytest.approx(prev["eager"], rel=1e-5), step
        for pe, pc in zip(eager_ps, compiled_ps):
            np.testing.assert_allclose(pc.detach().numpy(), pe.detach().numpy(), rtol=1e-5, atol=1e-6)
    st = cm.cache_stats()
    assert st["compiles"] == 2 and st["eager_fallbacks"] == 0


def test_dict_keys_of_equal_value_but_other_type_are_other_entries():
    def f(d):
        (k, v), = d.items()
        return v * k                      # the key's type decides the result dtype

    cf = tj.trace(f, compiler="interpret")
    x = tj.ones(2, dtype=tj.int64)
    assert cf({1: x}).dtype == tj.int64
    assert cf({1.0: x}).dtype == tj.float32
    assert cf({True: x}).dtype == tj.int64
    assert cf.cache_stats()["compiles"] == 3


def test_a_changed_default_dtype_is_no_stale_capture():
    def f(x):
        return x.sum() + tj.zeros(3).sum() + tj.tensor(1.5)

    cf = tj.trace(f, compiler="interpret")
    x = tj.ones(2)
    try:
        for dt in (tj.float32, tj.float64, tj.float32):
            tj.set_default_dtype(dt)
            got, want = cf(x), f(x)
            assert got.dtype is want.dtype and got.item() == want.item() == 3.5
    finally:
        tj.set_default_dtype(tj.float32)
    assert cf.cache_stats()["entries"] == 2
