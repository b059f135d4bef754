"""The plan: a generated straight-line Python function that runs a compiled graph.

It binds symbolic dims from the input shapes, allocates each kernel's outputs, calls the
fused kernels and the other primitives in order, and drops each buffer after its last use;
one generated function keeps a cache hit's overhead to a few microseconds. The source is
registered with linecache for tracebacks and ``explain``. A plan is device-agnostic: its
`backends.Backend` supplies the array module, renders each group's nest and loads it.
"""
from __future__ import annotations

import itertools
import linecache
import logging
import math
import re
import sys

import numpy as np

from ..errors import CompileError, register_source_lines
from ..jit.control import COND, CUSTOM_FUNCTION, SCAN, WHILE
from ..jit.ir import Eqn, Graph, Literal, Var
from ..jit.passes import drop_detach
from ..memory import ALIGN_MIN, OutputSlot
from ..shapes import Sym, contains_sym
from ..threads import PARALLEL_MIN  # PARALLEL_MIN: below it a kernel runs serially
from . import backends, plancode
from .fusion import Group, partition, reduced_dims
from .rowinline import expand_rows_forms
from .groupsplit import split_wide_groups
from .slice_reads import fold_slice_reads, operand_var
from ..jit import patterns as _patterns
from . import plan_patterns as _plan_patterns  # noqa: F401  (the plan stage's patterns: registered at import)
from .gemm_steps import GemmStep
from .kernel_errors import group_parts
from .loopnest import broadcast_index, operand_layouts
from .windows import channel_layouts, channel_rows, channel_view, strided_layout
from .plan_kernel import _Kernel, _compile_on_first_call  # noqa: F401  (plan_mod._Kernel)
from ..dtypes import bfloat16 as _BF16
from .bf16_graph import has_bf16, widen as widen_bf16
from ..ops.indexing import GETITEM
from ..ops.host_steps import HOST_STEP, size_bindings, step_function
from ..ops.impls import signature_call
from ..ops.donation import donating
from ..ops.linalg import MATMUL
from ..ops.promotion import compute_dtype, half_widened, scalar_as
from ..ops.shape import CONCAT, PERMUTE, RESHAPE, STACK

__all__ = ["Plan"]

log = logging.getLogger("tracejit.kernels")

_ids = itertools.count()


def _wrapped_int(a, e):
    """An out-of-range int literal wrapped into its promoting op's compute dtype, as eager's
    ``promotion.prepare`` does (``-3 % uint8`` is ``253 % uint8``); else None."""
    p = e.prim
    if not (p.promote and isinstance(a, Literal) and type(a.value) is int):
        return None
    cd = compute_dtype(p, [x.aval for x in e.inputs]).np
    if cd.kind not in "iu" or np.iinfo(cd).min <= a.value <= np.iinfo(cd).max:
        return None
    return repr(int(scalar_as(a.value, cd)))


def _tuple_code(parts) -> str:
    """Python source of the tuple of the expressions `parts`."""
    return f"({', '.join(parts)}{',' if len(parts) == 1 else ''})"


def _shape_code(shape) -> str:
    return _tuple_code([d.to_python() if isinstance(d, Sym) else str(int(d)) for d in shape])


def _value_code(v, consts: dict) -> str:
    """Python source for a param value; Syms become expressions over bound symbols."""
    if isinstance(v, Sym):
        return v.to_python()
    if isinstance(v, (bool, type(None))) or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                             and v == v and abs(v) != float("inf")):
        return repr(v)
    if isinstance(v, tuple) and contains_sym(v):
        return _tuple_code([_value_code(x, consts) for x in v])
    if isinstance(v, dict) and contains_sym(v):   # (a complex call's op params)
        return "{" + ", ".join(f"{k!r}: {_value_code(x, consts)}" for k, x in v.items()) + "}"
    consts[f"P{len(consts)}"] = v
    return f"P{len(consts) - 1}"


def _basic_key_code(spec, consts: dict) -> str:
    """Python source for the array index of a getitem spec of ints, slices and None (no
    index tensors): a plan constant where no bound is symbolic. The trailing Ellipsis keeps
    an all-integer index a 0-d view, as the primitive's implementation does."""
    def item(x):
        if x[0] == "s":
            return f"slice({', '.join(_value_code(b, consts) for b in x[1:])})"
        return "None" if x[0] == "n" else _value_code(x[1], consts)
    if not any(contains_sym(x) for x in spec):
        name = f"KEY{len(consts)}"
        consts[name] = tuple(slice(*x[1:]) if x[0] == "s" else None if x[0] == "n" else x[1]
                             for x in spec) + (Ellipsis,)
        return name
    return "(" + ", ".join(item(x) for x in spec) + ", Ellipsis)"


def _dtype_const(dtype, consts: dict) -> str:
    """Name of a plan global holding the numpy dtype object (allocating with a dtype
    object skips numpy's conversion from the scalar type: ~60 ns per buffer)."""
    name = f"DT_{dtype.np.name}"
    consts[name] = np.dtype(dtype.np)
    return name


def _donated(a, callers: int = 0):
    """`a` itself when nothing but the plan's local holds it (3 references; `callers`:
    frames between the plan and here), else None."""
    if (type(a) is np.ndarray and a.flags.owndata and a.flags.writeable and a.flags.c_contiguous
            and sys.getrefcount(a) <= 3 + callers):
        return a
    return None


def _copy_pays(kern, layouts: tuple) -> bool:
    """Whether strided operands of `kern` are better copied to C order than read by the "nd"
    variant: when the kernel calls a vectorizable math function, which general strides keep
    from vectorizing (an LSTM cell's gates: half the time with copies)."""
    if kern.backend.name != "cpu":
        return False
    from .codegen_cpu import CpuEmitter, render_steps
    return any(em.imports for em in render_steps(kern.nest(layouts), CpuEmitter)[1])


# The names a plan's source calls a single product and a call bound to a signature by
# (`_table_call`'s S<n>_<primitive>): bench's breakdowns time them.
PRODUCT_NAME, SIGNATURE_CALL, _WORD = re.compile(r"MATMUL(_\d+)?$"), re.compile(r"S\d+_(\w+)$"), re.compile(r"\w+")


def _slice_keeps_c_order(vshape: tuple, shape: tuple) -> bool:
    """Whether `broadcast_index`'s slice of a `shape` buffer to `vshape` is C-contiguous:
    no dim it cuts to 1 comes after a dim it keeps whole with more than one element."""
    lead, kept = len(shape) - len(vshape), False
    for i, d in enumerate(vshape):
        if isinstance(d, int) and d == 1 and shape[lead + i] != 1:
            if kept:
                return False
        elif not (isinstance(d, int) and d == 1):
            kept = True
    return True


class Plan:
    """A runnable compiled graph: ``plan(*arrays) -> tuple of arrays``."""

    def __init__(self, graph: Graph, name: str = "graph", backend=None):
        if has_bf16(graph):
            graph = widen_bf16(graph)   # (bf16 computes in float32: bf16_graph.py)
        graph = expand_rows_forms(drop_detach(graph))   # (rowinline.py: softmax as its rows group)
        self.graph = graph
        self.backend = backends.for_graph(graph) if backend is None else backends.get(backend)
        # the plan stage's patterns the backend has the kernels for (plan_patterns.py)
        self.items = fold_slice_reads(_patterns.apply("plan", split_wide_groups(partition(graph), graph),
                                                      graph, backend=self.backend), graph)
        self.kernels: list = []
        self._producers = None   # {value: its equation} (`_producer`)
        self._kernel_values = None   # the values its groups compute (`_from_kernel`)
        # (kernel, layouts, parallel) of each variant the first call with contiguous inputs
        # uses, and the plans of control-flow bodies: what a background compile prepares
        self.first_variants: list = []
        self.subplans: list = []
        self.source = ""
        self.name = name
        self.fn = self._build()

    def __call__(self, *arrays):
        return self.fn(*arrays)

    # ---- generation ------------------------------------------------------------------
    def _build(self):
        g = self.graph
        consts: dict = {"np": np, "xp": self.backend.array_module(), "_fix": self.backend.fix, "_cm": channel_view,
                        "_sl": strided_layout}
        names: dict = {}
        counter = itertools.count()

        def nm(v):
            n = names.get(v)
            if n is None:
                n = names[v] = f"v{next(counter)}"
            return n

        def atom(a):
            if isinstance(a, Literal):   # (inf and nan have no literal: a constant)
                return _value_code(a.value, consts)
            return nm(a)
        args = [f"a{i}" for i in range(len(g.inputs))]
        for v, a in zip(g.inputs, args):
            names[v] = a
        lines = [f"def plan({', '.join(args)}):"]
        # Bind each symbol from the first input dim that carries it.
        bound = set()
        for v, a in zip(g.inputs, args):
            if v.size is not None and v.size not in bound:   # an int argument used as a size
                bound.add(v.size)
                lines.append(f"    {v.size} = int({a})")
            for j, d in enumerate(v.aval.shape):
                if isinstance(d, Sym) and len(d.terms) == 1 and d.terms[0][1] == 1 and len(d.terms[0][0]) == 1:
                    s = d.terms[0][0][0]
                    if s not in bound:
                        bound.add(s)
                        lines.append(f"    {s} = {a}.shape[{j}]")
        # Last use of every value, to free buffers early.
        last: dict = {}
        for idx, it in enumerate(self.items):
            ins = ([operand_var(it, x) for x in it.inputs] if isinstance(it, Group)
                   else [x for x in it.inputs if isinstance(x, Var)])
            for x in ins:
                last[x] = idx
        ends: dict = {}   # item index -> the values last used there (in `last`'s order)
        for x, li in last.items():
            ends.setdefault(li, []).append(x)
        outs, input_set, item_lines = set(a for a in g.outputs if isinstance(a, Var)), set(g.inputs), {}
        stacked, made = self._stacked_concats(outs), set()
        for idx, it in enumerate(self.items):
            first = len(lines) + 1                 # 1-based line numbers of the source
            if it in made:
                pass     # (a stack its concats wrote)
            elif isinstance(it, Eqn) and it.outs[0] in stacked:
                st, i = stacked[it.outs[0]]
                buf = nm(st.out)
                if st not in made:
                    made.add(st)
                    lines.append(f"    {buf} = xp.empty({_shape_code(st.out.aval.shape)}, "
                                 f"{_dtype_const(st.out.aval.dtype, consts)})")
                parts = ", ".join(atom(a) for a in it.inputs)
                lines += [f"    {nm(it.out)} = {buf}[{i}]",
                          f"    xp.concatenate(({parts},), axis={it.params['dim']}, out={nm(it.out)})"]
            elif isinstance(it, Group):
                lines += self._emit_group(it, nm, consts, input_set)
            elif isinstance(it, GemmStep):
                lines += it.emit(self, nm, atom, consts, input_set)
            else:
                dies = [x for x in it.inputs[:1] if isinstance(x, Var) and last.get(x) == idx
                        and x not in outs and x not in input_set]
                lines += self._emit_eqn(it, atom, nm, consts, dies)
            item_lines.update(dict.fromkeys(range(first, len(lines) + 1), it))
            dead = [x for x in ends.get(idx, ()) if x not in outs and x not in input_set]
            if dead:
                lines.append("    del " + ", ".join(nm(x) for x in dead))
        lines.append(f"    return {_tuple_code([atom(a) for a in g.outputs])}")
        src = "\n".join(lines) + "\n"
        self.source = src
        fname = f"<tracejit-plan-{self.name}-{next(_ids)}>"
        linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
        register_source_lines(self, fname, item_lines, self.name)
        exec(plancode.compiled(src, fname), consts)
        return consts["plan"]

    def _stacked_concats(self, outs) -> dict:
        """concat output -> (stack, position) for a dim-0 stack whose inputs are all distinct
        concats of this plan that the plan does not return: each concat writes its slot of
        the stack's result, which then copies nothing (a key/value cache's cat + stack)."""
        if self.backend.name != "cpu":
            return {}
        cats = {it.out for it in self.items if isinstance(it, Eqn) and it.prim is CONCAT}
        found: dict = {}
        for it in self.items:
            if not (isinstance(it, Eqn) and it.prim is STACK and it.params["dim"] == 0):
                continue
            ins = it.inputs
            if len(set(ins)) == len(ins) and all(
                    isinstance(x, Var) and x in cats and x not in outs and x not in found
                    and x.aval.dtype is it.out.aval.dtype for x in ins):
                found.update((x, (it, i)) for i, x in enumerate(ins))
        return found

    def _emit_group(self, grp: Group, nm, consts, input_set):
        k = len(self.kernels)
        kern = _Kernel(grp, f"{self.name}_g{grp.gid}", self.backend)
        self.kernels.append(kern)
        kname = f"K{k}"
        consts[kname] = kern
        lines = []
        shape, rank = grp.shape, len(grp.shape)
        # Layouts as the shapes say, contiguity assumed where the plan cannot tell (the
        # others are checked before the call); an operand the plan makes strided is "nd",
        # unless the kernel calls math, which strides keep scalar (copied: `_copy_pays`).
        ins = [operand_var(grp, v) for v in grp.inputs]   # (a slice read in place: its array)
        layouts = operand_layouts(grp, [not self._strided(v) for v in ins])
        layouts = operand_layouts(grp) if "nd" in layouts and _copy_pays(kern, operand_layouts(grp)) else layouts
        chan = self.backend.name == "cpu" and rank == 4 and (grp.window is not None or channel_rows(grp))
        if chan:     # (a convolution's output: its (C, N, H, W) view)
            layouts = channel_layouts(grp, layouts, self._producer, self._ordered)
        check_contig = [v for v, lay in zip(ins, layouts) if lay in ("flat", "ndc")]
        red = grp.reduction
        mats = [v for v in grp.outputs if red is None or v is not red.out]
        call_args = []
        for v, lay in zip(ins, layouts):
            a = nm(v)
            if lay in ("scalar", "cm"):     # ("cm": windows.channel_view)
                a = f"{a}.reshape(1)" if lay == "scalar" else f"_cm({a})"
            call_args.append(a)
        static_size = None if any(isinstance(d, Sym) for d in shape) else math.prod(int(d) for d in shape)
        ref = next((a for a, lay in zip(call_args, layouts) if lay != "scalar"), "None")
        cms = getattr(grp, "cm_outputs", ())
        for m, v in enumerate(mats):
            # Rank-0 values live in 1-element buffers inside kernels.
            dt = _dtype_const(v.aval.dtype, consts)
            # (a rows group's per-row outputs: its shape, last dim 1; a windows or scatter group's: their own)
            oshape = tuple(v.aval.shape) if grp.rows or grp.window is not None or grp.scatter else shape
            if v in cms:    # written channel-major: the value is its (N, C, H, W) view
                oshape = (oshape[1], oshape[0]) + oshape[2:]
            if self.backend.name == "cpu" and (static_size is None
                                               or static_size * v.aval.dtype.np.itemsize >= ALIGN_MIN):
                # a large output: cache-line aligned, apart from the first operand modulo a
                # page, in its previous call's buffer when nothing holds it (memory.OutputSlot)
                slot = f"OUT{k}_{m}"
                consts[slot] = OutputSlot(m, len(mats))
                alloc = f"{nm(v)} = {slot}.take({_shape_code(oshape)}, {dt}, {ref})"
            else:
                alloc = f"{nm(v)} = xp.empty({_shape_code(oshape) if rank else '(1,)'}, {dt})"
            lines.append(f"    {alloc}")
            call_args.append(nm(v))
        if red is not None:
            dims = reduced_dims(red)
            kept = [shape[d] for d in range(rank) if d not in dims]
            kept += [red.params["k"]] if red.params.get("k") else []   # (a topk's k best)
            rs = _shape_code(kept if kept else (1,))
            tmp = nm(red.out) + "_r"
            lines.append(f"    {tmp} = xp.empty({rs}, {_dtype_const(red.out.aval.dtype, consts)})")
            # its view in the output's shape, taken before the kernel writes it: after a
            # large kernel every numpy call runs on swept caches
            lines.append(f"    {nm(red.out)} = {tmp}.reshape({_shape_code(red.out.aval.shape)})")
            call_args.append(tmp)
        dim_args = [d.to_python() if isinstance(d, Sym) else str(int(d)) for d in shape]
        size = " * ".join(dim_args) or "1"
        static = tuple(layouts)
        args = ", ".join(call_args + dim_args)
        pmin, pname = PARALLEL_MIN, "PARALLEL_MIN"
        if grp.rows and self.backend.name == "cpu":
            # parallel from the group's work, as an eager rows kernel (codegen_cpu_rows)
            from .codegen_cpu_rows import parallel_elements_min
            pmin, pname = parallel_elements_min(kern.nest(static)), f"PMIN{k}"
        big = static_size is not None and static_size >= pmin
        fast_args = args
        # The source is rendered now, so the lowering's own errors surface at capture.
        kern.spec(static, big)
        if kern.nest(static).flat:
            # Flat nests take 1-D views and the element count (the calling convention of
            # loopnest.py). Rank 0 and 1 buffers already are 1-D; the reduction's is (1,).
            n_in, n_out = len(grp.inputs), len(mats)

            def view(a: str) -> str:
                return f"{a}.reshape(-1)" if rank > 1 else a
            flat = [view(a) if lay == "flat" else a for a, lay in zip(call_args, layouts)]
            flat += [view(a) for a in call_args[n_in:n_in + n_out]] + call_args[n_in + n_out:]
            fast_args = ", ".join(flat + [size])
        # Each variant compiles on the first call that uses it (compiling every twin
        # doubled cold compile time); numba's errors still surface in the capturing call.
        twins = []
        if static_size is None or big or not self.backend.serial_twin:
            twins.append((f"{kname}p", True))
        if not big and self.backend.serial_twin:
            twins.append((f"{kname}s", False))
        for name, parallel in twins:
            consts[name] = _compile_on_first_call(kern, static, parallel, consts, name)
            self.first_variants.append((kern, static, parallel))
        fast = [f"{twins[0][0]}({fast_args})"]
        if len(twins) == 2:
            fast = [f"if {size} >= {pname}:", f"    {kname}p({fast_args})",
                    "else:", f"    {kname}s({fast_args})"]
        consts[pname] = pmin
        not_internal = list(dict.fromkeys(v for v in check_contig if not self._from_kernel(v)))
        if not_internal:
            cond = " and ".join(f"{nm(v)}.flags.c_contiguous" for v in not_internal)
            # Only the operands really strided take index arithmetic ("cm": a channel or
            # windows group's (C, N, H, W)-ordered operand)
            lay_of = "_sl({a}, {lay!r})" if chan else "({lay!r} if {a}.flags.c_contiguous else 'nd')"
            slow = ", ".join(lay_of.format(a=nm(v), lay=lay) if v in not_internal else repr(lay)
                             for v, lay in zip(ins, layouts))
            # Until that variant is loaded, the contiguous one runs on copies of the
            # strided operands (~1 ms for 2M floats, against 0.3-0.9 s of numba).
            copies = {nm(v): f"{nm(v)}_cc" for v in not_internal}
            # (one pattern for all kernels' names: one per kernel overflowed re's cache)
            fast_copy = [_WORD.sub(lambda m: copies.get(m.group(), m.group()), x) for x in fast]
            copied = [f"{c} = xp.ascontiguousarray({a})" for a, c in copies.items()]
            copied += fast_copy + [f"del {', '.join(copies.values())}"]
            strided = [f"_kv = {kname}.ready(({slow},), {size} >= {pname})",
                       "if _kv is not None:", f"    _kv({args})", "else:"]
            strided += ["    " + x for x in copied]
            # Strided operands of a kernel with math calls always take copies (`_copy_pays`).
            if _copy_pays(kern, static):
                strided = copied
            lines.append(f"    if {cond}:")
            lines += ["        " + x for x in fast]
            lines.append("    else:")
            lines += ["        " + x for x in strided]
        else:
            lines += ["    " + x for x in fast]
        lines += [f"    {nm(v)} = {nm(v)}.reshape(())" for v in mats if rank == 0]
        for v in mats:
            if rank and tuple(v.aval.shape) != tuple(shape) and not grp.rows and grp.window is grp.scatter is None:
                part = f"{nm(v)}[{broadcast_index(tuple(v.aval.shape), shape)}]"
                # a kernel's value is read as C-contiguous (`_from_kernel`): a strided slice
                # (an (N, 1) value of an (N, L) kernel) is copied, N elements
                keep = _slice_keeps_c_order(tuple(v.aval.shape), tuple(shape))
                lines.append(f"    {nm(v)} = {part if keep else f'xp.ascontiguousarray({part})'}")
        return lines + [f"    {nm(v)} = {nm(v)}.swapaxes(0, 1)" for v in mats if v in cms]

    def _producer(self, v):
        """The equation of this plan that defines `v` (None: an input, or a kernel's or a
        fused item's value: a fresh array)."""
        if self._producers is None:
            self._producers = {o: it for it in self.items if isinstance(it, Eqn) for o in it.outs}
        return self._producers.get(v)

    def _ordered(self, v, depth: int = 0) -> bool:
        """Whether `v`'s array surely has strides shrinking from first dim to last: a fresh
        array or a slice or reshape of one, not a plan input nor a permuted view."""
        if v in self.graph.inputs or depth > 8:
            return False
        e = self._producer(v)
        if e is None:
            return True   # a group's output: a kernel writes it C-contiguous
        if e.prim is PERMUTE:
            return False
        if e.prim in (RESHAPE, GETITEM):
            return isinstance(e.inputs[0], Var) and self._ordered(e.inputs[0], depth + 1)
        return True

    def _strided(self, v) -> bool:
        """Whether operand `v` surely arrives strided: a permuted view swapping two dims of
        size > 1 of an array in C order (the LSTM layers' outputs). Such an operand takes the
        "nd" variant from the start, so it compiles with the others; a wrong guess costs
        speed, never a value."""
        e = self._producer(v)
        if e is None or e.prim is not PERMUTE or not isinstance(e.inputs[0], Var):
            return False
        shape = e.inputs[0].aval.shape
        big = [d for d in e.params["dims"] if not (isinstance(shape[d], int) and shape[d] == 1)]
        return big != sorted(big) and self._ordered(e.inputs[0])

    def _from_kernel(self, v) -> bool:   # (whether a group of this plan computes v)
        if self._kernel_values is None:   # (once: a set per call made planning quadratic)
            self._kernel_values = {x for it in self.items if isinstance(it, Group) for x in it.defined}
        return v in self._kernel_values

    def _emit_eqn(self, e, atom, nm, consts, dies=()):
        p = e.prim
        ins = [_wrapped_int(a, e) or atom(a) for a in e.inputs]
        outs = [nm(o) for o in e.outs]
        if p.kind == "control":
            return self._emit_control(e, ins, outs, consts)
        if p is MATMUL and e.out.aval.dtype is not _BF16:   # (bf16: the registered bf16 GEMM below)
            consts["MATMUL"] = self.backend.matmul()
            if len(e.inputs[0].aval.shape) > 2 and len(e.inputs[1].aval.shape) == 2:
                # (..., k) @ (k, n): one GEMM over the flattened leading dims, as the eager
                # impl runs it (the array module's stacked matmul runs one per leading index)
                from ..ops.linalg import matmul_rows
                consts["MATMUL_ROWS"] = matmul_rows
                return [f"    {outs[0]} = MATMUL_ROWS(MATMUL, {ins[0]}, {ins[1]})"]
            # a 2-D product: its own callable, the route its static shapes decide chosen
            # once here (backends' matmul_for: numpy's matmul, or the GEMM choice's site)
            sa, sb = tuple(e.inputs[0].aval.shape), tuple(e.inputs[1].aval.shape)
            mname = f"MATMUL_{len(consts)}"     # (PRODUCT_NAME: the bench's timers find it)
            fn = self.backend.matmul_for(sa, sb, e.out.aval.dtype.np,
                                         install=lambda f, _n=mname: consts.__setitem__(_n, f))
            if fn is consts["MATMUL"]:
                return [f"    {outs[0]} = MATMUL({ins[0]}, {ins[1]})"]
            consts[mname] = fn
            return [f"    {outs[0]} = {mname}({ins[0]}, {ins[1]})"]
        if p is HOST_STEP:   # (ops/host_steps.py: then the data-dependent sizes it makes)
            h = f"H{len(consts)}"
            consts[h] = step_function(e.params["fn"])
            kw = "".join(f", {k}={_value_code(v, consts)}" for k, v in e.params.items() if k not in ("fn", "avals"))
            return ([f"    {', '.join(outs)}, = {h}(xp, {', '.join(ins)}{kw})"]
                    + [f"    {s} = {outs[i]}.shape[{j}]" for s, i, j in size_bindings(e)])
        if p is RESHAPE:
            return [f"    {outs[0]} = {ins[0]}.reshape({_shape_code(e.params['shape'])})"]
        if p is PERMUTE:
            return [f"    {outs[0]} = {ins[0]}.transpose({e.params['dims']!r})"]
        if p is GETITEM and len(ins) == 1 and all(x[0] in "sin" for x in e.params["spec"]):
            # ints, slices and None only: the array's own view, indexed in the plan's line
            # (the primitive's call costs more than the slice)
            return [f"    {outs[0]} = {ins[0]}[{_basic_key_code(e.params['spec'], consts)}]"]
        if p.widens_half and any(isinstance(a, Var) and half_widened(p, a.aval.dtype) is not None for a in e.inputs):
            # float16 computes in float32, the result rounded once by `_fix` (as eager's plans)
            consts["F32"] = np.float32
            ins = [f"{x}.astype(F32)" if isinstance(a, Var) and half_widened(p, a.aval.dtype) is not None else x
                   for a, x in zip(e.inputs, ins)]
        dt, donates = f"D_{e.out.aval.dtype.name}", p.extra.get("donates") and dies and self.backend.name == "cpu"
        consts[dt] = e.out.aval.dtype.np
        fn = None if donates else self._table_call(e)
        if fn is not None:    # the call made for this signature once, here
            name = f"S{len(consts)}_{p.name}"     # (SIGNATURE_CALL)
            consts[name] = fn
            return [f"    {outs[0]} = _fix({name}({', '.join(ins)}), {dt})"]
        iname = f"I_{p.name}"
        consts[iname] = p.run
        kw = ", ".join(f"{k}={_value_code(v, consts)}" for k, v in e.params.items())
        args = f"xp{', ' if ins else ''}{', '.join(ins)}{', ' if kw else ''}{kw}"
        call = f"{iname}({args})"
        if donates:
            # the first operand dies here: its array, where nothing else holds it, takes
            # the result (ops/donation.py) instead of a copy of it
            consts["_donated"], consts["DONATING"] = _donated, donating
            call = f"DONATING(_donated({ins[0]}), {iname}, {args})"
        return [f"    {outs[0]} = _fix({call}, {dt})"]

    def _table_call(self, e):
        """The CPU call eager makes for `e`'s static signature (ops/impls.py `signature_call`)."""
        p, avals = e.prim, [a.aval for a in e.inputs]
        dtype = avals[0].dtype if avals else e.out.aval.dtype   # (a promoting op's: every operand's)
        if (self.backend.name != "cpu" or len(e.outs) != 1 or _BF16 in (dtype, e.out.aval.dtype)
                or half_widened(p, dtype) is not None
                or contains_sym(tuple(e.params.values()))
                or not all(isinstance(a, Var) and not contains_sym(a.aval.shape) for a in e.inputs)
                or (p.promote and avals and (any(a.dtype is not dtype for a in avals)
                                             or compute_dtype(p, avals) is not dtype))):
            return None
        return signature_call(p, tuple(tuple(a.shape) for a in avals), dtype.np, e.params)

    def _emit_control(self, e, ins, outs, consts):
        prim, k = e.prim, len(consts)
        lhs = ", ".join(outs) + ("," if len(outs) == 1 else "")

        def sub(key: str, suffix: str, name: str) -> str:   # a body's plan, global `name`
            body = consts[name] = Plan(e.params[key], f"{self.name}_{suffix}", self.backend)
            self.subplans.append(body)
            return name
        if prim is COND:
            t, f = sub("true_graph", "true", f"T{k}"), sub("false_graph", "false", f"F{k}")
            return [f"    {lhs} = ({t} if {ins[0]} else {f})({', '.join(ins[1:])})"]
        if prim is WHILE:
            c, b = sub("cond_graph", "cond", f"C{k}"), sub("body_graph", "body", f"B{k}")
            n = len(e.outs)
            return [f"    _w = {_tuple_code(ins[:n])}", f"    _c = {_tuple_code(ins[n:])}",
                    f"    while {c}(*_w, *_c)[0]:", f"        _w = {b}(*_w, *_c)",
                    f"    {lhs} = _w"]
        if prim is SCAN:
            return self._emit_scan(e, ins, outs, consts, sub("body_graph", "scan", f"S{k}"))
        if prim is CUSTOM_FUNCTION:
            fwd = sub("forward", e.params["fn_cls"].__name__, f"U{k}")
            return [f"    {lhs} = {fwd}({', '.join(ins)})"]
        raise CompileError(f"no lowering for control primitive {prim.name}")

    def _emit_scan(self, e, ins, outs, consts, body: str):
        """A Python loop over the body's plan `body`; ys are stacked on a new leading axis."""
        nc, nx = e.params["n_carry"], e.params["n_xs"]
        carry, xs, caps = ins[1:1 + nc], ins[1 + nc:1 + nc + nx], ins[1 + nc + nx:]
        ys = outs[nc:]
        steps = "range(_n - 1, -1, -1)" if e.params["reverse"] else "range(_n)"
        lines = [f"    _n = int({ins[0]})",
                 f"    _w = {_tuple_code(carry)}",
                 f"    _c = {_tuple_code(caps)}",
                 f"    _ys = [[None] * _n for _ in range({len(ys)})]",
                 f"    for _k in {steps}:",
                 f"        _r = {body}(xp.asarray(_k, dtype=xp.int64), *_w, "
                 f"{''.join(f'{x}[_k], ' for x in xs)}*_c)",
                 f"        _w = _r[:{nc}]",
                 f"        for _j in range({len(ys)}):",
                 "            _ys[_j][_k] = _r[" + str(nc) + " + _j]"]
        if nc:
            lines.append(f"    {', '.join(outs[:nc])}{',' if nc == 1 else ''} = _w")
        for j, (y, o) in enumerate(zip(ys, e.outs[nc:])):
            dt = f"D_{o.aval.dtype.name}"
            consts[dt] = o.aval.dtype.np
            lines.append(f"    {y} = xp.stack(_ys[{j}]) if _n else xp.zeros({_shape_code(o.aval.shape)}, dtype={dt})")
        return lines

    def describe(self) -> str:
        out = []
        for it in self.items:
            if isinstance(it, Group):
                ops, locs = group_parts(it)
                out.append(f"group {it.gid}: {', '.join(ops)}  [{', '.join(locs)}]  "
                           f"reads {len(it.inputs)}, writes {len(it.outputs)}")
            elif isinstance(it, GemmStep):
                out.append(f"step: {it.describe()}")
            else:
                out.append(f"step: {it.prim.name}")
        return "\n".join(out)

    def all_first_variants(self) -> list:
        """`first_variants` of this plan and of every control-flow body in it."""
        out = list(self.first_variants)
        for p in self.subplans:
            out += p.all_first_variants()
        return out

    def kernel_sources(self) -> list:
        return [spec.source for spec in self.kernel_specs()]

    def kernel_specs(self) -> list:
        """The rendered spec of every kernel variant compiled so far (``.nest`` is its
        `loopnest.LoopNest`, ``.source`` its source)."""
        return [k._specs[key] for k in self.kernels for key in k.variants if key in k._specs]

