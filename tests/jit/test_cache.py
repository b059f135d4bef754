"""Guards and the per-signature cache: what recompiles and why, automatic dynamic dims,
the recompile limit, failed captures, argument errors, devices."""
from __future__ import annotations

import inspect
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tracejit as tj
from tracejit.errors import DeviceMismatchError
from tracejit.jit.guards import LeafDesc, build_guard, describe_difference
from tracejit.tensor import Tensor


def double(x):
    return x * 2


def compiled(fn=double, **kw):
    kw.setdefault("compiler", "interpret")
    return tj.trace(fn, **kw)


def fake_cuda(shape=(3,)):
    """A tensor that claims to live on cuda:0 (its data is numpy; fine for guards and
    for tracing, which never touch the data)."""
    return Tensor._wrap(np.ones(shape, np.float32), tj.float32, tj.device("cuda"))


# --------------------------------------------------------------------------- each guard
@pytest.mark.parametrize("second,reason", [
    (lambda: tj.ones(3, dtype=tj.float64), "input 'x': dtype guard failed: float32 -> float64"),
    (lambda: tj.ones(3, 1), "input 'x': rank guard failed: 1 -> 2"),
    (lambda: tj.ones(3, requires_grad=True), "input 'x': requires_grad guard failed: False -> True"),
    (lambda: tj.ones(1), "input 'x': size guard failed: dim 0 was 3, now 1"),
])
def test_each_tensor_guard_recompiles_with_a_reason(second, reason):
    cf = compiled()
    cf(tj.ones(3))
    cf(tj.ones(3))
    out = cf(second())
    assert out.tolist() == [2.0] * out.numel() or out.shape == (3, 1)
    st = cf.cache_stats()
    assert (st["compiles"], st["hits"]) == (2, 1)
    assert st["recompile_reasons"] == [reason]


def test_grad_mode_is_guarded():
    cf = compiled()
    x = tj.ones(2, requires_grad=True)
    assert cf(x).requires_grad
    with tj.no_grad():
        assert not cf(x).requires_grad
    st = cf.cache_stats()
    assert st["compiles"] == 2
    assert st["recompile_reasons"] == ["grad mode changed: True -> False"]
    assert cf(x).requires_grad and cf.cache_stats()["compiles"] == 2  # back to the first entry


def test_device_is_guarded():
    descs = [LeafDesc("tensor", "x", tj.float32, tj.device("cpu"), False, (3,))]
    guard, src = build_guard(descs, [], True)
    assert guard([tj.ones(3)], [], True)
    assert not guard([fake_cuda()], [], True)
    assert "t.device is not V0" in src
    new = [LeafDesc("tensor", "x", tj.float32, tj.device("cuda"), False, (3,))]
    assert describe_difference(descs, new, True, True) == ["input 'x': device guard failed: cpu -> cuda:0"]


def test_tensors_on_different_devices_are_a_clear_error():
    def add(x, y):
        return x + y

    cf = compiled(add)
    with pytest.raises(DeviceMismatchError) as ei:
        cf(tj.ones(3), fake_cuda())
    msg = str(ei.value)
    assert "cpu and cuda:0" in msg
    assert f"{__file__}:{inspect.getsourcelines(add)[1] + 1}" in msg
    assert cf.cache_stats()["entries"] == 0


def test_reasons_come_from_the_closest_entry():
    cf = compiled()
    cf(tj.ones(3))
    cf(tj.ones(3, dtype=tj.float64))
    cf(tj.ones(3, 3, dtype=tj.float64))
    # closest entry is the float64 one: only the rank differs from it
    assert cf.cache_stats()["recompile_reasons"][-1] == "input 'x': rank guard failed: 1 -> 2"


def test_guard_source_is_readable_and_registered():
    import linecache

    cf = compiled()
    cf(tj.ones(2, 3))
    (e,) = cf.entries
    assert "or t._data.shape != (2, 3):" in e.guard_src   # one check a static-shaped tensor
    assert e.guard((tj.ones(2, 3),), e.const_tensors, True) is True   # (compiled at this call)
    fname = e.guard.__code__.co_filename
    assert linecache.getline(fname, 1).startswith("def guard(")


def test_a_capture_compiles_its_guard_at_the_guards_first_call(monkeypatch):
    # The capture's own call and the hot path (the entry's hit function) never call the
    # plain guard: its compile is left to its first call (a call off the hot path).
    import builtins
    sources = []
    real = builtins.compile

    def counting(src, filename, *a, **k):
        if str(filename).startswith("<tracejit-guard-"):
            sources.append(src.splitlines()[0])
        return real(src, filename, *a, **k)
    monkeypatch.setattr(builtins, "compile", counting)

    cf = compiled()
    assert cf(tj.ones(3)).tolist() == [2.0] * 3        # the capture: no guard compiled
    assert sources == []
    assert cf(tj.ones(3)).tolist() == [2.0] * 3        # the hot path: the hit function only
    assert sources == ["def hit(L, gm):"]
    assert cf(x=tj.ones(3)).tolist() == [2.0] * 3      # a keyword: the slow path, the same hit
    assert cf(x=tj.ones(3)).tolist() == [2.0] * 3
    assert sources == ["def hit(L, gm):"]
    assert cf(x=tj.ones(3, dtype=tj.float64)).dtype == tj.float64   # a miss: checked by the guard
    assert sources == ["def hit(L, gm):", "def guard(L, C, gm):"]   # (the new capture's: not yet)
    st = cf.cache_stats()
    assert (st["compiles"], st["hits"]) == (2, 3)
    assert st["recompile_reasons"] == ["input 'x': dtype guard failed: float32 -> float64"]


# --------------------------------------------------------------------------- dynamic dims
class _MLP:
    def __init__(self):
        rng = np.random.default_rng(0)
        self.w1 = tj.tensor(rng.standard_normal((8, 16)).astype(np.float32) * 0.3, requires_grad=True)
        self.b1 = tj.tensor(np.zeros(16, np.float32), requires_grad=True)
        self.w2 = tj.tensor(rng.standard_normal((16, 4)).astype(np.float32) * 0.3, requires_grad=True)

    def loss(self, x, y):
        h = (x @ self.w1 + self.b1).relu()
        out = h @ self.w2
        return ((out - y) ** 2).mean(), out.softmax(-1)


def _batch_sweep(compiler):
    m = _MLP()
    cf = tj.trace(m.loss, compiler=compiler)
    rng = np.random.default_rng(1)
    for b in range(1, 65):
        x = tj.tensor(rng.standard_normal((b, 8)).astype(np.float32))
        y = tj.tensor(rng.standard_normal((b, 4)).astype(np.float32))
        loss, p = cf(x, y)
        le, pe = m.loss(x, y)
        np.testing.assert_allclose(loss.item(), le.item(), rtol=1e-5, err_msg=f"batch {b}")
        np.testing.assert_allclose(p.detach().numpy(), pe.detach().numpy(), rtol=1e-5, atol=1e-6)
    return cf


def test_batch_size_sweep_compiles_at_most_three_times(compiler):
    cf = _batch_sweep(compiler)
    st = cf.cache_stats()
    assert st["compiles"] <= 3
    assert st["hits"] == 64 - st["compiles"]
    assert ("x", 0) in st["dynamic_dims"] and ("y", 0) in st["dynamic_dims"]
    assert "s0" in cf.entries[-1].graph.text(False)


def test_sizes_zero_and_one_stay_special():
    cf = compiled()
    for n in (2, 3, 4, 5):
        cf(tj.ones(n, 2))
    assert cf.cache_stats()["compiles"] == 2  # static 2, then symbolic s0 >= 2
    assert cf(tj.ones(1, 2)).shape == (1, 2)
    assert cf(tj.ones(0, 2)).shape == (0, 2)
    st = cf.cache_stats()
    assert st["compiles"] == 4
    assert st["recompile_reasons"][-2:] == ["input 'x': dim 0 (s0) is symbolic for sizes >= 2, now 1",
                                            "input 'x': size guard failed: dim 0 was 1, now 0"]
    for n, e in zip((1, 0), cf.entries[2:]):
        assert e.descs[0].shape == (n, 2)  # exact, never symbolic
    assert cf(tj.ones(7, 2)).shape == (7, 2) and cf.cache_stats()["compiles"] == 4


def test_equal_sizes_share_a_symbol_and_the_guard_checks_it():
    def f(x, y):
        return x + y

    cf = compiled(f)
    cf(tj.ones(2), tj.ones(2))
    cf(tj.ones(3), tj.ones(3))
    assert cf.entries[-1].graph.text(False).startswith("f(%x: f32[s0], %y: f32[s0])")
    cf(tj.ones(5), tj.ones(5))
    assert cf.cache_stats()["compiles"] == 2
    with pytest.raises(tj.errors.ShapeError, match="cannot be broadcast"):
        cf(tj.ones(5), tj.ones(6))  # not the same size: not the symbolic entry; the usual error


def test_a_comparison_of_a_dim_is_guarded_on_its_answer():
    def f(x):
        if x.shape[0] > 4:  # one entry for each answer, the dim symbolic in both
            return x * 2
        return x

    cf = compiled(f)
    assert [cf(tj.ones(n))[0].item() for n in (2, 3, 5, 6, 4, 9)] == [1.0, 1.0, 2.0, 2.0, 1.0, 2.0]
    st = cf.cache_stats()
    assert st["compiles"] == 3 and st["dynamic_dims"] == [("x", 0)]
    assert any("took a symbolic size for" in r for r in st["recompile_reasons"])


def test_dims_used_as_python_values_stay_static():
    def f(x):
        return x * len(range(x.shape[0]))   # needs the concrete size

    cf = compiled(f)
    assert [cf(tj.ones(n))[0].item() for n in (2, 3, 5, 6)] == [2.0, 3.0, 5.0, 6.0]
    st = cf.cache_stats()
    assert st["compiles"] == 4 and st["dynamic_dims"] == []
    assert all(isinstance(d, int) for e in cf.entries for d in e.descs[0].shape)
    line = f.__code__.co_firstlineno + 1   # (the reason names the line that needed the size)
    assert st["recompile_reasons"][-1] == ("input 'x': size guard failed: dim 0 was 5, now 6 (kept "
                                           f"static: its value was needed at {__file__}:{line})")


def test_dynamic_false_and_true():
    static = compiled(dynamic=False)
    for n in (2, 3, 4):
        static(tj.ones(n))
    assert static.cache_stats()["compiles"] == 3
    dyn = compiled(dynamic=True)
    for n in (2, 3, 4):
        dyn(tj.ones(n, 5))
    assert dyn.cache_stats()["compiles"] == 1
    assert dyn.entries[0].descs[0].shape == ("s0", "s1")


def test_dynamic_true_falls_back_to_static_shapes_when_symbols_cannot_express_the_code():
    def f(x, w):
        return x.reshape(x.shape[0], -1) @ w  # needs s1*s2 == s3: not provable symbolically

    cf = compiled(f, dynamic=True)
    out = cf(tj.ones(3, 2, 4), tj.ones(8, 3))
    assert out.shape == (3, 3) and out[0, 0].item() == 8.0


def test_reshape_with_minus_one_keeps_the_batch_dim_dynamic():
    def f(x):
        return x.reshape(x.shape[0], -1).sum(1)

    cf = compiled(f)
    for n in (2, 3, 4, 9):
        assert cf(tj.ones(n, 2, 3)).tolist() == [6.0] * n
    assert cf.cache_stats()["compiles"] == 2


# --------------------------------------------------------------------------- recompile limit
def test_recompile_limit_falls_back_to_eager_with_one_warning():
    calls = []

    def f(x, n):   # (a string argument is specialized by value, whatever it holds)
        calls.append(int(n))
        return x * int(n)

    cf = compiled(f, recompile_limit=3)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in range(8):
            assert cf(tj.ones(2), str(n)).tolist() == [float(n)] * 2
        assert cf(tj.ones(2), "1").tolist() == [1.0, 1.0]  # an existing entry is still used
    msgs = [x for x in w if issubclass(x.category, RuntimeWarning)]
    assert len(msgs) == 1
    text = str(msgs[0].message)
    assert "recompile limit (3)" in text and "Last reason: input 'n': value guard failed: '2' -> '3'" in text
    assert f"f ({__file__}:{f.__code__.co_firstlineno})" in text and "TRACEJIT_LOG=recompiles" in text
    assert msgs[0].filename == __file__   # the user's calling line, not tracejit's
    st = cf.cache_stats()
    assert st["compiles"] == 3 and st["eager_fallbacks"] == 1 and st["hits"] == 1
    # 4 captures tried (the 4th met the limit), then 4 calls run eagerly without trying
    assert st["misses"] == 4 and st["eager_calls"] == 4
    assert calls == [0, 1, 2, 3, 4, 5, 6, 7]  # 3 traces + 5 eager runs; the hit ran no Python


def test_recompile_limit_warning_is_printed_once(capfd):
    code = ("import warnings, tracejit as tj\n"
            "f = tj.trace(lambda x, n: x * n, recompile_limit=1, compiler='interpret')\n"
            "for n in range(3):\n"
            "    f(tj.ones(2), n)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if k != "TRACEJIT_LOG"})
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("hit the recompile limit") == 1, out.stderr
    assert "<string>:4: RuntimeWarning" in out.stderr      # attributed to the calling line


# --------------------------------------------------------------------------- failed captures
def test_failed_capture_caches_nothing():
    def f(x, y):
        return x @ y

    cf = compiled(f)
    good = cf(tj.ones(2, 3), tj.ones(3, 2))
    before = cf.cache_stats()
    with pytest.raises(Exception, match="cannot be multiplied"):
        cf(tj.ones(2, 3), tj.ones(2, 3))
    after = cf.cache_stats()
    assert (after["entries"], after["compiles"], after["recompile_reasons"]) == \
        (before["entries"], before["compiles"], before["recompile_reasons"])
    assert after["dynamic_dims"] == before["dynamic_dims"]
    assert cf(tj.ones(2, 3), tj.ones(3, 2)).tolist() == good.tolist()
    assert cf.cache_stats()["hits"] == 1


def test_failed_first_capture_then_fixed_input_works():
    def f(x):
        if x.sum() > 0:  # trace can't capture this ...
            return x
        return x

    cf = compiled(f)
    with pytest.raises(tj.errors.TraceError):
        cf(tj.ones(2))
    assert cf.cache_stats()["entries"] == 0
    with pytest.raises(tj.errors.TraceError):  # ... and nothing half-made was kept
        cf(tj.ones(2))


# --------------------------------------------------------------------------- argument errors
def f3(x, y, scale=2.0, *, shift=0):
    return x * scale + y + shift


@pytest.mark.parametrize("args,kwargs", [
    ((), {}),
    ((1,), {}),
    ((1, 2, 3, 4), {}),
    ((1, 2), {"z": 1}),
    ((1, 2), {"x": 1}),
    ((1,), {"shift": 1}),
    ((1, 2, 3, 4, 5), {"shift": 1}),
])
def test_wrong_arguments_raise_the_python_type_error(args, kwargs):
    with pytest.raises(TypeError) as plain:
        f3(*args, **kwargs)
    for cf in (compiled(f3), tj.script(f3, compiler="interpret")):
        with pytest.raises(TypeError) as ours:
            cf(*args, **kwargs)
        assert str(ours.value) == str(plain.value)


def test_wrong_arguments_of_a_method():
    class A:
        @tj.trace(compiler="interpret")
        def m(self, x):
            return x * 2

        def p(self, x):
            return x

    with pytest.raises(TypeError) as plain:
        A().p()
    with pytest.raises(TypeError) as ours:
        A().m()
    assert str(ours.value) == str(plain.value).replace("A.p()", "A.m()")
    assert A().m(tj.ones(1)).tolist() == [2.0]


def test_captured_tensor_changes_are_guarded():
    w = tj.ones(3)

    def f(x):
        return x * w

    cf = compiled(f)
    cf(tj.ones(3))
    w.data = tj.ones(3, dtype=tj.float64)
    assert cf(tj.ones(3)).dtype is tj.float64
    st = cf.cache_stats()
    assert st["compiles"] == 2
    assert st["recompile_reasons"] == ["input '<captured Tensor (3,)>': dtype guard failed: float32 -> float64"]


def test_nan_constant_is_a_cache_hit():
    def f(x, v):
        return x * v

    cf = compiled(f)
    cf(tj.ones(1), float("nan"))
    assert np.isnan(cf(tj.ones(1), float("nan")).item())
    assert cf.cache_stats()["hits"] == 1


def test_array_arguments_are_guarded_by_identity():
    def f(x, a):
        return x * float(a.sum())

    cf = compiled(f)
    a = np.ones(2)
    assert cf(tj.ones(2), a).tolist() == [2.0, 2.0]
    assert cf(tj.ones(2), a).tolist() == [2.0, 2.0]  # no elementwise == in the guard
    assert cf(tj.ones(2), np.full(2, 3.0)).tolist() == [6.0, 6.0]
    st = cf.cache_stats()
    assert (st["compiles"], st["hits"]) == (2, 1)
    assert st["recompile_reasons"][0].startswith("input 'a': identity guard failed: array([1., 1.])")
    assert "pass tensors" in st["recompile_reasons"][0]   # what to do instead


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # mean of an empty batch is nan
@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=12))
def test_any_sequence_of_batch_sizes_matches_eager_with_few_captures(sizes):
    def f(x, b):
        return (x * 2 + b).sum(1), x.mean(0)

    cf = compiled(f)
    b = tj.tensor([1.0, 2.0, 3.0])
    for n in sizes:
        x = tj.arange(n * 3, dtype=tj.float32).reshape(n, 3)
        got, exp = cf(x, b), f(x, b)
        for g, e in zip(got, exp):
            assert g.shape == e.shape
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-6, equal_nan=True)
    special = len({n for n in sizes if n < 2})
    general = len({n for n in sizes if n >= 2})
    # each of 0 and 1 once; sizes >= 2 at most twice (first exact, then symbolic)
    assert cf.cache_stats()["compiles"] <= special + min(general, 2)


# --------------------------------------------------------------------------- the collector
def _capture_seeing_freeze_count():
    """A fresh traced function, and the list its trace appends gc.get_freeze_count() to."""
    import gc
    seen = []

    def f(x):
        seen.append(gc.get_freeze_count())
        return x + 1

    return compiled(f), seen


def test_a_capture_sets_older_objects_aside_and_gives_them_back():
    import gc
    import weakref

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a          # a cycle made before the capture, garbage after it
    gone = weakref.ref(a)
    del a, b
    fn, seen = _capture_seeing_freeze_count()
    assert gc.get_freeze_count() == 0
    np.testing.assert_array_equal(fn(tj.ones(3)).numpy(), np.full(3, 2, np.float32))
    assert seen and seen[0] > 0      # frozen while the trace ran ...
    assert gc.get_freeze_count() == 0  # ... and handed back after it
    gc.collect()
    assert gone() is None            # the old cycle is still collected: nothing leaks


def test_a_capture_leaves_the_programs_own_freeze_and_a_disabled_collector_alone():
    import gc
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        fn, seen = _capture_seeing_freeze_count()
        fn(tj.ones(3))
        # (never more: a freeze of the capture's own would add the objects made since; a few
        # less where frozen objects died meanwhile, as a background thread's may)
        assert len(seen) == 1 and frozen - 64 <= seen[0] <= frozen
        assert frozen - 64 <= gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        fn, seen = _capture_seeing_freeze_count()
        fn(tj.ones(3))
        assert seen == [0] and not gc.isenabled()
    finally:
        gc.enable()


def test_reasons_prefer_an_entry_of_the_same_argument_structure():
    def f(x, past=None):
        return x if past is None else x + past[0].sum()

    cf = tj.compile(f)
    cf(tj.ones(3), past=[tj.ones(2)])
    cf(tj.ones(3))   # (the latest entry, but of another structure)
    cf(tj.ones(3), past=[tj.ones(2, 2)])
    assert cf.cache_stats()["recompile_reasons"][-1] == "input 'past[0]': rank guard failed: 1 -> 2"


def test_dims_equal_at_capture_share_a_symbol_and_a_split_says_so():
    cf = tj.compile(lambda ids, mask: (ids * mask).sum(1), dynamic=True)
    cf(tj.ones(4, 4), tj.ones(4, 4))      # a batch of 4 sequences of 4: one symbol for both
    cf(tj.ones(5, 5), tj.ones(5, 5))
    assert cf.cache_stats()["compiles"] == 1
    assert cf(tj.ones(5, 3), tj.ones(5, 3)).tolist() == [3.0] * 5
    st = cf.cache_stats()
    assert st["compiles"] == 2
    assert st["recompile_reasons"] == ["input 'ids': dim 1 (s0) was equal to dim 0 of 'ids' at capture, now 3 vs 5",
                                       "input 'mask': dim 1 (s0) was equal to dim 0 of 'ids' at capture, now 3 vs 5"]


def test_a_second_module_of_a_class_starts_with_the_dims_the_first_saw_change():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tnets = [torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh()) for _ in range(2)]
    nets = [tj.nn.Sequential(tj.nn.Linear(4, 3), tj.nn.Tanh()) for _ in range(2)]
    for n, t in zip(nets, tnets):
        n.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    nets[1].requires_grad_(False)   # (frozen: the first's captures cannot serve it)
    first, second = (tj.trace(n, compiler="interpret") for n in nets)
    for b in (4, 6, 9):
        first(tj.randn(b, 4))
    assert first.cache_stats()["compiles"] == 2
    rng = np.random.default_rng(0)
    for b in (5, 7, 1, 3):
        x = rng.standard_normal((b, 4)).astype(np.float32)
        np.testing.assert_allclose(second(tj.tensor(x)).detach().numpy(), tnets[1](torch.tensor(x)).detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
    st = second.cache_stats()   # symbolic from its first call; a batch of 1 still captures its own
    assert st["compiles"] == 2 and st["dynamic_dims"] == [("input", 0)], st["recompile_reasons"]
    tj.compiler.reset()   # (forgets what was learned: a third module starts static)
    third = tj.trace(tj.nn.Sequential(tj.nn.Linear(4, 3)), compiler="interpret")
    third(tj.randn(5, 4))
    assert third.cache_stats()["dynamic_dims"] == []
