"""The reductions' ``dtype=`` keyword (mean, nanmean, sum, nansum, prod, cumsum, cumprod)
against PyTorch: the result's dtype and values."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name", ["mean", "nanmean", "sum", "nansum", "prod", "cumsum", "cumprod"])
def test_reductions_take_pytorchs_dtype_keyword(name):
    x = np.array([[1.5, 2.0, -3.0], [0.5, np.nan if name.startswith("nan") else 4.0, 2.0]], np.float32)
    for dim in ((1,) if name.startswith("cum") else (None, 1)):
        args = () if dim is None else (dim,)
        want = getattr(torch, name)(torch.tensor(x), *args, dtype=torch.float64)
        got = getattr(tj, name)(tj.tensor(x), *args, dtype=tj.float64)
        assert got.dtype == tj.float64
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    ints = np.array([[1, 2], [3, 4]])
    if name == "mean":   # an integer tensor averages once given a float dtype
        assert getattr(tj.tensor(ints), name)(dtype=tj.float32).item() == 2.5
    elif name == "nanmean":   # PyTorch's refuses an integer tensor, dtype= or not
        with pytest.raises(RuntimeError):
            torch.tensor(ints).nanmean(dtype=torch.float32)
        with pytest.raises(RuntimeError, match="nanmean: expected input .* got int64"):
            tj.tensor(ints).nanmean(dtype=tj.float32)
    else:
        assert getattr(tj.tensor(ints), name)(*((0,) if name.startswith("cum") else ()),
                                              dtype=tj.float32).dtype == tj.float32


@pytest.mark.parametrize("name", ["sum", "nansum", "prod", "cumsum", "cumprod"])
@pytest.mark.parametrize("src, dst", [("int32", "int32"), ("int8", "int16"), ("int64", "int32"),
                                      ("int32", "int64"), ("bool", "int32")])
@pytest.mark.parametrize("compiled", [False, True])
def test_an_integer_dtype_keyword_is_the_results_dtype(name, src, dst, compiled):
    """sum/prod of integers are int64 unless ``dtype=`` names another integer type: then
    that type, wrapping as it does in PyTorch."""
    x = np.array([[2**31 - 1, 5, 7], [3, -2, 1]] if src != "bool" else [[1, 0, 1], [1, 1, 0]]).astype(src)
    args = (1,) if name.startswith("cum") else ()
    want = getattr(torch, name)(torch.tensor(x), *args, dtype=getattr(torch, dst))
    fn = lambda t: getattr(tj, name)(t, *args, dtype=getattr(tj, dst))   # noqa: E731
    got = (tj.compile(fn) if compiled else fn)(tj.tensor(x))
    assert str(got.dtype).split(".")[-1] == dst
    np.testing.assert_array_equal(got.numpy(), want.numpy())
