"""``tracejit.finfo``/``iinfo`` (typeinfo.py) against PyTorch's values where it is installed,
and against the IEEE formats' own limits where it is not."""
import pytest

import tracejit as tj


def test_finfo_values():
    f = tj.finfo(tj.float32)
    assert (f.bits, f.eps, f.tiny, f.resolution) == (32, 2.0 ** -23, 2.0 ** -126, 1e-06)
    assert f.max == -f.min == (2 - 2.0 ** -23) * 2.0 ** 127 and f.smallest_normal == f.tiny
    b = tj.finfo(tj.bfloat16)
    assert (b.bits, b.eps, b.tiny) == (16, 2.0 ** -7, 2.0 ** -126) and b.max == (2 - 2.0 ** -7) * 2.0 ** 127
    assert tj.finfo().dtype == "float32" and tj.finfo(tj.float64).eps == 2.0 ** -52
    assert tj.finfo(tj.float16).max == 65504.0


def test_iinfo_values_and_errors():
    assert (tj.iinfo(tj.int64).min, tj.iinfo(tj.int64).max) == (-2 ** 63, 2 ** 63 - 1)
    assert (tj.iinfo(tj.uint8).bits, tj.iinfo(tj.uint8).max) == (8, 255)
    with pytest.raises(TypeError, match="use tracejit.iinfo"):
        tj.finfo(tj.int32)
    with pytest.raises(TypeError, match="use tracejit.finfo"):
        tj.iinfo(tj.float32)


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", "float64"])
def test_finfo_equals_pytorchs(name):
    torch = pytest.importorskip("torch")
    a, b = tj.finfo(getattr(tj, name)), torch.finfo(getattr(torch, name))
    for k in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution"):
        assert getattr(a, k) == getattr(b, k), k
    assert repr(a) == repr(b)


@pytest.mark.parametrize("name", ["int8", "uint8", "int16", "int32", "int64"])
def test_iinfo_equals_pytorchs(name):
    torch = pytest.importorskip("torch")
    a, b = tj.iinfo(getattr(tj, name)), torch.iinfo(getattr(torch, name))
    assert (a.bits, a.min, a.max) == (b.bits, b.min, b.max)
