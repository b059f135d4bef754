"""The measured choice between the GEMM template's configurations and the BLAS call.

Per product key (m, n, k, dtype, layouts, batched, threads) the chooser times numpy's BLAS
product and each template configuration on operands of that shape, in turns over several
rounds (`_race`), and keeps the fastest, a configuration only under `MARGIN` of BLAS's
time. Until a key is measured it runs BLAS: always there, no compile, within a small factor
of the best everywhere. A race run while other processes keep cores busy (the thread
policy gives fewer threads than the key's) is not stored: on the cores left, one share on
one thread can beat BLAS's threads that wait for each other, a choice that would then hold
on the idle machine too.

The measurements run in one background thread, a key at a time, once the configurations'
kernels are loaded and a core is spare; in sync mode only at `settle`, never inside a
product's call. In background mode a key is measured when it comes again: its first call
runs BLAS, its site's next call asks for the measurement, so shapes that follow the data
(a mixture of experts' token counts per expert) do not queue one measurement each. A call
site binds its key once (`bind`) and is given the chosen callable again when the
measurement lands. ``TRACEJIT_GEMM_CHOICE=0`` keeps every product on BLAS.

Products of bf16 words (dtype uint16, bf16.py's ``"dot"`` way) are chosen the same way
between the words widened for BLAS (`BLAS`) and the bf16 units' kernel (`DOT`).

The choices are kept in a JSON file in the disk cache's root, named by a stamp over the
versions the kernel cache keys on, the template's source, numpy's BLAS and the rules, and
holding a sha256 of its content; another stamp's file is never read, a corrupt one is
rewritten. bf16 keys have a file of their own, stamped over the bf16 kernel's sources
instead of the template's (a change to one does not measure the other's keys again).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
import time
from collections import deque
from typing import NamedTuple

import numpy as np

from .... import envflags
from ....threads import blas_threads_set
from ...prepare import compile_mode
from . import blas_gemm, template

__all__ = ["Key", "BLAS", "DOT", "key_for", "choose", "bind", "measure", "settle", "load_kernels", "store_path",
           "bf16_store_path", "forget"]

BLAS = "blas"
DOT = "dot"          # bf16 words: bf16_pack.py's kernel
_BF16 = "uint16"     # the dtype of bf16 words' keys


class Key(NamedTuple):
    """What a choice is made for."""
    m: int
    n: int
    k: int
    dtype: str
    layout: str      # "nn", "nt", "tn", "tt": whether a, b are read along their columns
    batched: bool
    threads: int

    def text(self) -> str:
        return f"{self.m}x{self.n}x{self.k}:{self.dtype}:{self.layout}:{int(self.batched)}:{self.threads}"


def key_for(a: np.ndarray, b: np.ndarray, threads: int) -> Key:
    """The key of ``a @ b`` on `threads` threads."""
    ta = "t" if a.strides[-1] != a.itemsize and a.shape[-1] > 1 else "n"
    tb = "t" if b.strides[-1] != b.itemsize and b.shape[-1] > 1 else "n"
    return Key(a.shape[-2], b.shape[-1], a.shape[-1], a.dtype.name, ta + tb, a.ndim > 2, threads)


# choices in this process: Key -> BLAS or a template.Config
_choices: dict = {}
_loaded = False
_lock = threading.Lock()
_pending: set = set()      # keys a background measurement is due for
_watchers: dict = {}       # pending Key -> [install(choice)] of the call sites bound to it
_seen: set = set()         # keys called once, not measured yet (background mode)
_SEEN_MAX = 4096
_queue: deque = deque()    # pending keys the background thread has still to measure
_worker: list = []         # the background thread while it runs


def enabled() -> bool:
    return envflags.enabled("TRACEJIT_GEMM_CHOICE")


def _stamp() -> str:
    # (the configurations' names too: a choice made without a configuration never tried it)
    return _stamp_over([template.source(d, c) for d in ("float32", "float64") for c in template.CONFIGS[:1]]
                       + [[c.name for c in template.CONFIGS]])


def _bf16_stamp() -> str:
    from . import bf16_tile
    # (the driver's file by path: importing it imports numba, which eager float32 products avoid)
    driver = _file_digest(os.path.join(os.path.dirname(__file__), "bf16_pack.py"))
    return "bf16-" + _stamp_over([bf16_tile.ir_text(), driver])


def _file_digest(path: str) -> str:
    """The sha256 of a source file's bytes ("" where it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return ""


def _stamp_over(sources: list) -> str:
    from ... import buildfacts
    from .... import threads as _threads
    blas = sorted(os.path.basename(p) for p in _threads._mapped_libraries()
                  if "blas" in os.path.basename(p).lower() or "mkl" in os.path.basename(p).lower())
    route = _file_digest(blas_gemm.__file__)   # (the BLAS side's source too: what it measures against)
    h = hashlib.sha256(json.dumps([buildfacts.versions(), np.__version__, blas, ROUNDS, MARGIN, RULES, route,
                                   sources], sort_keys=True).encode())
    return h.hexdigest()[:24]


def store_path():
    """The file choices are kept in, or None where the disk cache is off."""
    from ... import diskcache
    root = diskcache.cache_dir()
    if root is None:
        return None
    return root / "gemm-choices" / f"{_stamp()}.json"


def bf16_store_path():
    """The file bf16 keys' choices are kept in, or None where the disk cache is off."""
    path = store_path()
    return None if path is None else path.with_name(f"{_bf16_stamp()}.json")


def _decode(value):
    if value in (BLAS, DOT):
        return BLAS if value == BLAS else DOT     # (the constants: callers compare by identity)
    if isinstance(value, list) and 4 <= len(value) <= len(template.Config._fields):
        return template.Config(int(value[0]), int(value[1]), bool(value[2]), int(value[3]),
                               *(bool(v) for v in value[4:]))
    raise ValueError(value)


def _load() -> None:
    """Read the store once per process (a missing, stale or damaged file: no choices)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    _load_file(store_path())
    _load_file(bf16_store_path())


def _stored(path) -> dict:
    """The choices kept in `path`, {} where its sha256 does not match; raises on a damaged file."""
    data = json.loads(path.read_text())
    body = json.dumps(data["choices"], sort_keys=True)
    return data["choices"] if data.get("sha256") == hashlib.sha256(body.encode()).hexdigest() else {}


def _load_file(path) -> None:
    if path is None or not path.exists():
        return
    try:
        for text, value in _stored(path).items():
            m, n, k, dt, lay, bat, thr = text.replace("x", ":", 2).split(":")
            _choices.setdefault(Key(int(m), int(n), int(k), dt, lay, bool(int(bat)), int(thr)),
                                _decode(value["choice"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return


def _save(key: Key, choice, times: dict) -> None:
    """Add one measured choice to the store (merged with what other processes wrote)."""
    path = bf16_store_path() if key.dtype == _BF16 else store_path()
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        choices = {}
        if path.exists():
            try:
                choices = _stored(path)
            except (ValueError, KeyError, TypeError):
                choices = {}
        choices[key.text()] = {"choice": choice if isinstance(choice, str) else list(choice),
                               "us": {k: round(v * 1e6, 2) for k, v in times.items()}}
        body = json.dumps(choices, sort_keys=True)
        text = json.dumps({"stamp": path.stem, "choices": choices,
                           "sha256": hashlib.sha256(body.encode()).hexdigest()}, sort_keys=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        return


def forget() -> None:
    """Drop this process's choices (the store is read again at the next choice): tests."""
    global _loaded
    with _lock:
        for held in (_choices, _pending, _watchers, _seen, _queue, _worker):
            held.clear()
        _loaded = False


def choose(key: Key):
    """BLAS or the template configuration to run products of `key` with: the measured
    choice, else BLAS (the key then waits for its measurement); BLAS when switched off."""
    if not enabled():
        return BLAS
    got = _choices.get(key)
    if got is not None:
        return got
    with _lock:
        _load()
        got = _choices.get(key)
        if got is not None:
            return got
        if key in _pending:
            return BLAS
        if compile_mode(None) == "sync":
            _pending.add(key)
            return BLAS     # (measured by `settle`: a sync-mode call never times anything)
        if key not in _seen:
            # (a first call: measured if the key comes again, `bind`)
            if len(_seen) >= _SEEN_MAX:
                _seen.clear()
            _seen.add(key)
            return BLAS
        _seen.discard(key)
        _pending.add(key)
        _queue.append(key)
        if not _worker:
            _worker.append(threading.Thread(target=_background, daemon=True, name="tracejit-gemm-choice"))
            _worker[0].start()
    return BLAS


def bind(key: Key, install):
    """``install(choice)`` for a call site's products of `key`, now with `choose`'s answer
    and again once a measurement decides the key; returns what the first call returned.
    The site then calls what it installed with no lookup (a dict lookup per product cost
    the two-layer step 5-7%)."""
    c = choose(key)
    with _lock:
        # (under the lock: a measurement that lands meanwhile installs after this one)
        if enabled():
            c = _choices.get(key, c)
        if key in _pending:
            _watchers.setdefault(key, []).append(install)
        if key in _seen and key not in _choices:
            # the key's first call: BLAS now, and the site's next call binds again (the
            # key's second sighting: `choose` queues its measurement)
            blas = install(BLAS)

            def again(*args):
                return bind(key, install)(*args)
            install(again)
            return blas
        return install(c)


def load_kernels(dtype: str = "float32") -> bool:
    """Load (compiling where the disk cache lacks it) every configuration's kernel for
    `dtype`: a benchmark's set-up, as sync mode never compiles in a call. True when all
    loaded."""
    return all([template.kernel_for(dtype, c).load_now() for c in template.CONFIGS])


def settle() -> int:
    """Measure now, in the calling thread, every key still waiting for its measurement: a
    benchmark's set-up. Returns the keys measured."""
    with _lock:
        keys = list(_pending)
    for key in keys:
        if key.dtype != _BF16:
            load_kernels(key.dtype)
        measure(key)
    return len(keys)


def _background() -> None:
    """The background thread: measures the queued keys in turn (a key still waiting after
    10 minutes, or whose measurement fails, stays on BLAS), then ends."""
    while True:
        with _lock:
            if not _queue:
                _worker.clear()
                return
            key = _queue.popleft()
        try:
            _measure_when_spare(key)
        except Exception:   # a measurement never breaks the program: BLAS stays
            pass


def _measure_when_spare(key: Key) -> None:
    from ...workers import spare_core
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and key in _pending:
        kernels = [] if key.dtype == _BF16 else [template.kernel_for(key.dtype, c) for c in template.CONFIGS]
        if all(k.fn is not None or k.failed for k in kernels):
            if spare_core():
                measure(key)
                return
        else:
            for k in kernels:
                k.get()
        time.sleep(1.0)


def _operands(key: Key):
    rng = np.random.default_rng(0)
    dt = np.dtype(key.dtype)
    lead = (2,) if key.batched else ()
    if key.dtype == _BF16:
        from ....bf16 import to_bfloat16 as cast
    else:
        def cast(x):
            return x.astype(dt)
    a = cast(rng.standard_normal(lead + ((key.k, key.m) if key.layout[0] == "t" else (key.m, key.k))))
    b = cast(rng.standard_normal(lead + ((key.n, key.k) if key.layout[1] == "t" else (key.k, key.n))))
    if key.layout[0] == "t":
        a = a.swapaxes(-1, -2)
    if key.layout[1] == "t":
        b = b.swapaxes(-1, -2)
    return a, b


def _time(fn, budget: float = 0.005) -> float:
    """Seconds per call of `fn`: one run of enough calls to fill `budget` (one round of
    `_race`)."""
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    reps = max(1, min(100, int(budget / one)))
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return min(one, (time.perf_counter() - t0) / reps)


# Rounds of `_race`, and the share of BLAS's time a configuration must come under to be
# chosen. Every candidate is timed once per round, in turn, and keeps its best round, so a
# burst of other work slows one round of every candidate, not all rounds of one. The
# margin keeps BLAS where the template wins by less than a step's own cache effects; a
# race winner must win again timed in pairs with BLAS (`_confirm`).
ROUNDS = 7
MARGIN = 0.9
RULES = ("interleaved rounds, best of each; both sides on the policy's threads per call, a one-thread key's "
         "on one; paired confirmation, a disputed race not kept; a race short of the key's threads not stored")


def _confirm(blas, fn) -> bool:
    """Whether `fn` stays under `MARGIN` of `blas`'s time timed in pairs (the median of
    `ROUNDS` ratios), so neither a burst of other work nor warm caches alone decide."""
    ratios = sorted(_time(fn, 0.002) / _time(blas, 0.002) for _ in range(ROUNDS))
    return ratios[len(ratios) // 2] < MARGIN


def _race(fns: dict) -> dict:
    """name -> best seconds per call over `ROUNDS` rounds of every callable in `fns`."""
    best = {name: float("inf") for name in fns}
    for fn in fns.values():
        fn()    # (a first call: caches, a kernel's first launch)
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            best[name] = min(best[name], _time(fn))
    return best


def _short_of_threads(key: Key) -> bool:
    """Whether the thread policy gives fewer threads than `key`'s now (other processes
    keep cores busy): a race then times its many-share candidates on fewer cores."""
    if key.threads < 2:
        return False
    from ..runtime import coreshare
    return coreshare.core_share.threads() < key.threads


def _runner(fn, cfg, a, b, threads):
    # (on the policy's threads at each call, as a call site's launch runs it: products.py;
    # a one-thread key on one thread, as a caller's blocks run it: products.product_into)
    if threads == 1:
        return lambda: template.run(fn, cfg, a, b, threads=1)
    from ..runtime import coreshare
    adapt = coreshare.adapt
    return lambda: template.run(fn, cfg, a, b, threads=adapt() or threads)


def measure(key: Key, configs=None):
    """Time BLAS and every loaded configuration on `key`'s shape and keep the fastest (a
    configuration only under `MARGIN` and confirmed in pairs), in this process and, where
    every configuration was loaded, in the store; returns it."""
    a, b = _operands(key)
    if key.dtype == _BF16:
        fns, cfgs, complete = _bf16_ways(a, b)
    else:
        fns, cfgs, complete = _configs(key, a, b, configs)
    short = _short_of_threads(key)
    with blas_threads_set(1) if key.threads == 1 else contextlib.nullcontext():
        times = _race(fns)
        best, best_t = BLAS, times[BLAS] * MARGIN
        for name, cfg in cfgs.items():
            if times[name] < best_t:
                best, best_t = cfg, times[name]
        disputed = best is not BLAS and not _confirm(fns[BLAS], fns[_name(best)])
        if disputed:
            best = BLAS
    # (other processes took cores during the race: the key's threads were not all there,
    # so a one-share configuration could beat BLAS on the cores that were; right for this
    # process while the load lasts, not for the idle machine)
    short = short or _short_of_threads(key)
    with _lock:
        _choices[key] = best
        _pending.discard(key)
        for install in _watchers.pop(key, ()):
            install(best)
    # Not kept: a choice among fewer configurations, one the race and the pairs disagree
    # on (other work on the cores during one of them: BLAS for this process), or one raced
    # while the thread policy gave fewer threads than the key's (this process keeps it): a
    # later process measures again rather than a load deciding for good.
    if complete and not disputed and not short:
        _save(key, best, times)
    return best


def _name(c) -> str:
    return c if isinstance(c, str) else c.name


def _bf16_ways(a, b):
    """(callables, choices, complete) of a bf16 words key: the words widened for BLAS and
    the bf16 units' kernel, where it gives the product (within a bf16 unit of the words')."""
    from . import bf16
    fns = {BLAS: lambda: bf16.words_matmul(a, b)}
    want = bf16.to_float32(fns[BLAS]())
    got = bf16.to_float32(bf16.dot_matmul(a, b))
    if np.allclose(got, want, rtol=2.0 ** -7, atol=1e-6 * max(1.0, float(np.abs(want).max()))):
        fns[DOT] = lambda: bf16.dot_matmul(a, b)
        return fns, {DOT: DOT}, True
    return fns, {}, False


def _configs(key: Key, a, b, configs):
    """(callables, configurations by name, complete) of a float key: BLAS and every loaded
    template configuration that gives the product."""
    # (the BLAS side as products run it: numpy's matmul on the policy's threads)
    # (a one-thread key's: numpy's matmul with BLAS on one thread, below)
    fns = {BLAS: (lambda: np.matmul(a, b)) if key.threads == 1 else lambda: blas_gemm.matmul(a, b, blas_only=True)}
    cfgs = {}
    complete = True
    want = a @ b
    for cfg in (template.CONFIGS if configs is None else configs):
        fn = template.kernel_for(key.dtype, cfg).get()
        if fn is None:
            complete = False
            continue
        got = template.run(fn, cfg, a, b, threads=key.threads)
        if got is None or not np.allclose(got, want, rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(want).max()))):
            continue
        # (each configuration on the key's threads and also as one share here: whether
        # waking a second thread pays depends on the load, so it is measured too)
        for c in (cfg, cfg._replace(serial=True)) if key.threads > 1 else (cfg,):
            fns[c.name] = _runner(fn, c, a, b, key.threads)
            cfgs[c.name] = c
    return fns, cfgs, complete
