"""Symbolic dims (`tracejit.shapes.Sym`): what they answer without asking for a size,
and what asks for one (the capture then keeps that dim static)."""
from __future__ import annotations

import pytest

from tracejit import shapes
from tracejit.shapes import Sym


@pytest.fixture
def asked():
    """The symbols whose concrete value was asked for (as the tracer's hook records them)."""
    seen: list = []
    prev = shapes.set_specialize_hook(lambda s: seen.extend(sorted(s.free_symbols)))
    yield seen
    shapes.set_specialize_hook(prev)


def test_lower_bound_of_growing_dims_and_none_otherwise():
    s0, s1 = Sym.symbol("s0", 5), Sym.symbol("s1", 3)
    assert s0.lower_bound() == 2
    assert (5 * s0 + 2).lower_bound() == 12
    assert (s0 * s1).lower_bound() == 4
    assert (s0 - 3).lower_bound() == -1
    assert (-s0 + 9).lower_bound() is None


def test_comparisons_decided_for_every_size_ask_for_nothing(asked):
    s0 = Sym.symbol("s0", 5)
    assert (5 * s0 == 5) is False and (5 * s0 != 9) is True   # 5*s0 >= 10
    assert (s0 > 1) is True and (s0 >= 2) is True and (s0 < 2) is False
    assert (3 * s0 + 1 > 6) is True and (3 * s0 + 1 <= 6) is False
    assert (5 * s0, 4) != (5, s0, 4)   # a reshape's identity test
    assert asked == []


def test_two_dims_whose_difference_has_one_sign_compare_without_asking(asked):
    s0, s1 = Sym.symbol("s0", 5), Sym.symbol("s1", 3)
    assert (1 + s0 > 2 * s0) is False and (1 + s0 < 2 * s0) is True   # 2*s0 - (1 + s0) >= 1
    assert (2 * s0 >= s0 + 2) is True and (s0 + s1 > s1) is True and (s1 <= s1 + 0 * s0) is True
    assert asked == []
    assert (s0 > s1) is True    # depends on the sizes: asked for (no tracer to guard it)
    assert asked == ["s0"]


def test_comparisons_that_depend_on_the_size_ask_for_it(asked):
    s0 = Sym.symbol("s0", 5)
    assert (s0 == 5) is True
    assert asked == ["s0"]
    assert (s0 > 4) is True and (s0 - 3 >= 2) is True
    assert asked == ["s0"] * 3


def test_true_division_without_a_tracer_is_the_float_of_the_size(asked):
    s0 = Sym.symbol("s0", 5)
    assert s0 / (s0 - 1) == 1.25 and 10 / s0 == 2.0 and s0 / 2 == 2.5
    assert asked == ["s0"] * 3


def test_as_dim_keeps_symbols_and_makes_ints():
    s0 = Sym.symbol("s0", 5)
    assert shapes.as_dim(s0) is s0
    assert shapes.as_dim(True) == 1 and type(shapes.as_dim(3.0)) is int


def test_a_derived_symbol_evaluates_prints_and_pickles_as_its_division():
    import pickle
    i0 = Sym.symbol("i0", 6)
    q0 = Sym.symbol(shapes.Derived("q0", 144, i0), 24)
    dim = 3 * q0 + i0
    assert dim.evaluate({"i0": 8}) == 3 * 18 + 8
    assert eval(dim.to_python(), {"i0": 9}) == 3 * 16 + 9
    assert dim.free_symbols == {"i0"}   # bound from i0 alone
    back = pickle.loads(pickle.dumps(dim))
    assert back == dim and back.evaluate({"i0": 12}) == 48


def test_a_derived_symbol_times_its_divisor_equals_the_dividend_once_guarded(asked):
    guarded = []
    prev = shapes.facts_hooks.assume
    shapes.facts_hooks.assume = lambda v, what, dims=False: guarded.append(v) or True
    try:
        i0 = Sym.symbol("i0", 6)
        d = shapes.Derived("q0", 144, i0)
        q0 = Sym.symbol(d, 24)
        assert (i0 * q0 == 144) is True and d.exact
        assert guarded == [i0 * q0 - 144]   # i0 * (144 // i0) >= 144: exact division
        assert (i0 * q0 * 2 == 288) is True and len(guarded) == 1   # taken once
        assert asked == []
    finally:
        shapes.facts_hooks.assume = prev


def test_dims_from_different_arguments_broadcast_when_equal_guarded():
    # a decoder's mask (length s0) over its cache grown by one (1 + s1): equal in every call,
    # provable from no argument; one capture serves them all, and a call where they
    # differ fails as eager code does
    import numpy as np

    import tracejit as tj

    def step(cache, new, mask):
        return tj.cat([cache, new], dim=-1) * mask

    cf = tj.compile(step, dynamic=True)
    for n in (4, 5, 9):
        cache, new = tj.ones(2, n) * 2, tj.ones(2, 1) * 3
        mask = tj.arange(n + 1, dtype=tj.float32).expand(2, n + 1)
        want = np.concatenate([np.full((2, n), 2.0), np.full((2, 1), 3.0)], 1) * np.arange(n + 1)
        np.testing.assert_array_equal(cf(cache, new, mask).numpy(), want)
    assert cf.cache_stats()["compiles"] == 1
    with pytest.raises(Exception, match="broadcast"):
        cf(tj.ones(2, 4), tj.ones(2, 1), tj.ones(2, 7))


def test_counts_equal_now_specialize_only_the_symbols_one_side_has(asked):
    b, t, h = Sym.symbol("s0", 3), Sym.symbol("s1", 5), Sym.symbol("s2", 12)
    assert shapes.specialize_to_agree(b * t * 48, b * t * 4 * h) and asked == ["s2"]
    asked.clear()
    assert not shapes.specialize_to_agree(b * t * 40, b * t * 4 * h) and asked == []
    assert shapes.specialize_to_agree(b * 20, t * h) and asked == ["s0", "s1", "s2"]


def test_a_view_of_a_symbolic_head_dim_keeps_the_growing_dim_symbolic():
    import numpy as np
    import tracejit as tj

    def merge(cache, q):
        # attention over a cache of shape (B, heads, L, head_dim): the heads merged back
        # by a view to the model width, 48, as nanoGPT's y.view(B, T, C)
        y = (q @ cache.transpose(-2, -1)).softmax(-1) @ cache
        return y.transpose(1, 2).contiguous().view(q.size(0), q.size(2), 48)

    g = tj.compile(merge, dynamic=True)
    for n in range(5, 10):   # (never 2, 3 or 4: equal sizes share a symbol)
        cache, q = tj.randn(2, 4, n, 12), tj.randn(2, 4, 3, 12)
        np.testing.assert_allclose(g(cache, q).numpy(), merge(cache, q).numpy(), rtol=1e-5, atol=1e-6)
    assert g.cache_stats()["compiles"] == 1 and g.cache_stats()["eager_fallbacks"] == 0


def test_a_remainder_is_a_polynomial_of_the_quotient_and_a_ceil_division_a_floor_one(asked):
    guarded = []
    prev = shapes.facts_hooks
    derive, assume = prev.derive, prev.assume
    made = {}
    # (a context that makes quotients only: a remainder then falls back to ``n - k*q``)
    shapes.facts_hooks.derive = lambda num, den, op="//": None if op == "%" or shapes.hint(num) < 0 \
        else made.setdefault(repr((num, den)), Sym.symbol(shapes.Derived(f"q{len(made)}", num, den),
                                                          shapes.hint(num) // den))
    shapes.facts_hooks.assume = lambda v, what, dims=False: guarded.append(v) or True
    try:
        s0 = Sym.symbol("s0", 17)
        r = s0 % 2
        q0 = made[repr((s0, 2))]
        assert r.hint == 1 and r.terms == (s0 - 2 * q0).terms and (2 * s0 + 1) % 2 == 1
        assert (s0 % 2 == 1) is True and guarded == [s0 - 2 * q0 - 1, 1 - (s0 - 2 * q0)]   # guarded both ways
        m = -s0 % 4   # (4 - s0 % 4) % 4
        q1 = made[repr((s0, 4))]
        q2 = made[repr((4 - (s0 - 4 * q1), 4))]
        assert m.hint == 3 and m.terms == (4 - (s0 - 4 * q1) - 4 * q2).terms
        assert -(-s0 // 4) == made[repr((s0 + 3, 4))]   # (17 + 3) // 4
        assert asked == []
    finally:
        shapes.facts_hooks.derive, shapes.facts_hooks.assume = derive, assume


def test_a_multiple_of_a_sum_divides_by_it_without_asking(asked):
    s0 = Sym.symbol("s0", 3)
    # a view's -1 over a cache grown by one, (3, 1 + s0, 2, -1) of (3, 1 + s0, 16)
    assert (48 + 48 * s0) // (6 + 6 * s0) == 8 and (48 + 48 * s0) % (6 + 6 * s0) == 0
    assert asked == []
    assert (48 + 49 * s0) // (6 + 6 * s0) == 8 and set(asked) == {"s0"}   # no multiple: asked


def test_a_number_modulo_a_dim_is_this_calls(asked):
    s0 = Sym.symbol("s0", 4)
    assert 16 % s0 == 0 and 18 % s0 == 2 and asked == ["s0", "s0"]


def test_a_floor_division_exact_but_for_a_constant_needs_no_size(asked):
    """``(o*y + r) // o`` is ``y + r // o`` for every integer y: a conv of stride 2 over a
    conv-transposed size ``2*s0`` gives ``s0 - 1``, no size asked (a derived symbol could
    not be matched with the size the gradient must have)."""
    s = Sym.symbol("s0", 5)
    assert ((2 * s - 1) // 2).terms == (s - 1).terms
    assert ((6 * s + 7) // 3).terms == (2 * s + 2).terms and ((6 * s + 7) // 3).hint == 12
    assert ((4 * s - 5) // 2).hint == 7 and asked == []


_TABLE = {4: 1.0, 8: 2.0}


@pytest.mark.parametrize("fn", [
    lambda x: x * _TABLE.get(x.shape[0], 0.5),
    lambda x: x * (3.0 if x.shape[0] in _TABLE else 0.5),
    lambda x: x * {4: 1.0, 6: 3.0, 8: 2.0, 10: 4.0, 12: 5.0}[x.shape[0]],
    lambda x: x * float(hash(x.shape[0]) == hash(8)),
    lambda x: x * (2.0 if (x.shape[0], 3) in {(8, 3)} else 1.0),
], ids=["get", "in", "subscript", "hash", "tuple_key"])
def test_a_dict_lookup_of_a_symbolic_size_finds_this_calls_value(fn):
    """A hash of a symbolic size in user code is its value's, asked for (the dim static from
    then on), so the lookup takes each call's branch: by the symbol's form it found no int
    key (the default, a KeyError, a set missing it) at the sizes after the dim went symbolic."""
    import numpy as np

    import tracejit as tj

    cf = tj.compile(fn, backend="interpret")
    for n in (4, 6, 8, 10, 12):
        x = tj.randn(n, 3)
        np.testing.assert_allclose(cf(x).numpy(), fn(x).numpy(), rtol=1e-6, err_msg=f"size {n}")
    st = cf.cache_stats()
    assert st["compiles"] == 5 and st["dynamic_dims"] == [], st["recompile_reasons"]


def test_a_hash_in_user_code_asks_for_the_value(asked):
    s0 = Sym.symbol("s0", 6)
    assert hash(s0) == hash(6) and asked == ["s0"]
    assert {6: "six"}.get(s0) == "six"


def test_a_hash_with_no_capture_running_is_by_form(asked):
    s0 = Sym.symbol("s0", 6)
    prev = shapes.set_specialize_hook(None)
    try:
        assert hash(s0) == hash(s0.terms) == hash(Sym.symbol("s0", 9)) and asked == []
    finally:
        shapes.set_specialize_hook(prev)


def test_a_view_by_a_quotient_of_a_quotient_is_exact_where_it_divides(asked):
    """``x.reshape(n // 2, 2, -1)`` of ``(n, 4)``: the -1 is ``4*n // (2*q0)`` with
    ``q0 = n // 2``, equal to the count once that division is exact, which is guarded (not
    taken for every n): an odd n where it divides (5: (2, 2, 5)) shares the entry, one where
    it does not (7) meets eager's error, and nothing asks for n."""
    guarded = []
    derive, assume = shapes.facts_hooks.derive, shapes.facts_hooks.assume
    made = {}
    shapes.facts_hooks.derive = lambda num, den, op="//": made.setdefault(
        repr((num, den)), Sym.symbol(shapes.Derived(f"q{len(made)}", num, den), shapes.hint(num) // shapes.hint(den)))
    shapes.facts_hooks.assume = lambda v, what, dims=False: guarded.append((v, what)) or True
    try:
        n = Sym.symbol("s0", 6)
        q0 = n // 2
        rest = (4 * n) // (2 * q0)
        assert rest * (2 * q0) == 4 * n and asked == []
        exact = [v for v, what in guarded if what == "a size that divides exactly"]
        assert [v.terms for v in exact] == [(2 * q0 * rest - 4 * n).terms]
    finally:
        shapes.facts_hooks.derive, shapes.facts_hooks.assume = derive, assume


def test_a_reshape_by_half_a_symbolic_size_is_one_entry_and_eagers_errors():
    import numpy as np

    import tracejit as tj
    from tracejit.errors import ShapeError

    def f(x):
        return x.reshape(x.size(0) // 2, 2, -1)

    cf = tj.compile(f, backend="interpret")
    for n in (4, 6, 8, 10, 12, 14, 16, 18, 5):
        x = tj.randn(n, 4)
        got, want = cf(x), f(x)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    st = cf.cache_stats()
    assert st["compiles"] == 2 and st["dynamic_dims"] == [("x", 0)], st["recompile_reasons"]
    with pytest.raises(ShapeError):
        f(tj.randn(7, 4))
    with pytest.raises(ShapeError):
        cf(tj.randn(7, 4))
