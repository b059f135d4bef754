"""The generated CUDA sources compiled for a real GPU target, without a GPU.

``numba.cuda.compile_ptx`` needs NVVM (from a CUDA toolkit, or pip's
``nvidia-cuda-nvcc-cu12`` with ``CUDA_HOME=<site-packages>/nvidia/cuda_nvcc``), not a
device; without NVVM these tests skip. They check what the simulator cannot: that
numba's CUDA target types and lowers every generated kernel with its explicit
signature, and that float32 kernels contain no float64 arithmetic.
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

from tracejit.compiler import codegen_cuda
from tracejit.compiler.fusion import Group, partition

from kernel_cases import CPU_ONLY, ELEMENTWISE, cases, graph_of


def _nvvm_available() -> bool:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return False
    try:
        from numba.cuda.cudadrv.nvvm import NVVM
        NVVM()
    except Exception:  # noqa: BLE001 - no toolkit: nothing to compile with
        return False
    return True


pytestmark = [pytest.mark.skipif(not _nvvm_available(), reason="NVVM (a CUDA toolkit) is not installed"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]
# libdevice's own sinf/cosf reduce huge arguments (Payne-Hanek) with one float64 multiply:
# that is the device library, not a promotion in our code (tan is rendered as sin / cos).
_LIBDEVICE_F64 = ("sin", "cos", "tan")

# float64 arithmetic or conversions (moving float64 data around would be fine, but float32
# kernels have none)
_F64 = re.compile(r"^\s*(?:add|sub|mul|div|fma|neg|abs|min|max|sqrt|rcp|cvt)\.\S*f64", re.M)


def _layouts(group, arrays):
    return codegen_cuda.layouts_of(group, arrays)


def test_the_float64_check_sees_a_promotion():
    from numba import cuda

    def promoted(x, out):
        i = cuda.grid(1)
        out[i] = x[i] * 0.3   # a float64 literal: promotes x[i] (0.5 would be folded back to f32)

    ptx, _ = cuda.compile_ptx(promoted, "void(float32[::1], float32[::1])", cc=(8, 0))
    assert _F64.search(ptx)


def _ptx_for(fn, arrays):
    g = graph_of(fn, arrays)
    env = dict(zip(g.inputs, arrays))
    out = []
    for item in partition(g):
        if isinstance(item, Group):
            spec = codegen_cuda.generate(item, _layouts(item, [env[v] for v in item.inputs]))
            out.append((item, spec, codegen_cuda.compile_ptx(spec)))
    return out


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_every_elementwise_primitive_compiles_for_the_device(name):
    for fn, arrays in cases(name):
        compiled = _ptx_for(fn, arrays)
        assert compiled, "no fused group"
        for group, spec, ptx in compiled:
            uses_f64 = any(v.aval.dtype.name == "float64" for v in group.inputs + group.outputs)
            for kname, text in ptx.items():
                assert ".entry" in text
                if not uses_f64 and name not in _LIBDEVICE_F64:
                    assert not _F64.search(text), f"float64 arithmetic in {kname}:\n{spec.source}"


def test_a_cpu_only_primitive_is_refused_by_name():
    import tracejit as tj
    from tracejit.ops.bf16_eager import round_bf16
    assert "round_bf16" in CPU_ONLY and "round_bf16" not in ELEMENTWISE
    x = np.linspace(-2, 2, 12, dtype=np.float32)
    g = graph_of(lambda a: round_bf16(a * 3.0) + 1.0, [x])
    groups = [item for item in partition(g) if isinstance(item, Group)]
    assert groups
    with pytest.raises(NotImplementedError, match="round_bf16 needs the CPU-only helpers"):
        for item in groups:
            codegen_cuda.generate(item, _layouts(item, [x]))
    assert tj.is_tensor(round_bf16(tj.tensor(x)))


def gelu(x, y, z):
    import tracejit as tj
    a = x * y + z
    return 0.5 * a * (1 + tj.tanh(0.79788456 * (a + 0.044715 * a ** 3)))


def test_fused_kernels_compile_for_the_device():
    import tracejit as tj
    f32 = np.float32
    x = np.ones((4, 3), f32)
    b = np.ones(3, f32)
    s = np.array(1.0, f32)
    for fn, arrays in [
        (gelu, [x, x, x]),
        (lambda p, y: ((p - y) ** 2).sum(), [x, x]),                   # full reduction + finish
        (lambda x, b: (x + b).sum(1, keepdim=True), [x, b]),           # partial reduction, nd input
        (lambda x, s: tj.amax(tj.exp(x) * s), [x, s]),                 # scalar operand, max
        (lambda x: ((x > 0).sum(), tj.relu(x)), [x]),                  # bool -> int64 sum
        (lambda x: (x * 3).prod(0), [np.ones((4, 3), np.int32)]),      # int partial reduction
    ]:
        for group, spec, ptx in _ptx_for(fn, arrays):
            for text in ptx.values():
                assert ".entry" in text
            if all(v.aval.dtype.name == "float32" for v in group.inputs):
                assert not any(_F64.search(t) for t in ptx.values()), spec.source


def test_rows_kernels_compile_for_the_device():
    import tracejit as tj
    f32 = np.float32
    x = np.ones((4, 33), f32)
    w = np.ones(33, f32)

    def layer_norm_gelu(x, w, b):
        mu = x.mean(-1, keepdim=True)
        d = x - mu
        r = ((d * d).mean(-1, keepdim=True) + 1e-5).rsqrt()
        return tj.nn.functional.gelu(d * r * w + b), r

    def softmax(x):
        e = (x - x.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True)
    for fn, arrays in [(layer_norm_gelu, [x, w, w]), (softmax, [x])]:
        compiled = _ptx_for(fn, arrays)
        assert [g.rows != [] for g, _, _ in compiled] == [True]
        for group, spec, ptx in compiled:
            assert spec.mode == "rows"
            for kname, text in ptx.items():
                assert ".entry" in text and "bar.sync" in text     # the block's shared fold
                assert not _F64.search(text), f"float64 arithmetic in {kname}:\n{spec.source}"


def test_windows_kernels_compile_for_the_device(monkeypatch):
    import tracejit as tj
    from tracejit.ops.pool_offsets import max_pool2d_scatter
    from tracejit.ops.pooling_prim import avg_pool2d_backward
    from tracejit.compiler.loopnest import operand_layouts
    monkeypatch.setenv("TRACEJIT_WINDOWS", "all")
    F = tj.nn.functional
    f32 = np.float32
    x = np.ones((2, 3, 7, 9), f32)
    a = np.ones((1, 3, 1, 1), f32)
    g = np.ones((2, 3, 4, 5), f32)
    rec = np.zeros((2, 2, 3, 4, 5), f32)

    def bn_relu_max(x, a, b):
        return F.max_pool2d(F.relu(x * a + b), 3, 2, 1)

    def bn_relu_avg(x, a, b):
        return F.avg_pool2d(F.relu(x * a + b), 3, 2, 1)

    def scatter_relu(g, rec, x):
        gx = max_pool2d_scatter(g, rec, x.shape, (3, 3), (2, 2), (1, 1))
        return tj.where(x > 0, gx, gx * 0.5)

    def avg_backward(g):
        return avg_pool2d_backward(g, x.shape, (3, 3), (2, 2), (1, 1)) * 2.0
    for fn, arrays in [(bn_relu_max, [x, a, a]), (bn_relu_avg, [x, a, a]), (scatter_relu, [g, rec, x]),
                       (avg_backward, [g])]:
        (group,) = [it for it in partition(graph_of(fn, arrays))
                    if isinstance(it, Group) and it.window is not None]
        assert group.eqns, fn.__name__             # elementwise work fused in front or behind
        spec = codegen_cuda.generate(group, operand_layouts(group))
        ptx = codegen_cuda.compile_ptx(spec)
        for kname, text in ptx.items():
            assert ".entry" in text
            assert not _F64.search(text), f"float64 arithmetic in {kname}:\n{spec.source}"
