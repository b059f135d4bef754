"""OneCycleLR and ReduceLROnPlateau against PyTorch's schedules (lr and momentum per step)."""
import numpy as np
import pytest

import tracejit as tj
from tracejit import nn, optim
from tracejit.optim import lr_scheduler as sched

torch = pytest.importorskip("torch", reason="schedulers are checked against PyTorch")


def _opts(kind, **kw):
    p, q = nn.Parameter(tj.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    if kind == "sgd":
        return optim.SGD([p], lr=0.1, momentum=0.9, **kw), torch.optim.SGD([q], lr=0.1, momentum=0.9, **kw)
    return optim.Adam([p], lr=0.1, **kw), torch.optim.Adam([q], lr=0.1, **kw)


@pytest.mark.parametrize("kind,kw", [
    ("sgd", {"max_lr": 1.0, "total_steps": 20}),
    ("adam", {"max_lr": 0.5, "epochs": 3, "steps_per_epoch": 7, "anneal_strategy": "linear"}),
    ("sgd", {"max_lr": 2.0, "total_steps": 25, "three_phase": True, "pct_start": 0.2}),
    ("adam", {"max_lr": 0.3, "total_steps": 15, "cycle_momentum": False, "div_factor": 10.0}),
])
def test_one_cycle_matches_torch(kind, kw):
    o, t = _opts(kind)
    so, st = sched.OneCycleLR(o, **kw), torch.optim.lr_scheduler.OneCycleLR(t, **kw)
    total = kw.get("total_steps") or kw["epochs"] * kw["steps_per_epoch"]
    for _ in range(total - 1):
        assert so.get_last_lr() == pytest.approx(st.get_last_lr(), rel=1e-12)
        key = "betas" if kind == "adam" else "momentum"
        a, b = o.param_groups[0][key], t.param_groups[0][key]
        np.testing.assert_allclose(np.atleast_1d(a), np.atleast_1d(b), rtol=1e-12)
        o.step()
        t.step()
        so.step()
        st.step()
    so.step()
    with pytest.raises(ValueError, match="total steps"):
        so.step()


@pytest.mark.parametrize("kw", [{}, {"mode": "max", "factor": 0.5, "patience": 1, "cooldown": 2},
                                {"threshold_mode": "abs", "threshold": 0.05, "patience": 0, "min_lr": 0.02}])
def test_reduce_on_plateau_matches_torch(kw):
    o, t = _opts("sgd")
    so = sched.ReduceLROnPlateau(o, **kw)
    st = torch.optim.lr_scheduler.ReduceLROnPlateau(t, **kw)
    metrics = [1.0, 0.9, 0.9, 0.95, 0.89, 0.92, 0.93, 0.5, 0.6, 0.61, 0.62, 0.63] * 2
    lrs = []
    for m in metrics:
        so.step(m)
        st.step(m)
        assert so.optimizer.param_groups[0]["lr"] == pytest.approx(t.param_groups[0]["lr"], rel=1e-12)
        lrs.append(so.get_last_lr()[0])
    assert lrs[-1] < lrs[0]   # the metrics plateau, so every configuration reduces at least once


def test_schedulers_validate():
    o, _ = _opts("sgd")
    with pytest.raises(ValueError, match="total_steps"):
        sched.OneCycleLR(o, max_lr=1.0)
    with pytest.raises(ValueError, match="factor should be < 1.0"):
        sched.ReduceLROnPlateau(o, factor=2.0)


@pytest.mark.parametrize("min_lr", [0.0, [0.0]])
def test_reduce_on_plateau_reduces_a_group_added_later_as_torch(min_lr):
    """A scalar min_lr covers a param group added after the scheduler was made; a list of
    one per group cannot, and says so."""
    runs = []
    for lib in (tj, torch):
        p, q = (lib.nn.Parameter(lib.zeros(2)) for _ in range(2))
        opt = lib.optim.SGD([p], lr=0.1)
        s = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5, min_lr=min_lr)
        opt.add_param_group({"params": [q], "lr": 0.04})
        s.step(1.0)
        try:
            s.step(2.0)
        except RuntimeError as e:
            runs.append(("raised", "param group" in str(e)))
            continue
        runs.append([g["lr"] for g in opt.param_groups])
    assert runs[0] == runs[1]
