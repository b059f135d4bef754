"""numpy's ``axis=`` name for ``dim``, which PyTorch takes by keyword: cat and stack
(RAFT's ``torch.stack(torch.meshgrid(dy, dx), axis=-1)``), the cumulative ops, softmax,
squeeze/unsqueeze and the sorts, as functions and as methods, eager and compiled."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")

A = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
CALLS = {
    "cat": lambda m, x, axis: m.cat([x, -x], axis=axis),
    "stack": lambda m, x, axis: m.stack([x, -x], axis=axis),
    "cumsum": lambda m, x, axis: m.cumsum(x, axis=axis),
    "cumprod": lambda m, x, axis: x.cumprod(axis=axis),
    "softmax": lambda m, x, axis: m.softmax(x, axis=axis),
    "log_softmax": lambda m, x, axis: x.log_softmax(axis=axis),
    "unsqueeze": lambda m, x, axis: x.unsqueeze(axis=axis),
    "squeeze": lambda m, x, axis: m.squeeze(x.unsqueeze(axis), axis=axis),
    "argsort": lambda m, x, axis: m.argsort(x, axis=axis),
    "sort": lambda m, x, axis: x.sort(axis=axis, descending=True)[0],
    "topk": lambda m, x, axis: x.topk(1, axis=axis)[1],
}


@pytest.mark.parametrize("op", sorted(CALLS))
@pytest.mark.parametrize("axis", [0, -1])
def test_axis_is_numpys_name_for_dim(op, axis):
    want = CALLS[op](torch, torch.tensor(A), axis).numpy()
    np.testing.assert_allclose(CALLS[op](tj, tj.tensor(A), axis).numpy(), want, rtol=1e-6)
    f = tj.compile(lambda x: CALLS[op](tj, x, axis))
    np.testing.assert_allclose(f(tj.tensor(A)).numpy(), want, rtol=1e-6)


def test_a_missing_dim_is_named():
    with pytest.raises(TypeError, match="cumsum: dim"):
        tj.cumsum(tj.tensor(A))


def test_flip_method_takes_dims_by_keyword():
    """Multi-scale inference's ``m(x.flip(dims=[3])).flip(dims=[3])``."""
    want = torch.tensor(A).flip(dims=[0, 1]).numpy()
    for got in (tj.tensor(A).flip(dims=[0, 1]), tj.tensor(A).flip(0, 1), tj.tensor(A).flip((0, 1))):
        np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(TypeError, match="dims"):
        tj.tensor(A).flip(dim=0)
