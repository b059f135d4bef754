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
