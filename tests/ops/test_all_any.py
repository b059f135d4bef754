"""all and any against PyTorch: every dim choice, keepdim, empty extents (True / False
by counting), non-bool inputs, and the same results inside a compiled function."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")

R = np.random.default_rng(7)
ARRAYS = {
    "float": (R.standard_normal((4, 5, 3)) > -0.8).astype(np.float32) * R.standard_normal((4, 5, 3)).astype(np.float32),
    "bool": R.random((4, 5, 3)) > 0.3,
    "int": R.integers(0, 3, (4, 5, 3)),
    "empty": np.zeros((4, 0, 3), np.float32),
    "scalar": np.array(2.5, np.float32),
}
ARGS = [{}, {"dim": 0}, {"dim": 1}, {"dim": -1, "keepdim": True}, {"dim": (0, 2)}]


@pytest.mark.parametrize("name", list(ARRAYS))
@pytest.mark.parametrize("op", ["all", "any"])
def test_same_as_pytorch(name, op):
    x = ARRAYS[name]
    for kw in ARGS:
        if x.ndim == 0 and "dim" in kw:
            continue
        got = getattr(tj.tensor(x), op)(**kw)
        ref = getattr(torch.from_numpy(x), op)(**kw)
        assert got.dtype == tj.bool_, (kw, got.dtype)
        assert tuple(got.shape) == tuple(ref.shape), kw
        assert got.numpy().tolist() == ref.numpy().astype(bool).tolist(), kw


def test_all_true_and_all_false_rows():
    x = tj.tensor([[1.0, 2.0], [0.0, 3.0], [0.0, 0.0]])
    assert x.all(1).tolist() == [True, False, False]
    assert x.any(1).tolist() == [True, True, False]
    assert tj.zeros(0).all().item() is True and tj.zeros(0).any().item() is False


def test_compiled_matches_eager():
    def f(x):
        m = x > 0
        return m.all(1), m.any(0), m.all(), (x != x).any()
    x = tj.tensor(ARRAYS["float"].reshape(4, 15))
    cf = tj.compile(f)
    for _ in range(3):
        got = cf(x)
    tj.compiler.wait()
    got, ref = cf(x), f(x)
    xn = ARRAYS["float"].reshape(4, 15)
    want = [(xn > 0).all(1), (xn > 0).any(0), (xn > 0).all(), np.isnan(xn).any()]
    for g, r, w in zip(got, ref, want):
        assert g.numpy().tolist() == r.numpy().tolist() == np.asarray(w).tolist()
