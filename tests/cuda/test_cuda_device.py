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
