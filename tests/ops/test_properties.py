"""Property-based checks (hypothesis, bounded): broadcasting, basic indexing, reductions
and shape ops against numpy on random shapes, including 0-size and 1-size dims."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import tracejit as tj

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None)


@st.composite
def broadcastable_pair(draw):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=0, max_side=3))
    return shapes.input_shapes


@SETTINGS
@given(broadcastable_pair(), st.sampled_from(["add", "sub", "mul", "maximum", "where"]), st.integers(0, 2**16))
def test_broadcast_forward_and_grad_shapes(shapes, name, seed):
    rng = np.random.default_rng(seed)
    sa, sb = shapes
    a = rng.standard_normal(sa)
    b = rng.standard_normal(sb) + 0.25  # no ties for maximum
    ta = tj.tensor(a, requires_grad=True)
    tb = tj.tensor(b, requires_grad=True)
    if name == "where":
        cond = a > 0
        out = tj.where(tj.tensor(cond), ta, tb)
        expect = np.where(cond, a, b)
    else:
        out = getattr(tj, name)(ta, tb)
        expect = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum}[name](a, b)
    assert out.shape == expect.shape
    np.testing.assert_allclose(out.detach().numpy(), expect)
    g = np.random.default_rng(seed + 1).standard_normal(expect.shape)
    out.backward(tj.tensor(g))
    assert ta.grad.shape == sa and tb.grad.shape == sb
    if name == "add":
        np.testing.assert_allclose(ta.grad.numpy(), _sum_to(g, sa), atol=1e-12)
        np.testing.assert_allclose(tb.grad.numpy(), _sum_to(g, sb), atol=1e-12)


def _sum_to(g, shape):
    lead = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(lead))) if lead else g
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


@st.composite
def basic_index(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4))
    items = []
    for d in shape:
        kind = draw(st.sampled_from(["slice", "int", "none", "full"]))
        if kind == "int" and d > 0:
            items.append(draw(st.integers(-d, d - 1)))
        elif kind == "slice":
            start = draw(st.one_of(st.none(), st.integers(-5, 5)))
            stop = draw(st.one_of(st.none(), st.integers(-5, 5)))
            step = draw(st.one_of(st.none(), st.integers(1, 3)))
            items.append(slice(start, stop, step))
        elif kind == "none":
            items.append(None)
            items.append(slice(None))
        else:
            items.append(slice(None))
    if draw(st.booleans()) and items:
        cut = draw(st.integers(0, len(items)))
        items = items[:cut] + [Ellipsis]
    return shape, tuple(items)


@SETTINGS
@given(basic_index())
def test_basic_indexing_matches_numpy_and_is_differentiable(case):
    shape, index = case
    x = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    t = tj.tensor(x, requires_grad=True)
    out = t[index]
    expect = x[index]
    assert out.shape == expect.shape
    np.testing.assert_array_equal(out.detach().numpy(), expect)
    out.sum().backward()
    mask = np.zeros(shape)
    np.add.at(mask, index, 1.0) if expect.size else None
    np.testing.assert_array_equal(t.grad.numpy(), mask)


@SETTINGS
@given(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=3), st.data())
def test_reductions_random_dims(shape, data):
    x = np.random.default_rng(0).standard_normal(shape)
    nd = len(shape)
    if nd:
        dims = data.draw(st.lists(st.integers(-nd, nd - 1), min_size=1, max_size=nd, unique_by=lambda d: d % nd))
    else:
        dims = []
    keepdim = data.draw(st.booleans())
    t = tj.tensor(x)
    dim_arg = tuple(dims) if dims else None
    axis = tuple(d % nd for d in dims) if dims else None
    np.testing.assert_allclose(t.sum(dim_arg, keepdim=keepdim).numpy(), x.sum(axis=axis, keepdims=keepdim))
    empty = any(shape[d % nd] == 0 for d in dims) if dims else 0 in shape
    if not empty:
        np.testing.assert_allclose(t.amax(dim_arg, keepdim=keepdim).numpy(), x.max(axis=axis, keepdims=keepdim))
        np.testing.assert_allclose(t.mean(dim_arg, keepdim=keepdim).numpy(), x.mean(axis=axis, keepdims=keepdim))


@SETTINGS
@given(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=3), st.data())
def test_reshape_permute_roundtrip_gradients(shape, data):
    x = np.random.default_rng(1).standard_normal(shape)
    perm = data.draw(st.permutations(range(len(shape))))
    t = tj.tensor(x, requires_grad=True)
    y = t.permute(*perm).reshape(-1).flip(0)
    np.testing.assert_array_equal(y.detach().numpy(), np.transpose(x, perm).reshape(-1)[::-1])
    w = np.arange(y.shape[0], dtype=np.float64)
    (y * tj.tensor(w)).sum().backward()
    expect = np.transpose(w[::-1].reshape(np.transpose(x, perm).shape), np.argsort(perm))
    np.testing.assert_array_equal(t.grad.numpy(), expect)


@pytest.mark.parametrize("dtype", [tj.float32, tj.int64])
def test_cat_split_roundtrip(dtype):
    x = tj.arange(24).reshape(2, 3, 4).to(dtype)
    for dim in range(-3, 3):
        parts = x.split(2, dim)
        assert tj.cat(parts, dim).tolist() == x.tolist()
        parts = x.chunk(3, dim)
        assert tj.cat(parts, dim).tolist() == x.tolist()


def test_eager_float32_erf_is_vectorized_and_within_two_ulp():
    """float32 erf runs the kernels' approximation with numpy (no Python call per element)."""
    import math
    from tracejit.ops import _special
    calls = []
    orig = _special._erf_u
    _special._erf_u = lambda a: calls.append(1) or orig(a)
    try:
        x = np.concatenate([np.linspace(-6, 6, 200001), [0.0, -0.0, 1e-30, -1e-30, 3.9999, 4.0]]).astype(np.float32)
        got = tj.erf(tj.tensor(x)).numpy()
    finally:
        _special._erf_u = orig
    assert calls == []
    ref = np.array([math.erf(float(v)) for v in x])
    ulp = np.abs(got.astype(np.float64) - ref) / np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    assert ulp.max() <= 2.0
    special = tj.erf(tj.tensor(np.array([np.nan, np.inf, -np.inf, -0.0], np.float32))).numpy()
    assert np.isnan(special[0]) and special[1] == 1.0 and special[2] == -1.0
    assert special[3] == 0.0 and np.signbit(special[3])
