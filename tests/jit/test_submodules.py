"""A compiled module whose forward breaks the graph runs its submodules compiled (jit/submodules.py)."""
import warnings

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn as tnn


def _mods(nn):
    class Expert(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(6, 10, bias=False)
            self.w2 = nn.Linear(10, 6, bias=False)

        def forward(self, x):
            return self.w2(nn.functional.silu(self.w1(x)) * 2.0)

    class Routed(nn.Module):
        """Each row goes to expert 0 or 1 by the sign of its first feature; an expert with
        no rows is skipped (``len`` of a size that depends on the data: a graph break)."""

        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(6)
            self.experts = nn.ModuleList([Expert(), Expert()])

        def forward(self, x, torch):
            h = self.norm(x)
            out = torch.zeros_like(h)
            for k, expert in enumerate(self.experts):
                (rows,) = torch.where((h[:, 0] > 0) == (k == 0))
                if len(rows):
                    out = out.index_add(0, rows, expert(h[rows]))
            return out + x
    return Routed


def _batches(n):
    r = np.random.default_rng(0)
    return [r.standard_normal((9 + 3 * i, 6)).astype(np.float32) for i in range(n)]


def test_broken_forward_runs_its_submodules_compiled_and_matches_torch():
    torch = pytest.importorskip("torch")
    ref = _mods(torch.nn)()
    mine = _mods(tnn)()
    mine.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    model = tj.compile(mine)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for xb in _batches(4):
            x = tj.tensor(xb, requires_grad=True)
            xr = torch.tensor(xb, requires_grad=True)
            out, want = model(x, tj), ref(xr, torch)
            np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
            out.square().sum().backward()
            want.square().sum().backward()
            np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy(), rtol=1e-4, atol=1e-5)
    for name, p in mine.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), ref.get_parameter(name).grad.numpy(),
                                   rtol=1e-4, atol=1e-5, err_msg=name)
    broke = [str(w.message) for w in caught if "cannot be captured" in str(w.message)]
    assert len(broke) == 1 and "submodules it calls run compiled" in broke[0]
    subs = model.cache_stats()["submodules"]
    assert sorted(subs) == ["experts.0", "experts.1", "norm"]
    # the rows each expert gets change every call: a second capture makes them dynamic,
    # and every later call hits it
    for k in ("experts.0", "experts.1"):
        st = subs[k]
        assert st["compiles"] == 2 and st["hits"] == 2 and st["eager_fallbacks"] == 0, st
        assert st["dynamic_dims"] == [("x", 0)]
    assert subs["norm"]["compiles"] == 2 and subs["norm"]["hits"] == 2
    # nothing stays installed on the user's modules between calls
    assert all("forward" not in m.__dict__ for m in mine.modules())


def test_a_submodule_compiled_by_the_user_is_left_as_it_is():
    model = _mods(tnn)()
    model.experts[1].compile()
    own = model.experts[1].forward
    cm = tj.compile(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for xb in _batches(2):
            cm(tj.tensor(xb), tj)
    assert model.experts[1].forward is own and own.cache_stats()["hits"] + own.cache_stats()["compiles"] == 2
    assert sorted(cm.cache_stats()["submodules"]) == ["experts.0", "norm"]


def test_fullgraph_still_raises_and_reset_forgets_the_submodules():
    model = _mods(tnn)()
    with pytest.raises(tj.errors.TraceError, match="nonzero"):
        tj.compile(model, fullgraph=True)(tj.ones(4, 6), tj)
    cm = tj.compile(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm(tj.ones(4, 6), tj)
    assert "submodules" in cm.cache_stats()
    cm.forward.reset()
    assert "submodules" not in cm.cache_stats()


def _step_parts(lib):
    net = lib.nn.Sequential(lib.nn.Linear(5, 12), lib.nn.BatchNorm1d(12), lib.nn.ReLU(),
                            lib.nn.Linear(12, 3))
    return net, lib.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)


def test_a_whole_training_step_runs_the_modules_it_names_compiled_and_matches_torch():
    # zero_grad, forward, backward and the optimizer step in one compiled function: it
    # breaks the graph (backward reads .grad), and the model it names still runs compiled
    torch = pytest.importorskip("torch")
    net, opt = _step_parts(tj)
    ref, ropt = _step_parts(torch)
    net.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})

    def step(x, y):
        opt.zero_grad()
        loss = tnn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss
    compiled = tj.compile(step)
    r = np.random.default_rng(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            xb, yb = r.standard_normal((8, 5)).astype(np.float32), r.integers(0, 3, 8)
            loss = compiled(tj.tensor(xb), tj.tensor(yb))
            ropt.zero_grad()
            want = torch.nn.functional.cross_entropy(ref(torch.tensor(xb)), torch.tensor(yb))
            want.backward()
            ropt.step()
            np.testing.assert_allclose(float(loss), float(want), rtol=1e-5)
    assert any("the modules it calls run compiled" in str(w.message) for w in caught)
    for k, v in ref.state_dict().items():
        np.testing.assert_allclose(net.state_dict()[k].numpy(), v.numpy(), rtol=1e-4, atol=1e-5)
    subs = compiled.cache_stats()["submodules"]["net"]
    assert subs["compiles"] == 1 and subs["hits"] >= 3 and subs["eager_fallbacks"] == 0


def test_a_broken_step_compiles_a_module_passed_to_it_and_matches_eager():
    def step(model, x):
        out = model(x).square().sum()
        out.backward()
        return out.item()   # (a graph break)
    r = np.random.default_rng(2)
    mine, ref = tnn.Linear(3, 2), tnn.Linear(3, 2)
    ref.load_state_dict(mine.state_dict())
    compiled = tj.compile(step)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            xb = r.standard_normal((4, 3)).astype(np.float32)
            want = step(ref, tj.tensor(xb))
            assert compiled(mine, tj.tensor(xb)) == pytest.approx(want, rel=1e-6)
    np.testing.assert_allclose(mine.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-6)
    assert any("the modules it calls run compiled" in str(w.message) for w in caught)
    subs = compiled.cache_stats()["submodules"]["argument 0"]
    assert subs["compiles"] == 1 and subs["hits"] == 2


def test_a_broken_function_that_calls_no_module_says_only_why():
    compiled = tj.compile(lambda x: x.sum().item())
    with pytest.warns(RuntimeWarning, match=r"runs eagerly from now on: tensor.item\(\)"):
        assert compiled(tj.ones(3)) == 3.0


def test_a_module_named_after_an_unfilled_closure_cell_is_still_found():
    from tracejit.jit.submodules import SubmoduleForwards

    def outer():
        def step(x):
            later(x)          # (a cell not yet assigned when the step breaks)
            return net(x)
        net = tnn.Linear(2, 2)
        return step
        later = None   # noqa: F841  (never reached: `later` stays an empty cell)
    found = SubmoduleForwards.reached_by(outer(), "trace", {})
    assert list(found._roots) == ["net"] and isinstance(found._roots["net"], tnn.Linear)
