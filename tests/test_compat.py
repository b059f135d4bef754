"""Names PyTorch programs use at their first lines: tj.accelerator, tj.backends, tj.onnx,
tj.Size, memory formats, out=, ndarray operands, PyTorch's grad_fn names."""
import pickle

import numpy as np
import pytest

import tracejit as tj


def test_accelerator_answers_for_the_devices_that_exist():
    assert tj.accelerator.is_available() == tj.cuda.is_available()
    assert tj.accelerator.device_count() == tj.cuda.device_count()
    acc = tj.accelerator.current_accelerator()
    if tj.cuda.is_available():
        assert acc.type == "cuda" and tj.accelerator.current_device_index() >= 0
    else:
        assert acc is None and tj.accelerator.current_device_index() == -1
    # the idiom from PyTorch's examples
    dev = acc.type if tj.accelerator.is_available() else "cpu"
    assert tj.ones(2, device=dev).device.type == dev
    tj.accelerator.synchronize()


def test_backends_flags_are_accepted_no_ops():
    cudnn = tj.backends.cudnn
    old = (cudnn.enabled, cudnn.benchmark, cudnn.deterministic)
    cudnn.benchmark = True
    cudnn.deterministic = True
    assert cudnn.benchmark and cudnn.deterministic and not cudnn.is_available()
    with cudnn.flags(enabled=False):
        assert cudnn.enabled is False
    assert cudnn.enabled is old[0]
    cudnn.enabled, cudnn.benchmark, cudnn.deterministic = old
    assert tj.backends.mps.is_available() is False and tj.backends.mps.is_built() is False


def test_onnx_imports_and_export_says_not_supported():
    import tracejit.onnx as onnx
    assert onnx.is_in_onnx_export() is False
    with pytest.raises(NotImplementedError, match="not supported.*torch.onnx.export"):
        onnx.export(tj.nn.Linear(2, 2), tj.ones(1, 2), "model.onnx")


def test_size_is_a_tuple_that_prints_like_pytorch():
    x = tj.ones(2, 3, 4)
    s = x.size()
    assert isinstance(s, tj.Size) and isinstance(x.shape, tuple) and s == (2, 3, 4)
    assert repr(s) == "tj.Size([2, 3, 4])" and s.numel() == 24 == x.numel()
    assert isinstance(s[1:], tj.Size) and s[1:] == (3, 4) and type(s[0]) is int
    assert s[:-1] + (5,) == (2, 3, 5) and isinstance(s[:-1] + (5,), tj.Size)
    assert tj.Size([2, 3]) == (2, 3) and hash(tj.Size([2, 3])) == hash((2, 3))
    assert pickle.loads(pickle.dumps(s)) == s
    assert tj.zeros(s).shape == s and x.view(s[0], -1).shape == (2, 12)


def test_sparse_complex_and_memory_formats():
    x = tj.arange(6.0).reshape(2, 3).t()
    assert x.is_sparse is False and x.is_complex() is False and tj.is_complex(x) is False
    c = x.contiguous(memory_format=tj.contiguous_format)
    assert c.is_contiguous() and c.tolist() == x.tolist()
    assert x.clone(memory_format=tj.preserve_format).tolist() == x.tolist()
    assert x.to(memory_format=tj.channels_last).tolist() == x.tolist()
    with pytest.raises(TypeError, match="memory_format"):
        x.contiguous(memory_format="C")
    # the *_like creators take one too (F.gumbel_softmax's source: legacy_contiguous_format)
    like = [f(x, memory_format=fmt) for f, fmt in ((tj.zeros_like, tj.legacy_contiguous_format),
                                                   (tj.ones_like, tj.preserve_format),
                                                   (tj.empty_like, tj.contiguous_format))]
    assert [t.shape for t in like] == [(3, 2)] * 3 and like[1].tolist() == [[1.0, 1.0]] * 3
    assert tj.full_like(x, 2.0, memory_format=tj.channels_last).tolist() == [[2.0, 2.0]] * 3
    assert tj.randn_like(x, memory_format=tj.preserve_format).shape == (3, 2)
    with pytest.raises(TypeError, match="memory_format"):
        tj.zeros_like(x, memory_format="C")


def test_out_keyword_writes_in_place_and_refuses_autograd():
    a, b = tj.tensor([1.0, 2.0]), tj.tensor([3.0, 4.0])
    out = tj.empty(2)
    assert tj.add(a, b, out=out) is out and out.tolist() == [4.0, 6.0]
    assert out._version == 1
    m = tj.empty(0)  # wrong size: resized, as PyTorch does
    tj.matmul(tj.ones(2, 3), tj.ones(3, 4), out=m)
    assert m.shape == (2, 4) and m.tolist() == [[3.0] * 4] * 2
    tj.sum(tj.ones(2, 3), 1, out=out)
    assert out.tolist() == [3.0, 3.0]
    v, i = tj.empty(3), tj.empty(3, dtype=tj.int64)
    tj.sort(tj.tensor([3.0, 1.0, 2.0]), out=(v, i))
    assert v.tolist() == [1.0, 2.0, 3.0] and i.tolist() == [1, 2, 0]
    with pytest.raises(RuntimeError, match="out=.*automatic differentiation"):
        tj.mul(tj.ones(2, requires_grad=True), 2.0, out=tj.empty(2))
    with tj.no_grad():
        tj.mul(tj.ones(2, requires_grad=True), 2.0, out=out)
    assert out.tolist() == [2.0, 2.0]


def test_ndarray_operands_as_pytorch_accepts():
    x = tj.ones(2, 3)
    a = np.arange(6.0).reshape(2, 3)
    for r in (x + a, x * a, x - a, x / (a + 1), x ** a):
        assert isinstance(r, tj.Tensor) and r.dtype is tj.float64  # the array's dtype promotes
    np.testing.assert_array_equal((x - a).numpy(), 1 - a)
    for reflected in (lambda: a + x, lambda: a * x):  # PyTorch refuses these too
        with pytest.raises(TypeError, match="ndarray"):
            reflected()
    a32 = a.astype(np.float32)  # matmul does not promote (PyTorch neither)
    np.testing.assert_array_equal((x @ a32.T).numpy(), np.ones((2, 3)) @ a32.T)
    assert (x == np.ones((2, 3), np.float32)).all().item()
    w = tj.ones(3, requires_grad=True)
    (w * np.array([1.0, 2.0, 3.0], np.float32)).sum().backward()
    assert w.grad.tolist() == [1.0, 2.0, 3.0]


def test_grad_fn_names_follow_pytorch():
    torch = pytest.importorskip("torch", reason="compares names with PyTorch")
    cases = [lambda m, x: x * 2, lambda m, x: x + x, lambda m, x: x.exp(), lambda m, x: x.sum(),
             lambda m, x: m.cat([x, x]), lambda m, x: x.permute(1, 0), lambda m, x: x @ x,
             lambda m, x: x.view(-1), lambda m, x: x.clone(), lambda m, x: x.relu(),
             lambda m, x: x.to(m.float64), lambda m, x: x.clamp(0, 1), lambda m, x: x[m.tensor([0])]]
    for f in cases:
        t = f(torch, torch.ones(2, 2, requires_grad=True))
        j = f(tj, tj.ones(2, 2, requires_grad=True))
        assert j.grad_fn.name() == t.grad_fn.name()


def test_math_constants_are_pytorchs():
    torch = pytest.importorskip("torch")
    import math
    for name in ("pi", "e", "inf", "nan"):
        got, want = getattr(tj, name), getattr(torch, name)
        assert type(got) is float and (got == want or (math.isnan(got) and math.isnan(want)))


def test_module_to_takes_a_memory_format_and_checks_it():
    m = tj.nn.Conv2d(2, 3, 3)
    w = m.weight.detach().numpy().copy()
    assert m.to(memory_format=tj.channels_last) is m
    np.testing.assert_array_equal(m.weight.detach().numpy(), w)
    with pytest.raises(TypeError, match="memory_format must be a tracejit memory format"):
        m.to(memory_format="nhwc")


def test_generator_streams_are_their_own_and_reproducible():
    g1, g2 = tj.Generator(), tj.Generator()
    g1._rng = np.random.default_rng(7)
    g2._rng = np.random.default_rng(7)
    tj.manual_seed(0)
    a = tj.randint(0, 100, (6,), generator=g1)
    glob = tj.rand(3)
    b = tj.randint(0, 100, (6,), generator=g2)
    assert a.tolist() == b.tolist()
    tj.manual_seed(0)                                  # the draws from g1 left the global alone
    np.testing.assert_array_equal(tj.rand(3).numpy(), glob.numpy())
    assert tj.randperm(5, generator=g1).tolist() == tj.randperm(5, generator=g2).tolist()
    assert tj.randn(2, 2, generator=g1).shape == (2, 2)
    assert tj.multinomial(tj.tensor([0.2, 0.8]), 3, True, generator=g1).shape == (3,)
    with pytest.raises(TypeError, match="generator must be a tracejit.Generator"):
        tj.rand(2, generator=np.random.default_rng(0))


def test_a_generator_inside_a_traced_function_is_refused():
    from tracejit.errors import TraceError
    g = tj.Generator()
    f = tj.trace(lambda x: x + tj.rand(2, generator=g))
    with pytest.raises(TraceError, match="generator= draws from a Generator"):
        f(tj.ones(2))


def test_random_split_and_shuffling_follow_their_generator():
    from tracejit.utils.data import DataLoader, TensorDataset, random_split
    ds = TensorDataset(tj.arange(10))
    parts = [[list(s.indices) for s in random_split(ds, [6, 4], generator=tj.Generator().manual_seed(3))]
             for _ in range(2)]
    assert parts[0] == parts[1] and sorted(parts[0][0] + parts[0][1]) == list(range(10))
    orders = [[int(v) for (b,) in DataLoader(ds, batch_size=5, shuffle=True,
                                             generator=tj.Generator().manual_seed(5)) for v in b]
              for _ in range(2)]
    assert orders[0] == orders[1] and sorted(orders[0]) == list(range(10))


def test_testing_assert_close_as_pytorchs():
    tj.testing.assert_close(tj.tensor([1.0, 2.0]), tj.tensor([1.0, 2.0 + 1e-7]))
    tj.testing.assert_close({"a": [tj.tensor(1)]}, {"a": [tj.tensor(1)]})
    tj.testing.assert_close(tj.tensor([float("nan")]), tj.tensor([float("nan")]), equal_nan=True)
    with pytest.raises(AssertionError, match=r"not close!\n\nMismatched elements: 1 / 2 \(50.0%\)\n"
                                             r"Greatest absolute difference: 0.09.* at index \(1,\)"):
        tj.testing.assert_close(tj.tensor([1.0, 2.0]), tj.tensor([1.0, 2.1]))
    with pytest.raises(AssertionError, match="'dtype' do not match"):
        tj.testing.assert_close(tj.tensor([1.0]), tj.tensor([1.0], dtype=tj.float64))
    with pytest.raises(AssertionError, match=r"not equal!(.|\n)*item \['a'\]"):
        tj.testing.assert_close({"a": tj.tensor([1, 2])}, {"a": tj.tensor([1, 3])})
    with pytest.raises(AssertionError, match="not close"):
        tj.testing.assert_close(tj.tensor([float("nan")]), tj.tensor([float("nan")]))
    with pytest.raises(ValueError, match="Both 'rtol' and 'atol'"):
        tj.testing.assert_close(tj.tensor([1.0]), tj.tensor([1.0]), rtol=1e-3)
    tj.testing.assert_close(tj.tensor([1.0, 2.0]), tj.tensor([1.0, 2.05]), rtol=0.1, atol=0.0)


def test_augmented_assignments_write_in_place_through_views():
    """``x //= y`` and the other augmented operators write x (as PyTorch's), so a view of x
    sees the result; Python's fallback rebound x to a new tensor."""
    torch = pytest.importorskip("torch")
    res = []
    for lib in (torch, tj):
        x = lib.tensor([[-3.0, 2.0, 0.0, 5.0], [7.0, -1.0, 4.0, 1.0]])
        v = x[0]
        x //= -3
        x %= 2
        x **= 2
        i = lib.tensor([5, 6, -7])
        j = i[:]
        i <<= 1
        i >>= 2
        i &= 6
        i |= 1
        i ^= 3
        b = lib.tensor([True, False])
        c = b[:]
        b |= lib.tensor([False, True])
        res.append((v.tolist(), j.tolist(), c.tolist()))
    assert res[1] == res[0]


def test_opt_einsum_backend_switches_import_and_set():
    import importlib
    oe = importlib.import_module("tracejit.backends.opt_einsum")
    assert oe is tj.backends.opt_einsum and oe.is_available() is False
    oe.enabled, oe.strategy = True, "greedy"   # (set by scripts; einsum plans its own order)
    x = tj.ones(2, 3)
    assert tj.einsum("ij,kj->ik", x, x).tolist() == [[3.0, 3.0]] * 2
    oe.enabled, oe.strategy = False, None
