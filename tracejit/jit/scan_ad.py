"""Reverse mode of ``scan`` with residuals saved by the forward loop.

A differentiated ``scan`` is rewritten before its VJP is taken (`add_residuals`, called
by `autodiff.joint`): its body is split the way `autodiff.split` splits a whole program,

- the forward loop's body also returns, per step, the carries entering the step and
  the values the step's backward needs that are expensive to recompute (a matmul's
  output: the hidden projection of a recurrent cell); they come out stacked on a
  leading axis of the trip count, like the loop's ys;
- the reverse loop's body (`scan_vjp`) reads those slices and recomputes only cheap
  work: elementwise math (fused into its kernels), views, and values that do not change
  from step to step.

Every differentiated scan takes this path (a body with control flow, or a trip count
that is not a size, is refused). Recording the carries with a second forward loop and
recomputing each step's forward inside the reverse loop instead ran the LSTM's
hidden-projection GEMMs three times per step, not once. (lax.scan's partial evaluation
of the body does the same split.)
"""
from __future__ import annotations

from .. import ops
from ..ops.registry import Aval
from .control import SCAN
from .ir import Eqn, Graph, Var, def_use
from .tracer import TraceContext, _make_tracer
from ..ops.linalg import MATMUL
from ..ops.shape import PERMUTE, RESHAPE

__all__ = ["add_residuals", "scan_vjp"]


def _is_view(e: Eqn) -> bool:
    p = e.prim
    return bool(p.is_view or (p.view_if is not None and p.view_if(e.params)))


def _body_cheap(bg: Graph, first_const: int):
    """The recompute rule for a loop body: elementwise work, broadcasts and views of
    per-step values, and anything computed from loop constants alone (it would otherwise be
    stacked T times although it is the same in every step). Random draws are never
    recomputed (the backward must see the forward's draw)."""
    invariant = set(bg.inputs[first_const:])
    for e in bg.eqns:
        if e.prim.kind != "random" and all(not isinstance(a, Var) or a in invariant for a in e.inputs):
            invariant.update(e.outs)

    def cheap(e: Eqn) -> bool:
        if len(e.outs) != 1:
            return False
        if e.out in invariant:
            return True
        return e.prim.kind == "elementwise" or bool(e.prim.extra.get("broadcast_read")) or _is_view(e)
    return cheap


def _body_active(e: Eqn, act: set) -> list:
    """Which body inputs the reverse loop differentiates: every floating carry (a carry
    whose initial value is a constant still feeds later steps that depend on active
    values), the active xs and loop constants."""
    _, carries, xs, consts = _parts(e.inputs, 1, e.params["n_carry"], e.params["n_xs"])
    return ([False] + [a.aval.dtype.is_floating_point for a in carries]
            + [isinstance(a, Var) and a in act for a in xs]
            + [isinstance(a, Var) and a in act for a in consts])


def _parts(seq, *sizes) -> list:
    """`seq` cut into consecutive parts of these sizes, and the rest."""
    out, i = [], 0
    for n in sizes:
        out.append(seq[i:i + n])
        i += n
    return out + [seq[i:]]


def _stacked(trip, v) -> Aval:
    return Aval((trip,) + tuple(v.aval.shape), v.aval.dtype, v.aval.device)


def add_residuals(graph: Graph, act: set) -> Graph:
    """`graph` with each differentiated scan replaced by one whose body also returns the
    step's residuals (params ``n_res``, ``vjp_graph``: the body's backward, ``vjp_active``).
    Scans whose trip count is not a size, or whose body has control flow, are left as they
    are (their VJP says why it cannot be taken)."""
    from .autodiff import split
    eqns, changed = [], False
    for e in graph.eqns:
        bg = e.params.get("body_graph") if e.prim is SCAN else None
        if (bg is None or "n_res" in e.params or e.params.get("trip") is None
                or not any(isinstance(a, Var) and a in act for a in e.inputs[1:])
                or any(x.prim.kind == "control" for x in bg.eqns)):
            eqns.append(e)
            continue
        nc, nx = e.params["n_carry"], e.params["n_xs"]
        active = _body_active(e, act)
        fb, bb, n_saved = split(bg, active, cheap=_body_cheap(bg, 1 + nc + nx))
        c_in = tuple(bg.inputs[1:1 + nc])
        saved = tuple(fb.outputs[len(bg.outputs):])
        body = Graph(bg.inputs, fb.eqns, tuple(bg.outputs) + c_in + saved, bg.name)
        trip = e.params["trip"]
        res_outs = tuple(Var(_stacked(trip, v)) for v in c_in + saved)
        params = dict(e.params, body_graph=body, n_res=len(res_outs), vjp_graph=bb, vjp_active=tuple(active))
        eqns.append(Eqn(e.prim, e.inputs, tuple(e.outs) + res_outs, params, e.loc))
        changed = True
    return Graph(graph.inputs, tuple(eqns), graph.outputs, graph.name) if changed else graph


def scan_vjp(ctx: TraceContext, e: Eqn, gs: list, act: set, val):
    """Gradients of a scan rewritten by `add_residuals`: one reverse loop over the body's
    backward, reading the stacked residuals as per-step slices, carrying the carries'
    cotangents, accumulating the loop constants' gradients and stacking the xs'."""
    bb: Graph = e.params["vjp_graph"]
    nc, nx, n_res = e.params["n_carry"], e.params["n_xs"], e.params["n_res"]
    active = e.params["vjp_active"]
    ny = len(e.outs) - nc - n_res
    n_saved = n_res - nc
    length = e.inputs[0]
    _, carries, xs, consts = _parts(e.inputs, 1, nc, nx)
    _, c_loop, x_act, k_act = (list(p) for p in _parts(active, 1, nc, nx))
    c_act = [isinstance(a, Var) and a in act for a in carries]
    res = e.outs[nc + ny:]
    trip = e.params["trip"]
    # bb's inputs: k, carries, xs, consts, saved, cotangents of (carries out, ys)
    (b_k,), b_c, b_x, b_consts, b_saved, b_cts = _parts(bb.inputs, 1, nc, nx, len(consts), n_saved)
    n_gc, n_gx = sum(c_loop), sum(x_act)
    g_c, g_x, g_k = _parts(list(bb.outputs), n_gc, n_gx)
    # Loop constants' gradients that are a sum over steps of A_t^T @ B_t (a weight's
    # gradient) become one GEMM after the loop over the stacked A and B (see `_hoistable`).
    # bb input -> the stacked tensor outside the loop its slices come from
    stacked_of = {v: ("res", r) for v, r in zip(tuple(b_c) + tuple(b_saved), res)}
    stacked_of.update((v, ("val", x)) for v, x in zip(b_x, xs))
    variant = _variant(bb, {b_k, *b_c, *b_x, *b_saved, *b_cts})
    hoist = [_hoistable(bb, g, variant) for g in g_k]
    # an xs' gradient is stacked by the reverse loop anyway (the LSTM's gate gradients)
    gx_index = {v: j for j, v in enumerate(g_x) if isinstance(v, Var)}
    # per-step values the reverse loop stacks for hoisted GEMMs
    extra_ys = list(dict.fromkeys(v for h in hoist if h is not None for v in h[0:2]
                                  if v not in stacked_of and v not in gx_index))
    active_consts = [c for c, a in zip(consts, k_act) if a]
    acc_in = [Var(c.aval) for c, h in zip(active_consts, hoist) if h is None]
    acc_g = [g for g, h in zip(g_k, hoist) if h is None]
    rctx = TraceContext()
    with rctx:
        acc_out = [rctx.atom(_make_tracer(a, rctx) + (_make_tracer(g, rctx) if isinstance(g, Var) else g.value))
                   for a, g in zip(acc_in, acc_g)]
    r_inputs = ((b_k,) + tuple(ct for ct, a in zip(b_cts[:nc], c_loop) if a) + tuple(acc_in)
                + tuple(b_c) + tuple(b_saved) + tuple(b_x) + tuple(b_cts[nc:]) + tuple(b_consts))
    r_outputs = tuple(g_c) + tuple(acc_out) + tuple(g_x) + tuple(extra_ys)
    rg = Graph(r_inputs, _live(tuple(bb.eqns) + tuple(rctx.eqns), r_outputs), r_outputs, "scan_backward")
    with ctx:
        n_atom = ctx.atom(val(length))
        init_g = [g if g is not None else ops.zeros(o.aval.shape, dtype=o.aval.dtype)
                  for o, g, a in zip(e.outs[:nc], gs[:nc], c_loop) if a]
        init_acc = [ops.zeros(v.aval.shape, dtype=v.aval.dtype) for v in acc_in]
        g_ys = [_dense(ctx, g) if g is not None else ops.zeros(o.aval.shape, dtype=o.aval.dtype)
                for o, g in zip(e.outs[nc:nc + ny], gs[nc:nc + ny])]
        n_g = len(init_g) + len(init_acc)
        ys_avals = [_stacked(trip, v) for v in tuple(g_x) + tuple(extra_ys)]
        out = ctx.emit_multi(SCAN, [n_atom] + [ctx.atom(t) for t in init_g + init_acc]
                             + [ctx.atom(_make_tracer(r, ctx)) for r in res] + [ctx.atom(val(a)) for a in xs]
                             + [ctx.atom(t) for t in g_ys] + [ctx.atom(val(a)) for a in consts],
                             {"body_graph": rg, "n_carry": n_g, "n_xs": n_res + nx + ny,
                              "reverse": not e.params["reverse"], "trip": trip},
                             [ctx.atom(t).aval for t in init_g + init_acc] + ys_avals)
        extra_out = dict(zip(extra_ys, out[n_g + n_gx:]))

        def stacked(v):
            if v in extra_out:
                return extra_out[v]
            if v in gx_index:
                return out[n_g + gx_index[v]]
            kind, s = stacked_of[v]
            return _make_tracer(s, ctx) if kind == "res" else val(s)
        hoisted = []
        for h in hoist:
            if h is None:
                hoisted.append(None)
                continue
            a_v, b_v, post, form = h
            if form == "tn":    # sum_t A_t^T B_t: contract over (step, batch rows)
                r = ops.matmul(ops.transpose(ops.flatten(stacked(a_v), 0, 1), 0, 1),
                               ops.flatten(stacked(b_v), 0, 1))
            else:               # sum_t A_t B_t^T: contract over (step, columns)
                r = ops.matmul(ops.transpose(_step_rows(stacked(a_v)), 0, 1), _step_rows(stacked(b_v)))
            for pe in post:
                r = ops.permute(r, pe.params["dims"]) if pe.prim is PERMUTE else \
                    ops.reshape(r, pe.params["shape"])
            hoisted.append(r)
    it_acc = iter(out[len(init_g):n_g])
    grad_k = [next(it_acc) if h is None else h for h in hoisted]
    out = out[:n_g] + out[n_g:n_g + n_gx]
    it_c, it_x, it_k = iter(out[:len(init_g)]), iter(out[n_g:]), iter(grad_k)
    grad_c = [next(it_c) if loop else None for loop in c_loop]
    return ([None] + [g if a else None for g, a in zip(grad_c, c_act)] + [next(it_x) if a else None for a in x_act]
            + [next(it_k) if a else None for a in k_act])


def _dense(ctx: TraceContext, g):
    """`g`, copied to a dense array if it is a transposed view. A ys' cotangent is sliced
    per step by the reverse loop, whose kernels read a step's slice of a transposed
    array element by element (unvectorized: an LSTM's feature-major output, permuted back
    to (L, N, H), gets a transposed cotangent: its gate-gradient kernel took 700 instead
    of ~70 us per step)."""
    v = ctx.atom(g)
    for eq in reversed(ctx.eqns):
        if v in eq.outs:
            return ops.contiguous(g) if eq.prim is PERMUTE else g
    return g


def _step_rows(s):
    """(T, M, N) stacked per-step matrices -> (T*N, M): each step's columns as rows. (The
    same expression as the gradient of a feature-major scan's xs read back in (L, N, F)
    layout, so CSE leaves one copy of the stacked gate gradients, not two.)"""
    t, m, n = s.shape
    return ops.reshape(ops.permute(s, (0, 2, 1)), (t * n, m))


def _variant(g: Graph, seeds: set) -> set:
    """Values of `g` that depend on `seeds` (the per-step inputs of a loop body)."""
    out = set(seeds)
    for e in g.eqns:
        if any(isinstance(a, Var) and a in out for a in e.inputs):
            out.update(e.outs)
    return out


def _hoistable(g: Graph, v, variant: set):
    """If the loop constant's per-step gradient `v` is ``post(matmul(permute(A), B))`` with
    A, B 2-D per-step values (A^T B: a weight's gradient, contracting over the batch) or
    ``post(matmul(A, permute(B)))`` (A B^T: the same in a feature-major layout) and
    `post` a chain of permutes/reshapes used by nothing else, -> (A, B, post eqns in
    order, "tn" or "nt"); else None. The sum over steps of A_t^T B_t is then one GEMM of the stacked A
    and B flattened over (step, batch): one large GEMM instead of T small ones."""
    if not isinstance(v, Var):
        return None
    prod, users, _ = def_use(g)
    post = []
    while True:
        e = prod.get(v)
        if e is None or len(users.get(v, ())) + g.outputs.count(v) != 1:
            return None
        if e.prim in (PERMUTE, RESHAPE):
            post.append(e)
            v = e.inputs[0]
            continue
        break
    if e.prim is not MATMUL or len(e.inputs) != 2:
        return None

    def transposed(x):
        t = prod.get(x)
        if t is None or t.prim is not PERMUTE or tuple(t.params["dims"]) != (1, 0):
            return None
        return t.inputs[0]

    def per_step_2d(*vs):
        return all(isinstance(v, Var) and v in variant and len(v.aval.shape) == 2 for v in vs)
    x, y = e.inputs
    a = transposed(x)
    if a is not None and per_step_2d(a, y):
        return a, y, tuple(reversed(post)), "tn"
    # A_t @ B_t^T (the layout-transposed form, W @ h^T: both contract over their 2nd dim)
    b = transposed(y)
    if b is not None and per_step_2d(x, b):
        return x, b, tuple(reversed(post)), "nt"
    return None


def _live(eqns: tuple, outputs: tuple) -> tuple:
    """`eqns` without those no output depends on (a hoisted GEMM's per-step matmul)."""
    need = {a for a in outputs if isinstance(a, Var)}
    keep = []
    for e in reversed(eqns):
        if any(o in need for o in e.outs):
            keep.append(e)
            need.update(a for a in e.inputs if isinstance(a, Var))
    return tuple(reversed(keep))
