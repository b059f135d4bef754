"""nn.utils helpers beyond clipping: weight_norm, BatchNorm fusion, get_total_norm,
clip_grads_with_norm_ -- against PyTorch's values for the same weights."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")


def _copy(src, dst):
    dst.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in src.state_dict().items()})


def test_weight_norm_matches_torch_and_can_be_removed():
    torch.manual_seed(0)
    t = torch.nn.utils.weight_norm(torch.nn.Linear(3, 4))
    j = tj.nn.utils.weight_norm(tj.nn.Linear(3, 4))
    assert sorted(j.state_dict()) == sorted(t.state_dict()) == ["bias", "weight_g", "weight_v"]
    _copy(t, j)
    x = np.random.default_rng(0).random((2, 3)).astype(np.float32)
    a, b = t(torch.tensor(x)), j(tj.tensor(x))
    a.pow(2).sum().backward()
    b.pow(2).sum().backward()
    np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(j.weight_g.grad.numpy(), t.weight_g.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(j.weight_v.grad.numpy(), t.weight_v.grad.numpy(), rtol=1e-5, atol=1e-6)
    w = j.weight.detach().numpy()
    tj.nn.utils.remove_weight_norm(j)
    assert sorted(j.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(j.weight.detach().numpy(), w, rtol=1e-6)


def test_fuse_conv_bn_eval_matches_torch():
    torch.manual_seed(1)
    conv, bn = torch.nn.Conv2d(2, 3, 3).eval(), torch.nn.BatchNorm2d(3).eval()
    with torch.no_grad():
        bn.running_mean.uniform_()
        bn.running_var.uniform_(0.5, 2)
        bn.weight.uniform_()
    jc, jb = tj.nn.Conv2d(2, 3, 3).eval(), tj.nn.BatchNorm2d(3).eval()
    _copy(conv, jc)
    _copy(bn, jb)
    f, fj = torch.nn.utils.fuse_conv_bn_eval(conv, bn), tj.nn.utils.fuse_conv_bn_eval(jc, jb)
    np.testing.assert_allclose(fj.weight.detach().numpy(), f.weight.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(fj.bias.detach().numpy(), f.bias.detach().numpy(), rtol=1e-6, atol=1e-7)
    x = tj.randn(1, 2, 5, 5)
    np.testing.assert_allclose(fj(x).detach().numpy(), jb(jc(x)).detach().numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="eval"):
        tj.nn.utils.fuse_conv_bn_eval(jc.train(), jb)


def test_total_norm_and_clipping_with_it():
    ps = [tj.randn(3, 4, requires_grad=True), tj.randn(5, requires_grad=True)]
    for p in ps:
        p.grad = tj.ones_like(p) * 2
    total = tj.nn.utils.get_total_norm([p.grad for p in ps])
    np.testing.assert_allclose(float(total), np.sqrt(17 * 4), rtol=1e-6)
    tj.nn.utils.clip_grads_with_norm_(ps, 1.0, total)
    np.testing.assert_allclose(float(tj.nn.utils.get_total_norm([p.grad for p in ps])), 1.0, rtol=1e-5)


def _clip_pair(lib, g1, g2, fn):
    ps = [lib.nn.Parameter(lib.ones(3)), lib.nn.Parameter(lib.ones(2))]
    ps[0].grad, ps[1].grad = lib.tensor(g1), lib.tensor(g2)
    fn(lib, ps)
    return [p.grad.numpy() for p in ps]


@pytest.mark.parametrize("total", [5.0, 0.5, float("nan"), float("inf")])
@pytest.mark.parametrize("grads", [([3.0, 4.0, 0.0], [0.0, 0.0]), ([float("nan"), 1.0, 1.0], [1.0, 1.0])])
def test_clipping_with_nan_and_inf_norms_matches_pytorch(grads, total):
    torch = pytest.importorskip("torch")
    with_norm = lambda lib, ps: lib.nn.utils.clip_grads_with_norm_(ps, 1.0, lib.tensor(total))   # noqa: E731
    by_norm = lambda lib, ps: lib.nn.utils.clip_grad_norm_(ps, 1.0)   # noqa: E731
    for fn in (with_norm, by_norm):
        for a, b in zip(_clip_pair(tj, *grads, fn), _clip_pair(torch, *grads, fn)):
            np.testing.assert_allclose(a, b, rtol=1e-6)   # (nan where PyTorch has nan)


@pytest.mark.parametrize("total", ["12", "1", "float"])
def test_clip_grads_with_norm_wants_a_0d_total_norm_like_pytorch(total):
    torch = pytest.importorskip("torch")
    make = {"12": lambda lib: lib.arange(12.0), "1": lambda lib: lib.tensor([2.0]), "float": lambda lib: 2.0}[total]
    fn = lambda lib, ps: lib.nn.utils.clip_grads_with_norm_(ps, 1.0, make(lib))   # noqa: E731
    with pytest.raises((RuntimeError, TypeError)) as want:
        _clip_pair(torch, [1.0, 1.0, 1.0], [1.0, 1.0], fn)
    with pytest.raises((RuntimeError, TypeError), match="total_norm") as got:
        _clip_pair(tj, [1.0, 1.0, 1.0], [1.0, 1.0], fn)
    assert isinstance(got.value, type(want.value))


def test_clip_grads_with_norm_of_parameters_without_gradients_does_nothing_as_pytorch():
    torch = pytest.importorskip("torch")
    for lib in (torch, tj):
        p = lib.nn.Parameter(lib.ones(3))
        assert lib.nn.utils.clip_grads_with_norm_([p], 1.0, lib.ones(3, 4)) is None
        assert p.grad is None
