"""An LSTM layer's time loops as primitives: ``lstm_layer``, ``lstm_layer_states``,
``lstm_layer_backward``.

Why primitives: step by step, an eager LSTM pays dispatch and graph bookkeeping for ~13
elementwise ops forward and ~25 backward per step, more than the gate math itself. Here
each time loop runs inside one op (per step one GEMM and the gate math), as PyTorch's CPU
LSTM is one oneDNN layer call each way.

Eagerly, `tracejit.ops.lstm_layer` runs ``lstm_layer`` / ``lstm_layer_backward`` as an
autograd Function. Captured, a layer is ``lstm_layer`` plus ``lstm_layer_states`` (its h
and c rows, whose VJP is ``lstm_layer_backward``), so compiled graphs run the same loops.
Second derivatives recompute the layer with tracejit ops and let autograd differentiate it.
"""
from __future__ import annotations

from ..errors import DTypeError, ShapeError
from .elementwise import errstate, sigmoid_form
from .registry import Aval, defprim
from .eager import bind

__all__ = ["lstm_layer", "lstm_layer_states", "lstm_layer_backward", "unpack_backward", "input_projection_grads"]


# Layouts: x (L, N, I) time-major; wx = W_ih (4H, I); w (4H, H); b (4H,), both biases
# summed; h0, c0 (H, N). The forward's result Z is (L, 6H, N): per step h_t (rows 0:H),
# c_t (H:2H) and the activated gates i, f, g, o (2H:6H), which the backward reads instead
# of recomputing the step's GEMM. States are feature-major because OpenBLAS runs the small
# per-step products faster that way (``W @ h`` takes ~70% of ``h^T @ W^T``'s time),
# and every gate is then a contiguous row block.

def _matmul(xp, a, b):
    """A per-step product as matmul runs (its `dispatch`: a backend's GEMM where one is
    registered; a part of this layer's run, not a matmul of its own)."""
    from .linalg import MATMUL
    return MATMUL.dispatch(xp, a, b)


def check_float_operands(op: str, first: Aval, **others: Aval) -> None:
    """A recurrent layer op's operands share its first operand's (gi's, the LSTM's x's)
    floating dtype; the error names the first that does not (its keyword)."""
    for name, a in others.items():
        if a.dtype is not first.dtype or not a.dtype.is_floating_point:
            raise DTypeError(f"{op}: expected floating point operands of one dtype, got {name} "
                             f"of dtype {a.dtype.name} (first operand: {first.dtype.name})")


def _order(L: int, reverse: bool):
    return range(L - 1, -1, -1) if reverse else range(L)


def hold_inactive(new, prev, batch_sizes, t: int) -> None:
    """A packed layer's step t (`batch_sizes`, see `check_batch_sizes`): the columns of the
    sequences that have no step t keep their state ``prev`` (so each sequence's final
    state is that of its own last step, in both directions)."""
    if batch_sizes is not None and batch_sizes[t] < new.shape[1]:
        new[:, batch_sizes[t]:] = prev[:, batch_sizes[t]:]


def zero_inactive(g, batch_sizes, t: int) -> None:
    """A packed layer's step t computes nothing for the held columns: their gate gradient
    (g feature-major, (G*H, N)) is zero."""
    if batch_sizes is not None and batch_sizes[t] < g.shape[1]:
        g[:, batch_sizes[t]:] = 0


def check_batch_sizes(op: str, batch_sizes, L, N) -> None:
    """``batch_sizes`` of a packed layer (PyTorch's PackedSequence.batch_sizes): how many of
    the N sequences (sorted longest first, the batch's columns) have step t, for each of
    the L steps; non-increasing, from 1 to N. Step t of the layer updates the first
    batch_sizes[t] columns and holds the others' states. None: every sequence is L long."""
    if batch_sizes is None:
        return
    bs = tuple(batch_sizes)
    if (not isinstance(L, int) or len(bs) != L or any(not isinstance(b, int) for b in bs)
            or any(b < 1 or b > N for b in bs) or any(a < b for a, b in zip(bs, bs[1:]))):
        raise ShapeError(f"{op}: batch_sizes {bs} should be {L} non-increasing counts from 1 to the "
                         f"batch's {N} sequences, one per step")


def forward_steps(xp, step, gi, w, b, h0, out, reverse: bool, batch_sizes, c0=None):
    """The numpy forms' forward time loop (LSTM, GRU, RNN): per step m = W h_prev, then
    ``step(xp, g, m, b, h, c, o)`` fills o = out[t] and returns the new h (and c, else
    None) as views of o. A packed layer's held columns keep their state. -> out"""
    bcol = b.reshape(b.shape[0], 1)
    h, c = h0, c0
    with errstate(xp):
        for t in _order(gi.shape[0], reverse):
            h_new, c_new = step(xp, gi[t].T, _matmul(xp, w, h), bcol, h, c, out[t])
            hold_inactive(h_new, h, batch_sizes, t)
            if c is not None:
                hold_inactive(c_new, c, batch_sizes, t)
            h, c = h_new, c_new
    return out


def backward_steps(xp, step_back, d_y, d_hn, w, order, batch_sizes, d_cn=None) -> tuple:
    """The numpy forms' backward time loop (LSTM, GRU, RNN), last step first:
    ``step_back(xp, t, k, dh, dc)`` writes the step's gate gradients and returns
    (dm, direct, dc_prev), the previous dh being W^T dm + direct. -> (d h0, d c0)"""
    H = d_hn.shape[0]
    wt = xp.ascontiguousarray(w.T)
    dh, dc = d_hn, d_cn
    for k in range(len(order) - 1, -1, -1):
        t = order[k]
        dy = d_y[t]
        dh = dh + dy[:H]
        if dc is not None and dy.shape[0] == 2 * H:
            dc = dc + dy[H:]
        dm, direct, dc_new = step_back(xp, t, k, dh, dc)
        dh_new = _matmul(xp, wt, dm)
        if direct is not None:
            dh_new += direct
        if batch_sizes is not None:   # (held columns: their cotangents pass on unchanged)
            dh_new = xp.array(dh_new)
            hold_inactive(dh_new, dh, batch_sizes, t)
            if dc is not None:
                hold_inactive(dc_new, dc, batch_sizes, t)
        dh, dc = dh_new, dc_new
    return dh, dc


def _lstm_layer_impl(xp, x, wx, w, b, h0, c0, reverse=False, batch_sizes=None):
    L, N, I = x.shape
    H = w.shape[1]
    # the input projection of the whole sequence as one GEMM, (L*N, I) @ (I, 4H)
    gi = _matmul(xp, x.reshape(L * N, I), wx.T).reshape(L, N, 4 * H)
    return forward_steps(xp, _lstm_step, gi, w, b, h0, xp.empty((L, 6 * H, N), dtype=x.dtype), reverse,
                         batch_sizes, c0)


def _lstm_step(xp, g, m, b, h, c, z):
    """One step of the numpy form (`forward_steps`): z, the step's (6H, N) block of Z, gets
    the gates' pre-activation g + m + b activated and the new c and h."""
    gates = z[2 * h.shape[0]:]
    xp.add(g, m, out=gates)
    gates += b
    return cell_forward(xp, z, c)


def cell_forward(xp, z, c) -> tuple:
    """The LSTM cell's numpy form on feature-major blocks: z (6H, N) with the gates'
    pre-activations (i, f, g, o) in its rows 2H:, activated in place, and the new c and h
    written to rows H:2H and :H; c (H, N) the cell state. -> (h, c) views of z."""
    H = c.shape[0]
    gates = z[2 * H:]
    with errstate(xp):
        sigmoid_form(xp, gates[:2 * H], gates[:2 * H])     # i, f
        sigmoid_form(xp, gates[3 * H:], gates[3 * H:])     # o
        xp.tanh(gates[2 * H:3 * H], out=gates[2 * H:3 * H])
    i, f, g, o = gates[:H], gates[H:2 * H], gates[2 * H:3 * H], gates[3 * H:]
    c_new, h_new = z[H:2 * H], z[:H]
    xp.multiply(f, c, out=c_new)
    c_new += i * g
    xp.tanh(c_new, out=h_new)
    h_new *= o
    return h_new, c_new


def cell_backward(xp, z, c_prev, dh, dc, dg):
    """The backward of `cell_forward` (z its result, c_prev its c): from the cotangents dh
    and dc of the step's h and c, the gates' pre-activation gradient into dg (4H, N).
    -> the cotangent of c_prev."""
    H = c_prev.shape[0]
    c_t = z[H:2 * H]
    i, f, g, o = z[2 * H:3 * H], z[3 * H:4 * H], z[4 * H:5 * H], z[5 * H:]
    di, df, dgg, do = dg[:H], dg[H:2 * H], dg[2 * H:3 * H], dg[3 * H:]
    tc = xp.tanh(c_t)
    dh_o = dh * o
    # do = dh * tanh(c) * o * (1 - o)
    xp.multiply(dh, tc, out=do)
    xp.subtract(1, o, out=di)             # (di as scratch)
    do *= di
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
    # through the activations: sigmoid' = s (1 - s) for i and f (one block in z and in dg,
    # so one pass each), tanh' = 1 - g^2
    s_if = z[2 * H:4 * H]
    dg[:2 * H] *= s_if
    dg[:2 * H] *= 1 - s_if
    dgg *= 1 - g * g
    return dct * f


def _lstm_layer_rule(x: Aval, wx: Aval, w: Aval, b: Aval, h0: Aval, c0: Aval, reverse=False,
                     batch_sizes=None):
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
    check_batch_sizes("lstm_layer", batch_sizes, L, N)
    return Aval((L, 6 * H, N), x.dtype, x.device)


# No VJP: see `lstm_layer_states` below, the layer's differentiable result.
LSTM_LAYER = defprim("lstm_layer", _lstm_layer_impl, _lstm_layer_rule, None, kind="other")


# A recurrent layer's backward (LSTM, GRU, RNN) returns one flat array with its fixed-size
# parts first, so that only the last part has a size that depends on the sequence length
# (a symbolic dim when compiled): d w (G*H*H) | d b (G*H) | d h0 (H*N) [| d c0 (H*N)] |
# d gi (L*N*G*H), G the gates (4, 3, 1) and c0 the LSTM's alone.
def backward_parts(gates: int, H: int, N: int, states: int = 1) -> tuple:
    """Offsets of d w, d b, each state's gradient and d gi in the backward's flat result."""
    off = [0, gates * H * H, gates * H * H + gates * H]
    for _ in range(states):
        off.append(off[-1] + H * N)
    return tuple(off)


def unpack_parts(res, L, N: int, H: int, gates: int, states: int = 1) -> tuple:
    """(d gi (L, N, G*H), d w (G*H, H), d b (G*H,), d h0 (H, N)[, d c0]) from the flat result."""
    from .shape import reshape
    off = backward_parts(gates, H, N, states)
    return ((reshape(res[off[-1]:], (L, N, gates * H)), reshape(res[off[0]:off[1]], (gates * H, H)),
             res[off[1]:off[2]]) + tuple(reshape(res[off[k]:off[k + 1]], (H, N)) for k in range(2, 2 + states)))


def _lstm_layer_backward_impl(xp, d_y, d_hn, d_cn, x, wx, w, b, h0, c0, Z, reverse=False,
                              batch_sizes=None):
    """d_y is the cotangent of each step's output rows: (L, H, N) (of h) or (L, 2H, N)
    (of h and c); d_hn, d_cn are added at the last step. x, wx and b are operands for the
    VJP of this op (second derivatives) only: the result's last part is the gradient of the
    input projection x W_ih^T (whose own gradients `lstm_layer_states`' VJP forms)."""
    L, six, N = Z.shape
    H = six // 6
    off = backward_parts(4, H, N, 2)
    res = xp.empty(off[4] + 4 * H * L * N, dtype=Z.dtype)
    G = res[off[4]:].reshape(L, N, 4 * H)
    order = list(_order(L, reverse))
    dg = xp.empty((4 * H, N), dtype=Z.dtype)

    def step_back(xp, t, k, dh, dc):
        dc_prev = cell_backward(xp, Z[t], c0 if k == 0 else Z[order[k - 1], H:2 * H], dh, dc, dg)
        zero_inactive(dg, batch_sizes, t)
        G[t] = dg.T
        return dg, None, dc_prev

    dh, dc = backward_steps(xp, step_back, d_y, d_hn, w, order, batch_sizes, d_cn)
    return finish_backward(xp, res, off, G, Z, h0, (dh, dc), order)


def finish_backward(xp, res, off, G, Z, h0, states: tuple, order, db_done=False, dw_done=False):
    """A recurrent layer's backward (LSTM, GRU, RNN) once every step's gate gradient is in G
    (L, N, G*H), d (W h + b) per step: fill in the flat result's d w (unless `dw_done`),
    d b (unless `db_done`) and each state's gradient (`states`: d h0[, d c0]). Z is the
    forward's result (each step's h in its first H rows)."""
    L, N, GH = G.shape
    H = h0.shape[0]
    G2 = G.reshape(L * N, GH)
    if not dw_done:
        res[off[0]:off[1]].reshape(GH, H)[...] = hidden_weight_grad(xp, G2, Z, h0, order)
    if not db_done:
        res[off[1]:off[2]] = G2.sum(axis=0)
    for k, d in enumerate(states):
        res[off[2 + k]:off[3 + k]] = xp.asarray(d).reshape(-1)
    return res


def hidden_weight_grad(xp, G2, Z, h0, order):
    """d W = sum_t dg_t @ h_{t-1}^T for a recurrent layer as one GEMM over all steps:
    G2 (L*N, G*H) the gate gradients as rows, Z (L, kH, N) the forward's result, h0 (H, N)."""
    L, H, N = Z.shape[0], h0.shape[0], h0.shape[1]
    if L == 0:
        return xp.zeros((G2.shape[1], H), dtype=Z.dtype)
    # h_prev of every step as (H, L, N): h_{t-1}, or h_{t+1} for a reverse layer (its
    # order starts at the last step)
    if L == 1:   # (a cell's one step: h0 itself, in the layout the copy below would have)
        return _matmul(xp, G2.T, xp.ascontiguousarray(h0, dtype=Z.dtype).T)
    hprev = xp.empty((H, L, N), dtype=Z.dtype)
    if order[0] == 0:
        hprev[:, 0] = h0
        hprev[:, 1:] = Z[:L - 1, :H].transpose(1, 0, 2)
    else:
        hprev[:, -1] = h0
        hprev[:, :-1] = Z[1:, :H].transpose(1, 0, 2)
    return _matmul(xp, G2.T, hprev.reshape(H, L * N).T)


def _lstm_layer_backward_rule(d_y: Aval, d_hn: Aval, d_cn: Aval, x: Aval, wx: Aval, w: Aval, b: Aval,
                              h0: Aval, c0: Aval, Z: Aval, reverse=False, batch_sizes=None):
    L, six, N = Z.shape
    H = six // 6
    if (d_y.shape not in ((L, H, N), (L, 2 * H, N)) or d_hn.shape != (H, N) or d_cn.shape != (H, N)):
        raise ShapeError(f"lstm_layer_backward: gradients {d_y.shape}, {d_hn.shape}, {d_cn.shape} do "
                         f"not fit the layer's (L, H, N) = {(L, H, N)}")
    check_batch_sizes("lstm_layer_backward", batch_sizes, L, N)
    return Aval((backward_parts(4, H, N, 2)[4] + 4 * H * L * N,), Z.dtype, Z.device)


def states_prim(layer: str, operands: int, gates: int, zrows: int, states: int, backward, grads,
                view: bool):
    """``<layer>_states(Z, *ins)``: a captured recurrent layer's differentiable result, the
    first `states` * H rows of each step of the layer primitive's result Z (L, zrows*H, N)
    (every step's h, and the LSTM's c), Z a non-differentiable operand (as batch_norm_stats'
    is to batch_norm_train). Its VJP is the layer's `backward` primitive on the cotangent
    and zeros for the final states, ``grads(res, ins)`` the inputs' gradients. The
    `operands` (Z and the ins) end with w (gates*H, H), b and the `states` initial states.
    `view`: the result is a view of Z (the op is marked a view of its operand 0), else a
    copy."""
    name = f"{layer}_states"

    def impl(xp, Z, *ins, reverse=False, batch_sizes=None):
        rows = Z[:, :states * (Z.shape[1] // zrows)]
        return rows if view else xp.ascontiguousarray(rows)

    def rule(Z: Aval, *ins: Aval, reverse=False, batch_sizes=None):
        L, zr, N = Z.shape
        w, h0 = ins[-2 - states], ins[-states]
        if ins[0].shape[0] != L or w.shape[0] * zrows != zr * gates or h0.shape != (zr // zrows, N):
            raise ShapeError(f"{name}: Z {Z.shape} is not the result of {layer} on {ins[0].shape}, "
                             f"w {w.shape}, h0 {h0.shape}")
        return Aval((L, states * (zr // zrows), N), Z.dtype, Z.device)

    def vjp(g, out, Z, *ins, reverse=False, batch_sizes=None):
        from .creation import zeros
        z = zeros(ins[-1].shape, dtype=Z.dtype, device=Z.device)
        return (None,) + grads(backward(g, *(z,) * states, *ins, Z, reverse, batch_sizes), ins)

    return defprim(name, impl, rule, vjp, kind="other", save=lambda rq: tuple(range(operands)), nondiff=(0,),
                   extra={"view": True} if view else {})


def input_projection_grads(d_gi, x, wx) -> tuple:
    """(d x, d W_ih) of the input projection gi = x W_ih^T from d gi (L, N, 4H): two GEMMs
    over all steps, G W_ih and G^T X, the products F.linear's VJP runs (linalg's records:
    G^T as BLAS's transposed view, no copy)."""
    from .linalg import _mm, _mm_tn
    from .shape import reshape
    L, N, I = x.shape
    G2 = reshape(d_gi, (L * N, wx.shape[0]))
    return reshape(_mm(G2, wx), (L, N, I)), _mm_tn(G2, reshape(x, (L * N, I)))


def layer_grads(res, ins) -> tuple:
    """The gradients of the LSTM layer's inputs (x, W_ih, W, b, h0, c0) from the flat result
    of `lstm_layer_backward`: d x and d W_ih from the input projection's gradient."""
    x, wx, w = ins[:3]
    d_gi, d_w, d_b, d_h0, d_c0 = unpack_backward(res, x.shape[0], x.shape[1], w.shape[1])
    return input_projection_grads(d_gi, x, wx) + (d_w, d_b, d_h0, d_c0)


# ``lstm_layer_states(Z, x, wx, w, b, h0, c0)``: every step's h and c (L, 2H, N), a view
LSTM_LAYER_STATES = states_prim("lstm_layer", 7, 4, 6, 2, lambda *a: lstm_layer_backward(*a), layer_grads,
                                view=True)


def _lstm_layer_backward_vjp(u, out, d_y, d_hn, d_cn, x, wx, w, b, h0, c0, Z, reverse=False,
                             batch_sizes=None):
    from .lstm_layer import backward_vjp   # the layer's forward written with tracejit ops
    return backward_vjp(u, d_y, d_hn, d_cn, x, wx, w, b, h0, c0, reverse, batch_sizes) + (None,)


LSTM_LAYER_BACKWARD = defprim("lstm_layer_backward", _lstm_layer_backward_impl, _lstm_layer_backward_rule,
                              _lstm_layer_backward_vjp, kind="other", save=lambda rq: tuple(range(10)),
                              nondiff=(9,))


def packed_params(reverse: bool, batch_sizes=None) -> dict:
    """A layer primitive's static params: ``reverse``, and ``batch_sizes`` (a tuple of
    ints) only for a packed layer, so an unpacked layer's equation and its kernels' calls
    stay as they were."""
    if batch_sizes is None:
        return {"reverse": bool(reverse)}
    return {"reverse": bool(reverse), "batch_sizes": tuple(int(b) for b in batch_sizes)}


def lstm_layer(x, wx, w, b, h0, c0, reverse: bool = False, batch_sizes=None):
    """The forward time loop of one LSTM layer, input projection included: -> Z (L, 6H, N),
    not differentiable itself (`lstm_layer_states` is). `batch_sizes`: a packed layer's
    per-step sequence counts."""
    return bind(LSTM_LAYER, x, wx, w, b, h0, c0, **packed_params(reverse, batch_sizes))


def lstm_layer_states(Z, x, wx, w, b, h0, c0, reverse: bool = False, batch_sizes=None):
    """Every step's h and c (L, 2H, N) from `lstm_layer`'s result Z on these operands,
    differentiable in them (its VJP is `lstm_layer_backward` and the input projection's
    two GEMMs, `input_projection_grads`)."""
    return bind(LSTM_LAYER_STATES, Z, x, wx, w, b, h0, c0, **packed_params(reverse, batch_sizes))


def lstm_layer_backward(d_y, d_hn, d_cn, x, wx, w, b, h0, c0, Z, reverse: bool = False, batch_sizes=None):
    """The backward time loop of `lstm_layer` (Z its result): -> the flat
    (d w | d b | d h0 | d c0 | d gi), d gi the gradient of the input projection x W_ih^T;
    `unpack_backward` splits it."""
    return bind(LSTM_LAYER_BACKWARD, d_y, d_hn, d_cn, x, wx, w, b, h0, c0, Z,
                **packed_params(reverse, batch_sizes))


def unpack_backward(res, L, N: int, H: int) -> tuple:
    """(d gi (L, N, 4H), d w, d b, d h0, d c0) from `lstm_layer_backward`'s result."""
    return unpack_parts(res, L, N, H, 4, 2)
