"""tracejit's environment switches: one table (`SWITCHES`) and the one parser that reads them.

Every ``TRACEJIT_*`` variable tracejit reads is a row of `SWITCHES`: its name, the value
that applies when it is unset, what it means, and where it is documented. Code reads a
switch only through `value`, `enabled`, `is_off`, `number` or `integer`; each of them
refuses a name that is not in the table, so a new switch cannot be read before it is
described (tests/test_envflags.py checks the reverse: every name in the source is a row,
and its row's documentation names it).

Spelling of on/off: a flag counts as *off* when its value is one of ``FALSE`` (case and
surrounding spaces ignored): ``TRACEJIT_CACHE=0``, ``TRACEJIT_LOSS_GRADS=off``,
``TRACEJIT_MALLOC_TUNING=no``. Switches are read at every use, so a test or a notebook
can flip them at any time. Imports nothing of tracejit, so any module (even one run at
``import tracejit``) can use it. `ProcessTuning` is the shape of the process-wide
settings made at ``import tracejit`` (`memory`, `threads`), each with a switch to turn it off.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

__all__ = ["FALSE", "Switch", "SWITCHES", "value", "enabled", "is_off", "flag", "number", "integer", "any_set",
           "markdown_table", "ProcessTuning"]

FALSE = ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class Switch:
    name: str
    default: str        # the value when unset ("" for a flag: off; "1": on)
    meaning: str
    documented: str     # where users read about it: a docs/guide page, or a module (internal)


_GUIDE = "docs/guide/"
SWITCHES: dict = {s.name: s for s in (
    Switch("TRACEJIT_DISABLE", "", "1: every @script/@trace function runs as plain Python (eager mode)",
           _GUIDE + "debugging.md"),
    Switch("TRACEJIT_CHECK", "", "1: run compiled and eager side by side and compare (check mode)",
           _GUIDE + "debugging.md"),
    Switch("TRACEJIT_LOG", "", "comma-separated logging topics: recompiles, graphs, guards, kernels, "
           "cache, fallback, compile, all", _GUIDE + "debugging.md"),
    Switch("TRACEJIT_COMPILE", "background", "background (run on tier 0 while workers compile) or sync "
           "(compile at the first call)", _GUIDE + "tiered-compilation.md"),
    Switch("TRACEJIT_COMPILE_WORKERS", "", "number of compile worker processes (default min(cores, 2))",
           _GUIDE + "tiered-compilation.md"),
    Switch("TRACEJIT_PARALLEL", "auto", "chunks: parallel CPU kernels are serial nogil kernels run "
           "in chunks on a few threads (no parfor pass: faster to compile); parfor: numba's parallel "
           "kernels; auto: numba's, but flat kernels are chunk kernels run in two shares on tracejit's "
           "worker pool where the process has two CPUs",
           _GUIDE + "tiered-compilation.md"),
    Switch("TRACEJIT_COMPILE_TIMEOUT", "300", "seconds a worker may spend on one kernel before it is "
           "restarted", _GUIDE + "tiered-compilation.md"),
    Switch("TRACEJIT_COMPILE_FINISH", "60", "seconds the compile workers may go on after a normal exit, "
           "finishing the kernels still compiling into the disk cache (0: killed at exit)",
           _GUIDE + "tiered-compilation.md"),
    Switch("TRACEJIT_CACHE", "1", "0: no disk kernel cache (kernels compile in every process)",
           _GUIDE + "caching.md"),
    Switch("TRACEJIT_CACHE_DIR", "", "root of the disk kernel cache (default $XDG_CACHE_HOME/tracejit "
           "or ~/.cache/tracejit)", _GUIDE + "caching.md"),
    Switch("TRACEJIT_CACHE_MAX_MB", "", "size cap of the disk cache: prune least recently used entries "
           "after writes", _GUIDE + "caching.md"),
    Switch("TRACEJIT_LOSS_GRADS", "1", "0: a loss's forward does not compute its gradients along "
           "(separate backward plan)", _GUIDE + "compiling-models.md"),
    Switch("TRACEJIT_BN_SPLIT", "1", "0: a compiled training forward keeps BatchNorm's statistics and "
           "normalization as one record (the normalization fuses with no neighbour)",
           _GUIDE + "compiling-models.md"),
    Switch("TRACEJIT_MALLOC_TUNING", "1", "0: leave glibc's malloc thresholds alone at import",
           _GUIDE + "compiling-models.md"),
    Switch("TRACEJIT_THREAD_TUNING", "1", "0: leave OpenMP's and OpenBLAS's spin-wait settings alone at import",
           _GUIDE + "compiling-models.md"),
    Switch("TRACEJIT_ADAPTIVE_THREADS", "1", "0: numba's and BLAS's thread counts stay fixed instead of "
           "following the cores other processes leave free (tracejit.compiler.cpu.runtime.coreshare)",
           _GUIDE + "compiling-models.md"),
    Switch("TRACEJIT_EAGER_KERNELS", "1", "0: large eager elementwise math runs on numpy instead of "
           "numba kernels made from the op's scalar rule (tracejit/compiler/cpu/kernels/vectorized.py)",
           _GUIDE + "eager-and-autograd.md"),
    Switch("TRACEJIT_WINDOWS", "auto", "which poolings compiled plans take as windows groups: auto "
           "(those measured at least as fast as their registered kernels), all, or none "
           "(tracejit/compiler/windows.py)",
           "tracejit/compiler/windows.py"),
    Switch("TRACEJIT_SAVE_WRITTEN", "1", "0: the backward recomputes cheap elementwise values even "
           "when the forward writes them to memory anyway (tracejit/compiler/saving.py)",
           _GUIDE + "compiling-models.md"),
    Switch("TRACEJIT_GEMM_CHOICE", "1", "0: every CPU matrix product runs on BLAS instead of the GEMM "
           "template configuration measured fastest for its shape (tracejit/compiler/cpu/gemm/choice.py)",
           _GUIDE + "compiling-models.md"),
    Switch("TRACEJIT_BF16_GEMM", "", "how bf16 products run: mkl (MKL's bf16 GEMM), dot (tracejit's "
           "AVX512-BF16 kernel), words (bf16 operands widened for sgemm inside the product) or float32 "
           "(widened in the graph); unset: mkl on an Intel CPU with AMX or AVX512-BF16 units and MKL "
           "installed, dot on another CPU with AVX512-BF16, words on one with AMX and MKL, else float32",
           _GUIDE + "mixed-precision.md"),
    # Internal: one path of the CPU backend against another, for A/B measurements and the
    # tests that hold both to the same values (each documented in the module it switches).
    Switch("TRACEJIT_SCATTER_PRODUCTS", "1", "0: an embedding's two gradients run over the tokens' "
           "rows, not the table's", "tracejit/jit/scatter_products.py"),
    Switch("TRACEJIT_BIAS_GEMM", "1", "0: a bias add, residual add or ReLU after its matmul stays a "
           "step of its own in CPU plans", "tracejit/compiler/gemm_steps.py"),
    Switch("TRACEJIT_CHUNK_FLAT_PAIRS", "1", "0: flat chunk kernels never run as GIL-free shares",
           "tracejit/compiler/codegen_chunks.py"),
    Switch("TRACEJIT_CHUNK_NESTED_PAIRS", "1", "0: nested chunk kernels never run as GIL-free shares",
           "tracejit/compiler/codegen_chunks.py"),
    Switch("TRACEJIT_POOL_THREADS", "", "N: tracejit's worker pool launches on N threads, the caller included "
           "(default: the CPUs this process may run on)", "tracejit/compiler/cpu/runtime/workpool.py"),
    Switch("TRACEJIT_CEDE", "1", "0: the split loops' extra threads keep working while our compile workers compile",
           "tracejit/compiler/cpu/runtime/coreshare.py"),
    Switch("TRACEJIT_LSTM_WEIGHT_GRAD_IN_LOOP", "1", "0: the LSTM backward's hidden weight gradient is "
           "one GEMM after its loop", "tracejit/compiler/cpu/kernels/recurrent_layers.py"),
    Switch("TRACEJIT_RESTART_COUNT", "0", "set by python -m tracejit.distributed.run in every rank: which "
           "attempt this is (0 first, then 1, 2, ... after failures)", _GUIDE + "distributed.md"),
    Switch("TRACEJIT_MAX_RESTARTS", "0", "set by python -m tracejit.distributed.run in every rank: its "
           "--max-restarts", _GUIDE + "distributed.md"),
    # Internal: set by tracejit for its own child processes, not by users.
    Switch("TRACEJIT_RUN_DIR", "", "internal: the launcher's folder where each rank notes its pid",
           "tracejit/distributed/run.py"),
    Switch("TRACEJIT_COMPILE_PARENT", "", "internal: pid of the process a compile worker serves",
           "tracejit/compiler/worker_process.py"),
    Switch("TRACEJIT_COMPILE_FINISH_DIR", "", "internal: where a compile worker finds the jobs its "
           "parent left it at exit", "tracejit/compiler/finish.py"),
    Switch("TRACEJIT_COMPILE_WORKER_FAULT", "", "tests only: crash, hang, error or corrupt injects a "
           "fault into compile workers", "tracejit/compiler/compile_worker.py"),
)}

# Switches are read on every call of a compiled function: ``os.environ.get`` of an unset
# name costs ~2.5 us, the dict behind CPython's ``os.environ`` ~0.07 us, and it is the same
# mapping ``os.environ[...] = ...`` writes to.
_DATA = getattr(os.environ, "_data", None)
_ENCODE = getattr(os.environ, "encodekey", None)
_DECODE = getattr(os.environ, "decodevalue", None)
_KEYS: dict = {}
if _DATA is not None and _ENCODE is not None and _DECODE is not None:
    try:
        _KEYS = {name: _ENCODE(name) for name in SWITCHES}
    except Exception:  # an unusual os.environ: the public interface below always works
        _DATA = None


def _known(name: str) -> str:
    """`name`, or KeyError when it is not a row of `SWITCHES`."""
    if name not in SWITCHES:
        raise KeyError(f"{name} is not a tracejit switch: add it to envflags.SWITCHES")
    return name


def _raw(name: str) -> Optional[str]:
    """The variable's value, or None when unset (the only read of the environment)."""
    key = _KEYS.get(name)
    if key is None:
        return os.environ.get(_known(name))
    raw = _DATA.get(key)
    return None if raw is None else _DECODE(raw)


def value(name: str) -> str:
    """The switch's value (stripped), or its default when unset or empty."""
    return (_raw(name) or "").strip() or SWITCHES[name].default


def enabled(name: str) -> bool:
    """Whether the flag `name` is on: its value (or default) is not one of ``FALSE``."""
    raw = _raw(name)
    return (SWITCHES[name].default if raw is None else raw).strip().lower() not in FALSE


def flag(name: str) -> Callable[[], bool]:
    """A function of no arguments giving ``enabled(name)`` now, for hot paths: one dict
    lookup while the variable is unset (the default then)."""
    default = SWITCHES[_known(name)].default.lower() not in FALSE
    key = _KEYS.get(name)
    if key is None:
        return lambda: enabled(name)
    get = _DATA.get

    def read() -> bool:
        raw = get(key)
        return default if raw is None else _DECODE(raw).strip().lower() not in FALSE
    return read


def is_off(name: str) -> bool:
    """True when the default-on flag `name` is set to a false value (unset: on)."""
    return not enabled(name)


def number(name: str) -> Optional[float]:
    """The switch as a float, or None when it is unset, empty or not a number."""
    try:
        return float(value(name))
    except ValueError:
        return None


def integer(name: str) -> Optional[int]:
    """The switch as an int > 0, or None when it is unset or not a positive integer."""
    v = value(name)
    return int(v) if v.isdigit() and int(v) > 0 else None


def any_set(*names: str) -> Callable[[], bool]:
    """A function telling whether any of the switches `names` is set at all: for hot paths,
    where it costs a dict lookup per name."""
    for name in names:
        _known(name)
    if not _KEYS:
        return lambda: any(os.environ.get(n) is not None for n in names)
    get = _DATA.get
    keys = tuple(_KEYS[n] for n in names)
    if len(keys) == 2:
        k1, k2 = keys
        return lambda: get(k1) is not None or get(k2) is not None
    return lambda: any(get(k) is not None for k in keys)


def markdown_table() -> str:
    """The whole table, internal rows included (tools/gendocs.py renders the docs' one)."""
    rows = ["| variable | default | meaning | documented in |", "|---|---|---|---|"]
    for s in SWITCHES.values():
        rows.append(f"| `{s.name}` | {('`' + s.default + '`') if s.default else 'unset'} | {s.meaning} "
                    f"| {s.documented} |")
    return "\n".join(rows)


class ProcessTuning:
    """A process-wide setting applied once: calling it runs `apply` (which returns whether
    the setting took effect) unless the switch `flag` is off or it already took effect;
    the call returns `applied`."""

    def __init__(self, flag: str, apply: Callable[[], bool], doc: str = ""):
        self.flag = _known(flag)
        self.applied = False
        self._apply = apply
        self.__doc__ = doc

    def __call__(self) -> bool:
        if not self.applied and not is_off(self.flag):
            self.applied = bool(self._apply())
        return self.applied
