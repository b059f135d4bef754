"""Weight and spectral normalization, both forms (hooks: nn.utils.weight_norm/spectral_norm;
parametrizations: nn.utils.parametrizations.*), and register_parametrization, against
PyTorch with the same weights loaded by state_dict name: three training steps give the same
losses, weights and power-iteration buffers, eager and compiled."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _build(lib, form):
    nn = lib.nn
    conv, lin, tconv = nn.Conv2d(2, 4, 3), nn.Linear(64, 3), nn.ConvTranspose2d(2, 3, 2)
    if form == "hooks":
        conv = nn.utils.spectral_norm(conv)
        lin = nn.utils.weight_norm(lin, dim=0)
        tconv = nn.utils.spectral_norm(tconv)
    else:
        P = nn.utils.parametrizations
        conv = P.spectral_norm(conv)
        lin = P.weight_norm(lin, dim=0)
        tconv = P.spectral_norm(tconv)
    return nn.ModuleDict({"conv": conv, "lin": lin, "tconv": tconv})


def _forward(m, x):
    h = m["conv"](x).relu()
    return m["lin"](h.flatten(1)).sum() + m["tconv"](x).pow(2).mean()


def _run(lib, m, xs, compiled):
    opt = lib.optim.SGD(m.parameters(), lr=0.05)
    f = lib.compile(_forward) if compiled else _forward
    losses = []
    for x in xs:
        loss = f(m, lib.tensor(x))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().numpy() for k, v in m.state_dict().items()}


@pytest.mark.parametrize("form", ["hooks", "parametrizations"])
@pytest.mark.parametrize("compiled", [False, True])
def test_weight_and_spectral_norm_train_as_pytorch(form, compiled):
    torch.manual_seed(0)
    ref = _build(torch, form)
    m = _build(tj, form)
    sd = ref.state_dict()
    assert list(m.state_dict().keys()) == list(sd.keys())
    m.load_state_dict({k: tj.tensor(v.numpy()) for k, v in sd.items()})
    xs = [np.random.default_rng(i).standard_normal((2, 2, 6, 6)).astype(np.float32) for i in range(3)]
    want_losses, want = _run(torch, ref, xs, False)
    got_losses, got = _run(tj, m, xs, compiled)
    np.testing.assert_allclose(got_losses, want_losses, rtol=2e-5)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-4, atol=2e-6, err_msg=k)


def test_class_names_and_removal_match_pytorch():
    for lib in (tj, torch):
        lin = lib.nn.utils.parametrizations.weight_norm(lib.nn.Linear(3, 2))
        assert type(lin).__name__ == "ParametrizedLinear" and isinstance(lin, lib.nn.Linear)
        w = lin.weight.detach().numpy().copy()
        lib.nn.utils.parametrize.remove_parametrizations(lin, "weight")
        assert type(lin) is lib.nn.Linear
        assert sorted(n for n, _ in lin.named_parameters()) == ["bias", "weight"]
        np.testing.assert_allclose(lin.weight.detach().numpy(), w, rtol=1e-6)
    lin = tj.nn.utils.weight_norm(tj.nn.Linear(3, 2))
    w = lin(tj.ones(1, 3)).detach().numpy()
    tj.nn.utils.remove_weight_norm(lin)
    np.testing.assert_allclose(lin(tj.ones(1, 3)).detach().numpy(), w, rtol=1e-6)
    with pytest.raises(ValueError, match="weight_norm of 'weight' not found"):
        tj.nn.utils.remove_weight_norm(lin)


def test_register_parametrization_with_a_user_module_and_assignment():
    class Symmetric(tj.nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(-1, -2)

        def right_inverse(self, A):
            return A.triu()

    lin = tj.nn.Linear(3, 3)
    tj.nn.utils.parametrize.register_parametrization(lin, "weight", Symmetric())
    w = lin.weight.detach().numpy()
    np.testing.assert_array_equal(w, w.T)
    a = tj.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 5.0], [3.0, 5.0, 6.0]])
    lin.weight = a
    np.testing.assert_array_equal(lin.weight.detach().numpy(), a.numpy())
    assert tj.nn.utils.parametrize.is_parametrized(lin, "weight")
    with tj.nn.utils.parametrize.cached():
        assert lin.weight is lin.weight
    with pytest.raises(ValueError, match="shape"):
        tj.nn.utils.parametrize.register_parametrization(lin, "bias", Symmetric())


def _split_and_scaled_buffer(lib):
    """A weight kept as two halves (right_inverse returns a pair), a scaled buffer."""
    nn = lib.nn

    class Halves(nn.Module):
        def forward(self, a, b):
            return a + b

        def right_inverse(self, w):
            return w * 0.25, w * 0.75

    class Scale(nn.Module):
        def forward(self, x):
            return x * 2.0

    m = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    m.load_state_dict({k: lib.tensor(np.arange(v.numel(), dtype=np.float32).reshape(tuple(v.shape)) / 7)
                       if v.dtype is lib.float32 else v for k, v in m.state_dict().items()})
    nn.utils.parametrize.register_parametrization(m[0], "weight", Halves())
    nn.utils.parametrize.register_parametrization(m[1], "running_mean", Scale())
    return m


@pytest.mark.parametrize("compiled", [False, True])
def test_several_originals_and_a_parametrized_buffer_as_pytorch(compiled):
    ref, m = _split_and_scaled_buffer(torch), _split_and_scaled_buffer(tj)
    names = [[n for n, _ in mod.named_parameters()] for mod in (ref, m)]
    buffers = [[n for n, _ in mod.named_buffers()] for mod in (ref, m)]
    assert names[1] == names[0] and buffers[1] == buffers[0]
    assert "1.parametrizations.running_mean.original" in buffers[0]
    assert list(m.state_dict()) == list(ref.state_dict())
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    ref.eval()
    m.eval()
    want = ref(torch.tensor(x))
    got = (tj.compile(m) if compiled else m)(tj.tensor(x))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    want.sum().backward()
    got.sum().backward()
    for part in ("original0", "original1"):
        np.testing.assert_allclose(getattr(m[0].parametrizations.weight, part).grad.numpy(),
                                   getattr(ref[0].parametrizations.weight, part).grad.numpy(), rtol=1e-5)
    for lib, mod in ((torch, ref), (tj, m)):
        lib.nn.utils.parametrize.remove_parametrizations(mod[1], "running_mean")
        lib.nn.utils.parametrize.remove_parametrizations(mod[0], "weight")
    assert [n for n, _ in m.named_buffers()] == [n for n, _ in ref.named_buffers()]
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in ref.named_parameters()]
    np.testing.assert_allclose(m[1].running_mean.numpy(), ref[1].running_mean.numpy())


def test_a_hook_form_weight_norm_checkpoint_loads_into_the_parametrization():
    """Vocoder checkpoints saved with nn.utils.weight_norm hold weight_g and weight_v; the
    parametrization's load takes them as its originals, as PyTorch's."""
    import copy
    g = np.array([[[2.0]], [[3.0]]], np.float32)
    v = (np.arange(6, dtype=np.float32) + 1).reshape(2, 3, 1)
    res = []
    for L in (torch, tj):
        m = L.nn.Sequential(L.nn.utils.parametrizations.weight_norm(L.nn.Conv1d(3, 2, 1)))
        r = m.load_state_dict({"0.weight_g": L.tensor(g), "0.weight_v": L.tensor(v), "0.bias": L.zeros(2)})
        m = copy.deepcopy(m)
        res.append((list(r.missing_keys), list(r.unexpected_keys), m[0].weight.detach().numpy()))
    assert res[1][:2] == res[0][:2] == ([], [])
    np.testing.assert_allclose(res[1][2], res[0][2], rtol=1e-6)
