"""SGD: update values against hand-computed formulas, in-place updates, groups, validation."""
import numpy as np
import pytest

import tracejit as tj
from tracejit import nn, optim


def param(values, grad):
    p = nn.Parameter(tj.tensor(values, dtype=tj.float64))
    p.grad = tj.tensor(grad, dtype=tj.float64)
    return p


def test_plain_sgd_step():
    p = param([1.0, -2.0], [0.5, 1.0])
    optim.SGD([p], lr=0.1).step()
    np.testing.assert_allclose(p.detach().numpy(), [1.0 - 0.05, -2.0 - 0.1], rtol=0, atol=1e-15)


def test_momentum_dampening_weight_decay_by_hand():
    p = param([1.0], [2.0])
    opt = optim.SGD([p], lr=0.1, momentum=0.9, dampening=0.5, weight_decay=0.01)
    # step 1: g = 2 + 0.01*1 = 2.01; buf = g (no dampening on the first step); p = 1 - 0.1*2.01
    opt.step()
    p1 = 1 - 0.1 * 2.01
    assert p.item() == pytest.approx(p1, abs=1e-15)
    # step 2 with grad 1.0: g = 1 + 0.01*p1; buf = 0.9*2.01 + 0.5*g; p = p1 - 0.1*buf
    p.grad = tj.tensor([1.0], dtype=tj.float64)
    opt.step()
    g = 1 + 0.01 * p1
    buf = 0.9 * 2.01 + 0.5 * g
    assert p.item() == pytest.approx(p1 - 0.1 * buf, abs=1e-15)
    assert opt.state[p]["momentum_buffer"].item() == pytest.approx(buf, abs=1e-15)


def test_nesterov_and_maximize_by_hand():
    p = param([0.0], [1.0])
    opt = optim.SGD([p], lr=0.5, momentum=0.9, nesterov=True)
    opt.step()  # buf = 1; g = 1 + 0.9*1 = 1.9
    assert p.item() == pytest.approx(-0.95)
    opt.step()  # buf = 0.9 + 1 = 1.9; g = 1 + 0.9*1.9 = 2.71
    assert p.item() == pytest.approx(-0.95 - 0.5 * 2.71)
    q = param([0.0], [1.0])
    optim.SGD([q], lr=0.5, maximize=True).step()
    assert q.item() == pytest.approx(0.5)


def test_update_is_in_place_and_records_no_graph():
    lin = nn.Linear(3, 2)
    w, data, version = lin.weight, lin.weight._data, lin.weight._version
    opt = optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    lin(tj.randn(4, 3)).sum().backward()
    opt.step()
    assert lin.weight is w and w._data is data and w._version == version + 1
    assert w.grad_fn is None and w.is_leaf and w.requires_grad
    assert opt.state[w]["momentum_buffer"].grad_fn is None


def test_params_without_grad_are_skipped_and_zero_grad():
    a, b = param([1.0], [1.0]), nn.Parameter(tj.tensor([5.0]))
    opt = optim.SGD([a, b], lr=1.0)
    opt.step()
    assert a.item() == 0.0 and b.item() == 5.0
    opt.zero_grad(set_to_none=False)
    assert a.grad.tolist() == [0.0]
    opt.zero_grad()
    assert a.grad is None


def test_param_groups_have_their_own_hyperparameters():
    a, b = param([1.0], [1.0]), param([1.0], [1.0])
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1, momentum=0.0)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert opt.param_groups[1]["momentum"] == 0.0
    opt.step()
    assert a.item() == pytest.approx(0.9) and b.item() == pytest.approx(0.5)
    c = param([1.0], [1.0])
    opt.add_param_group({"params": c, "lr": 1.0})
    opt.step()
    assert c.item() == 0.0
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    assert len(opt.param_groups) == 3


def test_bad_input_is_rejected_with_a_clear_error():
    p = param([1.0], [1.0])
    with pytest.raises(ValueError, match="learning rate lr: -0.1"):
        optim.SGD([p], lr=-0.1)
    with pytest.raises(ValueError, match="momentum"):
        optim.SGD([p], lr=0.1, momentum=-1)
    with pytest.raises(ValueError, match="weight_decay"):
        optim.SGD([p], lr=0.1, weight_decay=-1e-3)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(TypeError, match="lr must be a number"):
        optim.SGD([p], lr="0.1")
    with pytest.raises(TypeError, match="parameter 1 of a group is a int"):
        optim.SGD([p, 3], lr=0.1)
    with pytest.raises(TypeError, match="single Tensor"):
        optim.SGD(p, lr=0.1)
    with pytest.raises(TypeError, match="set"):
        optim.SGD({p}, lr=0.1)
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([p * 2], lr=0.1)
    with pytest.raises(ValueError, match="twice"):
        optim.SGD([p, p], lr=0.1)
    opt = optim.SGD([p], lr=0.1)
    with pytest.raises(ValueError, match="learning rate"):
        opt.add_param_group({"params": [param([1.0], [1.0])], "lr": -1.0})
    assert len(opt.param_groups) == 1  # the failed call changed nothing


def test_closure_and_named_parameters():
    lin = nn.Linear(2, 1)
    opt = optim.SGD(lin.named_parameters(), lr=0.1)
    assert opt.param_groups[0]["param_names"] == ["weight", "bias"]

    def closure():
        opt.zero_grad()
        loss = (lin(tj.ones(1, 2)) ** 2).sum()
        loss.backward()
        return loss
    first = opt.step(closure).item()
    assert opt.step(closure).item() < first


def test_state_dict_round_trip_continues_identically():
    def make():
        tj.manual_seed(0)
        lin = nn.Linear(3, 2)
        return lin, optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)

    def train(lin, opt, steps):
        for i in range(steps):
            opt.zero_grad()
            (lin(tj.ones(2, 3) * (i + 1)) ** 2).sum().backward()
            opt.step()

    lin, opt = make()
    train(lin, opt, 2)
    sd_model, sd_opt = lin.state_dict(), opt.state_dict()
    assert sd_opt["param_groups"][0]["params"] == [0, 1]
    assert set(sd_opt["state"]) == {0, 1}
    lin2, opt2 = make()
    lin2.load_state_dict(sd_model)
    opt2.load_state_dict(sd_opt)
    assert opt2.state[lin2.weight]["momentum_buffer"]._data is not opt.state[lin.weight]["momentum_buffer"]._data
    train(lin, opt, 3)
    train(lin2, opt2, 3)
    np.testing.assert_array_equal(lin.weight.detach().numpy(), lin2.weight.detach().numpy())


def test_load_state_dict_mismatch_changes_nothing():
    a = param([1.0], [1.0])
    opt = optim.SGD([a], lr=0.1)
    sd = optim.SGD([param([1.0], [1.0]), param([2.0], [1.0])], lr=0.3).state_dict()
    with pytest.raises(ValueError, match="has 2 parameters, the optimizer.s group has 1"):
        opt.load_state_dict(sd)
    assert opt.param_groups[0]["lr"] == 0.1
    with pytest.raises(ValueError, match="'state' and 'param_groups'"):
        opt.load_state_dict({"foo": 1})


# --------------------------------------------------------------------------- fused kernel
def _sgd_steps(kw, fused, p0s, grads):
    ps = [nn.Parameter(tj.tensor(p.copy())) for p in p0s]
    opt = optim.SGD(ps, fused=fused, **kw)
    for step in grads:
        for p, g in zip(ps, step):
            p.grad = tj.tensor(g)
        opt.step()
    bufs = [opt.state[p]["momentum_buffer"] for p in ps if "momentum_buffer" in opt.state[p]]
    return [p.detach().numpy() for p in ps], bufs


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("sizes,parallel", [([(3, 5), (7,)], False), ([(300, 70), (1 << 16) + 5, (9,)], True)])
@pytest.mark.parametrize("kw", [
    dict(lr=0.01),
    dict(lr=0.1, momentum=0.9),
    dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.01),
    dict(lr=0.05, momentum=0.8, nesterov=True, maximize=True, weight_decay=1e-3),
])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # the array path's inf - inf
def test_fused_step_is_bitwise_the_array_path(monkeypatch, fused_launches, kw, sizes, parallel, dtype):
    from tracejit.optim import sgd
    if parallel:     # the kernel in shares (claimed chunks) for these sizes too
        monkeypatch.setattr(sgd.SGD, "_parallel_min", 1 << 16)
    calls = fused_launches("sgd")
    rng = np.random.default_rng(1)
    p0s = [rng.standard_normal(s).astype(dtype) for s in sizes]
    grads = [[(rng.standard_normal(s) * 10.0 ** rng.integers(-3, 3)).astype(dtype) for s in sizes]
             for _ in range(4)]
    grads[1][0].flat[:2] = [np.nan, np.inf]        # nan and inf reach p and the buffer alike
    got, got_bufs = _sgd_steps(kw, True, p0s, grads)
    # one launch a step (the first momentum step's buffer = g: the array path where g is
    # the gradient as given)
    assert len(calls) == 4
    want, want_bufs = _sgd_steps(kw, False, p0s, grads)
    assert len(calls) == 4
    for g, w in zip(got, want):
        assert g.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(g, w)
    assert len(got_bufs) == len(want_bufs) == (len(sizes) if "momentum" in kw else 0)
    for g, w in zip(got_bufs, want_bufs):
        assert g.grad_fn is None and not g.requires_grad and g._version == w._version
        np.testing.assert_array_equal(g.numpy(), w.numpy())


def test_numpy_float64_lr_steps_as_a_python_float_on_either_path(fused_launches):
    import numba  # noqa: F401  (the default fuses once numba is loaded)
    calls = fused_launches("sgd")
    rng = np.random.default_rng(0)
    p0, g = (rng.standard_normal(optim.FUSED_MIN).astype(np.float32) for _ in range(2))
    got = []
    for lr, fused in ((0.1, False), (np.float64(0.1), False), (np.float64(0.1), None)):
        p = nn.Parameter(tj.tensor(p0))
        p.grad = tj.tensor(g)
        optim.SGD([p], lr=lr, fused=fused).step()
        got.append(p.detach().numpy())
    assert len(calls) == 1 and got[0].dtype == np.float32
    # float32 arithmetic, as PyTorch's: not p - lr * g in float64 rounded once
    assert not np.array_equal(got[0], (p0 - 0.1 * g.astype(np.float64)).astype(np.float32))
    for other in got[1:]:
        np.testing.assert_array_equal(other, got[0])


def test_fused_default_covers_big_parameters(fused_launches, one_big_one_small):
    import numba  # noqa: F401  (the default fuses once numba is loaded)
    calls = fused_launches("sgd")
    opt, big, small = one_big_one_small(optim.SGD, 0.5, calls)   # one launch for both
    np.testing.assert_array_equal(big.detach().numpy(), -0.5)
    np.testing.assert_array_equal(small.detach().numpy(), -0.5)
    with tj.eager():                                # the debugging mode compiles nothing
        opt.step()
    optim.SGD([small], lr=0.5).step()               # small in all: the array path by default
    optim.SGD([big], lr=0.5, fused=False).step()
    assert len(calls) == 1
    strided = nn.Parameter(tj.zeros((2, optim.FUSED_MIN)))
    strided.grad = tj.ones((optim.FUSED_MIN, 2)).t()
    optim.SGD([strided], lr=0.5, fused=True).step()   # a transposed gradient: the array path
    assert len(calls) == 1
    np.testing.assert_array_equal(strided.detach().numpy(), -0.5)
    optim.SGD([small], lr=0.5, fused=True).step()
    assert calls == [[optim.FUSED_MIN, 10], [10]]
    with pytest.raises(TypeError, match="fused must be None, True or False"):
        optim.SGD([small], lr=0.5, fused=1)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_keeps_state_only_for_momentum_as_torch(momentum):
    """PyTorch's SGD without momentum keeps no state at all (an empty state_dict "state")."""
    torch = pytest.importorskip("torch")
    got = {}
    for m in (torch, tj):
        ps = [m.nn.Parameter(m.ones(2)), m.nn.Parameter(m.ones(3))]
        opt = m.optim.SGD(ps, lr=0.1, momentum=momentum)
        ps[0].grad = m.ones(2)   # (the second has no gradient)
        opt.step()
        sd = opt.state_dict()["state"]
        got[m] = (len(opt.state), {k: sorted(v) for k, v in sd.items()})
    assert got[tj] == got[torch]
