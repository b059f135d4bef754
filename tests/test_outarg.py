"""tracejit.<fn>'s out= wrappers (tracejit/outarg.py): the wrapper made with the op
function's own signature passes every argument form on unchanged and raises the op
function's own TypeError text; functions with *args/**kwargs keep the generic wrapper."""
import numpy as np
import pytest

import tracejit as tj
import tracejit.ops as ops
from tracejit.outarg import OUT_FUNCTIONS, _exact, with_out


def test_every_out_function_gets_the_exact_wrapper_and_its_signature():
    import inspect
    for name in OUT_FUNCTIONS:
        f = getattr(tj, name)
        assert f.__wrapped__ is getattr(ops, name)
        assert f.__name__ == getattr(ops, name).__name__
        assert inspect.signature(f) == inspect.signature(f.__wrapped__)
        assert _exact(f.__wrapped__, name) is not None, name  # all are plain signatures


def test_argument_forms_give_the_op_functions_results():
    x = tj.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    same = lambda a, b: a.dtype is b.dtype and a.shape == b.shape and np.array_equal(a.numpy(), b.numpy())
    assert same(tj.add(x, x, alpha=2), ops.add(x, x, alpha=2))
    assert same(tj.sum(x, dim=1, keepdim=True), ops.sum(x, 1, True))
    assert same(tj.sum(x, 1), ops.sum(x, dim=1))
    assert same(tj.clamp(x, max=2.5), ops.clamp(x, None, 2.5))
    assert same(tj.tanh(input=x), ops.tanh(x))
    assert same(tj.where(x > 2, x, -x), ops.where(x > 2, x, -x))
    assert same(tj.div(x, 2.0, rounding_mode="floor"), ops.div(x, 2.0, rounding_mode="floor"))
    out = tj.empty(2, 3)
    assert tj.add(x, x, alpha=3, out=out) is out and same(out, ops.add(x, x, alpha=3))
    ids = tj.LongTensor(4)   # Tacotron's get_mask_from_lengths
    assert tj.arange(0, 4, out=ids) is ids and ids.tolist() == [0, 1, 2, 3]
    v, i = tj.empty(2, 3), tj.empty(2, 3, dtype=tj.int64)
    tj.sort(x, 1, True, out=(v, i))
    assert same(v, ops.sort(x, 1, True)[0])


def _message(fn, *args, **kwargs):
    with pytest.raises(TypeError) as e:
        fn(*args, **kwargs)
    return str(e.value)


@pytest.mark.parametrize("call", [
    ("tanh", (), {}), ("tanh", (1, 2), {}), ("tanh", (1,), {"foo": 1}),
    ("add", (1, 2, 3), {}), ("sum", (), {"dim": 0}), ("clamp", (1, 2, 3, 4), {}),
])
def test_wrong_calls_raise_the_op_functions_own_message(call):
    name, args, kwargs = call
    assert _message(getattr(tj, name), *args, **kwargs) == _message(getattr(ops, name), *args, **kwargs)


def test_out_with_grad_still_refused():
    with pytest.raises(RuntimeError, match="out=.*automatic differentiation"):
        tj.tanh(tj.ones(2, requires_grad=True), out=tj.empty(2))


def test_varargs_functions_keep_the_generic_wrapper():
    def f(*xs, scale=1.0):
        return ops.mul(xs[0], scale)
    assert _exact(f, "f") is None
    g = with_out(f, "f")
    x = tj.ones(3)
    out = tj.empty(3)
    assert g(x, scale=2.0, out=out) is out and out.tolist() == [2.0, 2.0, 2.0]
    assert g(x).tolist() == [1.0, 1.0, 1.0]


def test_forwarded_tensor_methods_pass_arguments_and_errors_through():
    # tensor_operators.py: after its first call a forwarded method has the op's signature
    x = tj.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    for _ in range(2):  # the first call (generic, then replaced) and the exact forwarder
        assert np.array_equal(x.sum(1, keepdim=True).numpy(), ops.sum(x, 1, True).numpy())
        assert np.array_equal(x.clamp(max=2.0).numpy(), ops.clamp(x, None, 2.0).numpy())
        assert x.reshape(3, 2).shape == (3, 2) and x.permute(1, 0).shape == (3, 2)
        assert _message(x.tanh, 1) == _message(ops.tanh, x, 1)
        assert _message(x.sum, foo=1) == _message(ops.sum, x, foo=1)
    # an op that is a plain function is the method itself (no forwarding frame)
    assert tj.Tensor.sum is ops.sum and tj.Tensor.clamp is ops.clamp and tj.Tensor.permute is ops.permute


def test_captured_ops_through_forwarders_record_the_users_line():
    """The forwarders (tj.tanh with its out=, Tensor methods) are tracejit frames: a captured
    op's location is the caller's line, not the forwarder's generated code."""
    from inputs import captured_graph

    def f(x):
        a = tj.tanh(x)          # an out= wrapper
        return a.exp().sum()    # Tensor methods

    g = captured_graph(f, tj.ones(3))
    assert len(g.eqns) >= 3
    here = __file__
    assert all(e.loc is not None and e.loc[0] == here for e in g.eqns), [e.loc for e in g.eqns]


def test_out_dtype_follows_pytorch():
    torch = pytest.importorskip("torch")
    v = [0.5, 0.5, 0.7]
    for L in (torch, tj):   # (sum/cumsum compute in out's dtype; a float result can't go into ints)
        x = L.tensor(v)
        assert L.sum(x, 0, out=L.empty((), dtype=L.long)).item() == 0
        assert L.cumsum(x, 0, out=L.empty(3, dtype=L.long)).tolist() == [0, 0, 0]
        assert L.add(x.long(), 1, out=L.empty(3)).tolist() == [1.0, 1.0, 1.0]
        for call in (lambda: L.add(x, 1, out=L.empty(3, dtype=L.long)),
                     lambda: L.cat([x, x], out=L.empty(6, dtype=L.int32))):
            with pytest.raises((RuntimeError, TypeError), match="can't be cast to the desired output"):
                call()


def test_out_of_another_shape_is_resized_in_a_compiled_function():
    def f(x):
        o = tj.empty(0)
        return o, tj.mul(x, 2, out=o)
    x = tj.tensor([0.5, 0.5, 0.7])
    o, r = tj.compile(f)(x)
    assert o.tolist() == r.tolist() == pytest.approx([1.0, 1.0, 1.4])


@pytest.mark.parametrize("form", ["add(a[:-1], 1, out=a[1:])", "neg(a[:-1], out=a[1:])", "add(a, a[0], out=a)",
                                  "add(a, 1, out=a)", "add(a[:3], a[3:], out=a[3:])", "mul(a[:3], a[3:], out=a[:3])",
                                  "cat([a[:2], a[2:4]], out=a[1:5])", "cat([a[:1], a[5:]], out=a[2:4])"])
def test_out_partly_sharing_an_input_raises_as_pytorch(form):
    torch = pytest.importorskip("torch")
    a = torch.arange(6.0)
    try:
        eval(form, {"add": torch.add, "neg": torch.neg, "mul": torch.mul, "cat": torch.cat, "a": a})
        want = None
    except RuntimeError as e:
        want = str(e)
    b = tj.arange(6.0)
    call = lambda: eval(form, {"add": tj.add, "neg": tj.neg, "mul": tj.mul, "cat": tj.cat, "a": b})   # noqa: E731
    if want is None:
        call()
        assert b.tolist() == a.tolist()
    else:
        with pytest.raises(RuntimeError) as got:
            call()
        assert str(got.value).endswith(want) and b.tolist() == list(range(6))


@pytest.mark.parametrize("name, args", [("floor", (0,)), ("remainder", (0, 1)), ("eq", (0, 1)),
                                        ("atan2", (0, 1)), ("logaddexp", (0, 1)), ("cumprod", (0, "dim")),
                                        ("var", (0, "dim")), ("argmin", (0, "dim")), ("logsumexp", (0, "dim"))])
def test_elementwise_functions_scans_and_reductions_take_out_as_pytorchs(name, args):
    torch = pytest.importorskip("torch")
    x = np.array([[0.3, -1.6], [2.2, 0.9]], dtype=np.float32)
    got = []
    for m in (torch, tj):
        operands = [m.tensor(x + a) if a != "dim" else 0 for a in args]
        out = m.empty(0, dtype=getattr(m, str(getattr(m, name)(*operands).dtype).split(".")[-1]))
        assert getattr(m, name)(*operands, out=out) is out
        got.append(out.numpy())
    np.testing.assert_allclose(got[1], got[0], rtol=1e-6)


@pytest.mark.parametrize("name, args, dtype", [("argmax", (0, "dim"), "float32"), ("mm", (0, 1), "float64"),
                                               ("float_power", (0, 1), "float32"), ("take", (0, "i"), "float64")])
def test_an_out_of_another_dtype_is_refused_where_pytorch_refuses_it(name, args, dtype):
    torch = pytest.importorskip("torch")
    x = np.array([[0.3, 1.6], [2.2, 0.9]], dtype=np.float32)
    for m in (torch, tj):
        operands = [m.tensor(x + a) if a not in ("dim", "i") else 0 if a == "dim" else m.tensor([0, 3])
                    for a in args]
        out = m.full((2,), 7.0, dtype=getattr(m, dtype))
        with pytest.raises(RuntimeError, match="dtype"):
            getattr(m, name)(*operands, out=out)
        assert out.tolist() == [7.0, 7.0]


def test_resizing_an_out_that_had_elements_warns_as_pytorch():
    import warnings
    torch = pytest.importorskip("torch")
    got = []
    for m in (torch, tj):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            out = m.full((5,), 7.0)
            m.add(m.ones(2, 3), 1, out=out)
            m.add(m.ones(2, 3), 1, out=m.empty(0))   # (an empty out is resized silently)
        assert tuple(out.shape) == (2, 3) and out.tolist() == [[2.0] * 3] * 2
        assert [x.filename for x in w] == [__file__]
        got.append(str(w[0].message))
    assert got[0].startswith(got[1])


@pytest.mark.parametrize("form", ["argmax(x, 1, out=m.empty(0, dtype=m.long))",
                                  "eq(x, 0, out=m.empty(0, dtype=m.bool))",
                                  "searchsorted(x.detach(), x, out=m.empty(0, dtype=m.long))",
                                  "add(x, 1, out=m.empty(0))", "sort(x, out=(m.empty(0), m.empty(0, dtype=m.long)))",
                                  "cat([x.detach(), x], out=m.empty(0))"])
def test_out_is_refused_only_for_a_result_taking_part_in_autograd(form):
    torch = pytest.importorskip("torch")
    got = []
    for m in (torch, tj):
        x = m.tensor([[0.3, -1.6], [2.2, 0.9]], requires_grad=True)
        try:
            r = eval(form, {"m": m, "x": x, **{n: getattr(m, n) for n in ("argmax", "eq", "searchsorted", "add",
                                                                            "sort", "cat")}})
            got.append([np.asarray(t.detach().numpy()).tolist() for t in (r if isinstance(r, tuple) else (r,))])
        except RuntimeError as e:
            assert "don't support automatic differentiation" in str(e)
            got.append(None)
    assert got[1] == got[0]


@pytest.mark.parametrize("name", ["neg", "negative", "abs", "absolute", "ceil", "floor", "trunc", "fix", "frac",
                                  "sign", "sgn", "signbit", "nan_to_num", "heaviside", "all", "any"])
@pytest.mark.parametrize("dtype", ["float64", "float16", "int64", "bool"])
def test_elementwise_functions_keeping_the_dtype_refuse_another_as_pytorch(name, dtype):
    torch = pytest.importorskip("torch")
    x = np.array([[0.3, -1.6], [2.2, 0.0]], dtype=np.float32)
    got = []
    for m in (torch, tj):
        operands = (m.tensor(x),) * (2 if name == "heaviside" else 1)
        out = m.empty(0, dtype=getattr(m, dtype))
        try:
            getattr(m, name)(*operands, out=out)
            got.append(out.numpy().astype(np.float64).tolist())
        except RuntimeError as e:
            assert "type" in str(e) or "support" in str(e)
            got.append(None)
    assert got[1] == got[0]


@pytest.mark.parametrize("form", ["clamp(x, 0, 1, out=o)", "clamp(x, b, out=o)", "clip(x, max=0.5, out=o)",
                                  "clip(x, b, b + 1, out=o)", "clamp_min(x, 0, out=o)", "clamp_min(x, b, out=o)",
                                  "clamp_max(x, 0, out=o)", "clamp_max(x, b, out=o)"])
@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_clamps_take_another_out_dtype_only_with_a_tensor_bound_as_pytorch(form, dtype):
    torch = pytest.importorskip("torch")
    got = []
    for m in (torch, tj):
        o = m.empty(0, dtype=getattr(m, dtype))
        names = {n: getattr(m, n) for n in ("clamp", "clip", "clamp_min", "clamp_max")}
        try:
            eval(form, {"x": m.tensor([0.3, -1.6, 2.0]), "b": m.zeros(3), "o": o, **names})
            got.append(o.tolist())
        except RuntimeError:
            got.append(None)
    assert got[1] == pytest.approx(got[0]) if got[0] is not None else got[1] is None
