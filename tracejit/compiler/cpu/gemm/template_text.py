"""The numba source text of the GEMM template (compiler/cpu/gemm/template.py): the register
tiles, the driver that cuts the output into shares and K parts and applies the epilogue, and
the share loops (tiles or dot products). `template.source` fills in a configuration's
``{placeholders}``; nothing here runs until that text is compiled.
"""

__all__ = ["HEAD", "SHARE_TILES", "SHARE_DOTS"]

# the register tiles (`_make_tile`) of a configuration, with the module's head
TILES = """
import numpy as np
from numba import njit, types as _t
from numba.core import cgutils as _cg
from numba.extending import intrinsic as _intrinsic
from llvmlite import ir as _ir

T = np.{dtype}
z = T(0)
MR, NV, V, DOT = {mr}, {nv}, {v}, {dot}
NR = NV if DOT else NV * V
# the kernels' arguments before a share's (q, nq): operands may be read-only views
_RO, _RW = "Array({dtype}, 1, 'C', readonly=True)", "{dtype}[::1]"
SIG = ", ".join([_RO] + ["int64"] * 3 + [_RO] + ["int64"] * 3 + [_RW, _RW, _RO] + ["int64"] * 10)


def _operands(context, builder, sig, args):
    # a tile intrinsic's pointers and ints: the float type, A, B, C at their offsets, then
    # ars, aks, ldb, ldc, K as int64 (the arguments a, aoff, ars, aks, b, boff, ldb, c, coff,
    # ldc, k of every tile)
    ft = _ir.FloatType() if "{dtype}" == "float32" else _ir.DoubleType()
    tys = sig.args

    def data(i):
        return builder.bitcast(context.make_array(tys[i])(context, builder, args[i]).data,
                               ft.as_pointer())

    def int_(i):
        return context.cast(builder, args[i], tys[i], _t.int64)

    return (ft, builder.gep(data(0), [int_(1)]), builder.gep(data(4), [int_(5)]),
            builder.gep(data(7), [int_(8)]), int_(2), int_(3), int_(6), int_(9), int_(10))


def _make_tile(mr, widths, keep=False):
    # c (mr x sum(widths)) = a @ b over k, raw sums: a's (r, p) at a[aoff + r*ars + p*aks],
    # b's row p at b[boff + p*ldb], c's row r at c[coff + r*ldc]; one vector accumulator per
    # row and width, a broadcast of a's value per row and p, fused multiply-adds. `keep`: a
    # twelfth argument, beta (run time): where true, c (+)= the sums
    def codegen(context, builder, sig, args):
        ft, A, B, C, ars, aks, ldb, ldc, K = _operands(context, builder, sig, args)
        i64 = _ir.IntType(64)
        vts = [_ir.VectorType(ft, w) for w in widths]
        offs = [sum(widths[:v]) for v in range(len(widths))]
        accs = [[_cg.alloca_once_value(builder, _ir.Constant(vt, None)) for vt in vts] for _ in range(mr)]
        fmas = [_cg.get_or_insert_function(
            builder.module, _ir.FunctionType(vt, [vt, vt, vt]),
            "llvm.fma.v%d%s" % (vt.count, "f32" if "{dtype}" == "float32" else "f64")) for vt in vts]
        arows = [builder.gep(A, [builder.mul(_ir.Constant(i64, r), ars)]) for r in range(mr)]
        zero32 = _ir.Constant(_ir.IntType(32), 0)
        with _cg.for_range(builder, K) as loop:
            kk = loop.index
            brow = builder.gep(B, [builder.mul(kk, ldb)])
            bv = [builder.load(builder.bitcast(builder.gep(brow, [_ir.Constant(i64, o)]), vt.as_pointer()),
                               align=4) for vt, o in zip(vts, offs)]
            ko = builder.mul(kk, aks)
            for r in range(mr):
                w = builder.load(builder.gep(arows[r], [ko]))
                for v, vt in enumerate(vts):
                    mask = _ir.Constant(_ir.VectorType(_ir.IntType(32), vt.count), [0] * vt.count)
                    ws = builder.shuffle_vector(builder.insert_element(_ir.Constant(vt, _ir.Undefined), w,
                                                                       zero32),
                                                _ir.Constant(vt, _ir.Undefined), mask)
                    builder.store(builder.call(fmas[v], [ws, bv[v], builder.load(accs[r][v])]), accs[r][v])
        add = context.cast(builder, args[11], sig.args[11], _t.boolean) if keep else None
        for r in range(mr):
            crow = builder.gep(C, [builder.mul(_ir.Constant(i64, r), ldc)])
            for v, vt in enumerate(vts):
                p = builder.bitcast(builder.gep(crow, [_ir.Constant(i64, offs[v])]), vt.as_pointer())
                acc = builder.load(accs[r][v])
                if keep:   # c (+)= the sums: c's value added where beta
                    acc = builder.select(add, builder.fadd(acc, builder.load(p, align=4)), acc)
                builder.store(acc, p, align=4)
        return context.get_dummy_value()
    if keep:
        @_intrinsic
        def tile(typingctx, a, aoff, ars, aks, b, boff, ldb, c, coff, ldc, k, beta):
            return _t.void(a, aoff, ars, aks, b, boff, ldb, c, coff, ldc, k, beta), codegen
    else:
        @_intrinsic
        def tile(typingctx, a, aoff, ars, aks, b, boff, ldb, c, coff, ldc, k):
            return _t.void(a, aoff, ars, aks, b, boff, ldb, c, coff, ldc, k), codegen
    return tile


def _make_dot(mr, nc):
    # c (mr x nc) = a @ b over k, raw sums, a's rows and b's columns contiguous along k: a's
    # (r, p) at a[aoff + r*ars + p], b's (p, q) at b[boff + q*ldb + p]; one vector accumulator
    # per row and column over V consecutive p (fused multiply-adds), its lanes summed by
    # halves at the end, then the last k % V terms in order
    @_intrinsic
    def tile(typingctx, a, aoff, ars, aks, b, boff, ldb, c, coff, ldc, k):
        sig = _t.void(a, aoff, ars, aks, b, boff, ldb, c, coff, ldc, k)

        def codegen(context, builder, sig, args):
            ft, A, B, C, ars, _aks, ldb, ldc, K = _operands(context, builder, sig, args)
            sfx = "f32" if "{dtype}" == "float32" else "f64"
            i64 = _ir.IntType(64)
            vt = _ir.VectorType(ft, V)
            fma = _cg.get_or_insert_function(builder.module, _ir.FunctionType(vt, [vt, vt, vt]),
                                             "llvm.fma.v%d%s" % (V, sfx))
            fma1 = _cg.get_or_insert_function(builder.module, _ir.FunctionType(ft, [ft, ft, ft]),
                                              "llvm.fma." + sfx)
            accs = [[_cg.alloca_once_value(builder, _ir.Constant(vt, None)) for _ in range(nc)]
                    for _ in range(mr)]
            arows = [builder.gep(A, [builder.mul(_ir.Constant(i64, r), ars)]) for r in range(mr)]
            bcols = [builder.gep(B, [builder.mul(_ir.Constant(i64, q), ldb)]) for q in range(nc)]
            blocks = builder.udiv(K, _ir.Constant(i64, V))
            kv = builder.mul(blocks, _ir.Constant(i64, V))
            with _cg.for_range(builder, blocks) as loop:
                p = builder.mul(loop.index, _ir.Constant(i64, V))
                av = [builder.load(builder.bitcast(builder.gep(x, [p]), vt.as_pointer()), align=4) for x in arows]
                bv = [builder.load(builder.bitcast(builder.gep(x, [p]), vt.as_pointer()), align=4) for x in bcols]
                for r in range(mr):
                    for q in range(nc):
                        builder.store(builder.call(fma, [av[r], bv[q], builder.load(accs[r][q])]), accs[r][q])
            sums = []
            for r in range(mr):
                for q in range(nc):
                    v, w = builder.load(accs[r][q]), V
                    while w > 1:
                        h = w // 2
                        lo = builder.shuffle_vector(v, _ir.Constant(v.type, _ir.Undefined),
                                                    _ir.Constant(_ir.VectorType(_ir.IntType(32), h), list(range(h))))
                        hi = builder.shuffle_vector(v, _ir.Constant(v.type, _ir.Undefined),
                                                    _ir.Constant(_ir.VectorType(_ir.IntType(32), h),
                                                                 list(range(h, w))))
                        v, w = builder.fadd(lo, hi), h
                    s = builder.extract_element(v, _ir.Constant(_ir.IntType(32), 0)) if V > 1 else v
                    sums.append(_cg.alloca_once_value(builder, s))
            with _cg.for_range(builder, builder.sub(K, kv)) as loop:
                p = builder.add(kv, loop.index)
                aw = [builder.load(builder.gep(x, [p])) for x in arows]
                bw = [builder.load(builder.gep(x, [p])) for x in bcols]
                for r in range(mr):
                    for q in range(nc):
                        s = sums[r * nc + q]
                        builder.store(builder.call(fma1, [aw[r], bw[q], builder.load(s)]), s)
            for r in range(mr):
                crow = builder.gep(C, [builder.mul(_ir.Constant(i64, r), ldc)])
                for q in range(nc):
                    builder.store(builder.load(sums[r * nc + q]), builder.gep(crow, [_ir.Constant(i64, q)]))
            return context.get_dummy_value()
        return sig, codegen
    return tile


if DOT:
    _main = _make_dot(MR, NV)
    _main1 = _make_dot(1, NV)
else:
    _main = _make_tile(MR, (V,) * NV)
    _main1 = _make_tile(1, (V,) * NV)
{rest_tiles}
"""

# the kernel: shares of rows or columns of tiles, the K parts, the epilogue
DRIVER = """


@njit(inline="always")
def _epi(C, ci, rows, cols, n, bias, j, RS, ri, rrs, rcs, act, hasb, hasr):
    # the epilogue over a stored tile: act(c + bias[j] + residual), on unsigned indices (no
    # negative-index wraparound in the loop, which then vectorizes: bias + relu over a
    # 1024x1024 product's output, ~2.8x faster on one thread)
    for r in range(rows):
        o = ci + r * n
        p = ri + r * rrs
        for q in range(cols):
            u = np.uintp(o + q)
            v = C[u]
            if hasb:
                v += bias[np.uintp(j + q)]
            if hasr:
                v += RS[np.uintp(p + q * rcs)]
            if act == 1 and v < z:
                v = z
            C[u] = v


{share}


@njit(inline="always")
def _item(A, abs_, ars, aks, B, bbs, bks, bns, C, S, RS, rbs, rrs, rcs, bias_n, nb, m, n, k, shares, act, ks,
          pack, w):
    # work item w of nb * shares * ks: product w // (shares * ks), its share (w // ks) %
    # shares of row tiles or column panels, its K part w % ks (part 0 into C, the others
    # into S's scratch)
    hasr = RS.shape[0] > 0
    hasb = bias_n > 0
    mn = m * n
    rt = (m + MR - 1) // MR
    ct = (n + NR - 1) // NR
    by_rows = rt >= ct
    units = rt if by_rows else ct
    per = (units + shares - 1) // shares
    kpart = (k + ks - 1) // ks
    bi = w // (shares * ks)
    sh = (w // ks) % shares
    kp = w % ks
    k0 = min(k, kp * kpart)
    k1 = min(k, k0 + kpart)
    u0 = sh * per
    u1 = min(units, u0 + per)
    if u0 < u1:
        if by_rows:
            i_lo, i_hi, j_lo, j_hi = u0 * MR, min(m, u1 * MR), 0, n
        else:
            i_lo, i_hi, j_lo, j_hi = 0, m, u0 * NR, min(n, u1 * NR)
        D = C if kp == 0 else S
        do = bi * mn + (kp - 1) * nb * mn if kp > 0 else bi * mn
        _share(A, bi * abs_, ars, aks, B, bi * bbs, bks, bns, D, do, RS, bi * rbs, rrs, rcs,
               S[S.shape[0] - bias_n:], n, k0, k1, i_lo, i_hi, j_lo, j_hi,
               (hasr or hasb or act != 0) and ks == 1, act, hasb, hasr, pack)


@njit(inline="always")
def _fold(C, S, RS, rbs, rrs, rcs, bias_n, nb, m, n, act, ks, w):
    # row w of nb * m after the K parts: C += the parts' sums in order, then the epilogue
    hasr = RS.shape[0] > 0
    hasb = bias_n > 0
    mn = m * n
    bi = w // m
    i = w % m
    ci = bi * mn + i * n
    for kp in range(1, ks):
        so = (kp - 1) * nb * mn + ci
        for j in range(n):
            C[ci + j] += S[so + j]
    if hasr or hasb or act != 0:
        _epi(C, ci, 1, n, n, S[S.shape[0] - bias_n:], 0, RS, bi * rbs + i * rrs, rrs, rcs, act, hasb, hasr)


# C (nb, m, n) C-contiguous = act(A @ B + bias + residual): A's (b, i, p) at b*abs_ + i*ars +
# p*aks, B's (b, p, j) at b*bbs + p*bks + j*bns, the residual's (b, i, j) at b*rbs + i*rrs +
# j*rcs (RS empty: none), the bias the last bias_n values of S (scratch of the K parts before
# them); the output cut into `shares` parts, the depth into `ks`, B's panels packed where
# `pack` (the last two a launch's choice: one module serves the configurations that differ
# in them). No parallel region: its compile cost as much as the rest of the module, and
# a launch of several shares runs this kernel once per share on the worker threads.
@njit("void(" + SIG + ", int64, int64, int64, int64)", nogil=True, cache=CACHE)
def kernel(A, abs_, ars, aks, B, bbs, bks, bns, C, S, RS, rbs, rrs, rcs, bias_n, nb, m, n, k, shares, act,
           ks, pack, q, nq):
    # share q of nq launched at once (parts q, q + nq, ...); nq <= 1 also sums the K parts
    # (nq 0: that alone, after the shares of a launch ended)
    if nq > 0:
        for w in range(q, nb * shares * ks, nq):
            _item(A, abs_, ars, aks, B, bbs, bks, bns, C, S, RS, rbs, rrs, rcs, bias_n, nb, m, n, k, shares, act,
                  ks, pack, w)
    if ks > 1 and nq <= 1:
        for w in range(nb * m):
            _fold(C, S, RS, rbs, rrs, rcs, bias_n, nb, m, n, act, ks, w)
"""
HEAD = TILES + DRIVER

SHARE_TILES = """
@njit(inline="always")
def _columns(A, ao0, ars, aks, B, bo0, bks, bns, D, do, n, P, k0, k1, i_lo, i_hi, jt, w, t_mr, t_1, pack):
    # the tiles of columns jt .. jt+w of rows i_lo .. i_hi (tile functions t_mr, t_1)
    if pack or (w > 1 and bns != 1):
        for p in range(k0, k1):
            for q in range(w):
                P[(p - k0) * w + q] = B[bo0 + p * bks + (jt + q) * bns]
        Bx, bo, ldb = P, 0, w
    else:
        Bx, bo, ldb = B, bo0 + k0 * bks + jt * bns, bks
    i = i_lo
    while i + MR <= i_hi:
        t_mr(A, ao0 + i * ars + k0 * aks, ars, aks, Bx, bo, ldb, D, do + i * n + jt, n, k1 - k0)
        i += MR
    while i < i_hi:
        t_1(A, ao0 + i * ars + k0 * aks, ars, aks, Bx, bo, ldb, D, do + i * n + jt, n, k1 - k0)
        i += 1


@njit(inline="never")
def _share(A, ao0, ars, aks, B, bo0, bks, bns, D, do, RS, ro0, rrs, rcs, bias, n, k0, k1,
           i_lo, i_hi, j_lo, j_hi, epi, act, hasb, hasr, pack):
    # rows i_lo .. i_hi, columns j_lo .. j_hi of one product's output (D at do), summed over
    # k0 .. k1, by column panels; the epilogue on each panel where `epi`
    # (the panel buffer only where B's panels are copied: a fresh buffer of a deep product's
    # panel is an mmap and munmap per call)
    P = np.empty(max(k1 - k0, 1) * NR if pack or bns != 1 else 1, T)
    jt = j_lo
    while jt < j_hi:
        w = NR
        if jt + NR <= j_hi:
            _columns(A, ao0, ars, aks, B, bo0, bks, bns, D, do, n, P, k0, k1, i_lo, i_hi, jt, NR, _main, _main1, pack)
{rest_calls}
        if epi:
            _epi(D, do + i_lo * n + jt, i_hi - i_lo, w, n, bias, jt, RS, ro0 + i_lo * rrs + jt * rcs, rrs,
                 rcs, act, hasb, hasr)
        jt += w
"""

SHARE_DOTS = """
@njit(inline="always")
def _dot(Ax, ao, lda, Bx, bo, ldb, D, dof, n, kk, rows, t_mr, t_1):
    if rows == MR:
        t_mr(Ax, ao, lda, 1, Bx, bo, ldb, D, dof, n, kk)
    else:
        t_1(Ax, ao, lda, 1, Bx, bo, ldb, D, dof, n, kk)


@njit(inline="never")
def _share(A, ao0, ars, aks, B, bo0, bks, bns, D, do, RS, ro0, rrs, rcs, bias, n, k0, k1,
           i_lo, i_hi, j_lo, j_hi, epi, act, hasb, hasr, pack):
    # `_share` of the dot tiles, by row tiles (a tile's rows of a stay in cache over every
    # column): b's columns read along k in place where contiguous so (a transposed weight),
    # else first copied so into P; a's rows the same, a tile's rows into Q
    kk = k1 - k0
    if pack or bks != 1:
        P = np.empty(max(kk, 1) * (j_hi - j_lo), T)
        for q in range(j_hi - j_lo):
            for p in range(k0, k1):
                P[q * kk + p - k0] = B[bo0 + p * bks + (j_lo + q) * bns]
        Bx, bo, ldb = P, -j_lo * kk, kk
    else:
        Bx, bo, ldb = B, bo0 + k0, bns
    Q = np.empty(max(kk, 1) * MR, T)
    i = i_lo
    while i < i_hi:
        rows = MR if i + MR <= i_hi else 1
        if aks != 1:
            for r in range(rows):
                for p in range(k0, k1):
                    Q[r * kk + p - k0] = A[ao0 + (i + r) * ars + p * aks]
            Ax, ao, lda = Q, 0, kk
        else:
            Ax, ao, lda = A, ao0 + i * ars + k0, ars
        jt = j_lo
        while jt < j_hi:
            w = NR
            if jt + NR <= j_hi:
                _dot(Ax, ao, lda, Bx, bo + jt * ldb, ldb, D, do + i * n + jt, n, kk, rows, _main, _main1)
{rest_calls}
            jt += w
        if epi:
            _epi(D, do + i * n + j_lo, rows, j_hi - j_lo, n, bias, j_lo, RS, ro0 + i * rrs + j_lo * rcs, rrs,
                 rcs, act, hasb, hasr)
        i += rows
"""
