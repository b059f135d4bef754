"""Optimizer's shared options: PyTorch's implementation choices (foreach, capturable,
differentiable) are accepted by every optimizer, kept in its groups, checked, and change no
numbers; complex parameters step as PyTorch's (real and imaginary parts as two reals)."""
import numpy as np
import pytest

import tracejit as tj


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adadelta", "Adagrad", "Adamax",
                                  "NAdam", "RAdam", "ASGD", "Rprop"])
def test_implementation_options_are_accepted_as_pytorch_keeps_them(name):
    p = tj.nn.Parameter(tj.ones(3))
    opt = getattr(tj.optim, name)([p], lr=0.1, foreach=True)
    assert opt.param_groups[0]["foreach"] is True
    assert opt.param_groups[0]["differentiable"] is False
    with pytest.raises(NotImplementedError, match=f"{name}: differentiable=True"):
        getattr(tj.optim, name)([p], lr=0.1, differentiable=True)
    with pytest.raises(TypeError, match="foreach"):
        getattr(tj.optim, name)([p], lr=0.1, foreach="yes")


def test_foreach_gives_the_same_steps_as_pytorch():
    torch = pytest.importorskip("torch")
    w = np.linspace(-1, 1, 6)
    out = []
    for lib in (tj, torch):
        p = lib.nn.Parameter(lib.tensor(w))
        opt = lib.optim.RMSprop([p], lr=0.01, momentum=0.9, weight_decay=1e-3, foreach=True)
        for _ in range(3):
            opt.zero_grad()
            (p * p * p).sum().backward()
            opt.step()
        out.append(p.detach().numpy())
    np.testing.assert_allclose(out[0], out[1], rtol=1e-12)


def _steps(compiled: bool, body) -> list:
    p = tj.nn.Parameter(tj.tensor([1.0, 2.0]))
    opt = tj.optim.SGD([p], lr=0.1, momentum=0.9)
    fn = tj.compile(lambda: body(p, opt)) if compiled else (lambda: body(p, opt))
    seen = []
    for _ in range(4):
        (p * p).sum().backward()
        fn()
        seen.append((p.detach().numpy().tolist(), None if p.grad is None else p.grad.numpy().tolist()))
    return seen


def _step(p, opt):
    opt.step()


def _zero(p, opt):
    opt.step()
    opt.zero_grad()


def _zero_in_place(p, opt):
    opt.zero_grad(set_to_none=False)


def _clip(p, opt):
    tj.nn.utils.clip_grad_value_([p], 0.5)
    opt.step()


@pytest.mark.parametrize("body", [_step, _zero, _zero_in_place, _clip])
def test_a_compiled_step_or_zero_grad_acts_on_every_call(body):
    # They change parameters, state and gradients outside the graph: a replay of the
    # capture would skip them, so the compiled function runs them eagerly.
    with pytest.warns(RuntimeWarning, match="outside the graph"):
        got = _steps(True, body)
    assert got == _steps(False, body)


@pytest.mark.parametrize("name,kw", [("SGD", {"momentum": 0.9, "weight_decay": 0.01}),
                                     ("Adam", {}), ("AdamW", {"amsgrad": True}), ("RMSprop", {"momentum": 0.5}),
                                     ("Adagrad", {}), ("NAdam", {})])
def test_complex_parameters_step_as_pytorchs(name, kw):
    # a Fourier layer's complex weights (FNO) trained by any optimizer
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))).astype(np.complex64)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    out = []
    for lib in (tj, torch):
        p = lib.nn.Parameter(lib.tensor(w))
        q = lib.nn.Parameter(lib.ones(4))        # a real one in the same group
        opt = getattr(lib.optim, name)([p, q], lr=0.05, **kw)
        for _ in range(3):
            y = lib.fft.irfft(lib.tensor(x).to(lib.complex64) @ p, n=6) * q.sum()
            loss = y.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        st = opt.state_dict()["state"][0]
        out.append([p.detach().numpy(), q.detach().numpy()]
                   + [v.numpy() for k, v in sorted(st.items()) if k != "step" and getattr(v, "ndim", 0)])
    for a, b in zip(*out):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


def test_complex_state_loads_and_keeps_stepping():
    p = tj.nn.Parameter(tj.tensor([1 + 2j, 3 - 1j]))
    opt = tj.optim.Adam([p], lr=0.1)
    p.grad = tj.tensor([1 + 1j, -2j])
    opt.step()
    again = tj.optim.Adam([tj.nn.Parameter(p.detach().clone())], lr=0.1)
    again.load_state_dict(opt.state_dict())
    q = again.param_groups[0]["params"][0]
    q.grad = p.grad.clone()
    opt.step()
    again.step()
    np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy())
    assert again.state[q]["exp_avg"].dtype == tj.complex64 and again.state[q]["step"] == 2
    with pytest.raises(TypeError, match="real tensors"):
        tj.optim.LBFGS([tj.nn.Parameter(tj.tensor([1j]))])


@pytest.mark.parametrize("lib_name", ["torch", "tracejit"])
def test_a_tensor_learning_rate(lib_name):
    """A one-element tensor lr (compile-minded code passes one) steps as its value."""
    lib = pytest.importorskip("torch") if lib_name == "torch" else tj
    p = lib.nn.Parameter(lib.ones(2))
    p.grad = lib.ones(2)
    opt = lib.optim.Adam([p], lr=lib.tensor(0.1))
    opt.step()
    assert abs(p.tolist()[0] - 0.9) < 1e-6 and abs(float(opt.param_groups[0]["lr"]) - 0.1) < 1e-7


@pytest.mark.parametrize("name", ["Adam", "AdamW", "Adamax", "NAdam", "RAdam"])
def test_tensor_betas_step_as_their_values(name):
    """PyTorch's Adam family takes betas as one-element tensors too."""
    torch = pytest.importorskip("torch")
    got = []
    for lib in (torch, tj):
        p = lib.nn.Parameter(lib.tensor([1.0, -2.0]))
        opt = getattr(lib.optim, name)([p], lr=0.1, betas=(lib.tensor(0.8), lib.tensor(0.9)))
        for _ in range(3):
            p.grad = p.detach() ** 3
            opt.step()
        got.append(p.detach().numpy())
        assert [float(b) for b in opt.param_groups[0]["betas"]] == pytest.approx([0.8, 0.9])
    np.testing.assert_allclose(got[1], got[0], rtol=1e-6, atol=1e-7)


def _converted(obj, to):
    """A state_dict with its tensors moved to library `to` (through numpy)."""
    if isinstance(obj, dict):
        return {k: _converted(v, to) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_converted(v, to) for v in obj]
    return to.tensor(obj.detach().numpy()) if hasattr(obj, "detach") else obj


@pytest.mark.parametrize("name", ["NAdam", "ASGD", "SparseAdam", "LBFGS"])
def test_state_dicts_load_across_tracejit_and_pytorch(name):
    """Each library's state_dict, loaded into the other's optimizer, continues its steps:
    the state's layout (tensors, numbers) is PyTorch's."""
    torch = pytest.importorskip("torch")
    w = np.linspace(-0.4, 0.5, 6, dtype=np.float32).reshape(3, 2)

    def make(m):
        p = m.nn.Parameter(m.tensor(w))
        return p, getattr(m.optim, name)([p])

    def steps(m, p, opt, n):
        def closure():
            opt.zero_grad()
            x = m.nn.functional.embedding(m.tensor([0, 2]), p, sparse=name == "SparseAdam")
            loss = (x ** 2).sum() + (x ** 3).sum()
            loss.backward()
            return loss
        for _ in range(n):
            opt.step(closure)

    p, opt = make(torch)
    steps(torch, p, opt, 4)
    want = p.detach().numpy()
    layouts = []
    for first, then in ((tj, torch), (torch, tj)):
        p, opt = make(first)
        steps(first, p, opt, 2)
        state = opt.state_dict()
        layouts.append({k: _layout(v) for k, v in state["state"][0].items() if k != "al"})
        p2, opt2 = make(then)
        with then.no_grad():
            p2.copy_(then.tensor(p.detach().numpy()))
        opt2.load_state_dict(_converted(state, then))
        steps(then, p2, opt2, 2)
        np.testing.assert_allclose(p2.detach().numpy(), want, rtol=1e-5, atol=1e-7)
    assert layouts[0] == layouts[1]


def _layout(v):
    if isinstance(v, list):
        return [_layout(x) for x in v]
    return ("tensor", tuple(v.shape)) if hasattr(v, "detach") else "number" if isinstance(v, (int, float)) else v


# --------------------------------------------------------------------------- one form, two paths
# (name, flags, fused): the fused ones also in one launch (a kernel compile each, so one rich
# set of flags per form; Adam's and SGD's flags are those their own tests compile)
_FORMS = [
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.01), True),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, maximize=True, weight_decay=1e-3, foreach=True), False),
    ("Adam", dict(lr=0.01, amsgrad=True, maximize=True), True),
    ("Adam", dict(lr=0.01, betas=(0.5, 0.9), weight_decay=0.1), False),
    ("AdamW", dict(lr=0.02, weight_decay=0.3, amsgrad=True), True),
    ("RMSprop", dict(lr=0.01, weight_decay=0.1, maximize=True), False),
    ("RMSprop", dict(lr=0.01, momentum=0.5, centered=True, weight_decay=0.1, maximize=True, foreach=True), True),
    ("Adagrad", dict(lr=0.1, lr_decay=0.1, weight_decay=0.1, initial_accumulator_value=0.5, maximize=True), True),
    ("Adadelta", dict(lr=0.5, rho=0.8, weight_decay=0.1, maximize=True), True),
    ("Adamax", dict(lr=0.05, weight_decay=0.1, maximize=True), True),
    ("NAdam", dict(lr=0.05, weight_decay=0.1, maximize=True), False),
    ("NAdam", dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True), True),
    ("RAdam", dict(lr=0.05, weight_decay=0.1, maximize=True), True),
    ("RAdam", dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True), False),
    ("ASGD", dict(lr=0.05, t0=2, lambd=0.01, weight_decay=0.1, maximize=True), True),
    ("Rprop", dict(lr=0.05, etas=(0.4, 1.3), step_sizes=(1e-3, 0.2), maximize=True), True),
]


def _form_steps(name: str, kw: dict, lib, mixed: bool, steps: int = 7):
    """Parameters of mixed shapes (one empty, one 0-d, one without a gradient; `mixed`: of two
    dtypes) after `steps` steps of `name`; returns [p, then each state value by key] per
    parameter (RAdam's rectified step starts at step 6)."""
    rng = np.random.default_rng(0)
    dt = "float64" if mixed else "float32"
    specs = [((4, 3), "float32"), ((5,), dt), ((0,), "float32"), ((), "float32"), ((6,), "float32"),
             ((2,), dt)]
    ps = [lib.nn.Parameter(lib.tensor(rng.standard_normal(s).astype(t))) for s, t in specs]
    w = ps[5].detach().numpy().copy()
    opt = getattr(lib.optim, name)(ps, **kw)
    for _ in range(steps):
        for p, (s, t) in zip(ps[:5], specs):     # the last parameter has no gradient: not stepped
            p.grad = lib.tensor(rng.standard_normal(s).astype(t))
        opt.step()
    np.testing.assert_array_equal(ps[5].detach().numpy(), w)
    assert opt.state.get(ps[5], {}).get("step", 0) == 0
    return [[p.detach().numpy()] + [np.asarray(v.numpy() if hasattr(v, "numpy") else v)
                                    for k, v in sorted(opt.state[p].items()) if k != "step"] for p in ps[:5]]


@pytest.mark.parametrize("name,kw,fuse", _FORMS)
def test_fused_launch_is_bitwise_the_array_path_and_matches_pytorch(monkeypatch, fused_launches, thread_counts_back,
                                                                    name, kw, fuse):
    """Every elementwise optimizer's update is one form: its array path gives PyTorch's
    values, and its fused launch (one thread or two sharing the chunks) the same bits."""
    torch = pytest.importorskip("torch")
    from tracejit.optim import optimizer
    mixed = name in ("SGD", "Adam", "AdamW")
    monkeypatch.setattr(optimizer, "_fused_default", lambda: False)
    arrays = _form_steps(name, kw, tj, mixed)
    for got, want in zip(arrays, _form_steps(name, kw, torch, mixed)):
        for a, b in zip(got, want):
            assert a.dtype == b.dtype or a.ndim == 0
            tol = 1e-5 if a.dtype == np.float32 or a.ndim == 0 else 1e-12
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    if not fuse:
        return
    pytest.importorskip("numba", reason="the fused update is a numba kernel")
    monkeypatch.setattr(optimizer, "_fused_default", lambda: True)
    monkeypatch.setattr(optimizer, "FUSED_MIN", 0)
    monkeypatch.setattr(optimizer.Optimizer, "_parallel_min", 0)
    calls = fused_launches()
    for n in (1, 2):
        tj.set_num_threads(n)
        fused = _form_steps(name, kw, tj, mixed)
        for got, want in zip(fused, arrays):
            for a, b in zip(got, want):
                assert a.dtype == b.dtype
                np.testing.assert_array_equal(a, b)
    assert calls, "no fused launch"


@pytest.mark.parametrize("name, kw", [("Adam", dict(lr=1e-2, weight_decay=0.1)), ("SGD", dict(lr=0.1, momentum=0.9)),
                                      ("RMSprop", dict(lr=1e-2)), ("Adagrad", dict(lr=0.1, initial_accumulator_value=0.5)),
                                      ("Rprop", dict(lr=1e-2))])
def test_bfloat16_parameters_step_as_pytorch(name, kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    p0, grads = rng.standard_normal(64).astype(np.float32), rng.standard_normal((3, 64)).astype(np.float32)
    got = []
    for lib in (tj, torch):
        p = lib.nn.Parameter(lib.tensor(p0).to(lib.bfloat16))
        opt = getattr(lib.optim, name)([p], **kw)
        for g in grads:
            p.grad = lib.tensor(g).to(lib.bfloat16)
            opt.step()
        got.append(p.detach().to(lib.float32).numpy())
    assert p.dtype == torch.bfloat16 and np.abs(got[1] - p0).max() > 0.02
    # PyTorch rounds each operation's result to bfloat16: a bfloat16 rounding apart or two
    np.testing.assert_allclose(got[0], got[1], rtol=2 ** -7, atol=1e-3)


@pytest.mark.parametrize("name", ["SGD", "Adagrad", "Adam", "RMSprop", "Rprop"])
def test_param_group_keys_as_torch(name):
    """A group holds PyTorch's keys: no ``capturable`` where PyTorch's optimizer has none."""
    torch = pytest.importorskip("torch")
    keys = [sorted(getattr(m.optim, name)([m.nn.Parameter(m.zeros(1))], lr=0.1).param_groups[0])
            for m in (torch, tj)]
    assert keys[1] == keys[0]
