"""Differential fuzzing of indexing against PyTorch: random index tuples mixing ints,
slices with steps, None, Ellipsis, integer tensors (0-d ones among them) that broadcast
against each other, lists and boolean masks, read (``x[idx]``), written (``y[idx] = v``
with a scalar or a broadcasting tensor) and accumulated (``index_put_(accumulate=True)``),
eagerly and through ``tj.compile``: values, and the gradients of the float inputs."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

SHAPES = [(4, 5, 3), (3, 4), (5,), (2, 3, 4, 2), (0, 3)]


def _index(r, shape):
    """A random index as descriptors (so both libraries get the same one)."""
    items, d = [], 0
    adv = tuple(int(s) for s in r.choice([1, 2, 3], int(r.integers(0, 3))))
    ellipsis = False
    while d < len(shape) and r.random() < 0.85:
        k, n = int(r.integers(9)), shape[d]
        if k == 0 and n:
            items.append(("i", int(r.integers(-n, n))))
        elif k == 1:
            items.append(("s", *(int(r.integers(-n - 1, n + 2)) if r.random() < 0.6 else None for _ in range(2)),
                          int(r.integers(1, 4)) if r.random() < 0.6 else None))
        elif k == 2:
            items.append(("n",))
            continue
        elif k == 3 and not ellipsis:
            items.append(("e",))
            ellipsis = True
            continue
        elif k in (4, 5) and n:
            items.append(("t", r.integers(-n, n, adv if r.random() < 0.7 else (() if r.random() < 0.5 else (2,)))))
        elif k == 6:
            m = int(r.integers(1, min(2, len(shape) - d) + 1))
            items.append(("m", r.random(shape[d:d + m]) > 0.5))
            d += m - 1
        elif k == 7 and n:
            items.append(("l", [int(v) for v in r.integers(-n, n, int(r.integers(1, 4)))]))
        elif k == 8:
            items.append(("b", bool(r.integers(2)), bool(r.integers(2))))   # (a new dim)
            continue
        else:
            continue
        d += 1
    return items


def _build(lib, items):
    out = []
    for it in items:
        k = it[0]
        if k == "b":   # (a Python bool or a 0-d bool tensor; numpy: a new dim, as True / False)
            out.append(it[1] if lib is np or it[2] else lib.tensor(it[1]))
            continue
        out.append(it[1] if k == "i" else slice(*it[1:]) if k == "s" else None if k == "n" else
                   Ellipsis if k == "e" else list(it[1]) if k == "l" else it[1] if lib is np else lib.tensor(it[1]))
    return tuple(out)


def _distinct(shape, items) -> bool:
    """Whether the index reaches each element at most once (numpy: same positions)."""
    pos = np.arange(int(np.prod(shape))).reshape(shape)
    try:
        sel = pos[_build(np, items)]
    except IndexError:
        return True   # (both libraries raise)
    return np.unique(sel).size == sel.size


def _case(r):
    shape = SHAPES[int(r.integers(len(SHAPES)))]
    items = _index(r, shape)
    kind = ["get", "set", "accumulate"][int(r.integers(3))]
    dt = ["float32", "float64", "int64"][int(r.integers(3))]
    x = r.standard_normal(shape).astype(dt) if dt != "int64" else r.integers(-9, 9, shape)
    pos = np.arange(max(int(np.prod(shape)), 1))[: int(np.prod(shape))].reshape(shape)
    try:
        region = pos[_build(np, items)].shape
    except IndexError:
        region = ()
    vshape = region[int(r.integers(0, len(region) + 1)):] if r.random() < 0.7 else ()
    v = r.standard_normal(vshape).astype(x.dtype) if dt != "int64" else r.integers(-9, 9, vshape)
    scalar = r.random() < 0.3
    if kind == "set" and not _distinct(shape, items):
        kind = "accumulate"   # (which repeated write wins is unspecified, as in PyTorch)
    if kind == "accumulate" and any(it[0] == "m" for it in items):
        kind = "get"

    def fn(lib, x, v):
        y = x * 1
        if kind == "get":
            return y[_build(lib, items)] * 2
        if kind == "set":
            y[_build(lib, items)] = 3 if scalar else v
            return y
        # index_put_ takes index tensors only: ints and lists as tensors, slices as aranges
        idx = [lib.tensor(np.asarray(it[1])) for it in items if it[0] in "ilt"]
        return y.index_put_(tuple(idx), v, accumulate=True) if len(idx) == sum(it[0] in "ilt" for it in items) \
            and len(idx) and all(it[0] in "ilt" for it in items) else y
    return fn, [x, v], dict(shape=shape, items=items, kind=kind, scalar=scalar, vshape=vshape)


def _run(lib, fn, arrays, compiled):
    xs = [lib.tensor(a).requires_grad_(a.dtype.kind == "f") for a in arrays]
    f = tj.compile(lambda *a: fn(tj, *a)) if compiled else (lambda *a: fn(lib, *a))
    out = f(*xs)
    if out.requires_grad:
        (out * (lib.arange(out.numel(), dtype=out.dtype).reshape(out.shape) % 3 - 1)).sum().backward()
    return [out] + [x.grad for x in xs]


def _check(seed, compiled):
    r = np.random.default_rng(seed)
    fn, arrays, info = _case(r)
    try:
        want = _run(torch, fn, arrays, False)
    except (IndexError, RuntimeError):
        with pytest.raises((IndexError, RuntimeError)):
            _run(tj, fn, arrays, compiled)
        return
    got = _run(tj, fn, arrays, compiled)
    for k, (g, w) in enumerate(zip(got, want)):
        assert (g is None) == (w is None), (seed, info, k)
        if w is not None:
            assert tuple(g.shape) == tuple(w.shape), (seed, info, k, g.shape, w.shape)
            np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=1e-5, atol=1e-5,
                                       err_msg=f"seed {seed} {info} compiled={compiled} result {k}")


@pytest.mark.filterwarnings("ignore:tracejit.compile")
@pytest.mark.parametrize("compiled", [False, True])
def test_random_indices_match_torch(compiled):
    for seed in range(300 if not compiled else 80):
        _check(seed, compiled)


@pytest.mark.parametrize("compiled", [False, True])
def test_zero_dim_index_tensor_selects_as_an_int(compiled):
    # PyTorch takes a 0-d integer tensor as an int: it selects first, so the list that
    # follows the slice stays in place ((1, 3), where numpy's reading gives (3, 1))
    def fn(lib, x, i):
        y = x * 1
        y[i, :, [0, 2]] = lib.tensor([7.0, 8.0], dtype=x.dtype)
        return x[i, 2:-2:3, [1, 0, -1]], y
    a = np.arange(60.0).reshape(4, 5, 3)
    want = fn(torch, torch.tensor(a), torch.tensor(-3))
    f = tj.compile(lambda x, i: fn(tj, x, i)) if compiled else (lambda x, i: fn(tj, x, i))
    got = f(tj.tensor(a), tj.tensor(-3))
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape)
        np.testing.assert_array_equal(g.numpy(), w.numpy())


def test_accumulate_broadcasts_a_value_of_fewer_dims():
    # a (3,) value over a (3, 3) index into a 1-d tensor: every repeat counted
    i = np.array([[-3, -3, -2], [2, 1, -2], [3, -1, -5]])
    v = np.array([1.0, 10.0, 100.0], dtype=np.float32)
    want = torch.zeros(5).index_put_((torch.tensor(i),), torch.tensor(v), accumulate=True)
    got = tj.zeros(5).index_put_((tj.tensor(i),), tj.tensor(v), accumulate=True)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_two_masks_in_one_index_compile():
    # two data-dependent counts broadcast together: checked on the call's values
    def fn(x, m1, m2):
        return x[m1, 0, m2] * 2
    x = np.arange(60.0).reshape(4, 5, 3)
    m1, m2 = np.array([0, 1, 1, 0], bool), np.array([1, 0, 1], bool)
    want = fn(torch.tensor(x), torch.tensor(m1), torch.tensor(m2))
    with pytest.warns(RuntimeWarning, match="depends on the data"):
        got = tj.compile(fn)(tj.tensor(x), tj.tensor(m1), tj.tensor(m2))
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_uint8_index_is_a_mask():
    x = np.arange(20.0).reshape(4, 5)
    m = np.array([1, 0, 1, 0], np.uint8)
    want = torch.tensor(x)[torch.tensor(m)]
    with pytest.warns(UserWarning, match="uint8"):
        got = tj.tensor(x)[tj.tensor(m)]
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("key", [lambda lib: [[0, 1], [2, 3]], lambda lib: [lib.tensor([0, 1]), 2],
                                 lambda lib: (True, 1), lambda lib: (lib.tensor(True), slice(1, 3)),
                                 lambda lib: (1, Ellipsis, False), lambda lib: (None, lib.tensor(True), [0, 2])])
def test_lists_of_sequences_and_bools_index_as_torch(key):
    x = np.arange(20.0).reshape(4, 5)
    want = torch.tensor(x)[key(torch)]
    got = tj.tensor(x)[key(tj)]
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    y, yt = tj.tensor(x), torch.tensor(x)
    y[key(tj)], yt[key(torch)] = -1.0, -1.0
    np.testing.assert_array_equal(y.numpy(), yt.numpy())


def test_mask_of_the_wrong_shape_raises():
    with pytest.raises(IndexError, match="shape of the mask"):
        tj.zeros(4, 5)[tj.tensor([True, False])]
    with pytest.raises(IndexError, match="shape of the mask"):
        tj.zeros(4, 5)[:, tj.tensor([True, False, True, True])] = 1.0
