"""``len()`` of a traced tensor is its symbolic first dim; the ``builtins.len`` swap that
gives it is invisible everywhere else (values, exceptions, other threads, imports)."""
from __future__ import annotations

import builtins
import importlib
import sys
import threading

import numpy as np
import pytest

import tracejit as tj
from tracejit.jit import symbolic_len as _sl
from tracejit.shapes import Sym

_REAL_LEN = _sl._real_len
_SIZES = (4, 6, 8, 10, 12, 14, 16, 18)


def _sweep(fn, cols=3, compiler="interpret"):
    """Compiled and eager results of `fn` over eight leading sizes; the compile count."""
    cf = tj.compile(fn, backend=compiler)
    for n in _SIZES:
        x = tj.randn(n, cols)
        got, want = cf(x), fn(x)
        got, want = (got, want) if isinstance(got, (tuple, list)) else ((got,), (want,))
        assert len(got) == len(want), n
        for g, w in zip(got, want):
            assert g.shape == w.shape, n
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, err_msg=f"size {n}")
    return cf.cache_stats()


@pytest.mark.parametrize("fn", [
    lambda x: x.split(len(x) // 2),
    lambda x: x[:len(x) - 1] * 2,
    lambda x: x.view(len(x), -1) + 1,
    lambda x: x + tj.arange(len(x)).reshape(-1, 1),
    lambda x: x.sum(1) + x.new_zeros(len(x)),
    lambda x: x.reshape(len(x) // 2, 2, -1),
    lambda x: x.reshape(x.size(0) // 2, 2, -1),
    lambda x: x * (len(x) / (len(x) - 1)),
], ids=["split", "slice", "view", "arange", "new_zeros", "reshape_len", "reshape_size", "ratio"])
def test_len_idioms_capture_twice_over_eight_sizes(fn):
    st = _sweep(fn)
    assert st["compiles"] == 2 and st["dynamic_dims"] == [("x", 0)], st["recompile_reasons"]


def test_len_idioms_on_the_numba_backend():
    st = _sweep(lambda x: x[:len(x) - 1].reshape(len(x) - 1, -1) + tj.arange(len(x) - 1).reshape(-1, 1),
                compiler="numba")
    assert st["compiles"] == 2, st["recompile_reasons"]


def test_len_gives_the_same_value_as_shape_zero_in_user_code():
    seen = []

    def f(x):
        n = len(x)
        seen.append((n, x.shape[0], len(x.shape), len([x, x]), len(x[0])))
        return x * 2

    cf = tj.trace(f, compiler="interpret")
    for n in (4, 6, 8):
        cf(tj.randn(n, 3))
    static, symbolic = seen[0], seen[-1]
    assert static == (4, 4, 2, 2, 3) and all(type(v) is int for v in static)
    assert isinstance(symbolic[0], Sym) and len(seen) == 2   # (8 ran the second entry)
    assert symbolic[0].terms == symbolic[1].terms and symbolic[0].hint == 6 and symbolic[2:] == (2, 2, 3)
    assert cf.cache_stats()["compiles"] == 2


def test_len_a_size_needs_as_an_int_keeps_the_dim_static():
    def f(x):
        return x * sum(range(len(x)))    # (range asks for the value)

    cf = tj.compile(f, backend="interpret")
    for n in (4, 6, 8):
        x = tj.randn(n, 2)
        np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-6)
    assert cf.cache_stats()["compiles"] == 3


def test_len_of_a_zero_dim_tracer_raises_as_eagerly():
    def f(x):
        try:
            len(x.sum())
        except TypeError as e:
            return x * 0 + float(str(e) == "len() of a 0-d tensor")
        return x

    cf = tj.trace(f, compiler="interpret")
    for n in (4, 6):
        assert cf(tj.ones(n)).numpy().tolist() == [1.0] * n


def _len_errors():
    out = []
    for args, kwargs in (((5,), {}), ((), {}), (([1], [2]), {}), ((), {"obj": [1]}), ((None,), {})):
        try:
            out.append(("value", len(*args, **kwargs)))
        except TypeError as e:
            out.append((type(e), str(e)))
    return out


def test_len_inside_a_capture_is_the_real_one_for_anything_but_a_tracer():
    want = _len_errors()
    assert want[0] == (TypeError, "object of type 'int' has no len()")
    got = []

    def f(x):
        got.append((builtins.len is not _REAL_LEN, _len_errors(), len("abc"), len({1: 2}), len(range(7)),
                    len(np.zeros((5, 2)))))
        return x + 1

    tj.trace(f, compiler="interpret")(tj.ones(3))
    assert got == [(True, want, 3, 1, 7, 5)]   # (the wrapper was in place)
    assert builtins.len is _REAL_LEN


def test_a_module_imported_during_a_capture_sees_a_transparent_len(tmp_path, monkeypatch):
    (tmp_path / "h2_lazy_mod.py").write_text(
        "N = len([1, 2, 3])\n"
        "try:\n    len(5)\nexcept TypeError as e:\n    MSG = str(e)\n"
        "SIZES = [len(t) for t in ('ab', (1,), {})]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "h2_lazy_mod", raising=False)

    def f(x):
        mod = importlib.import_module("h2_lazy_mod")
        return x * mod.N

    cf = tj.compile(f, backend="interpret")
    assert cf(tj.ones(2)).numpy().tolist() == [3.0, 3.0]
    mod = sys.modules["h2_lazy_mod"]
    assert (mod.N, mod.MSG, mod.SIZES) == (3, "object of type 'int' has no len()", [2, 1, 0])


def test_len_is_restored_after_a_capture_that_raises():
    def f(x):
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        tj.trace(f, compiler="interpret")(tj.ones(2))
    assert builtins.len is _REAL_LEN and _sl._users[0] == 0


def test_another_thread_gets_the_real_len_while_a_capture_runs():
    """A thread with no capture of its own gets an int, even for a tracer it is handed."""
    other: list = []

    def worker(x):
        other.append((len(x), len([1, 2]), builtins.len is not _REAL_LEN))

    def f(x):
        t = threading.Thread(target=worker, args=(x,))
        t.start()
        t.join(30)
        return x * len(x)

    cf = tj.compile(f, backend="interpret")
    for n in (4, 6, 8):
        np.testing.assert_allclose(cf(tj.ones(n, 2)).numpy(), np.full((n, 2), float(n)))
    assert cf.cache_stats()["compiles"] == 2, cf.cache_stats()["recompile_reasons"]
    assert other == [(4, 2, True), (6, 2, True)] and all(type(o[0]) is int for o in other)
    assert builtins.len is _REAL_LEN


def test_nested_and_concurrent_captures_restore_len_once_all_end():
    inner = tj.compile(lambda y: y + len(y), backend="interpret")
    barrier = threading.Barrier(2, timeout=30)
    errors: list = []

    peak: list = []

    def outer(x):
        barrier.wait()
        peak.append(_sl._users[0])   # (both threads are capturing)
        barrier.wait()
        return inner(x * 2) + len(x)

    def run(n):
        try:
            cf = tj.trace(outer, compiler="interpret")
            x = tj.ones(n, 2)
            np.testing.assert_allclose(cf(x).numpy(), np.full((n, 2), 2.0 + 2 * n))
        except Exception as e:   # (reported below: an assert in a thread is lost)
            errors.append(e)

    threads = [threading.Thread(target=run, args=(n,)) for n in (3, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert peak == [2, 2] and builtins.len is _REAL_LEN and _sl._users[0] == 0


def test_len_is_not_replaced_over_another_patch(monkeypatch):
    def patched(obj):
        return _REAL_LEN(obj)

    monkeypatch.setattr(builtins, "len", patched)
    cf = tj.compile(lambda x: x * 2, backend="interpret")
    cf(tj.ones(2))
    assert builtins.len is patched
