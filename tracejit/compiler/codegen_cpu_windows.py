"""The numba CPU renderer of a windows nest (loopnest.Window, windows.py), and the loop body
both backends share.

Two loop forms over (N, C, H, W), the geometry written in as constants, sizes arguments:
a *window fold* (pooling forward: for each output and window position, the group's steps
at the input position, then a max with a strict ``>`` recording the first maximum's offset
and letting NaN win, at its last NaN's offset, or a sum times ``1/(kh*kw)``), and a *window
gather* (pooling backward: for each input position, the gradients of the windows holding it,
summed in order). The window loops have constant trip counts and clamped, masked loads, so the body
has no branch; results are the numpy forms' bit for bit. Planes run in parallel; the
serial twin is the same loop with ``range``.
"""
from __future__ import annotations

from .emitter import render_steps
from .loopnest import LoopNest
from .windows import tiles

__all__ = ["render_windows", "window_body", "pooled_sizes"]

IND = "    "


def _index(op, names=("i0", "i1", "i2", "i3")) -> str:
    return ", ".join("0" if d is None else names[d] for d in op.index) or "0"


def _clamp(v: str, size: str) -> str:
    """`v` clamped into [0, size): selects (numba-CUDA's min/max builtins need a device
    context to compile)."""
    return f"({v} if {v} < {size} else {size} - 1) if {v} > 0 else 0"


def pooled_sizes(nest: LoopNest, ind: str) -> list:
    """Lines computing the pooled ``oh``, ``ow`` from the input's ``d2``, ``d3``."""
    w = nest.window
    return [f"{ind}o{a} = (d{2 + j} + {2 * w.padding[j]} - {w.dilation[j] * (w.kernel[j] - 1)} - 1) // {w.stride[j]} + 1"
            for j, a in enumerate("hw")]


def window_body(nest: LoopNest, step_lines: list, em, ind: str, loads=None) -> list:
    """The body for one output (fold) or one input element (gather), in statements both
    numba backends compile; `em` types the constants. A fold loads `loads` (operands) at
    each window position, every array operand when None."""
    w = nest.window
    dt = w.dtype
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = w.kernel, w.stride, w.padding, w.dilation
    c = lambda v: em.const(v, dt)          # noqa: E731
    out, I1, I2 = [], ind + IND, ind + IND * 2
    add = out.append
    if w.gather:
        return _gather(nest, step_lines, c, em._type(dt), ind, _wide(nest, em))
    pad = bool(ph or pw)
    count = kh * kw
    if w.kind == "avg":
        add(f"{ind}acc = {c(-0.0)}")       # -0.0 + v is v, bit for bit (numpy's copy of the first)
    else:
        add(f"{ind}m = {c(float('-inf'))}")
        add(f"{ind}q = {c(count)}")
        if w.kind == "max_record":
            add(f"{ind}a = {c(0)}")
    add(f"{ind}for ky in range({kh}):")
    add(f"{I1}yy = oy * {sh} + ky * {dh} - {ph}")
    if pad:
        add(f"{I1}iny = (yy >= 0) & (yy < d2)")
    add(f"{I1}i2 = {_clamp('yy', 'd2') if pad else 'yy'}")
    add(f"{I1}for kx in range({kw}):")
    add(f"{I2}xx = ox * {sw} + kx * {dw} - {pw}")
    add(f"{I2}i3 = {_clamp('xx', 'd3') if pad else 'xx'}")
    loads = [op for op in nest.operands if op.layout != "scalar"] if loads is None else loads
    out += [f"{I2}{op.name} = {op.array}[{_index(op)}]" for op in loads]
    out += [I2 + ln for ln in step_lines]
    fill = c(0) if w.kind == "avg" else c(float("-inf"))
    e = f"{w.value} if iny & (xx >= 0) & (xx < d3) else {fill}" if pad else w.value
    add(f"{I2}e = {e}")
    store = _store(nest, em)
    if w.kind == "avg":
        add(f"{I2}acc = acc + e")
        add(f"{ind}w = acc * {c(1.0 / count)}")
        add(f"{ind}{nest.outputs[0].array}[i0, i1, oy, ox] = {store('w')}")
        return out
    k = f"{em._type(dt)}(ky * {kw} + kx)"
    add(f"{I2}hit = e > m")
    add(f"{I2}m = e if hit else m")
    if w.kind == "max_record":
        add(f"{I2}a = {k} if hit else a")
    add(f"{I2}q = {k} if e != e else q")   # the last NaN's offset (PyTorch's kernels)
    add(f"{ind}nan = q < {c(count)}")
    o = nest.outputs[0].array
    value = store(f"{c(float('nan'))} if nan else m")
    if w.kind == "max_record":
        add(f"{ind}{o}[0, i0, i1, oy, ox] = {value}")
        add(f"{ind}{o}[1, i0, i1, oy, ox] = {store('q if nan else a')}")
    else:
        add(f"{ind}{o}[i0, i1, oy, ox] = {value}")
    return out


def _store(nest: LoopNest, em):
    """How a fold's value is stored: rounded to nearest even where its output holds bf16
    words (windows._round_on_store), else as it is."""
    if nest.outputs[0].dtype != "bfloat16":
        return lambda v: v
    em.imports.add("f32_to_bf16")
    return lambda v: f"f32_to_bf16({v})"


def _wide(nest: LoopNest, em):
    """``load(k, subscript)``: a gather's read of its operand k, widened where it holds
    bf16 words (windows._gather_words)."""
    def load(k: int, at: str) -> str:
        op = nest.operands[k]
        if op.dtype != "bfloat16":
            return f"{op.array}[{at}]"
        em.imports.add("bf16_to_f32")
        return f"bf16_to_f32({op.array}[{at}])"
    return load


def _gather(nest: LoopNest, step_lines: list, c, tname: str, ind: str, load) -> list:
    w = nest.window
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = w.kernel, w.stride, w.padding, w.dilation
    out = [f"{ind}acc = {c(0)}"]          # +0.0: a -0.0 gradient lands as +0.0, as numpy's
    inner = ind
    for j, (i, o, p, d, s, k) in enumerate((("i2", "oy", ph, dh, sh, "ky"), ("i3", "ox", pw, dw, sw, "kx"))):
        n_out = f"o{'hw'[j]}"
        size = (kh, kw)[j]
        if (size - 1) * d + 1 <= s:
            # windows apart along this dim (pooling's usual stride = kernel): a position is
            # in one window at most, found by a division, not a loop over the window
            out += [f"{inner}t{j} = {i} + {p}", f"{inner}{o} = t{j} // {s}",
                    f"{inner}{k} = (t{j} - {o} * {s}) // {d}",
                    f"{inner}ok{j} = (t{j} - {o} * {s} == {k} * {d}) & ({k} < {size}) & ({o} < {n_out})",
                    f"{inner}{o}c = {o} if {o} < {n_out} else {n_out} - 1"]
            continue
        # the max's gradients add in window order, the average's in offset order (the
        # numpy forms' orders); a loop over just the covering windows, not unrolled, was slower
        order = f"range({size - 1}, -1, -1)" if w.kind == "scatter" else f"range({size})"
        out += [f"{inner}for {k} in {order}:",
                f"{inner}{IND}t{j} = {i} + {p} - {k} * {d}",
                f"{inner}{IND}{o} = t{j} // {s}",
                f"{inner}{IND}ok{j} = (t{j} >= 0) & ({o} * {s} == t{j}) & ({o} < {n_out})",
                f"{inner}{IND}{o}c = {_clamp(o, n_out)}"]
        inner += IND
    I2 = inner
    at = "i0, i1, oyc, oxc"
    g = load(w.grad, at)
    if w.kind == "scatter":
        out.append(f"{I2}hit = ok0 & ok1 & ({load(w.record, '1, ' + at)} == {tname}(ky * {kw} + kx))")
        out.append(f"{I2}acc = acc + ({g} if hit else {c(0)})")
    else:
        out.append(f"{I2}acc = acc + ({g} * {c(1.0 / (kh * kw))} if ok0 & ok1 else {c(0)})")
    return out + _gathered(nest, step_lines, ind)


def _fold_rows(nest: LoopNest, step_lines: list, em, ind: str) -> list:
    """An average per output row whose windows overlap along it and reach into the padding
    (the per-output fold's clamped loads do not vectorize; without padding they do, across
    the outputs, and a max's selects do either way: that form is faster there): the row's
    sums in ``racc``, each window position one loop over the outputs it reaches. Each output
    adds its taps in `window_body`'s order; the taps outside the input are skipped (their
    +0 only turns a -0.0 sum into +0.0: added once at the end where a window reaches out)."""
    w = nest.window
    c = lambda v: em.const(v, w.dtype)     # noqa: E731
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = w.kernel, w.stride, w.padding, w.dilation
    I1, I2, I3, I4, I5 = (ind + IND * k for k in range(1, 6))
    out = [f"{ind}racc = np.empty(ow, {em._type(w.dtype)})",
           f"{ind}for oy in range(oh):", f"{I1}for ox in range(ow):", f"{I2}racc[ox] = {c(-0.0)}",
           f"{I1}for ky in range({kh}):", f"{I2}i2 = oy * {sh} + ky * {dh} - {ph}",
           f"{I2}if (i2 >= 0) & (i2 < d2):", f"{I3}for kx in range({kw}):", f"{I4}b = kx * {dw} - {pw}",
           f"{I4}for ox in range(max(-(b // {sw}), 0), min((d3 - 1 - b) // {sw} + 1, ow)):",
           f"{I5}i3 = np.uintp(ox * {sw} + b)"]   # (unsigned: no wraparound test, it vectorizes)
    out += [f"{I5}{op.name} = {op.array}[{_index(op)}]" for op in nest.operands if op.layout != "scalar"]
    out += [I5 + ln for ln in step_lines] + [f"{I5}racc[ox] = racc[ox] + {w.value}"]
    out += [f"{I1}for ox in range(ow):", f"{I2}acc = racc[ox]", f"{I2}y0 = oy * {sh} - {ph}",
            f"{I2}x0 = ox * {sw} - {pw}",
            f"{I2}if (y0 < 0) | (y0 + {(kh - 1) * dh} >= d2) | (x0 < 0) | (x0 + {(kw - 1) * dw} >= d3):",
            f"{I3}acc = acc + {c(0)}", f"{I2}w = acc * {c(1.0 / (kh * kw))}"]
    return out + [f"{I2}{nest.outputs[0].array}[i0, i1, oy, ox] = {_store(nest, em)('w')}"]


def _gather_rows(nest: LoopNest, step_lines: list, em, ind: str) -> list:
    """A gather per input row: each covering window row's gradients (read once into ``grow``,
    however strided) spread into a row of sums, window position by window position, as one
    loop over the window row's outputs (it vectorizes; a search per element over 25 taps does
    not: ~10x the time), then the row's elements. Each element's terms add in `_gather`'s order;
    the terms it skips are +0."""
    w = nest.window
    dt = w.dtype
    c = lambda v: em.const(v, dt)          # noqa: E731
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = w.kernel, w.stride, w.padding, w.dilation
    load = _wide(nest, em)
    order = (lambda n: f"range({n - 1}, -1, -1)") if w.kind == "scatter" else (lambda n: f"range({n})")
    I1 = ind + IND
    out = [f"{ind}row = np.empty(d3, {em._type(dt)})", f"{ind}grow = np.empty(ow, {em._type(dt)})",
           f"{ind}rrow = np.empty(ow, {em._type(dt)})",
           f"{ind}for i2 in range(d2):", f"{I1}for i3 in range(d3):", f"{I1}{IND}row[i3] = {c(0)}"]
    if (kh - 1) * dh + 1 <= sh:      # one covering window row at most, found by a division
        out += [f"{I1}oy = (i2 + {ph}) // {sh}", f"{I1}ky = (i2 + {ph} - oy * {sh}) // {dh}",
                f"{I1}if (i2 + {ph} - oy * {sh} == ky * {dh}) & (ky < {kh}) & (oy < oh):"]
    else:
        out += [f"{I1}for ky in {order(kh)}:", f"{I1}{IND}t0 = i2 + {ph} - ky * {dh}",
                f"{I1}{IND}oy = t0 // {sh}", f"{I1}{IND}if (t0 >= 0) & (oy * {sh} == t0) & (oy < oh):"]
    I3 = out[-1][:len(out[-1]) - len(out[-1].lstrip())] + IND
    I4, I5 = I3 + IND, I3 + IND * 2
    g = load(w.grad, "i0, i1, oy, ox")
    out += [f"{I3}for ox in range(ow):"]
    if w.kind == "scatter":
        out += [f"{I4}grow[ox] = {g}", f"{I4}rrow[ox] = {load(w.record, '1, i0, i1, oy, ox')}"]
        g = f"grow[ox] if rrow[ox] == {em._type(dt)}(ky * {kw} + kx) else {c(0)}"
    else:
        out += [f"{I4}grow[ox] = {g} * {c(1.0 / (kh * kw))}"]
        g = "grow[ox]"
    out += [f"{I3}for kx in {order(kw)}:", f"{I4}b = kx * {dw} - {pw}",
            f"{I4}for ox in range(max(-(b // {sw}), 0), min((d3 - 1 - b) // {sw} + 1, ow)):",
            f"{I5}row[np.uintp(ox * {sw} + b)] += {g}"]
    return out + [f"{I1}for i3 in range(d3):", f"{I1}{IND}acc = row[i3]"] + _gathered(nest, step_lines, I1 + IND)


def _gathered(nest: LoopNest, step_lines: list, ind: str) -> list:
    """One input element's end of a gather, its sum in ``acc``: ``w``, the other operands'
    loads, the group's steps and its stores."""
    skip = {nest.window.grad, nest.window.record}
    return ([f"{ind}w = acc"] + [f"{ind}{op.name} = {op.array}[{_index(op)}]" for op in nest.operands
                                 if op.layout != "scalar" and op.k not in skip]
            + [ind + ln for ln in step_lines] + [f"{ind}{o.array}[i0, i1, i2, i3] = {o.value}" for o in nest.outputs])


def _gather_tiles(nest: LoopNest, step_lines: list, em, ind: str) -> list:
    """A gather over tiling windows walked per window: each window's gradient (and record)
    is read once and spread over its positions; uncovered rows and columns get zero. The
    same sums as `_gather`, without a division per element (~30% less time)."""
    w = nest.window
    dt = w.dtype
    c = lambda v: em.const(v, dt)          # noqa: E731
    tname = em._type(dt)
    (kh, kw), (ph, pw) = w.kernel, w.padding
    load = _wide(nest, em)
    I1, I2, I3, I4 = (ind + IND * k for k in range(1, 5))

    def element(at_ind, value):
        return [f"{at_ind}acc = {c(0)}", f"{at_ind}acc = acc + ({value})"] + _gathered(nest, step_lines, at_ind)

    if w.kind == "scatter":
        hit = f"gv if r == {tname}(ky * {kw} + kx) else {c(0)}"
        loads = [f"{I3}r = {load(w.record, '1, i0, i1, oy, ox')}", f"{I3}gv = {load(w.grad, 'i0, i1, oy, ox')}"]
    else:
        hit = "gv"
        loads = [f"{I3}gv = {load(w.grad, 'i0, i1, oy, ox')} * {c(1.0 / (kh * kw))}"]
    out = [f"{ind}for i2 in range(d2):",
           f"{I1}oy = (i2 + {ph}) // {kh}",
           f"{I1}ky = i2 + {ph} - oy * {kh}",
           f"{I1}if oy < oh:",
           f"{I2}for ox in range(ow):"]
    out += loads
    out += [f"{I3}for kx in range({kw}):", f"{I4}i3 = ox * {kw} + kx - {pw}"]
    if pw:
        out += [f"{I4}if i3 >= 0 and i3 < d3:"]
        out += element(I4 + IND, hit)
    else:
        out += element(I4, hit)
    out += [f"{I2}for i3 in range(max(ow * {kw} - {pw}, 0), d3):"]
    out += element(I3, c(0))
    out += [f"{I1}else:", f"{I2}for i3 in range(d3):"]
    out += element(I3, c(0))
    return out


def render_windows(nest: LoopNest, parallel: bool):
    from .codegen_cpu import CpuEmitter, KernelSpec, module_head, signature

    if nest.rows:      # per-channel sums ahead of the window fold
        from .codegen_cpu_channels import render_channels
        return render_channels(nest, parallel)
    w = nest.window
    lines, emitters = render_steps(nest, CpuEmitter)
    imports = set().union(*(em.imports for em in emitters))
    em = CpuEmitter(w.dtype)
    loop = "prange" if parallel else "range"
    body = [f"{IND}{op.name} = {op.array}[0]" for op in nest.operands if op.layout == "scalar"]
    body += pooled_sizes(nest, IND)
    body += [f"{IND}for plane in {loop}(d0 * d1):", f"{IND * 2}i0 = plane // d1", f"{IND * 2}i1 = plane - i0 * d1"]
    if w.gather and tiles(w.kernel, w.stride, w.dilation):
        body += _gather_tiles(nest, lines, em, IND * 2)
    elif w.gather:
        body += _gather_rows(nest, lines, em, IND * 2)
    elif w.kind == "avg" and w.padding != (0, 0) and (w.kernel[1] - 1) * w.dilation[1] + 1 > w.stride[1]:
        body += _fold_rows(nest, lines, em, IND * 2)
    else:
        body += [f"{IND * 2}for oy in range(oh):", f"{IND * 3}for ox in range(ow):"]
        body += window_body(nest, lines, em, IND * 4)
    imports |= em.imports
    sig = signature(nest, None)
    header = [f"@njit({sig!r}, parallel={parallel}, cache=CACHE, error_model='numpy')",
              f"def {nest.name}({', '.join(nest.arguments())}):",
              f'    """fused group: {nest.ops} ({"gather" if w.gather else "fold"} over windows)"""']
    src = module_head(parallel, imports) + ["", ""] + header + body
    return KernelSpec("\n".join(src) + "\n", nest, parallel, "windows", ())
