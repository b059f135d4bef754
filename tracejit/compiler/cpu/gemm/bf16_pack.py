"""The bf16 GEMM on the CPU's bf16 units: both operands packed as k-pairs, the tiles summed
by `bf16_tile`'s ``vdpbf16ps`` kernel, float32 results rounded once to bf16 words.

`product(a, b, words)` takes two 2-D arrays of bf16 words (any strides: a transposed
operand is packed as it lies) and returns ``a @ b`` as float32, or as bf16 words rounded to
nearest even when ``words``. Packing: A into ``[row tile][pair][MR]`` and B into
``[column tile][pair][NR]`` 32-bit words, each the pair (even k low, odd k high) the
instruction multiplies; rows, columns and an odd k past the operands are zeros, so the
kernel always runs whole tiles. K runs in blocks of `KC` pairs summed in a float32 buffer;
the last block's tiles store their bf16 words themselves, those past the output's edge
through the buffer. Products are cut into parts of row tiles (or column tiles where there
are few rows) that the share pool runs at once (`sharepool.split`); every element is
summed in the same pair order whatever the parts.
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
from .bf16_tile import LOAD, MR, NR, WORDS

__all__ = ["product", "pack_a", "pack_b", "KC"]

# Pairs of k per block: an A tile (8 KB) and a B tile (32 KB) stay in L1 while a block of
# row tiles is run against one B tile.
KC = 256
# Row tiles per block: their A tiles (256 KB at KC) stay in L2 across the column tiles.
MC_TILES = 32


@intrinsic
def _call_tile(typingctx, fn, kc, a, b, c, ldc, mode, w, ldw):
    """The kernel at address ``fn`` on raw addresses (integers): no GIL, no Python."""
    sig = types.void(*([types.intp] * 9))

    def codegen(context, builder, sig, args):
        i64, i32, ptr = ir.IntType(64), ir.IntType(32), ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i64, ptr, ptr, ptr, i64, i32, ptr, i64])
        f = builder.inttoptr(args[0], fnty.as_pointer())
        builder.call(f, [args[1], builder.inttoptr(args[2], ptr), builder.inttoptr(args[3], ptr),
                         builder.inttoptr(args[4], ptr), args[5], builder.trunc(args[6], i32),
                         builder.inttoptr(args[7], ptr), args[8]])
        return context.get_dummy_value()
    return sig, codegen


@numba.njit(nogil=True, cache=True)
def _interleave(src, out, lo, hi):
    """Tiles ``lo..hi`` of ``out[t, p, c] = src[2p, t*W + c] | src[2p+1, t*W + c] << 16``
    (W = out.shape[2]), zeros past `src`: pairs from two rows (a row-major B, A.T's rows)."""
    k, size = src.shape
    kp, width = out.shape[1], out.shape[2]
    kf = k // 2
    for t in range(lo, hi):
        j0 = t * width
        w = min(width, size - j0)
        for p in range(kf):
            r0 = src[2 * p, j0:j0 + w]
            r1 = src[2 * p + 1, j0:j0 + w]
            o = out[t, p]
            for c in range(w):
                o[c] = np.uint32(r0[c]) | (np.uint32(r1[c]) << np.uint32(16))
            for c in range(w, width):
                o[c] = 0
        if kf < kp:     # an odd k: the last pair's high half is zero
            r0 = src[k - 1, j0:j0 + w]
            o = out[t, kf]
            for c in range(w):
                o[c] = np.uint32(r0[c])
            for c in range(w, width):
                o[c] = 0


# The packing loops index views of one tile with loop counters from 0: an index numba cannot
# prove non-negative (a tile number from ``range(lo, hi)``) keeps LLVM from vectorizing
# (2.8x slower).


@numba.njit(nogil=True, cache=True)
def _gather(src, out, lo, hi):
    """Tiles ``lo..hi`` of ``out[t, p, c] = src[t*W + c, 2p] | src[t*W + c, 2p+1] << 16``
    (W = out.shape[2]), zeros past `src`: pairs along rows (a row-major A, B.T's rows)."""
    size, k = src.shape
    kp, width = out.shape[1], out.shape[2]
    kf = k // 2
    for t in range(lo, hi):
        o = out[t]
        w = min(width, size - t * width)
        s = src[t * width:t * width + w]
        for p in range(kf):
            for c in range(w):
                o[p, c] = np.uint32(s[c, 2 * p]) | (np.uint32(s[c, 2 * p + 1]) << np.uint32(16))
        if kf < kp:   # an odd k's last pair
            for c in range(w):
                o[kf, c] = np.uint32(s[c, k - 1])
        if w < width:
            o[:, w:] = 0


@numba.njit(nogil=True, cache=True)
def _gather32(src, out, lo, hi):
    """`_gather` of an even k whose pairs lie as 32-bit words: ``out[t, p, c] = src[t*W + c, p]``
    (written along c: 1.7x reading along p)."""
    size = src.shape[0]
    kp, width = out.shape[1], out.shape[2]
    for t in range(lo, hi):
        o = out[t]
        w = min(width, size - t * width)
        s = src[t * width:t * width + w]
        for p in range(kp):
            for c in range(w):
                o[p, c] = s[c, p]
        if w < width:
            o[:, w:] = 0


def _pack(x: np.ndarray, out: np.ndarray, lo: int, hi: int, rows: bool) -> None:
    """Tiles ``lo..hi`` of A (``rows``: tiles of its rows) or B (tiles of its columns) as
    k-pairs, reading the operand along the axis its elements lie next to each other on."""
    along_k = abs(x.strides[1]) <= abs(x.strides[0]) if rows else abs(x.strides[0]) <= abs(x.strides[1])
    src = (x if rows else x.T) if along_k else (x.T if rows else x)
    if not along_k:
        _interleave(src, out, lo, hi)
    elif src.shape[1] % 2 == 0 and src.strides[1] == 2 and src.strides[0] % 4 == 0 and src.ctypes.data % 4 == 0:
        _gather32(src.view(np.uint32), out, lo, hi)    # (each pair one aligned 32-bit word)
    else:
        _gather(src, out, lo, hi)


def pack_a(a: np.ndarray, out: np.ndarray, lo: int, hi: int) -> None:
    """Row tiles ``lo..hi`` of `a` (m, k) into `out` (tiles, pairs, MR) as k-pairs."""
    _pack(a, out, lo, hi, True)


def pack_b(b: np.ndarray, out: np.ndarray, lo: int, hi: int) -> None:
    """Column tiles ``lo..hi`` of `b` (k, n) into `out` (tiles, pairs, NR) as k-pairs."""
    _pack(b, out, lo, hi, False)


@numba.njit(nogil=True, cache=True)
def _tiles(fn, ap, bp, cpad, out, words, i_lo, i_hi, j_lo, j_hi):
    """Tiles of row tiles ``i_lo..i_hi`` by column tiles ``j_lo..j_hi``: float32 into
    `cpad`, or (``words``) bf16 words into `out`, a tile past `out`'s edge through `cpad`."""
    kp = ap.shape[1]
    ldc = cpad.shape[1]
    m, n = out.shape
    full_mt, full_nt = m // MR, n // NR
    a0, b0, c0, w0 = ap.ctypes.data, bp.ctypes.data, cpad.ctypes.data, out.ctypes.data
    blocks = max(1, (kp + KC - 1) // KC)
    for blk in range(blocks):
        p0 = blk * KC
        kc = min(KC, kp - p0)
        last = words and blk == blocks - 1
        for ib in range(i_lo, i_hi, MC_TILES):
            ie = min(ib + MC_TILES, i_hi)
            for jt in range(j_lo, j_hi):
                bb = b0 + ((jt * kp + p0) * NR) * 4
                for it in range(ib, ie):
                    mode = LOAD if p0 > 0 else 0
                    whole = it < full_mt and jt < full_nt
                    if last and whole:
                        mode |= WORDS
                    _call_tile(fn, kc, a0 + ((it * kp + p0) * MR) * 4, bb, c0 + (it * MR * ldc + jt * NR) * 4,
                               ldc, mode, w0 + (it * MR * n + jt * NR) * 2, n)
                    if last and not whole:
                        for i in range(it * MR, min(it * MR + MR, m)):
                            for j in range(jt * NR, min(jt * NR + NR, n)):
                                out[i, j] = f32_to_bf16(cpad[i, j])


def product(a: np.ndarray, b: np.ndarray, words: bool = True) -> np.ndarray:
    """``a @ b`` of 2-D bf16 word arrays on the bf16 units: bf16 words rounded once
    (``words``) or the float32 sums. Call only where the kernel runs (`bf16_tile.address`)."""
    m, k = a.shape
    k2, n = b.shape
    if k != k2:
        raise ValueError(f"bf16 product: a is {a.shape}, b is {b.shape}: inner dims differ")
    if m == 0 or n == 0 or k == 0:
        return np.zeros((m, n), np.uint16 if words else np.float32)
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
    # (a packed element costs about 12 multiply-adds' time: 1M in 90 us)
    sharepool.split(pack, mt + nt, 12 * (m + n) * k)
    out = np.empty((m, n), np.uint16) if words else _NO_WORDS
    # parts of rows, unless too few row tiles to give each share some (a classifier's
    # weight gradient, 10 x 256 x 1024): parts of columns then
    by_rows = mt >= 4 or mt >= nt

    def part(lo, hi):
        i_lo, i_hi, j_lo, j_hi = (lo, hi, 0, nt) if by_rows else (0, mt, lo, hi)
        _tiles(fn, ap, bp, cpad, out, words, i_lo, i_hi, j_lo, j_hi)
    sharepool.split(part, mt if by_rows else nt, work)
    return out if words else cpad[:m, :n]


_NO_WORDS = np.empty((0, 0), np.uint16)   # (`_tiles`'s words output where floats are wanted)
