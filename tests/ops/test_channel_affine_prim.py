"""The per-channel affine primitive (ops/channel_affine_prim.py) and the normalizations
ending with it: values and the input, weight and bias gradients as PyTorch's, eager and
compiled, and second-order gradients through the backward's own VJP."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.ops.channel_affine_prim import channel_affine

torch = pytest.importorskip("torch")

SHAPES = [(3, 5, 7), (2, 6, 3, 5), (2, 4, 3, 2, 3), (1, 3, 1)]
TOLS = [(np.float32, 2e-5), (np.float64, 1e-11)]


def _inputs(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    c = shape[1]
    return ((rng.standard_normal(shape) * 2 + 0.5).astype(dtype),
            rng.standard_normal(c).astype(dtype),
            rng.standard_normal(c).astype(dtype), rng.standard_normal(shape).astype(dtype))


def _weight(lib, wt, bt, xt):
    """PyTorch's group_norm takes no bias without a weight (its backward raises): ones
    that get no gradient stand in for it there."""
    if lib is torch and wt is None and bt is not None:
        return torch.ones(xt.shape[1], dtype=xt.dtype)
    return wt


def _run(lib, f, arrays, g, compiled=False):
    ts = [lib.tensor(a, requires_grad=True) if a is not None else None for a in arrays]
    out = (tj.compile(f) if compiled else f)(*ts)
    out.backward(lib.tensor(g))
    return [out.detach().numpy()] + [t.grad.numpy() for t in ts if t is not None]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype,tol", TOLS)
@pytest.mark.parametrize("parts", ["wb", "w", "b"])
@pytest.mark.parametrize("compiled", [False, True])
def test_channel_affine_matches_broadcast_ops_of_pytorch(shape, dtype, tol, parts, compiled):
    x, w, b, g = _inputs(shape, dtype, sum(shape))
    w, b = (w if "w" in parts else None), (b if "b" in parts else None)
    view = (1, -1) + (1,) * (len(shape) - 2)

    def ref(xt, wt, bt):
        y = xt * wt.reshape(view) if wt is not None else xt
        return y + bt.reshape(view) if bt is not None else y

    def ours(xt, wt, bt):
        return channel_affine(xt, wt, bt)
    expected = _run(torch, ref, (x, w, b), g)
    got = _run(tj, ours, (x, w, b), g, compiled)
    assert len(got) == len(expected) == 1 + len(parts) + 1
    for a, e in zip(got, expected):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (np.float64, 1e-10)])
@pytest.mark.parametrize("parts", ["wb", "b"])
def test_channel_affine_second_order_gradients_match_pytorch(dtype, tol, parts):
    x, w, b, v = _inputs((3, 4, 5, 2), dtype, 7)
    view = (1, -1, 1, 1)
    got = []
    for lib in (torch, tj):
        xt, wt, bt = (lib.tensor(a, requires_grad=True) for a in (x, w, b))
        if lib is torch:
            y = (xt * wt.reshape(view) if "w" in parts else xt) + bt.reshape(view)
        else:
            y = channel_affine(xt, wt if "w" in parts else None, bt)
        # a function of the first gradients that depends on x, w and b
        y = y * y
        firsts = lib.autograd.grad((y * lib.tensor(v)).sum(), (xt, wt, bt), create_graph=True,
                                   allow_unused=True)
        total = sum((f * f).sum() for f in firsts if f is not None)
        second = lib.autograd.grad(total, (xt, wt, bt), allow_unused=True)
        got.append([t.numpy() for t in second if t is not None])
    assert len(got[1]) == len(got[0]) == (3 if "w" in parts else 2)
    for a, e in zip(got[1], got[0]):
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape,groups", [((3, 6, 5, 7), 3), ((2, 5, 9), 5), ((1, 9, 3, 2, 3), 3),
                                          ((5, 4, 1), 2)])
@pytest.mark.parametrize("dtype,tol", TOLS)
@pytest.mark.parametrize("parts", ["wb", "w", "b", ""])
def test_group_norm_affine_parts_match_pytorch(shape, groups, dtype, tol, parts):
    x, w, b, g = _inputs(shape, dtype, sum(shape) + groups)
    arrays = (x, w if "w" in parts else None, b if "b" in parts else None)
    def f(lib):
        return lambda xt, wt, bt: lib.nn.functional.group_norm(
            xt, groups, _weight(lib, wt, bt, xt), bt, eps=1e-3)
    res = [_run(lib, f(lib), arrays, g) for lib in (torch, tj)]
    assert len(res[1]) == len(res[0]) == 2 + len(parts)
    for a, e in zip(res[1], res[0]):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(3, 5, 7), (2, 6, 3, 5), (2, 3, 3, 2, 3)])
@pytest.mark.parametrize("dtype,tol", TOLS)
@pytest.mark.parametrize("parts", ["wb", "w", "b"])
def test_instance_norm_affine_parts_match_pytorch(shape, dtype, tol, parts):
    x, w, b, g = _inputs(shape, dtype, sum(shape) + 1)
    arrays = (x, w if "w" in parts else None, b if "b" in parts else None)
    res = [_run(lib, lambda xt, wt, bt: lib.nn.functional.instance_norm(xt, weight=wt, bias=bt),
                arrays, g) for lib in (torch, tj)]
    for a, e in zip(res[1], res[0]):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, e, rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("shape", [(3, 5, 7), (2, 6, 3, 5), (4, 3)])
@pytest.mark.parametrize("dtype,tol", TOLS)
@pytest.mark.parametrize("parts", ["wb", "w", "b", ""])
def test_batch_norm_inference_matches_pytorch(shape, dtype, tol, parts):
    x, w, b, g = _inputs(shape, dtype, sum(shape) + 2)
    rng = np.random.default_rng(5)
    rm = rng.standard_normal(shape[1]).astype(dtype)
    rv = rng.uniform(0.5, 2, shape[1]).astype(dtype)
    arrays = (x, w if "w" in parts else None, b if "b" in parts else None)
    res = [_run(lib, lambda xt, wt, bt: lib.nn.functional.batch_norm(
        xt, lib.tensor(rm), lib.tensor(rv), wt, bt, training=False), arrays, g)
        for lib in (torch, tj)]
    for a, e in zip(res[1], res[0]):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol)


def test_channel_affine_is_one_record_each_way():
    x = tj.tensor(np.ones((2, 3, 4), np.float32), requires_grad=True)
    w = tj.tensor(np.arange(3, dtype=np.float32), requires_grad=True)
    b = tj.tensor(np.ones(3, np.float32), requires_grad=True)
    y = channel_affine(x, w, b)
    assert y.grad_fn.name() == "ChannelAffineBackward0"
    y.backward(tj.tensor(np.full((2, 3, 4), 2.0, np.float32)))
    expected = np.broadcast_to(2.0 * np.arange(3).reshape(1, 3, 1), (2, 3, 4))
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    np.testing.assert_array_equal(w.grad.numpy(), [16.0, 16.0, 16.0])
    np.testing.assert_array_equal(b.grad.numpy(), [16.0, 16.0, 16.0])


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (np.float64, 1e-10)])
def test_instance_norm_running_statistics_and_second_order_match_pytorch(dtype, tol):
    x, w, b, v = _inputs((3, 4, 5, 6), dtype, 11)
    got = []
    for lib in (torch, tj):
        rm, rv = lib.tensor(np.zeros(4, dtype)), lib.tensor(np.ones(4, dtype))
        xt, wt, bt = (lib.tensor(a, requires_grad=True) for a in (x, w, b))
        y = lib.nn.functional.instance_norm(xt, rm, rv, wt, bt, use_input_stats=True, momentum=0.3)
        gx, gw = lib.autograd.grad((y * lib.tensor(v)).sum(), (xt, wt), create_graph=True)
        second = lib.autograd.grad((gx * gx).sum() + (gw * gw).sum(), (xt, wt))
        got.append([y.detach().numpy(), rm.numpy(), rv.numpy()] + [t.numpy() for t in second])
    for a, e in zip(got[1], got[0]):
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(3, 5, 7), (2, 6, 3, 5)])
@pytest.mark.parametrize("dtype,tol", TOLS)
@pytest.mark.parametrize("parts", ["wb", "w", ""])
def test_instance_norm_by_running_statistics_matches_pytorch(shape, dtype, tol, parts):
    x, w, b, g = _inputs(shape, dtype, sum(shape) + 3)
    rng = np.random.default_rng(6)
    rm = rng.standard_normal(shape[1]).astype(dtype)
    rv = rng.uniform(0.5, 2, shape[1]).astype(dtype)
    arrays = (x, w if "w" in parts else None, b if "b" in parts else None)
    res = [_run(lib, lambda xt, wt, bt: lib.nn.functional.instance_norm(
        xt, lib.tensor(rm), lib.tensor(rv), wt, bt, use_input_stats=False), arrays, g)
        for lib in (torch, tj)]
    assert len(res[1]) == len(res[0]) == 2 + len(parts)
    for a, e in zip(res[1], res[0]):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol)
