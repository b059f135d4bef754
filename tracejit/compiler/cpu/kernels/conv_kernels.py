"""im2col and col2im as numba loops: the columns of the convolutions by blocks of images
(conv_blocks.py), in ops/conv.py's "gemm" layout (which holds their numpy forms).

Why: numpy's forms copy strided views whose innermost run is a window row (~4 GB/s);
these loops write each column row once, in order. One source per geometry and dtype,
never per size; a call takes a range of input channels.
"""
from __future__ import annotations

from .loader import kernel as native_kernel

__all__ = ["im2col_kernel", "col2im_kernel", "table_form", "im2col_form", "col2im_form"]


def _col2im_source(dtype, kernel, stride, padding, dilation) -> str:
    """col2im from (C*kh*kw, N*OH*OW) rows into a zeroed C-contiguous (N, C, H, W) image, the
    window offsets unrolled (LeNet's second conv: 1.4 ms against numpy's 5.1). C-contiguous
    because what follows an input gradient is elementwise and takes the flat path."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    lines = ["from numba import njit", "", "",
             f"@njit(\"void(Array({dtype}, 2, 'C', readonly=True), {dtype}[:, :, :, ::1], int64, "
             f"int64, int64, int64)\", cache=CACHE, error_model='numpy', boundscheck=False, nogil=True)",
             "def kernel(cols, out, oh, ow, c0, c1):",
             f'    """col2im {kernel} {stride} {padding} {dilation}, channels c0..c1-1"""',
             "    n, c, h, w = out.shape",
             "    for ch in range(c0, c1):",
             "        for b in range(n):",
             "            for oy in range(oh):",
             "                base = (b * oh + oy) * ow"]
    for i in range(kh):
        lines.append(f"                y{i} = oy * {sh} - {ph} + {i * dh}")
    lines.append("                for ox in range(ow):")
    for i in range(kh):
        for j in range(kw):
            col = f"ox * {sw} - {pw} + {j * dw}"
            guard = f"if y{i} >= 0 and y{i} < h and {col} >= 0 and {col} < w: " if ph or pw else ""
            lines.append(f"                    {guard}out[b, ch, y{i}, {col}] += "
                         f"cols[(ch * {kh} + {i}) * {kw} + {j}, base + ox]")
    return "\n".join(lines) + "\n"


_MAX_UNROLL = 64   # window positions up to which col2im gets an unrolled kernel


def _span_lines(indent: int, sw: int, pw: int, dw: int) -> list:
    """Source lines giving window column j's in-image span: input column ox * sw + xoff
    is inside the image for the output columns lo..hi-1 (none: lo == hi), from input
    column s0 on. Both col2im's rows form and im2col use it."""
    pad = " " * indent
    return [f"{pad}xoff = j * {dw} - {pw}",
            f"{pad}lo = (-xoff + {sw - 1}) // {sw} if xoff < 0 else 0",
            f"{pad}hi = min(ow, (w - 1 - xoff) // {sw} + 1) if w - 1 - xoff >= 0 else 0",
            f"{pad}lo = max(min(lo, ow), 0)",
            f"{pad}hi = max(hi, lo)",
            f"{pad}s0 = max(lo * {sw} + xoff, 0)"]


def _col2im_head(form: str, dtype, kernel, stride, padding, dilation) -> list:
    """The imports, signature and docstring lines a col2im kernel of `form` starts with."""
    (kh, kw) = kernel
    return ["import numpy as np",
            "from numba import njit", "", "",
            f"@njit(\"void(Array({dtype}, 2, 'C', readonly=True), {dtype}[:, :, :, ::1], int64, "
            f"int64, int64, int64, int64, int64)\", cache=CACHE, error_model='numpy', boundscheck=False, "
            "nogil=True)",
            "def kernel(cols, out, oh, ow, c0, c1, kh, kw):",
            f'    """col2im by {form} {kernel} {stride} {padding} {dilation}, channels c0..c1-1 '
            f'(kh, kw: {kh}, {kw})"""']


def _col2im_rows_source(dtype, kernel, stride, padding, dilation) -> str:
    """col2im for images with long output rows (`_ROWS_MIN`): plane by plane, the plane
    kept in L1 while the kh*kw column rows add into it, each window row one loop over the
    in-image span with visibly non-negative indices, so the adds vectorize (ResNet's 3x3
    input gradient: ~2x faster)."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    lines = [*_col2im_head("rows", dtype, kernel, stride, padding, dilation),
             "    n, c, h, w = out.shape",
             f"    zero = np.{dtype}(0)",
             "    for ch in range(c0, c1):",
             "        for b in range(n):",
             "            plane = out[b, ch]",
             "            for y in range(h):",
             "                for x in range(w):",
             "                    plane[y, x] = zero",
             "            for i in range(kh):",
             "                for j in range(kw):",
             "                    row = cols[(ch * kh + i) * kw + j]",
             *_span_lines(20, sw, pw, dw),
             "                    for oy in range(oh):",
             f"                        y = oy * {sh} - {ph} + i * {dh}",
             "                        if y < 0 or y >= h:",
             "                            continue",
             "                        dst = plane[y]",
             "                        r0 = max((b * oh + oy) * ow + lo, 0)",
             "                        for t in range(hi - lo):",
             f"                            dst[s0 + t * {sw}] += row[r0 + t]"]
    return "\n".join(lines) + "\n"


def _col2im_phases_source(dtype, kernel, stride, padding, dilation) -> str:
    """col2im for column-strided windows (`col2im_kernel`), the phases form of im2col's
    adjoint: per image and channel the column rows add into the padded plane's column
    phases (zeroed), each window tap's rows as contiguous adds into one phase, which are
    then interleaved back into the image's rows (a phase position past the phases' rows
    and the phases no window column reads: zeros). Each element's sum runs in the window's
    (i, j) order from zero, as in the numpy form and the rows form."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    lines = [*_col2im_head("phases", dtype, kernel, stride, padding, dilation),
             "    n, c, h, w = out.shape",
             f"    zero = np.{dtype}(0)",
             f"    hp = (oh - 1) * {sh} + {(kh - 1) * dh + 1}",
             f"    qw = ow + {(kw - 1) * dw // sw}",
             f"    buf = np.empty({sw} * hp * qw, out.dtype)"]
    for q in range(sw):    # phase q's position t is image column t * sw + q - pw: inside for t in lo..hi-1
        lines += [f"    lo{q} = min(max({pw - q + sw - 1} // {sw}, 0), qw)",
                  f"    hi{q} = max(min((w + {pw - q + sw - 1}) // {sw}, qw), lo{q})"]
    lines += [f"    ta = max({', '.join(f'lo{q}' for q in range(sw))}, 0)",   # every phase inside: ta..tb-1
              f"    tb = max(min({', '.join(f'hi{q}' for q in range(sw))}, qw), ta)",
              f"    xa = min(max(ta * {sw} - {pw}, 0), w)",                      # their image columns xa..xb-1
              f"    xb = max(min(tb * {sw} - {pw}, w), xa)",
              "    for ch in range(c0, c1):",
              "        for b in range(n):",
              "            for t in range(buf.size):",
              "                buf[t] = zero",
              "            top = b * oh * ow",
              "            for i in range(kh):",
              "                for j in range(kw):",
              "                    src = cols[(ch * kh + i) * kw + j, top:top + oh * ow]",
              f"                    dst = buf[(j * {dw} % {sw} * hp + i * {dh}) * qw + j * {dw} // {sw}:]",
              "                    for oy in range(oh):",
              f"                        d = dst[oy * {sh} * qw:]",
              "                        r = src[oy * ow:]",
              "                        for t in range(ow):",
              "                            d[t] += r[t]",
              "            plane = out[b, ch]",
              "            for yy in range(h):",
              "                row = plane[yy]",
              f"                y = yy + {ph}",
              "                if y >= hp:",
              "                    for x in range(w):",
              "                        row[x] = zero",
              "                    continue",
              "                for x in range(xa):",   # the ends: a column's phase and position
              f"                    u = x + {pw}",
              f"                    t = u // {sw}",
              f"                    row[x] = buf[(u % {sw} * hp + y) * qw + t] if t < qw else zero",
              "                for x in range(xb, w):",
              f"                    u = x + {pw}",
              f"                    t = u // {sw}",
              f"                    row[x] = buf[(u % {sw} * hp + y) * qw + t] if t < qw else zero"]
    lines += [f"                p{q} = buf[({q} * hp + y) * qw + ta:]" for q in range(sw)]
    lines += ["                m = row[xa:]",
              "                for t in range(tb - ta):"]
    lines += [f"                    m[t * {sw} + {q}] = p{q}[t]" for q in range(sw)]
    return "\n".join(lines) + "\n"


# Output rows at least this long take the rows form of col2im (1.6-2.1x faster at 16 and
# 32 columns, slower at 4 and 8).
_ROWS_MIN = 16


def _im2col_head(dtype) -> list:
    """The module head and signature both im2col forms share: x (N, C, H, W), cols, the
    output extent, the pad value, the channel range and the kernel's extent."""
    return ["import numpy as np",
            "from numba import njit", "", "",
            f"@njit(\"void(Array({dtype}, 4, 'C', readonly=True), {dtype}[:, ::1], int64, int64, "
            f"float64, int64, int64, int64, int64)\", cache=CACHE, error_model='numpy', boundscheck=False, "
            "nogil=True)",
            "def kernel(x, cols, oh, ow, pad_value, c0, c1, kh, kw):"]


def _im2col_source(dtype, kernel, stride, padding, dilation) -> str:
    """im2col into (C*kh*kw, N*OH*OW) rows from a C-contiguous (N, C, H, W) image, each
    column row written once in order as runs of the image: per output row the window
    column's in-image span (lo..hi-1, from input column s0) is one copy loop, the padding
    a few fill writes at its ends, never a branch per element (about 5-6 GB/s on ResNet's and DCGAN's layers). With
    unit strides and output rows as long as the input's ("same" padding) the rows of an
    image follow each other in both, so its whole in-image band is one run and the ends'
    fills are written after it. The window's extent is passed as arguments: with
    constant trip counts LLVM unrolled the copy loop nine times for no speed."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    unit = sh == 1 and sw == 1
    lines = _im2col_head(dtype) + [
             f'    """im2col {kernel} {stride} {padding} {dilation}, channels c0..c1-1 (kh, kw: {kh}, {kw})"""',
             "    n, c, h, w = x.shape",
             f"    fill = np.{dtype}(pad_value)",
             "    flat = x.reshape(n * c * h * w)",
             "    for ch in range(c0, c1):",
             "        for i in range(kh):",
             # window row i reads input row oy * sh + yoff: inside for oy in ylo..yhi-1
             f"            yoff = i * {dh} - {ph}",
             f"            ylo = (-yoff + {sh - 1}) // {sh} if yoff < 0 else 0",
             f"            yhi = min(oh, (h - 1 - yoff) // {sh} + 1) if h - 1 - yoff >= 0 else 0",
             "            ylo = max(min(ylo, oh), 0)",
             "            yhi = max(yhi, ylo)",
             "            for j in range(kw):",
             f"                row = cols[(ch * {kh} + i) * {kw} + j]",
             *_span_lines(16, sw, pw, dw),
             "                span = hi - lo",
             "                for b in range(n):",
             "                    top = b * oh * ow",
             "                    for t in range(top, top + ylo * ow):",
             "                        row[t] = fill",
             "                    for t in range(top + yhi * ow, top + oh * ow):",
             "                        row[t] = fill",
             "                    if yhi == ylo:",
             "                        continue",
             f"                    plane = (b * c + ch) * h * w + (ylo * {sh} + yoff) * w + s0"]
    if unit:
        lines += ["                    if ow == w:   # the band is one run; its ends' fills after it",
                  "                        d0 = max(top + ylo * ow + lo, 0)",
                  "                        q0 = max(plane, 0)",
                  "                        for t in range((yhi - ylo - 1) * ow + span):",
                  "                            row[d0 + t] = flat[q0 + t]",
                  "                        for oy in range(ylo, yhi):",
                  "                            base = top + oy * ow",
                  "                            for t in range(base, base + lo):",
                  "                                row[t] = fill",
                  "                            for t in range(base + hi, base + ow):",
                  "                                row[t] = fill",
                  "                        continue"]
    lines += ["                    for oy in range(ylo, yhi):",
              "                        base = top + oy * ow",
              "                        for t in range(base, base + lo):",
              "                            row[t] = fill",
              "                        for t in range(base + hi, base + ow):",
              "                            row[t] = fill",
              "                        d0 = max(base + lo, 0)",
              f"                        q0 = max(plane + (oy - ylo) * {sh} * w, 0)",
              "                        for t in range(span):",
              f"                            row[d0 + t] = flat[q0 + t * {sw}]"]
    return "\n".join(lines) + "\n"


def _im2col_table_source(dtype, kernel, stride, padding, dilation) -> str:
    """im2col for images with short output rows, and column-strided ones too short for
    the phases form (`im2col_form`), where the loop overhead per row or the strided
    gather was the work: each window offset's source positions
    (-1: padding) are tabulated once per call, and each column run is one loop over all
    outputs through the table (ResNet's last stage: ~3x faster)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    lines = _im2col_head(dtype) + [
             f'    """im2col by table {kernel} {stride} {padding} {dilation}, channels c0..c1-1 '
             f'(kh, kw: {kh}, {kw})"""',
             "    n, c, h, w = x.shape",
             f"    fill = np.{dtype}(pad_value)",
             "    run = oh * ow",
             "    table = np.empty((kh * kw, run), np.int64)",
             "    for i in range(kh):",
             "        for j in range(kw):",
             "            for oy in range(oh):",
             f"                y = oy * {sh} - {ph} + i * {dh}",
             "                for ox in range(ow):",
             f"                    xx = ox * {sw} - {pw} + j * {dw}",
             "                    inside = y >= 0 and y < h and xx >= 0 and xx < w",
             "                    table[i * kw + j, oy * ow + ox] = y * w + xx if inside else -1",
             "    planes = x.reshape((n, c, h * w))",
             "    for ch in range(c0, c1):",
             "        for q in range(kh * kw):",
             f"            row = cols[ch * {kh * kw} + q]",
             "            at = table[q]",
             "            for b in range(n):",
             "                plane = planes[b, ch]",
             "                base = b * run",
             "                for s in range(run):",
             "                    v = at[s]",
             "                    row[base + s] = plane[v] if v >= 0 else fill"]
    return "\n".join(lines) + "\n"


def _im2col_phases_source(dtype, kernel, stride, padding, dilation) -> str:
    """im2col for column-strided windows (`im2col_form`): per image and channel the padded
    plane is first cut into its column phases (phase q, position t: padded column
    t * sw + q) by one loop whose loads are contiguous and whose stores go to the phases
    side by side, so it vectorizes as loads and shuffles; then each window tap's column row
    is, per output row, a contiguous copy out of one phase (tap j reads phase j*dw % sw
    from position j*dw // sw). The strided gather of the runs form and the table form's
    indexed loads cost more per element (3x3 at stride 2 over 64 output columns: 1.8x
    faster than the table form; a 7x7 stem over 112: 4x). Rows no window row reads (a
    row stride wider than the window) and phases no window column reads are not made."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    qs = sorted({j * dw % sw for j in range(kw)})       # the phases the window columns read
    rows = sorted({i * dh % sh for i in range(kh)})     # the padded rows' residues they read
    lines = _im2col_head(dtype) + [
        f'    """im2col by phases {kernel} {stride} {padding} {dilation}, channels c0..c1-1 '
        f'(kh, kw: {kh}, {kw})"""',
        "    n, c, h, w = x.shape",
        f"    fill = np.{dtype}(pad_value)",
        f"    hp = (oh - 1) * {sh} + {(kh - 1) * dh + 1}",     # the padded rows the windows read
        f"    qw = ow + {(kw - 1) * dw // sw}",                # a phase row's positions
        f"    buf = np.empty({sw} * hp * qw, x.dtype)"]        # phase q's row y at (q * hp + y) * qw
    for q in qs:    # phase q's position t is input column t * sw + q - pw: inside for t in lo..hi-1
        lines += [f"    lo{q} = min(max({pw - q + sw - 1} // {sw}, 0), qw)",
                  f"    hi{q} = max(min((w + {pw - q + sw - 1}) // {sw}, qw), lo{q})"]
    lines += [f"    ta = max({', '.join(f'lo{q}' for q in qs)}, 0)",      # every phase inside: ta..tb-1
              f"    tb = max(min({', '.join(f'hi{q}' for q in qs)}, qw), ta)",
              f"    s0 = max(ta * {sw} - {pw}, 0)",
              "    for ch in range(c0, c1):",
              "        for b in range(n):",
              "            plane = x[b, ch]",
              "            for y in range(hp):"]
    if len(rows) < sh:
        lines += [f"                if y % {sh} not in ({', '.join(map(str, rows))},):",
                  "                    continue"]
    # (views indexed from 0: numba's wraparound of a maybe-negative index made scatters)
    lines += [f"                p{q} = buf[({q} * hp + y) * qw:({q} * hp + y + 1) * qw]" for q in qs]
    lines += [f"                yy = y - {ph}",
              "                if yy < 0 or yy >= h:"]
    for q in qs:
        lines += ["                    for t in range(qw):", f"                        p{q}[t] = fill"]
    lines += ["                    continue",
              "                src = plane[yy]"]
    for q in qs:
        lines += [f"                for t in range(lo{q}):", f"                    p{q}[t] = fill",
                  f"                e = p{q}[hi{q}:]", f"                for t in range(qw - hi{q}):",
                  "                    e[t] = fill",
                  f"                for t in range(lo{q}, min(ta, hi{q})):",
                  f"                    p{q}[t] = src[t * {sw} + {q - pw}]",
                  f"                for t in range(max(tb, lo{q}), hi{q}):",
                  f"                    p{q}[t] = src[t * {sw} + {q - pw}]",
                  f"                m{q} = p{q}[ta:]"]
    lines += ["                s = src[s0:]",
              "                for t in range(tb - ta):"]
    lines += [f"                    m{q}[t] = s[t * {sw} + {q}]" for q in qs]
    lines += ["            top = b * oh * ow",
              "            for i in range(kh):",
              "                for j in range(kw):",
              "                    dst = cols[(ch * kh + i) * kw + j, top:top + oh * ow]",
              f"                    src = buf[(j * {dw} % {sw} * hp + i * {dh}) * qw + j * {dw} // {sw}:]",
              "                    for oy in range(oh):",
              "                        d = dst[oy * ow:]",
              f"                        r = src[oy * {sh} * qw:]",
              "                        for t in range(ow):",
              "                            d[t] = r[t]"]
    return "\n".join(lines) + "\n"


# Output rows shorter than this take the table form of im2col (measured on ResNet's 3 x 3
# convolutions over batch 32: 3.0x faster at 4 columns, 1.1x at 8, 0.7x at 16) ...
_TABLE_MAX_OW = 8
# ... and rows up to this long with a column stride, where the runs form's copy is a
# strided gather of a few elements per row (3 x 3 and 4 x 4 windows at stride 2: 1.8-2.2x
# faster at 8 and 12 columns, 1.1-2x at 16, even at 24, 0.8x at 32).
_TABLE_MAX_OW_STRIDED = 16


def table_form(stride, ow: int) -> bool:
    """Whether im2col takes the table form for output rows `ow` long at `stride`."""
    return ow < _TABLE_MAX_OW or (stride[1] > 1 and ow <= _TABLE_MAX_OW_STRIDED)


# Column-strided output rows take the phases form of im2col where a phase row's copies
# into the kw window columns are at least this many elements (`ow * kw`): shorter copies
# are loop overhead, and the table form wins (3x3 at stride 2: even at 24-32 columns, the
# phases form 1.3-1.8x faster from 48; 7x7: even at 12-16, 3-4x faster from 48).
_PHASES_MIN_COPY = 96

_SOURCES = {"runs": _im2col_source, "table": _im2col_table_source, "phases": _im2col_phases_source}


def im2col_form(kernel, stride, ow: int) -> str:
    """The im2col form for output rows `ow` long: "phases" (column stride, long enough
    copies), "table" (short rows, or the other column-strided ones: its indexed loads beat
    the runs form's strided gather at every length) or "runs"."""
    if stride[1] > 1 and ow >= _TABLE_MAX_OW and ow * kernel[1] >= _PHASES_MIN_COPY:
        return "phases"
    return "table" if table_form(stride, ow) or stride[1] > 1 else "runs"


def im2col_kernel(dt: str, kernel, stride, padding, dilation, ow: int):
    """The loaded im2col kernel for this geometry, dtype and output row length, or None:
    ``fn(x, cols, oh, ow, pad_value, c0, c1, kh, kw)``, x a C-contiguous (N, C, H, W)."""
    form = im2col_form(kernel, stride, ow)
    key = ({"runs": "im2col"}.get(form, "im2col_" + form), dt) + tuple(kernel) + tuple(stride) \
        + tuple(padding) + tuple(dilation)
    source = _SOURCES[form]
    return native_kernel(key, lambda: source(dt, kernel, stride, padding, dilation), steady=True).get()


def col2im_form(kernel, stride, ow: int) -> str:
    """The col2im form for output rows `ow` long: "unrolled" (short rows, few window
    offsets), else "rows", or "phases" in its place where columns are strided: its adds
    are contiguous where the rows form's are strided (3x3 at stride 2, 16-64 columns:
    1.4-5x faster; 1x1: even to 2x)."""
    if ow >= _ROWS_MIN or kernel[0] * kernel[1] > _MAX_UNROLL:
        return "phases" if stride[1] > 1 else "rows"
    return "unrolled"


_COL2IM = {"unrolled": ("col2im", _col2im_source), "rows": ("col2im_rows", _col2im_rows_source),
           "phases": ("col2im_phases", _col2im_phases_source)}


def col2im_kernel(dt: str, kernel, stride, padding, dilation, ow: int):
    """(the loaded col2im kernel or None, whether it zeroes the image itself): the rows
    and phases forms ``fn(cols, img, oh, ow, c0, c1, kh, kw)`` zero the image's planes
    themselves, the unrolled ``fn(cols, img, oh, ow, c0, c1)`` adds into a zeroed image."""
    form = col2im_form(kernel, stride, ow)
    name, source = _COL2IM[form]
    key = (name, dt) + tuple(kernel) + tuple(stride) + tuple(padding) + tuple(dilation)
    return (native_kernel(key, lambda: source(dt, kernel, stride, padding, dilation), steady=True).get(),
            form != "unrolled")
