"""bf16 eager ops over the op database: each primitive's result on bf16 operands equals
the float32 primitive's result on the same values, rounded to bf16 (ops/bf16_eager.py).
A composite op rounds after each primitive it is made of."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tracejit as tj
from tracejit import bf16
from tracejit.compiler.cpu.gemm import bf16 as bf16_gemm
from tracejit.jit.interpreter import interpret
from tracejit.jit.ir import Var
from tracejit.jit.tracer import TraceContext
from tracejit.ops.eager import bind
from tracejit.ops.registry import Aval
from opdb import OPS, samples_for

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

BF16_OPS = [op for op in OPS if tj.float32 in op.dtypes and not op.random]


@pytest.fixture(autouse=True)
def _widened_gemm():
    # products in float32 (widened sgemm): the float32 op's own summation order, so the
    # comparison is exact (MKL's bf16 GEMM is held to the float64 product elsewhere)
    prev = bf16_gemm.force("float32")
    yield
    bf16_gemm.force(prev)


def _outs(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _equations(s, values):
    """The primitives the sample's op runs, each with its float32 operand values:
    [(eqn, operand values)], from a trace of the op run by the reference interpreter."""
    ctx = TraceContext()
    with ctx:
        tracers = [ctx.new_input(Aval(v.shape, tj.dtypes.as_dtype(v.dtype)), "") for v in values]
        out = _outs(s.fn(*tracers))
    if not all(isinstance(o, tj.Tensor) for o in out):
        return []
    graph = ctx.graph([ctx.atom(o) for o in out])
    env = dict(zip(graph.inputs, [tj.tensor(v) for v in values]))
    seen = []

    def record(e, outs):
        seen.append((e, [env[a] if isinstance(a, Var) else a.value for a in e.inputs]))
        env.update(zip(e.outs, outs))
    interpret(graph, [env[v] for v in graph.inputs], record=record)
    return seen


def _bf16_operand(v):
    return v.to(tj.bfloat16) if isinstance(v, tj.Tensor) and v.dtype is tj.float32 else v


def _widened(v):
    return v.float() if isinstance(v, tj.Tensor) and v.dtype is tj.bfloat16 else v


@pytest.mark.parametrize("op", BF16_OPS, ids=[op.name for op in BF16_OPS])
def test_each_primitive_on_bf16_is_its_float32_result_rounded(op):
    """Every primitive the op's samples reach, run on bf16 operands, gives the float32
    primitive's result on the same values rounded to bf16 once (floating results), or
    exactly it (integer and bool results, float32 results of mixed operands)."""
    for _, s in samples_for(op, (tj.float32,)):
        if not any(a.dtype.kind == "f" for a in s.inputs):
            continue
        values = [bf16.to_float32(bf16.to_bfloat16(a)) if a.dtype.kind == "f" else a for a in s.inputs]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                steps = _equations(s, values)
            except Exception:
                continue   # (not traceable: data-dependent shapes, a sample's own error)
            for e, vals in steps:
                if e.prim.kind == "control" or len(e.outs) != 1 or e.prim.name == "cast":
                    continue   # (casts are the conversions themselves: tests/test_bf16.py)
                b16 = [_bf16_operand(v) for v in vals]
                if not any(isinstance(v, tj.Tensor) and v.dtype is tj.bfloat16 for v in b16):
                    continue
                got = bind(e.prim, *b16, **e.params)
                want = bind(e.prim, *[_widened(v) for v in b16], **e.params)
                what = f"{s!r}: {e.prim.name}"
                if got.dtype is tj.bfloat16:
                    assert want.dtype is tj.float32, what
                    np.testing.assert_array_equal(got._data, bf16.to_bfloat16(want.detach().numpy()), err_msg=what)
                else:
                    assert got.dtype is want.dtype, what
                    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy(), err_msg=what)


def test_bf16_results_keep_pytorch_promotion():
    a = tj.tensor([1.5, -2.25], dtype=tj.bfloat16)
    assert (a + 1).dtype is tj.bfloat16 and (a * 2.5).dtype is tj.bfloat16
    assert (a + tj.tensor([1, 2])).dtype is tj.bfloat16
    assert (a + tj.tensor([1.0, 2.0])).dtype is tj.float32
    assert (a + tj.tensor([1.0, 2.0], dtype=tj.float16)).dtype is tj.float32
    assert (a > 0).dtype is tj.bool_ and a.sum().dtype is tj.bfloat16
    assert (a + 1).tolist() == [2.5, -1.25]


def test_bf16_gradients_flow_back_to_float32():
    w = tj.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    x = tj.tensor([[1.0, 2.0]], dtype=tj.bfloat16)
    (x @ w.bfloat16()).float().sum().backward()
    assert w.grad.dtype is tj.float32
    np.testing.assert_array_equal(w.grad.numpy(), [[1.0, 1.0], [2.0, 2.0]])


def test_the_primitive_check_reaches_the_core_primitives():
    """The check above is not vacuous: the op database's samples trace to these."""
    from opdb import OPS_BY_NAME
    reached = set()
    for name in ("add", "matmul", "softmax", "sum", "exp", "layer_norm", "relu"):
        for _, s in samples_for(OPS_BY_NAME[name], (tj.float32,)):
            values = [bf16.to_float32(bf16.to_bfloat16(a)) if a.dtype.kind == "f" else a for a in s.inputs]
            reached.update(e.prim.name for e, _ in _equations(s, values))
    assert {"add", "matmul", "softmax", "sum", "exp", "layer_norm", "relu"} <= reached


@pytest.mark.parametrize("n", [7, 5000])   # (numpy's form below the kernel's size, the kernel's above)
def test_round_bf16_is_the_two_casts_in_one(n):
    """round_bf16 holds the values ``x.bfloat16().float()`` holds: ties to even, NaN,
    infinities, overflow to infinity, subnormals and signed zeros included."""
    from tracejit.ops.bf16_eager import round_bf16
    special = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), np.nan, -np.inf, np.inf, 3.4e38, -0.0,
                        1e-40, 2 ** -133], np.float32)
    r = np.random.default_rng(n).standard_normal(n).astype(np.float32) * 100
    x = np.concatenate([special, r])
    got = round_bf16(tj.tensor(x)).numpy()
    want = tj.tensor(x).bfloat16().float().numpy()
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert got[0] == 1.0 and got[1] == 1 + 2 ** -6 and got[6] == np.inf   # (ties to even; overflow)
    with pytest.raises(tj.errors.DTypeError, match="round_bf16.*float64"):
        round_bf16(tj.tensor([1.0], dtype=tj.float64))


def test_round_bf16_gradient_is_rounded_as_the_two_casts_round_it():
    from tracejit.ops.bf16_eager import round_bf16
    r = np.random.default_rng(1)
    x = tj.tensor(r.standard_normal(300).astype(np.float32), requires_grad=True)
    c = r.standard_normal(300).astype(np.float32)
    x2 = tj.tensor(x.detach().numpy(), requires_grad=True)
    (round_bf16(x) * tj.tensor(c)).sum().backward()
    (x2.bfloat16().float() * tj.tensor(c)).sum().backward()
    assert x.grad.dtype is tj.float32
    np.testing.assert_array_equal(x.grad.numpy(), x2.grad.numpy())
    assert not np.array_equal(x.grad.numpy(), c)      # (the gradient was rounded)


def test_round_bf16_fuses_into_a_compiled_kernel():
    from tracejit.ops.bf16_eager import round_bf16
    x = tj.tensor(np.random.default_rng(2).standard_normal((64, 70)).astype(np.float32))
    f = tj.compile(lambda x: round_bf16(x * 3.0) + 1.0)
    f(x)
    tj.compiler.wait()
    got = f(x)
    np.testing.assert_array_equal(got.numpy(), (x * 3.0).bfloat16().float().numpy() + 1.0)
    groups = [ln for ln in str(f.explain(x)).splitlines() if ln.startswith("group ")]
    assert len(groups) == 1 and "mul, round_bf16, add" in groups[0]   # (no pass of its own)


def test_an_elementwise_op_on_bf16_is_one_node_with_the_compiled_gradients():
    """One autograd node per elementwise primitive on bf16 (no widening and rounding casts
    around it), its gradient computed on bf16 values as the compiled graph computes it."""
    def f(x, w):
        h = x.bfloat16() * w.bfloat16()
        h = tj.nn.functional.gelu(h) + h.tanh() * 0.5
        return (h.sigmoid() - h.exp() / 3).float().sum()

    r = np.random.default_rng(3)
    xv, wv = (r.standard_normal(4100).astype(np.float32) for _ in range(2))
    b = tj.tensor(xv).bfloat16().requires_grad_()
    y = (b.relu() * 2.0).sigmoid()
    assert y.dtype is tj.bfloat16 and y.grad_fn.name() == "SigmoidBackward0"
    mul = y.grad_fn.next_functions[0][0]
    assert mul.name() == "MulBackward0" and mul.next_functions[0][0].name() == "ReluBackward0"
    grads = []
    for fn in (f, tj.compile(f)):
        x, w = tj.tensor(xv, requires_grad=True), tj.tensor(wv, requires_grad=True)
        out = fn(x, w)
        out.backward()
        grads.append((out.item(), x.grad.numpy(), w.grad.numpy()))
    assert grads[0][0] == grads[1][0]
    np.testing.assert_array_equal(grads[0][1], grads[1][1])
    np.testing.assert_array_equal(grads[0][2], grads[1][2])



@pytest.mark.parametrize("channel_major", [False, True])
def test_batchnorm_on_bf16_is_one_pass_of_the_float32_op_rounded(monkeypatch, channel_major):
    """BatchNorm on a bf16 input (float32 weight, autocast's case) runs its records' kernels
    on the words, no widened copy, with the bits of the float32 records on the widened
    operands rounded once (bf16_eager's cast, op, cast); the records, the statistics
    and the weight's and bias's gradients stay float32."""
    from tracejit.compiler.cpu.kernels import channel_forms
    from tracejit.ops import bf16_eager, impls
    ran = []

    def spying(fn, name):
        def spy(*a, **k):
            out = fn(*a, **k)
            ran.append((name, a[0].dtype.name, None if out is None else out.dtype.name))
            return out
        spy.bf16_widens = True
        return spy
    for fn, name in ((channel_forms.forward, "forward"), (channel_forms.backward, "backward")):
        for key, entries in list(impls._TABLE.items()):
            if any(e.fn is fn for e in entries):
                monkeypatch.setitem(impls._TABLE, key,
                                    tuple(e._replace(fn=spying(fn, name)) if e.fn is fn else e for e in entries))
    r = np.random.default_rng(5)
    xv = (r.standard_normal((6, 4, 7, 5)) * 3 + 1).astype(np.float32)
    gv = r.standard_normal(xv.shape).astype(np.float32)
    wv, bv = r.standard_normal(4).astype(np.float32), r.standard_normal(4).astype(np.float32)
    results = []
    for one_pass in (True, False):
        if not one_pass:
            monkeypatch.setattr(bf16_eager, "_widening", lambda *a: None)
        x = tj.tensor(xv)
        if channel_major:
            x = x.transpose(0, 1).contiguous().transpose(0, 1)
        x = x.bfloat16().requires_grad_()
        bn = tj.nn.BatchNorm2d(4)
        with tj.no_grad():
            bn.weight.copy_(tj.tensor(wv))
            bn.bias.copy_(tj.tensor(bv))
        y = bn(x)
        y.backward(tj.tensor(gv).bfloat16())
        assert y.dtype is tj.bfloat16 and x.grad.dtype is tj.bfloat16 and bn.weight.grad.dtype is tj.float32
        results.append([t.detach().float().numpy() for t in (y, x.grad, bn.weight.grad, bn.bias.grad,
                                                              bn.running_mean, bn.running_var)])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)
    assert ("forward", "uint16", "float32") in ran and ("backward", "uint16", "float32") in ran
    assert bn.running_mean.dtype is tj.float32
    # the one pass is the float32 BatchNorm's within bf16's rounding
    ref = tj.nn.functional.batch_norm(tj.tensor(bf16.to_float32(bf16.to_bfloat16(xv))), None, None,
                                      tj.tensor(wv), tj.tensor(bv), training=True)
    np.testing.assert_allclose(results[0][0], ref.numpy(), rtol=2 ** -7, atol=2 ** -7)


def test_max_pool_values_on_bf16_keep_the_words_and_the_pool_node():
    """Reading a bf16 max-pool's values out of its record moves the words (no widening
    and rounding casts around it: the node is the pool's own)."""
    r = np.random.default_rng(6)
    xv = bf16.to_float32(bf16.to_bfloat16(r.standard_normal((2, 3, 6, 6)).astype(np.float32)))
    x = tj.tensor(xv).bfloat16().requires_grad_()
    y = tj.nn.functional.max_pool2d(x, 2)
    assert y.dtype is tj.bfloat16 and y.grad_fn.name() == "MaxPool2DWithIndicesBackward0"
    want = tj.nn.functional.max_pool2d(tj.tensor(xv), 2)
    np.testing.assert_array_equal(y.detach().float().numpy(), want.numpy())
    y.float().sum().backward()
    assert x.grad.dtype is tj.bfloat16 and float(x.grad.float().sum()) == y.numel()


def _f32_rounded(fn, a):
    """`fn` on the float32 values of `a`, rounded to bf16 once (the bf16 rule)."""
    return fn(tj.tensor(a).bfloat16().float()).bfloat16().float().numpy()


@pytest.mark.parametrize("name, fn", [
    ("avg_pool1d", lambda x: tj.nn.functional.avg_pool1d(x, 2)),
    ("linear", lambda x: tj.nn.functional.interpolate(x, scale_factor=2, mode="linear")),
    ("bilinear", lambda x: tj.nn.functional.interpolate(x.reshape(1, 2, 3, 8), scale_factor=2,
                                                        mode="bilinear")),
    ("bicubic", lambda x: tj.nn.functional.interpolate(x.reshape(1, 2, 3, 8), size=(5, 11),
                                                       mode="bicubic", align_corners=True)),
])
def test_ops_building_constant_tables_take_bf16(name, fn):
    # their weight/divisor tables were made as the storage words' integer type
    a = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)
    got = fn(tj.tensor(a).bfloat16())
    assert got.dtype is tj.bfloat16
    np.testing.assert_array_equal(got.float().numpy(), _f32_rounded(fn, a))


def test_nan_to_num_on_bf16_matches_pytorch():
    torch = pytest.importorskip("torch")
    a = np.array([np.inf, -np.inf, np.nan, 1.5], np.float32)
    got = tj.nan_to_num(tj.tensor(a).bfloat16()).float().numpy()
    want = torch.nan_to_num(torch.tensor(a).bfloat16()).float().numpy()
    np.testing.assert_array_equal(got, want)     # +-3.3895e38: bf16's own largest value


def test_bilinear_interpolate_on_bf16_matches_pytorch():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(1).standard_normal((1, 2, 5, 7)).astype(np.float32)
    got = tj.nn.functional.interpolate(tj.tensor(a).bfloat16(), size=(9, 4), mode="bilinear")
    want = torch.nn.functional.interpolate(torch.tensor(a).bfloat16(), size=(9, 4), mode="bilinear")
    np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())


def test_pinv_and_lstsq_take_bf16():
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], np.float32)
    b = np.array([[1.0], [2.0], [3.0]], np.float32)
    sol = tj.linalg.lstsq(tj.tensor(a).bfloat16(), tj.tensor(b).bfloat16())
    assert sol.solution.dtype is tj.bfloat16 and int(sol.rank) == 2
    np.testing.assert_allclose(sol.solution.float().numpy(), [[1.0], [2.0]], atol=1e-2)
    p = tj.linalg.pinv(tj.tensor(a).bfloat16())
    np.testing.assert_allclose(p.float().numpy(), np.linalg.pinv(a), atol=1e-2)
