"""LinearLR, ConstantLR, MultiplicativeLR, PolynomialLR, CosineAnnealingWarmRestarts,
CyclicLR, SequentialLR and ChainedScheduler: the learning rate after each of twelve steps
equals PyTorch's."""
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")

CASES = {
    "LinearLR": lambda L, o: L.optim.lr_scheduler.LinearLR(o, 0.25, 1.0, 4),
    "ConstantLR": lambda L, o: L.optim.lr_scheduler.ConstantLR(o, 0.5, 3),
    "MultiplicativeLR": lambda L, o: L.optim.lr_scheduler.MultiplicativeLR(o, lambda e: 0.9),
    "PolynomialLR": lambda L, o: L.optim.lr_scheduler.PolynomialLR(o, 6, 2.0),
    "CosineAnnealingWarmRestarts": lambda L, o: L.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, 3, 2, 0.01),
    "CyclicLR": lambda L, o: L.optim.lr_scheduler.CyclicLR(o, 0.01, 0.1, 3, mode="triangular2"),
    "SequentialLR": lambda L, o: L.optim.lr_scheduler.SequentialLR(
        o, [L.optim.lr_scheduler.LinearLR(o, 0.5, 1.0, 3), L.optim.lr_scheduler.ExponentialLR(o, 0.9)], [3]),
    # (a cosine schedule first: its constructor's step, redone by SequentialLR, keeps the lr)
    "SequentialLR_cosine_first": lambda L, o: L.optim.lr_scheduler.SequentialLR(
        o, [L.optim.lr_scheduler.CosineAnnealingLR(o, 5), L.optim.lr_scheduler.StepLR(o, 2, 0.5),
            L.optim.lr_scheduler.PolynomialLR(o, 6)], [4, 9]),
    # (a milestone restarts MultiplicativeLR at epoch 0 from the current lr, scaled)
    "SequentialLR_multiplicative_second": lambda L, o: L.optim.lr_scheduler.SequentialLR(
        o, [L.optim.lr_scheduler.ExponentialLR(o, 0.7), L.optim.lr_scheduler.MultiplicativeLR(o, lambda e: 0.9)],
        [4]),
    "ChainedScheduler": lambda L, o: L.optim.lr_scheduler.ChainedScheduler(
        [L.optim.lr_scheduler.ConstantLR(o, 0.5, 4), L.optim.lr_scheduler.ExponentialLR(o, 0.9)]),
}


def _lrs(lib, make):
    p = lib.zeros(2, requires_grad=True)
    opt = lib.optim.SGD([p], lr=0.1, momentum=0.9)
    sched = make(lib, opt)
    out = []
    for _ in range(12):
        opt.step()
        sched.step()
        out.append(round(opt.param_groups[0]["lr"], 12))
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_learning_rates_match_torch(name):
    assert _lrs(tj, CASES[name]) == _lrs(torch, CASES[name])


@pytest.mark.parametrize("name", ["SequentialLR", "ChainedScheduler"])
def test_a_combinators_checkpoint_resumes_and_loads_with_weights_only(name):
    import io

    def run(lib, steps, state=None):
        p = lib.zeros(2, requires_grad=True)
        opt = lib.optim.SGD([p], lr=0.1)
        sched = CASES[name](lib, opt)
        if state is not None:
            opt.load_state_dict(state["opt"])
            sched.load_state_dict(state["sched"])
        for _ in range(steps):
            opt.step()
            sched.step()
        return opt, sched

    opt, sched = run(tj, 5)
    sd = sched.state_dict()
    assert [type(s) for s in sd["_schedulers"]] == [dict, dict]    # PyTorch's layout
    assert sorted(sd) == sorted(run(torch, 5)[1].state_dict())
    buf = io.BytesIO()
    tj.save({"opt": opt.state_dict(), "sched": sd}, buf)
    buf.seek(0)
    resumed, _ = run(tj, 4, tj.load(buf))                           # weights_only=True
    assert resumed.param_groups[0]["lr"] == pytest.approx(run(torch, 9)[0].param_groups[0]["lr"], rel=1e-12)
