"""Schedulers stepped with an explicit epoch (closed forms), lr_lambdas in state dicts,
and the combinators' optimizer check, against PyTorch."""
import warnings

import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

_SCHEDULES = {
    "StepLR": lambda L, o: L.StepLR(o, 2, 0.5),
    "MultiStepLR": lambda L, o: L.MultiStepLR(o, [2, 5], 0.3),
    "ExponentialLR": lambda L, o: L.ExponentialLR(o, 0.8),
    "CosineAnnealingLR": lambda L, o: L.CosineAnnealingLR(o, 6, 0.01),
    "LinearLR": lambda L, o: L.LinearLR(o, 0.2, 0.9, total_iters=4),
    "ConstantLR": lambda L, o: L.ConstantLR(o, 0.25, total_iters=3),
    "PolynomialLR": lambda L, o: L.PolynomialLR(o, total_iters=5, power=2.0),
    "LambdaLR": lambda L, o: L.LambdaLR(o, lambda e: 1.0 / (e + 1)),
}


def _opt(lib):
    return lib.optim.SGD(lib.nn.Linear(2, 1).parameters(), lr=0.1, momentum=0.9)


@pytest.mark.parametrize("name", list(_SCHEDULES))
def test_step_with_epoch_as_pytorch(name):
    got = []
    for lib in (torch, tj):
        o = _opt(lib)
        s = _SCHEDULES[name](lib.optim.lr_scheduler, o)
        lrs = []
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for e in (3, 1, 7, 7, 2, 0):
                o.step()
                s.step(e)
                lrs.append(o.param_groups[0]["lr"])
            o.step()
            s.step()
            lrs.append(o.param_groups[0]["lr"])
        assert any(issubclass(x.category, UserWarning) for x in w)
        got.append(lrs)
    assert got[1] == pytest.approx(got[0], rel=1e-12)


class _Decay:
    def __init__(self, k):
        self.k = k

    def __call__(self, epoch):
        return 1.0 / (epoch + self.k)


@pytest.mark.parametrize("name", ["LambdaLR", "MultiplicativeLR"])
def test_lambdas_state_dict(name):
    L = tj.optim.lr_scheduler
    s = getattr(L, name)(_opt(tj), [_Decay(3)])
    sd = s.state_dict()
    assert sd["lr_lambdas"] == [{"k": 3}]
    assert getattr(L, name)(_opt(tj), lambda e: 1.0).state_dict()["lr_lambdas"] == [None]
    s2 = getattr(L, name)(_opt(tj), [_Decay(9)])
    s2.load_state_dict(sd)
    assert s2.lr_lambdas[0].k == 3 and s2.last_epoch == s.last_epoch


def test_combinators_need_one_optimizer():
    L = tj.optim.lr_scheduler
    o = _opt(tj)
    with pytest.raises(ValueError, match="ChainedScheduler expects all schedulers to belong to the same"):
        L.ChainedScheduler([L.StepLR(o, 1), L.StepLR(_opt(tj), 1)])
    with pytest.raises(ValueError, match="SequentialLR expects all schedulers to belong to the same"):
        L.SequentialLR(o, [L.StepLR(_opt(tj), 1)], milestones=[])
    assert L._LRScheduler is L.LRScheduler
