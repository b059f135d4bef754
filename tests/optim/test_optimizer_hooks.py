"""Optimizer step and state-dict hooks, as PyTorch's: order, replaced arguments and dicts."""
import importlib

import pytest

import tracejit as tj

torch = pytest.importorskip("torch")
LIBS = pytest.mark.parametrize("lib", [torch, tj], ids=["torch", "tracejit"])


def _opt(lib, cls="SGD"):
    p = lib.nn.Parameter(lib.ones(2))
    p.grad = lib.ones(2)
    return getattr(lib.optim, cls)([p], lr=0.5), p


@LIBS
def test_step_hooks_run_in_order_once(lib):
    opt, p = _opt(lib)
    seen = []
    module = importlib.import_module(lib.__name__ + ".optim.optimizer")
    g = module.register_optimizer_step_pre_hook(lambda o, a, k: seen.append("global-pre"))
    h1 = opt.register_step_pre_hook(lambda o, a, k: seen.append(("pre", p.tolist())))
    h2 = opt.register_step_post_hook(lambda o, a, k: seen.append(("post", p.tolist())))
    try:
        opt.step()
    finally:
        g.remove()
    assert seen == ["global-pre", ("pre", [1.0, 1.0]), ("post", [0.5, 0.5])]
    h1.remove()
    h2.remove()
    opt.step()
    assert len(seen) == 3 and p.tolist() == [0.0, 0.0]


def test_step_hook_in_a_subclass_calling_super_runs_once():
    # (PyTorch's runs twice once a plain SGD has patched SGD.step: it depends on history)
    lib = tj

    class Mine(lib.optim.SGD):
        def step(self, closure=None):
            return super().step(closure)
    p = lib.nn.Parameter(lib.ones(1))
    p.grad = lib.ones(1)
    opt, calls = Mine([p], lr=1.0), []
    opt.register_step_post_hook(lambda o, a, k: calls.append(1))
    opt.step()
    assert calls == [1] and p.tolist() == [0.0]


@LIBS
def test_state_dict_hooks(lib):
    opt, _ = _opt(lib, "Adam")
    opt.step()
    seen = []
    opt.register_state_dict_pre_hook(lambda o: seen.append("pre"))
    opt.register_state_dict_post_hook(lambda o, sd: dict(sd, extra=1))
    sd = opt.state_dict()
    assert seen == ["pre"] and sd["extra"] == 1
    opt.register_load_state_dict_pre_hook(lambda o, sd: {k: v for k, v in sd.items() if k != "extra"})
    opt.register_load_state_dict_post_hook(lambda o: seen.append("loaded"))
    opt.load_state_dict(sd)
    assert seen == ["pre", "loaded"]




@LIBS
def test_step_hooks_see_the_optimizer_first_in_args_and_may_replace_them(lib):
    opt, p = _opt(lib)
    seen = []

    def pre(o, args, kwargs):
        seen.append(("pre", len(args), args[0] is o, sorted(kwargs)))
        if len(args) > 1:   # a closure given: replace it by one counting its calls
            return (args[0], lambda: seen.append("closure")), kwargs
        return None
    opt.register_step_pre_hook(pre)
    opt.register_step_post_hook(lambda o, args, kwargs: seen.append(("post", len(args), args[0] is o)))
    opt.step()
    opt.step(lambda: None)
    opt.step(closure=None)
    assert seen == [("pre", 1, True, []), ("post", 1, True),
                    ("pre", 2, True, []), "closure", ("post", 2, True),
                    ("pre", 1, True, ["closure"]), ("post", 1, True)]
    assert p.tolist() == [-0.5, -0.5]


@LIBS
def test_global_step_hooks_wrap_the_optimizers_own(lib):
    opt, _ = _opt(lib)
    seen = []
    module = importlib.import_module(lib.__name__ + ".optim.optimizer")
    handles = [module.register_optimizer_step_pre_hook(lambda o, a, k: seen.append("global-pre")),
               module.register_optimizer_step_post_hook(lambda o, a, k: seen.append("global-post"))]
    opt.register_step_pre_hook(lambda o, a, k: seen.append("pre"))
    opt.register_step_post_hook(lambda o, a, k: seen.append("post"))
    try:
        opt.step()
    finally:
        for h in handles:
            h.remove()
    assert seen == ["global-pre", "pre", "post", "global-post"]
