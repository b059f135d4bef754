"""A recurrent layer's per-step GEMM on weights packed once per layer call: numba source
that kernel modules include (``PACKED_SOURCE``), with its register tile chosen for the CPU.

Why: a layer's time loop multiplies the same weights by a new small state block at every
step (LSTM LM: (4H, H) = 1024 x 256 by (H, N) = 256 x 32). A BLAS GEMM packs both operands
at each call, and packing the 1 MB weight matrix is a third of the call: numpy's OpenBLAS
takes 150 us for that product on one thread, PyTorch's MKL ~100 us (near the core's FMA
peak). Here the weights are packed once per layer call into panels of MR rows, k-major
(``pack_panels``: panel p holds rows p*MR .. p*MR+MR-1, each k's MR values adjacent), and
each step runs a register tile (MR rows x NV vectors of columns, accumulated over all of
K in registers) written as LLVM vector IR (``_tile_NV``): one broadcast weight and NV
FMAs per row and k. The state block is read in place (its rows are the k rows), so a
step packs nothing. Columns left over (N not a multiple of the vector width) run a
scalar loop.

Results differ from BLAS's in the last bits (another summation order), as BLAS's own do
between thread counts.
"""
from __future__ import annotations

__all__ = ["PACKED_SOURCE", "PRODUCT_SOURCE", "product_module", "product_import", "product_source", "tile_shape", "with_tile", "padded_rows", "packed_size"]


# The answer of `_ask_avx512`, once per process: llvmlite's host-feature query builds
# LLVM's whole feature map each time (0.2-0.5 ms a call), and the LSTM layer ops ask for the
# tile's shape (padded_rows, packed_size) in every call, eight times a step of the LSTM LM.
_AVX512: list = []


def _has_avx512() -> bool:
    if not _AVX512:
        _AVX512.append(_ask_avx512())
    return _AVX512[0]


def _ask_avx512() -> bool:
    try:
        from ...buildfacts import numba_facts
        features = numba_facts()[2]
        if isinstance(features, str) and features:
            return "+avx512f" in features
        import llvmlite.binding as ll
        return bool(ll.get_host_cpu_features().get("avx512f", False))
    except Exception:   # unknown CPU: the tile that fits 16 vector registers
        return False


def tile_shape(dtype: str) -> tuple:
    """(V, MR, NV): vector width in elements, rows and vectors of columns of the register
    tile: MR*NV accumulators and NV+1 vectors in flight fit the register file (32 vector
    registers with AVX-512, 16 without)."""
    bytes_ = 4 if dtype == "float32" else 8
    if _has_avx512():
        return 64 // bytes_, 8, 2
    return 32 // bytes_, 4, 2


# {V}, {MR}: the tile; ``{t}`` the dtype. ``pack_panels(w, wp, trans)``: wp (P*MR*K,) the
# rows of w (M, K) (or of w^T) in panels (rows past M are zero); ``packed_gemm(wp, M, K, b, c, beta)``:
# c (M.., N) = w b + beta c for b (K, N), c with at least ceil(M/MR)*MR rows (the
# padding rows are written too: callers give scratch room for them).
PACKED_SOURCE = '''
from numba import types as _pt
from numba.extending import intrinsic as _pintrinsic
from llvmlite import ir as _pir

PV, PMR = {V}, {MR}


def _make_tile(mr, widths, fused=True):
    # c (mr rows x sum(widths) columns) (+)= a @ b over k: a's element (r, k) at
    # a + aoff + r*ars + k*aks (packed weights: ars 1, aks PMR; a row-major matrix: ars
    # its row length, aks 1; a transposed one's: the other way round), b's row k at
    # b + boff + k*ldb. One vector accumulator per row and width (widths of PV, or of a
    # narrower power of two for a column rest), one broadcast a value per row and k.
    # Not `fused`: a multiply and an add instead of an FMA (the bits of a scalar loop).
    @_pintrinsic
    def tile(typingctx, a, aoff, ars, aks, b, boff, ldb, c, coff, ldc, k, beta):
        sig = _pt.void(a, aoff, ars, aks, b, boff, ldb, c, coff, ldc, k, beta)

        def codegen(context, builder, sig, args):
            from numba.core import cgutils
            ft = _pir.FloatType() if "{t}" == "float32" else _pir.DoubleType()
            i64 = _pir.IntType(64)
            tys = sig.args

            def data(i):
                return builder.bitcast(context.make_array(tys[i])(context, builder, args[i]).data,
                                       ft.as_pointer())

            def int_(i):
                return context.cast(builder, args[i], tys[i], _pt.int64)

            A = builder.gep(data(0), [int_(1)])
            ars, aks = int_(2), int_(3)
            B = builder.gep(data(4), [int_(5)])
            C = builder.gep(data(7), [int_(8)])
            ldb, ldc, K = int_(6), int_(9), int_(10)
            vts = [_pir.VectorType(ft, w) for w in widths]
            offs = [sum(widths[:v]) for v in range(len(widths))]
            accs = []
            for r in range(mr):
                row = []
                for vt in vts:
                    acc = cgutils.alloca_once(builder, vt)
                    builder.store(_pir.Constant(vt, None), acc)
                    row.append(acc)
                accs.append(row)
            fmas = [cgutils.get_or_insert_function(
                builder.module, _pir.FunctionType(vt, [vt, vt, vt]),
                "llvm.fma.v%d%s" % (vt.count, "f32" if "{t}" == "float32" else "f64")) for vt in vts]
            arows = [builder.gep(A, [builder.mul(_pir.Constant(i64, r), ars)]) for r in range(mr)]
            with cgutils.for_range(builder, K) as loop:
                kk = loop.index
                brow = builder.gep(B, [builder.mul(kk, ldb)])
                bv = [builder.load(builder.bitcast(builder.gep(brow, [_pir.Constant(i64, o)]), vt.as_pointer()),
                                   align=4) for vt, o in zip(vts, offs)]
                ko = builder.mul(kk, aks)
                for r in range(mr):
                    w = builder.load(builder.gep(arows[r], [ko]))
                    for v, vt in enumerate(vts):
                        mask = _pir.Constant(_pir.VectorType(_pir.IntType(32), vt.count), [0] * vt.count)
                        ws = builder.shuffle_vector(builder.insert_element(_pir.Constant(vt, _pir.Undefined), w,
                                                                           _pir.Constant(_pir.IntType(32), 0)),
                                                    _pir.Constant(vt, _pir.Undefined), mask)
                        if fused:
                            acc = builder.call(fmas[v], [ws, bv[v], builder.load(accs[r][v])])
                        else:
                            acc = builder.fadd(builder.load(accs[r][v]), builder.fmul(ws, bv[v]))
                        builder.store(acc, accs[r][v])
            keep = context.cast(builder, args[11], tys[11], _pt.boolean)
            for r in range(mr):
                crow = builder.gep(C, [builder.mul(_pir.Constant(i64, r), ldc)])
                for v, vt in enumerate(vts):
                    p = builder.bitcast(builder.gep(crow, [_pir.Constant(i64, offs[v])]), vt.as_pointer())
                    acc = builder.load(accs[r][v])
                    with builder.if_then(keep):
                        builder.store(builder.fadd(acc, builder.load(p, align=4)), accs[r][v])
                    builder.store(builder.load(accs[r][v]), p, align=4)
            return context.get_dummy_value()
        return sig, codegen
    return tile



_tile_2 = _make_tile(PMR, (PV, PV))
_tile_1 = _make_tile(PMR, (PV,))
# a column left over (N not a multiple of PV), MR rows at once: what a scalar loop per element
# computes (s = 0, s += a b in k order, then s + c with beta), bit for bit, in one small loop
# (the scalar loops per row that it replaces LLVM unrolled MR times, twice: 3,000 of
# `panel_product`'s 4,700 instructions and most of its compile time)
_tile_r = _make_tile(PMR, (1,), False)


@_pintrinsic
def _tr_block(typingctx, src, soff, lds, dst, doff, ldd, add):
    # a PV x PV block in registers: dst row i (+)= src column i, by log2(PV) rounds of
    # two-vector shuffles (row i and i + s trade their odd s-blocks)
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
def transpose_blocks(src, dst, add):
    # dst (C, R) (+)= src (R, C)^T, both C-contiguous: whole PV x PV blocks in registers,
    # the edges element by element
    rows, cols = src.shape
    transpose_part(src, 0, rows, 0, cols, dst, add)


@njit(inline='always')
def transpose_part(src, i0, i1, j0, j1, dst, add):
    # dst[j, i] (+)= src[i, j] for rows i0..i1-1 and columns j0..j1-1 of src (R, C), dst
    # (C, R), both C-contiguous: one thread's share of `transpose_blocks`, whole blocks
    # from (i0, j0)
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


@njit(inline='always')
def pack_panels(w, wp, trans):
    # the rows of w (M, K), or with `trans` of w^T (w (K, M), read along its rows: no
    # transposed copy first), in panels: wp[(p*K + k)*MR + r] = row p*MR + r's k-th value;
    # rows past M zero
    m = w.shape[1] if trans else w.shape[0]
    pack_panel_range(w, wp, trans, 0, (m + PMR - 1) // PMR)


@njit(inline='always')
def pack_panel_range(w, wp, trans, p0, p1):
    # panels p0 .. p1-1 of `pack_panels` (one thread's share)
    pack_panel_columns(w, wp, trans, p0, p1, 0, w.shape[0] if trans else w.shape[1])


@njit(inline='always')
def pack_panel_columns(w, wp, trans, p0, p1, k0, kd):
    # `pack_panel_range` of w's columns as columns k0 .. of a wider matrix with kd columns
    # (the panels of [a | b] from a and b without the concatenated copy)
    if trans:
        kw, m = w.shape
    else:
        m, kw = w.shape
    for p in range(p0, p1):
        for k in range(kw):
            base = (p * kd + k0 + k) * PMR
            for r in range(PMR):
                i = p * PMR + r
                if i >= m:
                    wp[base + r] = 0
                else:
                    wp[base + r] = w[k, i] if trans else w[i, k]


@njit(inline='always')
def packed_gemm(wp, m, kd, b, c, beta):
    # c[:P*MR] = w b (+ c with beta): b (K, N) and c C-contiguous
    packed_gemm_panels(wp, 0, (m + PMR - 1) // PMR, kd, b, c, beta)


@njit(inline='always')
def packed_gemm_panels(wp, p0, p1, kd, b, c, beta):
    # rows p0*MR .. p1*MR-1 of `packed_gemm` (one thread's share)
    packed_gemm_kpart(wp, p0, p1, kd, 0, kd, b, c, beta)


@njit(inline='always')
def packed_gemm_kpart(wp, p0, p1, kd, k0, k1, b, c, beta):
    # `packed_gemm_panels` over the packed weights' columns k0..k1-1 only, b (k1 - k0, N)
    # their rows of the right operand: a part of the product [w1 | w2] [b1 ; b2] from b1
    # or b2 alone
    n = b.shape[1]
    kk = k1 - k0
    j = 0
    while j + 2 * PV <= n:
        for p in range(p0, p1):
            _tile_2(wp, (p * kd + k0) * PMR, 1, PMR, b, j, n, c, p * PMR * n + j, n, kk, beta)
        j += 2 * PV
    while j + PV <= n:
        for p in range(p0, p1):
            _tile_1(wp, (p * kd + k0) * PMR, 1, PMR, b, j, n, c, p * PMR * n + j, n, kk, beta)
        j += PV
    while j < n:
        for p in range(p0, p1):
            _tile_r(wp, (p * kd + k0) * PMR, 1, PMR, b, j, n, c, p * PMR * n + j, n, kk, beta)
        j += 1
'''


# `packed_gemm_kpart` as a function of its own, called by address (`voidptr.call_at`) from
# the LSTM's and the GRU's whole-loop kernels (compiler/cpu/kernels/lstm_kernels.py) instead of inlined: LLVM
# optimises and emits its register tiles once, in their own function, not inside each loop kernel (the
# backward's compile: the tiles inlined were ~1 s of its CPU). A module of its own
# (`product_module`), which the loop kernels' modules load (`product_import`): compiled once
# per process for all four loops. Needs ``CACHE`` and PACKED_SOURCE before it.
PRODUCT_SOURCE = '''
# (no_rewrites: numba's IR rewrite passes find nothing to do here but scan: ~0.03 s of the
# module's compile, the same machine code)


@njit("void({t}[::1], int64, int64, int64, int64, int64, Array({t}, 2, 'C', readonly=True), {t}[:, ::1], "
      "boolean)", cache=CACHE, error_model='numpy', boundscheck=False, nogil=True, no_rewrites=True)
def panel_product(wp, p0, p1, kd, k0, k1, b, c, beta):
    packed_gemm_kpart(wp, p0, p1, kd, k0, k1, b, c, beta)


# `pack_panel_columns` of w (panel_pack) and of w^T (panel_pack_t), called by address by the
# loops as the product is: inlined, each loop's one pack cost 0.15-0.4 s of its compile
# (LLVM's copies of the vectorized pack loop). The same loops, `trans` a constant in each.
# No CPython wrappers (0.12 s of compile each): only called by address; from Python they
# would crash (`pack_panels` is the pack to call there).
@njit("void(Array({t}, 2, 'C', readonly=True), {t}[::1], int64, int64, int64, int64)", cache=CACHE,
      error_model='numpy', boundscheck=False, nogil=True, no_rewrites=True, no_cpython_wrapper=True)
def panel_pack(w, wp, p0, p1, k0, kd):
    pack_panel_columns(w, wp, False, p0, p1, k0, kd)


@njit("void(Array({t}, 2, 'C', readonly=True), {t}[::1], int64, int64, int64, int64)", cache=CACHE,
      error_model='numpy', boundscheck=False, nogil=True, no_rewrites=True, no_cpython_wrapper=True)
def panel_pack_t(w, wp, p0, p1, k0, kd):
    pack_panel_columns(w, wp, True, p0, p1, k0, kd)


# `transpose_part`, called by address by the LSTM's and the GRU's loops as the product is:
# inlined at the loops' five call sites (three in the LSTM's backward), each copy's untyped
# inlining, typing and LLVM work cost 0.3-0.4 s of the loop's compile (the LSTM backward's
# module: 3.4 -> 2.2 s CPU without its three). Once here, for every loop of the process.
@njit("void(Array({t}, 2, 'C', readonly=True), int64, int64, int64, int64, {t}[:, ::1], boolean)",
      cache=CACHE, error_model='numpy', boundscheck=False, nogil=True, no_rewrites=True, no_cpython_wrapper=True)
def panel_transpose(src, i0, i1, j0, j1, dst, add):
    transpose_part(src, i0, i1, j0, j1, dst, add)
'''

_PRODUCT_MODULE = '''# tracejit's product of packed panels for {t}, shared by the recurrent loops' kernels (tracejit/compiler/cpu/gemm/packed_gemm.py)
import numpy as np
from numba import njit
''' + PACKED_SOURCE + PRODUCT_SOURCE


def product_source(dtype: str) -> str:
    """The source of `panel_product`'s module for `dtype` (this CPU's tile)."""
    return with_tile(_PRODUCT_MODULE, dtype).replace("{t}", dtype)


def source_digest(source: str) -> str:
    """A short digest of a shared module's source, put in its importers' sources (`load_by_digest`)."""
    import hashlib
    return hashlib.sha256(source.encode()).hexdigest()[:20]


def load_by_digest(source: str, digest: str, name_hint: str, what: str):
    """The loaded module of `source` (compiled into the disk cache on its first use in the
    process), for a kernel module that calls its functions by address; `digest` is that of the
    source the importer was made with (`source_digest`): one compiled against another source
    (another tile, another version) must not load, since it would call the functions at their
    addresses with that one's arguments. `what` names the shared module in the error."""
    from ... import diskcache
    if source_digest(source) != digest:
        raise RuntimeError(f"{what} changed (digest {source_digest(source)}, the importer's {digest})")
    return diskcache.load_module(source, name_hint=name_hint)


def product_module(dtype: str, digest: str):
    """The loaded module of `panel_product` for `dtype`, for the recurrent loops' kernels
    (`load_by_digest`: `digest` is that of the product's source the kernel was made with)."""
    return load_by_digest(product_source(dtype), digest, f"packed_product_{dtype}",
                          f"packed_gemm.product_module: the product's source for {dtype}")


def product_import(dtype: str) -> str:
    """Source lines that give a kernel module `panel_product`, `panel_pack`, `panel_pack_t` and
    `panel_transpose` (from `product_module`), `call_at` and `native_address`; the product's digest is in them,
    so a changed product changes the kernel's source (and disk cache key) too."""
    return (f"\nfrom tracejit.compiler.cpu.runtime.voidptr import call_at, native_address\n"
            f"from tracejit.compiler.cpu.gemm.packed_gemm import product_module as _product_module\n"
            f"_product = _product_module({dtype!r}, {source_digest(product_source(dtype))!r})\n"
            f"panel_product, panel_pack, panel_pack_t, panel_transpose = _product.panel_product, "
            f"_product.panel_pack, _product.panel_pack_t, _product.panel_transpose\n")


def with_tile(source: str, dtype: str) -> str:
    """`source` (which includes PACKED_SOURCE) with this CPU's tile for `dtype` filled in
    (``{t}`` is left for the kernel template)."""
    V, MR, _ = tile_shape(dtype)
    return source.replace("{V}", str(V)).replace("{MR}", str(MR))


def padded_rows(m: int, dtype: str) -> int:
    """Rows of a ``packed_gemm`` output for m rows of weights (a multiple of MR)."""
    mr = tile_shape(dtype)[1]
    return -(-m // mr) * mr


def packed_size(m: int, k: int, dtype: str) -> int:
    """Elements of the packed weights of an (m, k) matrix."""
    return padded_rows(m, dtype) * k
