"""Max-pooling's forward and backward as one loop over the windows (numba, compiler/cpu/kernels/loader.py).

The numpy forms in ops/pooling_prim.py make a pass per window offset over strided views
(the backward about four per offset: compare, mark the first hit, multiply, store): 12-16 ms
for LeNet's first pooling gradient, (64, 32, 26, 26) float32, where one loop over the
windows reads the input once. These kernels keep the numpy forms' exact rules: the
gradient goes to the first maximum in row-major window order; a NaN makes the output NaN
and takes the gradient at the window's first NaN; a padding position counts as -inf.

Each kernel's source is generated for one window geometry and dtype (the window unrolled:
see `_get`); windows of more than `MAX_WINDOW` positions stay on numpy.
"""
from __future__ import annotations

import numpy as np

from ..runtime import sharepool as _sharepool
from ....ops.conv import conv_out_size
from .loader import kernel as _kernel

__all__ = ["forward", "backward", "forward_offsets", "scatter", "MAX_WINDOW"]

MAX_WINDOW = 64   # positions per window up to which a kernel is generated


def _window_loads(lines, kernel, stride, padding, dilation, argmax: str = ""):
    """Source lines loading the window of output (oy, ox) as v0..v{kh*kw-1} (padding:
    -inf), with positions y<k>, x<k> and, under padding, in<k> (inside the input); the
    maximum ignoring NaN as m, NaN-ness as nan, and with `argmax` the offset of the first
    maximum as a (of the first NaN when nan) when `argmax` names the dtype to hold it."""
    cast = f"np.{argmax}"
    zero = f"{cast}(0)"
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    add = lines.append
    add(f"            ry = oy * {sh} - {ph}")
    add("            for ox in range(ow):")
    add(f"                rx = ox * {sw} - {pw}")
    count = 0
    for i in range(kh):
        for j in range(kw):
            k = count
            add(f"                y{k} = ry + {i * dh}")
            add(f"                x{k} = rx + {j * dw}")
            if ph or pw:
                add(f"                in{k} = (y{k} >= 0) & (y{k} < h) & (x{k} >= 0) & (x{k} < w)")
                add(f"                v{k} = x[b, p, y{k}, x{k}] if in{k} else low")
            else:
                add(f"                v{k} = x[b, p, y{k}, x{k}]")
            count += 1
    # The maximum ignoring NaN, and whether the window holds one; selects, not branches.
    add("                m = v0")
    if not argmax:
        for k in range(1, count):
            add(f"                m = v{k} if v{k} > m else m")
        add("                nan = " + " | ".join(f"(v{k} != v{k})" for k in range(count)))
        return count
    # The offset `a` (in the data's dtype: an integer here made the selects branches) of
    # the first maximum, strictly greater keeping the first of equal maxima; q the first
    # NaN's (count when none), chosen from the last down. No branch: an `if nan:` around
    # the NaN search made the whole loop branchy (4 ms against 1 for LeNet's first pool).
    add(f"                a = {zero}")
    for k in range(1, count):
        add(f"                c = v{k} > m")
        add(f"                m = v{k} if c else m")
        add(f"                a = {cast}({k}) if c else a")
    add(f"                q = {cast}({count})")
    for k in range(count - 1, -1, -1):
        add(f"                q = {cast}({k}) if v{k} != v{k} else q")
    add(f"                nan = q < {cast}({count})")
    add("                a = q if nan else a")
    return count


def _header(dtype, args, name):
    # C-contiguous operands only: with 'A' arrays (strides unknown to LLVM) the backward
    # ran 3-4x slower. Channel-major data is passed as its (C, N, ...) view (the kernels
    # are symmetric in the first two dims; see `_order`).
    arrays = {"x": f"Array({dtype}, 4, 'C', readonly=True)", "g": f"Array({dtype}, 4, 'C', readonly=True)",
              "out": f"{dtype}[:, :, :, ::1]", "gx": f"{dtype}[:, :, :, ::1]",
              "rec": f"{dtype}[:, :, :, :, ::1]"}
    sig = ", ".join(arrays[a] for a in args)
    return ["import numpy as np", "from numba import njit", "", "",
            f'@njit("void({sig}, int64, int64)", cache=CACHE, error_model=\'numpy\', boundscheck=False, '
            'nogil=True)',
            f"def kernel({', '.join(args)}, lo, hi):",
            f'    """{name}"""',
            "    nb, planes, h, w = x.shape",
            f"    low = np.{dtype}(-np.inf)",
            f"    zero = np.{dtype}(0)",
            f"    nanv = np.{dtype}(np.nan)"]


# the (n, c) image planes lo..hi-1 (of nb * planes, in memory order), then their output
# rows: a call does a range of planes, so `_run` can split one over the cores
_PLANES = ["    for bp in range(lo, hi):",
           "        b = bp // planes",
           "        p = bp - b * planes",
           "        for oy in range(oh):"]


def forward_source(dtype, kernel, stride, padding, dilation) -> str:
    """max over each window; NaN propagates."""
    lines = _header(dtype, ("x", "out"), f"max_pool2d {kernel} {stride} {padding} {dilation}")
    lines += ["    oh, ow = out.shape[2], out.shape[3]"] + _PLANES
    _window_loads(lines, kernel, stride, padding, dilation)
    lines.append("                out[b, p, oy, ox] = nanv if nan else m")
    return "\n".join(lines) + "\n"


def backward_source(dtype, kernel, stride, padding, dilation, tiles: bool) -> str:
    """g at each window's first maximum (first NaN in a NaN window); with `tiles` every
    input position in a window is written (0 or g), else added into a zeroed gx."""
    lines = _header(dtype, ("g", "x", "gx"),
                    f"max_pool2d_backward {kernel} {stride} {padding} {dilation}")
    lines += ["    oh, ow = g.shape[2], g.shape[3]"] + _PLANES
    count = _window_loads(lines, kernel, stride, padding, dilation)
    add = lines.append
    # + zero: a -0.0 gradient lands as +0.0, as in PyTorch's zeroed-then-added gradient
    add("                gv = g[b, p, oy, ox] + zero")
    add("                taken = False")
    add("                normal = not nan")
    for k in range(count):
        # first position equal to the maximum (or first NaN): bitwise ops, no branches
        add(f"                hit = (((v{k} == m) & normal) | (v{k} != v{k})) & (not taken)")
        if k < count - 1:
            add("                taken = taken | hit")
        store = f"gx[b, p, y{k}, x{k}] {'=' if tiles else '+='} gv if hit else zero"
        if padding[0] or padding[1]:
            add(f"                if in{k}:")
            add(f"                    {store}")
        else:
            add(f"                {store}")
    return "\n".join(lines) + "\n"


def forward_offsets_source(dtype, kernel, stride, padding, dilation) -> str:
    """max over each window into rec[0] and the first maximum's window offset into rec[1]
    (ops/pool_offsets.py's record); NaN propagates and its first position is recorded."""
    lines = _header(dtype, ("x", "rec"), f"max_pool2d_with_offsets {kernel} {stride} {padding} {dilation}")
    lines += ["    oh, ow = rec.shape[3], rec.shape[4]"] + _PLANES
    _window_loads(lines, kernel, stride, padding, dilation, argmax=dtype)
    lines.append("                rec[0, b, p, oy, ox] = nanv if nan else m")
    lines.append("                rec[1, b, p, oy, ox] = a")
    return "\n".join(lines) + "\n"


_BITS = {"float32": "int32", "float64": "int64"}


def scatter_source(dtype, kernel, stride, padding, dilation, tiles: bool) -> str:
    """g at each window's recorded offset. With `tiles` every input position in a window is
    written, as the bits of g masked by ``-(offset == k)`` (g and gx come as integer views:
    a select on the offset became a branch, mispredicted on real data, 2.5 ms against 1.2
    for LeNet's first pool); else g is added at the one recorded position of a zeroed gx."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    it = _BITS[dtype]
    kind = it if tiles else dtype
    lines = ["import numpy as np", "from numba import njit", "", "",
             f"@njit(\"void(Array({kind}, 4, 'C', readonly=True), Array({dtype}, 5, 'C', readonly=True), "
             f"{kind}[:, :, :, ::1], int64, int64)\", cache=CACHE, error_model='numpy', boundscheck=False, "
             "nogil=True)",
             "def kernel(g, rec, gx, lo, hi):",
             f'    """max_pool2d_scatter {kernel} {stride} {padding} {dilation}"""',
             "    nb, planes, h, w = gx.shape",
             "    oh, ow = g.shape[2], g.shape[3]"]
    if tiles:   # one output row's offsets and gradient bits (see below)
        lines += [f"    kb = np.empty(ow, np.{it})", f"    gb = np.empty(ow, np.{it})"]
    lines += _PLANES
    add = lines.append
    if tiles:
        # Per output row two loops: the row's offsets as integers and its gradient bits
        # into small buffers, then the stores from those. With the float-to-integer
        # conversion inside the storing loop, LeNet's first pool took 3.3 ms, in two loops
        # 0.6 (second pool 0.9 -> 0.3; one thread); hoisting the rows alone gained nothing.
        add("            krow = rec[1, b, p, oy]")
        add("            grow = g[b, p, oy]")
        add("            for ox in range(ow):")
        add(f"                kb[ox] = np.{it}(krow[ox])")
        add("                gv = grow[ox]")
        # -0.0's bits (the sign bit alone) become +0.0's, as in PyTorch's zeroed-then-added
        # gradient
        add(f"                gb[ox] = gv & -np.{it}(gv != np.{it}({-2 ** (np.dtype(it).itemsize * 8 - 1)}))")
        for i in range(kh):
            add(f"            x{i} = gx[b, p, oy * {sh} + {i}]")
        add("            for ox in range(ow):")
        add("                k = kb[ox]")
        add("                gv = gb[ox]")
        add(f"                c0 = ox * {sw}")
        for i in range(kh):
            for j in range(kw):
                add(f"                x{i}[c0 + {j}] = gv & -np.{it}(k == {i * kw + j})")
        # the positions past the last window get zeros here, plane by plane (numpy's strided
        # fills of the last column, 4096 planes of LeNet's second pool, cost ~0.1 ms and
        # ran on one thread)
        for i in range(kh):
            add(f"            for xx in range(ow * {sw}, w):")
            add(f"                x{i}[xx] = 0")
        add(f"        for y in range(oh * {sh}, h):")
        add("            for xx in range(w):")
        add("                gx[b, p, y, xx] = 0")
    else:
        add("            for ox in range(ow):")
        add("                k = np.int64(rec[1, b, p, oy, ox])")
        add(f"                i = k // {kw}")
        add(f"                y = oy * {sh} - {ph} + i * {dh}")
        add(f"                xx = ox * {sw} - {pw} + (k - i * {kw}) * {dw}")
        guard = "if y >= 0 and y < h and xx >= 0 and xx < w: " if ph or pw else ""
        add(f"                {guard}gx[b, p, y, xx] += g[b, p, oy, ox]")
    return "\n".join(lines) + "\n"


def _get(name, make, dtype, *geometry):
    # The window's geometry is written into the source (offsets unrolled, padding tests
    # only with padding): with it as arguments and loops over the window, the backward
    # ran 6 ms at LeNet's first pool, as slow as numpy's passes; unrolled, 1.6 ms. One
    # compile per geometry and dtype, never per size.
    if dtype not in ("float32", "float64") or geometry[0][0] * geometry[0][1] > MAX_WINDOW:
        return None
    key = ("maxpool", name, dtype) + tuple(v for pair in geometry for v in pair)
    return _kernel(key, lambda: make(dtype, *geometry), steady=True).get()


def tiles(kernel, stride, padding, dilation) -> bool:
    """Do the windows sit side by side without padding (each input in at most one)?"""
    return tuple(stride) == tuple(kernel) and tuple(dilation) == (1, 1) and tuple(padding) == (0, 0)


def channel_major(x) -> bool:
    """Is x's memory (C, N, ...) order (an eager conv/BatchNorm activation)?"""
    return not x.flags.c_contiguous and x.swapaxes(0, 1).flags.c_contiguous


def _order(x):
    """(swap, x as the kernels take it): swap when x is channel-major, then its (C, N, ...)
    view is C-contiguous; any other non-contiguous x is copied."""
    if channel_major(x):
        return True, x.swapaxes(0, 1)
    return False, np.ascontiguousarray(x)



# An input element of a pooling kernel costs about what this many multiply-adds of a BLAS
# product do (LeNet's first pool, 1.4M elements: ~0.6-0.7 ms per kernel on one thread): the
# unit of sharepool.split's threshold, so both of LeNet's pools split over two cores.
_ELEMENT_WORK = 16


def _run(fn, arrays, size: int) -> None:
    """``fn(*arrays, lo, hi)`` over all (n, c) planes of the 4-D first array's leading two
    dims, split over the cores the machine gives (tracejit/compiler/cpu/runtime/sharepool.py; the kernels are
    nogil and planes are independent). `size`: the input's elements (the work)."""
    planes = arrays[0].shape[0] * arrays[0].shape[1]
    _sharepool.split(lambda lo, hi: fn(*arrays, lo, hi), planes, _ELEMENT_WORK * size)


def _pooled_hw(x, kernel, stride, padding, dilation) -> tuple:
    """(OH, OW) of pooling the (N, C, H, W) array `x`."""
    return (conv_out_size(x.shape[2], kernel[0], stride[0], padding[0], dilation[0]),
            conv_out_size(x.shape[3], kernel[1], stride[1], padding[1], dilation[1]))

def forward(x, kernel, stride, padding, dilation):
    """max_pool2d of the numpy array `x` (N, C, H, W), in x's memory order when that is
    channel-major, else C-contiguous; None when no kernel runs (the caller uses numpy)."""
    fn = _get("fwd", forward_source, x.dtype.name, kernel, stride, padding, dilation)
    if fn is None:
        return None
    swap, xk = _order(x)
    out = np.empty(xk.shape[:2] + _pooled_hw(x, kernel, stride, padding, dilation), dtype=x.dtype)
    _run(fn, (xk, out), xk.size)
    return out.swapaxes(0, 1) if swap else out


def backward(g, x, kernel, stride, padding, dilation):
    """The input gradient: `g` (N, C, OH, OW) at each window's first maximum of `x`, or
    None when no kernel runs. gx has x's memory order when that is channel-major (an
    eager activation: the ReLU backward that follows reads both, and numpy's elementwise
    ops over mixed orders ran 2-3x slower), else is C-contiguous."""
    if g.dtype != x.dtype:
        return None
    tile = tiles(kernel, stride, padding, dilation)
    fn = _get("bwd_tiles" if tile else "bwd", lambda *a: backward_source(*a, tile), x.dtype.name,
              kernel, stride, padding, dilation)
    if fn is None:
        return None
    oh, ow = g.shape[2], g.shape[3]
    swap, xk = _order(x)
    gk = np.ascontiguousarray(g.swapaxes(0, 1) if swap else g)
    if tile:
        # every position inside a window is written; only rows/columns past the last
        # window need zeros
        gx = np.empty(xk.shape, dtype=x.dtype)
        gx[:, :, oh * kernel[0]:, :] = 0
        gx[:, :, :, ow * kernel[1]:] = 0
    else:
        gx = np.zeros(xk.shape, dtype=x.dtype)
    _run(fn, (gk, xk, gx), xk.size)
    return gx.swapaxes(0, 1) if swap else gx


def forward_offsets(x, kernel, stride, padding, dilation):
    """max_pool2d_with_offsets' record (2, N, C, OH, OW) of the numpy array `x`, in x's
    memory order when that is channel-major (so is the record's), or None (numpy runs)."""
    fn = _get("fwd_offsets", forward_offsets_source, x.dtype.name, kernel, stride, padding, dilation)
    if fn is None:
        return None
    swap, xk = _order(x)
    rec = np.empty((2,) + xk.shape[:2] + _pooled_hw(x, kernel, stride, padding, dilation), dtype=x.dtype)
    _run(fn, (xk, rec), xk.size)
    return rec.swapaxes(1, 2) if swap else rec


def scatter(g, rec, input_shape, kernel, stride, padding, dilation):
    """max_pool2d_scatter of numpy arrays, or None (numpy runs). gx is channel-major when
    the record is (an eager activation's; see `backward`), else C-contiguous."""
    if g.dtype != rec.dtype:
        return None
    tile = tiles(kernel, stride, padding, dilation)
    fn = _get("scatter_tiles" if tile else "scatter", lambda *a: scatter_source(*a, tile),
              g.dtype.name, kernel, stride, padding, dilation)
    if fn is None:
        return None
    swap = not rec.flags.c_contiguous and rec.swapaxes(1, 2).flags.c_contiguous
    reck = rec.swapaxes(1, 2) if swap else np.ascontiguousarray(rec)
    gk = np.ascontiguousarray(g.swapaxes(0, 1) if swap else g)
    shape = (input_shape[1], input_shape[0]) + tuple(input_shape[2:]) if swap else tuple(input_shape)
    if tile:
        # every position is written: inside a window by the scatter, past the last window
        # with a zero by the kernel too
        gx = np.empty(shape, dtype=g.dtype)
        bits = np.dtype(_BITS[g.dtype.name])
        _run(fn, (gk.view(bits), reck, gx.view(bits)), gx.size)
    else:
        gx = np.zeros(shape, dtype=g.dtype)
        _run(fn, (gk, reck, gx), gx.size)
    return gx.swapaxes(0, 1) if swap else gx


# ---------------------------------------------------------------- the primitives' implementations
# (registered by compiler/cpu/implementations.py; None: the kernel is not loaded, numpy's form runs)
def max_pool_backward(g, x, out, kernel, stride, padding, dilation):
    return backward(g, x, kernel, stride, padding, dilation)
