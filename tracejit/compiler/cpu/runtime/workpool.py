"""tracejit's own persistent worker threads, launched without the GIL through one C-ABI door.

What: `run(n, entry, args, stride)` (a C function; `WorkPool.run_address`) calls the
``void(void*)`` `entry` on ``args + q * stride`` for q in 0..n-1: share 0 on the caller,
share q >= 1 on worker q - 1 (rows stay in one core's cache), extra shares on the caller.
A share its worker has not begun when the caller's own shares end runs on the caller: a
worker woken onto a busy core starts a time slice late (~4 ms), so a launch takes at most
about its serial time. It returns once every share ended; one native call from compiled
code or ctypes.

How: a few lines of LLVM IR compiled with llvmlite at first use. Each worker has a 64-byte
slot (generation, last finished, sleeping, stop, entry and argument); a launch bumps the
generation and wakes the worker with a futex only if it sleeps; workers poll `spin` rounds
before sleeping. A share is run by whichever of its worker and the caller first swaps the
slot's claim word from 0. A launch that finds the pool busy runs all its shares itself. OpenBLAS
runs its threaded jobs here too (threads.py `blas_on_pool`), so no second pool polls.

Size: the CPUs this process may use less the caller, or ``TRACEJIT_POOL_THREADS``. A
forked child starts threads of its own on the same code and slots, so launch addresses
stay valid.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import platform
import threading
from typing import Optional

from .... import envflags
from ....threads import usable_cpus

__all__ = ["WorkPool", "pool", "threads_allowed", "SLOT", "SPIN", "ENTRY"]

SLOT = 64            # bytes of one worker's slot (a cache line: workers share no line)
# word offsets in a slot: gen, done, sleeping, stop (int32); entry, arg (int64 at 16, 24);
# claim (int32: 0 posted, 1 taken by the worker, 2 by the caller)
_GEN, _DONE, _SLEEP, _STOP, _FN, _ARG, _CLAIM = 0, 4, 8, 12, 16, 24, 32
_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}   # SYS_futex
_WAIT, _WAKE = 128, 129          # FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE

# Pure polling rounds after a share, then polls with a yield between them for about as long
# as a step's launches are apart: a futex wake-up per launch made the mlp2 eager step 1.37x
# slower, and polling without yields takes half a core from numba's threads.
SPIN = 1 << 12
YIELDS = 1 << 14
ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_RUN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)


def threads_allowed() -> int:
    """Threads a launch uses, the caller included: ``TRACEJIT_POOL_THREADS`` where set, else
    the CPUs this process may run on."""
    forced = envflags.value("TRACEJIT_POOL_THREADS").strip()
    if forced:
        if not forced.isdigit() or int(forced) < 1:
            raise ValueError(f"TRACEJIT_POOL_THREADS={forced!r}: must be a whole number of threads, 1 or more")
        return int(forced)
    return max(1, usable_cpus())


def _ir(spin: int, yields: int, sys_futex: int) -> str:
    """The module: ``worker(slot)`` (a pthread's start routine) and ``run`` (the launch),
    over the slots array at the global ``slots`` and its length ``nslots``."""
    return f"""
declare i64 @syscall(i64, ...)
declare i32 @sched_yield()
declare i32 @pthread_create(i64*, i8*, i8* (i8*)*, i8*)
declare i32 @pthread_join(i64, i8**)
@slots = global i8* null
@nslots = global i32 0
@busy = global i32 0

define internal i32* @word(i8* %s, i64 %off) {{
  %p = getelementptr i8, i8* %s, i64 %off
  %w = bitcast i8* %p to i32*
  ret i32* %w
}}

define i8* @worker(i8* %s) {{
entry:
  %gen = call i32* @word(i8* %s, i64 {_GEN})
  %done = call i32* @word(i8* %s, i64 {_DONE})
  %sleep = call i32* @word(i8* %s, i64 {_SLEEP})
  %stop = call i32* @word(i8* %s, i64 {_STOP})
  %claim = call i32* @word(i8* %s, i64 {_CLAIM})
  %fnp8 = getelementptr i8, i8* %s, i64 {_FN}
  %fnp = bitcast i8* %fnp8 to i64*
  %argp8 = getelementptr i8, i8* %s, i64 {_ARG}
  %argp = bitcast i8* %argp8 to i64*
  br label %poll
poll:
  %seen = phi i32 [0, %entry], [%seen, %spinmore], [%seen, %slept], [%g, %ran]
  %k = phi i32 [0, %entry], [%k1, %spinmore], [0, %slept], [0, %ran]
  %g = load atomic i32, i32* %gen acquire, align 4
  %new = icmp ne i32 %g, %seen
  br i1 %new, label %work, label %idle
idle:
  %k1 = add i32 %k, 1
  %more = icmp slt i32 %k1, {spin}
  br i1 %more, label %spinmore, label %polite
polite:
  %late = icmp slt i32 %k1, {spin + yields}
  br i1 %late, label %giveup, label %nap
giveup:
  %yr = call i32 @sched_yield()
  br label %spinmore
spinmore:
  br label %poll
nap:
  store atomic i32 1, i32* %sleep seq_cst, align 4
  %g2 = load atomic i32, i32* %gen seq_cst, align 4
  %still = icmp eq i32 %g2, %seen
  br i1 %still, label %dowait, label %slept
dowait:
  %gw = bitcast i32* %gen to i8*
  %sv = zext i32 %seen to i64
  %r = call i64 (i64, ...) @syscall(i64 {sys_futex}, i8* %gw, i64 {_WAIT}, i64 %sv, i8* null)
  br label %slept
slept:
  store atomic i32 0, i32* %sleep seq_cst, align 4
  br label %poll
work:
  %st = load atomic i32, i32* %stop acquire, align 4
  %halt = icmp ne i32 %st, 0
  br i1 %halt, label %out, label %take
take:
  %cx = cmpxchg i32* %claim, i32 0, i32 1 acq_rel acquire
  %mine = extractvalue {{ i32, i1 }} %cx, 1
  br i1 %mine, label %call, label %skip
skip:
  store atomic i32 %g, i32* %done release, align 4
  br label %ran
call:
  %fn = load i64, i64* %fnp, align 8
  %arg = load i64, i64* %argp, align 8
  %f = inttoptr i64 %fn to void (i8*)*
  %a = inttoptr i64 %arg to i8*
  call void %f(i8* %a)
  store atomic i32 %g, i32* %done release, align 4
  br label %ran
ran:
  br label %poll
out:
  ret i8* null
}}

define internal void @serial(void (i8*)* %f, i8* %args, i32 %from, i32 %n, i32 %stride) {{
entry:
  br label %loop
loop:
  %q = phi i32 [%from, %entry], [%q1, %body]
  %go = icmp slt i32 %q, %n
  br i1 %go, label %body, label %out
body:
  %off = mul i32 %q, %stride
  %off64 = sext i32 %off to i64
  %a = getelementptr i8, i8* %args, i64 %off64
  call void %f(i8* %a)
  %q1 = add i32 %q, 1
  br label %loop
out:
  ret void
}}

define i32 @run(i32 %n, i8* %entryp, i8* %args, i32 %stride) {{
entry:
  %f = bitcast i8* %entryp to void (i8*)*
  %ns = load i32, i32* @nslots
  %want = sub i32 %n, 1
  %few = icmp slt i32 %want, %ns
  %nw0 = select i1 %few, i32 %want, i32 %ns
  %pos = icmp sgt i32 %nw0, 0
  br i1 %pos, label %claim, label %alone
claim:
  %cx = cmpxchg i32* @busy, i32 0, i32 1 acquire monotonic
  %got = extractvalue {{ i32, i1 }} %cx, 1
  br i1 %got, label %hand, label %alone
alone:
  call void @serial(void (i8*)* %f, i8* %args, i32 0, i32 %n, i32 %stride)
  ret i32 0
hand:
  call void @claimed(i32 %n, i32 %nw0, void (i8*)* %f, i8* %args, i32 %stride, i1 true)
  ret i32 0
}}

; shares 1 .. nw0 on the workers, share 0 and those past nw0 here; the caller holds @busy,
; released at the end
define internal void @claimed(i32 %n, i32 %nw0, void (i8*)* %f, i8* %args, i32 %stride, i1 %steal) {{
entry:
  %entryp = bitcast void (i8*)* %f to i8*
  %base = load i8*, i8** @slots
  br label %handloop
handloop:
  %w = phi i32 [0, %entry], [%w1, %handed]
  %hgo = icmp slt i32 %w, %nw0
  br i1 %hgo, label %handone, label %mine
handone:
  %w64 = sext i32 %w to i64
  %soff = mul i64 %w64, {SLOT}
  %s = getelementptr i8, i8* %base, i64 %soff
  %fnp8 = getelementptr i8, i8* %s, i64 {_FN}
  %fnp = bitcast i8* %fnp8 to i64*
  %fi = ptrtoint i8* %entryp to i64
  store i64 %fi, i64* %fnp, align 8
  %argp8 = getelementptr i8, i8* %s, i64 {_ARG}
  %argp = bitcast i8* %argp8 to i64*
  %q = add i32 %w, 1
  %aoff = mul i32 %q, %stride
  %aoff64 = sext i32 %aoff to i64
  %ai = ptrtoint i8* %args to i64
  %av = add i64 %ai, %aoff64
  store i64 %av, i64* %argp, align 8
  %hclaim = call i32* @word(i8* %s, i64 {_CLAIM})
  store atomic i32 0, i32* %hclaim release, align 4
  %gen = call i32* @word(i8* %s, i64 {_GEN})
  %g = load atomic i32, i32* %gen monotonic, align 4
  %g1 = add i32 %g, 1
  store atomic i32 %g1, i32* %gen seq_cst, align 4
  %sleep = call i32* @word(i8* %s, i64 {_SLEEP})
  %sl = load atomic i32, i32* %sleep seq_cst, align 4
  %asleep = icmp ne i32 %sl, 0
  br i1 %asleep, label %wake, label %handed
wake:
  %gw = bitcast i32* %gen to i8*
  %r = call i64 (i64, ...) @syscall(i64 {sys_futex}, i8* %gw, i64 {_WAKE}, i64 1)
  br label %handed
handed:
  %w1 = add i32 %w, 1
  br label %handloop
mine:
  call void %f(i8* %args)
  %rest = add i32 %nw0, 1
  call void @serial(void (i8*)* %f, i8* %args, i32 %rest, i32 %n, i32 %stride)
  br label %joinloop
joinloop:
  %j = phi i32 [0, %mine], [%j1, %joined]
  %jgo = icmp slt i32 %j, %nw0
  br i1 %jgo, label %joinone, label %fin
joinone:
  %j64 = sext i32 %j to i64
  %joff = mul i64 %j64, {SLOT}
  %js = getelementptr i8, i8* %base, i64 %joff
  %jgen = call i32* @word(i8* %js, i64 {_GEN})
  %jdone = call i32* @word(i8* %js, i64 {_DONE})
  %jclaim = call i32* @word(i8* %js, i64 {_CLAIM})
  %target = load atomic i32, i32* %jgen monotonic, align 4
  br i1 %steal, label %trysteal, label %wait
trysteal:
  %jcx = cmpxchg i32* %jclaim, i32 0, i32 2 acq_rel acquire
  %late = extractvalue {{ i32, i1 }} %jcx, 1
  br i1 %late, label %takeover, label %wait
takeover:
  %jq = add i32 %j, 1
  %joffa = mul i32 %jq, %stride
  %joffa64 = sext i32 %joffa to i64
  %ja = getelementptr i8, i8* %args, i64 %joffa64
  call void %f(i8* %ja)
  br label %joined
wait:
  %k = phi i32 [0, %joinone], [0, %trysteal], [%k1, %waitmore], [0, %yielded]
  %d = load atomic i32, i32* %jdone acquire, align 4
  %ok = icmp eq i32 %d, %target
  br i1 %ok, label %joined, label %notyet
notyet:
  %k1 = add i32 %k, 1
  %more = icmp slt i32 %k1, {spin}
  br i1 %more, label %waitmore, label %yield
waitmore:
  br label %wait
yield:
  %y = call i32 @sched_yield()
  br label %yielded
yielded:
  br label %wait
joined:
  %j1 = add i32 %j, 1
  br label %joinloop
fin:
  store atomic i32 0, i32* @busy release, align 4
  ret void
}}

; OpenBLAS's threads callback (openblas_set_threads_callback_function): job q of `num`
; (dojob(q, jobdata + q * elsize, data)) on worker q - 1. The jobs of one product wait for
; each other (level-3 drivers hand packed panels between threads), so every job needs a
; thread of its own at once (the caller never takes a worker's job): where the pool is held (another launch; a share calling a
; threaded product) or has too few workers, jobs 1.. run on threads made for this call.
@bjob = global i8* null
@bbase = global i8* null
@bsize = global i64 1
@bdata = global i32 0

define void @blas_share(i8* %a) {{
  %base = load i8*, i8** @bbase
  %ai = ptrtoint i8* %a to i64
  %bi = ptrtoint i8* %base to i64
  %d = sub i64 %ai, %bi
  %sz = load i64, i64* @bsize
  %q64 = udiv i64 %d, %sz
  %q = trunc i64 %q64 to i32
  %fp = load i8*, i8** @bjob
  %f = bitcast i8* %fp to void (i32, i8*, i32)*
  %dd = load i32, i32* @bdata
  call void %f(i32 %q, i8* %a, i32 %dd)
  ret void
}}

%job = type {{ i8*, i8*, i32, i32, i64 }}   ; dojob, its record, q, data, thread id

define internal i8* @spawned(i8* %jp) {{
  %j = bitcast i8* %jp to %job*
  %fpp = getelementptr %job, %job* %j, i32 0, i32 0
  %fp = load i8*, i8** %fpp
  %f = bitcast i8* %fp to void (i32, i8*, i32)*
  %ap = getelementptr %job, %job* %j, i32 0, i32 1
  %a = load i8*, i8** %ap
  %qp = getelementptr %job, %job* %j, i32 0, i32 2
  %q = load i32, i32* %qp
  %dp = getelementptr %job, %job* %j, i32 0, i32 3
  %dd = load i32, i32* %dp
  call void %f(i32 %q, i8* %a, i32 %dd)
  ret i8* null
}}

define void @blas_jobs(i32 %sync, i8* %dojob, i32 %num, i64 %elsize, i8* %jobdata, i32 %data) {{
entry:
  %ns = load i32, i32* @nslots
  %want = sub i32 %num, 1
  %fits = icmp sle i32 %want, %ns
  br i1 %fits, label %claim, label %spawn
claim:
  %cx = cmpxchg i32* @busy, i32 0, i32 1 acquire monotonic
  %got = extractvalue {{ i32, i1 }} %cx, 1
  br i1 %got, label %pool, label %spawn
pool:
  store i8* %dojob, i8** @bjob
  store i8* %jobdata, i8** @bbase
  store i64 %elsize, i64* @bsize
  store i32 %data, i32* @bdata
  %st = trunc i64 %elsize to i32
  call void @claimed(i32 %num, i32 %want, void (i8*)* @blas_share, i8* %jobdata, i32 %st, i1 false)
  ret void
spawn:
  %jobs = alloca %job, i32 %num
  br label %mk
mk:
  %q = phi i32 [0, %spawn], [%q1, %made]
  %more = icmp slt i32 %q, %num
  br i1 %more, label %mkone, label %run0
mkone:
  %jq = getelementptr %job, %job* %jobs, i32 %q
  %f0 = getelementptr %job, %job* %jq, i32 0, i32 0
  store i8* %dojob, i8** %f0
  %q64 = sext i32 %q to i64
  %off = mul i64 %q64, %elsize
  %rec = getelementptr i8, i8* %jobdata, i64 %off
  %f1 = getelementptr %job, %job* %jq, i32 0, i32 1
  store i8* %rec, i8** %f1
  %f2 = getelementptr %job, %job* %jq, i32 0, i32 2
  store i32 %q, i32* %f2
  %f3 = getelementptr %job, %job* %jq, i32 0, i32 3
  store i32 %data, i32* %f3
  %first = icmp eq i32 %q, 0
  br i1 %first, label %made, label %create
create:
  %tid = getelementptr %job, %job* %jq, i32 0, i32 4
  %jp = bitcast %job* %jq to i8*
  %rc = call i32 @pthread_create(i64* %tid, i8* null, i8* (i8*)* @spawned, i8* %jp)
  br label %made
made:
  %q1 = add i32 %q, 1
  br label %mk
run0:
  %j0 = bitcast %job* %jobs to i8*
  %r0 = call i8* @spawned(i8* %j0)
  br label %jn
jn:
  %w = phi i32 [1, %run0], [%w1, %jnone]
  %jmore = icmp slt i32 %w, %num
  br i1 %jmore, label %jnone, label %out
jnone:
  %jw = getelementptr %job, %job* %jobs, i32 %w, i32 4
  %t = load i64, i64* %jw
  %rj = call i32 @pthread_join(i64 %t, i8** null)
  %w1 = add i32 %w, 1
  br label %jn
out:
  ret void
}}
"""


class WorkPool:
    """The pool of one process (module docstring); `pool()` makes and returns it."""

    def __init__(self, threads: int, spin: int = SPIN, yields: int = YIELDS):
        from llvmlite import binding as llvm
        sys_futex = _FUTEX.get(platform.machine().lower())
        if sys_futex is None:
            raise OSError(f"workpool: no futex number known for {platform.machine()!r}")
        self.pid = os.getpid()
        self.threads = threads
        self.workers = max(0, threads - 1)
        self._slots = ctypes.create_string_buffer(SLOT * max(1, self.workers) + SLOT)
        base = (ctypes.addressof(self._slots) + SLOT - 1) // SLOT * SLOT   # line-aligned
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        libc = ctypes.CDLL(None, use_errno=True)
        for name in ("syscall", "sched_yield", "pthread_create", "pthread_join"):   # the C functions the IR calls
            llvm.add_symbol(name, ctypes.cast(getattr(libc, name), ctypes.c_void_p).value)
        mod = llvm.parse_assembly(_ir(spin, yields, sys_futex))
        mod.verify()
        tm = llvm.Target.from_default_triple().create_target_machine(opt=2)
        self._engine = llvm.create_mcjit_compiler(mod, tm)
        self._engine.finalize_object()
        self._nslots = ctypes.c_int32.from_address(self._engine.get_global_value_address("nslots"))
        self._busy = ctypes.c_int32.from_address(self._engine.get_global_value_address("busy"))
        ctypes.c_void_p.from_address(self._engine.get_global_value_address("slots")).value = base
        self._nslots.value = self.workers
        self.base = base
        self.run_address = self._engine.get_function_address("run")
        self.run = _RUN(self.run_address)
        self.blas_jobs_address = self._engine.get_function_address("blas_jobs")
        worker = self._engine.get_function_address("worker")
        # The workers run this code until the process ends: the engine is never disposed
        # (at interpreter teardown its finalizer would free the code under them, and it
        # imports, which blocks for good when a daemon thread died holding an import lock).
        self._engine.detach()
        create = libc.pthread_create
        create.argtypes = [ctypes.POINTER(ctypes.c_ulong), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self._join = libc.pthread_join
        self._join.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
        self._worker = worker
        self._create = create
        self._ids = []
        self._start()

    def _start(self) -> None:
        """Zero the slots and start one thread per slot."""
        ctypes.memset(self.base, 0, SLOT * self.workers)
        for w in range(self.workers):
            tid = ctypes.c_ulong()
            if self._create(ctypes.byref(tid), None, ctypes.c_void_p(self._worker),
                            ctypes.c_void_p(self.base + w * SLOT)) != 0:
                self.close()
                raise OSError(ctypes.get_errno(), "workpool: pthread_create failed")
            self._ids.append(tid.value)
        self._nslots.value = len(self._ids)

    def restart_in_child(self) -> None:
        """After fork: the parent's threads are gone from this process; start ours on the
        same code (addresses handed out before the fork stay valid) and slots."""
        self.pid = os.getpid()
        self._ids = []
        self._busy.value = 0
        self._start()

    def close(self) -> None:
        """Stop and join the workers (at exit). The slots stay, so a late launch runs alone."""
        if self.pid != os.getpid():
            return    # a forked child's copy: its parent's threads are not ours
        libc = ctypes.CDLL(None)
        for w, tid in enumerate(self._ids):
            s = self.base + w * SLOT
            ctypes.c_int32.from_address(s + _STOP).value = 1
            gen = ctypes.c_int32.from_address(s + _GEN)
            gen.value = gen.value + 1
            libc.syscall(ctypes.c_long(_FUTEX[platform.machine().lower()]), ctypes.c_void_p(s + _GEN),
                         ctypes.c_long(_WAKE), ctypes.c_long(1))
            self._join(tid, None)
        self._ids = []
        self._nslots.value = 0


_lock = threading.Lock()
_pool: Optional[WorkPool] = None


def pool() -> WorkPool:
    """This process's pool, started at the first call (again in a forked child)."""
    global _pool
    p = _pool
    if p is not None and p.pid == os.getpid():
        return p
    with _lock:
        if _pool is None or _pool.pid != os.getpid():
            _pool = WorkPool(threads_allowed())
            atexit.register(_close)
        return _pool


def _close() -> None:
    if _pool is not None:
        _pool.close()


def _restart_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    if _pool is not None:
        _pool.restart_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_restart_in_child)
