"""One kernel launch of an elementwise form over many tensors (compiler/cpu/kernels/foreach.py)."""
import threading

import numpy as np
import pytest

pytest.importorskip("numba", reason="the kernels are numba code")

from tracejit.compiler.cpu.kernels import foreach  # noqa: E402


@pytest.fixture(autouse=True)
def _sync(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")


def axpy_then_scale(x, y, a, b):
    """Two results from two columns and two scalars, both stored over an input."""
    y = y + a * x
    return x * b - y, y


def _case(rng, sizes, dtype=np.float32):
    xs = [rng.standard_normal(n).astype(dtype) for n in sizes]
    ys = [rng.standard_normal(n).astype(dtype) for n in sizes]
    return xs, ys


def _numpy(xs, ys, a, b):
    t = xs[0].dtype.type
    ys = [y + t(a) * x for x, y in zip(xs, ys)]
    return [x * t(b) - y for x, y in zip(xs, ys)], ys


def test_chunks_cover_every_element_once():
    sizes = (foreach.CHUNK * 2 + 5, 1, 0, foreach.CHUNK, 7)
    table = foreach.chunks(sizes)
    assert table.dtype == np.int64 and table.shape[1] == 3
    for t, n in enumerate(sizes):
        rows = table[table[:, 0] == t]
        if n == 0:
            assert len(rows) == 0
            continue
        assert rows[0, 1] == 0 and rows[-1, 2] == n
        assert (rows[1:, 1] == rows[:-1, 2]).all() and ((rows[:, 2] - rows[:, 1]) <= foreach.CHUNK).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_run_is_the_numpy_operations_bitwise_on_many_tensors(dtype):
    """Tensors of mixed sizes (empty, one element, more than a chunk, more than a call of
    the address filler) in one launch: each result is numpy's, in the tensors' dtype."""
    rng = np.random.default_rng(0)
    sizes = [0, 1, 7, foreach.CHUNK + 3] + [5] * 70
    xs, ys = _case(rng, sizes, dtype)
    want_x, want_y = _numpy(xs, ys, 0.1, 1.7)
    assert foreach.run(axpy_then_scale, ("axpy_then_scale",), [xs, ys], (0.1, 1.7), (0, 1))
    for got, want in zip(xs + ys, want_x + want_y):
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, want)


def _shares(xs, ys, shares: int, counter_start: int = 0, alone: bool = False):
    """The kernel's shares run by hand: `shares` Python threads at once claiming chunks from
    one counter (the kernel releases the GIL), or share 0 of them alone (`alone`)."""
    fn, args, _ = foreach.launch_args(axpy_then_scale, ("axpy_then_scale",), [xs, ys], (0.1, 1.7), (0, 1))
    args[3][0] = counter_start
    if alone:
        fn(*args, 0, shares)
        return
    threads = [threading.Thread(target=fn, args=args + (t, shares)) for t in range(shares)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def test_shares_give_the_same_bits_whatever_their_count():
    rng = np.random.default_rng(1)
    sizes = (foreach.CHUNK * 2 + 5, 7, foreach.CHUNK + 3)
    x0, y0 = _case(rng, sizes)
    want_x, want_y = _numpy(x0, y0, 0.1, 1.7)
    for shares in (1, 2, 3):
        xs, ys = [a.copy() for a in x0], [a.copy() for a in y0]
        _shares(xs, ys, shares)
        for got, want in zip(xs + ys, want_x + want_y):
            np.testing.assert_array_equal(got, want)


def test_shares_claim_their_chunks_from_the_counter():
    """A share updates the chunks it claims, not a fixed stripe: one share of two whose
    partner never started updates every chunk, and a counter others advanced past chunk 2
    leaves chunks 0 and 1 as they were."""
    rng = np.random.default_rng(2)
    sizes = (foreach.CHUNK * 2 + 5, 7, foreach.CHUNK + 3)
    x0, y0 = _case(rng, sizes)
    want_x, _ = _numpy(x0, y0, 0.1, 1.7)
    xs, ys = [a.copy() for a in x0], [a.copy() for a in y0]
    _shares(xs, ys, 2, alone=True)
    for got, want in zip(xs, want_x):
        np.testing.assert_array_equal(got, want)
    xs, ys = [a.copy() for a in x0], [a.copy() for a in y0]
    _shares(xs, ys, 1, counter_start=2)
    for c, (t, lo, hi) in enumerate(foreach.chunks(sizes)):
        np.testing.assert_array_equal(xs[t][lo:hi], (x0 if c < 2 else want_x)[t][lo:hi])


def test_a_form_that_is_not_one_flat_group_takes_the_array_path():
    def total(x):
        return (x.sum() * x,)
    xs = [np.ones(4, np.float32)]
    assert not foreach.run(total, ("total",), [xs], (), (0,))
    np.testing.assert_array_equal(xs[0], 1.0)


def scaled_twice(x, y, a):
    z = x * a
    return z, z


def test_one_value_is_stored_into_two_columns():
    """A form whose two results are one value (ASGD's average copying the parameter)."""
    rng = np.random.default_rng(2)
    xs, ys = _case(rng, [3, 9])
    want = [x * np.float32(0.5) for x in xs]
    assert foreach.run(scaled_twice, ("scaled_twice",), [xs, ys], (0.5,), (0, 1))
    for x, y, w in zip(xs, ys, want):
        np.testing.assert_array_equal(x, w)
        np.testing.assert_array_equal(y, w)
