"""tracejit.testing.make_tensor (testing.py) against torch.testing.make_tensor: the
same value ranges, dtypes, layouts and errors, and repeatable under manual_seed."""
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype,low,high", [("float32", None, None), ("float64", -1.0, 2.0), ("int64", None, None),
                                            ("int32", 0, 5), ("uint8", None, None), ("bool", None, None)])
def test_make_tensor_ranges_and_dtypes_as_torch(dtype, low, high):
    for m in (tj, torch):
        t = m.testing.make_tensor(40, 50, dtype=getattr(m, dtype), device="cpu", low=low, high=high)
        assert tuple(t.shape) == (40, 50) and t.dtype == getattr(m, dtype)
        if dtype != "bool":
            lo = -9 if low is None else low
            lo = 0 if dtype == "uint8" else lo
            hi = (9 if "float" in dtype else 10) if high is None else high
            assert lo <= t.min().item() and t.max().item() <= hi
            assert t.max().item() - t.min().item() > (hi - lo) / 2   # (spread over the range)


def test_make_tensor_layout_grad_seed_and_errors():
    for m in (tj, torch):
        t = m.testing.make_tensor((3, 4), dtype=m.float32, device="cpu", noncontiguous=True, requires_grad=True,
                                  exclude_zero=True)
        assert not t.is_contiguous() and t.requires_grad and bool((t != 0).all())
        with pytest.raises(ValueError, match="`low` must be less than `high`, but got 3 >= 1"):
            m.testing.make_tensor(2, dtype=m.float32, device="cpu", low=3, high=1)
    tj.manual_seed(3)
    a = tj.testing.make_tensor(5, dtype=tj.float32, device="cpu")
    tj.manual_seed(3)
    assert tj.testing.make_tensor(5, dtype=tj.float32, device="cpu").tolist() == a.tolist()
