"""Adam / AdamW: values against hand-computed formulas and (when installed) PyTorch, state, validation."""
import math
import sys

import numpy as np
import pytest

import tracejit as tj
from tracejit import nn, optim


def ref_adam(p, grads, lr, betas, eps, wd, amsgrad=False, decoupled=False):
    """The Adam/AdamW update written out in float64."""
    b1, b2 = betas
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    vmax = np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        if decoupled:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        vmax = np.maximum(vmax, v)
        vhat = (vmax if amsgrad else v) / (1 - b2 ** t)
        p = p - lr * (m / (1 - b1 ** t)) / (np.sqrt(vhat) + eps)
    return p


@pytest.mark.parametrize("cls,kw", [
    (optim.Adam, dict(lr=0.01)),
    (optim.Adam, dict(lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    (optim.Adam, dict(lr=0.01, amsgrad=True)),
    (optim.AdamW, dict(lr=0.01)),
    (optim.AdamW, dict(lr=0.02, weight_decay=0.3, amsgrad=True)),
])
def test_adam_matches_hand_formula(cls, kw):
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal(5)
    grads = [rng.standard_normal(5) for _ in range(6)]
    p = nn.Parameter(tj.tensor(p0, dtype=tj.float64))
    opt = cls([p], **kw)
    for g in grads:
        p.grad = tj.tensor(g, dtype=tj.float64)
        opt.step()
    full = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, amsgrad=False,
                weight_decay=0.01 if cls is optim.AdamW else 0.0)
    full.update(kw)
    expected = ref_adam(p0, grads, full["lr"], full["betas"], full["eps"], full["weight_decay"],
                        full["amsgrad"], decoupled=cls is optim.AdamW)
    np.testing.assert_allclose(p.detach().numpy(), expected, rtol=1e-12, atol=1e-14)
    assert opt.state[p]["step"] == 6


def test_first_adam_step_moves_each_weight_by_lr():
    # With m = (1-b1) g and v = (1-b2) g^2, the bias-corrected first step is lr * sign(g).
    p = nn.Parameter(tj.tensor([1.0, 1.0, 1.0]))
    p.grad = tj.tensor([0.3, -20.0, 1e-3])
    optim.Adam([p], lr=0.1, eps=0.0).step()
    np.testing.assert_allclose(p.detach().numpy(), [0.9, 1.1, 0.9], rtol=1e-6)


def test_adam_in_place_float32_and_no_graph():
    lin = nn.Linear(4, 3)
    w, data = lin.weight, lin.weight._data
    opt = optim.Adam(lin.parameters(), lr=1e-2, amsgrad=True)
    for _ in range(3):
        opt.zero_grad()
        lin(tj.randn(5, 4)).pow(2).mean().backward()
        opt.step()
    assert lin.weight is w and w._data is data and w.dtype is tj.float32
    assert w.grad_fn is None and w.requires_grad
    st = opt.state[w]
    assert sorted(st) == ["exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"]
    assert all(st[k].dtype is tj.float32 for k in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"))


def test_adam_validation():
    p = nn.Parameter(tj.ones(2))
    with pytest.raises(ValueError, match="learning rate lr: -1"):
        optim.Adam([p], lr=-1)
    with pytest.raises(ValueError, match="beta parameter at index 0: 1.0"):
        optim.Adam([p], betas=(1.0, 0.999))
    with pytest.raises(ValueError, match="beta parameter at index 1: -0.1"):
        optim.AdamW([p], betas=(0.9, -0.1))
    with pytest.raises(ValueError, match="pair"):
        optim.Adam([p], betas=(0.9,))
    with pytest.raises(ValueError, match="eps"):
        optim.Adam([p], eps=-1e-8)
    with pytest.raises(ValueError, match="weight_decay"):
        optim.AdamW([p], weight_decay=-0.1)
    with pytest.raises(ValueError, match="lr: nan"):
        optim.Adam([p], lr=math.nan)


def test_adam_state_dict_round_trip():
    def make():
        tj.manual_seed(1)
        m = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
        return m, optim.AdamW(m.parameters(), lr=1e-2)

    def train(m, opt, steps):
        x = tj.ones(8, 3)
        for _ in range(steps):
            opt.zero_grad()
            (m(x) - 1.0).pow(2).mean().backward()
            opt.step()

    m, opt = make()
    train(m, opt, 3)
    m2, opt2 = make()
    m2.load_state_dict(m.state_dict())
    opt2.load_state_dict(opt.state_dict())
    assert opt2.param_groups[0]["betas"] == (0.9, 0.999)
    train(m, opt, 4)
    train(m2, opt2, 4)
    for a, b in zip(m.parameters(), m2.parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def test_load_state_dict_rejects_wrong_state_shape():
    p = nn.Parameter(tj.ones(3))
    p.grad = tj.ones(3)
    opt = optim.Adam([p])
    opt.step()
    sd = opt.state_dict()
    sd["state"][0]["exp_avg"] = tj.ones(4)
    q = nn.Parameter(tj.ones(3))
    fresh = optim.Adam([q])
    with pytest.raises(ValueError, match="'exp_avg'.*\\(4,\\).*\\(3,\\)"):
        fresh.load_state_dict(sd)
    assert len(fresh.state) == 0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,kw", [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, betas=(0.5, 0.9), weight_decay=0.1, amsgrad=True)),
    ("AdamW", dict(lr=0.01, maximize=True)),
    ("AdamW", dict(lr=0.01, weight_decay=0.5, amsgrad=True)),
    ("Adam", dict(lr=0.01, weight_decay=0.5, decoupled_weight_decay=True)),
])
@pytest.mark.parametrize("fused", [False, True])
def test_matches_pytorch(name, kw, dtype, fused):
    """Parameters of mixed shapes (one empty, one without a gradient) after 3 steps, and
    the optimizer's state, on the array path and in one fused launch."""
    torch = pytest.importorskip("torch")
    if fused:
        pytest.importorskip("numba", reason="the fused update is a numba kernel")
    rng = np.random.default_rng(0)
    shapes = [(4, 3), (5,), (0,), (2,)]
    w0 = [rng.standard_normal(s).astype(dtype) for s in shapes]
    grads = [[rng.standard_normal(s).astype(dtype) for s in shapes[:3]] for _ in range(3)]
    ps = [nn.Parameter(tj.tensor(w)) for w in w0]
    qs = [torch.nn.Parameter(torch.tensor(w)) for w in w0]
    opt, topt = getattr(optim, name)(ps, fused=fused, **kw), getattr(torch.optim, name)(qs, **kw)
    for gs in grads:
        for p, q, g in zip(ps, qs, gs):     # the last parameter has no gradient: not stepped
            p.grad, q.grad = tj.tensor(g), torch.tensor(g)
        opt.step()
        topt.step()
    tol = 1e-6 if dtype == "float32" else 1e-13
    np.testing.assert_array_equal(ps[3].detach().numpy(), w0[3])
    assert ps[3] not in opt.state or not opt.state[ps[3]]
    for p, q in zip(ps, qs):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=tol, atol=tol)
        for key, value in topt.state[q].items():
            if key != "step":
                np.testing.assert_allclose(opt.state[p][key].numpy(), value.numpy(), rtol=tol, atol=tol,
                                           err_msg=key)
    p, q = ps[0], qs[0]
    tol = 1e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=tol, atol=tol)
    key = "decoupled_weight_decay"
    assert opt.param_groups[0].get(key) == topt.param_groups[0].get(key)


# --------------------------------------------------------------------------- fused kernel
def _run_steps(cls, kw, fused, p0, grads):
    p = nn.Parameter(tj.tensor(p0.copy()))
    opt = cls([p], fused=fused, **kw)
    for g in grads:
        p.grad = tj.tensor(g)
        opt.step()
    return p.detach().numpy(), opt.state[p]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [7, 20000])        # the serial and the parallel kernel
@pytest.mark.parametrize("cls,kw", [
    (optim.Adam, dict(lr=0.01)),
    (optim.Adam, dict(lr=0.05, betas=(0.3, 0.99), eps=1e-6, weight_decay=0.1)),   # lerp's other form
    (optim.Adam, dict(lr=0.01, amsgrad=True, maximize=True)),
    (optim.AdamW, dict(lr=0.01)),
    (optim.AdamW, dict(lr=0.02, weight_decay=0.3, amsgrad=True)),
    (optim.Adam, dict(lr=0.02, weight_decay=0.3, decoupled_weight_decay=True)),
])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # the array path's inf - inf
def test_fused_step_is_bitwise_the_array_path(cls, kw, n, dtype):
    rng = np.random.default_rng(1)
    p0 = rng.standard_normal(n).astype(dtype)
    grads = [(rng.standard_normal(n) * 10.0 ** rng.integers(-3, 3)).astype(dtype) for _ in range(5)]
    grads[2][:3] = [np.nan, np.inf, -np.inf]     # nan and inf reach p, m, v and amsgrad's max alike
    got, st = _run_steps(cls, kw, True, p0, grads)
    want, st_ref = _run_steps(cls, kw, False, p0, grads)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)
    for name in st_ref:
        if name != "step":
            np.testing.assert_array_equal(st[name].numpy(), st_ref[name].numpy(), err_msg=name)
    assert st["step"] == 5


def test_fused_default_covers_big_parameters_unless_eager(monkeypatch, fused_launches, one_big_one_small):
    import numba  # noqa: F401  (the default fuses once numba is loaded)
    calls = fused_launches("adam")
    opt, big, small = one_big_one_small(optim.Adam, 0.1, calls)  # one launch for both
    np.testing.assert_allclose(big.detach().numpy(), -0.1, rtol=1e-6)
    np.testing.assert_allclose(small.detach().numpy(), -0.1, rtol=1e-6)
    with tj.eager():                               # the debugging mode compiles nothing
        opt.step()
    assert len(calls) == 1
    optim.Adam([big], lr=0.1, fused=False).step()
    optim.Adam([small], lr=0.1).step()             # small in all: the array path by default
    assert len(calls) == 1
    monkeypatch.delitem(sys.modules, "numba")     # a process that never compiled anything
    opt.step()
    assert len(calls) == 1
    optim.Adam([small], lr=0.1, fused=True).step()
    assert calls == [[optim.FUSED_MIN, 10], [10]]


def test_fused_batches_parameters_by_dtype_and_step():
    """Parameters at different step counts (one had no gradient for a step) or of
    different dtypes take separate launches, each with its own bias corrections."""
    rng = np.random.default_rng(3)
    p0 = {k: rng.standard_normal(n).astype(dt) for k, n, dt in
          [("a", 300, "float32"), ("b", 40, "float32"), ("c", 50, "float64"), ("d", 20000, "float32")]}
    grads = [{k: rng.standard_normal(v.size).astype(v.dtype) for k, v in p0.items()} for _ in range(4)]

    def run(fused):
        ps = {k: nn.Parameter(tj.tensor(v.copy())) for k, v in p0.items()}
        opt = optim.AdamW(list(ps.values()), lr=0.01, fused=fused)
        for step, g in enumerate(grads):
            for k, p in ps.items():
                p.grad = None if (k == "b" and step == 1) else tj.tensor(g[k])
            opt.step()
        return {k: p.detach().numpy() for k, p in ps.items()}, opt
    got, opt = run(True)
    want, _ = run(False)
    for k in p0:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    assert [opt.state[p]["step"] for p in opt.param_groups[0]["params"]] == [4, 3, 4, 4]


def test_fused_takes_the_array_path_for_a_strided_gradient(monkeypatch):
    from tracejit.compiler.cpu.kernels import foreach
    monkeypatch.setattr(foreach, "run", lambda *a, **k: pytest.fail("fused kernel on a strided array"))
    g = np.arange(1.0, 13.0).reshape(3, 4)
    p = nn.Parameter(tj.zeros((4, 3), dtype=tj.float64))
    p.grad = tj.tensor(g).t()                      # a transposed view
    assert not p.grad.numpy().flags.c_contiguous
    optim.Adam([p], lr=0.1, eps=0.0, fused=True).step()
    np.testing.assert_allclose(p.detach().numpy(), np.full((4, 3), -0.1), rtol=1e-12)


def test_fused_argument_is_checked_at_construction():
    p, q = nn.Parameter(tj.zeros(3)), nn.Parameter(tj.zeros(3))
    q.device = type("FakeDevice", (), {"__str__": lambda self: "cuda:0"})()   # no GPU needed
    with pytest.raises(ValueError, match="fused=True supports parameters on the CPU only; parameter 1 is on cuda:0"):
        optim.Adam([p, q], fused=True)
    optim.Adam([p, q], fused=None)                 # the default leaves such parameters to the array path
    with pytest.raises(TypeError, match="fused must be None, True or False, got 'yes'"):
        optim.AdamW([nn.Parameter(tj.zeros(3))], fused="yes")
    with pytest.raises(TypeError, match="fused must be None, True or False, got 1"):
        optim.Adam([nn.Parameter(tj.zeros(3))], fused=1)


def test_fused_kernels_live_in_tracejit_disk_cache(tmp_path, monkeypatch):
    from tracejit.compiler import diskcache
    from tracejit.compiler.cpu.kernels import loader
    from differential import kernel_cache_at
    monkeypatch.setattr(loader, "_kernels", {})
    with kernel_cache_at(tmp_path):
        diskcache.clear_memory_cache()
        p = nn.Parameter(tj.zeros(5, dtype=tj.float64))
        p.grad = tj.ones(5, dtype=tj.float64)
        optim.Adam([p], lr=0.1, eps=0.0, fused=True).step()
        sources = [f.read_text() for f in tmp_path.glob("kernels/*/*/kernel.py")]
    assert any("foreach group: " in s and "float64" in s for s in sources), sources
    np.testing.assert_allclose(p.detach().numpy(), -0.1, rtol=1e-12)


# --------------------------------------------------------------------------- array path by blocks
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("cls,kw", [
    (optim.Adam, dict(lr=0.01)),
    (optim.Adam, dict(lr=0.05, betas=(0.3, 0.99), eps=1e-6, weight_decay=0.1)),   # lerp's other form
    (optim.Adam, dict(lr=0.01, amsgrad=True, maximize=True)),
    (optim.AdamW, dict(lr=0.02, weight_decay=0.3, amsgrad=True)),
    (optim.Adam, dict(lr=np.float64(0.01), betas=(np.float64(0.9), 0.999))),   # numpy scalars
])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # inf - inf
def test_array_path_by_blocks_is_bitwise_the_whole_array_operations(monkeypatch, cls, kw, dtype):
    from tracejit.optim import optimizer
    n = 2 * optimizer._BLOCK + 7       # two full blocks and a short one
    rng = np.random.default_rng(3)
    p0 = rng.standard_normal((n, 1)).astype(dtype)
    grads = [(rng.standard_normal((n, 1)) * 10.0 ** rng.integers(-2, 2)).astype(dtype) for _ in range(4)]
    grads[1][[0, optimizer._BLOCK, n - 1], 0] = [np.nan, np.inf, -np.inf]
    grads[3][-5:] = 0.0
    blocks, real = [], optimizer._blockable
    monkeypatch.setattr(optimizer, "_blockable", lambda *a: blocks.append(1) or real(*a))
    got, st = _run_steps(cls, kw, False, p0, grads)
    assert len(blocks) == 4
    monkeypatch.setattr(optimizer, "_blockable", lambda *a: False)
    want, st_ref = _run_steps(cls, kw, False, p0, grads)
    assert got.dtype == np.dtype(dtype) and not np.array_equal(got, p0)
    np.testing.assert_array_equal(got, want)
    for name in st_ref:
        if name != "step":
            np.testing.assert_array_equal(st[name].numpy(), st_ref[name].numpy(), err_msg=name)


def test_array_path_keeps_whole_arrays_for_a_strided_parameter(monkeypatch):
    from tracejit.optim import optimizer
    blockable, real = [], optimizer._blockable
    monkeypatch.setattr(optimizer, "_blockable", lambda *a: blockable.append(real(*a)) or blockable[-1])
    base = np.arange(3.0 * optimizer._BLOCK).reshape(3, -1)
    p = nn.Parameter(tj.tensor(base.T.copy()))
    p._data = np.asfortranarray(base.T.copy())        # F-ordered data: no flat blocks of it
    p.grad = tj.tensor(np.ones(base.T.shape))
    optim.Adam([p], lr=0.5, fused=False).step()
    assert blockable == [False]
    np.testing.assert_allclose(p.detach().numpy(), base.T - 0.5, rtol=1e-6)   # lr * sign(g)


def test_state_dict_step_is_a_float_tensor_as_pytorchs_and_loads_back():
    p = tj.nn.Parameter(tj.ones(3))
    opt = tj.optim.Adam([p], lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        (p * p).sum().backward()
        opt.step()
    step = opt.state_dict()["state"][0]["step"]
    assert isinstance(step, tj.Tensor) and step.dtype == tj.float32 and step.item() == 3.0
    live = opt.state[p]["step"]   # the live count: that very tensor, as in PyTorch
    assert live is step and live.item() == 3.0
    q = tj.nn.Parameter(p.detach().clone())
    opt2 = tj.optim.Adam([q], lr=0.1)
    opt2.load_state_dict(opt.state_dict())
    for o, t in ((opt, p), (opt2, q)):
        o.zero_grad()
        (t * t).sum().backward()
        o.step()
    np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
