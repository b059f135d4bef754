"""tracejit.Size indexes and slices as PyTorch's torch.Size: an int item, a Size slice."""
import numpy as np
import pytest

import tracejit as tj


def test_items_and_slices_match_torch():
    torch = pytest.importorskip("torch")
    ours, theirs = tj.zeros(2, 3, 4, 5).shape, torch.zeros(2, 3, 4, 5).shape
    for i in (0, 3, -1, -4):
        assert type(ours[i]) is int and ours[i] == theirs[i]
    for sl in (slice(1, None), slice(None, -1), slice(None, None, -1), slice(1, 3), slice(5, 9)):
        got = ours[sl]
        assert type(got) is tj.Size and tuple(got) == tuple(theirs[sl])
        assert repr(got) == f"tj.Size({list(theirs[sl])})"
    assert type(ours[1:] + (7,)) is tj.Size and tuple(ours[:-1] + (7,)) == (2, 3, 4, 7)
    assert ours[2:].numel() == 20 and ours[:0].numel() == 1
    # items that are not ints become ints, as a Size made from them holds
    for extra in ((True,), (np.int64(7),), [7]):
        got = ours[:1] + extra
        assert type(got) is tj.Size and got == (2, int(extra[0])) and type(got[1]) is int


def test_bad_index_errors_as_a_tuple():
    s = tj.Size([2, 3])
    with pytest.raises(IndexError):
        s[2]
    with pytest.raises(TypeError):
        s["a"]


def _uses_shapes(mod, x):
    """Every Size use compiled code meets: methods, slices, sums, unpacking, as arguments."""
    s = x.shape
    b, c = s
    y = x.view(s.numel()).view(s[0], -1).reshape(s[:1] + (c,))
    z = x.new_zeros(s + (2,)) + x[..., None]
    w = x.expand(3, *s) * x.new_ones(s[1:])
    kinds = (isinstance(s, mod.Size), isinstance(x.size(), mod.Size), isinstance(s[1:], mod.Size),
             isinstance(s + (1,), mod.Size))
    return y.sum() + z.sum() + w.sum() * x.size().numel(), kinds


@pytest.mark.parametrize("wrap", ["compile", "script"])
def test_compiled_shapes_are_sizes_and_stay_symbolic(wrap):
    torch = pytest.importorskip("torch")
    fn = getattr(tj, wrap)(lambda x: _uses_shapes(tj, x), **({"dynamic": True} if wrap == "compile" else {}))
    for n in (3, 5, 6):
        a = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        got, kinds = fn(tj.tensor(a))
        want, want_kinds = _uses_shapes(torch, torch.from_numpy(a))
        assert kinds == want_kinds == (True,) * 4
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)
    if wrap == "compile":   # (the sizes symbolic throughout: one capture serves every n)
        assert fn.cache_stats()["compiles"] == 1


def test_compiled_code_returns_sizes_as_eager():
    torch = pytest.importorskip("torch")

    def f(x):
        s = x.size()
        return s, s[1:], s + (1,), s.numel(), x.shape[-1]

    fn = tj.compile(f, dynamic=True)
    for n in (3, 5):
        got, want = fn(tj.zeros(n, 4)), f(torch.zeros(n, 4))
        assert [type(v) for v in got] == [tj.Size, tj.Size, tj.Size, int, int]
        assert [tuple(v) if isinstance(v, tuple) else v for v in got] == \
            [tuple(v) if isinstance(v, tuple) else v for v in want]


def test_a_size_keeps_symbolic_dims():
    from tracejit.shapes import Sym
    n = Sym.symbol("s0", 3)
    s = tj.Size([n, 4])
    assert s[0] is n and (s + (2,))[0] is n and s[1:] == (4,)
    assert s.numel().terms == (4 * n).terms and (s + (2,)).numel().terms == (8 * n).terms
