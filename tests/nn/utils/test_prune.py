"""nn.utils.prune against PyTorch with the same weights: the masks each method chooses
(ties at the cut included), iterative pruning through PruningContainer, global pruning,
state_dict names, `remove`, the validation errors, and training a pruned model eager and
compiled (the pre-hook inside the graph)."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.nn.utils.selection import topk_set

torch = pytest.importorskip("torch")
import torch.nn.utils.prune  # noqa: E402,F401  (not imported by torch.nn.utils)


def _net(lib):
    nn = lib.nn
    return nn.ModuleDict({"conv": nn.Conv2d(2, 4, 3), "fc": nn.Linear(64, 5)})


def _same_weights(seed=0):
    torch.manual_seed(seed)
    ref = _net(torch)
    m = _net(tj)
    m.load_state_dict({k: tj.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    return ref, m


def _prune_steps(lib, m):
    P = lib.nn.utils.prune
    P.l1_unstructured(m["conv"], "weight", amount=0.3)
    P.ln_structured(m["conv"], "weight", amount=1, n=2, dim=0)
    P.l1_unstructured(m["conv"], "weight", amount=5)
    P.ln_structured(m["fc"], "weight", amount=0.4, n=float("inf"), dim=1)
    P.l1_unstructured(m["fc"], "bias", amount=2)
    P.global_unstructured([(m["conv"], "weight"), (m["fc"], "weight")], pruning_method=P.L1Unstructured,
                          amount=0.25)


def _forward(m, x):
    return m["fc"](m["conv"](x).relu().flatten(1)).pow(2).mean()


def _state(m):
    return {k: v.detach().numpy() for k, v in m.state_dict().items()}


def test_masks_and_state_dict_as_pytorch():
    ref, m = _same_weights()
    _prune_steps(torch, ref)
    _prune_steps(tj, m)
    want, got = _state(ref), _state(m)
    assert list(got) == list(want)
    assert "conv.weight_orig" in got and "conv.weight_mask" in got and "fc.bias_mask" in got
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    hook = [h for h in m["conv"]._forward_pre_hooks.values()][0]
    assert isinstance(hook, tj.nn.utils.prune.PruningContainer)
    assert [type(h).__name__ for h in hook] == ["L1Unstructured", "LnStructured", "L1Unstructured",
                                                 "CustomFromMask"]


@pytest.mark.parametrize("compiled", [False, True])
def test_pruned_model_trains_as_pytorch(compiled):
    ref, m = _same_weights(1)
    _prune_steps(torch, ref)
    _prune_steps(tj, m)
    xs = [np.random.default_rng(i).standard_normal((2, 2, 6, 6)).astype(np.float32) for i in range(3)]
    results = []
    for lib, mod, comp in ((torch, ref, False), (tj, m, compiled)):
        opt = lib.optim.SGD(mod.parameters(), lr=0.1)
        f = lib.compile(_forward) if comp else _forward
        losses = []
        for x in xs:
            loss = f(mod, lib.tensor(x))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        results.append((losses, _state(mod), mod["conv"].weight.detach().numpy()))
    (wl, ws, ww), (gl, gs, gw) = results
    np.testing.assert_allclose(gl, wl, rtol=2e-5)
    for k in ws:
        np.testing.assert_allclose(gs[k], ws[k], rtol=2e-4, atol=2e-6, err_msg=k)
    np.testing.assert_allclose(gw, ww, rtol=2e-4, atol=2e-6)   # the attribute the hook wrote
    assert (gw[ws["conv.weight_mask"] == 0] == 0).all()


def test_remove_makes_pruning_permanent():
    lin = tj.nn.Linear(4, 3)
    P = tj.nn.utils.prune
    P.l1_unstructured(lin, "weight", amount=0.5)
    orig = lin.weight_orig
    masked = lin.weight.detach().numpy().copy()
    assert P.is_pruned(tj.nn.Sequential(lin)) and not P.is_pruned(tj.nn.Linear(2, 2))
    P.remove(lin, "weight")
    assert [n for n, _ in lin.named_parameters()] == ["bias", "weight"]
    assert list(lin.named_buffers()) == [] and not lin._forward_pre_hooks
    assert lin.weight is orig and isinstance(lin.weight, tj.nn.Parameter)
    np.testing.assert_array_equal(lin.weight.detach().numpy(), masked)
    assert (masked == 0).sum() == 6
    with pytest.raises(ValueError, match="has to be pruned before pruning can be removed"):
        P.remove(lin, "weight")


@pytest.mark.parametrize("n,k,largest", [(8, 3, False), (300, 2, True), (300, 150, False), (7, 7, True)])
def test_topk_set_ties_as_pytorch(n, k, largest):
    rng = np.random.default_rng(n + k)
    for levels in (1, 2, 4):
        v = rng.integers(0, levels, n).astype(np.float32)
        want = np.sort(torch.topk(torch.tensor(v), k, largest=largest).indices.numpy())
        np.testing.assert_array_equal(topk_set(v, k, largest), want)


def test_tied_weights_prune_as_pytorch():
    rows = [[0., 1, 0, 1, 2, 0, 1, 0]] * 4
    masks = []
    for lib in (torch, tj):
        lin = lib.nn.Linear(8, 4)
        with lib.no_grad():
            lin.weight.copy_(lib.tensor(rows))
        lib.nn.utils.prune.l1_unstructured(lin, "weight", amount=9)
        lib.nn.utils.prune.ln_structured(lin, "weight", amount=1, n=2, dim=0)
        masks.append(lin.weight_mask.numpy())
    np.testing.assert_array_equal(masks[1], masks[0])


def test_other_methods():
    P = tj.nn.utils.prune
    np.testing.assert_array_equal(P.L1Unstructured(amount=2).prune(tj.tensor([3., -1, 2, .5])).numpy(),
                                  [3., 0, 2, 0])
    lin = tj.nn.Linear(5, 6)
    P.random_unstructured(lin, "weight", amount=0.4)
    assert int((lin.weight_mask == 0).sum()) == 12
    P.random_structured(lin, "weight", amount=2, dim=0)
    mask = lin.weight_mask.numpy()
    assert (mask.sum(1) == 0).sum() >= 2 and (mask == 0).sum() >= 12
    P.custom_from_mask(lin, "bias", mask=tj.tensor([0, 1, 1, 0, 1, 1]))
    np.testing.assert_array_equal(lin.bias_mask.numpy(), [0, 1, 1, 0, 1, 1])
    P.identity(lin, "bias")
    np.testing.assert_array_equal(lin.bias_mask.numpy(), [0, 1, 1, 0, 1, 1])


def test_errors_as_pytorch():
    P = tj.nn.utils.prune
    with pytest.raises(TypeError, match="Invalid type for amount"):
        P.L1Unstructured(amount="a")
    with pytest.raises(ValueError, match="should either be a float in the range"):
        P.L1Unstructured(amount=1.5)
    with pytest.raises(ValueError, match="should either be a float in the range"):
        P.L1Unstructured(amount=-1)
    with pytest.raises(ValueError, match="Structured pruning can only be applied"):
        P.ln_structured(tj.nn.Linear(2, 2), "bias", 1, 2, 0)
    with pytest.raises(IndexError, match="Invalid index 2"):
        P.ln_structured(tj.nn.Linear(2, 2), "weight", 1, 2, 2)
    with pytest.raises(TypeError, match="Only \"unstructured\" PRUNING_TYPE"):
        P.global_unstructured([(tj.nn.Linear(2, 2), "weight")], P.LnStructured, amount=1, n=1, dim=0)
    lin = tj.nn.Linear(3, 2)
    with pytest.raises(ValueError, match="amount=10 should be smaller than the number of parameters"):
        P.l1_unstructured(lin, "weight", amount=10)
    # the failed pruning left the module as it was
    assert [n for n, _ in lin.named_parameters()] == ["bias", "weight"] and not lin._forward_pre_hooks


def test_checkpoint_loads_into_identity_pruned_model():
    P = tj.nn.utils.prune
    m = tj.nn.Sequential(tj.nn.Linear(6, 8), tj.nn.ReLU(), tj.nn.Linear(8, 3))
    P.l1_unstructured(m[0], "weight", 0.5)
    P.ln_structured(m[2], "weight", 0.34, n=1, dim=1)
    fresh = tj.nn.Sequential(tj.nn.Linear(6, 8), tj.nn.ReLU(), tj.nn.Linear(8, 3))
    for i in (0, 2):
        P.identity(fresh[i], "weight")
    r = fresh.load_state_dict(m.state_dict())
    assert r.missing_keys == [] and r.unexpected_keys == []
    x = tj.randn(4, 6)
    np.testing.assert_array_equal(fresh(x).detach().numpy(), m(x).detach().numpy())
