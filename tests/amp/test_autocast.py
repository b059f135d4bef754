"""tracejit.autocast on the CPU: PyTorch's op lists, the context and decorator forms,
the compiled functions' guard, and training under it (float32 master weights)."""
from __future__ import annotations

import io

import numpy as np
import pytest

import tracejit as tj
from tracejit.ops import autocast as policy

try:
    import torch
except Exception:  # pragma: no cover - optional reference
    torch = None

F = tj.nn.functional
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")


# Each call: (name, fn(m, F, t)) on a float tensor t of shape (4, 4); m is tracejit or torch.
def _x4(m, t):
    return m.arange(50, dtype=t.dtype).reshape(1, 2, 5, 5) / 25


_CALLS = {
    "mm": lambda m, F, t: m.mm(t, t), "matmul": lambda m, F, t: m.matmul(t, t),
    "bmm": lambda m, F, t: m.bmm(t[None], t[None]), "linear": lambda m, F, t: F.linear(t, t, t[0]),
    "addmm": lambda m, F, t: m.addmm(t, t, t), "baddbmm": lambda m, F, t: m.baddbmm(t[None], t[None], t[None]),
    "addbmm": lambda m, F, t: m.addbmm(t, t[None], t[None]),
    "conv1d": lambda m, F, t: F.conv1d(t[None], t[:, :, None]),
    "conv2d": lambda m, F, t: F.conv2d(_x4(m, t), t[:3, :2, None, None].expand(3, 2, 3, 3).contiguous()),
    "conv_transpose2d": lambda m, F, t: F.conv_transpose2d(_x4(m, t), t[:2, :3, None, None].expand(2, 3, 3, 3).contiguous()),
    "prelu": lambda m, F, t: F.prelu(t, m.ones(1, dtype=t.dtype)),
    "scaled_dot_product_attention": lambda m, F, t: F.scaled_dot_product_attention(t[None], t[None], t[None]),
    "softmax": lambda m, F, t: F.softmax(t, -1), "log_softmax": lambda m, F, t: F.log_softmax(t, -1),
    "layer_norm": lambda m, F, t: F.layer_norm(t, (4,)), "sum": lambda m, F, t: t.sum(),
    "mean": lambda m, F, t: t.mean(), "prod": lambda m, F, t: t.prod(), "exp": lambda m, F, t: t.exp(),
    "relu": lambda m, F, t: F.relu(t), "gelu": lambda m, F, t: F.gelu(t), "tanh": lambda m, F, t: t.tanh(),
    "cross_entropy": lambda m, F, t: F.cross_entropy(t, m.tensor([0, 1, 2, 3])),
    "nll_loss": lambda m, F, t: F.nll_loss(t, m.tensor([0, 1, 2, 3])),
    "mse_loss": lambda m, F, t: F.mse_loss(t, t * 0.5), "l1_loss": lambda m, F, t: F.l1_loss(t, t * 0.5),
    "smooth_l1_loss": lambda m, F, t: F.smooth_l1_loss(t, t * 0.5),
    "huber_loss": lambda m, F, t: F.huber_loss(t, t * 0.5), "kl_div": lambda m, F, t: F.kl_div(t, t.abs()),
    "binary_cross_entropy": lambda m, F, t: F.binary_cross_entropy(t.sigmoid(), t.sigmoid()),
    "binary_cross_entropy_with_logits": lambda m, F, t: F.binary_cross_entropy_with_logits(t, t.sigmoid()),
    "soft_margin_loss": lambda m, F, t: F.soft_margin_loss(t, t.sign()),
    "cdist": lambda m, F, t: m.cdist(t, t), "cat": lambda m, F, t: m.cat([t, t.float()]),
    "stack": lambda m, F, t: m.stack([t, t.float()]), "avg_pool2d": lambda m, F, t: F.avg_pool2d(_x4(m, t), 2),
    "max_pool2d": lambda m, F, t: F.max_pool2d(_x4(m, t), 2), "cumsum": lambda m, F, t: t.cumsum(0),
    "batch_norm": lambda m, F, t: F.batch_norm(t, None, None, training=True),
    "group_norm": lambda m, F, t: F.group_norm(t, 2),
}


def _dtype_name(d) -> str:
    return str(d).split(".")[-1]


@needs_torch
@pytest.mark.parametrize("name", sorted(_CALLS))
def test_result_dtypes_match_torch_autocast(name):
    """Under autocast, each op's result dtype from float32 and from bf16 inputs is
    torch.autocast's (CPU, bfloat16)."""
    call = _CALLS[name]
    base = np.linspace(-1.5, 1.5, 16, dtype=np.float32).reshape(4, 4) + np.eye(4, dtype=np.float32)
    for start in ("float32", "bfloat16"):
        tt = torch.from_numpy(base).to(getattr(torch, start))
        t = tj.tensor(base).to(getattr(tj, start))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            want = call(torch, torch.nn.functional, tt).dtype
        with tj.autocast("cpu", dtype=tj.bfloat16):
            got = call(tj, F, t).dtype
        assert got.name == _dtype_name(want), f"{name} from {start}: {got.name} vs torch {want}"


@needs_torch
def test_every_policy_function_is_listed_by_torch_the_same_way():
    """The functions carrying a policy (ops/autocast.py) are the lists' functions: each
    one tested above or by name in torch's lists as this records them."""
    lower = {n for n, k in policy.POLICIES.items() if k == "lower"}
    fp32 = {n for n, k in policy.POLICIES.items() if k == "fp32"}
    assert {"mm", "matmul", "bmm", "linear", "addmm", "baddbmm", "addbmm", "conv1d", "conv2d",
            "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu",
            "scaled_dot_product_attention", "vecdot"} == lower
    assert {"cross_entropy", "nll_loss", "mse_loss", "l1_loss", "prod", "cdist"} <= fp32
    assert not (lower & fp32)


def test_context_decorator_nesting_and_the_cpu_amp_names():
    x = tj.ones(2, 2)
    assert (x @ x).dtype is tj.float32
    with tj.autocast("cpu"):
        assert (x @ x).dtype is tj.bfloat16
        assert tj.amp.is_autocast_enabled("cpu")
        with tj.autocast("cpu", enabled=False):
            assert (x @ x).dtype is tj.float32
        assert (x @ x).dtype is tj.bfloat16
    assert (x @ x).dtype is tj.float32 and not tj.amp.is_autocast_enabled("cpu")

    @tj.amp.autocast("cpu")
    def f(a):
        return a @ a
    assert f(x).dtype is tj.bfloat16 and (x @ x).dtype is tj.float32
    with tj.cpu.amp.autocast():
        assert (x @ x).dtype is tj.bfloat16


def test_bad_arguments_are_named_and_change_nothing():
    with pytest.raises(ValueError, match="device_type"):
        tj.autocast(3)
    with pytest.raises(ValueError, match="'tpu'"):
        tj.autocast("tpu")
    with pytest.warns(UserWarning, match="float64"):
        ac = tj.autocast("cpu", dtype=tj.float64)
    with ac:
        assert (tj.ones(2, 2) @ tj.ones(2, 2)).dtype is tj.float32
    assert policy.current() is None


def _mlp():
    tj.manual_seed(0)
    return tj.nn.Sequential(tj.nn.Linear(8, 32), tj.nn.ReLU(), tj.nn.Linear(32, 3))


def _data():
    r = np.random.default_rng(0)
    x = r.standard_normal((64, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
    return tj.tensor(x), tj.tensor(y)


def _train(model, fwd, steps, autocast):
    opt = tj.optim.Adam(model.parameters(), lr=1e-2)
    x, y = _data()
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        with tj.autocast("cpu", enabled=autocast):
            out = fwd(x)
            loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_training_keeps_float32_weights_and_tracks_float32_training(bf16_gemm_way):
    m32, m16 = _mlp(), _mlp()
    l32 = _train(m32, m32, 200, False)
    l16 = _train(m16, m16, 200, True)
    assert all(p.dtype is tj.float32 and p.grad.dtype is tj.float32 for p in m16.parameters())
    assert l16[-1] < 0.5 * l16[0]
    assert abs(l16[-1] - l32[-1]) <= 0.01 * l32[0]     # within 1% of the starting loss
    assert abs(l16[-1] / l32[-1] - 1) <= 0.01          # and of float32 training's final loss
    # the state_dict round trip: float32 master weights, the same outputs after loading
    buf = io.BytesIO()
    tj.save(m16.state_dict(), buf)
    buf.seek(0)
    again = _mlp()
    again.load_state_dict(tj.load(buf))
    x, _ = _data()
    with tj.autocast("cpu"), tj.no_grad():
        np.testing.assert_array_equal(again(x)._data, m16(x)._data)


def test_compiled_step_equals_eager_and_guards_the_autocast_state(bf16_gemm_way):
    eager, comp = _mlp(), _mlp()
    fwd = tj.script(comp)
    le = _train(eager, eager, 4, True)
    lc = _train(comp, fwd, 2, True)
    tj.compiler.wait()
    lc += _train(comp, fwd, 2, True)
    # (the compiled backward sums the bias gradient in another order, and its bf16
    # rounding can then differ by one unit of 2**-8: Adam's steps follow it)
    np.testing.assert_allclose(lc, le, rtol=1e-2)
    # one step from the same weights: the compiled gradients are the eager ones
    comp.load_state_dict(eager.state_dict())
    x, y = _data()
    for model, f in ((eager, eager), (comp, fwd)):
        model.zero_grad()
        with tj.autocast("cpu"):
            loss = F.cross_entropy(f(x), y)
        loss.backward()
    for pe, pc in zip(eager.parameters(), comp.parameters()):
        np.testing.assert_array_equal(pe.grad.numpy(), pc.grad.numpy())
    with tj.autocast("cpu"), tj.no_grad():
        x, _ = _data()
        np.testing.assert_array_equal(fwd(x)._data, comp(x)._data)   # forward: the same words
    x, _ = _data()
    assert fwd(x).dtype is tj.float32                 # leaving autocast: the float32 entry
    with tj.autocast("cpu"):
        assert fwd(x).dtype is tj.bfloat16
    stats = fwd.cache_stats()
    assert stats["entries"] == 2 and "autocast changed: off -> bfloat16" in stats["recompile_reasons"] or \
        "autocast changed: bfloat16 -> off" in stats["recompile_reasons"]


def _words(t):
    return np.asarray(t.detach().float().numpy(), np.float32).view(np.uint32) >> 16


@pytest.mark.parametrize("op", ["linear", "linear3d", "conv2d"])
@pytest.mark.parametrize("compiled", [False, True])
def test_products_with_bias_round_once_like_torch(op, compiled):
    """Where bf16 products compute in float32, linear and conv2d (bias included) give the
    float32 result of the bf16 operands rounded once; PyTorch's autocast gives the same
    words but where its summation order moves a value across a rounding boundary."""
    from tracejit.compiler.cpu.gemm import bf16 as bf16_gemm
    r = np.random.default_rng(4)
    shapes = {"linear": ((64, 300), (50, 300), (50,)), "linear3d": ((4, 16, 300), (50, 300), (50,)),
              "conv2d": ((8, 16, 12, 12), (32, 16, 3, 3), (32,))}[op]
    x, w, b = (r.standard_normal(s).astype(np.float32) for s in shapes)

    def f(m, x, w, b):
        fn = m.nn.functional.conv2d if op == "conv2d" else m.nn.functional.linear
        with m.autocast("cpu", dtype=m.bfloat16):
            return fn(x, w, b)
    prev = bf16_gemm.force("float32")
    try:
        g = tj.compile(lambda x, w, b: f(tj, x, w, b)) if compiled else (lambda x, w, b: f(tj, x, w, b))
        args = [tj.tensor(a) for a in (x, w, b)]
        if compiled:
            g(*args)
            tj.compiler.wait()
        got = g(*args)
    finally:
        bf16_gemm.force(prev)
    assert got.dtype is tj.bfloat16
    xb, wb, bb = (tj.tensor(a).bfloat16().float() for a in (x, w, b))
    fn = F.conv2d if op == "conv2d" else F.linear
    want = fn(xb, wb, bb).bfloat16()          # float32 compute, rounded once
    if compiled:   # (the compiled GEMM may sum in another order: one unit at most)
        assert np.abs(_words(got).astype(np.int64) - _words(want)).max() <= 1
    else:
        np.testing.assert_array_equal(_words(got), _words(want))
    if torch is not None:
        tw = f(torch, *(torch.from_numpy(a) for a in (x, w, b)))
        diff = np.abs(_words(got).astype(np.int64) - _words(tw))
        assert diff.max() <= 1 and (diff == 0).mean() > 0.99


@pytest.fixture
def float32_way():
    from tracejit.compiler.cpu.gemm import bf16 as bf16_gemm
    prev = bf16_gemm.force("float32")
    yield
    bf16_gemm.force(prev)


_PRODUCTS = {   # name: (operand shapes, fn(F, *operands))
    "linear": (((33, 70), (20, 70), (20,)), lambda m, x, w, b: m.nn.functional.linear(x, w, b)),
    "matmul": (((3, 33, 70), (70, 20)), lambda m, a, b: m.matmul(a, b)),
    "mm": (((33, 70), (70, 20)), lambda m, a, b: m.mm(a, b)),
    "bmm": (((2, 33, 70), (2, 70, 20)), lambda m, a, b: m.bmm(a, b)),
    "conv2d": (((2, 3, 9, 9), (4, 3, 3, 3), (4,)), lambda m, x, w, b: m.nn.functional.conv2d(x, w, b)),
    "scaled_dot_product_attention": (((2, 3, 17, 8), (2, 3, 11, 8), (2, 3, 11, 8), (17, 11)),
                                     lambda m, q, k, v, mask: m.nn.functional.scaled_dot_product_attention(
                                         q, k, v, attn_mask=mask)),
}


@pytest.mark.parametrize("name", sorted(_PRODUCTS))
def test_float32_way_rounds_float32_operands_in_one_pass(name, float32_way, monkeypatch):
    """Without bf16 units a product's float32 operands are rounded to bf16 values in one
    pass (round_bf16), not cast to words and widened: the result and every gradient are
    the bits of the op on the bf16 operands' values in float32, rounded once."""
    from tracejit.ops import bf16_eager
    shapes, fn = _PRODUCTS[name]
    r = np.random.default_rng(5)
    vals = [r.standard_normal(s).astype(np.float32) for s in shapes]
    c = None
    grads = []
    for ac in (True, False):
        ops = [tj.tensor(v, requires_grad=True) for v in vals]
        if ac:
            with tj.autocast("cpu"):
                out = fn(tj, *ops)
        else:     # the float32 op on the bf16 operands' values, rounded once
            out = fn(tj, *[o.bfloat16().float() for o in ops]).bfloat16()
        assert out.dtype is tj.bfloat16
        if c is None:
            c = tj.tensor(r.standard_normal(out.shape).astype(np.float32))
            got = out
        (out.float() * c).sum().backward()
        grads.append([o.grad.numpy() for o in ops])
    np.testing.assert_array_equal(_words(got), _words(out))
    for ga, gb in zip(*grads):
        np.testing.assert_array_equal(ga, gb)
    calls, real = [], bf16_eager.round_bf16
    monkeypatch.setattr(bf16_eager, "round_bf16", lambda t: calls.append(t) or real(t))
    with tj.autocast("cpu"):
        fn(tj, *[tj.tensor(v) for v in vals])
    assert len(calls) == len(vals)


def test_a_weight_is_cast_once_per_context_until_it_changes(bf16_gemm_way, monkeypatch, cast_calls):
    """As PyTorch's autocast cache: a float32 leaf that requires grad is cast once while
    the outermost context is open, again after an in-place change, and the cache is
    dropped on exit; cache_enabled=False contexts cast it at each use."""
    calls = cast_calls
    lin = tj.nn.Linear(16, 16)
    x = tj.tensor(np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32))

    def weight_casts():
        return sum(1 for t in calls if t is lin.weight or t is lin.bias)
    with tj.autocast("cpu"):
        y = lin(lin(x))
        assert weight_casts() == 2        # the weight and the bias once, not twice
        x_casts = sum(1 for t in calls if t is x)
        with tj.autocast("cpu"):          # (a nested context keeps the outer one's casts)
            lin(x)
        assert weight_casts() == 2 and sum(1 for t in calls if t is x) == x_casts + 1   # (x: each time)
        with tj.no_grad():
            lin.weight.mul_(0.5)
        again = lin(x)
        assert weight_casts() == 3        # the changed weight
    assert policy.STATE.casts is None
    ref = tj.nn.functional.linear(x.bfloat16(), lin.weight.bfloat16(), lin.bias.bfloat16())
    np.testing.assert_array_equal(_words(again), _words(ref))
    y.float().sum().backward()
    assert lin.weight.grad is not None and lin.weight.grad.dtype is tj.float32
    del calls[:]
    with tj.autocast("cpu", cache_enabled=False):
        lin(lin(x))
    assert weight_casts() == 4


def test_cached_casts_keep_grad_mode_and_survive_a_backward(float32_way):
    """A cast made under no_grad is not handed to a product that needs gradients, and a
    backward inside the context (micro-batches) leaves the next forward a cast it can
    backward through again."""
    lin = tj.nn.Linear(8, 8)
    x = tj.tensor(np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32))
    with tj.autocast("cpu"):
        with tj.no_grad():
            lin(x)
        lin(x).float().sum().backward()
        first = lin.weight.grad.numpy().copy()
        lin(x).float().sum().backward()
    np.testing.assert_array_equal(lin.weight.grad.numpy(), 2 * first)
    assert np.abs(first).sum() > 0


def _r(a):
    """float32 values rounded to bf16 values."""
    from tracejit import bf16
    return bf16.to_float32(bf16.to_bfloat16(a))


@pytest.mark.parametrize("compiled", [False, True])
def test_a_weight_used_twice_sums_its_gradients_in_bf16_like_torch(compiled):
    """A Linear applied twice in one autocast context: each use's weight gradient is a
    bf16 product and the two are summed in bf16 before the float32 master weight takes
    them, as PyTorch's cached cast and engine do. Integer operands keep every product
    exact in float32, whatever the summation order, so only the roundings differ."""
    r = np.random.default_rng(7)
    w, b = r.standard_normal((24, 16)).astype(np.float32), r.standard_normal(24).astype(np.float32)
    x1, x2 = (r.integers(-15, 16, (40, 16)).astype(np.float32) for _ in range(2))
    c1, c2 = (r.integers(-15, 16, (40, 24)).astype(np.float32) for _ in range(2))

    def grads(m, compile_fn):
        lin = m.nn.Linear(16, 24)
        with m.no_grad():
            lin.weight.copy_(m.from_numpy(w))
            lin.bias.copy_(m.from_numpy(b))

        def loss(a1, a2, k1, k2):
            return (lin(a1).float() * k1).sum() + (lin(a2).float() * k2).sum()
        f = compile_fn(loss)
        for _ in range(2):     # (compiled: the capture, then the compiled step)
            lin.weight.grad = lin.bias.grad = None
            with m.autocast("cpu", dtype=m.bfloat16):
                out = f(*(m.from_numpy(a) for a in (x1, x2, c1, c2)))
            out.backward()
        return lin.weight.grad.numpy(), lin.bias.grad.numpy()
    gw, gb = grads(tj, tj.compile if compiled else (lambda f: f))
    np.testing.assert_array_equal(gw, _r(_r(c1.T @ x1) + _r(c2.T @ x2)))
    np.testing.assert_array_equal(gb, _r(_r(c1.sum(0)) + _r(c2.sum(0))))
    assert not np.array_equal(gw, _r(c1.T @ x1 + c2.T @ x2))   # (the roundings matter here)
    if torch is not None:
        tw, tb = grads(torch, lambda f: f)
        np.testing.assert_array_equal(gw, tw)
        np.testing.assert_array_equal(gb, tb)


def test_batchnorm_under_autocast_gives_float32_gradients_eager_and_compiled_alike():
    """Conv, BatchNorm, ReLU, max-pool, Linear under autocast: the BatchNorm runs on the
    bf16 activation, its weight's and bias's gradients are float32 sums (not rounded to
    bf16), and the compiled step's gradients are the eager step's bit for bit."""
    r = np.random.default_rng(8)
    x = tj.tensor(r.standard_normal((8, 2, 10, 10)).astype(np.float32))
    y = tj.tensor(r.integers(0, 5, 8))
    grads = []
    for compile_fn in (lambda f: f, tj.compile):
        tj.manual_seed(0)
        net = tj.nn.Sequential(tj.nn.Conv2d(2, 6, 3), tj.nn.BatchNorm2d(6), tj.nn.ReLU(), tj.nn.MaxPool2d(2),
                               tj.nn.Flatten(), tj.nn.Linear(96, 5))
        f = compile_fn(net)
        for _ in range(2):
            net.zero_grad()
            with tj.autocast("cpu", dtype=tj.bfloat16):
                loss = F.cross_entropy(f(x), y)
            loss.backward()
        grads.append({k: p.grad.numpy().copy() for k, p in net.named_parameters()})
    for k in grads[0]:
        np.testing.assert_array_equal(grads[0][k], grads[1][k], err_msg=k)
    gw = grads[0]["1.weight"]
    assert not np.array_equal(gw, _r(gw))    # (float32 sums, not bf16 values)


@needs_torch
@pytest.mark.parametrize("compiled", [False, True])
def test_batchnorm_statistics_stay_float32_like_torch(compiled):
    """A BatchNorm on a bf16 activation keeps its statistics float32, as PyTorch saves its
    mean and invstd: the running statistics (updated from the float32 ones, not a bf16
    rounding of them) and the gradients are torch.autocast's to float32 rounding (sums in
    another order), where bf16 statistics were off by bf16's precision (about 4e-3
    relative)."""
    r = np.random.default_rng(5)
    x = r.standard_normal((4, 3, 9, 9)).astype(np.float32)
    params = {"0.weight": r.standard_normal((5, 3, 3, 3)).astype(np.float32) * 0.3,
              "0.bias": r.standard_normal(5).astype(np.float32),
              "1.weight": r.standard_normal(5).astype(np.float32) + 1,
              "1.bias": r.standard_normal(5).astype(np.float32)}
    res = {}
    for m in (torch, tj):
        net = m.nn.Sequential(m.nn.Conv2d(3, 5, 3), m.nn.BatchNorm2d(5))
        net.load_state_dict({**net.state_dict(), **{k: m.tensor(v) for k, v in params.items()}})
        f = tj.compile(net) if compiled and m is tj else net
        for _ in range(2):
            net.zero_grad()
            with m.autocast("cpu", dtype=m.bfloat16):
                y = f(m.tensor(x))
            (y.float() ** 2).sum().backward()
        res[m] = [y.float().detach().numpy(), net[1].running_mean.numpy().copy(),
                  net[1].running_var.numpy().copy(), net[1].weight.grad.numpy(), net[1].bias.grad.numpy(),
                  net[0].weight.grad.numpy()]
    (ty, tm, tv, tgw, tgb, tgc), (y, mean, var, gw, gb, gc) = res[torch], res[tj]
    assert y.dtype == np.float32 and mean.dtype == np.float32
    np.testing.assert_allclose(mean, tm, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(var, tv, rtol=1e-5)
    np.testing.assert_allclose(y, ty, rtol=1e-2, atol=1e-2)   # (bf16 values; a few may round apart)
    for a, b in ((gw, tgw), (gb, tgb)):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-3 * np.abs(b).max())
    # (the convolution's weight gradient is a sum of bf16 values that may round apart)
    np.testing.assert_allclose(gc, tgc, atol=3e-2 * np.abs(tgc).max())


def _cache_states(m):
    """is_autocast_cache_enabled() along nested contexts, and after each exits."""
    seen = [m.is_autocast_cache_enabled()]
    with m.autocast("cpu", cache_enabled=False):
        seen.append(m.is_autocast_cache_enabled())
        with m.autocast("cpu"):                       # (None: the state in force)
            seen.append(m.is_autocast_cache_enabled())
            with m.autocast("cpu", cache_enabled=True, enabled=False):
                seen.append(m.is_autocast_cache_enabled())
            seen.append(m.is_autocast_cache_enabled())
        seen.append(m.is_autocast_cache_enabled())
    seen.append(m.is_autocast_cache_enabled())
    m.set_autocast_cache_enabled(False)
    with m.autocast("cpu"):
        seen.append(m.is_autocast_cache_enabled())
    m.set_autocast_cache_enabled(True)
    return seen


def test_nested_contexts_take_and_restore_the_cache_state_like_torch(float32_way, monkeypatch, cast_calls):
    """cache_enabled=None takes the state in force, an inner context's setting lasts
    until it exits, and a disabled or uncached inner context neither fills nor drops the
    outer one's casts: they go when the outermost context exits."""
    want = [True, False, False, True, False, False, True, False]
    assert _cache_states(tj) == want
    if torch is not None:
        assert _cache_states(torch) == want
    calls = cast_calls
    lin = tj.nn.Linear(8, 8)
    x = tj.tensor(np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32))

    def weight_casts():
        return sum(1 for t in calls if t is lin.weight)
    with tj.autocast("cpu"):
        lin(x)
        with tj.autocast("cpu", cache_enabled=False):
            lin(x)
            lin(x)
            assert weight_casts() == 3        # (uncached: one cast per use)
            with tj.autocast("cpu", enabled=False):
                assert lin(x).dtype is tj.float32
        lin(x)
        assert weight_casts() == 3            # (the outer cast, kept through the inner ones)
        assert policy.STATE.casts
        tj.clear_autocast_cache()
        lin(x)
        assert weight_casts() == 4
    assert policy.STATE.casts is None


def test_device_amp_modules_import_by_path_with_their_signatures():
    """``from torch.cuda.amp import autocast, GradScaler`` (RAFT's train.py): on a machine
    without CUDA both are disabled pass-throughs, as PyTorch's are; torch.cpu.amp's autocast
    takes ``enabled`` first."""
    import importlib
    cuda_amp, cpu_amp = importlib.import_module("tracejit.cuda.amp"), importlib.import_module("tracejit.cpu.amp")
    x = tj.ones(2, 2)
    with cpu_amp.autocast(True, tj.bfloat16):
        assert (x @ x).dtype is tj.bfloat16
    with cpu_amp.autocast(False):
        assert (x @ x).dtype is tj.float32
    assert cpu_amp.GradScaler(init_scale=4.0).get_scale() == 4.0
    if not tj.cuda.is_available():
        with cuda_amp.autocast(enabled=False):
            assert (x @ x).dtype is tj.float32
        with pytest.warns(UserWarning, match="CUDA is not available"):
            scaler = cuda_amp.GradScaler()
        loss = (tj.ones(2, requires_grad=True) * 3).sum()
        assert scaler.scale(loss) is loss and not scaler.is_enabled()
