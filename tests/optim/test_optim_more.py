"""RMSprop, Adagrad, Adadelta, LBFGS step for step against PyTorch's optimizers."""
import numpy as np
import pytest

import tracejit as tj
from tracejit import nn, optim

torch = pytest.importorskip("torch", reason="optimizers are checked step for step against PyTorch")

SHAPES = [(3, 4), (5,), ()]


def _pair(seed=0):
    rng = np.random.default_rng(seed)
    vals = [rng.standard_normal(s) for s in SHAPES]
    ours = [nn.Parameter(tj.tensor(v)) for v in vals]
    theirs = [torch.nn.Parameter(torch.tensor(v)) for v in vals]
    return ours, theirs


def _run(ours_cls, theirs_cls, kw, steps=6, seed=0):
    ours, theirs = _pair(seed)
    o, t = ours_cls(ours, **kw), theirs_cls(theirs, **kw)
    rng = np.random.default_rng(seed + 1)
    for _ in range(steps):
        for a, b in zip(ours, theirs):
            g = rng.standard_normal(a.shape)
            a.grad, b.grad = tj.tensor(g), torch.tensor(g)
        o.step()
        t.step()
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-14)
    return o, t, ours, theirs


@pytest.mark.parametrize("kw", [{}, {"lr": 0.05, "alpha": 0.9, "eps": 1e-6},
                                {"momentum": 0.9, "weight_decay": 0.1},
                                {"centered": True, "lr": 0.02},
                                {"centered": True, "momentum": 0.5, "weight_decay": 0.01, "maximize": True}])
def test_rmsprop_matches_torch(kw):
    o, t, ours, theirs = _run(optim.RMSprop, torch.optim.RMSprop, kw)
    st = t.state[theirs[0]]
    for k, v in o.state[ours[0]].items():
        if k != "step":
            np.testing.assert_allclose(v.numpy(), st[k].numpy(), rtol=1e-12, err_msg=k)
    assert o.state[ours[0]]["step"] == int(st["step"]) == 6


@pytest.mark.parametrize("kw", [{}, {"lr": 0.1, "lr_decay": 0.05}, {"weight_decay": 0.2, "eps": 1e-6},
                                {"initial_accumulator_value": 0.5, "lr": 0.3, "maximize": True}])
def test_adagrad_matches_torch(kw):
    o, t, ours, theirs = _run(optim.Adagrad, torch.optim.Adagrad, kw)
    np.testing.assert_allclose(o.state[ours[1]]["sum"].numpy(), t.state[theirs[1]]["sum"].numpy(), rtol=1e-12)


def test_adagrad_state_exists_before_first_step():
    p = nn.Parameter(tj.zeros(3))
    opt = optim.Adagrad([p], initial_accumulator_value=0.25)
    np.testing.assert_array_equal(opt.state[p]["sum"].numpy(), [0.25] * 3)


@pytest.mark.parametrize("kw", [{}, {"lr": 0.5, "rho": 0.5}, {"eps": 1e-3, "weight_decay": 0.1},
                                {"maximize": True}])
def test_adadelta_matches_torch(kw):
    o, t, ours, theirs = _run(optim.Adadelta, torch.optim.Adadelta, kw)
    for k in ("square_avg", "acc_delta"):
        np.testing.assert_allclose(o.state[ours[0]][k].numpy(), t.state[theirs[0]][k].numpy(), rtol=1e-12)


def test_optimizer_validation_names_argument():
    p = [nn.Parameter(tj.zeros(2))]
    with pytest.raises(ValueError, match="RMSprop: invalid alpha"):
        optim.RMSprop(p, alpha=-1)
    with pytest.raises(ValueError, match="Adagrad: invalid lr_decay"):
        optim.Adagrad(p, lr_decay=-0.1)
    with pytest.raises(ValueError, match="Adadelta: invalid rho"):
        optim.Adadelta(p, rho=1.5)
    with pytest.raises(ValueError, match="line_search_fn"):
        optim.LBFGS(p, line_search_fn="backtracking")
    with pytest.raises(RuntimeError, match="closure"):
        optim.LBFGS(p).step()


def _rosenbrock(m, x, y, w):
    """A badly conditioned objective of two parameters (one a matrix) written for torch or tj."""
    a = (1 - x) ** 2 + 100 * (y - x ** 2) ** 2
    return a.sum() + ((w @ x[:3]) ** 2).sum() * 0.1


@pytest.mark.parametrize("kw", [{}, {"line_search_fn": "strong_wolfe"},
                                {"lr": 0.5, "history_size": 3, "max_iter": 7},
                                {"line_search_fn": "strong_wolfe", "history_size": 2, "max_eval": 9,
                                 "tolerance_change": 1e-12},
                                # a long step: the line search stops at the evaluations max_eval leaves
                                {"line_search_fn": "strong_wolfe", "lr": 30, "max_iter": 5, "max_eval": 6}])
def test_lbfgs_matches_torch(kw):
    rng = np.random.default_rng(0)
    vals = [rng.uniform(-1.5, 1.5, 4), rng.uniform(-1, 1, 4), rng.standard_normal((2, 3))]
    ours = [nn.Parameter(tj.tensor(v)) for v in vals]
    theirs = [torch.nn.Parameter(torch.tensor(v)) for v in vals]
    o, t = optim.LBFGS(ours, **kw), torch.optim.LBFGS(theirs, **kw)

    def closure_for(opt, params, m):
        def closure():
            opt.zero_grad()
            loss = _rosenbrock(m, *params)
            loss.backward()
            return loss
        return closure

    losses = []
    for k in range(3):
        lo = o.step(closure_for(o, ours, tj))
        lt = t.step(closure_for(t, theirs, torch))
        # Same iterations and evaluations (discrete: any difference in the algorithm shows)...
        so, st = o.state[ours[0]], t.state[theirs[0]]
        assert (so["func_evals"], so["n_iter"]) == (st["func_evals"], st["n_iter"])
        # ...and the same iterates up to rounding: about 1e-12 after the first call's 20
        # iterations, growing ~30x per call on Rosenbrock (numpy's and torch's dot products
        # sum in different orders) to ~1e-8 after the third.
        rtol = 1e-10 if k == 0 else 1e-6
        assert lo.item() == pytest.approx(lt.item(), rel=rtol, abs=1e-12)
        losses.append(lo.item())
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=rtol, atol=1e-11)
    assert losses[-1] < losses[0]


def test_lbfgs_steps_bfloat16_parameters_as_torch():
    vals = [np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), np.full(4, 0.5, np.float32)]
    got = {}
    for m in (torch, tj):
        ps = [m.tensor(v).to(m.bfloat16).requires_grad_() for v in vals]
        opt = m.optim.LBFGS(ps, lr=0.5, max_iter=4)

        def closure():
            opt.zero_grad()
            loss = ((ps[0].float() - 1) ** 2).sum() + ((ps[1].float() + 2) ** 2).sum()
            loss.backward()
            return loss
        for _ in range(2):
            opt.step(closure)
        assert all(p.dtype == m.bfloat16 for p in ps)
        got[m] = [p.detach().float().numpy() for p in ps] + [opt.state_dict()["state"][0]["d"].float().numpy()]
    for a, b in zip(got[tj], got[torch]):
        np.testing.assert_allclose(a, b, atol=2 ** -7 * max(1.0, np.abs(b).max()))   # (bfloat16 roundings)
    assert np.abs(got[tj][0] - vals[0]).max() > 0.3
