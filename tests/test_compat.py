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
