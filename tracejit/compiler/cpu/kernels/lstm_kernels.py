"""The LSTM and GRU layers' time loops as numba kernels (loader.py): the whole loop each
way (while a loop's kernel is not loaded, the layer primitive's numpy form runs).

In numpy a step's gate math is ~12 passes over (H, N) blocks forward and ~25 backward;
here it is a few passes over blocks that stay in cache, with mathlib's tanh, so the loops
vectorize (forward 73 us against 116-130 us of numpy per LSTM step). The kernels also run
each step's GEMM on weights packed once per call (template_panels.py), so a layer is one
call each way.

What the loops share (the packed product, the packs, the register transposes, the split
loops' meeting) is compiled once per process in modules of their own and called by
address: an inlined helper is typed, lowered and optimised again at every call site. The
LSTM's loops can run split over several threads by hidden units (loop_split.py).

Operands are C-contiguous (H, N) / (G*H, N) blocks, typed read-only where read; each
step's transposed input read and gradient write are register transposes (a strided access
would make the vector loops gathers).
"""
from __future__ import annotations

import numpy as np

from .loop_split import THREAD_START as _THREAD_START, meeting_source as _meeting_source
from ..gemm.template_panels import panel_import
from .register_transpose import transpose_import
from .loader import kernel as _kernel

__all__ = ["forward_layer", "backward_layer", "gru_forward_layer", "gru_backward_layer", "readonly"]

# `part(a, start, stop)`: a[start:stop] of a 1-D C-contiguous array as a plain view. numba
# lowers each slice with its bounds normalisation and reference counting, ~25 ms of compile
# CPU apiece; the callers' bounds are in range by construction, and the view, with no
# owner, lives only inside the kernel call whose argument owns the memory.
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
# give up and the loop stays scalar (~10x slower). sigmoid and tanh: the scalar forms of
# mathlib's records, as every generated kernel runs them.
_SIGMOID_HEAD = '''
import numpy as np
from numba import njit
from tracejit.compiler.mathlib import sigmoid_{s} as sigmoid, tanh_{s} as tanh
'''

_FORWARD_GATES = _SIGMOID_HEAD + _PART + """


@njit(inline='always')
def gate_math_units(b, m, cp, zf, u0, u1):
    # one forward step's gate math for hidden units u0..u1-1 (one thread's share): m (4H, N)
    # the pre-activation without b; zf the flat step block (6H, N) (h, c, i, f, g, o); cp the
    # flat previous c. Loops over views from index 0: numba's wraparound selects on a range
    # of unknown start made the kernel 40% slower.
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

# The whole forward time loop, the input projection included: per step one GEMM
# m = [W_ih | W_hh] [x_t^T ; h_prev] on both weights packed once as one (4H, I+H) matrix,
# and the gate math (LSTM LM layer: 15.5 ms against 16.9 with a separate projection).
# Split over nth threads, thread q does its hidden units' rows of each gate block and the
# threads meet after each step; W_ih x_t^T needs nothing of the other shares', so a share
# computes it for the next step after its mark, off the meeting's critical path.
_FORWARD_LAYER = _FORWARD_GATES + """
# {product}
# {meeting}


@njit(inline='always')
def gemm_units(fns, wp, kd, k0, k1, bk, m, hh, u0, u1, nth, beta):
    # this thread's rows of each gate block (nth > 1), or all 4H rows (nth == 1), of
    # m (+)= [W_ih | W]'s packed columns k0..k1-1 @ bk, by `panel_product` at fns[0]; one
    # call site for the input and the hidden part
    for blk in range(4 if nth > 1 else 1):
        r0 = blk * hh + u0
        r1 = blk * hh + u1 if nth > 1 else 4 * hh
        call_at(fns[0], panel_product, (wp, r0 // PMR, (r1 + PMR - 1) // PMR, kd, k0, k1, bk, m, beta))


# (no_rewrites: numba's IR rewrite passes find nothing to do in the loops: ~0.06 s of each
# loop's compile, the same machine code)
@njit("void(" + RO3 + ", " + RO2 + ", " + RO2 + ", " + RO1 + ", " + RO2 + ", " + RO2 + ", {t}[:, :, ::1], "
      "{t}[:, ::1], {t}[::1], boolean, int64, int64, int64[::1], int64[::1], {t}[:, ::1], {t}[:, ::1], "
      "int64[::1])", cache=CACHE, error_model='numpy', boundscheck=False, nogil=True, no_rewrites=True)
def loop(x, wx, w, b, h0, c0, Z, m, wp, reverse, q, nth, sync, fns, Zi, xt, mv):
    \"\"\"the layer's forward (ops/lstm_prim.py): Z (L, 6H, N) from x (L, N, I), wx (4H, I),
    w (4H, H), b (4H,), h0 and c0 (H, N); m (panel_rows(4H), N) and wp (panel_size(4H,
    I + H)) scratch; share q of nth (nth > 1: H a multiple of SPLIT_Q; sync the meeting's
    state); Zi (1, 6HN), xt (I, N), mv (4,) the thread's scratch (`kernel`)\"\"\"
    L = x.shape[0]
    ki = x.shape[2]
    four, hh = w.shape
    n = m.shape[1]
    s = hh * n
    Zf = Z.reshape(L, 6 * s)
    mg = m[:four]
    # h0 and c0 where a step block of Z holds h_prev and c_prev, so that the step below has
    # one call site (inlined twice, the kernel's LLVM compile takes ~2.6x as long); Zi by an
    # element loop, as a slice assignment compiles numba's error message (1.75 s)
    h0f = h0.reshape(-1)
    c0f = c0.reshape(-1)
    for e in range(s):
        Zi[0, e] = h0f[e]
        Zi[0, s + e] = c0f[e]
    # xt: this thread's x_t^T; mv: its meeting state and `next_half`'s answer (by address)
    st = part(mv, 0, 3)
    hv = part(mv, 3, 4)
    # unit r of a half: (r > 0) step r - 1's m += W h_prev for its rows and its gate math,
    # the mark, then (r < L) step r's m = W_ih x_r^T, off the meeting's critical path; r = 0
    # packs its panels first. Input parts run in step order (`wait_turn`).
    for r in range(L + 1):
        k = r - 1                                      # the step of the gate math
        t = L - 1 - k if reverse else k
        tn = L - 1 - r if reverse else r               # the step of the input part
        if k <= 0:
            src, p = Zi, 0
        else:
            src, p = Zf, t + 1 if reverse else t - 1   # h_prev: Z[p]'s first rows
        while True:
            # `next_half` at its address fns[4] (inlined: ~0.3 s of each loop's compile)
            call_at(fns[4], meet_next_half, (sync, r, q, nth, st, hv))
            half = hv[0]
            if half < 0:
                break
            u0, u1 = split_units(hh, half, nth)
            # phase 0: step k's hidden part, gate math and mark; phase 1: step r's input part
            for phase in range(2):
                if phase == 0 and r == 0:
                    for blk in range(4 if nth > 1 else 1):     # the half's panels (all: nth == 1)
                        r0 = blk * hh + u0
                        r1 = blk * hh + u1 if nth > 1 else four
                        for which in range(2):             # W_ih's columns, then W's: one call site
                            # (`panel_pack`, compiler/cpu/gemm/template_panels.py, at its address fns[1])
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
                    # (`panel_transpose`, compiler/cpu/kernels/register_transpose.py, at its address fns[3])
                    call_at(fns[3], panel_transpose, (x[tn], 0, n, 0, ki, xt, False))
                    bk, k0, k1 = xt, 0, ki
                gemm_units(fns, wp, ki + hh, k0, k1, bk, m, hh, u0, u1, nth, phase == 0)
                if phase == 0:
                    gate_math_units(b, mg, part(src[p], s, 2 * s), Zf[t], u0, u1)
                    half_done(sync, nth)               # its rows of h_t written
                else:
                    turn_done(sync, half)


def kernel(x, wx, w, b, h0, c0, Z, m, wp, reverse, q, nth, sync):
    # the loop's scratch made here, one set per thread's call: np.empty/np.zeros in the loop
    # made the worker compile them (~0.15 s)
    n = m.shape[1]
    loop(x, wx, w, b, h0, c0, Z, m, wp, reverse, q, nth, sync, _FNS,
         np.empty((1, 6 * w.shape[1] * n), Z.dtype), np.empty((x.shape[2], n), Z.dtype),
         np.array(MEET_STATE, np.int64))
"""

def _source(template: str, dtype: str) -> str:
    s = "f32" if dtype == "float32" else "f64"
    template_in = template
    template = template.replace("# {meeting}", _meeting_source())
    for n in (1, 2, 3):
        template = template.replace(f'" + RO{n} + "', f"Array({{t}}, {n}, 'C', readonly=True)")
    source = (template.replace("{t}", dtype).replace("{s}", s)
              .replace("MEET_STATE", repr(MEET_STATE)))
    # (`panel_product`, compiler/cpu/gemm/template_panels.py: a module of its own, shared by the loops,
    # and the layer's `kernel` that passes its address to the module's `loop`; the LSTM's split
    # loops: the meeting's `next_half` and `wait_turn` by address too)
    meets = "# {meeting}" in template_in
    return source.replace("# {product}", panel_import(dtype) + transpose_import(dtype)
                          + (meeting_import() if meets else "")
                          + _KERNEL_BY_ADDRESS.replace("{more}", _MEETING_FNS if meets else "")
                          + ("" if "\ndef kernel(" in template_in else _KERNEL_PASS))


# The whole-loop modules' `kernel`, as ops/lstm_prim.py and ops/gru_prim.py call it: the
# module's `loop` with the address of `panel_product`.
_KERNEL_BY_ADDRESS = """
_FNS = np.array([native_address(panel_product), native_address(panel_pack), native_address(panel_pack_t),
                 native_address(panel_transpose){more}, native_address(row_product)], np.int64)
"""
# (the LSTM's loops define their own `kernel`, which makes the thread's scratch too)
_KERNEL_PASS = """

def kernel(*args):
    loop(*args, _FNS)   # (`loop`: defined below)
"""


_MEETING_FNS = ", native_address(meet_next_half), native_address(meet_wait_turn)"

# A thread's meeting state as a split loop starts, made in Python: thread_state() in the
# loop made numba compile np.zeros (~0.08 s of each job).
MEET_STATE = _THREAD_START + (0,)

# The meeting of a split loop's threads (loop_split.py): `next_half` and `wait_turn`,
# compiled once per process and called by address (inlined, ~0.7 s of the backward loop's
# compile). `next_half`'s answer comes back in `out`.
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


def meeting_import() -> str:
    """Source lines that give a loop module `meet_next_half` and `meet_wait_turn`: the
    meeting module's source is written into the loop's, so the loop's disk cache key covers
    it without this module's whole import closure."""
    return (f"from tracejit.compiler.diskcache import load_module as _load_module\n"
            f"_meeting = _load_module({meeting_module_source()!r}, name_hint='lstm_meeting')\n"
            f"meet_next_half, meet_wait_turn = _meeting.meet_next_half, _meeting.meet_wait_turn\n")


def _get(template: str, name: str, dtype: str, steady: bool = False):
    """The loaded kernel or None; `steady` for the whole-loop kernels, which a compiled
    step runs at every call (queued at rank STEADY, compiler/workers.py)."""
    if dtype not in ("float32", "float64"):
        return None
    return _kernel(("lstm", name, dtype), lambda: _source(template, dtype), steady=steady).get()


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


def readonly(a: np.ndarray) -> np.ndarray:
    """A C-contiguous read-only view (or copy) of `a`: the kernels' input type."""
    a = np.ascontiguousarray(a)
    v = a.view()
    v.flags.writeable = False
    return v


# the backward loops' source (lstm_backward_kernels.py) and the GRU's (gru_kernels.py): their
# text builds on this module's pieces
from .lstm_backward_kernels import _BACKWARD_LAYER  # noqa: E402
from .gru_kernels import _GRU_BACKWARD_LAYER, _GRU_FORWARD_LAYER  # noqa: E402
