"""Memory shared between a compiled function's tensors must never give silently wrong
results: gradient buffers shared between inputs, view outputs of compiled functions,
arguments that alias each other, and in-place ops on views inside a captured function."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import InplaceModifiedError, TraceError



def _add_sum(a, b):
    return (a + b).sum()


# ---- item 1: a 0-d loss whose cotangent is not 1 --------------------------------------

@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_scaled_loss_gives_each_input_its_gradient_once(compiler, shape):
    f = tj.trace(_add_sum, compiler=compiler)
    for _ in range(2):  # the capture call and a cache hit
        x = tj.ones(*shape, requires_grad=True)
        y = tj.ones(*shape, requires_grad=True)
        (f(x, y) * 0.25).backward()
        np.testing.assert_allclose(x.grad.numpy(), np.full(shape, 0.25))
        np.testing.assert_allclose(y.grad.numpy(), np.full(shape, 0.25))


def test_two_biases_divided_loss(compiler):
    def model(inp, b1, b2):
        return ((inp + b1) * 2.0 + b2).sum()

    f = tj.trace(model, compiler=compiler)
    inp = tj.ones(4)
    b1 = tj.zeros(4, requires_grad=True)
    b2 = tj.zeros(4, requires_grad=True)
    (f(inp, b1, b2) / 4).backward()
    np.testing.assert_allclose(b1.grad.numpy(), np.full(4, 0.5))
    np.testing.assert_allclose(b2.grad.numpy(), np.full(4, 0.25))


def test_scaled_loss_same_tensor_twice(compiler):
    f = tj.trace(_add_sum, compiler=compiler)
    x = tj.ones(3, requires_grad=True)
    (f(x, x) * 0.25).backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 0.5))


@pytest.mark.parametrize("retain", [False, True])
def test_unit_cotangent_grads_do_not_share_memory(retain):
    f = tj.trace(_add_sum)
    x = tj.ones(3, requires_grad=True)
    y = tj.ones(3, requires_grad=True)
    f(x, y).backward(retain_graph=retain)
    with tj.no_grad():
        x.grad.mul_(10.0)  # an optimizer step that scales one .grad in place
    np.testing.assert_allclose(y.grad.numpy(), np.ones(3))
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 10.0))


@pytest.mark.parametrize("scale", [0.25, None])
def test_scaled_loss_leaves_inputs_alone(scale):
    # The gradient of a is b itself: neither scaling it (a cotangent of 0.25) nor handing it
    # over (a unit cotangent's last backward), nor scaling x.grad in place afterwards, may
    # change w.
    def dot(a, b):
        return (a * b).sum()

    f = tj.trace(dot)
    x = tj.ones(3, requires_grad=True)
    w = tj.full((3,), 2.0)
    for _ in range(2):  # the capture call and a cache hit
        x.grad = None
        loss = f(x, w)
        (loss if scale is None else loss * scale).backward()
        expect = 2.0 * (1.0 if scale is None else scale)
        np.testing.assert_allclose(x.grad.numpy(), np.full(3, expect))
        with tj.no_grad():
            x.grad.mul_(10.0)
        np.testing.assert_allclose(x.grad.numpy(), np.full(3, 10 * expect))
        np.testing.assert_allclose(w.numpy(), np.full(3, 2.0))


def test_unit_cotangent_hands_over_only_buffers_nobody_else_holds():
    # A unit cotangent's last backward (executor `_scale_loss_grads`) hands the plan's
    # buffers to .grad as they are; an input's array or a buffer returned twice is copied.
    f = tj.trace(lambda a, b: (a * b).sum())
    x = tj.ones(3, requires_grad=True)
    w = tj.full((3,), 2.0)
    loss = f(x, w)
    node = loss.grad_fn
    prog, idx, ins = node.program, node.diff_idx, node.inputs
    one = tj.tensor(np.float32(1.0))
    own = np.ones(3, np.float32)
    (g,) = prog._scale_loss_grads(idx, [own], one, False, ins)
    assert np.shares_memory(g.numpy(), own)
    (g,) = prog._scale_loss_grads(idx, [w.numpy()], one, False, [x, w])      # an input's array
    assert not np.shares_memory(g.numpy(), w.numpy())
    np.testing.assert_array_equal(g.numpy(), w.numpy())
    g1, g2 = prog._scale_loss_grads((0, 1), [own, own], one, False, ins)    # one buffer twice
    assert not np.shares_memory(g1.numpy(), own) and not np.shares_memory(g2.numpy(), own)


def test_unit_cotangent_hands_over_owned_buffers():
    # The usual step: each gradient is a fresh buffer of the plan, taken by .grad as it is;
    # the values are the eager ones.
    f = tj.trace(lambda x, w1, w2: (x.mm(w1).clamp(min=0).mm(w2)).pow(2).sum())
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((4, 5)).astype(np.float32)
    a1 = rng.standard_normal((5, 3)).astype(np.float32)
    a2 = rng.standard_normal((3, 2)).astype(np.float32)
    for _ in range(2):
        w1, w2 = tj.tensor(a1, requires_grad=True), tj.tensor(a2, requires_grad=True)
        f(tj.tensor(xs), w1, w2).backward()
        e1, e2 = tj.tensor(a1, requires_grad=True), tj.tensor(a2, requires_grad=True)
        (tj.tensor(xs).mm(e1).clamp(min=0).mm(e2)).pow(2).sum().backward()
        np.testing.assert_allclose(w1.grad.numpy(), e1.grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(w2.grad.numpy(), e2.grad.numpy(), rtol=1e-5, atol=1e-6)
        assert not np.shares_memory(w1.grad.numpy(), w2.grad.numpy())


# ---- item 2: view outputs share their input's version counter --------------------------

def _transpose(a):
    return a.t()


def _slice_and_double(a):
    return a[1:], a * 2.0


@pytest.mark.parametrize("fn", [_transpose, _slice_and_double])
def test_view_output_write_is_seen_by_saved_graph(compiler, fn):
    f = tj.trace(fn, compiler=compiler)
    for _ in range(2):
        w = tj.tensor(np.arange(6.0).reshape(2, 3))
        v = tj.ones(2, 3, requires_grad=True)
        loss = (v * w).sum()  # saves w for v's gradient
        out = f(w)
        out = out[0] if isinstance(out, tuple) else out
        assert np.shares_memory(out.numpy(), w.numpy())
        out.mul_(10.0)
        assert w._version == out._version == 1
        with pytest.raises(InplaceModifiedError):
            loss.backward()  # eager raises too: w changed after it was saved


def test_view_output_of_leaf_requiring_grad(compiler):
    f = tj.trace(_transpose, compiler=compiler)
    w = tj.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    loss = (w * w).sum()
    out = f(w)
    with pytest.raises(RuntimeError, match="view"):
        out.mul_(10.0)  # as eager: a view of a tensor in a graph
    with tj.no_grad():
        out.mul_(10.0)
    with pytest.raises(InplaceModifiedError):
        loss.backward()


# ---- item 3: in-place ops on arguments that share memory ------------------------------

def _add_one_then_double(a, b):
    a.add_(1.0)
    return b * 2.0


def test_same_tensor_passed_twice_to_inplace_function(compiler):
    f = tj.trace(_add_one_then_double, compiler=compiler)
    for _ in range(3):  # miss, then the hot path's alias check
        x = tj.zeros(3)
        np.testing.assert_allclose(f(x, x).numpy(), np.full(3, 2.0))
        np.testing.assert_allclose(x.numpy(), np.ones(3))


def test_overlapping_slices_passed_to_inplace_function(compiler):
    f = tj.trace(_add_one_then_double, compiler=compiler)
    for _ in range(2):
        base = tj.zeros(6)
        out = f(base[0:4], base[2:6])
        np.testing.assert_allclose(out.numpy(), [2.0, 2.0, 0.0, 0.0])
        np.testing.assert_allclose(base.numpy(), [1, 1, 1, 1, 0, 0])


def test_distinct_buffers_still_run_compiled():
    f = tj.trace(_add_one_then_double)
    x, y = tj.zeros(3), tj.ones(3)
    for k in range(3):
        np.testing.assert_allclose(f(x, y).numpy(), np.full(3, 2.0))
        np.testing.assert_allclose(x.numpy(), np.full(3, k + 1.0))
    f(x, x)  # aliased: runs eagerly, no new capture
    st = f.cache_stats()
    assert st["entries"] == 1 and st["hits"] == 2 and st["alias_fallbacks"] == 1
    # disjoint slices of one tensor are not aliased
    base = tj.zeros(6)
    np.testing.assert_allclose(f(base[0:3], base[3:6]).numpy(), np.zeros(3))
    np.testing.assert_allclose(base.numpy(), [1, 1, 1, 0, 0, 0])


def test_aliased_arguments_without_inplace_stay_compiled():
    f = tj.trace(_add_sum)
    x = tj.ones(3)
    assert float(f(x, x)) == 6.0
    assert float(f(x, x)) == 6.0
    assert f.cache_stats()["hits"] == 1 and "alias_fallbacks" not in f.cache_stats()


# ---- in-place ops on views inside a captured function ---------------------------------

def _write_through_slice(a):
    a[0:1].add_(1.0)
    return a * 2.0


def _write_through_transpose(a):
    a.t().mul_(2.0)
    return a * 1.0


def _stale_view(a):
    b = a.t()
    a.add_(1.0)
    return b * 2.0


def _write_through_chain(a):
    row = a[1]
    row[::2].mul_(-1.0)          # a view of a view: reaches a
    col = a.t()[2]
    col.fill_(7.0)                # and a sibling view sees it
    return row * 1.0, a.sum()


@pytest.mark.parametrize("fn", [_write_through_slice, _write_through_transpose, _stale_view,
                                _write_through_chain])
def test_inplace_on_view_inside_function_matches_eager(fn, compiler):
    """A write through a view reaches its base, and a view taken before a write to its base
    shows the new values, as eagerly (the views share memory)."""
    x0 = np.arange(6.0).reshape(2, 3) - 2.0
    xe = tj.tensor(x0)
    want = fn(xe)
    want = want if isinstance(want, tuple) else (want,)
    f = tj.trace(fn, compiler=compiler)
    for _ in range(2):
        xc = tj.tensor(x0)
        got = f(xc)
        got = got if isinstance(got, tuple) else (got,)
        for w, g in zip(want, got):
            np.testing.assert_allclose(g.numpy(), w.numpy())
        np.testing.assert_allclose(xc.numpy(), xe.numpy())


def test_write_through_view_of_captured_buffer(compiler):
    """``self.b[1:].add_(v)`` in a module's forward updates the buffer on every call."""
    class Counter(tj.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", tj.zeros(3))

        def forward(self, x):
            self.b[1:].add_(x.sum())
            return self.b * 1.0

    eager, comp = Counter(), Counter()
    f = tj.trace(comp, compiler=compiler)
    for _ in range(3):
        np.testing.assert_allclose(f(tj.ones(2)).numpy(), eager(tj.ones(2)).numpy())
    np.testing.assert_allclose(comp.b.numpy(), [0.0, 6.0, 6.0])


def test_write_through_view_gradients_match_eager(compiler):
    def fn(w, v):
        h = w * 2.0
        h[:, 1].mul_(v)             # gradient flows to w (other columns) and v
        h.t()[0].add_(v * v)
        return (h * h).sum()

    w0 = np.arange(6.0).reshape(3, 2) / 5.0 - 0.4
    v0 = np.array([0.5, -1.5, 2.0])
    grads = []
    for run in (fn, tj.trace(fn, compiler=compiler)):
        w = tj.tensor(w0, requires_grad=True)
        v = tj.tensor(v0, requires_grad=True)
        loss = run(w, v)
        loss.backward()
        grads.append((float(loss), w.grad.numpy(), v.grad.numpy()))
    assert grads[0][0] == pytest.approx(grads[1][0])
    np.testing.assert_allclose(grads[1][1], grads[0][1], rtol=1e-12)
    np.testing.assert_allclose(grads[1][2], grads[0][2], rtol=1e-12)


def test_write_through_expanded_view_raises():
    def fn(a):
        a[:1].expand(3, 3).add_(1.0)
        return a * 1.0
    with pytest.raises(TraceError, match="cannot reach the tensor it views"):
        tj.trace(fn, compiler="interpret")(tj.zeros(3, 3))


def test_view_taken_after_inplace_is_fine():
    def fn(a):
        a.add_(1.0)
        b = a.t()
        return b * 2.0

    x = tj.zeros(2, 3)
    out = tj.trace(fn, compiler="interpret")(x)
    np.testing.assert_allclose(out.numpy(), np.full((3, 2), 2.0))
    np.testing.assert_allclose(x.numpy(), np.ones((2, 3)))


def test_inplace_update_of_input_read_by_backward(compiler):
    """The call's own write to an input must not trip its backward's version check, and
    the backward must use the value the forward read."""
    def scale_then_dot(w, s):
        s.mul_(0.5)
        return (w * s).sum(), w * 1.0

    f = tj.trace(scale_then_dot, compiler=compiler)
    for _ in range(2):
        w = tj.ones(3, requires_grad=True)
        s = tj.tensor([2.0, 4.0, 6.0])
        loss, _ = f(w, s)
        (loss * 2.0).backward()
        np.testing.assert_allclose(s.numpy(), [1.0, 2.0, 3.0])
        np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0, 6.0])


def test_inplace_update_of_input_with_a_value_that_requires_grad(compiler):
    def accumulate(a, b, w):
        a.add_(b)
        return tj.tanh(a @ w)  # the backward needs saved values (the matmul's output)

    f = tj.trace(accumulate, compiler=compiler)
    w0 = np.linspace(-1.0, 1.0, 9).reshape(3, 3)
    a = tj.zeros(2, 3, dtype=tj.float64)
    b = tj.ones(2, 3, dtype=tj.float64, requires_grad=True)
    w = tj.tensor(w0, requires_grad=True)
    accumulate(a, b, w).sum().backward()
    expect = (b.grad.numpy().copy(), w.grad.numpy().copy())
    for _ in range(2):
        a = tj.zeros(2, 3, dtype=tj.float64)
        b = tj.ones(2, 3, dtype=tj.float64, requires_grad=True)
        w = tj.tensor(w0, requires_grad=True)
        out = f(a, b, w)
        assert a.requires_grad and a.grad_fn is not None  # as eagerly: a is now in the graph
        out.sum().backward()
        np.testing.assert_allclose(a.detach().numpy(), np.ones((2, 3)))
        np.testing.assert_allclose(b.grad.numpy(), expect[0])
        np.testing.assert_allclose(w.grad.numpy(), expect[1])


def test_write_through_view_keeps_batch_dim_dynamic():
    """Writes through views of a tensor whose batch size changes from call to call compile
    once more for the dynamic dim, not once per size."""
    def fn(x, w):
        h = x * w
        h[:, 0].mul_(3.0)
        h.t()[1:].add_(w[1:].unsqueeze(1))
        return (h * h).sum()

    f = tj.compile(fn)
    w0 = np.array([0.5, -1.0, 2.0, 1.5])
    for b in (2, 3, 4, 5, 6):
        x0 = np.random.default_rng(b).standard_normal((b, 4))
        got, want = [], []
        for run, out in ((f, got), (fn, want)):
            w = tj.tensor(w0, requires_grad=True)
            loss = run(tj.tensor(x0), w)
            loss.backward()
            out += [float(loss), w.grad.numpy()]
        assert got[0] == pytest.approx(want[0], rel=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    st = f.cache_stats()
    assert st["compiles"] <= 2 and st["eager_fallbacks"] == 0 and st["dynamic_dims"]


def test_overwritten_value_keeps_requires_grad_as_eagerly(compiler):
    """``a.zero_()`` / ``x.fill_(v)`` on a value that requires grad: the result still
    requires grad (with zero gradients), compiled as eagerly."""
    def fn(x, y):
        a = y.var(-1, keepdim=True) * 1.0
        a.zero_()
        x.sub_(y)
        x.fill_(2.0)
        return a + x.sum()

    for run in (fn, tj.trace(fn, compiler=compiler)):
        y = tj.ones(3, 4, requires_grad=True)
        out = run(tj.zeros(3, 4), y)
        assert out.requires_grad
        out.sum().backward()
        np.testing.assert_array_equal(y.grad.numpy(), np.zeros((3, 4)))


def test_inplace_update_of_a_non_leaf_argument_as_pytorch(compiler):
    """A non-leaf argument that requires grad takes in-place writes, as eagerly and in
    PyTorch; a later call with a leaf there raises as eagerly, changing nothing."""
    torch = pytest.importorskip("torch")

    def f(x):
        x.mul_(2.0)
        x.add_(1.0)
        return x.sin()
    want_leaf = torch.tensor([1.0, 2.0], requires_grad=True)
    want_x = want_leaf * 3.0
    f(want_x).sum().backward()
    g = tj.trace(f, compiler=compiler)
    for _ in range(2):
        leaf = tj.tensor([1.0, 2.0], requires_grad=True)
        x = leaf * 3.0
        g(x).sum().backward()
        np.testing.assert_allclose(x.detach().numpy(), want_x.detach().numpy())
        np.testing.assert_allclose(leaf.grad.numpy(), want_leaf.grad.numpy(), rtol=1e-6)
        assert x.grad_fn is not None
    leaf = tj.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        g(leaf)
    assert leaf.tolist() == [1.0, 2.0]


def test_inplace_write_through_a_view_of_a_non_leaf_argument_as_pytorch(compiler):
    """The call's nodes that read the argument (a view of it) keep the value they read
    before the call writes the argument back."""
    torch = pytest.importorskip("torch")
    data = np.arange(6, dtype=np.float32).reshape(2, 1, 3) - 2.0

    def f(x):
        v = x[1:]
        v.clamp_(min=0.0)
        return v * 2.0, x.sin()
    grads = []
    for lib, fn in ((torch, f), (tj, tj.trace(f, compiler=compiler)), (tj, tj.trace(f, compiler=compiler))):
        leaf = lib.tensor(data, requires_grad=True)
        x = leaf * 1.0
        outs = fn(x)
        sum((o * lib.arange(float(o.numel())).reshape(tuple(o.shape))).sum() for o in outs).backward()
        grads.append((leaf.grad.numpy(), x.detach().numpy()))
    for got in grads[1:]:
        np.testing.assert_allclose(got[0], grads[0][0], rtol=1e-6)
        np.testing.assert_allclose(got[1], grads[0][1])


def test_an_overlap_among_many_updated_tensors_is_found():
    def step(ps, gs):
        for p, g in zip(ps, gs):
            p.add_(g * 2.0)
    base = tj.zeros(400)
    for a, b in ((3, 47), (48, 0), (None, None)):
        ps = [base[8 * i:8 * i + 8] for i in range(50)]
        if a is not None:
            ps[b] = base[8 * a + 4:8 * a + 12]   # half over another's memory
        base.zero_()
        gs = [tj.full((8,), float(i)) for i in range(50)]
        cf = tj.trace(step, compiler="interpret")
        cf(ps, gs)
        got = base.clone()
        base.zero_()
        step(ps, gs)
        np.testing.assert_array_equal(got.numpy(), base.numpy())
        assert cf.cache_stats().get("alias_fallbacks", 0) == (0 if a is None else 1)
