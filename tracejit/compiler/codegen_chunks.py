"""Parallel CPU kernels without numba's parfor pass: one serial ``nogil`` kernel per group
that runs a share of the chunks, launched on a few threads (cshares.py `ChunkKernel`).

Why: a ``parallel=True`` kernel costs numba 3-10x its serial twin to compile (the MLP
step's parallel variants: 25.6 of its 27.9 s in numba). The generated loops already split
their work into independent chunks, so that one ``prange`` becomes ``range`` over share
``chunk_t`` of ``chunk_nt``, the kernel compiles serial with ``nogil=True``, and the
launcher runs the shares at once.

``TRACEJIT_PARALLEL=chunks`` turns it on, ``parfor`` keeps numba's kernels, ``auto`` (the
default) uses chunk kernels where `flat_pairs` holds. The parallel variant's source is
rewritten in four places: the decorator and signature, the ``prange`` line, and for folded
reductions the ``partial`` array (one for all shares) and the fold (one ``chunk_fold``
call after every share). Chunk bounds do not depend on the thread count, so neither does
the result. Unknown loop shapes (``deep``) keep their parfor kernel.
"""
from __future__ import annotations

import re
from typing import Optional

from .. import envflags
from .codegen_cpu import FOLD_MARK, KernelSpec, render as render_cpu
from .emitter import NUMBA_TYPE

__all__ = ["enabled", "render", "ChunkSpec", "FORMS", "PAIRED",
           "flat_pairs", "paired"]

# Loop shapes (codegen_cpu.loop_form) rendered as chunk kernels; the others keep parfor.
FORMS = ("map", "nested_map", "rows", "flat_reduce", "flat_blocked_sum", "column_blocks",
         "strided_full", "windows", "row_passes")
# Partial results per chunk, then a fold: flat full reductions, column sums and full
# reductions of nested operands.
_FOLDED = ("flat_reduce", "flat_blocked_sum", "column_blocks", "strided_full")
PARTIALS = 64   # codegen_cpu's flat reductions use at most 64 chunks
# Loop shapes whose chunk kernel also gets a GIL-free pair (`ChunkSpec.pair`): `paired`.
PAIRED = ("map", "flat_reduce", "flat_blocked_sum", "nested_map", "column_blocks",
          "windows", "row_passes")

_DECO = re.compile(r"""^@njit\((["'])void\((.*)\)\1, parallel=True, (.*)$""")
_PRANGE = re.compile(r"^(\s*)for (\w+) in prange\((.+)\):$")
_PARTIAL = re.compile(r"^\s*partial = np\.empty\((?:nchunk|nrc \* d\d+|d\d+), np\.(\w+)\)$")
_LOCAL_PARTIAL = re.compile(r"^\s*partial = ")


def enabled() -> bool:
    """Whether parallel CPU kernels are chunk kernels (``TRACEJIT_PARALLEL=chunks``)."""
    return envflags.value("TRACEJIT_PARALLEL").lower() == "chunks"


# Whether parallel flat kernels are paired chunk kernels where the machine allows
# (`flat_pairs`); tests and measurements turn it off to compare with the parfor kernels.
_flat_pairs = envflags.flag("TRACEJIT_CHUNK_FLAT_PAIRS")   # (the switch: tests, A/B measurements)
_flat_machine = None


def flat_pairs() -> bool:
    """Whether a parallel flat kernel renders as a chunk kernel with its GIL-free pair
    rather than a parfor kernel: this process may use two CPUs or more, the worker pool has
    a second thread, and BLAS's starting count allows two (not the policy's count now: the
    choice must not change the source). Why: numba's OpenMP worker sleeps between kernels,
    and each launch waited 20-60 us for it to wake; the pool's thread polls after each job
    and takes a C share in a few us."""
    global _flat_machine
    if not _flat_pairs() or envflags.value("TRACEJIT_PARALLEL").lower() == "parfor":
        return False
    if _flat_machine is None:
        from .cpu.runtime import coreshare
        from .cpu.runtime import sharepool
        from ..threads import usable_cpus
        try:
            sharepool.pool_shares.find()
            _flat_machine = (usable_cpus() >= 2 and sharepool.pool_shares.fn is not None
                             and (coreshare.blas_ceiling() or 1) >= 2)
        except Exception:     # any doubt: parfor kernels
            _flat_machine = False
    return _flat_machine


def paired(nest) -> bool:
    """Whether `nest`'s parallel variant renders as a paired chunk kernel where `flat_pairs`
    holds: a flat nest, a nested map or a column sum ("column_blocks"): the elementwise work
    over GEMM outputs (bias + ReLU, its gradient with the bias gradient), launched right
    after a GEMM, when the pool's thread is still polling and numba's worker sleeps."""
    if nest.flat:
        return flat_pairs()
    from .codegen_cpu import loop_form
    return _nested_pairs() and loop_form(nest, True) in PAIRED and flat_pairs()


# False: nested forms keep their parfor kernels where flat ones are paired (A/B measurements)
_nested_pairs = envflags.flag("TRACEJIT_CHUNK_NESTED_PAIRS")   # (the switch: tests, A/B measurements)


class ChunkSpec(KernelSpec):
    """A chunk kernel's spec: the kernel takes the nest's arguments, then (folded
    reductions only) ``partial`` (`partial_dtype`, `partial_size` long) and then
    ``chunk_t, chunk_nt`` (and ``chunk_fold`` for folded reductions)."""

    chunked = True

    def __init__(self, source, nest, form, llvm_options, partial_dtype, pair: str = ""):
        super().__init__(source, nest, True, form, llvm_options)
        self.partial_dtype = partial_dtype   # numpy dtype name, or None (no fold)
        # A flat kernel's GIL-free two-share launch (cshares.py), or "" (other shapes, or
        # an argument type without a table form)
        self.pair = pair
        # How the launcher sizes ``partial``: ("fixed", n), ("columns", -1) (from the column
        # count, the last argument) or ("arg", k) (argument k's value)
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
    head = next((k for k, ln in enumerate(lines) if ln.startswith("def kernel(")), None)
    if head is None:
        return None
    deco = _DECO.match(lines[head - 1])
    loops = [k for k, ln in enumerate(lines) if "prange(" in ln and k > head]
    m = _PRANGE.match(lines[loops[0]]) if len(loops) == 1 else None
    if deco is None or m is None:
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
        # Unsigned loop index: numba's negative-index wraparound made LLVM vectorize with
        # gathers and scatters
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
            pass
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
