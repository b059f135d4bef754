"""An eager GRU layer's time loops as two primitives: ``gru_layer`` and ``gru_layer_backward``.

Why: as for the LSTM (ops/lstm_prim.py), per-step graph nodes, slicing and accumulation
cost more than the gate math; here each time loop runs inside one op. Captured, a layer is
``gru_layer`` plus ``gru_layer_states`` (VJP ``gru_layer_backward``), whose own VJP
recomputes the layer with tracejit ops.

Layouts, feature-major as the LSTM layer's: gi (L, N, 3H), the input projection with b_ih
(gate order r, z, n as PyTorch's); w (3H, H) = W_hh; b (3H,) = b_hh; h0 (H, N). The
forward's result Z is (L, 5H, N): per step h_t, r, z, n and ``W_hn h_{t-1} + b_hn``.
"""
from __future__ import annotations

from ..errors import ShapeError
from .elementwise import sigmoid_form
# the LSTM layer's helpers
from .lstm_prim import (_order, backward_parts, backward_steps, check_batch_sizes, check_float_operands,
                        finish_backward, forward_steps, packed_params, states_prim, unpack_parts,
                        zero_inactive)
from .registry import Aval, defprim
from .eager import bind

__all__ = ["gru_layer", "gru_layer_states", "gru_layer_backward", "unpack_backward"]


def _gru_layer_impl(xp, gi, w, b, h0, reverse=False, batch_sizes=None):
    L, N, three = gi.shape
    return forward_steps(xp, _gru_step, gi, w, b, h0, xp.empty((L, 5 * (three // 3), N), dtype=gi.dtype),
                         reverse, batch_sizes)


def _gru_step(xp, g, m, b, h, c, z_):
    """One step of the numpy form (lstm_prim.py `forward_steps`): z_, the step's (5H, N)
    block of Z, gets (h', r, z, n, hn) from g = gi[t]^T and m + b = W h + b."""
    H = h.shape[0]
    m += b
    rz = z_[H:3 * H]
    xp.add(g[:2 * H], m[:2 * H], out=rz)
    sigmoid_form(xp, rz, rz)
    r, z = z_[H:2 * H], z_[2 * H:3 * H]
    hn = z_[4 * H:]
    hn[...] = m[2 * H:]
    n = z_[3 * H:4 * H]
    xp.multiply(r, hn, out=n)
    n += g[2 * H:]
    xp.tanh(n, out=n)
    h_new = z_[:H]
    xp.subtract(h, n, out=h_new)     # h' = n + z (h - n)
    h_new *= z
    h_new += n
    return h_new, None


def _gru_layer_rule(gi: Aval, w: Aval, b: Aval, h0: Aval, reverse=False, batch_sizes=None):
    if len(gi.shape) != 3 or len(w.shape) != 2:
        raise ShapeError(f"gru_layer: expected gi (L, N, 3H) and w (3H, H), got {gi.shape} and {w.shape}")
    L, N, three = gi.shape
    H = w.shape[1]
    if three != 3 * H or w.shape[0] != 3 * H or b.shape != (3 * H,) or h0.shape != (H, N):
        raise ShapeError(f"gru_layer: gi {gi.shape}, w {w.shape}, b {b.shape} and h0 {h0.shape} do not "
                         f"fit gi (L, N, 3H), w (3H, H), b (3H,), h0 (H, N)")
    check_float_operands("gru_layer", gi, w=w, b=b, h0=h0)
    check_batch_sizes("gru_layer", batch_sizes, L, N)
    return Aval((L, 5 * H, N), gi.dtype, gi.device)


# No VJP: `gru_layer_states` (below) is the layer's differentiable result in captured graphs.
GRU_LAYER = defprim("gru_layer", _gru_layer_impl, _gru_layer_rule, None, kind="other")


# The backward's flat result: ops/lstm_prim.py `backward_parts` of 3 gates,
# d w (3H*H) | d b (3H) | d h0 (H*N) | d gi (L*N*3H).
def _gru_layer_backward_impl(xp, d_y, d_hn, gi, w, b, h0, Z, reverse=False, batch_sizes=None):
    """d_y (L, H, N) is the cotangent of every step's h, d_hn added at the last step."""
    L, five, N = Z.shape
    H = five // 5
    off = backward_parts(3, H, N)
    res = xp.empty(off[3] + 3 * H * L * N, dtype=Z.dtype)
    G = res[off[3]:].reshape(L, N, 3 * H)         # d gi, in the projection's layout
    M = xp.empty((L, N, 3 * H), dtype=Z.dtype)     # d (W h + b) per step
    order = list(_order(L, reverse))
    dm = xp.empty((3 * H, N), dtype=Z.dtype)
    tmp = xp.empty((H, N), dtype=Z.dtype)
    dr, dz, dn = dm[:H], dm[H:2 * H], dm[2 * H:]

    def step_back(xp, t, k, dh, dc):
        z_ = Z[t]
        r, z, n, hn = z_[H:2 * H], z_[2 * H:3 * H], z_[3 * H:4 * H], z_[4 * H:]
        h_prev = h0 if k == 0 else Z[order[k - 1], :H]
        # dz_pre = dh (h_prev - n) z (1 - z)
        xp.subtract(h_prev, n, out=dz)
        dz[...] *= dh
        xp.subtract(1, z, out=tmp)
        tmp[...] *= z
        dz[...] *= tmp
        # dn_pre = dh (1 - z) (1 - n^2)
        xp.subtract(1, z, out=dn)
        dn[...] *= dh
        xp.multiply(n, n, out=tmp)
        xp.subtract(1, tmp, out=tmp)
        dn[...] *= tmp
        # dr_pre = dn_pre hn r (1 - r)
        xp.multiply(dn, hn, out=dr)
        xp.subtract(1, r, out=tmp)
        tmp[...] *= r
        dr[...] *= tmp
        zero_inactive(dm, batch_sizes, t)
        G[t] = dm.T                                # d gi: (dr_pre, dz_pre, dn_pre)
        dn[...] *= r                               # d hn = dn_pre r
        M[t] = dm.T
        return dm, dh * z, None

    dh, _ = backward_steps(xp, step_back, d_y, d_hn, w, order, batch_sizes)
    return finish_backward(xp, res, off, M, Z, h0, (dh,), order)


def _gru_layer_backward_rule(d_y: Aval, d_hn: Aval, gi: Aval, w: Aval, b: Aval, h0: Aval, Z: Aval,
                             reverse=False, batch_sizes=None):
    L, five, N = Z.shape
    H = five // 5
    if d_y.shape != (L, H, N) or d_hn.shape != (H, N):
        raise ShapeError(f"gru_layer_backward: gradients {d_y.shape}, {d_hn.shape} do not fit the "
                         f"layer's (L, H, N) = {(L, H, N)}")
    check_batch_sizes("gru_layer_backward", batch_sizes, L, N)
    return Aval((backward_parts(3, H, N)[3] + 3 * H * L * N,), Z.dtype, Z.device)


def _gru_layer_backward_vjp(u, out, d_y, d_hn, gi, w, b, h0, Z, reverse=False, batch_sizes=None):
    from .gru_layer import backward_vjp   # the layer's forward written with tracejit ops
    return backward_vjp(u, d_y, d_hn, gi, w, b, h0, reverse, batch_sizes) + (None,)


GRU_LAYER_BACKWARD = defprim("gru_layer_backward", _gru_layer_backward_impl, _gru_layer_backward_rule,
                             _gru_layer_backward_vjp, kind="other", save=lambda rq: tuple(range(7)),
                             nondiff=(6,))


def layer_grads(res, ins) -> tuple:
    """The gradients of the GRU layer's inputs (gi, W, b, h0) from `gru_layer_backward`'s result."""
    return unpack_backward(res, ins[0].shape[0], ins[0].shape[1], ins[1].shape[1])


# ``gru_layer_states(Z, gi, w, b, h0)``: every step's h (L, H, N), a copy of Z's h rows
GRU_LAYER_STATES = states_prim("gru_layer", 5, 3, 5, 1, lambda *a: gru_layer_backward(*a), layer_grads,
                               view=False)


def gru_layer_states(Z, gi, w, b, h0, reverse: bool = False, batch_sizes=None):
    """Every step's h (L, H, N) from `gru_layer`'s result Z on these operands,
    differentiable in them (its VJP is `gru_layer_backward`)."""
    return bind(GRU_LAYER_STATES, Z, gi, w, b, h0, **packed_params(reverse, batch_sizes))


def gru_layer(gi, w, b, h0, reverse: bool = False, batch_sizes=None):
    """The forward time loop of one GRU layer: -> Z (L, 5H, N) (see above); `batch_sizes`:
    a packed layer's per-step sequence counts (ops/lstm_prim.py `check_batch_sizes`)."""
    return bind(GRU_LAYER, gi, w, b, h0, **packed_params(reverse, batch_sizes))


def gru_layer_backward(d_y, d_hn, gi, w, b, h0, Z, reverse: bool = False, batch_sizes=None):
    """The backward time loop of `gru_layer` (Z its result): -> the flat
    (d w | d b | d h0 | d gi); `unpack_backward` splits it."""
    return bind(GRU_LAYER_BACKWARD, d_y, d_hn, gi, w, b, h0, Z, **packed_params(reverse, batch_sizes))


def unpack_backward(res, L, N: int, H: int) -> tuple:
    """(d gi (L, N, 3H), d w (3H, H), d b (3H,), d h0 (H, N)) from `gru_layer_backward`'s result."""
    return unpack_parts(res, L, N, H, 3)
