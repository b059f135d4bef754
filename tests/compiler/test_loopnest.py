"""The loop-nest description (compiler/loopnest.py): what a fused group's kernel computes
and how it is called, decided once for every backend; and the math table both
backends pick their transcendentals from (compiler/mathnames.py)."""
from __future__ import annotations

import math

import pytest

import tracejit as tj
from tracejit.compiler import codegen_cpu, codegen_cuda
from tracejit.compiler.emitter import render_steps
from tracejit.compiler.loopnest import Const, accumulation, lower, operand_layouts
from tracejit.compiler.mathnames import FORMULAS, MATH, OPS
from inputs import fused_groups

F32 = "float32"


def _group(fn, *avals):
    (grp,) = fused_groups(fn, *avals)
    return grp


def _nest(fn, *avals, layouts=None, sequential_sums=True):
    grp = _group(fn, *avals)
    return lower(grp, operand_layouts(grp) if layouts is None else layouts, sequential_sums=sequential_sums)


def test_operand_layouts_and_index_expressions():
    grp = _group(lambda x, b, c, s: (x * b + c) * s, ((4, 3), F32), ((3,), F32), ((4, 1), F32), ((), F32))
    assert operand_layouts(grp) == ("flat", "ndc", "ndc", "scalar")
    assert operand_layouts(grp, [False, False, True, True]) == ("nd", "nd", "ndc", "scalar")
    nest = lower(grp, operand_layouts(grp))
    assert [op.index for op in nest.operands] == [(0, 1), (1,), (0, None), ()]
    assert [op.contiguous for op in nest.operands] == [True, True, True, True]
    assert not nest.flat and nest.mode == "nested"
    with pytest.raises(ValueError, match="layouts"):
        lower(grp, ("flat",))


def test_calling_convention():
    flat = _nest(lambda x, y: (x * y, (x * y).sum()), ((4, 3), F32), ((4, 3), F32))
    assert flat.flat and flat.sizes == ["n"]
    assert flat.arguments() == ["in0", "in1", "out0", "red", "n"]
    assert [flat.arg_rank(k) for k in range(2)] == [1, 1] and flat.red_rank == 1
    rows = _nest(lambda x, b: (x + b).sum(1), ((4, 3), F32), ((3,), F32))
    assert not rows.flat and rows.arguments() == ["in0", "in1", "red", "d0", "d1"]
    assert rows.arg_rank(0) == 2 and rows.red_rank == 1
    assert rows.reduction.kept == (0,) and rows.reduction.dims == (1,) and not rows.reduction.leading
    cols = _nest(lambda x, b: (x + b).sum(0), ((4, 3), F32), ((3,), F32))
    assert cols.reduction.leading and not cols.reduction.full


def test_steps_carry_the_compute_dtype_and_typed_constants():
    nest = _nest(lambda x: tj.where(x > 0.5, x, 2), ((8,), F32))
    gt, where = nest.steps
    assert gt.prim.name == "gt" and gt.args == ("x0", Const(0.5, F32)) and gt.dtype == F32
    # where computes in its output's dtype (its record says so) and types its literal so
    assert where.prim.name == "where" and where.dtype == F32 and where.args[2] == Const(2, F32)
    assert nest.outputs[0].value == "v1"
    lines, _ = render_steps(nest, codegen_cpu.CpuEmitter)
    # (both branches converted to the compute dtype: numba's conditional of an integer and
    # a float32 would be a float64)
    assert lines[1].startswith("v1 = (np.float32(x0) if v0 else np.float32(2.0))  # where")


def test_expand_is_a_broadcast_read_by_its_record():
    nest = _nest(lambda x, y: x.expand(4, 3) * y, ((1, 3), F32), ((4, 3), F32))
    assert [st.prim.name for st in nest.steps] == ["expand", "mul"]
    assert nest.operands[0].index == (None, 1)          # read at 0 on the broadcast dim
    cpu, _ = render_steps(nest, codegen_cpu.CpuEmitter)
    cuda, _ = render_steps(nest, codegen_cuda.CudaEmitter)
    assert cpu[0].startswith("v0 = x0  # expand") and cuda[0].startswith("v0 = x0  # expand")


@pytest.mark.parametrize("combine,dtype,sequential,acc", [
    ("add", "float32", True, "float64"),     # CPU: long sequential runs widen
    ("add", "float32", False, "float32"),    # CUDA: a tree of short runs keeps float32
    ("mul", "float32", True, "float64"),
    ("add", "float64", False, "float64"),
    ("add", "int32", False, "int64"),        # numpy's rule for integer sums
    ("add", "bool", True, "int64"),
    ("max", "float32", True, "float32"),     # max/min are exact
    ("min", "int8", True, "int8"),
])
def test_accumulation_rule(combine, dtype, sequential, acc):
    assert accumulation(combine, dtype, sequential) == acc


def test_one_description_for_both_backends():
    grp = _group(lambda p, y: ((p - y) ** 2).sum(), ((100,), F32), ((100,), F32))
    cpu = lower(grp, operand_layouts(grp), sequential_sums=True)
    gpu = lower(grp, operand_layouts(grp), sequential_sums=False)
    assert cpu.steps == gpu.steps and cpu.operands == gpu.operands and cpu.flat == gpu.flat
    assert (cpu.reduction.acc_dtype, cpu.reduction.block_dtype) == ("float64", "float32")
    assert (gpu.reduction.acc_dtype, gpu.reduction.block_dtype) == ("float32", None)
    assert codegen_cpu.render(cpu).nest is cpu and codegen_cuda.render(gpu).nest is gpu


@pytest.mark.parametrize("fn,avals", [
    (lambda x, b: tj.tanh(x * b), (((4, 3), F32), ((3,), F32))),        # nested map
    (lambda x, b: (x * b).sum(0), (((4, 3), F32), ((3,), F32))),        # column blocks
    (lambda x, b: (x * b).sum(1), (((4, 3), F32), ((3,), F32))),        # rows
])
def test_serial_twin_has_the_same_loops(fn, avals):
    nest = _nest(fn, *avals)
    par, ser = codegen_cpu.render(nest, True), codegen_cpu.render(nest, False)
    assert par.form == ser.form
    body = lambda s: s.source[s.source.index('"""fused'):]  # noqa: E731
    if nest.reduction is None:
        assert body(ser) == body(par).replace("prange(", "range(")
    else:
        # the parallel variant calls the inlined element helper; the loops are the same
        assert [ln.split("=")[0] for ln in body(ser).splitlines() if "for " in ln] == \
            [ln.split("=")[0].replace("prange(", "range(") for ln in body(par).splitlines() if "for " in ln]
    assert "prange" not in ser.source and "parallel=False" in ser.source


def test_math_table_is_the_one_list():
    from tracejit.compiler import mathlib
    assert set(OPS) == {name for name, fn in MATH.items() if fn.cpu == "mathlib"}
    assert all(hasattr(mathlib, mathlib.function_name(op, "float32")) for op in OPS)
    for name, fn in MATH.items():
        if fn.cuda == "formula":
            assert name in FORMULAS
        else:
            assert hasattr(math, name), name        # numba's math.<name>: libdevice on the device
    with pytest.raises(NotImplementedError, match="no math function"):
        codegen_cpu.CpuEmitter(F32).call("gamma", "x")


def test_groups_of_one_structure_at_two_lines_have_one_source_and_compile_once():
    """A kernel's source is its disk-cache key and its compile job: it names each step's
    op, not the user's line, so the same structure written twice (an MLP's two LayerNorms)
    compiles once; errors and explain name the lines from the group."""
    import numpy as np
    from tracejit.compiler import diskcache

    def f(x, w):
        a = (x * 1.8359375).tanh()
        b = a @ w
        return (b * 1.8359375).tanh()
    cf = tj.trace(f, compile="sync")
    rng = np.random.default_rng(2)
    x, w = (tj.tensor(rng.standard_normal((5, 5)).astype(np.float32)) for _ in range(2))
    before = diskcache.stats()["compiles"]
    np.testing.assert_allclose(cf(x, w).numpy(), f(x, w).numpy(), rtol=1e-5, atol=1e-6)
    plan = cf._entries[-1].executor.infer_plan()
    srcs = plan.kernel_sources()
    assert len(plan.kernels) == 2 and len(srcs) == 2 and srcs[0] == srcs[1]
    assert "# mul" in srcs[0] and "test_loopnest.py" not in srcs[0]
    assert diskcache.stats()["compiles"] - before <= 1        # the second is the first's module
    assert "test_loopnest.py:" in cf.explain(x, w)["fusion groups (inference)"]
