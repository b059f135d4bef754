"""Optimizer state as PyTorch keeps it: ``step`` (and NAdam's, ASGD's scalars) a float32 0-d
tensor, ``state_dict()`` holding the optimizer's own state, loading a copy (also from
tracejit.save/load and from an older checkpoint's int ``step``), and LR schedulers and
GradScaler stepping it as PyTorch's do."""
import io

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

NAMES = ["SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "ASGD", "Rprop", "Adagrad", "Adadelta",
         "RMSprop", "Adafactor"]
W = np.linspace(-1.0, 1.5, 6).reshape(2, 3).astype(np.float32)
G = [np.cos(np.arange(6.0) * (k + 1)).reshape(2, 3).astype(np.float32) for k in range(5)]


def _make(lib, name, w=W):
    p = lib.nn.Parameter(lib.tensor(w))
    kw = {"momentum": 0.9} if name == "SGD" else {}
    return p, getattr(lib.optim, name)([p], lr=0.05, **kw)


def _steps(p, opt, grads, lib):
    for g in grads:
        p.grad = lib.tensor(g)
        opt.step()


def _kinds(state):
    return {k: (type(v).__name__, str(v.dtype).split(".")[-1], tuple(v.shape))
            if hasattr(v, "dtype") else (type(v).__name__,) for k, v in state.items()}


@pytest.mark.parametrize("name", NAMES)
def test_state_entries_are_pytorchs_and_state_dict_shares_them(name):
    (p, opt), (tp, topt) = _make(tj, name), _make(torch, name)
    _steps(p, opt, G[:3], tj)
    _steps(tp, topt, G[:3], torch)
    st, tst = opt.state[p], topt.state[tp]
    assert list(st) == list(tst)
    assert _kinds(st) == _kinds(tst)
    for k, v in st.items():
        np.testing.assert_allclose(v.numpy(), tst[k].numpy(), rtol=1e-6, atol=1e-7, err_msg=k)
    if "step" in st:
        assert st["step"].item() == tst["step"].item() == 3.0
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert (sd["state"][0] is st) == (tsd["state"][0] is tst) is True
    assert all(sd["state"][0][k] is v for k, v in st.items())
    assert sd["param_groups"][0] is not opt.param_groups[0]


def test_step_counts_in_place_like_pytorchs_tensor():
    p, opt = _make(tj, "Adam")
    _steps(p, opt, G[:1], tj)
    step = opt.state[p]["step"]
    version = step._version
    _steps(p, opt, G[1:3], tj)
    assert opt.state[p]["step"] is step and step.item() == 3.0 and step._version == version + 2
    tp, topt = _make(torch, "Adam")
    _steps(tp, topt, G[:1], torch)
    tstep = topt.state[tp]["step"]
    _steps(tp, topt, G[1:3], torch)
    assert topt.state[tp]["step"] is tstep


def test_adagrad_state_exists_before_the_first_step():
    (p, opt), (tp, topt) = _make(tj, "Adagrad"), _make(torch, "Adagrad")
    assert _kinds(opt.state[p]) == _kinds(topt.state[tp])
    assert opt.state[p]["step"].item() == 0.0


@pytest.mark.parametrize("name", ["Adam", "NAdam", "ASGD", "Rprop", "Adafactor"])
def test_save_load_round_trip_continues_as_pytorch(name):
    results = []
    for lib in (tj, torch):
        p, opt = _make(lib, name)
        _steps(p, opt, G[:2], lib)
        buf = io.BytesIO()
        lib.save(opt.state_dict(), buf)
        buf.seek(0)
        loaded = lib.load(buf)
        q, again = _make(lib, name, p.detach().numpy())
        again.load_state_dict(loaded)
        assert again.state[q]["step"].dtype == lib.float32 and again.state[q]["step"].item() == 2.0
        _steps(q, again, G[2:], lib)
        results.append((q.detach().numpy(), {k: v.numpy() for k, v in again.state[q].items()}))
    (w, st), (tw, tst) = results
    np.testing.assert_allclose(w, tw, rtol=1e-6, atol=1e-7)
    for k in tst:
        np.testing.assert_allclose(st[k], tst[k], rtol=1e-6, atol=1e-7, err_msg=k)


def test_load_copies_the_state():
    p, opt = _make(tj, "Adam")
    _steps(p, opt, G[:2], tj)
    q, again = _make(tj, "Adam", p.detach().numpy())
    sd = opt.state_dict()
    again.load_state_dict(sd)
    for k, v in again.state[q].items():
        assert v is not sd["state"][0][k]
        np.testing.assert_array_equal(v.numpy(), sd["state"][0][k].numpy())


@pytest.mark.parametrize("name", ["Adam", "NAdam", "ASGD", "Adagrad", "RMSprop"])
def test_an_older_checkpoints_number_step_loads_as_a_tensor(name):
    results = []
    for lib in (tj, torch):
        p, opt = _make(lib, name)
        _steps(p, opt, G[:2], lib)
        sd = opt.state_dict()
        sd["state"][0] = {k: (int(v.item()) if k == "step" else
                              float(v.item()) if k in ("mu_product", "eta", "mu") else v.clone())
                          for k, v in sd["state"][0].items()}
        q, again = _make(lib, name, p.detach().numpy())
        again.load_state_dict(sd)
        assert _kinds(again.state[q])["step"] == ("Tensor", "float32", ())
        _steps(q, again, G[2:], lib)
        assert again.state[q]["step"].item() == 5.0
        results.append((q.detach().numpy(), _kinds(again.state[q])))
    assert results[0][1] == results[1][1]
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6, atol=1e-7)


def test_lr_scheduler_and_grad_scaler_step_with_tensor_state():
    out = []
    for lib in (tj, torch):
        p, opt = _make(lib, "AdamW")
        sched = lib.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        scaler = lib.amp.GradScaler("cpu", init_scale=4.0)
        for k, g in enumerate(G):
            opt.zero_grad()
            scaler.scale((p * lib.tensor(g)).sum()).backward()
            if k == 2:   # an overflow: the step is skipped, its count too
                p.grad[0, 0] = float("inf")
            scaler.step(opt)
            scaler.update()
            sched.step()
        out.append((p.detach().numpy(), opt.state[p]["step"].item(), scaler.get_scale(),
                    opt.param_groups[0]["lr"], sched.state_dict()["last_epoch"]))
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-6, atol=1e-7)
    assert out[0][1:] == out[1][1:]
    assert out[1][1] == 4.0
