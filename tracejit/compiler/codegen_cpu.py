"""Generate the numba source of one fused group (CPU backend).

The source depends on the group's structure, dtypes, rank, broadcast pattern and
the layout of each operand, never on sizes: sizes arrive as arguments, so a new
batch size reuses the compiled kernel. Two loop shapes:

- *flat*: every operand has the iteration shape and is C-contiguous (or is a
  scalar): one ``prange`` over the flat index; this is the fast, vectorized case.
  Flat kernels take 1-D views and the element count ``n`` instead of the dims (the
  plan passes ``a.reshape(-1)``; ``KernelSpec.mode`` tells it), whatever the rank: a ``reshape`` inside the kernel
  is compiled from numba's ``numba.np.arrayobj``, and a process loading such a kernel
  from the disk cache must import that module (and its imports) to rebuild the
  kernel's environment: 26-30 ms of a warm first call here;
- *nested*: anything else (broadcast or strided operands, partial reductions): a loop
  nest over the iteration dims, kept dims outside (the first one a ``prange``),
  reduced dims inside, each operand read with explicit N-d indexing (index 0 on its
  broadcast dims; numba applies the array's own strides). Past ``MAX_NESTED_RANK``
  dims the nest becomes one flat loop over the kept dims (and one over the reduced
  dims) that recovers each index by division.

Reductions accumulate in float64 for float32 sums (numpy uses pairwise sums; a plain
float32 running sum over millions of elements would drift), and use
``fastmath={'reassoc'}`` so LLVM may vectorize the reduction. The group's elementwise
work is then a separate ``element`` helper compiled without fastmath and inlined by
LLVM (``alwaysinline``) with its own flags: 'reassoc' on it would let LLVM rewrite
``x - 0.5*x`` as ``0.5*x`` and lose the nan of ``-inf - -inf``. Transcendentals come from `mathlib`,
constants are typed in the operation's dtype (no silent float64 promotion).
"""
from __future__ import annotations

import math

from ..jit.ir import Literal
from .fusion import Group
from . import llvmopts

__all__ = ["Emitter", "generate", "KernelSpec", "NUMBA_TYPE"]

NUMBA_TYPE = {"float32": "float32", "float64": "float64", "int32": "int32", "int64": "int64",
              "bool": "boolean", "int8": "int8", "uint8": "uint8"}
_NP_NAME = {"bool": "bool_"}


def _np_type(dt: str) -> str:
    """Source naming numpy's scalar type for dtype name `dt` (``np.float32``, ``np.bool_``)."""
    return f"np.{_NP_NAME.get(dt, dt)}"


# Deeper iteration spaces are walked by one flat loop with index division instead of a
# loop per dim (Python allows at most 20 nested blocks; numpy arrays have up to 64 dims).
MAX_NESTED_RANK = 12

# Math functions that are plain numba builtins (they vectorize as LLVM intrinsics).
_BUILTIN_MATH = {"sqrt": "math.sqrt", "floor": "np.floor"}


class Emitter:
    """What a primitive's ``scalar`` rule writes against (see ops/registry.py).

    The CUDA backend's `CudaEmitter` overrides how a type and a special float are
    spelled (`_type`, `_SPECIAL`) and how math functions are called (`call`); typed
    constants, casts and integer powers are the same code for both.
    """

    # How nan and inf are written in generated source (``np`` is imported there).
    _SPECIAL = {"nan": "np.nan", "inf": "np.inf"}

    def __init__(self, dtype: str):
        self.dtype = dtype
        self.imports: set = set()
        self.literals: dict = {}

    def _type(self, dt: str) -> str:
        """Source for the scalar type `dt` (a callable that makes a typed value)."""
        return _np_type(dt)

    def const(self, v, dtype: str | None = None) -> str:
        dt = dtype or self.dtype
        if dt == "bool":
            return "True" if v else "False"
        tn = self._type(dt)
        if dt.startswith("float"):
            v = float(v)
            if math.isnan(v):
                text = f"{tn}({self._SPECIAL['nan']})"
            elif math.isinf(v):
                text = f"{tn}({'-' if v < 0 else ''}{self._SPECIAL['inf']})"
            else:
                text = f"{tn}({v!r})"
        else:
            text = f"{tn}({int(v)})"
        self.literals[text] = v
        return text

    def call(self, fn: str, *args) -> str:
        if fn in _BUILTIN_MATH:
            return f"{_BUILTIN_MATH[fn]}({', '.join(args)})"
        if not self.dtype.startswith("float"):
            raise NotImplementedError(f"{fn} on {self.dtype}")
        # Only the name: importing mathlib imports numba, which generating a kernel's
        # source (in a background compile: before any worker finished) need not pay.
        from .mathnames import function_name
        name = function_name(fn, self.dtype)
        self.imports.add(name)
        return f"{name}({', '.join(args)})"

    def cast(self, x: str, dtype) -> str:
        name = dtype.name
        if name == "bool":
            return f"({x} != 0)"
        return f"{self._type(name)}({x})"

    def pow(self, a: str, b: str) -> str:
        if b in self.literals:
            v = self.literals[b]
            if v < 0 and not self.dtype.startswith("float"):
                # numpy (so eager) refuses this; a kernel would silently compute 1 // a**n.
                raise ValueError("Integers to negative integer powers are not allowed.")
            if math.isfinite(v) and v == int(v) and abs(v) <= 4:
                n = int(abs(v))
                if n == 0:
                    return self.const(1)
                prod = " * ".join([a] * n)
                return f"({prod})" if v > 0 else f"({self.const(1)} / ({prod}))"
            if v == 0.5 and self.dtype.startswith("float"):
                return self.call("sqrt", a)
        if not self.dtype.startswith("float"):
            return f"({a} ** {b})"
        return self.call("pow", a, b)


class KernelSpec:
    """A generated kernel: its source and how the plan must call it."""

    def __init__(self, source, name, mode, arg_vars, out_vars, red_shape_kind, llvm_options=()):
        self.source = source
        self.llvm_options = llvm_options  # set while numba compiles it (llvmopts.applied)
        self.name = name
        self.mode = mode              # "flat" (1-D operands and n) | "nested" (N-d and dims)
        self.arg_vars = arg_vars      # external input Vars, in argument order
        self.out_vars = out_vars      # output Vars, in argument order
        self.red_shape_kind = red_shape_kind


def _compute_dtype(e) -> str:
    """The dtype the operation computes in (its operands', after the IR's explicit casts)."""
    if e.prim.name == "where":
        return e.out.aval.dtype.name
    for a in e.inputs:
        if not isinstance(a, Literal):
            return a.aval.dtype.name
    return e.out.aval.dtype.name


def _arr_type(dtype: str, rank: int, contiguous: bool, readonly: bool = False) -> str:
    if rank == 0:
        rank = 1
    if readonly:
        # Inputs are only read; read-only types also accept writable arrays and numpy's
        # read-only broadcast views.
        return f"Array({NUMBA_TYPE[dtype]}, {rank}, {'C' if contiguous else 'A'!r}, readonly=True)"
    dims = [":"] * rank
    if contiguous:
        dims[-1] = "::1"
    return f"{NUMBA_TYPE[dtype]}[{', '.join(dims)}]"


# Elements summed in float32 before each float64 accumulation (flat float32 sums).
_SUM_BLOCK = 256


def _red_info(e):
    combine = e.prim.extra["combine"]
    dims = e.params["dims"]
    return combine, dims, e.params["keepdim"]


def _acc_dtype(combine: str, dtype: str) -> str:
    if combine in ("add", "mul") and dtype in ("float32", "float64"):
        return "float64"
    if combine in ("add", "mul") and dtype in ("int32", "int64", "bool", "int8", "uint8"):
        return "int64"
    return dtype


def _init(combine: str, acc_dt: str, em: Emitter) -> str:
    if combine == "add":
        return em.const(0, acc_dt)
    if combine == "mul":
        return em.const(1, acc_dt)
    if acc_dt.startswith("float"):
        return em.const(-math.inf if combine == "max" else math.inf, acc_dt)
    import numpy as np
    info = np.iinfo(acc_dt) if acc_dt != "bool" else None
    if info is None:
        return "False" if combine == "max" else "True"
    return em.const(info.min if combine == "max" else info.max, acc_dt)


def _combine(combine: str, acc: str, r: str, acc_dt: str) -> str:
    if combine == "add":
        return f"{acc} += {r}" if acc_dt != "float64" else f"{acc} += np.float64({r})"
    if combine == "mul":
        return f"{acc} *= {r}" if acc_dt != "float64" else f"{acc} *= np.float64({r})"
    op = ">" if combine == "max" else "<"
    return f"{acc} = {r} if ({r} {op} {acc} or {r} != {r}) else {acc}"


def generate(group: Group, layouts: tuple, name: str = "kernel", parallel: bool = True) -> KernelSpec:
    """Source for `group`; `layouts[k]` is "flat", "scalar", "nd" (a strided or broadcast
    operand, indexed per dim) or "ndc" (the same, known C-contiguous) for input k.

    ``parallel=False`` gives the serial twin used for small sizes, where starting the
    thread pool costs far more than the work.
    """
    shape = group.shape
    rank = len(shape)
    inputs = group.inputs
    red = group.reduction
    mats = [v for v in group.outputs if red is None or v is not red.out]
    flat = all(l in ("flat", "scalar") for l in layouts) and (red is None or len(red.params["dims"]) == rank)
    mode = "flat" if flat else "nested"
    imports: set = set()
    names: dict = {}
    for k, v in enumerate(inputs):
        names[v] = f"x{k}"

    # ---- the per-element computation (shared by both loop shapes) ----
    comp: list = []
    for j, e in enumerate(group.eqns):
        em = Emitter(_compute_dtype(e))
        args = []
        for a in e.inputs:
            if isinstance(a, Literal):
                typed = e.prim.promote or e.prim.name == "where"
                dt = _compute_dtype(e) if typed else a.aval.dtype.name
                args.append(em.const(a.value, dt))
            else:
                args.append(names[a])
        if e.prim.name == "expand":
            expr = args[0]  # a broadcast load: the operand is read with broadcast indexing
        else:
            expr = e.prim.scalar(em, *args, **dict(e.params))
        imports |= em.imports
        vn = f"v{j}"
        names[e.out] = vn
        src = f"# {e.prim.name}"
        if e.loc:
            import os
            src += f" ({os.path.basename(e.loc[0])}:{e.loc[1]})"
        comp.append(f"{vn} = {expr}  {src}")
    helper: list = []
    vector_red = red is not None and parallel
    if vector_red:
        # The reduction kernel needs fastmath 'reassoc' to vectorize its accumulation, but
        # on the elementwise work that flag lets LLVM rewrite e.g. x - 0.5*x as 0.5*x,
        # turning -inf - -inf = nan into -inf. So that work lives in a helper compiled
        # without fastmath and inlined by LLVM with its own instruction flags. (The serial
        # twin, for small sizes, skips both: one function compiles in half the time.)
        ret = list(dict.fromkeys([names[v] for v in mats] + [names[red.inputs[0]]]))
        ret_src = ", ".join(ret) + ("," if len(ret) == 1 else "")
        args_src = ", ".join(f"x{k}" for k in range(len(inputs)))
        helper = ["@njit(cache=False, error_model='numpy', fastmath=False)",
                  f"def element({args_src}):",
                  "    _always_inline()"] + ["    " + c for c in comp] + [f"    return {ret_src}", "", ""]
        comp = [f"{ret_src} = element({args_src})"]
        imports.add("_always_inline")

    arg_names = [f"in{k}" for k in range(len(inputs))]
    out_names = [f"out{m}" for m in range(len(mats))]
    sig_args = []
    for k, v in enumerate(inputs):
        lay = layouts[k]
        r = len(v.aval.shape)
        # Scalars arrive as 1-element 1-d arrays whatever their rank.
        sig_args.append(_arr_type(v.aval.dtype.name, 1 if lay == "scalar" or flat else r,
                                  lay in ("flat", "scalar", "ndc"), readonly=True))
    for v in mats:
        sig_args.append(_arr_type(v.aval.dtype.name, 1 if flat else rank, True))
    red_out_rank = 0
    if red is not None:
        combine, rdims, keepdim = _red_info(red)
        kept = [d for d in range(rank) if d not in rdims]
        red_out_rank = max(len(kept), 1)
        sig_args.append(_arr_type(red.out.aval.dtype.name, red_out_rank, True))
        out_names.append("red")
    dim_names = ["n"] if flat else [f"d{i}" for i in range(rank)]
    sig_args += ["int64"] * len(dim_names)
    params = arg_names + out_names + dim_names
    sig = f"void({', '.join(sig_args)})"
    fastmath = ', fastmath={"reassoc", "contract"}' if vector_red else ""
    header = [f"@njit({sig!r}, parallel={parallel}, cache=CACHE, error_model='numpy'{fastmath})",
              f"def {name}({', '.join(params)}):"]

    def load(k, idx_expr):
        if layouts[k] == "scalar":
            return None
        return f"x{k} = in{k}[{idx_expr}]"

    body: list = []
    ind = "    "
    # Scalars (0-d operands, passed as 1-element arrays) are read once, outside the loops.
    for k in range(len(inputs)):
        if layouts[k] == "scalar":
            body.append(f"{ind}x{k} = in{k}[0]")
    if mode == "flat":
        def elem(i_ind, i):
            out = [f"{i_ind}x{k} = in{k}[{i}]" for k in range(len(inputs)) if layouts[k] == "flat"]
            out += [i_ind + c for c in comp]
            out += [f"{i_ind}out{m}[{i}] = {names[v]}" for m, v in enumerate(mats)]
            return out
        if red is None:
            body.append(f"{ind}for i in prange(n):")
            body += elem(ind * 2, "i")
        else:
            combine, rdims, keepdim = _red_info(red)
            acc_dt = _acc_dtype(combine, red.out.aval.dtype.name)
            rvar = names[red.inputs[0]] if red.inputs[0] in names else None
            em = Emitter(acc_dt)
            init = _init(combine, acc_dt, em)
            out_dt = red.out.aval.dtype.name
            if not parallel:
                # The serial twin (small sizes) keeps one accumulator: no partials array
                # to allocate, and it compiles in half the time of the chunked form
                # (0.21 s against 0.45 s: it is most of a cold first call of a small loss).
                body.append(f"{ind}acc = {init}")
                body.append(f"{ind}for i in range(n):")
                body += elem(ind * 2, "i")
                body.append(f"{ind*2}{_combine(combine, 'acc', rvar, acc_dt)}")
                body.append(f"{ind}red[0] = {_cast_back('acc', out_dt)}")
            elif combine == "add" and acc_dt == "float64" and red.inputs[0].aval.dtype.name == "float32":
                # Sum float32 in blocks of _SUM_BLOCK in float32 (the vector lanes of the
                # inner loop), then the blocks in float64: converting every element to
                # float64 halves the vector width and made the GELU loss 2.5x slower than
                # its map kernel. The error stays below numpy's pairwise float32 sum.
                # (Block indices, not range(lo, hi, step): a stepped range kept LLVM from
                # vectorizing the inner loop, 2.5x slower again.)
                B = _SUM_BLOCK
                body.append(f"{ind}nb = (n + {B - 1}) // {B}")
                body.append(f"{ind}nchunk = min(64, max(1, nb // 16))")
                body.append(f"{ind}partial = np.empty(nchunk, {_np_type(acc_dt)})")
                body.append(f"{ind}for c in prange(nchunk):")
                body.append(f"{ind*2}acc = {init}")
                body.append(f"{ind*2}for b in range(c * nb // nchunk, (c + 1) * nb // nchunk):")
                body.append(f"{ind*3}bs = b * {B}")
                body.append(f"{ind*3}be = min(bs + {B}, n)")
                body.append(f"{ind*3}bacc = np.float32(0.0)")
                body.append(f"{ind*3}for i in range(bs, be):")
                body += elem(ind * 4, "i")
                body.append(f"{ind*4}bacc += {rvar}")
                body.append(f"{ind*3}acc += np.float64(bacc)")
                body.append(f"{ind*2}partial[c] = acc")
                body += _fold_partials("nchunk", combine, acc_dt, init, out_dt)
            else:
                body.append(f"{ind}nchunk = min(64, max(1, n // 4096))")
                body.append(f"{ind}partial = np.empty(nchunk, {_np_type(acc_dt)})")
                body.append(f"{ind}for c in prange(nchunk):")
                body.append(f"{ind*2}lo = c * n // nchunk")
                body.append(f"{ind*2}hi = (c + 1) * n // nchunk")
                body.append(f"{ind*2}acc = {init}")
                body.append(f"{ind*2}for i in range(lo, hi):")
                body += elem(ind * 3, "i")
                body.append(f"{ind*3}{_combine(combine, 'acc', rvar, acc_dt)}")
                body.append(f"{ind*2}partial[c] = acc")
                body += _fold_partials("nchunk", combine, acc_dt, init, out_dt)
    else:
        rdims = ()
        if red is not None:
            combine, rdims, keepdim = _red_info(red)
        kept = [d for d in range(rank) if d not in rdims]
        order = kept + list(rdims)

        def idx_parts(v, ivars):
            """Per-dim index expressions of operand `v`: 0 on its broadcast dims."""
            r = len(v.aval.shape)
            parts = []
            for j, dsz in enumerate(v.aval.shape):
                it = rank - r + j
                if isinstance(dsz, int) and dsz == 1 and not (isinstance(shape[it], int) and shape[it] == 1):
                    parts.append("0")
                else:
                    parts.append(ivars[it])
            return parts

        def idx_for(v, ivars):
            return ", ".join(idx_parts(v, ivars)) or "0"
        ivars = [f"i{d}" for d in range(rank)]
        inner: list = []
        for k, v in enumerate(inputs):
            if layouts[k] != "scalar":
                inner.append(f"x{k} = in{k}[{idx_for(v, ivars)}]")
        inner += comp
        full_idx = ", ".join(ivars) if ivars else "0"
        inner += [f"out{m}[{full_idx}] = {names[v]}" for m, v in enumerate(mats)]
        if rank > MAX_NESTED_RANK:
            body += _decomposed_loops(rank, rdims, inner, red, names)
        elif red is None:
            depth = 1
            for lvl, d in enumerate(order):
                loop = "prange" if lvl == 0 else "range"
                body.append(f"{ind * depth}for i{d} in {loop}(d{d}):")
                depth += 1
            if rank == 0:
                body += [ind + s for s in inner]
            else:
                body += [ind * depth + s for s in inner]
        else:
            acc_dt = _acc_dtype(combine, red.out.aval.dtype.name)
            em = Emitter(acc_dt)
            init = _init(combine, acc_dt, em)
            rvar = names[red.inputs[0]]
            if kept == [rank - 1]:
                loads = {k: idx_parts(v, ivars) for k, v in enumerate(inputs) if layouts[k] != "scalar"}
                body += _leading_reduction(rank, loads, comp, len(mats), [names[v] for v in mats],
                                           combine, acc_dt, init, rvar, red.out.aval.dtype.name)
            elif kept:
                depth = 1
                for lvl, d in enumerate(kept):
                    loop = "prange" if lvl == 0 else "range"
                    body.append(f"{ind * depth}for i{d} in {loop}(d{d}):")
                    depth += 1
                body.append(f"{ind * depth}acc = {init}")
                d0 = depth
                for d in rdims:
                    body.append(f"{ind * depth}for i{d} in range(d{d}):")
                    depth += 1
                body += [ind * depth + s for s in inner]
                body.append(f"{ind * depth}{_combine(combine, 'acc', rvar, acc_dt)}")
                out_idx = ", ".join(f"i{d}" for d in kept)
                body.append(f"{ind * d0}red[{out_idx}] = {_cast_back('acc', red.out.aval.dtype.name)}")
            else:
                # Full reduction over strided operands: partials per first-dim index.
                first, rest = rdims[0], rdims[1:]
                body.append(f"{ind}partial = np.empty(d{first}, {_np_type(acc_dt)})")
                body.append(f"{ind}for i{first} in prange(d{first}):")
                body.append(f"{ind*2}acc = {init}")
                depth = 2
                for d in rest:
                    body.append(f"{ind * depth}for i{d} in range(d{d}):")
                    depth += 1
                body += [ind * depth + s for s in inner]
                body.append(f"{ind * depth}{_combine(combine, 'acc', rvar, acc_dt)}")
                body.append(f"{ind*2}partial[i{first}] = acc")
                body += _fold_partials(f"d{first}", combine, acc_dt, init, red.out.aval.dtype.name)
    doc = [f'    """fused group {group.gid}: ' + ", ".join(e.prim.name for e in group.eqns)
           + (f" -> {red.prim.name}" if red is not None else "") + f' ({mode})"""']
    llvm_options = llvmopts.kernel_options(len(mats) + (red is not None), parallel)
    src_lines = ["# generated by tracejit (CPU backend); sizes are arguments, never constants"]
    if llvm_options:
        src_lines.append(f"# compiled with LLVM options: {' '.join(llvm_options)}")
    src_lines += ["import math", "import numpy as np",
                 "from numba import njit, prange" if parallel else "from numba import njit"]
    if imports:
        src_lines.append(f"from tracejit.compiler.mathlib import {', '.join(sorted(imports))}")
    src_lines += ["", ""] + helper + header + doc + body
    source = "\n".join(src_lines) + "\n"
    if not parallel:
        source = source.replace("prange(", "range(").replace("import njit, range", "import njit")
    return KernelSpec(source, name, mode, list(inputs), list(mats) + ([red.out] if red is not None else []),
                      red_out_rank, llvm_options)


def _leading_reduction(rank, loads, comp, n_out, out_vals, combine, acc_dt, init, rvar,
                       out_dt) -> list:
    """Loops for a reduction over every dim but the last (a bias gradient: the sum over
    the batch of a (batch, features) value).

    Kept-outer loops read each column with the row stride, one cache line per element,
    and do not vectorize. Instead each ``prange`` block owns a range of columns and
    sweeps every row; per row, each operand is a 1-D slice of the block's columns (or
    one value, where the operand broadcasts along the last dim), and the block
    accumulates into a local array. Indexing those from 0 lets LLVM vectorize the inner
    loop; offset indices into whole arrays (``acc[lo + j]``) kept it scalar, 6x slower.
    `loads` maps each non-scalar input to its index parts (``idx_for`` split)."""
    ind = "    "
    last = rank - 1
    rows = list(range(last))
    body = ["    nblk = (d%d + 255) // 256" % last,       # blocks of 256 columns
            f"{ind}for cb in prange(nblk):",
            f"{ind * 2}lo = cb * 256",
            f"{ind * 2}hi = min(lo + 256, d{last})",
            f"{ind * 2}n = hi - lo",
            f"{ind * 2}accb = np.full(n, {init}, {_np_type(acc_dt)})"]
    # Operands that do not depend on the row loops are sliced once per block.
    per_block, per_row, per_elem = [], [], []
    for k, parts in loads.items():
        row_dep = any(p in (f"i{d}" for d in rows) for p in parts[:-1])
        if parts[-1] == f"i{last}":
            sl = ", ".join(parts[:-1] + ["lo:hi"])
            (per_row if row_dep else per_block).append(f"r{k} = in{k}[{sl}]")
            per_elem.append(f"x{k} = r{k}[j]")
        else:        # broadcast along the last dim: one value per row
            (per_row if row_dep else per_block).append(f"x{k} = in{k}[{', '.join(parts)}]")
    body += [ind * 2 + line for line in per_block]
    depth = 2
    for d in rows:
        body.append(f"{ind * depth}for i{d} in range(d{d}):")
        depth += 1
    row_idx = ", ".join(f"i{d}" for d in rows)
    body += [ind * depth + line for line in per_row]
    body += [f"{ind * depth}o{m} = out{m}[{row_idx}, lo:hi]" for m in range(n_out)]
    body.append(f"{ind * depth}for j in range(n):")
    depth += 1
    body += [ind * depth + line for line in per_elem + comp]
    body += [f"{ind * depth}o{m}[j] = {val}" for m, val in enumerate(out_vals)]
    body.append(f"{ind * depth}{_combine(combine, 'accb[j]', rvar, acc_dt)}")
    body.append(f"{ind * 2}for j in range(n):")
    body.append(f"{ind * 3}red[lo + j] = {_cast_back('accb[j]', out_dt)}")
    return body


def _decompose(flat: str, dims: list, ind: str) -> list:
    """Statements turning the flat index `flat` over `dims` (C order) into i<d> variables.

    Every quotient gets its own name: numba's parfor pass refuses a reassigned variable
    that aliases the ``prange`` index."""
    out = []
    if not dims:
        return out
    q = flat
    for d in reversed(dims[1:]):
        out.append(f"{ind}i{d} = {q} % d{d}")
        out.append(f"{ind}{flat}_{d} = {q} // d{d}")
        q = f"{flat}_{d}"
    out.append(f"{ind}i{dims[0]} = {q}")
    return out


def _decomposed_loops(rank: int, rdims, inner: list, red, names) -> list:
    """The nested form for ranks too deep to nest: one flat loop over the kept dims (and one
    over the reduced dims), each index recovered by division. Python refuses more than 20
    nested blocks, and numpy allows 64 dims."""
    ind = "    "
    kept = [d for d in range(rank) if d not in rdims]
    body = []
    if red is None:
        body.append(f"{ind}n = {' * '.join(f'd{d}' for d in range(rank))}")
        body.append(f"{ind}for flat in prange(n):")
        body += _decompose("flat", list(range(rank)), ind * 2)
        body += [ind * 2 + s for s in inner]
        return body
    combine, _, _ = _red_info(red)
    acc_dt = _acc_dtype(combine, red.out.aval.dtype.name)
    init = _init(combine, acc_dt, Emitter(acc_dt))
    rvar = names[red.inputs[0]]
    rd = list(rdims)
    body.append(f"{ind}nr = {' * '.join(f'd{d}' for d in rd) or '1'}")
    if kept:
        body.append(f"{ind}nk = {' * '.join(f'd{d}' for d in kept)}")
        body.append(f"{ind}for fk in prange(nk):")
        body += _decompose("fk", kept, ind * 2)
        body.append(f"{ind * 2}acc = {init}")
        body.append(f"{ind * 2}for fr in range(nr):")
        body += _decompose("fr", rd, ind * 3)
        body += [ind * 3 + s for s in inner]
        body.append(f"{ind * 3}{_combine(combine, 'acc', rvar, acc_dt)}")
        out_idx = ", ".join(f"i{d}" for d in kept)
        body.append(f"{ind * 2}red[{out_idx}] = {_cast_back('acc', red.out.aval.dtype.name)}")
        return body
    body.append(f"{ind}nchunk = min(64, max(1, nr // 4096))")
    body.append(f"{ind}partial = np.empty(nchunk, {_np_type(acc_dt)})")
    body.append(f"{ind}for c in prange(nchunk):")
    body.append(f"{ind * 2}acc = {init}")
    body.append(f"{ind * 2}for fr in range(c * nr // nchunk, (c + 1) * nr // nchunk):")
    body += _decompose("fr", rd, ind * 3)
    body += [ind * 3 + s for s in inner]
    body.append(f"{ind * 3}{_combine(combine, 'acc', rvar, acc_dt)}")
    body.append(f"{ind * 2}partial[c] = acc")
    return body + _fold_partials("nchunk", combine, acc_dt, init, red.out.aval.dtype.name)


def _fold_partials(count: str, combine: str, acc_dt: str, init: str, out_dt: str) -> list:
    """The end of a chunked full reduction: fold the `count` per-chunk results in
    ``partial`` into ``red[0]``."""
    ind = "    "
    return [f"{ind}total = {init}",
            f"{ind}for c in range({count}):",
            f"{ind * 2}{_combine(combine, 'total', 'partial[c]', acc_dt)}",
            f"{ind}red[0] = {_cast_back('total', out_dt)}"]


def _cast_back(x: str, dtype: str) -> str:
    if dtype == "bool":
        return f"({x} != 0)"
    return f"{_np_type(dtype)}({x})"
