"""Parallel CPU kernels without numba's parfor pass: one serial ``nogil`` kernel per group
that runs a share of the chunks, launched on a few threads (compiler/cpu/runtime/cshares.py `ChunkKernel`).

Why: a ``parallel=True`` kernel costs numba 3-10x its serial twin to compile (the parfor
pass, gufunc outlining, the threading layer's scheduling code): the MLP step's 16
parallel variants were 25.6 of its 27.9 s in numba. The generated loops already split
their work into independent chunks (``for c in prange(nchunk)`` over explicit chunk
bounds, or a ``prange`` over rows, or column blocks: codegen_cpu.py). Here that one
``prange`` loop becomes ``range`` over the share of chunk ``chunk_t`` of ``chunk_nt``,
the kernel is compiled serial with ``nogil=True``, and the launcher runs the shares on
its threads at once (each share releases the GIL while it runs).

``TRACEJIT_PARALLEL=chunks`` turns it on; ``parfor`` keeps numba's parallel
kernels; ``auto`` (the default) keeps them but for flat kernels where `flat_pairs` holds:
those are chunk kernels whose two shares run without Python on the worker pool's thread
(`ChunkSpec.pair`, compiler/cpu/runtime/cshares.py), which is awake when numba's OpenMP worker sleeps.
The rendering is the CPU backend's parallel variant (codegen_cpu.render),
rewritten in four places: the decorator (``parallel=False, nogil=True`` and the extra
arguments in the signature), the ``prange`` line, and for reductions folded from
per-chunk results (full reductions, and sums over every dim but the last) the
``partial`` array (passed in by the launcher, one for all shares) and the fold of the
partials (run once, by the ``chunk_fold`` call after every share is done). Chunk bounds
do not depend on the thread count, so the result does not either. A loop shape this
rewriting does not know (``deep``: see `FORMS`) keeps its parfor kernel, as does
anything whose source does not have the expected shape.
"""
from __future__ import annotations

import re
from typing import Optional

from .. import envflags
from ..threads import ThreadFlag
from .codegen_cpu import FOLD_MARK, KernelSpec, render as render_cpu
from .emitter import NUMBA_TYPE

__all__ = ["enabled", "forced", "chunk_backend", "render", "ChunkSpec", "FORMS", "PAIRED",
           "flat_pairs", "paired"]

# Loop shapes (codegen_cpu.loop_form) rendered as chunk kernels; the others keep parfor.
FORMS = ("map", "nested_map", "rows", "flat_reduce", "flat_blocked_sum", "column_blocks",
         "strided_full", "blocked_map", "windows", "row_passes")
# Partial results per chunk, then a fold: flat full reductions (at most PARTIALS chunks),
# column sums (row chunks x columns: codegen_cpu.column_partial_len of the last size) and
# full reductions of nested operands (one per index of the first dim).
_FOLDED = ("flat_reduce", "flat_blocked_sum", "column_blocks", "strided_full")
PARTIALS = 64   # codegen_cpu's flat reductions use at most 64 chunks
# Loop shapes whose chunk kernel also gets a GIL-free pair (`ChunkSpec.pair`): the flat ones,
# the nested map (an elementwise chain with a broadcast operand, such as bias + ReLU over a
# GEMM's output), the column sums (ReLU's gradient with the bias gradient) and the rows of a
# rows group (a bias add, LayerNorm and GELU after a GEMM): `paired`.
PAIRED = ("map", "blocked_map", "flat_reduce", "flat_blocked_sum", "nested_map", "column_blocks",
          "windows", "row_passes")

_DECO = re.compile(r"""^@njit\((["'])void\((.*)\)\1, parallel=True, (.*)$""")
_PRANGE = re.compile(r"^(\s*)for (\w+) in prange\((.+)\):$")
_PARTIAL = re.compile(r"^\s*partial = np\.empty\((?:nchunk|nrc \* d\d+|d\d+), np\.(\w+)\)$")
_LOCAL_PARTIAL = re.compile(r"^\s*partial = ")


_forced = ThreadFlag()


def enabled() -> bool:
    """Whether parallel CPU kernels are chunk kernels (``TRACEJIT_PARALLEL=chunks``, or
    inside `forced` in this thread)."""
    return bool(_forced) or envflags.value("TRACEJIT_PARALLEL").lower() == "chunks"


def forced():
    """Kernels rendered in this block (by this thread) are chunk kernels where their loop
    shape allows: the first stage of a background compile (compiler/tiers.py)."""
    return _forced.setting()


# Whether parallel flat kernels are paired chunk kernels where the machine allows
# (`flat_pairs`); tests and measurements turn it off to compare with the parfor kernels.
_flat_pairs = envflags.flag("TRACEJIT_CHUNK_FLAT_PAIRS")   # (the switch: tests, A/B measurements)
_flat_machine = None


def flat_pairs() -> bool:
    """Whether a parallel flat kernel (`PAIRED` shapes) renders as a chunk kernel with its
    GIL-free pair (`ChunkSpec.pair`) rather than a parfor kernel: this process may use two
    CPUs or more, tracejit's worker pool has a second thread (sharepool.PoolPair) and BLAS's
    thread count allows two (its count as started, not as the load policy set it now:
    the choice must not change the source). A launch runs as many shares as the cores other
    processes leave (cshares.ChunkKernel: the worker pool's threads); the GIL-free pair only
    where that count is two. (Measured on two CPUs only.)

    Why: numba's OpenMP worker sleeps between kernels (threads.SPINCOUNT: it spins ~10-15 us),
    and a call's Python (20 us for the GELU forward, 50-100 us for a training step) is longer,
    so each launch waited 20-60 us for it to wake (GELU fwd 1.07x, fwd+bwd 1.10x
    the bandwidth bound, the kernels alone ~1.0x). The worker pool's thread polls a while after
    each job (workpool.SPIN, YIELDS) and takes a C share in a few us."""
    global _flat_machine
    if not _flat_pairs() or envflags.value("TRACEJIT_PARALLEL").lower() == "parfor":
        return False
    if _flat_machine is None:
        from .cpu.runtime import coreshare
        from .cpu.runtime import sharepool
        from ..threads import usable_cpus
        try:
            sharepool.pool_pair.find()
            _flat_machine = (usable_cpus() >= 2 and sharepool.pool_pair.fn is not None
                             and (coreshare.blas_ceiling() or 1) >= 2)
        except Exception:     # any doubt: parfor kernels
            _flat_machine = False
    return _flat_machine


def paired(nest) -> bool:
    """Whether `nest`'s parallel variant renders as a paired chunk kernel rather than a parfor
    kernel where `flat_pairs` holds: a flat nest, a nested map (no reduction, a rank the
    nested loops render) or a sum over every dim but the last ("column_blocks").

    Why those two nested forms: they are the Transformer step's elementwise work over its
    feed-forward GEMMs' outputs, bias + ReLU forward (2048 x 1024, written over the GEMM's
    output: plan.py `_donor`) and ReLU's gradient with the bias gradient backward, and were
    its only parfor kernels. Launched right after a GEMM, numba's OpenMP worker has gone to
    sleep (threads.SPINCOUNT) and must be woken; the worker pool's thread, still polling after
    the GEMM (which ran on it), takes a C share at once (cshares.py)."""
    if nest.flat:
        return flat_pairs()
    from .codegen_cpu import loop_form
    return _nested_pairs() and loop_form(nest, True) in PAIRED and flat_pairs()


# False: nested forms keep their parfor kernels where flat ones are paired (A/B measurements)
_nested_pairs = envflags.flag("TRACEJIT_CHUNK_NESTED_PAIRS")   # (the switch: tests, A/B measurements)
_CHUNK_BACKEND = None


def chunk_backend():
    """A CPU backend (backends.CpuBackend) that renders every parallel variant as a chunk
    kernel where the loop shape allows, whatever ``TRACEJIT_PARALLEL`` says: the backend
    of a background compile's chunk stage (compiler/tiers.py)."""
    global _CHUNK_BACKEND
    if _CHUNK_BACKEND is None:
        from .backends import CpuBackend

        class ChunkCpuBackend(CpuBackend):
            def render(self, nest, parallel: bool):
                with forced():
                    return super().render(nest, parallel)
        _CHUNK_BACKEND = ChunkCpuBackend()
    return _CHUNK_BACKEND


class ChunkSpec(KernelSpec):
    """A chunk kernel's spec: the kernel takes the nest's arguments, then (folded
    reductions only) ``partial`` (`partial_dtype`, `partial_size` long) and then
    ``chunk_t, chunk_nt`` (and ``chunk_fold`` for folded reductions)."""

    chunked = True

    def __init__(self, source, nest, form, llvm_options, partial_dtype, pair: str = ""):
        super().__init__(source, nest, True, form, llvm_options)
        self.partial_dtype = partial_dtype   # numpy dtype name, or None (no fold)
        # A flat kernel's GIL-free two-share launch (compiler/cpu/runtime/cshares.py: ``pack`` and
        # ``share_entry`` over this kernel, ``chunk_fold`` 0), or "" (other loop shapes, or an
        # argument type without a table form). A module of its own in background mode, the
        # kernel's module in sync mode (backends.CpuBackend.load), as a row kernel's pair.
        self.pair = pair
        # How the launcher sizes ``partial`` (cshares.ChunkKernel): ("fixed", n),
        # ("columns", -1): codegen_cpu.column_partial_len of the last argument (the column
        # count), or ("arg", k): the value of argument k (the first reduced dim's size).
        if form == "column_blocks":
            self.partial_size = ("columns", -1)
        elif form == "strided_full":
            self.partial_size = ("arg", nest.reduction.dims[0] - nest.rank)
        else:
            self.partial_size = ("fixed", PARTIALS)


def render(nest) -> Optional[ChunkSpec]:
    """The chunk kernel of `nest`, or None where its loop shape keeps a parfor kernel."""
    spec = render_cpu(nest, parallel=True)
    if spec.form not in FORMS:
        return None
    lines = spec.source.split("\n")
    try:
        head = next(k for k, ln in enumerate(lines) if ln.startswith("def kernel("))
    except StopIteration:
        return None
    deco = _DECO.match(lines[head - 1])
    loops = [k for k, ln in enumerate(lines) if "prange(" in ln and k > head]
    if deco is None or len(loops) != 1:
        return None
    m = _PRANGE.match(lines[loops[0]])
    if m is None:
        return None
    ind, var, count = m.groups()
    folded = spec.form in _FOLDED
    if not folded and any(_LOCAL_PARTIAL.match(ln) for ln in lines):
        # Partial results made and folded inside the kernel: a share would fold only its
        # own part (a form that changed under this rewriting): keep the parfor kernel.
        return None
    partial_dtype = None
    extra_types, extra_args = ["int64", "int64"], ["chunk_t", "chunk_nt"]
    if folded:
        found = [(k, _PARTIAL.match(ln)) for k, ln in enumerate(lines) if _PARTIAL.match(ln)]
        if len(found) != 1:
            return None
        k_partial, pm = found[0]
        partial_dtype = "bool" if pm.group(1) == "bool_" else pm.group(1)
        extra_types = [f"{NUMBA_TYPE[partial_dtype]}[::1]"] + extra_types + ["int64"]
        extra_args = ["partial"] + extra_args + ["chunk_fold"]
    # The share of this call: chunks [t*count//nt, (t+1)*count//nt); empty for t == nt
    # (the fold-only call).
    lo = f"chunk_t * {count} // chunk_nt"
    hi = f"min((chunk_t + 1) * {count} // chunk_nt, {count})"
    loop = [f"{ind}for {var} in range({lo}, {hi}):"]
    if spec.form == "map":
        # A flat map indexes with the loop variable: unsigned, so numba adds no
        # negative-index wraparound (with it LLVM vectorized this loop with gathers and
        # scatters; codegen_cpu's flat reductions do the same).
        loop = [f"{ind}for chunk_i in range({lo}, {hi}):", f"{ind}    {var} = np.uintp(chunk_i)"]
    out = lines[:loops[0]] + loop + lines[loops[0] + 1:]
    if folded:
        out.pop(k_partial)
        # The fold of the partials (the body's last lines, after codegen_cpu's FOLD_MARK
        # comment): only in the call with chunk_fold set.
        starts = [k for k, ln in enumerate(out) if ln == "    " + FOLD_MARK]
        if len(starts) != 1:
            return None
        k = starts[0]
        out = out[:k] + ["    if chunk_fold:"] + ["    " + ln if ln else ln for ln in out[k:]]
    quote, args_sig, rest = deco.groups()
    sig = f"void({args_sig}, {', '.join(extra_types)})"
    pair = ""
    if spec.form in PAIRED:
        from .cpu.runtime import cshares
        try:
            k = len(extra_types) - (3 if folded else 2)    # the chunk arguments' own: partial
            pair = cshares.source(_types(args_sig) + extra_types[:k], nest.arguments() + extra_args[:k],
                                  tail=(0,) if folded else (), fold=folded)
        except ValueError:   # an argument type without a table form: the Python launch
            pair = ""
    out[head - 1] = f"@njit({quote}{sig}{quote}, parallel=False, nogil=True, {rest}"
    out[head] = out[head].replace("):", ", " + ", ".join(extra_args) + "):", 1)
    source = "\n".join(out).replace("from numba import njit, prange\n", "from numba import njit\n")
    source = source.replace("# generated by tracejit (CPU backend)",
                            "# generated by tracejit (CPU backend, chunk kernel)", 1)
    return ChunkSpec(source, nest, spec.form, spec.llvm_options, partial_dtype, pair)


def _types(sig: str) -> list:
    """The argument types of a signature's argument list (commas inside brackets kept)."""
    out, depth, start = [], 0, 0
    for k, ch in enumerate(sig):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(sig[start:k].strip())
            start = k + 1
    return out + [sig[start:].strip()]
