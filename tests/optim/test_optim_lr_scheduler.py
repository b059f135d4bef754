"""Learning-rate schedules."""
import math

import numpy as np
import pytest

import tracejit as tj
from tracejit import nn, optim
from tracejit.optim import lr_scheduler


def _opt(lr=1.0):
    return optim.SGD([nn.Parameter(tj.ones(1))], lr=lr)


def _run(sched, opt, n):
    lrs = []
    for _ in range(n):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def test_step_lr():
    opt = _opt()
    s = lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    assert _run(s, opt, 6) == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]
    assert s.get_last_lr() == [0.125]
    with pytest.raises(ValueError, match="step_size"):
        lr_scheduler.StepLR(opt, step_size=0)
    with pytest.raises(ValueError, match="step_size"):
        lr_scheduler.StepLR(opt, step_size="2")


def test_step_lr_takes_a_float_step_size_as_pytorch_does():
    opt = _opt()
    s = lr_scheduler.StepLR(opt, 1.0, gamma=0.1)
    assert _run(s, opt, 3) == pytest.approx([1.0, 0.1, 0.01])
    opt2 = _opt()
    assert _run(lr_scheduler.StepLR(opt2, 2.5, gamma=0.5), opt2, 7) == pytest.approx(
        [1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5])


def test_multistep_exponential_lambda_cosine():
    opt = _opt()
    assert _run(lr_scheduler.MultiStepLR(opt, [1, 3], gamma=0.1), opt, 4) == pytest.approx([1.0, 0.1, 0.1, 0.01])
    opt = _opt()
    assert _run(lr_scheduler.ExponentialLR(opt, 0.5), opt, 3) == [1.0, 0.5, 0.25]
    opt = _opt(2.0)
    assert _run(lr_scheduler.LambdaLR(opt, lambda e: 1 / (e + 1)), opt, 3) == pytest.approx([2.0, 1.0, 2 / 3])
    opt = _opt()
    lrs = _run(lr_scheduler.CosineAnnealingLR(opt, T_max=4, eta_min=0.0), opt, 5)
    assert lrs == pytest.approx([(1 + math.cos(math.pi * e / 4)) / 2 for e in range(5)])


def test_scheduler_state_dict():
    opt = _opt()
    s = lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    _run(s, opt, 3)
    sd = s.state_dict()
    assert sd["last_epoch"] == 3 and "optimizer" not in sd
    opt2 = _opt()
    s2 = lr_scheduler.StepLR(opt2, step_size=2, gamma=0.5)
    s2.load_state_dict(sd)
    assert s2.last_epoch == 3


def _lr_trace(lib, make, scenario):
    p = lib.nn.Parameter(lib.zeros(2))
    opt = lib.optim.SGD([p], lr=0.1)
    sched = make(lib, opt)
    if scenario == "chained":
        sched = lib.optim.lr_scheduler.ChainedScheduler([sched, lib.optim.lr_scheduler.ExponentialLR(opt, 0.8)])
    lrs = []
    for epoch in range(12):
        opt.step()
        sched.step()
        if scenario == "set by hand" and epoch == 5:
            opt.param_groups[0]["lr"] *= 0.5
        if scenario == "reloaded" and epoch == 5:
            state, sched_state = opt.state_dict(), sched.state_dict()
            opt = lib.optim.SGD([p], lr=0.1)
            opt.load_state_dict(state)
            sched = make(lib, opt)
            sched.load_state_dict(sched_state)
        lrs.append(opt.param_groups[0]["lr"])
    return lrs


@pytest.mark.parametrize("scenario", ["chained", "set by hand", "reloaded"])
@pytest.mark.parametrize("make", [
    lambda m, o: m.optim.lr_scheduler.MultiStepLR(o, milestones=[2, 4, 4], gamma=0.5),
    lambda m, o: m.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5, eta_min=0.001)],
    ids=["MultiStepLR", "CosineAnnealingLR"])
def test_schedules_scale_the_current_lr_as_pytorch(make, scenario):
    torch = pytest.importorskip("torch")
    got, ref = _lr_trace(tj, make, scenario), _lr_trace(torch, make, scenario)
    assert got == pytest.approx(ref, rel=1e-12)


@pytest.mark.parametrize("name, kw", [("MultiStepLR", {"milestones": [1, 3, 3]}),
                                      ("CyclicLR", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 2}),
                                      ("StepLR", {"step_size": 2})])
def test_state_dicts_load_across_tracejit_and_pytorch(name, kw):
    torch = pytest.importorskip("torch")

    def make(m):
        opt = m.optim.SGD([m.nn.Parameter(m.ones(2))], lr=0.1, momentum=0.9)
        return opt, getattr(m.optim.lr_scheduler, name)(opt, **kw)

    def steps(opt, sched, n):
        out = []
        for _ in range(n):
            opt.step()
            sched.step()
            out.append((opt.param_groups[0]["lr"], opt.param_groups[0]["momentum"]))
        return out

    want = steps(*make(torch), 6)[3:]
    for first, then in ((tj, torch), (torch, tj)):
        opt, sched = make(first)
        steps(opt, sched, 3)
        state = sched.state_dict()
        keys = set(state) - {"_get_lr_called_within_step", "use_beta1", "_mom_key"}
        opt2, sched2 = make(then)
        opt2.load_state_dict(opt.state_dict())
        sched2.load_state_dict(state)
        assert keys == set(sched2.state_dict()) - {"_get_lr_called_within_step", "use_beta1", "_mom_key"}
        np.testing.assert_allclose(steps(opt2, sched2, 3), want)


def test_multistep_milestones_saved_as_a_sorted_list_still_load():
    def make():
        opt = tj.optim.SGD([tj.nn.Parameter(tj.ones(2))], lr=1.0)
        return opt, tj.optim.lr_scheduler.MultiStepLR(opt, milestones=[3, 1, 3], gamma=0.5)

    opt, sched = make()
    for _ in range(2):
        opt.step()
        sched.step()
    state = dict(sched.state_dict(), milestones=[1, 3, 3])
    opt2, sched2 = make()
    opt2.load_state_dict(opt.state_dict())
    sched2.load_state_dict(state)
    lrs = []
    for _ in range(3):
        opt2.step()
        sched2.step()
        lrs.append(opt2.param_groups[0]["lr"])
    assert lrs == [0.125, 0.125, 0.125]


def _order_warnings(m, make, order):
    import warnings
    p = m.nn.Parameter(m.zeros(2))
    opt = m.optim.SGD([p], lr=0.1, momentum=0.9)
    sched = make(m, opt)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for i in range(3):
            if order == "scheduler first":
                sched.step()
                opt.step()
            else:
                if order == "optimizer first" or i > 0:   # "skipped": no optimizer step at first
                    opt.step()
                sched.step()
    return [str(w.message) for w in seen if "lr_scheduler.step()" in str(w.message)]


_SCHEDULES = {
    "step": lambda m, o: m.optim.lr_scheduler.StepLR(o, 2),
    "onecycle": lambda m, o: m.optim.lr_scheduler.OneCycleLR(o, 1.0, total_steps=10),
    "warm_restarts": lambda m, o: m.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, 3),
    "sequential": lambda m, o: m.optim.lr_scheduler.SequentialLR(
        o, [m.optim.lr_scheduler.LinearLR(o, 0.1, total_iters=2), m.optim.lr_scheduler.ExponentialLR(o, 0.9)],
        milestones=[2]),
    "chained": lambda m, o: m.optim.lr_scheduler.ChainedScheduler(
        [m.optim.lr_scheduler.ConstantLR(o, 0.5, total_iters=2), m.optim.lr_scheduler.ExponentialLR(o, 0.9)]),
    "swa": lambda m, o: m.optim.swa_utils.SWALR(o, 0.05),
}


@pytest.mark.parametrize("order", ["optimizer first", "scheduler first", "skipped"])
@pytest.mark.parametrize("kind", sorted(_SCHEDULES))
def test_scheduler_stepped_before_the_optimizer_warns_as_torch(kind, order):
    torch = pytest.importorskip("torch")
    want = _order_warnings(torch, _SCHEDULES[kind], order)
    assert _order_warnings(tj, _SCHEDULES[kind], order) == want
    # (PyTorch: once per scheduler stepped at first, twice for ChainedScheduler's two; none for
    # CosineAnnealingWarmRestarts, whose step is its own)
    assert len(want) == (0 if order == "optimizer first" or kind == "warm_restarts" else 2 if kind == "chained"
                         else 1)


_RESUMABLE = {
    "exponential": lambda m, o, e: m.optim.lr_scheduler.ExponentialLR(o, 0.5, last_epoch=e),
    "linear": lambda m, o, e: m.optim.lr_scheduler.LinearLR(o, 0.1, total_iters=6, last_epoch=e),
    "polynomial": lambda m, o, e: m.optim.lr_scheduler.PolynomialLR(o, total_iters=8, power=2.0, last_epoch=e),
    "step": lambda m, o, e: m.optim.lr_scheduler.StepLR(o, 2, gamma=0.5, last_epoch=e),
    "cosine": lambda m, o, e: m.optim.lr_scheduler.CosineAnnealingLR(o, 10, last_epoch=e),
    "warm_restarts": lambda m, o, e: m.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, 1, T_mult=2, last_epoch=e),
}


def _resumed_lrs(m, make):
    """Three epochs, then a new scheduler made with last_epoch=3 (a resumed run's way) on
    the same optimizer, stepped on: the lrs seen after each step."""
    ps = [m.nn.Parameter(m.zeros(2)) for _ in range(2)]
    opt = m.optim.SGD([{"params": [p], "lr": 0.1 * (i + 1)} for i, p in enumerate(ps)], lr=0.1)
    sched = make(m, opt, -1)
    for _ in range(3):
        opt.step()
        sched.step()
    resumed = make(m, opt, 3)
    lrs = [resumed.get_last_lr()]
    for _ in range(6):
        opt.step()
        resumed.step()
        lrs.append(resumed.get_last_lr())
    return lrs


@pytest.mark.parametrize("kind", sorted(_RESUMABLE))
def test_a_scheduler_made_with_last_epoch_resumes_as_torch(kind):
    torch = pytest.importorskip("torch")
    want = _resumed_lrs(torch, _RESUMABLE[kind])
    np.testing.assert_allclose(_resumed_lrs(tj, _RESUMABLE[kind]), want, rtol=1e-12)


@pytest.mark.parametrize("lib_name", ["torch", "tracejit"])
def test_reduce_on_plateau_is_an_lr_scheduler_the_combinators_refuse(lib_name):
    m = pytest.importorskip("torch") if lib_name == "torch" else tj
    opt = m.optim.SGD([m.nn.Parameter(m.zeros(2))], lr=0.1)
    plateau = m.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
    assert isinstance(plateau, m.optim.lr_scheduler.LRScheduler)
    with pytest.raises(ValueError, match=r"SequentialLR does not support `ReduceLROnPlateau`.* at index 1"):
        m.optim.lr_scheduler.SequentialLR(opt, [m.optim.lr_scheduler.StepLR(opt, 2), plateau], milestones=[2])
    with pytest.raises(ValueError, match=r"ChainedScheduler does not support `ReduceLROnPlateau`.* at index 0"):
        m.optim.lr_scheduler.ChainedScheduler([plateau])
    plateau.step(1.0)
    plateau.step(2.0)
    assert plateau.get_last_lr() == pytest.approx([0.01])


@pytest.mark.parametrize("lib_name", ["torch", "tracejit"])
def test_reduce_on_plateau_takes_the_deprecated_epoch(lib_name):
    m = pytest.importorskip("torch") if lib_name == "torch" else tj
    opt = m.optim.SGD([m.nn.Parameter(m.zeros(2))], lr=0.1)
    plateau = m.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
    plateau.step(1.0)
    with pytest.warns(UserWarning, match="deprecated"):
        plateau.step(2.0, 7)
    assert plateau.last_epoch == 7 and plateau.get_last_lr() == pytest.approx([0.01])
    plateau.step(3.0)
    assert plateau.last_epoch == 8


_GET_LR = dict(_SCHEDULES, linear=lambda m, o: m.optim.lr_scheduler.LinearLR(o, 0.5, total_iters=3),
               cyclic=lambda m, o: m.optim.lr_scheduler.CyclicLR(o, 0.01, 0.1, step_size_up=2),
               multiplicative=lambda m, o: m.optim.lr_scheduler.MultiplicativeLR(o, lambda e: 0.9))


def _get_lr_warnings(m, make):
    import warnings
    opt = m.optim.SGD([m.nn.Parameter(m.zeros(2))], lr=0.1, momentum=0.9)
    sched = make(m, opt)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(4):   # (SequentialLR switches at 2: its restart asks too)
            opt.step()
            sched.step()
        stepping = len(seen)
        combinator = isinstance(sched, (m.optim.lr_scheduler.SequentialLR, m.optim.lr_scheduler.ChainedScheduler))
        lrs = [None if combinator else sched.get_lr()]   # (theirs have no get_lr of their own)
    asked = [str(w.message) for w in seen[stepping:] if "get_last_lr" in str(w.message)]
    return stepping, asked, lrs


@pytest.mark.parametrize("kind", sorted(_GET_LR))
def test_get_lr_outside_a_step_warns_as_torch(kind):
    """PyTorch's built-in schedules warn when get_lr() is called by hand (it computes the next
    lr, not the current one: get_last_lr() gives that); their own steps do not."""
    torch = pytest.importorskip("torch")
    want = _get_lr_warnings(torch, _GET_LR[kind])
    got = _get_lr_warnings(tj, _GET_LR[kind])
    assert got[:2] == want[:2] and got[0] == 0
    if want[2][0] is not None:
        np.testing.assert_allclose(got[2][0], want[2][0], rtol=1e-12)
