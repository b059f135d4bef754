"""The normalizations' dtype rules against PyTorch's: which input/parameter dtype pairs
run and the result's dtype (outside and inside autocast), a half-precision input
normalized in float32 and rounded once, and the running statistics' update rounded as
PyTorch's CPU kernel rounds it."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit import bf16
from tracejit.errors import DTypeError

torch = pytest.importorskip("torch")

_DTYPES = ("float16", "bfloat16", "float32", "float64")


def _calls(m, F):
    """name -> fn(x, w, b) on a (4, 8) x and (8,) parameters."""
    return {
        "layer_norm": lambda x, w, b: F.layer_norm(x, (8,), w, b),
        "layer_norm_weight_only": lambda x, w, b: F.layer_norm(x, (8,), w),
        "rms_norm": lambda x, w, b: F.rms_norm(x, (8,), w),
        "group_norm": lambda x, w, b: F.group_norm(x.view(2, 8, 2), 2, w, b),
        "batch_norm_train": lambda x, w, b: F.batch_norm(x.view(2, 8, 2), None, None, w, b, training=True),
        "batch_norm_train_weight_only": lambda x, w, b: F.batch_norm(x.view(2, 8, 2), None, None, w,
                                                                     training=True),
        "batch_norm_eval": lambda x, w, b: F.batch_norm(x.view(2, 8, 2), m.zeros(8, dtype=w.dtype),
                                                        m.ones(8, dtype=w.dtype), w, b),
        "instance_norm": lambda x, w, b: F.instance_norm(x.view(2, 8, 2), weight=w, bias=b),
    }


def _outcome(m, F, name, xd, wd, autocast):
    r = np.random.default_rng(0)
    x = m.tensor(r.standard_normal((4, 8)).astype(np.float32)).to(getattr(m, xd))
    w, b = (m.tensor(r.standard_normal(8).astype(np.float32)).to(getattr(m, wd)) for _ in range(2))
    try:
        with m.autocast("cpu", enabled=autocast):
            return str(_calls(m, F)[name](x, w, b).dtype).split(".")[-1]
    except (RuntimeError, DTypeError):
        return "error"


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("name", sorted(_calls(tj, tj.nn.functional)))
def test_result_dtypes_and_refusals_match_torch(name, autocast):
    """Every input/parameter dtype pair: the result's dtype, or a refusal, as PyTorch's
    (parameters of the input's dtype, or float32 ones for a half input; rms_norm takes any
    and gives the input's dtype)."""
    for xd in _DTYPES:
        for wd in _DTYPES:
            want = _outcome(torch, torch.nn.functional, name, xd, wd, autocast)
            assert _outcome(tj, tj.nn.functional, name, xd, wd, autocast) == want, (xd, wd)


def test_mixed_parameter_dtypes_are_refused_naming_both():
    x = tj.ones(2, 8, 3).bfloat16()
    with pytest.raises(DTypeError, match="weight is float32 but bias is bfloat16"):
        tj.nn.functional.layer_norm(x, (3,), tj.ones(3), tj.ones(3).bfloat16())
    with pytest.raises(DTypeError, match="weight is float32 but running_mean is bfloat16"):
        tj.nn.functional.batch_norm(x, tj.zeros(8).bfloat16(), tj.ones(8).bfloat16(), tj.ones(8), tj.ones(8))


def _words(t):
    return t.view(tj.int16).numpy()


_LAYERS = {
    "LayerNorm": (lambda m: m.nn.LayerNorm(16), (6, 16)),
    "RMSNorm": (lambda m: m.nn.RMSNorm(16), (6, 16)),
    "GroupNorm": (lambda m: m.nn.GroupNorm(4, 16), (3, 16, 5)),
    "InstanceNorm1d": (lambda m: m.nn.InstanceNorm1d(16, affine=True), (3, 16, 5)),
    "BatchNorm1d": (lambda m: m.nn.BatchNorm1d(16), (3, 16, 5)),
    "BatchNorm1d_eval": (lambda m: m.nn.BatchNorm1d(16).eval(), (3, 16, 5)),
}


@pytest.mark.parametrize("name", sorted(_LAYERS))
def test_bf16_input_with_float32_parameters_is_the_float32_result_rounded_once(name):
    """A bf16 activation through a float32 layer (as under autocast): the bf16 result is
    the layer's float32 result on the widened input rounded once, the parameters'
    gradients float32, the input's bf16; all within a bf16 step of PyTorch's."""
    make, shape = _LAYERS[name]
    r = np.random.default_rng(3)
    x = bf16.to_float32(bf16.to_bfloat16(r.standard_normal(shape).astype(np.float32) * 2 + 0.5))
    g = r.standard_normal(shape).astype(np.float32)
    layer = make(tj)
    sd = {k: (v + tj.tensor(r.standard_normal(tuple(v.shape)).astype(np.float32)) * 0.1
              if v.dtype is tj.float32 and k != "running_var" else v.clone())
          for k, v in layer.state_dict().items()}
    layer.load_state_dict(sd)
    xb = tj.tensor(x).bfloat16().requires_grad_()
    y = layer(xb)
    assert y.dtype is tj.bfloat16
    twin = make(tj)     # (the float32 reference, its running statistics apart)
    twin.load_state_dict(sd)
    ref = twin(tj.tensor(x)).detach()
    np.testing.assert_array_equal(_words(y.detach()), _words(ref.bfloat16()))
    y.backward(tj.tensor(g).bfloat16())
    assert xb.grad.dtype is tj.bfloat16
    grads = {k: p.grad.numpy() for k, p in layer.named_parameters()}
    assert all(p.grad.dtype is tj.float32 for p in layer.parameters())

    tl = make(torch)
    tl.load_state_dict({k: torch.tensor(v.numpy()) for k, v in sd.items()})
    tx = torch.tensor(x).bfloat16().requires_grad_()
    ty = tl(tx)
    assert ty.dtype == torch.bfloat16
    ty.backward(torch.tensor(g).bfloat16())
    step = np.abs(ref.numpy()) * 2.0 ** -7 + 1e-6
    assert np.all(np.abs(y.float().detach().numpy() - ty.float().detach().numpy()) <= step)
    for k, p in tl.named_parameters():
        np.testing.assert_allclose(grads[k], p.grad.numpy(), rtol=2e-2, atol=2e-2 * np.abs(grads[k]).max())
    if name.endswith("_eval") or name.startswith("BatchNorm"):
        for k in ("running_mean", "running_var"):
            np.testing.assert_allclose(getattr(layer, k).numpy(), getattr(tl, k).numpy(), rtol=1e-2)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("affine", [True, False])
def test_running_statistics_update_rounds_as_torch(dtype, affine):
    """Small integers over a power-of-two count keep the batch mean and sum of squares
    exact on every path, so only the update's roundings can differ: the unbiased variance
    as the sum of squares over n - 1, a float32 input's variance update summed in double,
    a half input's all in float32, as PyTorch's CPU kernel does."""
    r = np.random.default_rng(5)
    for shape, momentum in (((2, 6, 4), 0.1), ((4, 6, 4), 0.3), ((8, 6, 2), 0.1), ((2, 6, 8), 0.7)):
        x = r.integers(-8, 8, shape).astype(np.float32)
        rm, rv = r.standard_normal(6).astype(np.float32), (r.random(6) + 0.5).astype(np.float32)
        out = {}
        for m in (tj, torch):
            stat = m.float64 if dtype == "float64" else m.float32
            mean, var = m.tensor(rm).to(stat), m.tensor(rv).to(stat)
            w = m.ones(6, dtype=stat) if affine else None
            b = m.zeros(6, dtype=stat) if affine else None
            m.nn.functional.batch_norm(m.tensor(x).to(getattr(m, dtype)), mean, var, w, b, training=True,
                                       momentum=momentum)
            out[m] = mean.numpy(), var.numpy()
        np.testing.assert_array_equal(out[tj][0], out[torch][0])
        np.testing.assert_array_equal(out[tj][1], out[torch][1])


@pytest.mark.parametrize("affine", [False, True])
def test_float16_layer_norm_of_large_values_computes_in_float32_as_torch(affine):
    x = np.array([[3e4, 3e4, -3e4], [1.1, 2.3, -0.7]], dtype=np.float16)

    def run(lib, fn=None):
        w = (lib.ones(3, dtype=lib.float16), lib.zeros(3, dtype=lib.float16)) if affine else (None, None)
        f = fn or (lambda t: lib.nn.functional.layer_norm(t, (3,), *w))
        return f(lib.tensor(x)).float().numpy()
    want = run(torch)
    np.testing.assert_array_equal(run(tj), want)
    np.testing.assert_array_equal(run(tj, tj.compile(lambda t: tj.nn.functional.layer_norm(
        t, (3,), *((tj.ones(3, dtype=tj.float16), tj.zeros(3, dtype=tj.float16)) if affine else (None, None))))), want)
