"""The CUDA renderer's source: readable, typed, keyed by structure not size.

What a kernel computes and how it is called is the loop nest's (test_loopnest.py); these
check how the CUDA renderer writes it. Source-level checks only (no ``numba.cuda``
import here): running the kernels is
tests/cuda/sim_kernels.py (numba's simulator, in a subprocess), compiling them for a
real GPU target is tests/cuda/test_cuda_ptx.py.
"""
from __future__ import annotations

import ast
import os
import re

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler import codegen_cuda
from tracejit.compiler.loopnest import lower, operand_layouts
from inputs import fused_groups, gelu




def _spec(fn, *avals, layouts=None, **kw):
    (grp,) = fused_groups(fn, *avals)
    if layouts is None:
        layouts = operand_layouts(grp)
    return codegen_cuda.generate(grp, layouts, **kw)




F32 = "float32"
_FLOAT_LITERAL = re.compile(r"(?<![\w.])(\d+\.\d*(?:e[-+]?\d+)?|\d+e[-+]?\d+|math\.(?:nan|inf))")


def _kernel_body(source: str) -> str:
    return source[source.index("def kernel("):]


def _untyped_float_literals(source: str, ctype: str) -> list:
    body = _kernel_body(source)
    bad = []
    for m in _FLOAT_LITERAL.finditer(body):
        before = body[max(0, m.start() - len(ctype) - 2):m.start()]
        if not (before.endswith(f"{ctype}(") or before.endswith(f"{ctype}(-")):
            bad.append(body[max(0, m.start() - 20):m.end() + 5])
    return bad


def test_gelu_source_is_readable_and_float32():
    spec = _spec(gelu, ((64, 8), F32), ((64, 8), F32), ((64, 8), F32))
    src = spec.source
    ast.parse(src)
    assert spec.mode == "flat" and spec.reduction is None
    where = os.path.basename(gelu.__code__.co_filename)   # the user's file: tests/inputs.py
    for op in ("mul", "add", "pow", "tanh"):
        assert f"  # {op}\n" in src
    assert where not in src   # the source is the kernel's identity: by structure, not by line
    assert "float32(0.044715)" in src and "float32(0.79788456)" in src
    assert "(v1 * v1 * v1)" in src            # a ** 3 as multiplications
    assert "for i in range(cuda.grid(1), n, cuda.gridsize(1)):" in src
    assert "float64" not in src
    assert _untyped_float_literals(src, "float32") == []
    # device math through `math`, numpy's ufuncs only in the simulator branch
    assert "from math import tanh" in src and "tanh = np.tanh" in src
    assert "cache=CACHE" in src


def test_signature_follows_the_calling_convention():
    spec = _spec(gelu, ((64, 8), F32), ((64, 8), F32), ((64, 8), F32))
    assert spec.nest.flat and spec.nest.arguments() == ["in0", "in1", "in2", "out0", "n"]
    sig = spec.signatures["kernel"]
    assert sig == "void(float32[::1], float32[::1], float32[::1], float32[::1], int64)"
    assert "def kernel(in0, in1, in2, out0, n):" in spec.source
    assert spec.flatten == (True, True, True, True)
    from numba.core import sigutils
    for s in spec.signatures.values():
        sigutils.normalize_signature(s)


def test_kernels_are_keyed_by_structure_not_size():
    small = _spec(gelu, ((10,), F32), ((10,), F32), ((10,), F32)).source
    big = _spec(gelu, ((99999,), F32), ((99999,), F32), ((99999,), F32)).source
    assert small == big
    assert "10" not in re.sub(r"0\.\d+|\d+\.\d+", "", _kernel_body(small))
    f = lambda x, b: x + b  # noqa: E731
    row = _spec(f, ((4, 3), F32), ((3,), F32)).source
    assert row == _spec(f, ((40, 7), F32), ((7,), F32)).source
    col = _spec(f, ((4, 3), F32), ((4, 1), F32)).source
    assert row != col                                     # broadcast pattern
    assert row != _spec(f, ((4, 3), "float64"), ((3,), "float64")).source   # dtype
    assert _spec(gelu, ((4, 3), F32), ((4, 3), F32), ((4, 3), F32), layouts=("nd", "flat", "flat")).source \
        != _spec(gelu, ((4, 3), F32), ((4, 3), F32), ((4, 3), F32)).source  # layout


def test_broadcast_operands_use_nd_indexing():
    spec = _spec(lambda x, b, c: x * b + c, ((4, 3), F32), ((3,), F32), ((4, 1), F32))
    assert spec.mode == "nd" and spec.nest.arguments()[-2:] == ["d0", "d1"]
    assert [op.index for op in spec.nest.operands] == [(0, 1), (1,), (0, None)]
    assert spec.nest.layouts == ("flat", "ndc", "ndc")
    assert spec.flatten == (True, False, False, True)
    assert spec.contiguous == (True, True, True, True)
    assert "float32[::1]" in spec.signatures["kernel"] and "float32[:, ::1]" in spec.signatures["kernel"]
    strided = _spec(lambda x, b, c: x * b + c, ((4, 3), F32), ((3,), F32), ((4, 1), F32),
                    layouts=("flat", "nd", "nd"))
    assert strided.contiguous == (True, False, False, True)
    assert "float32[:, :]" in strided.signatures["kernel"]


def test_full_reduction_uses_block_partials_and_a_finish_kernel():
    spec = _spec(lambda p, y: ((p - y) ** 2).sum(), ((100,), F32), ((100,), F32))
    src = spec.source
    assert spec.reduction == "full" and spec.finish_name == "kernel_finish"
    assert f"cuda.shared.array({codegen_cuda.BLOCK}, float32)" in src
    assert "partial[cuda.blockIdx.x] = buf[0]" in src and "def kernel_finish(partial, red, nparts):" in src
    assert spec.nest.reduction.acc_dtype == "float32"     # a tree: see loopnest.accumulation
    assert "acc = float32(0.0)" in src and "float64" not in src
    assert "atomic" not in src
    assert set(spec.signatures) == {"kernel", "kernel_finish"}
    small = _spec(lambda p, y: ((p - y) ** 2).sum(), ((100,), F32), ((100,), F32), block=64).source
    assert "cuda.shared.array(64, float32)" in small
    with pytest.raises(ValueError):
        _spec(lambda p, y: ((p - y) ** 2).sum(), ((100,), F32), ((100,), F32), block=48)


def test_max_reduction_keeps_nan():
    src = _spec(lambda x: tj.amax(x * 2.0), ((100,), F32)).source
    assert "acc = float32(-math.inf)" in src
    assert "acc = v0 if (v0 > acc or v0 != v0) else acc" in src
    assert "a = b if (b > a or b != b) else a" in src


def test_partial_reduction_is_one_thread_per_output():
    spec = _spec(lambda x, b: (x + b).sum(1, keepdim=True), ((5, 7), F32), ((7,), F32))
    src = spec.source
    assert spec.mode == "partial" and spec.kept == (0,)
    assert "for k in range(cuda.grid(1), m, cuda.gridsize(1)):" in src
    assert "for i1 in range(d1):" in src and "red[i0] = acc" in src
    assert "shared" not in src
    assert spec.flatten == (False, False, False)


def test_integer_and_bool_groups_stay_integer():
    spec = _spec(lambda x: (x > 0).sum(), ((100,), F32))
    assert spec.nest.reduction.acc_dtype == "int64" and "acc = int64(0)" in spec.source
    spec = _spec(lambda x: (x * 3 + 1).sum(), ((100,), "int32"))
    src = spec.source
    assert "int32(3)" in src and "float" not in _kernel_body(src)


def test_no_math_no_simulator_prelude():
    src = _spec(lambda x, y: x * y + 1.0, ((8,), F32), ((8,), F32)).source
    assert "ENABLE_CUDASIM" not in src
    src = _spec(lambda x: tj.erf(x) + tj.sigmoid(x), ((8,), F32)).source
    assert "def erf(x):" in src and "from math import erf, exp" in src


def test_float64_groups_use_float64_constants():
    src = _spec(gelu, ((8,), "float64"), ((8,), "float64"), ((8,), "float64")).source
    assert "float64(0.044715)" in src and "float32" not in _kernel_body(src)
    assert _untyped_float_literals(src, "float64") == []


def test_run_group_calls_like_a_plan():
    # the reference driver's layouts are the plan's (loopnest.operand_layouts)
    (grp,) = fused_groups(lambda x, b: x * b, ((4, 3), F32), ((3,), F32))
    x, b = np.ones((4, 3), np.float32), np.ones(3, np.float32)
    assert codegen_cuda.layouts_of(grp, [x, b]) == ("flat", "ndc") == operand_layouts(grp)
    assert codegen_cuda.layouts_of(grp, [np.ones((3, 4), np.float32).T, b]) == ("nd", "ndc")
    assert codegen_cuda.layouts_of(grp, [x, np.ones(6, np.float32)[::2]]) == ("flat", "nd")


def test_sigmoid_is_the_numerically_stable_formula():
    # exp only ever sees -|x|: no overflow to inf for large negative x (1/(1+exp(-x)) has it)
    src = _spec(lambda x: tj.sigmoid(x), ((8,), F32)).source
    assert "exp(-abs(x0))" in src and "exp(-x0)" not in src
    assert "float32(1.0) if x0 >= float32(0.0) else" in src
    em = codegen_cuda.CudaEmitter("float32")         # no libdevice softplus: the formula too
    assert em.call("softplus", "x") == "((x if x > float32(0.0) else float32(0.0)) + log1p(exp(-abs(x))))"
    assert em.functions == {"exp", "log1p"}


@pytest.mark.parametrize("fn, aval, helper", [
    (lambda x: (x * 2.0).to(tj.bfloat16), ((8,), F32), "f32_to_bf16"),          # a store to bf16
    (lambda x: x.float() * 2.0, ((8,), "bfloat16"), "bf16_to_f32"),            # a load from bf16
    (lambda x: tj.softmax(x.float(), -1), ((4, 8), "bfloat16"), "bf16_to_f32"),  # a rows kernel
])
def test_a_group_needing_cpu_only_helpers_is_refused_by_name(fn, aval, helper):
    # bf16 words go through the CPU's LLVM intrinsics: a CUDA module would call them undefined
    (grp,) = fused_groups(fn, aval)
    with pytest.raises(NotImplementedError, match=f"cast needs the CPU-only helpers {helper}: the CUDA"):
        codegen_cuda.generate(grp, operand_layouts(grp))


def test_round_bf16_is_refused_by_name():
    from tracejit.ops.bf16_eager import round_bf16
    (grp,) = fused_groups(lambda x: round_bf16(x * 3.0) + 1.0, ((12,), F32))
    with pytest.raises(NotImplementedError, match="round_bf16 needs the CPU-only helpers bf16_to_f32, f32_to_bf16"):
        codegen_cuda.render(lower(grp, operand_layouts(grp), "kernel", sequential_sums=False))
