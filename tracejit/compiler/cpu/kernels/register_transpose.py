"""Register-block transposes that compiled loops call by address: dst (+)= src^T.

``panel_transpose(src, i0, i1, j0, j1, dst, add)`` writes (or adds) dst[j, i] = src[i, j]
for a rectangle of src (R, C) into dst (C, R), in V x V blocks transposed in registers by
two-vector shuffles, the edges element by element. The recurrent loops lay out a step's
operands with it (a strided access would make their vector loops gathers). Compiled once
per process and called by address: inlined at the loops' five call sites, each copy cost
0.3-0.4 s of compile.
"""
from __future__ import annotations

from ..gemm.template_panels import load_by_digest, source_digest, vector_width

__all__ = ["transpose_source", "transpose_module", "transpose_import"]

_SOURCE = '''# tracejit's register-block transposes for {t} (tracejit/compiler/cpu/kernels/register_transpose.py)
import numpy as np
from numba import njit, types as _pt
from numba.extending import intrinsic as _pintrinsic
from llvmlite import ir as _pir

PV = {V}


@_pintrinsic
def _tr_block(typingctx, src, soff, lds, dst, doff, ldd, add):
    # a PV x PV block in registers: dst row i (+)= src column i, by log2(PV) shuffle rounds
    sig = _pt.void(src, soff, lds, dst, doff, ldd, add)

    def codegen(context, builder, sig, args):
        ft = _pir.FloatType() if "{t}" == "float32" else _pir.DoubleType()
        vt = _pir.VectorType(ft, PV)
        tys = sig.args

        def ptr(i, off):
            base = builder.bitcast(context.make_array(tys[i])(context, builder, args[i]).data, ft.as_pointer())
            return builder.gep(base, [context.cast(builder, args[off], tys[off], _pt.int64)])

        def int_(i):
            return context.cast(builder, args[i], tys[i], _pt.int64)

        S, D, lds, ldd = ptr(0, 1), ptr(3, 4), int_(2), int_(5)
        i64 = _pir.IntType(64)

        def row(base, ld, i):
            return builder.bitcast(builder.gep(base, [builder.mul(_pir.Constant(i64, i), ld)]), vt.as_pointer())

        r = [builder.load(row(S, lds, i), align=4) for i in range(PV)]
        s = 1
        while s < PV:
            lo = [e if (e & s) == 0 else PV + e - s for e in range(PV)]
            hi = [e + s if (e & s) == 0 else PV + e for e in range(PV)]
            for i in range(PV):
                if i & s:
                    continue
                a, c = r[i], r[i + s]
                r[i] = builder.shuffle_vector(a, c, _pir.Constant(_pir.VectorType(_pir.IntType(32), PV), lo))
                r[i + s] = builder.shuffle_vector(a, c, _pir.Constant(_pir.VectorType(_pir.IntType(32), PV), hi))
            s *= 2
        keep = context.cast(builder, args[6], tys[6], _pt.boolean)
        for i in range(PV):
            p = row(D, ldd, i)
            with builder.if_else(keep) as (then, other):
                with then:
                    builder.store(builder.fadd(r[i], builder.load(p, align=4)), p, align=4)
                with other:
                    builder.store(r[i], p, align=4)
        return context.get_dummy_value()
    return sig, codegen


@njit(inline='always')
def transpose_part(src, i0, i1, j0, j1, dst, add):
    # dst[j, i] (+)= src[i, j] for rows i0..i1-1 and columns j0..j1-1 of src (R, C), dst
    # (C, R), both C-contiguous: whole blocks from (i0, j0), then the edges element by element
    rows, cols = src.shape
    it, jt = i1 - (i1 - i0) % PV, j1 - (j1 - j0) % PV
    for j in range(j0, jt, PV):         # dst's rows in groups of PV, each written in order
        for i in range(i0, it, PV):
            _tr_block(src, i * cols + j, cols, dst, j * rows + i, rows, add)
    for j in range(jt, j1):
        for i in range(i0, i1):
            dst[j, i] = dst[j, i] + src[i, j] if add else src[i, j]
    for j in range(j0, jt):
        for i in range(it, i1):
            dst[j, i] = dst[j, i] + src[i, j] if add else src[i, j]


# `transpose_part`, called by address by the recurrent loops: inlined at their five call
# sites, each copy cost 0.3-0.4 s of compile.
@njit("void(Array({t}, 2, 'C', readonly=True), int64, int64, int64, int64, {t}[:, ::1], boolean)",
      cache=CACHE, error_model='numpy', boundscheck=False, nogil=True, no_rewrites=True, no_cpython_wrapper=True)
def panel_transpose(src, i0, i1, j0, j1, dst, add):
    transpose_part(src, i0, i1, j0, j1, dst, add)
'''


def transpose_source(dtype: str) -> str:
    """The transpose module's source for `dtype` (this CPU's vector width)."""
    return _SOURCE.replace("{V}", str(vector_width(dtype))).replace("{t}", dtype)


def transpose_module(dtype: str, digest: str):
    """The loaded transpose module for `dtype` (`template_panels.load_by_digest`)."""
    return load_by_digest(transpose_source(dtype), digest, f"register_transpose_{dtype}",
                          f"register_transpose.transpose_module: the transposes' source for {dtype}")


def transpose_import(dtype: str) -> str:
    """Source lines that give a kernel module `panel_transpose` (from `transpose_module`); the
    module's digest is in them, so a changed transpose changes the kernel's source too."""
    return (f"from tracejit.compiler.cpu.kernels.register_transpose import transpose_module as _transpose_module\n"
            f"panel_transpose = _transpose_module({dtype!r}, "
            f"{source_digest(transpose_source(dtype))!r}).panel_transpose\n")
