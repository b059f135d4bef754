"""Ops PyTorch has floating point kernels for only refuse integer and bool tensors as it
does, eagerly and compiled, with an error naming the op and the dtype (ops/dtype_checks.py);
the dtypes PyTorch does accept still compute."""
import warnings

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

OPS = {   # name: fn(module, functional, x) with x of 6 elements
    "gelu": lambda m, f, x: f.gelu(x),
    "silu": lambda m, f, x: f.silu(x),
    "softplus": lambda m, f, x: f.softplus(x),
    "elu": lambda m, f, x: f.elu(x),
    "selu": lambda m, f, x: f.selu(x),
    "celu": lambda m, f, x: f.celu(x),
    "mish": lambda m, f, x: f.mish(x),
    "hardswish": lambda m, f, x: f.hardswish(x),
    "hardsigmoid": lambda m, f, x: f.hardsigmoid(x),
    "leaky_relu": lambda m, f, x: f.leaky_relu(x),
    "logsigmoid": lambda m, f, x: f.logsigmoid(x),
    "glu": lambda m, f, x: f.glu(x),
    "softshrink": lambda m, f, x: f.softshrink(x),
    "hardshrink": lambda m, f, x: f.hardshrink(x),
    "rrelu": lambda m, f, x: f.rrelu(x),
    "prelu": lambda m, f, x: f.prelu(x, m.ones(1, dtype=x.dtype)),
    "adaptive_avg_pool2d": lambda m, f, x: f.adaptive_avg_pool2d(x.reshape(1, 1, 2, 3), 1),
    "adaptive_avg_pool1d": lambda m, f, x: f.adaptive_avg_pool1d(x.reshape(1, 2, 3), 1),
    "adaptive_max_pool1d": lambda m, f, x: f.adaptive_max_pool1d(x.reshape(1, 2, 3), 1),
    "adaptive_max_pool3d": lambda m, f, x: f.adaptive_max_pool3d(x.reshape(1, 1, 1, 2, 3), 1),
    "avg_pool1d": lambda m, f, x: f.avg_pool1d(x.reshape(1, 2, 3), 2),
    "avg_pool2d": lambda m, f, x: f.avg_pool2d(x.reshape(1, 1, 2, 3), 2),
    "avg_pool3d": lambda m, f, x: f.avg_pool3d(x.reshape(1, 1, 1, 2, 3), 1),
    "adaptive_max_pool2d": lambda m, f, x: f.adaptive_max_pool2d(x.reshape(1, 1, 2, 3), 1),
    "interpolate": lambda m, f, x: f.interpolate(x.reshape(1, 1, 2, 3), scale_factor=2),
    "interpolate_bilinear": lambda m, f, x: f.interpolate(x.reshape(1, 1, 2, 3), scale_factor=2, mode="bilinear"),
    "frac": lambda m, f, x: m.frac(x),
    "lerp": lambda m, f, x: m.lerp(x, x, 0.5),
    "quantile": lambda m, f, x: m.quantile(x, 0.5),
    "nanmean": lambda m, f, x: m.nanmean(x),
    "logcumsumexp": lambda m, f, x: m.logcumsumexp(x, 0),
    "cdist": lambda m, f, x: m.cdist(x.reshape(2, 3), x.reshape(2, 3)),
    "pdist": lambda m, f, x: f.pdist(x.reshape(2, 3)),
    "dist": lambda m, f, x: m.dist(x, x),
    "histc": lambda m, f, x: m.histc(x),
    "norm": lambda m, f, x: m.norm(x),
    "vector_norm": lambda m, f, x: m.linalg.vector_norm(x),
    "normalize": lambda m, f, x: f.normalize(x, dim=0),
    "renorm": lambda m, f, x: m.renorm(x.reshape(2, 3), 2, 0, 1.0),
    # integers too, bool refused (a primitive's rule, or `takes(..., ints=True)`)
    "relu": lambda m, f, x: f.relu(x),
    "hardtanh": lambda m, f, x: f.hardtanh(x, 0.0, 3.0),
    "relu6": lambda m, f, x: f.relu6(x),
    "floor": lambda m, f, x: m.floor(x),
    "ceil": lambda m, f, x: m.ceil(x),
    "round": lambda m, f, x: m.round(x),
    "trunc": lambda m, f, x: m.trunc(x),
    "neg": lambda m, f, x: m.neg(x),
    "abs": lambda m, f, x: m.abs(x),
    "positive": lambda m, f, x: m.positive(x),
    # max_pool1d has float kernels only; with indices (max_pool2d's) and max_pool2d take ints
    "max_pool1d": lambda m, f, x: f.max_pool1d(x.reshape(1, 2, 3), 2),
    "max_pool1d_with_indices": lambda m, f, x: f.max_pool1d(x.reshape(1, 2, 3), 2, return_indices=True),
    "max_pool2d": lambda m, f, x: f.max_pool2d(x.reshape(1, 1, 2, 3), 2),
    "max_pool3d": lambda m, f, x: f.max_pool3d(x.reshape(1, 1, 1, 2, 3), 1),
}
NAMED = {"interpolate_bilinear": "interpolate", "normalize": "norm", "vector_norm": "norm",
         "relu6": "hardtanh", "max_pool1d_with_indices": "max_pool1d"}
DTYPES = ["int64", "int32", "uint8", "bool"]


def _outcome(call):
    try:
        out = call()
    except (RuntimeError, TypeError) as e:
        return "raises", e
    return "ok", out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("name", sorted(OPS))
def test_dtypes_pytorch_refuses_are_refused(name):
    fn = OPS[name]
    compiled = tj.compile(lambda a: fn(tj, F, a), backend="interpret")
    for dt in DTYPES:
        data = [1, 2, 3, 4, 5, 6] if dt != "bool" else [1, 0, 1, 1, 0, 1]
        want, _ = _outcome(lambda: fn(torch, TF, torch.tensor(data, dtype=getattr(torch, dt))))
        for call in (lambda: fn(tj, F, tj.tensor(data, dtype=getattr(tj, dt))),
                     lambda: compiled(tj.tensor(data, dtype=getattr(tj, dt)))):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got, value = _outcome(call)
            assert got == want, (name, dt, value)
            if got == "raises":
                assert isinstance(value, NotImplementedError) and isinstance(value, RuntimeError)
                assert NAMED.get(name, name) in str(value), str(value)
                assert dt in str(value), str(value)


def test_floats_still_compute_and_a_dtype_argument_does_not_lift_the_check():
    x = np.array([0.5, -1.0, 2.0], np.float32)
    np.testing.assert_allclose(F.silu(tj.tensor(x)).numpy(), TF.silu(torch.tensor(x)).numpy(), rtol=1e-6)
    with pytest.raises(RuntimeError):
        torch.nanmean(torch.tensor([1, 2]), dtype=torch.float32)
    with pytest.raises(RuntimeError, match="nanmean: expected input .* got int64"):
        tj.nanmean(tj.tensor([1, 2]), dtype=tj.float32)
    u8 = np.arange(6, dtype=np.uint8).reshape(1, 1, 2, 3)   # PyTorch has a uint8 nearest kernel
    np.testing.assert_array_equal(F.interpolate(tj.tensor(u8), scale_factor=2).numpy(),
                                  TF.interpolate(torch.tensor(u8), scale_factor=2).numpy())


def test_hardtanh_and_relu6_keep_an_integer_dtype_as_pytorch():
    data = [-3, 0, 1, 5, 9]
    for dt in ("int64", "int32", "uint8"):
        a = np.array(data).astype(dt)   # (uint8: -3 wraps to 253)
        for call in (lambda m, f, x: f.relu6(x), lambda m, f, x: f.hardtanh(x, 0.5, 4.7)):
            want = call(torch, TF, torch.tensor(a))
            got = call(tj, F, tj.tensor(a))
            assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
            assert got.tolist() == want.tolist()
    want = TF.hardtanh(torch.tensor(data), -2.5, 4.7)   # bounds truncated toward zero
    assert F.hardtanh(tj.tensor(data), -2.5, 4.7).tolist() == want.tolist()
    u8 = np.array(data).astype(np.uint8)
    with pytest.raises(RuntimeError, match="unsigned type with negative limits"):
        TF.hardtanh(torch.tensor(u8))
    with pytest.raises(RuntimeError, match="unsigned type with negative limits"):
        F.hardtanh(tj.tensor(u8))
