"""In-place writes into views of graph tensors (CopySlices): gradients equal PyTorch's."""
import numpy as np
import pytest

import tracejit as tj
from tracejit import nn

torch = pytest.importorskip("torch", reason="compares with PyTorch")


def _both(fn, *arrays):
    """Run fn on tracejit and torch leaves made from arrays; return outputs and grads."""
    res = []
    for lib in (tj, torch):
        leaves = [lib.tensor(a, requires_grad=True) for a in arrays]
        out = fn(lib, *leaves)
        out.backward(lib.ones_like(out) if lib is tj else torch.ones_like(out))
        res.append((out.detach().numpy(), [leaf.grad.numpy() for leaf in leaves]))
    return res


VIEW_WRITES = {
    "row_mul": lambda lib, x: _w(x * 1.0, lambda h: h[0].mul_(3)),
    "reshape_relu": lambda lib, x: _w(x - 0.5, lambda h: h.view(6).relu_()),
    "transpose_add": lambda lib, x: _w(x * 2.0, lambda h: h.t().add_(h.t() * 0 + 1)),
    "strided_cols": lambda lib, x: _w(x * 3.0, lambda h: h[:, ::2].mul_(x[:, ::2])),
    "copy_into_slice": lambda lib, x: _w(x * 1.0, lambda h: h[1, 1:].copy_(x[0, :2] * 5)),
}


def _w(h, write):
    write(h)
    return h * h  # the written values feed a nonlinear use, so a stale history would show


@pytest.mark.parametrize("case", sorted(VIEW_WRITES))
def test_inplace_on_view_gradients_match_torch(case):
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float64)
    (o1, g1), (o2, g2) = _both(VIEW_WRITES[case], x)
    np.testing.assert_allclose(o1, o2, rtol=1e-12)
    np.testing.assert_allclose(g1[0], g2[0], rtol=1e-12)


def test_view_itself_keeps_its_new_history():
    x = np.arange(6.0).reshape(2, 3) - 2
    for lib in (tj, torch):
        t = lib.tensor(x, requires_grad=True)
        v = (t * 2.0)[1]
        v.mul_(t[0])          # the view's own history: 2*t[1]*t[0]
        (v * v).sum().backward()
        if lib is tj:
            mine = t.grad.numpy()
        else:
            np.testing.assert_allclose(mine, t.grad.numpy())


@pytest.mark.parametrize("act", ["leaky", "relu"])
def test_bias_free_conv_then_inplace_activation_matches_torch(act):
    # DCGAN's blocks: Conv2d(bias=False) returns a reshape (a view) of the matmul result.
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    tm = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, stride=2, padding=1, bias=False),
                             torch.nn.LeakyReLU(0.2, inplace=True) if act == "leaky"
                             else torch.nn.ReLU(True))
    jm = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1, bias=False),
                       nn.LeakyReLU(0.2, inplace=True) if act == "leaky" else nn.ReLU(True))
    jm.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    xt, xj = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    yt, yj = tm(xt), jm(xj)
    (yt * yt).sum().backward()
    (yj * yj).sum().backward()
    np.testing.assert_allclose(yj.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(jm[0].weight.grad.numpy(), tm[0].weight.grad.numpy(),
                               rtol=1e-4, atol=1e-5)


OLD_VIEW_CASES = {
    # a view taken before an in-place write elsewhere in the same memory, used after it
    "sibling_row": lambda lib, x: _older_view(x * 1.0, lambda h: h[0], lambda h: h[:, 1].mul_(x[:, 0])),
    "base_written": lambda lib, x: _older_view(x * 2.0, lambda h: h.t(), lambda h: h.mul_(x)),
    "view_of_view": lambda lib, x: _older_view(x * 1.0, lambda h: h.view(6)[1:4], lambda h: h[0].exp_()),
}


def _older_view(h, take, write):
    v = take(h)
    write(h)
    return v * v


@pytest.mark.parametrize("case", sorted(OLD_VIEW_CASES))
def test_older_views_see_the_in_place_write_like_torch(case):
    x = np.random.default_rng(2).standard_normal((2, 3))
    (o1, g1), (o2, g2) = _both(OLD_VIEW_CASES[case], x)
    np.testing.assert_allclose(o1, o2, rtol=1e-12)
    np.testing.assert_allclose(g1[0], g2[0], rtol=1e-12)


def test_older_view_as_backward_root():
    x = np.arange(6.0).reshape(2, 3) + 1
    for lib in (tj, torch):
        t = lib.tensor(x, requires_grad=True)
        h = t * 1.0
        v = h[1]
        h.mul_(t)          # v's values are now t[1]**2
        v.backward(lib.ones_like(v))
        if lib is tj:
            mine = t.grad.numpy()
        else:
            np.testing.assert_allclose(mine, t.grad.numpy())


@pytest.fixture
def views_checked():
    """Views checked at each use, as after any in-place write under autograd."""
    from tracejit.autograd import views
    old = views.ACTIVE[0]
    views.ACTIVE[0] = True
    yield
    views.ACTIVE[0] = old


def test_function_made_views_keep_their_node_after_an_in_place_write_elsewhere(views_checked):
    """Once any in-place write under autograd has happened in the process, views are checked
    at each use; a view a `Function` made (unbind_steps' slices) whose base was never
    written keeps its one node, and one whose base was written gets the write's values."""
    from tracejit.jit.loops import unbind_steps
    x = np.arange(12.0).reshape(2, 3, 2) + 1
    t = tj.tensor(x, requires_grad=True)
    a, b, c = unbind_steps(t * 1.0, 1)
    node = a.grad_fn
    assert type(node).__name__ == "FunctionNode"
    out = (a.tanh() * b + c).sum()
    assert a.grad_fn is node and b.grad_fn is node and c.grad_fn is node  # not regathered
    out.backward()
    a_, b_, c_ = x[:, 0], x[:, 1], x[:, 2]
    np.testing.assert_allclose(t.grad.numpy()[:, 0], (1 - np.tanh(a_) ** 2) * b_, rtol=1e-12)
    np.testing.assert_allclose(t.grad.numpy()[:, 1], np.tanh(a_), rtol=1e-12)
    np.testing.assert_allclose(t.grad.numpy()[:, 2], 1.0)
    # written in place after the cut: the older slice is regathered from the new values
    # (PyTorch refuses this for unbind's views; the values say what it must be: v = s**2)
    s = tj.tensor(x, requires_grad=True)
    h = s * 1.0
    v = unbind_steps(h, 1)[0]
    h.mul_(s)
    (v * v).sum().backward()
    assert type(v.grad_fn).__name__ != "FunctionNode"
    want = np.zeros_like(x)
    want[:, 0] = 4 * x[:, 0] ** 3
    np.testing.assert_allclose(s.grad.numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("earlier_use", [False, True])
def test_a_hook_on_a_view_before_its_inplace_write_sees_only_earlier_uses(earlier_use):
    """The write's gradient reaches the base without passing the view's old node (PyTorch's
    CopySlices): the hook fires only for uses of the old view made before the write."""
    got = []
    for m in (tj, torch):
        a = m.arange(4.0).requires_grad_()
        b = a * 1
        v = b[:2]
        fired = []
        v.register_hook(lambda g: fired.append(g.tolist()))
        w = v * 3 if earlier_use else None
        v.mul_(2)
        (b.sum() + (w.sum() if earlier_use else 0)).backward()
        got.append((fired, a.grad.tolist()))
    assert got[0] == got[1] == (([[3.0, 3.0]], [5.0, 5.0, 1.0, 1.0]) if earlier_use else ([], [2.0, 2.0, 1.0, 1.0]))



def _instance_norm_relu(lib, x):
    # instance_norm's result is a view of a (1, N*C, L) batch norm in both libraries
    y = lib.nn.functional.instance_norm(x.reshape(1, 2, 3) * 2.0)
    lib.nn.functional.relu(y, inplace=True)
    return y * x.reshape(1, 2, 3)


def _older_view_reads_new(lib, x):
    h = x * 1.0
    old = h.reshape(3, 2)
    h.view(6).mul_(3)
    return old * old


WHOLE_VIEW_WRITES = {
    # views that are all of their base in order (no position array is built)
    "flat_relu": lambda lib, x: _w(x - 0.5, lambda h: h.view(6).relu_()),
    "unsqueeze_mul_then_add": lambda lib, x: _w(x * 2.0, lambda h: (h.unsqueeze(0).mul_(x), h.view(3, 2).add_(1))),
    "instance_norm_relu": _instance_norm_relu,
    "copy_whole": lambda lib, x: _w(x * 1.0, lambda h: h.view(6).copy_(x.reshape(6) * 5)),
    "older_view_reads_new": _older_view_reads_new,
}


@pytest.mark.parametrize("case", sorted(WHOLE_VIEW_WRITES))
def test_inplace_on_a_whole_view_matches_torch(case):
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float64)
    (out_tj, g_tj), (out_t, g_t) = _both(WHOLE_VIEW_WRITES[case], x)
    np.testing.assert_allclose(out_tj, out_t, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g_tj[0], g_t[0], rtol=1e-10, atol=1e-12)


def test_copy_into_a_whole_view_gives_the_old_history_a_zero_gradient():
    """copy_ does not read the view: the base's old history still gets zeros (PyTorch's
    CopySlices), not None."""
    grads = []
    for lib in (tj, torch):
        x = lib.ones(2, 3, requires_grad=True)
        h = x * 2.0
        h.view(6).copy_(lib.arange(6.0))
        (h * 3).sum().backward()
        grads.append(x.grad.numpy().tolist())
    assert grads[0] == grads[1] == [[0.0] * 3] * 2


def test_a_whole_view_write_builds_no_positions():
    """The everyday case (an in-place activation on a reshaped contiguous tensor): the
    base's new history is a reshape of the result, not an index_put."""
    from tracejit.autograd import views
    x = tj.ones(2, 3, requires_grad=True)
    h = x * 2.0
    v = h.view(6)
    assert views.view_positions(v, h) is views.WHOLE
    assert views.view_positions(h[1:], h) is not views.WHOLE
    v.relu_()
    assert h.grad_fn.name() in ("ViewBackward0", "ReshapeAliasBackward0")
    assert h.grad_fn.next_functions[0][0].name() == "ReluBackward0"
