"""torch.* names of older and library code (top_compat.py, legacy_types.py), against PyTorch."""
import math
import warnings

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("args", [(1, 4), (0, 1, 0.3), (5, 1, -2), (0.5, 2.5)])
def test_range_is_inclusive_and_deprecated(args):
    with pytest.warns(UserWarning, match="deprecated"):
        got = tj.range(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = torch.range(*args)
    assert got.dtype is tj.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="step"), pytest.warns(UserWarning):
        tj.range(0, 1, 0)


def test_asarray_shares_or_copies():
    a = np.arange(4.0)
    assert tj.asarray(a).data_ptr() == a.__array_interface__["data"][0]
    assert tj.asarray(a, copy=True).data_ptr() != a.__array_interface__["data"][0]
    t = tj.ones(3)
    assert tj.asarray(t) is t and tj.asarray(t, copy=True) is not t
    assert tj.asarray(t, dtype=tj.float64).dtype is tj.float64
    with pytest.raises(ValueError, match="copy=False"):
        tj.asarray(t, dtype=tj.float64, copy=False)
    assert tj.asarray([[1, 2]]).tolist() == torch.asarray([[1, 2]]).tolist()


def test_frombuffer():
    buf = bytearray(np.arange(6, dtype=np.int16).tobytes())
    got = tj.frombuffer(buf, dtype=tj.int16, count=3, offset=2)
    assert got.tolist() == torch.frombuffer(buf, dtype=torch.int16, count=3, offset=2).tolist() == [1, 2, 3]
    got[0] = 9   # (the buffer's own memory, as PyTorch's)
    assert np.frombuffer(bytes(buf), np.int16)[1] == 9


def test_aliases_match_torch():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    tx, jx = torch.tensor(x), tj.tensor(x)
    for f in (lambda m, t: m.adjoint(t), lambda m, t: m.split_with_sizes(t, [1, 3], 2)[1],
              lambda m, t: m.unsafe_chunk(t, 2, 2)[0], lambda m, t: m.unsafe_split(t, 2, 1)[1],
              lambda m, t: m.constant_pad_nd(t, [1, 2], 7.0), lambda m, t: t.unsafe_chunk(3, 1)[2]):
        np.testing.assert_array_equal(f(tj, jx).numpy(), f(torch, tx).numpy())
    assert tj.is_neg(jx) is torch.is_neg(tx) is False
    assert tj.short is tj.int16 and tj.GradScaler is tj.amp.GradScaler


@pytest.mark.parametrize("args", [(), (-1,), (4,), (2, True)])
def test_embedding_takes_weight_first(args):
    w = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    idx = np.array([[1, 2, 4, 4]])
    tw, jw = torch.tensor(w, requires_grad=True), tj.tensor(w, requires_grad=True)
    want, got = torch.embedding(tw, torch.tensor(idx), *args), tj.embedding(jw, tj.tensor(idx), *args)
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    (want * torch.arange(3.0)).sum().backward()
    (got * tj.arange(3.0)).sum().backward()
    np.testing.assert_allclose(jw.grad.numpy(), tw.grad.numpy())   # (padding and frequency scaling)
    with pytest.raises(TypeError, match="takes \\(weight, indices\\)"):
        tj.embedding(tj.tensor(idx), jw)


def test_autocast_queries():
    assert tj.is_autocast_enabled() is torch.is_autocast_enabled() is False
    assert tj.get_autocast_gpu_dtype() is tj.float16
    with tj.autocast("cpu", dtype=tj.bfloat16):
        assert tj.is_autocast_enabled("cpu") and tj.is_autocast_cpu_enabled()
        assert tj.get_autocast_cpu_dtype() is tj.bfloat16
    assert not tj.is_autocast_cpu_enabled()


def test_sym_helpers_and_classes():
    assert tj.sym_int(3.7) == torch.sym_int(3.7) == 3 and tj.sym_float(2) == 2.0
    assert tj.sym_max(2, 5) == 5 and tj.sym_min(2, 5) == 2 and tj.sym_not(False) is True
    assert tj.sym_ite(True, 1, 2) == 1 and tj.sym_sqrt(4) == 2.0 and tj.sym_sum([1, 2]) == 3
    assert not isinstance(3, tj.SymInt) and not isinstance(3.0, tj.SymFloat) and not isinstance(True, tj.SymBool)
    assert issubclass(tj.OutOfMemoryError, RuntimeError)


def test_typename_and_default_tensor_type():
    assert tj.typename(tj.ones(2)) == torch.typename(torch.ones(2)) == "torch.FloatTensor"
    assert tj.typename(tj.ones(2, dtype=tj.int64)) == "torch.LongTensor"
    assert tj.typename(1) == torch.typename(1) == "int"
    assert tj.typename(math.sqrt) == torch.typename(math.sqrt) == "math.sqrt"
    try:
        with pytest.warns(UserWarning, match="deprecated"):
            tj.set_default_tensor_type(tj.DoubleTensor)
        assert tj.ones(1).dtype is tj.float64
        with pytest.warns(UserWarning):
            tj.set_default_tensor_type("torch.FloatTensor")
        assert tj.ones(1).dtype is tj.float32
        with pytest.raises(TypeError, match="floating-point"):
            tj.set_default_tensor_type(tj.LongTensor)
        with pytest.raises(TypeError, match="invalid type string"):
            tj.set_default_tensor_type("torch.Nope")
    finally:
        tj.set_default_dtype(tj.float32)


def test_type_alias_modules():
    from tracejit.nn.common_types import _size_2_t, _size_any_t
    from tracejit.types import Number, _size
    import typing
    assert typing.get_args(_size_2_t) == (int, typing.Tuple[int, int]) and _size_any_t is not None
    assert int in typing.get_args(Number) and tj.Size in typing.get_args(_size)


def test_get_device_module_as_torch():
    torch = pytest.importorskip("torch")
    assert tj.get_device_module("cpu") is tj.cpu and tj.get_device_module(tj.device("cuda:0")) is tj.cuda
    assert tj.get_device_module() is (tj.cuda if tj.cuda.is_available() else tj.cpu)
    for m in (tj, torch):
        with pytest.raises(RuntimeError, match="Invalid value of device '3'"):
            m.get_device_module(3)
