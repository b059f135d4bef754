"""numpy's parameter names (``axis=``, ``keepdims=``) on every dim-taking function and
Tensor method, eager and compiled, against PyTorch."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

X = np.arange(24, dtype=np.float32).reshape(2, 3, 4) % 5
IDX = np.array([[[0, 1, 0, 1]] * 3] * 2)

# (call, arguments as keywords: axis for dim) of functions and methods PyTorch accepts so
CALLS = [
    lambda m, x, i: m.gather(x, axis=2, index=i),
    lambda m, x, i: x.gather(axis=2, index=i),
    lambda m, x, i: m.index_select(x, axis=1, index=i[0, :2, 0]),
    lambda m, x, i: x.index_select(axis=1, index=i[0, :2, 0]),
    lambda m, x, i: m.narrow(x, axis=1, start=1, length=2),
    lambda m, x, i: x.narrow(axis=1, start=1, length=2),
    lambda m, x, i: m.stack(m.unbind(x, axis=1)),
    lambda m, x, i: m.stack(x.unbind(axis=2)),
    lambda m, x, i: m.select(x, axis=1, index=2),
    lambda m, x, i: x.select(axis=2, index=0),
    lambda m, x, i: m.median(x, axis=1).values,
    lambda m, x, i: x.median(axis=2, keepdims=True).indices,
    lambda m, x, i: m.mode(x, axis=1).values,
    lambda m, x, i: m.kthvalue(x, 2, axis=1, keepdims=True).values,
    lambda m, x, i: m.nansum(x, axis=1),
    lambda m, x, i: x.nansum(axis=0, keepdims=True),
    lambda m, x, i: m.count_nonzero(x, axis=2),
    lambda m, x, i: m.var_mean(x, axis=1)[1],
    lambda m, x, i: m.cat(m.chunk(x, 2, axis=2), 0),
    lambda m, x, i: m.cummax(x, axis=1).values,
    lambda m, x, i: m.nanmean(x, axis=1, keepdims=True),   # (ops behind a dtype-check wrapper)
    lambda m, x, i: x.logcumsumexp(axis=2),
    lambda m, x, i: x.clone().scatter_(axis=2, index=i, src=x * 2),   # (in-place methods)
    lambda m, x, i: x.clone().scatter_add_(axis=2, index=i, src=x),
    lambda m, x, i: x.clone().scatter_reduce_(axis=2, index=i, src=x, reduce="amax"),
    lambda m, x, i: x.clone().index_add_(axis=1, index=i[0, :2, 0], source=x[:, :2]),
    lambda m, x, i: x.clone().index_fill_(axis=1, index=i[0, :2, 0], value=-1.0),
    lambda m, x, i: x.clone().index_copy_(axis=1, index=i[0, :2, 1], source=x[:, 1:]),
    lambda m, x, i: x.clone().cumsum_(axis=2),
]


@pytest.mark.parametrize("k", range(len(CALLS)))
def test_axis_alias_matches_torch(k):
    call = CALLS[k]
    want = call(torch, torch.tensor(X), torch.tensor(IDX)).numpy()
    got = call(tj, tj.tensor(X), tj.tensor(IDX)).numpy()
    if k == 21:   # (logcumsumexp: an ulp apart; every other call exactly torch's)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("k", [0, 1, 5, 11, 15, 20, 22, 25])
def test_axis_alias_compiled(k):
    call = CALLS[k]
    want = call(torch, torch.tensor(X), torch.tensor(IDX)).numpy()
    got = tj.compile(lambda x, i: call(tj, x, i))(tj.tensor(X), tj.tensor(IDX)).numpy()
    np.testing.assert_array_equal(got, want)


def test_axis_alias_errors_name_the_argument():
    x, i = tj.tensor(X), tj.tensor(IDX)
    with pytest.raises(TypeError, match="multiple values for argument 'dim'"):
        tj.gather(x, 1, i, axis=1)
    with pytest.raises(TypeError, match="missing 1 required argument: 'dim'"):
        tj.gather(x, index=i)
    with pytest.raises(TypeError, match="missing 1 required argument: 'index'"):
        x.gather(axis=1)
    with pytest.raises(TypeError, match="multiple values for argument 'keepdim'"):
        x.nansum(1, True, keepdims=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'axes'"):
        x.narrow(axes=1, start=0, length=1)


def test_positional_calls_unchanged():
    x, i = tj.tensor(X), tj.tensor(IDX)
    np.testing.assert_array_equal(x.gather(2, i).numpy(), torch.tensor(X).gather(2, torch.tensor(IDX)).numpy())
    assert x.size(axis=1) == x.size(1) == 3
    assert tj.median(x).item() == torch.median(torch.tensor(X)).item()


def test_aliased_functions_and_methods_pickle_by_name():
    import pickle
    x = tj.tensor(X)
    x.gather(2, tj.tensor(IDX))   # (a method forwarding to its op: installed on first call)
    for f in (tj.gather, tj.median, tj.Tensor.gather, tj.Tensor.size, tj.Tensor.narrow):
        assert pickle.loads(pickle.dumps(f)) is f
