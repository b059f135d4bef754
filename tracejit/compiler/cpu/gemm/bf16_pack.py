"""The bf16 GEMM on the CPU's bf16 units: both operands packed as k-pairs, the tiles summed
by `bf16_tile`'s ``vdpbf16ps`` kernel, float32 results rounded once to bf16 words.

`product(a, b, words)` takes two 2-D arrays of bf16 words (any strides: a transposed
operand is packed as it lies) and returns ``a @ b`` as float32, or as bf16 words rounded to
nearest even when ``words``. Packing: A into ``[row tile][pair][MR]`` and B into
``[column tile][pair][NR]`` 32-bit words, each the pair (even k low, odd k high) the
instruction multiplies; rows, columns and an odd k past the operands are zeros, so the
kernel always runs whole tiles into a padded float32 output. Products are cut into parts of
row tiles (or column tiles where there are few rows) that the share pool runs at once
(`sharepool.split`); every element is summed in the same pair order whatever the parts.
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ...bf16math import f32_to_bf16
from ..runtime import sharepool
from . import bf16_tile
from .bf16_tile import MR, NR

__all__ = ["product", "pack_a", "pack_b", "available", "KC"]

# Pairs of k per block: an A tile (8 KB) and a B tile (32 KB) stay in L1 while a block of
# row tiles is run against one B tile.
KC = 256
# Row tiles per block: their A tiles (256 KB at KC) stay in L2 across the column tiles.
MC_TILES = 32


def available() -> bool:
    """Whether this process runs products on the bf16 units (`bf16_tile.address`)."""
    return bf16_tile.address() is not None


@intrinsic
def _call_tile(typingctx, fn, kc, a, b, c, ldc, load):
    """The kernel at address ``fn`` on raw addresses (integers): no GIL, no Python."""
    sig = types.void(types.intp, types.intp, types.intp, types.intp, types.intp, types.intp, types.intp)

    def codegen(context, builder, sig, args):
        i64, i32, ptr = ir.IntType(64), ir.IntType(32), ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i64, ptr, ptr, ptr, i64, i32])
        f = builder.inttoptr(args[0], fnty.as_pointer())
        builder.call(f, [args[1], builder.inttoptr(args[2], ptr), builder.inttoptr(args[3], ptr),
                         builder.inttoptr(args[4], ptr), args[5], builder.trunc(args[6], i32)])
        return context.get_dummy_value()
    return sig, codegen


@numba.njit(nogil=True, cache=True)
def pack_a(a, out, lo, hi):
    """Row tiles ``lo..hi`` of `a` (m, k) into `out` (tiles, pairs, MR) as k-pairs."""
    m, k = a.shape
    kp = out.shape[1]
    for t in range(lo, hi):
        for r in range(MR):
            i = t * MR + r
            if i < m:
                for p in range(kp):
                    lo16 = np.uint32(a[i, 2 * p])
                    hi16 = np.uint32(a[i, 2 * p + 1]) if 2 * p + 1 < k else np.uint32(0)
                    out[t, p, r] = lo16 | (hi16 << np.uint32(16))
            else:
                for p in range(kp):
                    out[t, p, r] = 0


@numba.njit(nogil=True, cache=True)
def pack_b(b, out, lo, hi):
    """Column tiles ``lo..hi`` of `b` (k, n) into `out` (tiles, pairs, NR) as k-pairs."""
    k, n = b.shape
    kp = out.shape[1]
    for t in range(lo, hi):
        j0 = t * NR
        w = min(NR, n - j0)
        for p in range(kp):
            for c in range(w):
                lo16 = np.uint32(b[2 * p, j0 + c])
                hi16 = np.uint32(b[2 * p + 1, j0 + c]) if 2 * p + 1 < k else np.uint32(0)
                out[t, p, c] = lo16 | (hi16 << np.uint32(16))
            for c in range(w, NR):
                out[t, p, c] = 0


@numba.njit(nogil=True, cache=True)
def _tiles(fn, ap, bp, cpad, i_lo, i_hi, j_lo, j_hi):
    """Tiles of row tiles ``i_lo..i_hi`` by column tiles ``j_lo..j_hi`` into `cpad`."""
    kp = ap.shape[1]
    ldc = cpad.shape[1]
    a0 = ap.ctypes.data
    b0 = bp.ctypes.data
    c0 = cpad.ctypes.data
    for p0 in range(0, max(kp, 1), KC):
        kc = min(KC, kp - p0)
        load = 1 if p0 > 0 else 0
        for ib in range(i_lo, i_hi, MC_TILES):
            ie = min(ib + MC_TILES, i_hi)
            for jt in range(j_lo, j_hi):
                bb = b0 + ((jt * kp + p0) * NR) * 4
                for it in range(ib, ie):
                    _call_tile(fn, kc, a0 + ((it * kp + p0) * MR) * 4, bb,
                               c0 + (it * MR * ldc + jt * NR) * 4, ldc, load)


@numba.njit(nogil=True, cache=True)
def _round(cpad, out, i_lo, i_hi, j_lo, j_hi):
    """bf16 words of `cpad`'s rows ``i_lo..i_hi``, columns ``j_lo..j_hi`` (clipped to `out`)."""
    m, n = out.shape
    for i in range(i_lo, min(i_hi, m)):
        for j in range(j_lo, min(j_hi, n)):
            out[i, j] = f32_to_bf16(cpad[i, j])


def product(a: np.ndarray, b: np.ndarray, words: bool = True) -> np.ndarray:
    """``a @ b`` of 2-D bf16 word arrays on the bf16 units: bf16 words rounded once
    (``words``) or the float32 sums. Call only where `available`."""
    m, k = a.shape
    k2, n = b.shape
    if k != k2:
        raise ValueError(f"bf16 product: a is {a.shape}, b is {b.shape}: inner dims differ")
    if m == 0 or n == 0 or k == 0:
        out = np.zeros((m, n), np.float32)
        return np.zeros((m, n), np.uint16) if words else out
    fn = bf16_tile.address()
    kp = (k + 1) // 2
    mt = -(-m // MR)
    nt = -(-n // NR)
    ap = np.empty((mt, kp, MR), np.uint32)
    bp = np.empty((nt, kp, NR), np.uint32)
    cpad = np.empty((mt * MR, nt * NR), np.float32)
    work = m * n * k

    def pack(lo, hi):
        if lo < mt:
            pack_a(a, ap, lo, min(hi, mt))
        if hi > mt:
            pack_b(b, bp, max(lo, mt) - mt, hi - mt)
    sharepool.split(pack, mt + nt, max(work // 16, (m + n) * k))
    out = np.empty((m, n), np.uint16) if words else None
    by_rows = mt >= 4 or mt >= nt

    def part(lo, hi):
        i_lo, i_hi, j_lo, j_hi = (lo, hi, 0, nt) if by_rows else (0, mt, lo, hi)
        _tiles(fn, ap, bp, cpad, i_lo, i_hi, j_lo, j_hi)
        if out is not None:
            _round(cpad, out, i_lo * MR, i_hi * MR, j_lo * NR, j_hi * NR)
    sharepool.split(part, mt if by_rows else nt, work)
    return out if words else cpad[:m, :n]
