"""arange's PyTorch rules for integer dtypes and float rounding, and empty_strided."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")

CASES = [((0.5, 4.5, 1), "int64"), ((0, 5, 1.5), "int64"), ((2.7,), "int64"), ((-1.5, 3), "int32"),
         ((0, 5, 1.5), "int16"), ((5, 0, -1.5), "int32"), ((10,), "uint8"), ((0, 1, 0.3), None),
         ((0, 10, 3), "float32"), ((0.0, 1.0, 0.1), "float64"), ((0, 2, 0.1), "float16"),
         ((0, 2, 0.1), "bfloat16"), ((3, 0, -0.7), None), ((1, 11, 2), None)]


@pytest.mark.parametrize("args, dtype", CASES)
def test_arange_matches_pytorch(args, dtype):
    ref = torch.arange(*args, **({"dtype": getattr(torch, dtype)} if dtype else {}))
    out = tj.arange(*args, **({"dtype": getattr(tj, dtype)} if dtype else {}))
    assert str(out.dtype).split(".")[-1] == str(ref.dtype).split(".")[-1]
    assert out.tolist() == ref.tolist()   # exact: one rounding from double, as PyTorch


def test_an_integer_step_that_truncates_to_zero_is_refused():
    with pytest.raises(ValueError, match="step must be nonzero"):
        tj.arange(1, 4, 0.5, dtype=tj.int64)


@pytest.mark.parametrize("size,stride", [((2, 3), (1, 2)), ((2, 1, 3), (3, 5, 1)), ((4,), (2,)), ((2, 3), (3, 1))])
def test_empty_strided_has_torchs_size_dtype_and_strides(size, stride):
    t = tj.empty_strided(size, stride, dtype=tj.float64)
    assert tuple(t.shape) == size and t.dtype == tj.float64
    assert t.stride() == torch.empty_strided(size, stride).stride() == stride
    t.fill_(2.0)
    assert t.sum().item() == 2.0 * t.numel()
    assert tj.ones(1).new_empty_strided(size, stride).stride() == stride
    with pytest.raises(ValueError, match="stride"):
        tj.empty_strided(size, stride[1:])


def test_tensor_of_lists_takes_the_values_of_tensors_at_any_depth():
    assert tj.tensor([1, 2, 3]).tolist() == [1, 2, 3]
    assert tj.tensor([[1, tj.tensor(2)], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert tj.tensor(([1.5], (tj.tensor(2.5),))).tolist() == [[1.5], [2.5]]
    assert tj.tensor([True, False]).dtype == tj.bool and tj.tensor([1, 2.5]).dtype == tj.float32


_INCONSISTENT = "upper bound and lower bound inconsistent with step sign"
_STEPS = "number of steps must be non-negative"


@pytest.mark.parametrize("call, words", [
    (lambda m: m.arange(5, 0, 1), _INCONSISTENT), (lambda m: m.arange(0, 5, -1), _INCONSISTENT),
    (lambda m: m.arange(-1), _INCONSISTENT), (lambda m: m.arange(5.0, 0.0, 1), _INCONSISTENT),
    (lambda m: m.arange(5, 0, 1, dtype=m.int32), _INCONSISTENT),
    (lambda m: m.linspace(0, 1, -1), _STEPS), (lambda m: m.logspace(0, 1, -1), _STEPS),
    (lambda m: m.eye(-1), "n must be greater or equal to 0, got -1"),
    (lambda m: m.eye(2, -1), "m must be greater or equal to 0, got -1")])
def test_negative_counts_and_inconsistent_bounds_raise_as_in_pytorch(call, words):
    with pytest.raises(RuntimeError, match=words):
        call(torch)
    with pytest.raises(RuntimeError, match=words):
        call(tj)


def test_empty_results_pytorch_allows_stay_empty():
    for call in (lambda m: m.arange(5, 5, 1), lambda m: m.linspace(0, 1, 0), lambda m: m.eye(3, 0)):
        assert tuple(call(tj).shape) == tuple(call(torch).shape)


def test_arange_from_a_symbolic_offset_serves_every_offset_in_one_capture():
    # a KV cache's positions: arange(past, past + t) with past a dynamic dim
    def positions(past, x):
        n = past.size(0)
        return (tj.arange(n, n + x.size(0)), tj.arange(n, 2 * n), tj.arange(1, n),
                tj.arange(n, n + 5, 2, dtype=tj.float32))

    cf = tj.compile(positions, dynamic=True)
    for n in (4, 5, 9):
        got = cf(tj.ones(n), tj.ones(3))
        want = (torch.arange(n, n + 3), torch.arange(n, 2 * n), torch.arange(1, n),
                torch.arange(n, n + 5, 2, dtype=torch.float32))
        for g, w in zip(got, want):
            assert g.dtype == getattr(tj, str(w.dtype).split(".")[1])
            np.testing.assert_array_equal(g.numpy(), w.numpy())
    assert cf.cache_stats()["compiles"] == 1


FACTORIES = {
    "zeros": lambda m, **kw: m.zeros(2, 3, **kw), "ones": lambda m, **kw: m.ones(2, **kw),
    "empty": lambda m, **kw: m.empty(2, **kw).zero_(), "full": lambda m, **kw: m.full((2,), 1.5, **kw),
    "arange": lambda m, **kw: m.arange(3, **kw), "linspace": lambda m, **kw: m.linspace(0, 1, 3, **kw),
    "eye": lambda m, **kw: m.eye(2, **kw), "zeros_like": lambda m, **kw: m.zeros_like(m.ones(2), **kw),
    "ones_like": lambda m, **kw: m.ones_like(m.ones(2), **kw),
    "full_like": lambda m, **kw: m.full_like(m.ones(2), 3.0, **kw),
    "empty_like": lambda m, **kw: m.empty_like(m.ones(2), **kw).shape,
    "rand": lambda m, **kw: m.rand(2, **kw).shape, "randn": lambda m, **kw: m.randn(2, 3, **kw).shape,
    "randint": lambda m, **kw: m.randint(0, 5, (2,), **kw).shape,
    "randperm": lambda m, **kw: m.randperm(4, **kw).sort()[0],
    "rand_like": lambda m, **kw: m.rand_like(m.ones(2), **kw).shape,
    "randn_like": lambda m, **kw: m.randn_like(m.ones(2), **kw).shape,
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_factories_take_pytorchs_layout_and_pin_memory(name):
    """diffusers' randn_tensor passes layout=torch.strided; data code passes pin_memory."""
    torch = pytest.importorskip("torch")
    for kw in ({"layout": "strided"}, {"pin_memory": False}):
        want, got = (FACTORIES[name](m, **{k: getattr(m, v) if k == "layout" else v for k, v in kw.items()})
                     for m in (torch, tj))
        assert (got.tolist() if hasattr(got, "tolist") else tuple(got)) == \
            (want.tolist() if hasattr(want, "tolist") else tuple(want))
    with pytest.raises(NotImplementedError, match=f"{name.split('_')[0]}.*layout"):
        FACTORIES[name](tj, layout=tj.sparse_coo)


def test_integer_draws_refuse_requires_grad_as_pytorch():
    torch = pytest.importorskip("torch")
    for m in (torch, tj):
        with pytest.raises(RuntimeError, match="(?i)floating point"):
            m.randint(0, 5, (2,), requires_grad=True)
        with pytest.raises(RuntimeError, match="(?i)floating point"):
            m.randperm(3, requires_grad=True)
        assert m.randn_like(m.ones(2), requires_grad=True).requires_grad


def test_full_and_as_tensor_of_a_compiled_functions_number_argument():
    """A number argument that changed between calls (traced from then on) fills with its
    own kind, as the number does eagerly: int64, float32 or bool."""
    def f(L, s):
        return L.full((2,), s), L.as_tensor(s), L.full((1,), L.tensor(3, dtype=L.int32))
    cf = tj.compile(lambda s: f(tj, s), fullgraph=True)
    for s in [3, 2.5, 4, True, 1.5, 5]:
        for g, w in zip(cf(s), f(torch, s)):
            assert isinstance(g, tj.Tensor)
            assert str(g.dtype).split(".")[-1] == str(w.dtype).split(".")[-1], s
            assert g.tolist() == w.tolist()


@pytest.mark.parametrize("name", ["zeros", "ones", "empty", "rand", "randn"])
def test_factories_take_size_by_keyword(name):
    """N-BEATS writes torch.zeros(size=(batch, horizon))."""
    for size in ((2, 3), [4], ()):
        assert tuple(getattr(tj, name)(size=size).shape) == tuple(getattr(torch, name)(size=size).shape)
    assert tj.zeros(size=(2,), dtype=tj.int64).dtype == tj.int64
    with pytest.raises(TypeError, match="multiple values for argument 'size'"):
        getattr(tj, name)(2, size=(2,))


def test_integer_data_makes_complex_tensors():
    for data in (1, [1, 2], [[3]]):
        t = tj.tensor(data, dtype=tj.complex64)
        assert t.dtype is tj.complex64 and t.tolist() == torch.tensor(data, dtype=torch.complex64).tolist()
    assert tj.result_type(tj.ones(2), tj.tensor(1, dtype=tj.complex64)) is tj.complex64


def test_arange_of_a_0d_integer_tensor_is_int64_as_pytorch():
    for args in [(3,), (1, 5), (0, 5, 2), (True,)]:
        for m in (torch, tj):
            t = m.arange(*[m.tensor(a) for a in args])
            assert str(t.dtype).split(".")[-1] == "int64", (args, m.__name__)
        np.testing.assert_array_equal(tj.arange(*[tj.tensor(a) for a in args]).numpy(),
                                      torch.arange(*[torch.tensor(a) for a in args]).numpy())
    assert tj.arange(tj.tensor(3.0)).dtype is tj.float32


def test_linspace_of_a_complex_bound_is_complex_as_pytorch():
    for args in [(0, 1 + 1j, 3), (1j, 2.0, 4)]:
        want = torch.linspace(*args)
        got = tj.linspace(*args)
        assert got.dtype is tj.complex64 and want.dtype == torch.complex64
        np.testing.assert_allclose(got.numpy(), want.numpy())


@pytest.mark.parametrize("name", ["tril_indices", "triu_indices"])
def test_tri_indices_refuse_a_negative_size_as_pytorch(name):
    with pytest.raises(RuntimeError):
        getattr(torch, name)(-1, 3)
    with pytest.raises(ValueError, match="non-negative"):
        getattr(tj, name)(3, -2)


def test_factories_take_0d_integer_tensors_as_sizes():
    import torch

    def sizes(m):
        n = m.tensor(3)
        return [m.zeros(n).shape, m.ones(n, 2).shape, m.full((m.tensor(2), n), 1.0).shape, m.empty(n).shape,
                m.randn(n).shape, m.zeros(2).new_zeros(n).shape, m.zeros(size=(n,)).shape]

    assert [tuple(s) for s in sizes(tj)] == [tuple(s) for s in sizes(torch)]
    with pytest.raises(TypeError, match="size"):
        tj.zeros(tj.tensor(2.0))


@pytest.mark.parametrize("start,end,steps,dtype", [(0.9, -100.9, 9, "int64"), (-7.9, 50.9, 9, "int32"),
                                                   (2.7, 3.9, 5, "uint8")])
def test_integer_linspace_truncates_its_bounds_first(start, end, steps, dtype):
    # (steps whose multiples sit off integers or exactly on them: no rounding order matters)
    import torch
    want = torch.linspace(start, end, steps, dtype=getattr(torch, dtype))
    got = tj.linspace(start, end, steps, dtype=getattr(tj, dtype))
    assert got.dtype == getattr(tj, dtype) and got.tolist() == want.tolist()


def test_linspace_of_a_changing_count_captures_twice():
    """``linspace(a, b, x.shape[-1])`` (a positional code) and ``linspace(a, b, n)`` with a new
    n each call: one capture after the first, eager's values exactly, PyTorch's to float32."""
    fs = [lambda lib, x, n: x * lib.linspace(0, 3.5, x.shape[-1]),
          lambda lib, x, n: x.sum() + lib.linspace(-3, 7.5, n)]
    for f in fs:
        cf = tj.compile(lambda x, n, f=f: f(tj, x, n))
        for n in (2, 3, 7, 50, 9):
            v = np.ones((2, n), np.float32)
            got = cf(tj.tensor(v), n).numpy()
            np.testing.assert_array_equal(got, f(tj, tj.tensor(v), n).numpy())
            np.testing.assert_allclose(got, f(torch, torch.tensor(v), n).numpy(), rtol=1e-6, atol=1e-6)
        assert cf.cache_stats()["compiles"] == 2, cf.cache_stats()["recompile_reasons"]


def test_eye_of_a_changing_batch_size_captures_twice():
    """``eye(x.shape[0])`` (a contrastive loss's self-similarity mask) and ``eye(3, n)`` on
    batches of a new size each call: one capture after the first, PyTorch's values."""
    fs = [lambda lib, x: (x @ x.t()).masked_fill(lib.eye(x.shape[0], dtype=lib.bool), -9.0),
          lambda lib, x: lib.eye(3, x.shape[0], dtype=lib.float64) @ x.double()]
    for f in fs:
        cf = tj.compile(lambda x, f=f: f(tj, x))
        for b in (2, 3, 5, 8, 4):
            v = np.arange(b * 3, dtype=np.float32).reshape(b, 3)
            np.testing.assert_array_equal(cf(tj.tensor(v)).numpy(), f(torch, torch.tensor(v)).numpy())
        assert cf.cache_stats()["compiles"] == 2, cf.cache_stats()["recompile_reasons"]


def test_arange_with_a_stride_to_a_changing_size_captures_twice():
    """``arange(0, x.shape[0], 2)`` (every other row) and ``arange(0, n, 3)`` on a new size
    each call: the count ``ceil(n / step)`` is symbolic, PyTorch's values and dtypes."""
    fs = [lambda lib, x, n: x.index_fill(0, lib.arange(0, x.shape[0], 2), 0.0),
          lambda lib, x, n: x.sum() + lib.arange(0, n, 3, dtype=lib.float32)]
    for f in fs:
        cf = tj.compile(lambda x, n, f=f: f(tj, x, n))
        for n in (2, 3, 5, 8, 13, 4):
            v = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
            got, want = cf(tj.tensor(v), n), f(torch, torch.tensor(v), n)
            assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
            np.testing.assert_array_equal(got.numpy(), want.numpy())
        assert cf.cache_stats()["compiles"] == 2, cf.cache_stats()["recompile_reasons"]


@pytest.mark.parametrize("fn,extra", [("zeros_like", ()), ("ones_like", ()), ("empty_like", ()),
                                      ("full_like", (2.5,))])
@pytest.mark.parametrize("dtype", [None, "float64", "int32", "bool", "complex64"])
@pytest.mark.parametrize("layout", ["rows", "channels_last", "transposed", "0d"])
def test_likes_match_pytorch_in_dtype_strides_and_values(fn, extra, dtype, layout):
    """The row-major CPU input's short route and the general one: PyTorch's dtype, strides
    (a preserved channels-last or transposed order), values and requires_grad."""
    torch = pytest.importorskip("torch")
    if fn == "full_like" and dtype == "bool":
        extra = (True,)
    a = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    got = []
    for lib in (torch, tj):
        x = lib.tensor(a) if layout != "0d" else lib.tensor(3.0)
        if layout == "channels_last":
            x = x.contiguous(memory_format=lib.channels_last)
        elif layout == "transposed":
            x = x.transpose(1, 3)
        kw = {} if dtype is None else {"dtype": getattr(lib, dtype)}
        out = getattr(lib, fn)(x, *extra, **kw)
        grad = getattr(lib, fn)(x, *extra, requires_grad=True) if dtype is None else None
        got.append((out, grad))
    (t, tg), (j, jg) = got
    assert str(j.dtype).replace("tracejit.", "") == str(t.dtype).replace("torch.", "")
    assert j.shape == tuple(t.shape) and j.stride() == t.stride()
    if fn != "empty_like":
        np.testing.assert_array_equal(j.numpy(), t.numpy())
    if tg is not None:
        assert jg.requires_grad and jg.is_leaf and jg.dtype == j.dtype
