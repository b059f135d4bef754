"""Differential fuzzing of the optimizers and LR schedulers against PyTorch, step by step:
seeded random options per optimizer (weight_decay, amsgrad, nesterov, momentum/dampening,
maximize, centered, decoupled weight decay, foreach/fused/capturable accepted), a second
param group with other settings (given at construction or by add_param_group mid-run), a
scheduler (every kind, chained and SequentialLR; ReduceLROnPlateau on a loss), and random
actions between steps: a parameter without a gradient, zero_grad(set_to_none=False) with
accumulation, and an optimizer (and scheduler) rebuilt from state_dict mid-training. After
every step the parameters, each group's lr and get_last_lr() equal PyTorch's."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _p(r, options):
    return options[int(r.integers(len(options)))]


def _b(r):
    return bool(r.integers(2))


def _options(r, name):
    wd, betas, c = _p(r, [0.0, 0.01, 0.1]), _p(r, [(0.9, 0.999), (0.5, 0.9)]), {}
    if name == "SGD":
        c = dict(lr=_p(r, [0.1, 0.01]), momentum=_p(r, [0.0, 0.9]), dampening=_p(r, [0.0, 0.1]), weight_decay=wd)
        c["nesterov"] = c["momentum"] > 0 and c["dampening"] == 0 and _b(r)
    elif name in ("Adam", "AdamW"):
        c = dict(lr=0.05, betas=betas, eps=_p(r, [1e-8, 1e-3]), weight_decay=wd, amsgrad=_b(r))
    elif name in ("Adamax", "RAdam", "NAdam"):
        c = dict(lr=0.05, betas=betas, weight_decay=wd)
        if name != "Adamax":
            c["decoupled_weight_decay"] = _b(r)
    elif name == "Adagrad":
        c = dict(lr=0.1, lr_decay=_p(r, [0.0, 0.1]), weight_decay=wd, initial_accumulator_value=_p(r, [0.0, 0.1]))
    elif name == "Adadelta":
        c = dict(lr=_p(r, [1.0, 0.5]), rho=_p(r, [0.9, 0.5]), weight_decay=wd)
    elif name == "RMSprop":
        c = dict(lr=0.01, alpha=_p(r, [0.99, 0.5]), weight_decay=wd, momentum=_p(r, [0.0, 0.9]), centered=_b(r))
    elif name == "Rprop":
        c = dict(lr=0.01, etas=_p(r, [(0.5, 1.2), (0.3, 1.5)]), step_sizes=_p(r, [(1e-6, 50), (1e-3, 0.05)]))
    elif name == "ASGD":
        c = dict(lr=0.01, lambd=_p(r, [1e-4, 1e-2]), t0=_p(r, [1e6, 2.0]), weight_decay=wd)
    c["maximize"] = _b(r)
    if not r.integers(3):
        c["foreach"] = _p(r, [None, False, True])
    if name not in ("SGD", "Rprop", "Adagrad") and not r.integers(4):
        c["capturable"] = False
    return c


_OPTIMIZERS = ["SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "Adagrad", "Adadelta", "RMSprop", "Rprop", "ASGD"]
_SCHEDULERS = ["StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LinearLR", "ConstantLR", "PolynomialLR",
               "CosineAnnealingWarmRestarts", "CyclicLR", "OneCycleLR", "LambdaLR", "MultiplicativeLR",
               "ReduceLROnPlateau", "SequentialLR", "ChainedScheduler", None]


def _scheduler(lib, kind, opt, seed):
    S, r = lib.optim.lr_scheduler, np.random.default_rng(seed)
    momentum = opt.defaults.get("momentum", 0) > 0 or "betas" in opt.defaults
    if kind is None:
        return None
    return {
        "StepLR": lambda: S.StepLR(opt, step_size=int(r.integers(1, 4)), gamma=0.5),
        "MultiStepLR": lambda: S.MultiStepLR(opt, milestones=[2, 3, 5], gamma=0.5),
        "ExponentialLR": lambda: S.ExponentialLR(opt, gamma=0.8),
        "CosineAnnealingLR": lambda: S.CosineAnnealingLR(opt, T_max=int(r.integers(2, 6)), eta_min=_p(r, [0.0, 1e-3])),
        "LinearLR": lambda: S.LinearLR(opt, start_factor=0.25, end_factor=_p(r, [1.0, 0.8]), total_iters=int(r.integers(1, 6))),
        "ConstantLR": lambda: S.ConstantLR(opt, factor=0.3, total_iters=int(r.integers(1, 5))),
        "PolynomialLR": lambda: S.PolynomialLR(opt, total_iters=int(r.integers(2, 8)), power=_p(r, [1.0, 2.0, 0.5])),
        "CosineAnnealingWarmRestarts": lambda: S.CosineAnnealingWarmRestarts(opt, T_0=int(r.integers(1, 4)),
                                                                             T_mult=int(r.integers(1, 3)), eta_min=1e-3),
        "CyclicLR": lambda: S.CyclicLR(opt, base_lr=1e-3, max_lr=0.1, step_size_up=int(r.integers(1, 4)),
                                       step_size_down=_p(r, [None, 2]), gamma=0.9, cycle_momentum=momentum and _b(r),
                                       mode=_p(r, ["triangular", "triangular2", "exp_range"])),
        "OneCycleLR": lambda: S.OneCycleLR(opt, max_lr=0.1, total_steps=20, pct_start=_p(r, [0.3, 0.5]),
                                           anneal_strategy=_p(r, ["cos", "linear"]), cycle_momentum=momentum,
                                           three_phase=_b(r)),
        "LambdaLR": lambda: S.LambdaLR(opt, lambda e: 0.9 ** e + 0.01 * e),
        "MultiplicativeLR": lambda: S.MultiplicativeLR(opt, lambda e: 0.95),
        "ReduceLROnPlateau": lambda: S.ReduceLROnPlateau(opt, mode=_p(r, ["min", "max"]), factor=0.5,
                                                         patience=int(r.integers(0, 3)), threshold=_p(r, [1e-4, 0.1]),
                                                         threshold_mode=_p(r, ["rel", "abs"]),
                                                         cooldown=int(r.integers(0, 2)), min_lr=_p(r, [0.0, 5e-3])),
        "SequentialLR": lambda: S.SequentialLR(opt, [S.LinearLR(opt, start_factor=0.5, total_iters=2),
                                                     S.ExponentialLR(opt, gamma=0.9)], milestones=[int(r.integers(1, 4))]),
        "ChainedScheduler": lambda: S.ChainedScheduler([S.StepLR(opt, step_size=2, gamma=0.5),
                                                        S.ExponentialLR(opt, gamma=0.9)]),
    }[kind]()


def _run(seed):
    r = np.random.default_rng(seed)
    name = _p(r, _OPTIMIZERS)
    options, dtype = _options(r, name), _p(r, ["float32", "float64"])
    # (PyTorch keeps NAdam's mu_product and foreach ASGD's eta as float32 scalars)
    tol = 1e-5 if dtype == "float32" else 1e-8 if name in ("NAdam", "ASGD") else 1e-10
    shapes = [(3, 4), (4,), (2, 2, 2)]
    init = [r.standard_normal(s) for s in shapes]
    second = {}
    if _b(r):
        second = {"lr": _p(r, [0.003, 0.05])}
        for key, value in (("weight_decay", 0.2), ("maximize", not options["maximize"]),
                           ("amsgrad", not options.get("amsgrad"))):
            if key in options and _b(r):
                second[key] = value
    add_later = bool(second) and _b(r)
    kind, sched_seed = _p(r, _SCHEDULERS), int(r.integers(1 << 30))
    actions = [_p(r, ["step", "step", "no_grad", "accumulate", "reload", "add_group"]) for _ in range(7)]
    what = f"seed {seed} {name} {dtype} {options} second={second} later={add_later} {kind} {actions}"
    runs = {}
    for lib in (torch, tj):
        ps = [lib.nn.Parameter(lib.tensor(a, dtype=getattr(lib, dtype))) for a in init]
        groups = [{"params": ps[:2]}] + ([dict(params=ps[2:], **second)] if second and not add_later else [])
        if not second:
            groups = [{"params": ps}]
        opt = getattr(lib.optim, name)(groups, **options)
        runs[lib] = [ps, opt, _scheduler(lib, kind, opt, sched_seed)]
    grads = np.random.default_rng(seed + 1)
    for step, act in enumerate(actions):
        gs, skip = [grads.standard_normal(s) for s in shapes], int(grads.integers(3))
        seen = {}
        for lib in (torch, tj):
            try:
                seen[lib] = _act(lib, runs[lib], act, add_later, second, gs, skip, kind, name, options, sched_seed)
            except (RuntimeError, ValueError, KeyError):
                if lib is torch:
                    return   # (a schedule PyTorch refuses for a group added later)
                raise
        (tp, tlr, tlast), (jp, jlr, jlast) = seen[torch], seen[tj]
        for k, (a, b) in enumerate(zip(jp, tp)):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"{what}: step {step} {act} param {k}")
        np.testing.assert_allclose(jlr, tlr, rtol=1e-12, err_msg=f"{what}: step {step} lr")
        if tlast is not None:
            np.testing.assert_allclose(jlast, tlast, rtol=1e-12, err_msg=f"{what}: step {step} last lr")


def _act(lib, run, act, add_later, second, gs, skip, kind, name, options, sched_seed):
    """One step of `run` ([params, optimizer, scheduler], updated in place) with `act`
    before it: (the parameters, each group's lr, the scheduler's last lr)."""
    ps, opt, sched = run
    if act == "add_group" and add_later and len(opt.param_groups) == 1:
        opt.add_param_group(dict(params=ps[2:], **second))
    opt.zero_grad(set_to_none=act != "accumulate")
    for i, (p, g) in enumerate(zip(ps, gs)):
        if act == "accumulate" and p.grad is not None:
            p.grad.add_(lib.tensor(g, dtype=p.dtype))
        elif not (act == "no_grad" and i == skip):
            p.grad = lib.tensor(g, dtype=p.dtype)
    loss = float(sum((p.detach() ** 2).sum() for p in ps))
    opt.step()
    if sched is not None:
        sched.step(loss) if kind == "ReduceLROnPlateau" else sched.step()
    if act == "reload":
        fresh = getattr(lib.optim, name)([{"params": g["params"]} for g in opt.param_groups], **options)
        fresh.load_state_dict(opt.state_dict())
        if sched is None or kind in ("SequentialLR", "ChainedScheduler"):
            run[1] = fresh if sched is None else opt
        else:
            state = sched.state_dict()
            run[1], run[2] = fresh, _scheduler(lib, kind, fresh, sched_seed)
            run[2].load_state_dict(state)
    opt, sched = run[1], run[2]
    return ([p.detach().numpy().copy() for p in ps], [g["lr"] for g in opt.param_groups],
            None if sched is None or kind == "ReduceLROnPlateau" else list(sched.get_last_lr()))


@pytest.mark.parametrize("block", range(4))
def test_random_optimizer_and_scheduler_steps_match_torch(block):
    for seed in range(block * 40, block * 40 + 40):
        _run(seed)
