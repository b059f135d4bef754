"""ops/distinct_add.py: a gather's backward whose positions are distinct is one fancy add,
bitwise np.add.at's result; repeated or out-of-range positions are left to np.add.at."""
from __future__ import annotations

import numpy as np
import pytest

from tracejit.ops.distinct_add import add_distinct, distinct


@pytest.mark.parametrize("case", ["rows", "dim 1", "two arrays", "negative", "None first",
                                  "None last", "every dim", "every dim, int32", "mask"])
def test_distinct_positions_add_as_np_add_at(case):
    # a gather's backward (packed sequences, a batch permutation): one fancy add
    rng = np.random.default_rng(5)
    a = rng.standard_normal((7, 6, 5)).astype(np.float32)
    key = {"rows": (rng.permutation(7)[:5],),
           "dim 1": (slice(None), rng.permutation(6)),
           "two arrays": (np.array([0, 0, 3, 6]), np.array([1, 2, 2, 5])),
           "negative": (np.array([-1, 2, 0]),),
           # x[None, rows] and w[rows, cols, None] (a router's weights per expert): a None
           # indexes no dim of the target
           "None first": (None, rng.permutation(7)[:4]),
           "None last": (np.array([0, 4, 4]), np.array([1, 1, 3]), None),
           # an array per dim: one add into the flat view (negative and int32 positions too)
           "every dim": (np.array([0, -1, 3]), np.array([1, 2, 2]), np.array([4, 0, -5])),
           "every dim, int32": tuple(k.astype(np.int32) for k in np.nonzero(a > 0.5)),
           "mask": np.nonzero(a > 0)}[case]
    v = rng.standard_normal(a[key].shape).astype(np.float32)
    want = a.copy()
    np.add.at(want, key, v)
    assert add_distinct(a, key, v)
    assert np.array_equal(a, want)


def test_repeated_positions_are_left_to_the_rounds():
    a = np.zeros((4, 3), np.float32)
    assert not add_distinct(a, (np.array([1, 2, 1]),), np.ones((3, 3), np.float32))
    assert not add_distinct(a, (np.array([0, 0]), np.array([2, -1])), np.ones(2, np.float32))
    assert not add_distinct(a, (np.array([4]),), np.ones((1, 3), np.float32))     # out of range
    assert not a.any()


def test_distinct_positions_found_at_every_size():
    rng = np.random.default_rng(6)
    for n, high in ((10, 100), (500, 600), (500, 10 ** 6)):
        flat = rng.permutation(high)[:n]
        assert distinct(flat)
        flat[-1] = flat[0]
        assert not distinct(flat)
        run = np.sort(rng.permutation(high)[:n])       # increasing: a mask's positions
        assert distinct(run)
        run[n // 2] = run[n // 2 - 1]
        assert not distinct(run)


def test_a_gather_with_none_backpropagates_as_torch():
    torch = pytest.importorskip("torch")
    import tracejit as tj
    rng = np.random.default_rng(7)
    xv = rng.standard_normal((9, 4)).astype(np.float32)
    rows, cols = np.array([5, 0, 8, 2]), np.array([1, 3, 0, 1])
    for lib in (tj, torch):
        x = lib.tensor(xv, requires_grad=True)
        y = x[None, lib.tensor(rows)] * 2.0 + x[lib.tensor(rows), lib.tensor(cols), None]
        y.sum().backward()
        if lib is tj:
            got = x.grad.numpy()
    np.testing.assert_array_equal(got, x.grad.numpy())


@pytest.mark.parametrize("size", [1, 3, 16, 17, 100])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.int8])
def test_within_reads_a_few_and_many_alike(size, dtype):
    from tracejit.ops.distinct_add import within
    ok = (np.arange(size) % 5).astype(dtype)
    assert within(ok, 5) and not within(ok, 4 if size > 4 else int(ok.max()))
    if np.dtype(dtype).kind == "i":
        neg = ok.copy()
        neg[size // 2] = -1
        assert not within(neg, 5) and not within(neg.reshape(1, -1), 1000)


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_within_reads_an_expanded_index_once(dtype):
    from tracejit.ops.distinct_add import within
    rows = (np.arange(40) % 7).astype(dtype)
    for view in (np.broadcast_to(rows[:, None], (40, 64)), np.broadcast_to(rows[None, :, None], (3, 40, 5))):
        assert view.strides.count(0) and within(view, 7) and not within(view, 6)
    rows[11] = -2                      # a negative one in the broadcast base: out of range
    assert not within(np.broadcast_to(rows[:, None], (40, 64)), 7)
    assert not within(np.broadcast_to(rows[:, None], (40, 64)), 1 << 40)


def test_gather_by_an_expanded_index_raises_for_a_bad_row_as_torch():
    torch = pytest.importorskip("torch")
    import tracejit as tj
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    for bad in (4, -1):
        rows = np.array([0, 2, bad, 1])
        with pytest.raises(RuntimeError):
            torch.tensor(x).gather(0, torch.tensor(rows)[:, None].expand(-1, 3))
        with pytest.raises(RuntimeError, match=f"index {bad} is out of range"):
            tj.tensor(x).gather(0, tj.tensor(rows)[:, None].expand(-1, 3))
    good = np.array([3, 0, 0, 2])
    np.testing.assert_array_equal(
        tj.tensor(x).gather(0, tj.tensor(good)[:, None].expand(-1, 3)).numpy(),
        torch.tensor(x).gather(0, torch.tensor(good)[:, None].expand(-1, 3)).numpy())
