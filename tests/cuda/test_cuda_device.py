"""CUDA devices without a GPU: the error for a missing GPU/cupy, device parsing, and the
device-mixing error. These run everywhere (the GPU behaviour is in test_cuda_gpu.py)."""
from __future__ import annotations

import traceback

import numpy as np
import pytest

import tracejit as tj
from tracejit.device import CudaUnavailableError
from tracejit.errors import DeviceMismatchError
from tracejit.tensor import Tensor

no_gpu = pytest.mark.skipif(tj.cuda.is_available(), reason="a GPU is present")


@no_gpu
@pytest.mark.parametrize("ask", [
    lambda: tj.zeros(3, device="cuda"),
    lambda: tj.tensor([1.0, 2.0], device="cuda:0"),
    lambda: tj.ones(3).cuda(),
    lambda: tj.ones(3).to("cuda"),
    lambda: tj.randn(2, 2, device="cuda"),
    lambda: tj.nn.Linear(2, 3).cuda(),
], ids=["zeros", "tensor", "Tensor.cuda", "Tensor.to", "randn", "Module.cuda"])
def test_asking_for_cuda_without_a_gpu_raises_one_clear_error(ask):
    with pytest.raises(CudaUnavailableError) as info:
        ask()
    err = info.value
    msg = str(err)
    assert "CUDA was requested" in msg and ("cupy" in msg or "GPU" in msg), msg
    if "not importable" in msg:   # the install hint is spelled as the README spells it
        assert "pip install -e '.[cuda]'" in msg, msg
    # one error, not a stack of import failures
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)
    text = "".join(traceback.format_exception(err))
    assert "During handling" not in text and "direct cause" not in text
    assert text.count("Traceback (most recent call last)") == 1, text


@no_gpu
def test_cuda_namespace_without_a_gpu():
    assert tj.cuda.is_available() is False
    assert tj.cuda.device_count() == 0
    for call in (tj.cuda.synchronize, tj.cuda.current_device, tj.cuda.get_device_name):
        with pytest.raises(CudaUnavailableError):
            call()


def test_cuda_namespace_is_wired():
    assert tj.cuda.CudaUnavailableError is CudaUnavailableError
    assert isinstance(tj.cuda.is_available(), bool)
    assert isinstance(tj.cuda.device_count(), int)


def test_device_names():
    assert str(tj.device("cuda")) == "cuda:0"
    assert tj.device("cuda:1").index == 1 and tj.device("cuda", 1) is tj.device("cuda:1")
    assert tj.device("cuda") == "cuda:0" and tj.device("cpu") != tj.device("cuda")
    with pytest.raises(ValueError):
        tj.device("gpu")
    with pytest.raises(ValueError, match="expected a CUDA device"):
        tj.ones(2).cuda("cpu")


def _fake_cuda(a) -> Tensor:
    """A tensor labelled cuda:0 (host data): enough to reach the device checks without a GPU."""
    return Tensor._wrap(np.asarray(a, np.float32), tj.float32, tj.device("cuda"))


def test_mixing_devices_in_an_op_names_both_devices():
    c, x = _fake_cuda([1.0, 2.0, 3.0]), tj.ones(3)
    with pytest.raises(DeviceMismatchError, match=r"cpu and cuda:0"):
        x + c
    with pytest.raises(DeviceMismatchError, match=r"cuda:0 and cpu"):
        tj.mul(c, x)


def test_mixing_devices_in_a_compiled_call_names_both_devices():
    c, x = _fake_cuda([1.0, 2.0, 3.0]), tj.ones(3)
    f = tj.trace(lambda a, b: tj.tanh(a * 2.0 + b))
    with pytest.raises(DeviceMismatchError) as info:
        f(c, x)
    assert "cuda:0" in str(info.value) and "cpu" in str(info.value)


class _HostArray(np.ndarray):
    """A cupy-like array kept in host memory: ``.get()`` returns a numpy copy."""

    def get(self):
        return np.array(self).view(np.ndarray)


class _NoDevice:
    def __init__(self, index):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _FakeCupy:
    """numpy whose arrays are `_HostArray`s: enough of cupy for data moves and simple ops."""
    ndarray = _HostArray

    class cuda:
        Device = _NoDevice

    def __getattr__(self, name):
        f = getattr(np, name)
        if not callable(f):
            return f

        def wrapped(*a, **k):
            out = f(*a, **k)
            return out.view(_HostArray) if isinstance(out, np.ndarray) else out
        return wrapped


def test_moving_a_tensor_labels_it_with_the_destination(monkeypatch):
    import sys
    dev = sys.modules["tracejit.device"]     # (tj.device is the class)
    cp = _FakeCupy()
    monkeypatch.setattr(dev, "_cupy", cp)
    monkeypatch.setattr(dev, "_gpu_count", 1)
    x = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    c = x.cuda()
    assert c.device == tj.device("cuda:0") and type(c._data) is _HostArray
    back = c.cpu()
    assert back.device == tj.device("cpu") and type(back._data) is np.ndarray
    np.testing.assert_array_equal(back.detach().numpy(), [1.0, 2.0, 3.0])
    back.sum().backward()
    assert x.grad.device == tj.device("cpu")
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0, 1.0])


def test_seed_memory_and_timing_calls_run_anywhere():
    """What seed utilities, logging and timing code call unguarded: as PyTorch's without a
    GPU, they do nothing or say 0."""
    tj.cuda.manual_seed_all(0)
    tj.cuda.manual_seed(1)
    tj.cuda.empty_cache()
    tj.cuda.reset_peak_memory_stats()
    assert tj.cuda.memory_allocated() >= 0 and tj.cuda.max_memory_reserved() >= 0
    start, end = tj.cuda.Event(enable_timing=True), tj.cuda.Event(enable_timing=True)
    start.record()
    end.record()
    assert end.elapsed_time(start) <= 0.0 <= start.elapsed_time(end)
    with pytest.raises(RuntimeError, match="enable_timing"):
        tj.cuda.Event().elapsed_time(end)
    with tj.cuda.stream(tj.cuda.Stream()) as s, tj.cuda.nvtx.range("step"):
        assert s.query()
    assert tj.cuda.nvtx.range_push("x") == 0 and tj.cuda.nvtx.range_pop() == 0
    assert tj.cuda.OutOfMemoryError is tj.OutOfMemoryError and issubclass(tj.OutOfMemoryError, RuntimeError)


@no_gpu
def test_device_queries_without_a_gpu():
    assert tj.cuda.memory_allocated() == 0 and not tj.cuda.is_bf16_supported() and not tj.cuda.is_initialized()
    with pytest.raises(CudaUnavailableError):
        tj.cuda.get_device_properties(0)
    with pytest.raises(CudaUnavailableError):
        tj.cuda.set_device(0)


@no_gpu
def test_memory_queries_without_a_gpu_as_torchs_cpu_build():
    torch = pytest.importorskip("torch")
    for m in (tj, torch):
        assert m.cuda.memory_stats() == {} and m.cuda.memory_cached() == 0 and m.cuda.max_memory_cached() == 0
        assert m.cuda.get_arch_list() == []
    tj.cuda.reset_max_memory_allocated()
    tj.cuda.ipc_collect()
    with pytest.raises(CudaUnavailableError):
        tj.cuda.mem_get_info()
    with pytest.raises(ValueError, match=r"fraction must be in \[0, 1\], got 2.0"):
        tj.cuda.set_per_process_memory_fraction(2.0)
