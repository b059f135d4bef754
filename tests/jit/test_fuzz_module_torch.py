"""Differential fuzzing of a compiled module against its PyTorch twin: seeded random
sequences of train()/eval() switches, requires_grad toggles on a parameter, calls under
no_grad() and inference_mode(), load_state_dict of new weights (by state_dict name) and
in-place parameter updates under no_grad (an SGD step by hand). After each action the
compiled module's outputs, BatchNorm's running statistics and the parameters' gradients
equal PyTorch's, and the compile count never exceeds the number of distinct states seen
(training flag, requires_grad pattern, grad mode): a switch back hits the cache, a new
weight value never captures again."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _net(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Dropout(0.0), nn.Linear(6, 3))


def _load(dst, src_state, lib):
    dst.load_state_dict({k: lib.tensor(v) for k, v in src_state.items()})


def _state(r, names_shapes):
    return {k: (r.standard_normal(s).astype(np.float32) if k.split(".")[-1] != "num_batches_tracked"
                else np.array(int(r.integers(5)))) for k, s in names_shapes}


def _close(a, b, what):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5, err_msg=what)


def _run(seed):
    r = np.random.default_rng(seed)
    tm, jm = _net(torch), _net(tj)
    shapes = [(k, tuple(v.shape)) for k, v in tm.state_dict().items()]
    init = _state(r, shapes)
    for k, v in list(init.items()):
        if "running_var" in k:
            init[k] = np.abs(v) + 0.5
    tm.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    _load(jm, init, tj)
    cm = tj.compile(jm)
    states = set()
    for step in range(8):
        action = ["train", "eval", "toggle", "no_grad", "inference", "load", "sgd", "call"][int(r.integers(8))]
        what = f"seed {seed} step {step} {action}"
        if action in ("train", "eval"):
            tm.train(action == "train")
            jm.train(action == "train")
        elif action == "toggle":
            flag = not tm[0].weight.requires_grad
            tm[0].weight.requires_grad_(flag)
            jm[0].weight.requires_grad_(flag)
        elif action == "load":
            new = {k: v * 0.5 + 0.1 if v.dtype.kind == "f" and "running_var" not in k else v
                   for k, v in init.items()}
            tm.load_state_dict({k: torch.tensor(v) for k, v in new.items()})
            _load(jm, new, tj)
        elif action == "sgd":
            with torch.no_grad():
                for p in tm.parameters():
                    p.sub_(0.1 * p.sign())
            with tj.no_grad():
                for p in jm.parameters():
                    p.sub_(0.1 * p.sign())
        x = r.standard_normal((5, 4)).astype(np.float32)
        for p in tm.parameters():
            p.grad = None
        for p in jm.parameters():
            p.grad = None
        if action in ("no_grad", "inference"):
            tctx, jctx = (torch.no_grad(), tj.no_grad()) if action == "no_grad" else \
                (torch.inference_mode(), tj.inference_mode())
            with tctx:
                want = tm(torch.tensor(x))
            with jctx:
                got = cm(tj.tensor(x))
            grad_mode = False
        else:
            want, got = tm(torch.tensor(x)), cm(tj.tensor(x))
            grad_mode = True
            w = np.arange(15, dtype=np.float32).reshape(5, 3) % 3 - 1
            (want * torch.tensor(w)).sum().backward()
            (got * tj.tensor(w)).sum().backward()
        _close(got.detach().numpy(), want.detach().numpy(), f"{what}: output")
        for (name, tp), jp in zip(tm.named_parameters(), jm.parameters()):
            assert (tp.grad is None) == (jp.grad is None), f"{what}: {name}.grad"
            if tp.grad is not None:
                _close(jp.grad.numpy(), tp.grad.numpy(), f"{what}: {name}.grad")
        for (name, tb), jb in zip(tm.named_buffers(), jm.buffers()):
            _close(jb.numpy(), tb.numpy(), f"{what}: {name}")
        states.add((tm.training, tm[0].weight.requires_grad, grad_mode))
        stats = cm.cache_stats()
        assert 1 <= stats["compiles"] <= len(states) and stats["eager_fallbacks"] == 0, (what, states, stats)


@pytest.mark.parametrize("block", range(2))
def test_random_module_switches_match_torch_without_recompiling(block):
    for seed in range(block * 10, block * 10 + 10):
        _run(seed)
