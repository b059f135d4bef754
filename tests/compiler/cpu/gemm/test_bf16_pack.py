"""The bf16 GEMM on the bf16 units (compiler/cpu/gemm/bf16_pack.py, bf16_tile.py): the
k-pair packing on every machine, the kernel where the CPU has avx512_bf16."""
from __future__ import annotations

import numpy as np
import pytest

from tracejit import bf16
from tracejit.compiler.cpu.gemm import bf16_pack, bf16_tile
from tracejit.compiler.cpu.gemm.bf16_tile import MR, NR

needs_units = pytest.mark.skipif(bf16_tile.address() is None, reason="no avx512_bf16 on this CPU")


def _words(shape, seed):
    return bf16.to_bfloat16(np.random.default_rng(seed).standard_normal(shape))


def _halves(packed):
    """(low, high) bf16 words of packed 32-bit k-pairs."""
    return (packed & 0xFFFF).astype(np.uint16), (packed >> 16).astype(np.uint16)


@pytest.mark.parametrize("m,k", [(1, 1), (3, 5), (8, 2), (17, 33)])
def test_a_packs_as_pairs_of_k_per_row_with_zeros_past_it(m, k):
    a = _words((m, k), 0)
    mt, kp = -(-m // MR), (k + 1) // 2
    out = np.full((mt, kp, MR), 7, np.uint32)
    bf16_pack.pack_a(a, out, 0, mt)
    lo, hi = _halves(out)
    full = np.zeros((mt * MR, 2 * kp), np.uint16)
    full[:m, :k] = a
    np.testing.assert_array_equal(lo.transpose(0, 2, 1).reshape(mt * MR, kp), full[:, 0::2])
    np.testing.assert_array_equal(hi.transpose(0, 2, 1).reshape(mt * MR, kp), full[:, 1::2])


@pytest.mark.parametrize("k,n", [(1, 1), (5, 3), (2, 32), (33, 65)])
def test_b_packs_as_pairs_of_k_per_column_from_any_layout(k, n):
    b = _words((k, n), 1)
    nt, kp = -(-n // NR), (k + 1) // 2
    full = np.zeros((2 * kp, nt * NR), np.uint16)
    full[:k, :n] = b
    for operand in (b, np.ascontiguousarray(b.T).T):     # rows, and a transposed array
        out = np.full((nt, kp, NR), 7, np.uint32)
        bf16_pack.pack_b(operand, out, 0, nt)
        lo, hi = _halves(out)
        np.testing.assert_array_equal(lo.transpose(1, 0, 2).reshape(kp, nt * NR), full[0::2])
        np.testing.assert_array_equal(hi.transpose(1, 0, 2).reshape(kp, nt * NR), full[1::2])


def test_packed_pairs_multiplied_as_the_instruction_does_give_the_product():
    """The instruction's sum per lane (low halves times low plus high times high) over the
    packed operands is the product: what the kernel computes, checked without it."""
    m, k, n = 9, 7, 40
    a, b = _words((m, k), 2), _words((k, n), 3)
    mt, nt, kp = -(-m // MR), -(-n // NR), (k + 1) // 2
    ap, bp = np.empty((mt, kp, MR), np.uint32), np.empty((nt, kp, NR), np.uint32)
    bf16_pack.pack_a(a, ap, 0, mt)
    bf16_pack.pack_b(b, bp, 0, nt)
    (alo, ahi), (blo, bhi) = (tuple(bf16.to_float32(h).astype(np.float64) for h in _halves(p)) for p in (ap, bp))
    c = np.einsum("ipr,jpc->irjc", alo, blo) + np.einsum("ipr,jpc->irjc", ahi, bhi)
    want = bf16.to_float32(a).astype(np.float64) @ bf16.to_float32(b).astype(np.float64)
    np.testing.assert_allclose(c.reshape(mt * MR, nt * NR)[:m, :n], want, rtol=1e-12)


def test_the_kernel_ir_names_the_instruction_and_the_host_decides():
    text = bf16_tile.ir_text()
    assert text.count("@llvm.x86.avx512bf16.dpbf16ps.512(") == 1 + MR * (NR // 16)
    if not bf16_tile.supported():
        assert bf16_tile.address() is None


def test_numba_targets_without_avx512_bf16_turn_the_kernel_off(monkeypatch):
    monkeypatch.setenv("NUMBA_CPU_FEATURES", "+avx2,+fma,-avx512f")
    assert not bf16_tile.supported()


def test_mismatched_inner_dims_name_both_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 5\)"):
        bf16_pack.product(_words((2, 3), 0), _words((4, 5), 1))


def _exact(a, b):
    return bf16.to_float32(a).astype(np.float64) @ bf16.to_float32(b).astype(np.float64)


@needs_units
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 3, 1), (3, 5, 7), (8, 2, 32), (9, 33, 33), (17, 257, 65),
                                   (300, 299, 301), (64, 1, 300), (1, 300, 1), (40, 600, 8)])
def test_the_kernel_sums_the_bf16_values_in_float32(m, k, n):
    a, b = _words((m, k), m), _words((k, n), n)
    want = _exact(a, b)
    tol = 1e-6 * np.sqrt(k) * max(1.0, np.abs(want).max())
    for aa, bb in ((a, b), (np.ascontiguousarray(a.T).T, np.ascontiguousarray(b.T).T)):
        got = bf16_pack.product(aa, bb, words=False)
        assert got.dtype == np.float32 and got.shape == (m, n)
        np.testing.assert_allclose(got, want, rtol=0, atol=tol)
        # the words: the float32 sums rounded once to nearest even
        np.testing.assert_array_equal(bf16_pack.product(aa, bb), bf16.to_bfloat16(got))


@needs_units
def test_empty_products_are_zeros():
    assert bf16_pack.product(_words((0, 3), 0), _words((3, 4), 1)).shape == (0, 4)
    got = bf16_pack.product(_words((2, 0), 0), _words((0, 4), 1), words=False)
    np.testing.assert_array_equal(got, np.zeros((2, 4), np.float32))


@needs_units
def test_dot_matmul_takes_batches_broadcasts_and_transposed_operands():
    from tracejit.compiler.cpu.gemm import bf16 as g
    a, b = _words((3, 33, 65), 4), _words((65, 17), 5)
    got = bf16.to_float32(g.dot_matmul(a, b)).astype(np.float64)
    np.testing.assert_allclose(got, _exact(a, b), rtol=2.0 ** -8, atol=1e-6)
    b3 = _words((1, 65, 17), 6)
    np.testing.assert_allclose(bf16.to_float32(g.dot_matmul(a, b3)), _exact(a, b3), rtol=2.0 ** -8, atol=1e-6)
    at = np.ascontiguousarray(a.swapaxes(-1, -2)).swapaxes(-1, -2)
    np.testing.assert_array_equal(g.dot_matmul(at, b3), g.dot_matmul(a, b3))


def test_bf16_keys_are_measured_between_words_and_the_kernel(monkeypatch):
    """A bf16 key's measurement races the words way against the kernel (only the words
    where the kernel does not run here), and `matmul` follows the choice."""
    from tracejit.compiler.cpu.gemm import bf16 as g, choice
    a, b = _words((40, 70), 7), _words((70, 50), 8)
    key = choice.key_for(a, b, 1)
    assert key.dtype == "uint16"
    if bf16_tile.address() is not None:
        fns, cfgs, complete = choice._bf16_ways(a, b)
        assert set(fns) == {choice.BLAS, choice.DOT} and cfgs == {choice.DOT: choice.DOT} and complete
        monkeypatch.setattr(choice, "_save", lambda *args: None)
        assert choice.measure(key) in (choice.BLAS, choice.DOT)
    calls = []
    monkeypatch.setattr(g, "dot_matmul", lambda x, y: calls.append("dot") or _reference_words(x, y))
    monkeypatch.setattr(g, "words_matmul", lambda x, y, way="words": calls.append(way) or _reference_words(x, y))
    monkeypatch.setattr(g, "dot_runs", lambda: True)
    prev = g.force("dot")
    try:
        for chosen in (choice.DOT, choice.BLAS):
            monkeypatch.setattr(choice, "choose", lambda k, c=chosen: c)
            np.testing.assert_array_equal(g.matmul(a, b), _reference_words(a, b))
    finally:
        g.force(prev)
    assert calls == ["dot", "words"]


def _reference_words(a, b):
    return bf16.to_bfloat16(_exact(a, b))


def test_a_stored_dot_choice_reads_back_as_the_constant():
    from tracejit.compiler.cpu.gemm import choice
    assert choice._decode("dot") is choice.DOT and choice._decode("blas") is choice.BLAS


@needs_units
def test_parts_on_two_shares_give_the_same_bits(monkeypatch):
    """Rows (or columns, for few rows) cut into parts the share pool runs at once: each
    element summed in the same order, so the same bits as on one thread."""
    from tracejit.compiler.cpu.runtime import coreshare, sharepool
    for m, k, n in ((300, 301, 70), (9, 300, 400)):
        a, b = _words((m, k), 10), _words((k, n), 11)
        monkeypatch.setattr(sharepool, "pool_threads", lambda: 1)
        one = bf16_pack.product(a, b, words=False)
        monkeypatch.setattr(sharepool, "pool_threads", lambda: 2)
        monkeypatch.setattr(sharepool, "SPLIT_MIN_WORK", 0)
        monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 2)
        calls = []
        monkeypatch.setattr(sharepool, "run_shares", lambda fn, args, tail, nt: calls.append(nt) or
                            [fn(*args, t, nt, *tail) for t in range(nt)])
        np.testing.assert_array_equal(bf16_pack.product(a, b, words=False), one)
        assert calls and set(calls) == {2}


@pytest.mark.parametrize("view", ["reversed", "broadcast", "offset"])
def test_packing_reads_reversed_broadcast_and_unaligned_views(view):
    """Operands as numpy hands them over: negative strides, a broadcast (stride 0), a start
    off the 4-byte boundary (no 32-bit reading of pairs there)."""
    k, n = 7, 40
    base = _words((k + 1, n + 1), 12)
    b = {"reversed": base[:k, :n][::-1, ::-1], "broadcast": np.broadcast_to(base[:1, :n], (k, n)),
         "offset": base[1:, 1:][:k, :n]}[view]
    for operand in (b, b.T):       # as B, and its transpose as A
        rows = operand is not b
        nt, kp = -(-n // (MR if rows else NR)), (k + 1) // 2
        out = np.empty((nt, kp, MR if rows else NR), np.uint32)
        (bf16_pack.pack_a if rows else bf16_pack.pack_b)(operand, out, 0, nt)
        lo, hi = _halves(out)
        kk = np.zeros((2 * kp, n), np.uint16)
        kk[:k] = b
        got_lo = lo.transpose(1, 0, 2).reshape(kp, -1)[:, :n]
        got_hi = hi.transpose(1, 0, 2).reshape(kp, -1)[:, :n]
        np.testing.assert_array_equal(got_lo, kk[0::2])
        np.testing.assert_array_equal(got_hi, kk[1::2])
