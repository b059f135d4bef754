"""F.interpolate's modes against PyTorch: values and input gradients (float64), every
mode on the input rank PyTorch gives it, up and down, sizes and scale factors."""
import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F

torch = pytest.importorskip("torch", reason="compares with PyTorch")
TF = torch.nn.functional

RNG = np.random.default_rng(3)
X1 = RNG.standard_normal((2, 3, 7))
X2 = RNG.standard_normal((2, 3, 6, 9))
X3 = RNG.standard_normal((1, 2, 4, 5, 3))
XA = RNG.standard_normal((2, 2, 17, 23))


def _check(kw, x):
    tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    ro, jo = TF.interpolate(tx, **kw), F.interpolate(jx, **kw)
    assert tuple(jo.shape) == tuple(ro.shape)
    np.testing.assert_allclose(jo.detach().numpy(), ro.detach().numpy(), rtol=1e-10, atol=1e-12)
    g = RNG.standard_normal(tuple(ro.shape))
    ro.backward(torch.tensor(g))
    jo.backward(tj.tensor(g))
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kw", [dict(size=(4, 13), mode="bicubic", align_corners=False),
                                dict(size=(11, 5), mode="bicubic", align_corners=True),
                                dict(scale_factor=2.5, mode="bicubic"),
                                dict(scale_factor=(0.5, 1.7), mode="bicubic", recompute_scale_factor=True),
                                dict(size=(4, 13), mode="area"),
                                dict(size=(12, 4), mode="area"),
                                dict(scale_factor=0.5, mode="area"),
                                dict(size=1, mode="bicubic")])
def test_bicubic_and_area_on_images(kw):
    _check(kw, X2)


@pytest.mark.parametrize("kw", [dict(size=(7, 3, 8), mode="trilinear", align_corners=False),
                                dict(scale_factor=(2, 0.5, 1.5), mode="trilinear", align_corners=True),
                                dict(size=(2, 9, 4), mode="nearest"),
                                dict(scale_factor=1.5, mode="nearest-exact"),
                                dict(size=(3, 3, 2), mode="area")])
def test_volumes(kw):
    _check(kw, X3)


_AA_SIZES = [dict(size=(5, 7)), dict(scale_factor=0.3), dict(size=(9, 40)), dict(size=(1, 1)),
             dict(scale_factor=(0.37, 2.5)), dict(scale_factor=0.3, recompute_scale_factor=True)]


@pytest.mark.parametrize("kw", [dict(kw, mode=mode) for mode in ("bilinear", "bicubic", "lanczos")
                                for kw in _AA_SIZES]
                         + [dict(size=(4, 6), mode=m, align_corners=True) for m in ("bilinear", "bicubic")])
def test_antialias_matches_pytorch(kw):
    _check(dict(kw, antialias=True), XA)


@pytest.mark.parametrize("kw", [dict(size=3, mode="area"), dict(size=12, mode="area")])
def test_area_on_sequences(kw):
    _check(kw, X1)


def test_upsample_module_takes_the_new_modes():
    x = tj.tensor(X2)
    up = tj.nn.Upsample(scale_factor=2, mode="bicubic", align_corners=False)
    ref = TF.interpolate(torch.tensor(X2), scale_factor=2, mode="bicubic", align_corners=False)
    np.testing.assert_allclose(up(x).numpy(), ref.numpy(), rtol=1e-10)


def test_modes_name_their_rank_and_unknown_modes_are_refused():
    with pytest.raises(ValueError, match="'trilinear' expects a 5-D input"):
        F.interpolate(tj.tensor(X2), scale_factor=2, mode="trilinear")
    with pytest.raises(ValueError, match="'bicubic' expects a 4-D input"):
        F.interpolate(tj.tensor(X1), scale_factor=2, mode="bicubic")
    with pytest.raises(ValueError, match="lanczos mode requires antialias=True"):
        F.interpolate(tj.tensor(X2), scale_factor=2, mode="lanczos")
    with pytest.raises(ValueError, match="anti-alias is restricted"):
        F.interpolate(tj.tensor(X3), scale_factor=2, mode="trilinear", antialias=True)
    with pytest.raises(ValueError, match="align_corners only applies"):
        F.interpolate(tj.tensor(X2), scale_factor=2, mode="area", align_corners=True)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("kw", [dict(size=(9, 31)), dict(size=(40, 11), align_corners=True),
                                dict(scale_factor=(1.7, 0.45))])
def test_uint8_matches_pytorchs_fixed_point_passes(mode, antialias, kw):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).integers(0, 256, (2, 3, 17, 23)).astype(np.uint8)
    ot = torch.nn.functional.interpolate(torch.tensor(x), mode=mode, antialias=antialias, **kw)
    f = lambda t: tj.nn.functional.interpolate(t, mode=mode, antialias=antialias, **kw)  # noqa: E731
    for oj in (f(tj.tensor(x)), tj.compile(f)(tj.tensor(x))):
        assert oj.dtype == tj.uint8
        np.testing.assert_array_equal(oj.numpy(), ot.numpy())


def test_uint8_area_is_refused_by_dtype():
    with pytest.raises(NotImplementedError, match="interpolate: mode 'area' takes a floating point input"):
        tj.nn.functional.interpolate(tj.zeros((1, 1, 4, 4), dtype=tj.uint8), size=(2, 2), mode="area")


@pytest.mark.parametrize("shape, kw", [
    ((1, 2, 7), dict(scale_factor=1.1, mode="linear")),                       # size kept: a copy
    ((1, 2, 5, 4), dict(scale_factor=(1.01, 1.99), mode="bilinear")),
    ((1, 2, 5, 6, 7), dict(scale_factor=(1.09, 2.43, 2.78), mode="trilinear")),
    ((1, 2, 5, 4), dict(scale_factor=(1.01, 1.99), mode="bicubic")),
    ((1, 2, 7, 2), dict(scale_factor=(0.55, 1.41), mode="nearest")),          # 2-D: copy, halve
    ((1, 2, 4, 6), dict(scale_factor=(2.01, 1.54), mode="nearest")),
    ((1, 2, 6), dict(scale_factor=1.12, mode="nearest")),                     # 1-D: no shortcut
    ((1, 2, 1, 6, 2), dict(scale_factor=(1.15, 2.03, 1.42), mode="nearest")),
    ((1, 2, 7, 9), dict(scale_factor=(1.3, 0.7), mode="nearest-exact"))])
def test_scale_factor_values_follow_pytorchs_kernels(shape, kw):
    x = np.random.default_rng(4).standard_normal(shape)
    np.testing.assert_allclose(F.interpolate(tj.tensor(x), **kw).numpy(), TF.interpolate(torch.tensor(x), **kw).numpy(),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kw", [dict(size=(0, 2)), dict(scale_factor=(0.1, 1.5))])
def test_area_to_an_empty_size_is_empty_like_pytorch(kw):
    x = np.random.default_rng(5).standard_normal((1, 2, 5, 3))
    ot = TF.interpolate(torch.tensor(x), mode="area", **kw)
    xj = tj.tensor(x, requires_grad=True)
    oj = F.interpolate(xj, mode="area", **kw)
    assert tuple(oj.shape) == tuple(ot.shape) == (1, 2, 0, ot.shape[-1])
    oj.sum().backward()
    np.testing.assert_array_equal(xj.grad.numpy(), np.zeros_like(x))
    with pytest.raises(ValueError, match="output sizes should be greater than 0"):
        F.interpolate(tj.tensor(x), mode="bilinear", **kw)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "area", "nearest"])
def test_an_unchanged_size_gives_a_new_tensor(mode):
    x = tj.zeros(1, 2, 5, 5)
    out = F.interpolate(x[:, :, 1:4, 1:4], size=(3, 3), mode=mode)
    out.add_(1.0)   # (PyTorch's kernels write a new tensor: the input is not changed)
    assert x.sum().item() == 0.0 and out.is_contiguous()


def test_size_as_a_0d_tensor():
    # DDSP's upsample: size=signal.shape[-1] * factor, factor a registered 0-d buffer
    want = TF.interpolate(torch.tensor(X1), size=torch.tensor(7) * 2).numpy()
    np.testing.assert_allclose(F.interpolate(tj.tensor(X1), size=tj.tensor(7) * 2).numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_recompute_scale_factor_with_a_size_raises_as_pytorch(mode):
    x = np.ones((1, 1, 4, 4), np.float32)
    for m in (torch, tj):
        with pytest.raises(ValueError, match="recompute_scale_factor"):
            m.nn.functional.interpolate(m.tensor(x), size=(6, 6), mode=mode, recompute_scale_factor=True)


@pytest.mark.parametrize("kw", [dict(size=(0, 2)), dict(scale_factor=0.1)])
def test_an_empty_output_size_raises_a_runtime_error_as_torch(kw):
    """(ours stays a ValueError too)"""
    for m in (torch, tj):
        with pytest.raises(RuntimeError):
            m.nn.functional.interpolate(m.zeros(1, 1, 3, 4), **kw)
    with pytest.raises(ValueError):
        tj.nn.functional.interpolate(tj.zeros(1, 1, 3, 4), **kw)


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
def test_a_changing_int_output_size_stays_symbolic_when_compiled(mode):
    """``size=(n, n + 1)`` with a new int `n` on each call: one capture for every n >= 2,
    values and input gradients as PyTorch's."""
    f = lambda F_, x, n: F_.interpolate(x, size=(n, n + 1), mode=mode)   # noqa: E731
    cf = tj.compile(lambda x, n: f(F, x, n))
    for n in (2, 3, 5, 8, 4):
        jx, tx = tj.tensor(X2, requires_grad=True), torch.tensor(X2, requires_grad=True)
        jo, ro = cf(jx, n), f(TF, tx, n)
        np.testing.assert_allclose(jo.detach().numpy(), ro.detach().numpy(), rtol=1e-10, atol=1e-12)
        g = RNG.standard_normal(tuple(ro.shape))
        jo.backward(tj.tensor(g)), ro.backward(torch.tensor(g))
        np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert cf.cache_stats()["compiles"] == 2, cf.cache_stats()["recompile_reasons"]
