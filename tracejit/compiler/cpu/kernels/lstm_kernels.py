"""The LSTM and GRU layers' time loops as numba kernels (compiler/cpu/kernels/native.py): the whole loop
each way, or (where numpy's BLAS GEMM is not found) one step's gate math.

In numpy, one step of ops/lstm_prim.py's forward is ~12 passes over (H, N) blocks (three
sigmoids of four passes each, two tanh, the cell update) and one of its backward ~25
(ops/gru_prim.py's: ~12 and ~15): for the LSTM LM workload (batch 32, hidden 256, 64 steps,
float32, one thread) ~18 ms of a layer's 38 ms forward and ~18 of its 52 ms backward, the
rest being the GEMMs. A step's gate math here is a few passes over blocks that stay in
cache, with tanh from compiler/mathlib.py (pure arithmetic), so the loops vectorize
(forward 73 us against 116-130 us of numpy per LSTM step, backward 22-25 us against
~150 us).

The whole-loop kernels (``forward_layer`` ...) also run each step's GEMM, on the weights
packed once per call (compiler/cpu/gemm/packed_gemm.py: a register tile in LLVM vector IR, 100 us
against OpenBLAS's 153 us for the LSTM LM's 1024x256 @ 256x32 on one thread), so a
layer is one call each way: no Python, numpy call setup or BLAS packing per step. The
per-step kernels (``forward_step`` ...) share their gate math (``gates``, ``step_back``,
...) and run the numpy GEMM from Python (tests and the kernels' reference).

What the loops share is compiled once per process in modules of their own and called by
address, not inlined in each loop (an inlined helper is re-run through numba's untyped
pipeline, typed, lowered and optimised at every call site): the packed product, the packs
and the register transposes (compiler/cpu/gemm/packed_gemm.py's product module) and, for the LSTM's split
loops, the meeting's `next_half` and `wait_turn` (`meeting_module_source`). LSTM LM worker
jobs: backward loop 3.0 -> 1.4 s of compile CPU, forward 2.35 -> 2.1 s with the shared
modules.

The LSTM's whole-loop kernels can run split over two threads by hidden units
(compiler/cpu/kernels/loop_split.py: one call per thread, a meeting per step, a late partner's half of a step
done by the other thread); with one thread they run
the whole range, as before.

Operands are C-contiguous (H, N) / (G*H, N) blocks (the caller makes them so),
typed read-only where they are read, so the loops run over plain rows. The transposed
read of each step's input projection block (forward) and the transposed write of its
gradient (backward) are loops of their own, in tiles (a strided access inside the
vectorized loops would make them gathers).
"""
from __future__ import annotations

import numpy as np

from .loop_split import THREAD_START as _THREAD_START, meeting_source as _meeting_source
from ..gemm.packed_gemm import PACKED_SOURCE as PACKED, product_import, with_tile
from .native import kernel as _kernel

__all__ = ["forward_step", "backward_step", "forward_layer", "backward_layer", "gru_forward_layer",
           "gru_backward_layer", "gru_forward_step", "gru_backward_step", "readonly"]

# `part(a, start, stop)`: a[start:stop] of a 1-D C-contiguous array as a plain view, for the
# step math's many views of Z's and the gradients' blocks. Why not the slice: numba lowers each
# slice with its normalisation (negative and out-of-range bounds, the step) and the
# reference counting of a view, ~25 ms of compile CPU apiece (the LSTM backward's step math:
# 16 slices, 0.38 s of its module's 2.2 s); here a pointer, a length and a stride. The
# callers' bounds are in range by construction (the loops' units and blocks); the view has
# no owner of its own (no meminfo: no reference counting), which is safe for a view that
# lives only inside the kernel call whose argument owns the memory.
_PART = '''
from numba import types as _vt
from numba.extending import intrinsic as _vintrinsic


@_vintrinsic
def part(typingctx, a, start, stop):
    # a[start:stop], 0 <= start <= stop <= a.size (the caller's word: no normalisation, no
    # bounds check), a 1-D C-contiguous array; read-only when a is
    if not (isinstance(a, _vt.Array) and a.ndim == 1 and a.layout == 'C'
            and isinstance(start, _vt.Integer) and isinstance(stop, _vt.Integer)):
        return None
    sig = a(a, start, stop)

    def codegen(context, builder, sig, args):
        aty = sig.args[0]
        src = context.make_array(aty)(context, builder, args[0])
        out = context.make_array(sig.return_type)(context, builder)
        s0 = context.cast(builder, args[1], sig.args[1], _vt.intp)
        s1 = context.cast(builder, args[2], sig.args[2], _vt.intp)
        itemsize = context.get_constant(_vt.intp, context.get_abi_sizeof(context.get_data_type(aty.dtype)))
        context.populate_array(out, data=builder.gep(src.data, [s0]), shape=[builder.sub(s1, s0)],
                               strides=[itemsize], itemsize=itemsize, meminfo=None)
        return out._getvalue()
    return sig, codegen
'''

# Each loop below writes one array and reads few: with more, LLVM's runtime alias checks
# give up and the loop stays scalar (one loop doing all of a step's gate math ran ~10x
# slower than these passes over blocks that stay in cache).
_SIGMOID_HEAD = '''
import numpy as np
from numba import njit
from tracejit.compiler.mathlib import tanh_{s} as tanh

HALF = np.{t}(0.5)


@njit(inline='always')
def sigmoid(x):
    # through tanh (a rational function here, ~4x cheaper than mathlib's exp-based
    # sigmoid): absolute error within an ulp of 0.5, so a gate of 1e-30 may come out 0
    return HALF + HALF * tanh(HALF * x)
'''

# dst (G*H, N) += src (N, G*H)^T, the transposed read as its own loop, in tiles of 16 rows of
# dst: each batch row's 16 contiguous values go to 16 rows (34 against 41 us an LSTM step
# read column by column). The LSTM's gates and the RNN's loop (compiler/cpu/kernels/rnn_kernels.py) use it.
ADD_TRANSPOSED = '''


@njit(inline='always')
def add_transposed(src, dst):
    rows, n = dst.shape
    top = rows - rows % 16
    for jb in range(0, top, 16):
        for k in range(n):
            row = src[k]
            for jj in range(16):
                dst[jb + jj, k] += row[jb + jj]
    for j in range(top, rows):
        for k in range(n):
            dst[j, k] += src[k, j]
'''

_FORWARD_GATES = _SIGMOID_HEAD + _PART + ADD_TRANSPOSED + """


@njit(inline='always')
def gates(gi, b, m, cp, zf):
    # one forward step's gate math: m (4H, N) = W h, overwritten with the gates'
    # pre-activation m + gi^T + b (gi (N, 4H): the step's input projection); zf the flat
    # (6H, N) block (h, c, i, f, g, o); cp the flat previous c
    add_transposed(gi, m)
    gate_math(b, m, cp, zf)


@njit(inline='always')
def gate_math(b, m, cp, zf):
    # `gates` once m holds W h + gi^T
    gate_math_units(b, m, cp, zf, 0, m.shape[0] // 4)


@njit(inline='always')
def gate_math_units(b, m, cp, zf, u0, u1):
    # `gate_math` for hidden units u0..u1-1 (their rows of each gate block: one thread's
    # share of a split loop). The loops run over views from index 0: an index from a
    # range with an unknown start may be negative to numba (wraparound selects in the
    # loop), which made the forward kernel 40% slower.
    four, n = m.shape
    s = cp.size
    hh = four // 4
    for blk in range(4):                               # + b, in the activations' pass
        for j in range(blk * hh + u0, blk * hh + u1):
            bj = b[j]
            row = m[j]
            o = (2 * hh + j) * n
            zr = part(zf, o, o + n)
            if blk != 2:                               # i, f, o
                for k in range(n):
                    zr[k] = sigmoid(row[k] + bj)
            else:                                      # g
                for k in range(n):
                    zr[k] = tanh(row[k] + bj)
    a, e = u0 * n, u1 * n
    zh, zc, zi, zff, zg, zo, cpu = (part(zf, a, e), part(zf, s + a, s + e), part(zf, 2 * s + a, 2 * s + e),
                                    part(zf, 3 * s + a, 3 * s + e), part(zf, 4 * s + a, 4 * s + e),
                                    part(zf, 5 * s + a, 5 * s + e), part(cp, a, e))
    for k in range(e - a):
        zc[k] = zff[k] * cpu[k] + zi[k] * zg[k]
    for k in range(e - a):
        zh[k] = zo[k] * tanh(zc[k])
"""

_FORWARD = _FORWARD_GATES + """

@njit("void(" + RO2 + ", " + RO1 + ", {t}[:, ::1], " + RO2 + ", {t}[:, ::1])", cache=CACHE,
      error_model='numpy', boundscheck=False)
def kernel(gi, b, m, c_prev, z):
    \"\"\"one forward step: m (4H, N) = W h, overwritten with the gates' pre-activation
    m + gi^T + b (gi (N, 4H): the step's input projection); z (6H, N) = (h, c, i, f, g, o)\"\"\"
    gates(gi, b, m, c_prev.reshape(-1), z.reshape(-1))
"""

# The whole forward time loop, the input projection included: per step one GEMM
# m = [W_ih | W_hh] [x_t^T ; h_prev] on both weights packed once as one (4H, I+H) matrix
# (compiler/cpu/gemm/packed_gemm.py) and the gate math, so the loop over time is one call and the
# projection runs in the loop's product (whose split scales with the loop's threads)
# instead of one OpenBLAS GEMM before it. LSTM LM layer, one thread: 15.5 ms against 16.9
# for the GEMM (7.7) + the loop with the transposed gi add (9.2).
# Split over nth threads (compiler/cpu/kernels/loop_split.py), thread q does the rows of its hidden units
# u0..u1-1 in each gate block (their GEMM rows, the gate math) and the threads meet after
# each step: the next step's GEMM reads all of h. The product is two parts on the same
# packed panels: W_ih x_t^T (x_t read transposed in register blocks into the thread's
# scratch) needs nothing of the partner's, so a half computes it for the next step after
# its mark, off the meeting's critical path; after the meeting W h_prev is added (h_prev
# read in place from Z: no copy).
_FORWARD_LAYER = _FORWARD_GATES + PACKED + """
# {product}
# {meeting}


@njit(inline='always')
def gemm_units(fns, wp, kd, k0, k1, bk, m, hh, u0, u1, nth, beta):
    # this thread's rows of each gate block (nth > 1: whole panels, H a multiple of
    # SPLIT_Q), or all 4H rows as one range (nth == 1: any H), of m (+)= [W_ih | W]'s
    # columns k0..k1-1 (of kd, packed) @ bk (their rows of [x_t^T ; h_prev]), by
    # `panel_product` (compiler/cpu/gemm/packed_gemm.py) at its address fns[0]; one call site for the
    # input and the hidden part
    for blk in range(4 if nth > 1 else 1):
        r0 = blk * hh + u0
        r1 = blk * hh + u1 if nth > 1 else 4 * hh
        call_at(fns[0], panel_product, (wp, r0 // PMR, (r1 + PMR - 1) // PMR, kd, k0, k1, bk, m, beta))


# (no_rewrites: numba's IR rewrite passes, for array expressions and constant folding, find
# nothing to do in the loops but scan them: ~0.06 s of each loop's compile; the machine
# code is the same, bar a register choice in the backward's prologue and three unused globals)
@njit("void(" + RO3 + ", " + RO2 + ", " + RO2 + ", " + RO1 + ", " + RO2 + ", " + RO2 + ", {t}[:, :, ::1], "
      "{t}[:, ::1], {t}[::1], boolean, int64, int64, int64[::1], int64[::1], {t}[:, ::1], {t}[:, ::1], "
      "int64[::1])", cache=CACHE, error_model='numpy', boundscheck=False, nogil=True, no_rewrites=True)
def loop(x, wx, w, b, h0, c0, Z, m, wp, reverse, q, nth, sync, fns, Zi, xt, mv):
    \"\"\"the layer's forward (ops/lstm_prim.py): Z (L, 6H, N) from x (L, N, I), wx (4H, I),
    w (4H, H), b (4H,), h0 and c0 (H, N); m (padded_rows(4H), N) and wp (packed_size(4H,
    I + H)) scratch; thread q of nth (nth <= 2; nth 2: H a multiple of SPLIT_Q, sync the
    meeting's state); Zi (1, 6HN), xt (I, N), mv (4,) the thread's scratch (`kernel`)\"\"\"
    L = x.shape[0]
    ki = x.shape[2]
    four, hh = w.shape
    n = m.shape[1]
    s = hh * n
    Zf = Z.reshape(L, 6 * s)
    mg = m[:four]
    # h0 and c0 where a step block of Z holds h_prev and c_prev, so that the step below has
    # one call site: inlined twice (a first step apart, on h0's read-only type), the
    # step's two GEMM paths doubled the kernel's LLVM compile (3.5 -> 9.1 s CPU)
    # (Zi: an element loop, not `Zi[0, :s] = h0.reshape(-1)`: an array-to-array slice assignment
    # makes numba compile its "cannot assign slice of shape ..." message, 1.75 s of the
    # kernel's 4.75 s CPU compile, once per process; as a loop 2.7-2.8 s)
    h0f = h0.reshape(-1)
    c0f = c0.reshape(-1)
    for e in range(s):
        Zi[0, e] = h0f[e]
        Zi[0, s + e] = c0f[e]
    # xt: this thread's x_t^T; mv: its meeting state and `next_half`'s answer (by address)
    st = part(mv, 0, 3)
    hv = part(mv, 3, 4)
    # unit r of a half: (r > 0) step r - 1's m += W h_prev for its rows (h_prev: after the
    # previous unit of both halves) and its gate math, the mark, then (r < L) step r's
    # m = W_ih x_r^T for its rows, which needs nothing of the partner's: off the meeting's
    # critical path. r = 0 packs its panels first. A half's input part is done by whoever
    # did the half of the unit before, in step order (`wait_turn`: a half taken over from a
    # late partner waits for the partner's input part). One thread does the same parts.
    for r in range(L + 1):
        k = r - 1                                      # the step of the gate math
        t = L - 1 - k if reverse else k
        tn = L - 1 - r if reverse else r               # the step of the input part
        if k <= 0:
            src, p = Zi, 0
        else:
            src, p = Zf, t + 1 if reverse else t - 1   # h_prev: Z[p]'s first rows
        while True:
            # `next_half` (compiler/cpu/kernels/loop_split.py) at its address fns[4]: its spin-wait, claims and
            # clock inlined cost ~0.3 s of each loop's compile (`meeting_module`)
            call_at(fns[4], meet_next_half, (sync, r, q, nth, st, hv))
            half = hv[0]
            if half < 0:
                break
            u0, u1 = split_units(hh, half, nth)
            # phase 0: step k's hidden part and gate math, then the mark; phase 1: step r's
            # input part (one GEMM call site for both: compile time)
            for phase in range(2):
                if phase == 0 and r == 0:
                    for blk in range(4 if nth > 1 else 1):     # the half's panels (all: nth == 1)
                        r0 = blk * hh + u0
                        r1 = blk * hh + u1 if nth > 1 else four
                        for which in range(2):             # W_ih's columns, then W's: one call site
                            # (`panel_pack`, compiler/cpu/gemm/packed_gemm.py, at its address fns[1])
                            call_at(fns[1], panel_pack, (wx if which == 0 else w, wp, r0 // PMR,
                                                         (r1 + PMR - 1) // PMR, 0 if which == 0 else ki, ki + hh))
                    half_done(sync, nth)
                    continue
                if phase == 1 and r == L:
                    continue
                if phase == 0:
                    call_at(fns[5], meet_wait_turn, (sync, half, r))   # step k's input part of the half is in m
                    bk, k0, k1 = src[p, :s].reshape(hh, n), ki, ki + hh
                else:
                    # (`panel_transpose`, compiler/cpu/gemm/packed_gemm.py, at its address fns[3])
                    call_at(fns[3], panel_transpose, (x[tn], 0, n, 0, ki, xt, False))
                    bk, k0, k1 = xt, 0, ki
                gemm_units(fns, wp, ki + hh, k0, k1, bk, m, hh, u0, u1, nth, phase == 0)
                if phase == 0:
                    gate_math_units(b, mg, part(src[p], s, 2 * s), Zf[t], u0, u1)
                    half_done(sync, nth)               # its rows of h_t written
                else:
                    turn_done(sync, half)


def kernel(x, wx, w, b, h0, c0, Z, m, wp, reverse, q, nth, sync):
    # the loop's scratch (Zi, x_t^T, the meeting state) made here, one set per thread's call:
    # np.empty in the loop made a compile worker compile numba's np.empty for each of its
    # argument types, and np.zeros for the meeting's thread_state() (~0.15 s of the job's CPU)
    n = m.shape[1]
    loop(x, wx, w, b, h0, c0, Z, m, wp, reverse, q, nth, sync, _FNS,
         np.empty((1, 6 * w.shape[1] * n), Z.dtype), np.empty((x.shape[2], n), Z.dtype),
         np.array(MEET_STATE, np.int64))
"""

_TRANSPOSE = '''

@njit(inline='always')
def transpose_into(src, dst):
    # dst (N, G*H) = src (G*H, N)^T, in tiles of 16 rows of src written as 16 contiguous
    # values of each row of dst (19 against numpy's 32 us for an LSTM step's dg.T)
    four, n = src.shape
    top = four - four % 16
    for jb in range(0, top, 16):
        for k in range(n):
            d = dst[k]
            for jj in range(16):
                d[jb + jj] = src[jb + jj, k]
    for j in range(top, four):
        for k in range(n):
            dst[k, j] = src[j, k]
'''

_BACKWARD_STEP = """
import numpy as np
from numba import njit
from tracejit.compiler.mathlib import tanh_{s} as tanh
""" + _PART + _TRANSPOSE + """

@njit(inline='always')
def step_back(zf, cp, dhf, dcf, y, full, dg, dco):
    # one backward step on flat (H, N) blocks: from Z's step block zf (h, c, i, f, g, o),
    # c_prev, the carried dh, dc and the step's output cotangent y (of h; with `full`, of h
    # and c), the gates' pre-activation gradient dg (4H, N) and the next dc (the caller
    # writes dg transposed, (N, 4H), into the input projection's gradient)
    step_back_part(zf, cp, dhf, dcf, y, full, dg, dco, 0, cp.size)


@njit(inline='always')
def step_back_part(zf, cp, dhf, dcf, y, full, dg, dco, k0, k1):
    # `step_back` for the flat block positions k0..k1-1 (hidden units k0/N..k1/N-1: one
    # thread's share of a split loop), on views from index 0 (see `gate_math_units`)
    s = cp.size
    one = np.{t}(1)
    g_ = dg.reshape(-1)
    zc, zi, zf_, zg, zo = (part(zf, s + k0, s + k1), part(zf, 2 * s + k0, 2 * s + k1), part(zf, 3 * s + k0, 3 * s + k1),
                           part(zf, 4 * s + k0, 4 * s + k1), part(zf, 5 * s + k0, 5 * s + k1))
    gi, gf, gg, go = (part(g_, k0, k1), part(g_, s + k0, s + k1), part(g_, 2 * s + k0, 2 * s + k1),
                      part(g_, 3 * s + k0, 3 * s + k1))
    dhp, dcp, yh, cpp, dc = part(dhf, k0, k1), part(dcf, k0, k1), part(y, k0, k1), part(cp, k0, k1), part(dco, k0, k1)
    for k in range(k1 - k0):                           # dct = dc + dh o (1 - tanh(c)^2)
        tc = tanh(zc[k])
        dh = dhp[k] + yh[k]
        o = zo[k]
        dc[k] = dcp[k] + dh * o * (one - tc * tc)
        go[k] = dh * tc * o * (one - o)                # do
    if full:                                           # the cotangent of c
        yc = part(y, s + k0, s + k1)
        for k in range(k1 - k0):
            dc[k] += yc[k]
    for k in range(k1 - k0):                           # di, df, dg; the next dc = dct f
        i, f, g, d = zi[k], zf_[k], zg[k], dc[k]
        gi[k] = d * g * i * (one - i)
        gf[k] = d * cpp[k] * f * (one - f)
        gg[k] = d * i * (one - g * g)
        dc[k] = d * f
"""

_BACKWARD = _BACKWARD_STEP + """

@njit("void(" + RO2 + ", " + RO2 + ", " + RO2 + ", " + RO2 + ", " + RO2 + ", {t}[:, ::1], {t}[:, ::1], "
      "{t}[:, ::1])", cache=CACHE, error_model='numpy', boundscheck=False)
def kernel(z, c_prev, dh_in, dc_in, dy, dg, dc_out, dg_t):
    \"\"\"one backward step (`step_back` on the (H, N) / (G*H, N) blocks); dy (H, N): the
    cotangent of h, (2H, N): of h and c\"\"\"
    step_back(z.reshape(-1), c_prev.reshape(-1), dh_in.reshape(-1), dc_in.reshape(-1), dy.reshape(-1),
              dy.shape[0] != c_prev.shape[0], dg, dc_out.reshape(-1))
    transpose_into(dg, dg_t)
"""

# The whole backward time loop: per step `step_back`, the bias gradient's share (the
# rows of dg^T, while in cache: no pass over the (L*N, 4H) gradient afterwards) and
# the GEMM dh = W^T dg (W^T packed once, compiler/cpu/gemm/packed_gemm.py), so the loop over time is one
# call. Split over nth threads as the forward: thread q does its hidden units' gate
# gradients (their rows of each block of dg, their columns of G and db), the threads meet,
# then it does its rows of dh = W^T dg, which read all of dg (double-buffered: the next
# step's gate gradients go to the other buffer while the partner may still read this one).
# A half is marked done once its gate gradients are written (what the partner's product
# waits for); its rows of G and db and, with `with_dw`, of dW += dg h_prev^T
# (ops/lstm_prim.py `WEIGHT_GRAD_IN_LOOP`) come after the mark, off the meeting's critical
# path: the partner's product need not wait for them (LSTM LM layer, split, SCHED_FIFO:
# 9.9 against 10.5 ms with them before the mark; one thread, which meets nobody, marks its
# step after them as before). That work runs in step order per half (`wait_turn`: a half
# taken over from a late partner waits for the partner's previous step of it), and a
# step's gate gradients wait for step r - 2's of the half to be read before they reuse its
# buffer. The weight gradient splits with the loop, a late partner's share taken over with
# the rest of its half, instead of a GEMM on BLAS's threads after the loop; each tile sums
# the same terms whoever does the half: the bits of one thread.
# With `rows` the output cotangent comes as rows (L, N, H) (ops/lstm_prim.py `D_Y_AS_ROWS`:
# the layout it usually has in memory) and each half transposes its units of the step's
# block in register blocks, instead of the op copying it to (L, H, N) element by element.
_BACKWARD_LAYER = _BACKWARD_STEP + PACKED + """
# {product}
# {meeting}


@njit(inline='always')
def add_outer_rows(a, r0, r1, bt, c, beta):
    # c[r0:r1] (+)= a[r0:r1] (R, K) @ bt (K, C) on the register tile (r0, r1 multiples of
    # PMR, C of PV), a's rows and bt read in place
    n = a.shape[1]
    cols = bt.shape[1]
    for pp in range(r0 // PMR, r1 // PMR):
        j = 0
        while j + 2 * PV <= cols:
            _tile_2(a, pp * PMR * n, n, 1, bt, j, cols, c, pp * PMR * cols + j, cols, n, beta)
            j += 2 * PV
        if j < cols:
            _tile_1(a, pp * PMR * n, n, 1, bt, j, cols, c, pp * PMR * cols + j, cols, n, beta)


@njit("void(" + RO3 + ", " + RO3 + ", " + RO2 + ", " + RO2 + ", " + RO2 + ", {t}[:, ::1], {t}[:, :, ::1], "
      "{t}[:, :, ::1], {t}[:, :, ::1], {t}[::1], {t}[:, ::1], {t}[::1], boolean, boolean, boolean, int64, "
      "int64, int64[::1], int64[::1], {t}[:, ::1], {t}[:, ::1], int64[::1])", cache=CACHE, error_model='numpy',
      boundscheck=False, nogil=True, no_rewrites=True)   # (no_rewrites: as the forward loop's)
def loop(Z, d_y, c0, h0, w, dh, dcs, dgs, G, db, dw, wp, reverse, with_dw, rows, q, nth, sync, fns, ht, yt, mv):
    \"\"\"the layer's backward loop (ops/lstm_prim.py): from Z (L, 6H, N), d_y (L, H, N)
    or (L, 2H, N) (with `rows`: as rows, (L, N, H) or (L, N, 2H)) and w = W (4H, H), with
    dh[:H] = d h_n (dh: padded_rows(H) rows) and
    dcs[0] = d c_n on entry: every step's gate gradient G (L, N, 4H), db (4H,), and
    d h0 in dh[:H], d c0 in dcs[L % 2]; with `with_dw` (H a multiple of 16) also
    dw (4H, H) = sum_t dg_t h_prev(t)^T (h0 the first h_prev), step by step; dgs (2, 4H, N)
    and wp (packed_size(H, 4H)) scratch;
    thread q of nth (nth <= 2; nth 2: H a multiple of SPLIT_Q, sync the meeting's state);
    ht (N, H), yt (Hy, N), mv (4,) the thread's scratch (`kernel`)\"\"\"
    L = Z.shape[0]
    four, hh = w.shape
    n = dgs.shape[2]
    s = hh * n
    hy = d_y.shape[2] if rows else d_y.shape[1]
    full = hy != hh
    Zf = Z.reshape(L, 6 * s)
    dhf = dh.reshape(-1)
    # ht: this thread's h_prev^T (with_dw); yt: this thread's units of the step's output cotangent, (H, N) blocks: with `rows` d_y's
    # step block (N, Hy) read transposed (in register blocks), else its rows copied (one
    # array type for the step's code either way)
    y = yt.reshape(-1)
    st = part(mv, 0, 3)                                # the thread's meeting state
    hv = part(mv, 3, 4)                                # `next_half`'s answer (by address)
    # unit r of a half: the GEMM dh = W^T dg of step r - 1 for its rows of dh (reads all
    # of dg: after the previous unit of both halves), then step r's gate gradients for its
    # units, the mark, then its rows of G, db (and dW); r = 0 packs its panels of W^T
    # first, r = L only multiplies
    for r in range(L + 1):
        k = L - 1 - r                                  # the step's place in time order
        t = L - 1 - k if reverse else k
        p = 0 if k <= 0 else (t + 1 if reverse else t - 1)
        # double-buffered dg: the partner may still read step r - 1's while this thread
        # writes step r's
        dg = dgs[r % 2] if nth > 1 else dgs[0]
        while True:
            # `next_half` and `wait_turn` (compiler/cpu/kernels/loop_split.py) at their addresses fns[4], fns[5]
            # (`meeting_module`: inlined, the meeting was ~0.7 s of this loop's compile)
            call_at(fns[4], meet_next_half, (sync, r, q, nth, st, hv))
            half = hv[0]
            if half < 0:
                break
            u0, u1 = split_units(hh, half, nth)
            if r > 0:
                dgp = dgs[(r - 1) % 2] if nth > 1 else dgs[0]
                call_at(fns[0], panel_product, (wp, u0 // PMR, (u1 + PMR - 1) // PMR, four, 0, four, dgp, dh, False))
            else:
                for blk in range(4):                   # (a loop: numba's slice assignment
                    for j in range(blk * hh + u0, blk * hh + u1):   # compiled ~0.1 s more)
                        db[j] = 0
                # W^T's panels (`panel_pack_t`, compiler/cpu/gemm/packed_gemm.py, at its address fns[2])
                call_at(fns[2], panel_pack_t, (w, wp, u0 // PMR, (u1 + PMR - 1) // PMR, 0, four))
            if r < L:
                dc_in, dc_out = dcs[r % 2].reshape(-1), dcs[(r + 1) % 2].reshape(-1)
                for piece in range(2 if full else 1):   # h's cotangent, then c's
                    if rows:
                        # (`panel_transpose`, compiler/cpu/gemm/packed_gemm.py, at its address fns[3]: each
                        # of the loop's three transposes inlined cost ~0.4 s of its compile)
                        call_at(fns[3], panel_transpose, (d_y[t], 0, n, piece * hh + u0, piece * hh + u1, yt, False))
                    else:
                        yf = d_y[t].reshape(-1)
                        for e in range((piece * hh + u0) * n, (piece * hh + u1) * n):
                            y[e] = yf[e]
                if r >= 2:
                    # the half's rows of dg's buffer are read after the mark of step r - 2
                    # (G, db, dW), maybe by a late partner still
                    call_at(fns[5], meet_wait_turn, (sync, half, r - 1))
                # c_prev chosen first, so that the step below has one call site: inlined twice
                # (c0 apart), the step's loops took 0.7 s more of the kernel's 4.7 s CPU compile
                cpv = c0.reshape(-1) if k == 0 else part(Zf[p], s, 2 * s)
                step_back_part(Zf[t], cpv, dhf, dc_in, y, full, dg, dc_out, u0 * n, u1 * n)
            if nth > 1:
                half_done(sync, nth)                   # the partner may multiply this half's dg now
            if r < L:
                call_at(fns[5], meet_wait_turn, (sync, half, r))   # db, dW: in step order (a late partner's half)
                gt = G[t]
                # the half's rows of each block (all 4H rows as one range when nth == 1):
                # one code path, as in the forward
                for blk in range(4 if nth > 1 else 1):
                    r0 = blk * hh + u0
                    r1 = blk * hh + u1 if nth > 1 else four
                    call_at(fns[3], panel_transpose, (dg, r0, r1, 0, n, gt, False))   # G's rows, in register blocks
                    dbv = part(db, r0, r1)             # db += the rows of dg^T; views from 0
                    for q_ in range(n):                # (see `gate_math_units`)
                        row = part(gt[q_], r0, r1)
                        for j in range(r1 - r0):
                            dbv[j] += row[j]
                if with_dw:
                    # the half's rows of dW += dg's rows (4H, N) @ h_prev^T (N, H): dg read in place
                    # while in cache, h_prev transposed once per half (32 KB for the LM); no gather
                    # and no GEMM after the loop; the first step written overwrites. Each tile
                    # sums its N terms the same way whoever does the half: the bits of one thread.
                    call_at(fns[3], panel_transpose, (h0 if k == 0 else Zf[p, :s].reshape(hh, n), 0, hh, 0, n, ht, False))
                    for blk in range(4 if nth > 1 else 1):
                        r0 = blk * hh + u0
                        r1 = blk * hh + u1 if nth > 1 else four
                        add_outer_rows(dg, r0, r1, ht, dw, r > 0)
                turn_done(sync, half)
            if nth == 1:
                # one thread counts the step after G's rows: weight_grad_alongside reads them
                # as the count says (compiler/cpu/kernels/rnn_weight_grad.py)
                half_done(sync, nth)
    # the caller's share returns when the loop is done (loop_split.run): the partner's
    # work after its last marks included
    for h in range(nth):
        call_at(fns[5], meet_wait_turn, (sync, h, L))


def kernel(Z, d_y, c0, h0, w, dh, dcs, dgs, G, db, dw, wp, reverse, with_dw, rows, q, nth, sync):
    # the loop's scratch (h_prev^T, the step's output cotangent, the meeting state) made
    # here, one set per thread's call (why: the forward's `kernel`)
    n = dgs.shape[2]
    loop(Z, d_y, c0, h0, w, dh, dcs, dgs, G, db, dw, wp, reverse, with_dw, rows, q, nth, sync, _FNS,
         np.empty((n, w.shape[1]), Z.dtype), np.empty((d_y.shape[2] if rows else d_y.shape[1], n), Z.dtype),
         np.array(MEET_STATE, np.int64))
"""


# The GRU's steps (ops/gru_prim.py; Z's step block (5H, N) = (h, r, z, n, hn) with
# hn = W_hn h + b_hn).
_GRU_FORWARD_GATES = _SIGMOID_HEAD + """


@njit(inline='always')
def gru_gates(gi, b, m, hp, z):
    # one GRU forward step's gate math: m (3H, N) = W h (overwritten); gi (N, 3H) the
    # step's input projection; z (5H, N) = (h, r, z, n, hn); hp the flat previous h
    three, n = m.shape
    hh = three // 3
    s = hp.size
    for j in range(2 * hh):        # r, z pre-activations: the transposed read of gi
        bj = b[j]
        row = m[j]
        for k in range(n):
            row[k] += gi[k, j] + bj
    for j in range(hh):            # hn = m_n + b_n; gi_n parked in n's rows
        bj = b[2 * hh + j]
        row, zn, zg = m[2 * hh + j], z[4 * hh + j], z[3 * hh + j]
        for k in range(n):
            zn[k] = row[k] + bj
            zg[k] = gi[k, 2 * hh + j]
    p = m.reshape(-1)
    zf = z.reshape(-1)
    for k in range(2 * s):
        zf[s + k] = sigmoid(p[k])                      # r, z
    for k in range(s):
        zf[3 * s + k] = tanh(zf[3 * s + k] + zf[s + k] * zf[4 * s + k])
    for k in range(s):
        zf[k] = zf[3 * s + k] + zf[2 * s + k] * (hp[k] - zf[3 * s + k])
"""

_GRU_FORWARD = _GRU_FORWARD_GATES + """

@njit("void(" + RO2 + ", " + RO1 + ", {t}[:, ::1], " + RO2 + ", {t}[:, ::1])", cache=CACHE,
      error_model='numpy', boundscheck=False)
def kernel(gi, b, m, h_prev, z):
    \"\"\"one GRU forward step (`gru_gates`)\"\"\"
    gru_gates(gi, b, m, h_prev.reshape(-1), z)
"""

# The GRU's whole forward loop, as `_FORWARD_LAYER`'s (W packed once, compiler/cpu/gemm/packed_gemm.py; the
# product by the shared `panel_product`, called by address as there).
# (no_rewrites, as the LSTM loops': numba's IR rewrite passes find nothing to do in either GRU
# loop: ~0.015 s of each loop's compile, the same instructions)
_GRU_FORWARD_LAYER = _GRU_FORWARD_GATES + PACKED + """
# {product}


@njit("void(" + RO3 + ", " + RO2 + ", " + RO1 + ", " + RO2 + ", {t}[:, :, ::1], {t}[:, ::1], {t}[::1], boolean, "
      "int64[::1])", cache=CACHE, error_model='numpy', boundscheck=False, nogil=True, no_rewrites=True)
def loop(gi, w, b, h0, Z, m, wp, reverse, fns):
    \"\"\"the GRU layer's forward (ops/gru_prim.py): Z (L, 5H, N) from gi (L, N, 3H), w (3H, H),
    b (3H,), h0 (H, N); m (padded_rows(3H), N) and wp (packed_size(3H, H)) scratch\"\"\"
    L = gi.shape[0]
    three, hh = w.shape
    n = m.shape[1]
    s = hh * n
    Zf = Z.reshape(L, 5 * s)
    call_at(fns[1], panel_pack, (w, wp, 0, (three + PMR - 1) // PMR, 0, hh))   # (`pack_panels(w, wp, False)`)
    mg = m[:three]
    for k in range(L):
        t = L - 1 - k if reverse else k
        p = t + 1 if reverse else t - 1
        # h_prev chosen first: one call site of the step (inlined twice, h0 apart, it took
        # 0.4-0.5 s more of the kernel's compile)
        hp = h0 if k == 0 else Z[p, :hh]
        # m = W h_prev by `panel_product` (compiler/cpu/gemm/packed_gemm.py) at its address fns[0]: the
        # product's tiles compiled once in their own module, not inlined here
        call_at(fns[0], panel_product, (wp, 0, (three + PMR - 1) // PMR, hh, 0, hh, hp, m, False))
        gru_gates(gi[t], b, mg, hp.reshape(-1), Z[t])
"""

_GRU_BACKWARD_STEP = """
import numpy as np
from numba import njit
""" + _TRANSPOSE + """

@njit(inline='always')
def gru_step_back(zf, hp, dhf, y, g_, m_, d):
    # one GRU backward step on flat blocks: the pre-activation gradients g_ (3H, N) (= the
    # input projection's), m_ (3H, N) (= that of W h + b) and d = dh z (the direct part of
    # dh_prev), from Z's step block zf, the previous h, the carried dh and the step's y
    s = hp.size
    one = np.{t}(1)
    for k in range(s):
        d[k] = dhf[k] + y[k]                           # dh
    for k in range(s):                                 # dz_pre = dh (h_prev - n) z (1 - z)
        zz = zf[2 * s + k]
        g_[s + k] = d[k] * (hp[k] - zf[3 * s + k]) * zz * (one - zz)
    for k in range(s):                                 # dn_pre = dh (1 - z) (1 - n^2)
        nn = zf[3 * s + k]
        g_[2 * s + k] = d[k] * (one - zf[2 * s + k]) * (one - nn * nn)
    for k in range(s):                                 # dr_pre = dn_pre hn r (1 - r)
        r = zf[s + k]
        g_[k] = g_[2 * s + k] * zf[4 * s + k] * r * (one - r)
    for k in range(2 * s):
        m_[k] = g_[k]
    for k in range(s):                                 # d hn = dn_pre r
        m_[2 * s + k] = g_[2 * s + k] * zf[s + k]
    for k in range(s):
        d[k] *= zf[2 * s + k]
"""

_GRU_BACKWARD = _GRU_BACKWARD_STEP + """

@njit("void(" + RO2 + ", " + RO2 + ", " + RO2 + ", " + RO2 + ", {t}[:, ::1], {t}[:, ::1], {t}[:, ::1])",
      cache=CACHE, error_model='numpy', boundscheck=False)
def kernel(z, h_prev, dh_in, dy, dg, dm, dhz):
    \"\"\"one GRU backward step (`gru_step_back` on the blocks)\"\"\"
    gru_step_back(z.reshape(-1), h_prev.reshape(-1), dh_in.reshape(-1), dy.reshape(-1), dg.reshape(-1),
                  dm.reshape(-1), dhz.reshape(-1))
"""

# The GRU's whole backward loop: per step `gru_step_back`, the transposed writes of dg and
# dm into G and M (L, N, 3H), and dh = W^T dm + dh z (the GEMM adds onto dh z: beta 1; W^T
# packed once, compiler/cpu/gemm/packed_gemm.py; the product by the shared `panel_product`, called by address).
_GRU_BACKWARD_LAYER = _GRU_BACKWARD_STEP + PACKED + """
# {product}


@njit("void(" + RO3 + ", " + RO3 + ", " + RO2 + ", " + RO2 + ", {t}[:, :, ::1], {t}[:, ::1], "
      "{t}[:, ::1], {t}[:, :, ::1], {t}[:, :, ::1], {t}[::1], boolean, int64[::1])", cache=CACHE,
      error_model='numpy', boundscheck=False, nogil=True, no_rewrites=True)
def loop(Z, d_y, h0, w, dhs, dg, dm, G, M, wp, reverse, fns):
    \"\"\"the GRU layer's backward loop (ops/gru_prim.py): from Z (L, 5H, N), d_y (L, H, N) and
    w = W (3H, H), with dhs[0, :H] = d h_n on entry (dhs (2, padded_rows(H), N)): G and
    M (L, N, 3H) and d h0 in dhs[L % 2, :H]; dg, dm (3H, N) and wp (packed_size(H, 3H)) scratch\"\"\"
    L = Z.shape[0]
    three, hh = w.shape
    n = dg.shape[1]
    s = hh * n
    Zf = Z.reshape(L, 5 * s)
    call_at(fns[2], panel_pack_t, (w, wp, 0, (hh + PMR - 1) // PMR, 0, three))   # W^T's panels
    for r in range(L):
        k = L - 1 - r
        t = L - 1 - k if reverse else k
        dh_in, d = dhs[r % 2], dhs[(r + 1) % 2]
        y = d_y[t].reshape(-1)
        p = t + 1 if reverse else t - 1
        hp = h0.reshape(-1) if k == 0 else Zf[p, :s]   # one call site of the step (see the forward)
        gru_step_back(Zf[t], hp, dh_in.reshape(-1), y, dg.reshape(-1), dm.reshape(-1), d.reshape(-1))
        # dg into G and dm into M, transposed, by `panel_transpose` (compiler/cpu/gemm/packed_gemm.py) at its
        # address fns[3]: one call site (an inlined copy of the register transposes costs compile time)
        for which in range(2):
            call_at(fns[3], panel_transpose, (dg if which == 0 else dm, 0, three, 0, n, G[t] if which == 0 else M[t], False))
        # d = W^T dm + d by `panel_product` (compiler/cpu/gemm/packed_gemm.py) at its address fns[0]
        call_at(fns[0], panel_product, (wp, 0, (hh + PMR - 1) // PMR, three, 0, three, dm, d, True))
"""


def _source(template: str, dtype: str) -> str:
    s = "f32" if dtype == "float32" else "f64"
    template_in = template
    template = template.replace("# {meeting}", _meeting_source())
    for n in (1, 2, 3):
        template = template.replace(f'" + RO{n} + "', f"Array({{t}}, {n}, 'C', readonly=True)")
    source = (with_tile(template, dtype).replace("{t}", dtype).replace("{s}", s)
              .replace("MEET_STATE", repr(MEET_STATE)))
    # (`panel_product`, compiler/cpu/gemm/packed_gemm.py: a module of its own, shared by the four loops,
    # and the layer's `kernel` that passes its address to the module's `loop`)
    if "# {product}" not in source:
        return source
    # (the LSTM's split loops: the meeting's `next_half` and `wait_turn` by address too)
    meets = "# {meeting}" in template_in
    return source.replace("# {product}", product_import(dtype) + (meeting_import() if meets else "")
                          + _KERNEL_BY_ADDRESS.replace("{more}", _MEETING_FNS if meets else "")
                          + ("" if "\ndef kernel(" in template_in else _KERNEL_PASS))


# The whole-loop modules' `kernel`, as ops/lstm_prim.py and ops/gru_prim.py call it
# (``kernel(*args)``): the module's `loop` with the address of `panel_product`, which it calls
# there (the product's tiles compiled in their own function, not inlined in each loop's).
_KERNEL_BY_ADDRESS = """
_FNS = np.array([native_address(panel_product), native_address(panel_pack), native_address(panel_pack_t),
                 native_address(panel_transpose){more}], np.int64)
"""
# (the LSTM's loops define their own `kernel`, which makes the thread's scratch too)
_KERNEL_PASS = """

def kernel(*args):
    loop(*args, _FNS)   # (`loop`: defined below)
"""


_MEETING_FNS = ", native_address(meet_next_half), native_address(meet_wait_turn)"

# A thread's meeting state as a split LSTM loop starts, made by the module's Python `kernel`:
# loop_split's `THREAD_START` and a slot for `next_half`'s answer. thread_state() in the loop
# made numba compile np.zeros (its np.empty, allocation and zero fill): ~0.08 s of each loop
# job's CPU.
MEET_STATE = _THREAD_START + (0,)

# The meeting of a split loop's two threads (compiler/cpu/kernels/loop_split.py): `next_half` (claims, the
# spin-wait, a late partner's half taken) and `wait_turn`, compiled once per process in a
# module of their own and called by address by the LSTM's two loops, as the product is:
# inlined, the meeting took ~0.3 s of the forward loop's compile and ~0.7 s of the backward's
# (three waits and the claim). `next_half`'s answer comes back in `out` (a call by address
# returns nothing). No CPython wrappers: only called by address. no_rewrites: as the loops'
# (-0.02 s of the module's compile, the same machine code).
_MEETING_MODULE = """# tracejit's meeting of a split recurrent loop, called by address (tracejit/compiler/cpu/kernels/lstm_kernels.py)
import numpy as np
from numba import njit
# {meeting}


@njit("void(int64[::1], int64, int64, int64, int64[::1], int64[::1])", cache=CACHE, error_model='numpy',
      boundscheck=False, nogil=True, no_rewrites=True, no_cpython_wrapper=True)
def meet_next_half(sync, k, q, nth, st, out):
    out[0] = next_half(sync, k, q, nth, st)


@njit("void(int64[::1], int64, int64)", cache=CACHE, error_model='numpy', boundscheck=False, nogil=True,
      no_rewrites=True, no_cpython_wrapper=True)
def meet_wait_turn(sync, h, k):
    wait_turn(sync, h, k)
"""


def meeting_module_source() -> str:
    """The source of the meeting's module (this CPU's pause hint and clock: loop_split.py)."""
    return _MEETING_MODULE.replace("# {meeting}", _meeting_source())


def meeting_module():
    """The loaded meeting module (compiled into the disk cache on its first use in the process)."""
    from ... import diskcache
    return diskcache.load_module(meeting_module_source(), name_hint="lstm_meeting")


def meeting_import() -> str:
    """Source lines that give a loop module `meet_next_half` and `meet_wait_turn`: the meeting
    module's source is written into the loop's (so the loop's disk cache key covers it) and
    loaded from there, not imported from this module, whose import closure (compiler/cpu/kernels/native.py,
    ...: 185 modules against packed_gemm's 12) would enter the loop's key (compiler/
    importclosure.py): every change anywhere would invalidate the loops, and hashing the
    closure took ~0.05 s of each loop's job."""
    return (f"from tracejit.compiler.diskcache import load_module as _load_module\n"
            f"_meeting = _load_module({meeting_module_source()!r}, name_hint='lstm_meeting')\n"
            f"meet_next_half, meet_wait_turn = _meeting.meet_next_half, _meeting.meet_wait_turn\n")


def _native(template: str, name: str, dtype: str, steady: bool = False):
    if dtype not in ("float32", "float64"):
        return None
    return _kernel(("lstm", name, dtype), lambda: _source(template, dtype), steady=steady)


def _get(template: str, name: str, dtype: str, steady: bool = False):
    """The loaded kernel or None; `steady` for the whole-loop kernels, which a compiled
    step runs at every call (queued at rank STEADY, compiler/workers.py)."""
    k = _native(template, name, dtype, steady)
    return None if k is None else k.get()


def _step(template: str, name: str, dtype: str, layer_template: str, layer_name: str):
    """A per-step kernel, asked for only where its whole-loop kernel is not on its way: the
    layer ops ask for the whole-loop kernel first and fall back to the per-step one, so in
    background mode both were queued, the per-step one behind (same rank, asked for later)
    and arriving after the whole-loop kernel, never to be used: the LSTM LM's two took
    0.8-1.1 s of a compile worker's CPU each before its final kernels (tier19). The numpy
    form runs meanwhile instead; the per-step kernel is asked for where the whole-loop one
    failed (or is off: tests)."""
    layer = _native(layer_template, layer_name, dtype, steady=True)
    if layer is not None and layer.coming():
        return None
    return _get(template, name, dtype)


def forward_step(dtype: str):
    """The loaded forward-step kernel for `dtype`, or None (run the numpy form)."""
    return _step(_FORWARD, "forward", dtype, _FORWARD_LAYER, "forward_layer_packed")


def backward_step(dtype: str):
    """The loaded backward-step kernel for `dtype`, or None (run the numpy form)."""
    return _step(_BACKWARD, "backward", dtype, _BACKWARD_LAYER, "backward_layer_packed")


def forward_layer(dtype: str):
    """The whole forward loop's kernel for `dtype` (packed GEMMs: no BLAS needed), or None."""
    return _get(_FORWARD_LAYER, "forward_layer_packed", dtype, steady=True)


def backward_layer(dtype: str):
    """The whole backward loop's kernel for `dtype` (packed GEMMs), or None."""
    return _get(_BACKWARD_LAYER, "backward_layer_packed", dtype, steady=True)


def gru_forward_layer(dtype: str):
    """The GRU's whole forward loop's kernel for `dtype` (packed GEMMs), or None."""
    return _get(_GRU_FORWARD_LAYER, "gru_forward_layer_packed", dtype, steady=True)


def gru_backward_layer(dtype: str):
    """The GRU's whole backward loop's kernel for `dtype` (packed GEMMs), or None."""
    return _get(_GRU_BACKWARD_LAYER, "gru_backward_layer_packed", dtype, steady=True)


def gru_forward_step(dtype: str):
    """The loaded GRU forward-step kernel for `dtype`, or None (run the numpy form)."""
    return _step(_GRU_FORWARD, "gru_forward", dtype, _GRU_FORWARD_LAYER, "gru_forward_layer_packed")


def gru_backward_step(dtype: str):
    """The loaded GRU backward-step kernel for `dtype`, or None (run the numpy form)."""
    return _step(_GRU_BACKWARD, "gru_backward", dtype, _GRU_BACKWARD_LAYER, "gru_backward_layer_packed")


def readonly(a: np.ndarray) -> np.ndarray:
    """A C-contiguous read-only view (or copy) of `a`: the kernels' input type."""
    a = np.ascontiguousarray(a)
    v = a.view()
    v.flags.writeable = False
    return v
