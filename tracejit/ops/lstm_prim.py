"""An LSTM layer's time loops as primitives: ``lstm_layer``, ``lstm_layer_states``,
``lstm_layer_backward``.

Why primitives: run step by step, an eager LSTM records a graph node or three per time
step and layer, and its gate math is ~13 elementwise op calls forward and ~25 backward per
step (three sigmoids, two tanh, the cell update), each with dispatch and graph bookkeeping,
plus the slicing, stacking and accumulation around the steps. For the 2-layer, 64-step LM
step (batch 32, hidden 256) that was ~6000 op calls and more time than the gate math
itself. Here each time loop runs inside one op (per step one GEMM and the gate math: the
whole loop one numba kernel call when loaded, GEMMs included, compiler/cpu/kernels/lstm_kernels.py; else
~12 in-place numpy passes forward and ~25 backward), as PyTorch's CPU LSTM is one oneDNN
layer call forward and one backward.

Eagerly, `tracejit.nn.lstm_layer` runs ``lstm_layer`` / ``lstm_layer_backward`` as an
autograd Function, which hands the backward the cotangents of each step's h and the final
h and c. Captured, a layer is ``lstm_layer`` plus ``lstm_layer_states`` (its h and c
rows, the differentiable result, whose VJP is ``lstm_layer_backward``), so compiled
graphs run the same loops as eager (the sequence length may be a symbolic dim).
``lstm_layer_backward``'s own VJP (second derivatives) recomputes the layer with tracejit
ops and lets autograd differentiate it (`tracejit.nn.lstm_layer.backward_vjp`): the
cell's derivative is written by hand once, here, for speed; its higher derivatives come
from the one op definition of the cell.
"""
from __future__ import annotations

import contextlib

from ..errors import DTypeError, ShapeError
from ..memory import line_empty
from ..compiler.cpu.kernels import lstm_kernels as _kernels
from ..compiler.cpu.kernels import loop_split as _split
from ..compiler.cpu.kernels.native import takes as _takes
from ..compiler.cpu.gemm.packed_gemm import packed_size, padded_rows
from .registry import Aval, bind, defprim
from ..compiler.cpu.kernels.rnn_weight_grad import hprev_steps, weight_grad_alongside

__all__ = ["lstm_layer", "lstm_layer_states", "lstm_layer_backward", "unpack_backward", "input_projection_grads"]


def _errstate(xp):
    # exp(-x) overflows to inf for x < -88 (float32): 1 / (1 + inf) = 0 is the right limit
    return xp.errstate(over="ignore", under="ignore") if hasattr(xp, "errstate") else contextlib.nullcontext()


def _sigmoid_(xp, a):
    """sigmoid in place, as 1 / (1 + exp(-a)) (four vectorized passes, no branch)."""
    xp.negative(a, out=a)
    xp.exp(a, out=a)
    a += 1
    xp.reciprocal(a, out=a)
    return a


# Layouts: x (L, N, I), the layer's input as rows (time-major); wx = W_ih (4H, I); w (4H, H);
# b (4H,), the sum of both biases (added per step); h0, c0 (H, N). The input projection
# x_t W_ih^T is part of each step's product in the whole-loop kernel (one packed GEMM on
# [W_ih | W], compiler/cpu/kernels/lstm_kernels.py: it splits with the loop); the other forms compute it as
# one GEMM first, gi (L, N, 4H), and add each step's block transposed. The forward's
# result Z is (L, 6H, N): per step h_t (rows 0:H), c_t (H:2H) and the activated gates i, f,
# g, o (2H:6H), which the backward reads instead of recomputing the step's GEMM.
#
# Feature-major states because OpenBLAS runs the small per-step products faster that way
# round (batch 32, hidden 256, one thread: ``W @ h`` 0.20 ms against 0.29 ms for
# ``h^T @ W^T`` on a contiguous transpose and 0.41 ms on the transposed view; backward
# ``W^T @ g`` 0.20 against ``g^T @ W`` 0.26 ms), and every gate is then a contiguous row
# block. The whole-loop kernel reads each step's (N, I) block of x transposed (in register
# blocks, into the step's product operand), the per-step forms their (N, 4H) block of gi.
# The backward writes its gate gradients transposed, so they form the (L*N, 4H) gradient
# of the projection that its two GEMMs (d x, d W_ih: `input_projection_grads`) take as it is.

def _matmul(xp, a, b):
    if xp.__name__ == "numpy":
        from .linalg import _blas_matmul   # the BLAS thread policy of every eager product
        return _blas_matmul(a, b)
    return xp.matmul(a, b)


def check_float_operands(op: str, first: Aval, **others: Aval) -> None:
    """A recurrent layer op's operands share its first operand's (gi's, the LSTM's x's)
    floating dtype; the error names the first that does not (its keyword)."""
    for name, a in others.items():
        if a.dtype is not first.dtype or not a.dtype.is_floating_point:
            raise DTypeError(f"{op}: expected floating point operands of one dtype, got {name} "
                             f"of dtype {a.dtype.name} (first operand: {first.dtype.name})")


def _order(L: int, reverse: bool):
    return range(L - 1, -1, -1) if reverse else range(L)


def _lstm_layer_impl(xp, x, wx, w, b, h0, c0, reverse=False):
    L, N, I = x.shape
    H = w.shape[1]
    Z = xp.empty((L, 6 * H, N), dtype=x.dtype)
    ok = _takes(xp, x, wx, w, b, h0, c0)
    layer = _kernels.forward_layer(x.dtype.name) if ok else None
    if layer is not None:
        # the whole loop in one kernel, the input projection and the GEMMs (on [W_ih | W]
        # packed once) included (compiler/cpu/kernels/lstm_kernels.py)
        ro, dt = _kernels.readonly, x.dtype
        m = xp.empty((padded_rows(4 * H, dt.name), N), dtype=dt)
        _split.run(layer, (ro(xp.ascontiguousarray(x)), ro(wx), ro(w), ro(b), ro(h0), ro(c0), Z, m,
                           xp.empty(packed_size(4 * H, I + H, dt.name), dtype=dt), bool(reverse)),
                   _split.threads(H))
        return Z
    # the input projection of the whole sequence as one GEMM, (L*N, I) @ (I, 4H)
    gi = _matmul(xp, x.reshape(L * N, I), wx.T).reshape(L, N, 4 * H)
    step = _kernels.forward_step(gi.dtype.name) if ok else None
    if step is not None:
        # one kernel per step for the gate math (compiler/cpu/kernels/lstm_kernels.py)
        ro = _kernels.readonly
        gi, b, c = ro(gi), ro(b), ro(c0)
        h = xp.ascontiguousarray(h0)
        for t in _order(L, reverse):
            m = xp.ascontiguousarray(_matmul(xp, w, h))
            step(gi[t], b, m, c, Z[t])
            h, c = Z[t, :H], ro(Z[t, H:2 * H])
        return Z
    h, c = h0, c0
    b = b.reshape(4 * H, 1)
    with _errstate(xp):
        for t in _order(L, reverse):
            z = Z[t]
            gates = z[2 * H:]
            xp.add(gi[t].T, _matmul(xp, w, h), out=gates)
            gates += b
            _sigmoid_(xp, gates[:2 * H])                        # i, f
            _sigmoid_(xp, gates[3 * H:])                        # o
            g = gates[2 * H:3 * H]
            xp.tanh(g, out=g)
            i, f, o = gates[:H], gates[H:2 * H], gates[3 * H:]
            c_new, h_new = z[H:2 * H], z[:H]
            xp.multiply(f, c, out=c_new)
            ig = i * g
            c_new += ig
            xp.tanh(c_new, out=h_new)
            h_new *= o
            h, c = h_new, c_new
    return Z


def _lstm_layer_rule(x: Aval, wx: Aval, w: Aval, b: Aval, h0: Aval, c0: Aval, reverse=False):
    if len(x.shape) != 3 or len(wx.shape) != 2 or len(w.shape) != 2:
        raise ShapeError(f"lstm_layer: expected x (L, N, I), w_ih (4H, I) and w (4H, H), got {x.shape}, "
                         f"{wx.shape} and {w.shape}")
    L, N, I = x.shape
    H = w.shape[1]
    if (wx.shape != (4 * H, I) or w.shape[0] != 4 * H or b.shape != (4 * H,) or h0.shape != (H, N)
            or c0.shape != (H, N)):
        raise ShapeError(f"lstm_layer: x {x.shape}, w_ih {wx.shape}, w {w.shape}, b {b.shape}, h0 {h0.shape} "
                         f"and c0 {c0.shape} do not fit x (L, N, I), w_ih (4H, I), w (4H, H), b (4H,), "
                         f"h0 and c0 (H, N)")
    check_float_operands("lstm_layer", x, w_ih=wx, w=w, b=b, h0=h0, c0=c0)
    return Aval((L, 6 * H, N), x.dtype, x.device)


# No VJP: see `lstm_layer_states` below, the layer's differentiable result.
LSTM_LAYER = defprim("lstm_layer", _lstm_layer_impl, _lstm_layer_rule, None, kind="other")


# The backward's result is one flat array with its fixed-size parts first, so that only
# the last part has a size that depends on the sequence length (a symbolic dim when
# compiled): d w (4H*H) | d b (4H) | d h0 (H*N) | d c0 (H*N) | d gi (L*N*4H).
def _parts(H: int, N: int) -> tuple:
    """Offsets of d w, d b, d h0, d c0 and d gi in the backward's flat result."""
    a = 4 * H * H
    b = a + 4 * H
    c = b + H * N
    d = c + H * N
    return 0, a, b, c, d


# Where the whole-loop backward computes d W alongside its loop on one thread
# (`weight_grad_alongside`) instead of after the loop split over two threads: "policy" where
# two threads may run but the load policy gives BLAS one now (others' processes use a core;
# also while the partner is benched: this mode never waits for it), True always, False
# never. LSTM LM compiled step, one process alternating, the policy held at one thread:
# 76.0 against 78.8 ms (quiet, SCHED_FIFO; faster in every round); default policy, nice -20,
# load 2.4-2.7: 80.7 against 84.2. With two threads given (TRACEJIT_ADAPTIVE_THREADS=0,
# quiet) the split loop is faster: 66.2 against 68.4 ms always alongside. Since d W runs
# inside the split loop (`WEIGHT_GRAD_IN_LOOP`), "policy" keeps the split while the partner
# is punctual and d W can be in the loop (`_alongside`).
OVERLAP_WEIGHT_GRAD = "policy"

# Where d W is not computed alongside: inside the whole-loop backward (each step's
# dW += dg h_prev^T on packed_gemm's register tile, dg's rows read in place while in cache,
# split with the loop's halves: a late partner's share is taken over like the rest of its
# half) rather than one GEMM after the loop on BLAS's threads (the h_prev gather plus
# 1024x2048 @ 2048x256 for the LSTM LM, whose second BLAS thread a busy machine often
# delays: 4.9 ms min but 10 ms median at load 4). Needs H a multiple of 16 (whole tiles).
# LSTM LM layer backward op, split: 10.5 / 10.9 ms min / median against 11.7 / 17.0 (load 7);
# one thread 18.2 against 17.8-18.3. Compiled step, two threads forced, SCHED_FIFO, one
# process alternating: 62.6 against 64.2 ms median (PyTorch eager 54.0). The backward
# kernel's compile: ~0.8 s more CPU (5.4-5.9 against 4.6-4.8 s).
WEIGHT_GRAD_IN_LOOP = True


def _alongside(nth: int, in_loop: bool = False) -> bool:
    # (after loop_split.threads, which has had the load policy set BLAS's count; nth is 1
    # there also while the partner is benched for stalls in split loops: the partner never
    # stalls this mode, so the ceiling decides). `in_loop`: the split loop could compute d W
    # itself (WEIGHT_GRAD_IN_LOOP, whole tiles); with a punctual partner (nth 2) that beats
    # the alongside mode under the policy's one thread too: LSTM LM step, policy held at one
    # thread, SCHED_FIFO, one process alternating: 68.9 against 72.8 ms median (load 5-6)
    if not OVERLAP_WEIGHT_GRAD:
        return False
    from ..compiler.cpu.runtime import coreshare
    if (coreshare.blas_ceiling() or 1) < 2 or coreshare.ceding():
        return False   # (ceding: a compile worker of ours has the partner's core)
    if OVERLAP_WEIGHT_GRAD == "policy":
        if in_loop and nth >= 2:
            return False
        from ..threads import blas_threads
        return (blas_threads() or 1) < 2
    return nth >= 2


# Whether the whole-loop backward reads a cotangent d_y that is a permuted view of rows,
# (L, N, H) in memory with unit stride along H, as those rows (`_rows_view`; the kernel
# transposes each step's block for the step's gate math) rather than copying d_y to a
# C-contiguous (L, H, N) first. A layer's cotangent usually arrives so: the gradient of
# `nn/recurrent._time_major_rows`' copy is the next layer's d x (L, N, I) or the head's
# input gradient, permuted back (a 2 MB strided copy per layer in the LSTM LM step).
D_Y_AS_ROWS = True


def _rows_view(d_y) -> bool:
    """d_y (L, Hy, N) is not C-contiguous but its rows (L, N, Hy) are read along Hy with unit
    stride (a (N, L, Hy) layout too: ``readonly`` then copies whole rows, not elements)."""
    if d_y.flags.c_contiguous or d_y.shape[2] < 2:
        return False
    return d_y.strides[1] == d_y.itemsize


def _lstm_layer_backward_impl(xp, d_y, d_hn, d_cn, x, wx, w, b, h0, c0, Z, reverse=False):
    """d_y is the cotangent of each step's output rows: (L, H, N) (of h) or (L, 2H, N)
    (of h and c); d_hn, d_cn are added at the last step. x, wx and b are operands for the
    VJP of this op (second derivatives) only: the result's last part is the gradient of the
    input projection x W_ih^T (whose own gradients `lstm_layer_states`' VJP forms)."""
    L, six, N = Z.shape
    H = six // 6
    full = d_y.shape[1] == 2 * H
    off = _parts(H, N)
    ok = _takes(xp, d_y, d_hn, d_cn, Z, w, h0, c0)
    layer = _kernels.backward_layer(Z.dtype.name) if ok else None
    size = off[4] + 4 * H * L * N
    # on a cache line: the split loop's threads write neighbouring blocks of G's rows and db
    res = line_empty((size,), Z.dtype) if layer is not None else xp.empty(size, dtype=Z.dtype)
    G = res[off[4]:].reshape(L, N, 4 * H)
    order = list(_order(L, reverse))
    dg = xp.empty((4 * H, N), dtype=Z.dtype)
    if layer is not None:
        # the whole loop in one kernel, GEMMs (on W^T packed once) and the bias gradient
        # included (compiler/cpu/kernels/lstm_kernels.py)
        ro, dt = _kernels.readonly, Z.dtype
        dh = xp.empty((padded_rows(H, dt.name), N), dtype=dt)
        dh[:H] = d_hn
        dcs = xp.empty((2, H, N), dtype=dt)
        dcs[0] = d_cn
        db = res[off[1]:off[2]]
        dw = res[off[0]:off[1]].reshape(4 * H, H)
        nth = _split.threads(H)
        # d W inside the loop (each step's outer product while its gate gradient is in cache:
        # no GEMM after the loop), unless the partner computes it alongside the loop
        in_loop = WEIGHT_GRAD_IN_LOOP and H % 16 == 0 and L > 0
        alongside = _alongside(nth, in_loop)
        in_loop = in_loop and not alongside
        rows = D_Y_AS_ROWS and _rows_view(d_y)
        args = (ro(Z), ro(d_y.transpose(0, 2, 1) if rows else d_y), ro(c0), ro(h0), ro(w), dh, dcs,
                xp.empty((2, 4 * H, N), dtype=dt), G, db, dw if in_loop else xp.empty((1, 1), dt),
                xp.empty(packed_size(H, 4 * H, dt.name), dtype=dt), bool(reverse), in_loop, rows)
        if not alongside:
            _split.run(layer, args, nth)
            return _finish(xp, res, off, G, Z, h0, dh[:H], dcs[L % 2], order, db_done=True, dw_done=in_loop)
        # the loop on this thread, d W block by block on the partner meanwhile
        # (compiler/cpu/kernels/rnn_weight_grad.py), instead of splitting the loop
        sync = _split.new_sync()
        weight_grad_alongside(lambda: layer(*args, 0, 1, sync), sync, G.reshape(L * N, 4 * H), ro(Z),
                              ro(h0), bool(reverse), dw, True)
        return _finish(xp, res, off, G, Z, h0, dh[:H], dcs[L % 2], order, db_done=True, dw_done=True)
    wt = xp.ascontiguousarray(w.T)
    step = _kernels.backward_step(Z.dtype.name) if ok else None
    if step is not None:
        # one kernel per step for the gate math (compiler/cpu/kernels/lstm_kernels.py)
        ro = _kernels.readonly
        Zr, d_y, dh, dc, c0r = ro(Z), ro(d_y), ro(d_hn), ro(d_cn), ro(c0)
        bufs = [xp.empty((H, N), dtype=Z.dtype), xp.empty((H, N), dtype=Z.dtype)]
        for k in range(L - 1, -1, -1):
            t = order[k]
            c_prev = c0r if k == 0 else Zr[order[k - 1], H:2 * H]
            out = bufs[k % 2]
            step(Zr[t], c_prev, dh, dc, d_y[t], dg, out, G[t])   # G[t] = dg.T too
            dc = ro(out)
            dh = ro(_matmul(xp, wt, dg))
        return _finish(xp, res, off, G, Z, h0, dh, dc, order)
    dh, dc = d_hn, d_cn
    di, df, dgg, do = dg[:H], dg[H:2 * H], dg[2 * H:3 * H], dg[3 * H:]
    for k in range(L - 1, -1, -1):
        t = order[k]
        z = Z[t]
        c_t = z[H:2 * H]
        i, f, g, o = z[2 * H:3 * H], z[3 * H:4 * H], z[4 * H:5 * H], z[5 * H:]
        c_prev = c0 if k == 0 else Z[order[k - 1], H:2 * H]
        dy = d_y[t]
        dh = dh + dy[:H]
        if full:
            dc = dc + dy[H:2 * H]
        tc = xp.tanh(c_t)
        dh_o = dh * o
        # do = dh * tanh(c) * o * (1 - o)
        xp.multiply(dh, tc, out=do)
        xp.subtract(1, o, out=dg[:H])         # (di as scratch)
        do *= dg[:H]
        do *= o
        # dct = dc + dh * o * (1 - tanh(c)^2)
        tc *= tc
        xp.subtract(1, tc, out=tc)
        tc *= dh_o
        tc += dc
        dct = tc
        # the cotangents of the activated i, f, g: dct * (g, c_prev, i)
        xp.multiply(dct, g, out=di)
        xp.multiply(dct, c_prev, out=df)
        xp.multiply(dct, i, out=dgg)
        # through the activations: sigmoid' = s (1 - s) for i and f (one block in Z and
        # in dg, so one pass each), tanh' = 1 - g^2
        s_if = z[2 * H:4 * H]
        dg[:2 * H] *= s_if
        dg[:2 * H] *= 1 - s_if
        dgg *= 1 - g * g
        G[t] = dg.T
        dc = dct * f
        dh = _matmul(xp, wt, dg)
    return _finish(xp, res, off, G, Z, h0, dh, dc, order)


def _finish(xp, res, off, G, Z, h0, dh, dc, order, db_done=False, dw_done=False):
    """Fill in d w (unless `dw_done`), d b (unless `db_done`), d h0 and d c0 once every
    step's gate gradient is in G."""
    L, six, N = Z.shape
    H = six // 6
    G2 = G.reshape(L * N, 4 * H)
    if not dw_done:
        res[off[0]:off[1]].reshape(4 * H, H)[...] = hidden_weight_grad(xp, G2, Z, h0, order)
    if not db_done:
        res[off[1]:off[2]] = G2.sum(axis=0)
    res[off[2]:off[3]] = xp.asarray(dh).reshape(-1)
    res[off[3]:off[4]] = xp.asarray(dc).reshape(-1)
    return res


def hidden_weight_grad(xp, G2, Z, h0, order):
    """d W = sum_t dg_t @ h_{t-1}^T for a recurrent layer (LSTM, GRU, RNN): G2 (L*N, G*H) every
    step's gate gradient as rows, Z (L, kH, N) the forward's result with each step's h in
    its first H rows, h0 (H, N); `order` the steps in time order. One GEMM over all steps,
    (G*H, L*N) @ (L*N, H), both operands transposed views: G2's rows, and the h_{t-1}
    gathered as (H, L, N) (one copy of (H, N) blocks, rows of N values: 0.58 against
    0.94 ms for transposing each into an (L, N, H) buffer, LSTM LM layer)."""
    L, H, N = Z.shape[0], h0.shape[0], h0.shape[1]
    if L == 0:
        return xp.zeros((G2.shape[1], H), dtype=Z.dtype)
    # (order[0] != 0: backward in time, a reverse layer)
    hprev = hprev_steps(xp, Z, h0, 0, L, order[0] != 0)
    return _matmul(xp, G2.T, hprev.reshape(H, L * N).T)


def _lstm_layer_backward_rule(d_y: Aval, d_hn: Aval, d_cn: Aval, x: Aval, wx: Aval, w: Aval, b: Aval,
                              h0: Aval, c0: Aval, Z: Aval, reverse=False):
    L, six, N = Z.shape
    H = six // 6
    if (d_y.shape not in ((L, H, N), (L, 2 * H, N)) or d_hn.shape != (H, N) or d_cn.shape != (H, N)):
        raise ShapeError(f"lstm_layer_backward: gradients {d_y.shape}, {d_hn.shape}, {d_cn.shape} do "
                         f"not fit the layer's (L, H, N) = {(L, H, N)}")
    return Aval((_parts(H, N)[4] + 4 * H * L * N,), Z.dtype, Z.device)


def _unpack(res, L, N: int, H: int) -> tuple:
    """(d gi, d w, d b, d h0, d c0) from `lstm_layer_backward`'s flat result."""
    from .shape import reshape
    off = _parts(H, N)
    return (reshape(res[off[4]:], (L, N, 4 * H)), reshape(res[off[0]:off[1]], (4 * H, H)),
            res[off[1]:off[2]], reshape(res[off[2]:off[3]], (H, N)), reshape(res[off[3]:off[4]], (H, N)))


# ``lstm_layer_states(Z, x, wx, w, b, h0, c0)``: the h and c rows of Z, (L, 2H, N), as the
# differentiable result of the layer (Z itself has no VJP: it is a non-differentiable
# operand here, as batch_norm_stats' result is to batch_norm_train). Its VJP is
# ``lstm_layer_backward`` with respect to the layer's inputs, given alongside Z. So a
# captured layer's graph differentiates a (L, 2H, N) value: the cotangent assembled for
# it is a third of Z's size, and holds no gate rows the backward would have to read.
#
# The result is a view of Z's first 2H rows per step (no 4 MB copy per layer in the LM
# step), so the op is marked a view of its operand 0.
def _states_impl(xp, Z, x, wx, w, b, h0, c0, reverse=False):
    return Z[:, :2 * (Z.shape[1] // 6)]


def _states_rule(Z: Aval, x: Aval, wx: Aval, w: Aval, b: Aval, h0: Aval, c0: Aval, reverse=False):
    L, six, N = Z.shape
    if x.shape[0] != L or w.shape[0] * 6 != six * 4 or h0.shape != (six // 6, N):
        raise ShapeError(f"lstm_layer_states: Z {Z.shape} is not the result of lstm_layer on x {x.shape}, "
                         f"w {w.shape}, h0 {h0.shape}")
    return Aval((L, 2 * (six // 6), N), Z.dtype, Z.device)


def _states_vjp(g, out, Z, x, wx, w, b, h0, c0, reverse=False):
    from .creation import zeros
    H, N = h0.shape
    z = zeros((H, N), dtype=Z.dtype, device=Z.device)
    res = lstm_layer_backward(g, z, z, x, wx, w, b, h0, c0, Z, reverse)
    d_gi, d_w, d_b, d_h0, d_c0 = _unpack(res, x.shape[0], N, H)
    return (None,) + input_projection_grads(d_gi, x, wx) + (d_w, d_b, d_h0, d_c0)


def input_projection_grads(d_gi, x, wx) -> tuple:
    """(d x, d W_ih) of the input projection gi = x W_ih^T from d gi (L, N, 4H): two GEMMs
    over all steps, G W_ih and G^T X, the products F.linear's VJP runs (linalg's records:
    G^T as BLAS's transposed view, no copy)."""
    from .linalg import _mm, _mm_tn
    from .shape import reshape
    L, N, I = x.shape
    G2 = reshape(d_gi, (L * N, wx.shape[0]))
    return reshape(_mm(G2, wx), (L, N, I)), _mm_tn(G2, reshape(x, (L * N, I)))


LSTM_LAYER_STATES = defprim("lstm_layer_states", _states_impl, _states_rule, _states_vjp, kind="other",
                            save=lambda rq: (0, 1, 2, 3, 4, 5, 6), nondiff=(0,), extra={"view": True})


def _lstm_layer_backward_vjp(u, out, d_y, d_hn, d_cn, x, wx, w, b, h0, c0, Z, reverse=False):
    from ..nn.lstm_layer import backward_vjp   # the layer's forward written with tracejit ops
    return backward_vjp(u, d_y, d_hn, d_cn, x, wx, w, b, h0, c0, reverse) + (None,)


LSTM_LAYER_BACKWARD = defprim("lstm_layer_backward", _lstm_layer_backward_impl, _lstm_layer_backward_rule,
                              _lstm_layer_backward_vjp, kind="other", save=lambda rq: tuple(range(10)),
                              nondiff=(9,))


def lstm_layer(x, wx, w, b, h0, c0, reverse: bool = False):
    """The forward time loop of one LSTM layer (see above), its input projection x W_ih^T
    (x (L, N, I), wx = W_ih (4H, I)) included: -> Z (L, 6H, N), not differentiable by
    itself (`lstm_layer_states` is); `tracejit.nn.lstm_layer.lstm_layer_fm` is the layer
    users reach."""
    return bind(LSTM_LAYER, x, wx, w, b, h0, c0, reverse=bool(reverse))


def lstm_layer_states(Z, x, wx, w, b, h0, c0, reverse: bool = False):
    """Every step's h and c (L, 2H, N) from `lstm_layer`'s result Z on these operands,
    differentiable in them (its VJP is `lstm_layer_backward` and the input projection's
    two GEMMs, `input_projection_grads`)."""
    return bind(LSTM_LAYER_STATES, Z, x, wx, w, b, h0, c0, reverse=bool(reverse))


def lstm_layer_backward(d_y, d_hn, d_cn, x, wx, w, b, h0, c0, Z, reverse: bool = False):
    """The backward time loop of `lstm_layer` (Z its result): -> the flat
    (d w | d b | d h0 | d c0 | d gi), d gi the gradient of the input projection x W_ih^T;
    `unpack_backward` splits it."""
    return bind(LSTM_LAYER_BACKWARD, d_y, d_hn, d_cn, x, wx, w, b, h0, c0, Z, reverse=bool(reverse))


def unpack_backward(res, L, N: int, H: int) -> tuple:
    """(d gi (L, N, 4H), d w, d b, d h0, d c0) from `lstm_layer_backward`'s result."""
    return _unpack(res, L, N, H)
