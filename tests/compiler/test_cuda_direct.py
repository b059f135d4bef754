"""The direct CUDA launch packs arguments as numba-cuda's own launch does (cuda.core's
launch and the compiled kernel stood in for: no GPU needed)."""
from __future__ import annotations

import ctypes
import sys
import types

import numpy as np
import pytest

from tracejit.compiler import cuda_direct
from tracejit.compiler.cuda_direct import FlatView, direct


class _ArrayType:
    def __init__(self, ndim):
        self.ndim, self.layout = ndim, "C"


class _ScalarType:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


class _DeviceArray:
    """What a cupy array offers the launcher: shape, strides, dtype, data.ptr."""

    def __init__(self, shape, dtype, ptr):
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.strides = tuple(int(s) for s in np.empty(shape, dtype).strides)
        self.data = types.SimpleNamespace(ptr=ptr)
        self.flags = types.SimpleNamespace(c_contiguous=True)


@pytest.fixture
def core(monkeypatch):
    """A stand-in cuda.core recording each launch."""
    launches = []
    mod = types.ModuleType("cuda.core")
    mod.LaunchConfig = lambda **kw: kw
    mod.launch = lambda stream, cfg, kernel, *params: launches.append((stream, cfg, kernel, params))
    pkg = types.ModuleType("cuda")
    pkg.core = mod
    monkeypatch.setitem(sys.modules, "cuda", pkg)
    monkeypatch.setitem(sys.modules, "cuda.core", mod)
    return launches


def _dispatcher(argtypes, kernel="K"):
    cufunc = types.SimpleNamespace(kernel=kernel)
    library = types.SimpleNamespace(get_cufunc=lambda: cufunc)
    compiled = types.SimpleNamespace(_codelibrary=library, argument_types=argtypes)
    return types.SimpleNamespace(overloads={"sig": compiled})


def test_arrays_and_sizes_are_packed_as_numba_packs_them(core):
    k = direct(_dispatcher([_ArrayType(2), _ArrayType(1), _ScalarType("int64"),
                            _ScalarType("float32")]))
    a = _DeviceArray((2, 3), np.float32, 1000)
    b = _DeviceArray((3, 2), np.float64, 2000)
    k(4, 256, "stream", a, FlatView(b), 7, 0.5)
    (stream, cfg, kernel, params), = core
    assert stream == "stream" and kernel == "K"
    assert cfg == {"grid": (4, 1, 1), "block": (256, 1, 1), "shmem_size": 0}
    # meminfo, parent, size, itemsize, data, shape..., strides... per array
    assert list(params[:9]) == [0, 0, 6, 4, 1000, 2, 3, 12, 4]
    assert list(params[9:16]) == [0, 0, 6, 8, 2000, 6, 8]   # the flat view: (6,), (8,)
    assert type(params[16]) is ctypes.c_int64 and params[16].value == 7
    assert type(params[17]) is ctypes.c_float and params[17].value == 0.5
    assert len(params) == 18


def test_a_launch_configuration_is_made_once_per_grid(core):
    k = direct(_dispatcher([_ScalarType("int64")]))
    k(2, 128, 0, 1)
    k(2, 128, 0, 2)
    k(3, 128, 0, 3)
    assert core[0][1] is core[1][1] and core[2][1]["grid"] == (3, 1, 1)


def test_an_array_of_other_rank_is_refused_before_launching(core):
    k = direct(_dispatcher([_ArrayType(1)]))
    with pytest.raises(ValueError, match=r"shape \(2, 3\): expected 1 dims"):
        k(1, 32, 0, _DeviceArray((2, 3), np.float32, 8))
    assert core == []


def test_an_argument_type_it_cannot_pack_leaves_the_dispatcher(core):
    assert direct(_dispatcher([_ScalarType("complex64")])) is None


def test_a_numba_cuda_without_the_compiled_library_leaves_the_dispatcher(core):
    assert direct(types.SimpleNamespace(overloads={})) is None
    assert direct(types.SimpleNamespace(overloads={"s": object()})) is None


def test_without_cuda_core_the_dispatcher_launches(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.core", None)
    assert cuda_direct.direct(_dispatcher([_ScalarType("int64")])) is None


class _Dispatcher:
    """numba's ``kernel[grid, block, stream](*args)``, recording each launch."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, config):
        return lambda *args: self.launches.append((config, args))


def test_a_refused_direct_launch_falls_back_to_the_dispatcher(monkeypatch):
    from tracejit.compiler import cuda_launch

    class _Refusing:
        def __call__(self, *args):
            raise TypeError("foreign stream objects are not accepted")

    monkeypatch.setattr(cuda_launch, "_DIRECT", [True])
    monkeypatch.setattr(cuda_launch, "_kernel_array", lambda a, flat, contiguous=None: a)
    monkeypatch.setattr(cuda_launch, "_max_blocks", lambda: 64)
    spec = types.SimpleNamespace(flatten=[True, True], contiguous=[True, True], block=128,
                                 reduction=None, mode="flat", kept=(0,),
                                 nest=types.SimpleNamespace(sizes=["n"]))
    k = cuda_launch.CudaKernel.__new__(cuda_launch.CudaKernel)
    k.spec, k.fn, k.finish, k.n_arrays, k.n_sizes = spec, _Dispatcher(), None, 2, 1
    k.direct, k.direct_finish = _Refusing(), None
    a, b = _DeviceArray((1000,), np.float32, 64), _DeviceArray((1000,), np.float32, 128)
    a.__cuda_array_interface__ = b.__cuda_array_interface__ = {}
    stream = types.SimpleNamespace(handle=7)
    with pytest.warns(RuntimeWarning, match="numba's dispatcher from now on"):
        k(a, b, 1000, stream=stream)
    assert k.fn.launches == [((8, 128, stream), (a, b, 1000))]
    assert k.direct is None and cuda_launch._DIRECT == [False]
