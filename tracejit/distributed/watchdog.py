"""Waits that never hang: every wait in tracejit.distributed watches its peers.

MPI's own waits block forever when a peer stops taking part: a rank that finished its
loop early, or called ``sys.exit``, leaves the others in their next collective until
something kills them. Here every collective is started non-blocking and waited on by
`Watchdog.wait`, which polls the request and, beside it, a private control
communicator on which the ranks tell each other where they are:

* **Every operation has a number.** Each communicator tracked here (the group's, each
  DistributedDataParallel's, the join context's) counts the operations started on it;
  as MPI requires every rank to start them in the same order, operation k of a
  communicator is the same collective on every rank.
* **A rank that leaves says so.** Leaving (the end of the script, ``sys.exit``,
  ``destroy_process_group``) sends every peer an EXIT note with its counts and what it
  had done. A rank waiting in operation k of a communicator on which the leaver started
  fewer than k+1 operations knows that it will never come, and raises
  `PeerExitedError` at once, naming both sides.
* **A rank that waits long says where.** After ``grace`` seconds in one wait a rank
  sends a WAIT note (its counts and the operations it waits in), and DONE when it moves
  on. If a peer waits in an operation this rank has not started while this rank waits
  in one the peer has not started, neither can go on (all tracked communicators span
  the whole group): after the condition has held for another ``grace``, both raise
  `PeerBlockedError`.
* **Anything else ends at the timeout** (`DistTimeoutError`): a peer that is alive but
  stuck, or one that vanished without a word (a lost host).

The first error marks the group broken: later collectives raise at once, and leaving
aborts the job instead of waiting in MPI's finalize. Uncaught, the error reaches the
group's exception hook, which aborts every rank, so the job ends with the message.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Dict, List, Optional, Sequence

__all__ = ["DistError", "PeerExitedError", "PeerBlockedError", "DistTimeoutError", "ProcessFailedError",
           "Watchdog", "Op"]

_TAG_EXIT, _TAG_WAIT, _TAG_DONE, _TAG_ABORT = 11, 12, 13, 14


class DistError(RuntimeError):
    """A collective could not complete; the process group can no longer be used."""


class PeerExitedError(DistError):
    """A peer left the job (its script ended, it called sys.exit or destroy_process_group)."""


class PeerBlockedError(DistError):
    """A peer waits in another collective than this rank: the ranks' calls do not match."""


class DistTimeoutError(DistError):
    """A collective did not complete within the group's timeout."""


class ProcessFailedError(DistError):
    """A peer process died (reported by an MPI with fault tolerance, ULFM)."""

    def __init__(self, msg: str, failed: Sequence[int] = ()):
        super().__init__(msg)
        self.failed = list(failed)


class Op:
    """One started operation: its communicator's number in the group, its index there, and what it is."""

    __slots__ = ("chan", "seq", "what", "hint")

    def __init__(self, chan: int, seq: int, what: str, hint: str = ""):
        self.chan, self.seq, self.what, self.hint = chan, seq, what, hint


class _Peer:
    __slots__ = ("exit", "wait", "wait_since", "abort")

    def __init__(self):
        self.exit: Optional[dict] = None
        self.wait: Optional[dict] = None
        self.wait_since = 0.0
        self.abort: Optional[str] = None


class Watchdog:
    """Operation numbers, notes between ranks, and the watched wait of one process group."""

    def __init__(self, MPI, comm, timeout: float, grace: float = 0.25):
        self.MPI = MPI
        self.ctl = comm.Dup()          # the notes never meet a collective's messages
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.timeout = float(timeout)
        self.grace = grace
        self.started: List[int] = []   # per tracked communicator
        self.peers: Dict[int, _Peer] = {r: _Peer() for r in range(self.size) if r != self.rank}
        self.sends: list = []          # isend requests (they hold their pickled buffers)
        self.progress: Dict[str, Callable[[], str]] = {}
        self.broken: Optional[str] = None
        self.exit_reason: Optional[str] = None  # set by the launcher's bootstrap: "called sys.exit(3)"
        self._status = MPI.Status()

    # ---------------------------------------------------------------- bookkeeping
    def channel(self) -> int:
        """Track a new communicator (created collectively, so every rank gets the same number)."""
        self.started.append(0)
        return len(self.started) - 1

    def begin(self, chan: int, what: str, hint: str = "") -> Op:
        """Number the next operation on `chan` (raises at once if the group is broken or a peer left before it)."""
        if self.broken is not None:
            raise DistError(f"rank {self.rank}: the process group is unusable since an earlier error "
                            f"({self.broken}); no collective can run")
        op = Op(chan, self.started[chan], what, hint)
        self.started[chan] += 1
        if self.size > 1 and any(p.exit is not None for p in self.peers.values()):
            self._check_exits((op,))
        return op

    def doing(self) -> str:
        """What this rank has done so far, for the notes (e.g. '3 steps of DistributedDataParallel')."""
        parts = [d() for d in self.progress.values()]
        parts = [p for p in parts if p]
        return "after " + ", ".join(parts) if parts else "before any training step"

    # ---------------------------------------------------------------- notes
    def _send_all(self, tag: int, note: dict) -> None:
        for r in self.peers:
            self.sends.append(self.ctl.isend(note, dest=r, tag=tag))
        if len(self.sends) > 64:
            self.sends = [s for s in self.sends if not s.Test()]

    def _note(self, ops: Sequence[Op] = ()) -> dict:
        return {"started": list(self.started), "doing": self.doing(),
                "ops": [(o.chan, o.seq, o.what, o.hint) for o in ops]}

    def poll(self) -> None:
        """Receive every note that has arrived."""
        st = self._status
        while self.ctl.iprobe(source=self.MPI.ANY_SOURCE, tag=self.MPI.ANY_TAG, status=st):
            src, tag = st.Get_source(), st.Get_tag()
            note = self.ctl.recv(source=src, tag=tag)
            peer = self.peers[src]
            if tag == _TAG_EXIT:
                peer.exit = note
                peer.wait = None
            elif tag == _TAG_WAIT:
                peer.wait = note
                peer.wait_since = time.monotonic()
            elif tag == _TAG_DONE:
                peer.wait = None
            elif tag == _TAG_ABORT:
                peer.abort = note["msg"]

    def announce_abort(self, msg: str) -> None:
        """Tell the peers why this rank ends the job, so that each can say so before it ends."""
        if self.size > 1:
            self._send_all(_TAG_ABORT, {"msg": msg})

    # ---------------------------------------------------------------- checks
    @staticmethod
    def _count(note: dict, chan: int) -> int:
        s = note["started"]
        return s[chan] if chan < len(s) else 0

    def _check_exits(self, ops: Sequence[Op]) -> None:
        for r, peer in self.peers.items():
            if peer.abort is not None:
                self._fail(DistError(f"rank {r} ended the job while rank {self.rank} waits in "
                                     f"{ops[0].what}: {peer.abort}"))
            if peer.exit is None:
                continue
            for op in ops:
                if self._count(peer.exit, op.chan) <= op.seq:
                    self._fail(PeerExitedError(
                        f"rank {r} left the job ({peer.exit['why']}) {peer.exit['doing']}, while rank "
                        f"{self.rank} waits in {op.what}{self._hint(op)}"))

    def _check_blocked(self, ops: Sequence[Op], now: float) -> None:
        for r, peer in self.peers.items():
            w = peer.wait
            if w is None or now - peer.wait_since < self.grace:
                continue
            mine = [o for o in ops if self._count(w, o.chan) <= o.seq]
            theirs = [t for t in w["ops"] if (self.started[t[0]] if t[0] < len(self.started) else 0) <= t[1]]
            if mine and theirs:
                op = mine[0]
                hint = op.hint or theirs[0][3]
                self._fail(PeerBlockedError(
                    f"rank {r} waits in {theirs[0][2]} ({w['doing']}) while rank {self.rank} waits in "
                    f"{op.what}: each waits for a collective the other never started"
                    f"{self._hint(Op(0, 0, '', hint))}"))

    @staticmethod
    def _hint(op: Op) -> str:
        return f": {op.hint}" if op.hint else ": every rank must call the same collectives in the same order"

    def _fail(self, exc: DistError) -> None:
        self.broken = str(exc)
        raise exc

    # ---------------------------------------------------------------- the wait
    def wait(self, requests: list, ops: Sequence[Op]) -> None:
        """Wait for `requests` (the MPI requests of `ops`) to complete, or raise naming the reason."""
        MPI = self.MPI
        try:
            if MPI.Request.Testall(requests):
                return
        except MPI.Exception as exc:
            self._mpi_failed(exc, ops)
        t0 = time.monotonic()
        deadline = t0 + self.timeout
        reported = False
        spins = 0
        try:
            while True:
                if MPI.Request.Testall(requests):
                    break
                spins += 1
                if spins & 63:
                    if spins > 2048:
                        os.sched_yield()  # waiting long: leave the core to the rank we wait for
                    continue
                now = time.monotonic()
                if self.size > 1:
                    self.poll()
                    self._check_exits(ops)
                    if not reported and now - t0 > self.grace:
                        self._send_all(_TAG_WAIT, self._note(ops))
                        reported = True
                    if reported:
                        self._check_blocked(ops, now)
                if now > deadline:
                    self._timeout(ops, now - t0)
        except MPI.Exception as exc:
            self._mpi_failed(exc, ops)
        if reported:
            self._send_all(_TAG_DONE, {})

    def _timeout(self, ops: Sequence[Op], waited: float) -> None:
        op = ops[0]
        seen = []
        for r, peer in self.peers.items():
            if peer.wait is not None:
                seen.append(f"rank {r} waits in {peer.wait['ops'][0][2] if peer.wait['ops'] else 'a collective'}")
            elif self._count(peer.exit or {"started": []}, op.chan) > op.seq:
                continue
            else:
                seen.append(f"rank {r} has not reported waiting (busy, stuck, or unreachable)")
        self._fail(DistTimeoutError(
            f"rank {self.rank} waited {waited:.1f} s in {op.what}, past the group's "
            f"timeout of {self.timeout:g} s; " + "; ".join(seen) +
            " (init_process_group(timeout=...) sets the limit)"))

    def _mpi_failed(self, exc, ops: Sequence[Op]) -> None:
        MPI = self.MPI
        cls = exc.Get_error_class()
        failed_cls = {getattr(MPI, n) for n in ("ERR_PROC_FAILED", "ERR_PROC_FAILED_PENDING", "ERR_REVOKED")
                      if hasattr(MPI, n)}
        what = ops[0].what if ops else "a collective"
        from . import process_group as pg
        if cls == getattr(MPI, "ERR_IN_STATUS", None) and pg._group is not None and pg._group.fault_tolerant:
            failed_cls.add(cls)  # Testall of several requests: one of them failed (revoked or a dead peer)
        if cls in failed_cls:
            from . import ulfm
            failed = ulfm.on_failure()
            self.broken = f"rank(s) {failed} failed"
            who = (f"rank{'s' if len(failed) > 1 else ''} {', '.join(map(str, failed))} died" if failed else
                   "a peer died (a survivor that saw it revoked the group)")
            raise ProcessFailedError(
                f"rank {self.rank}: process failure while waiting in {what}: {who} "
                f"({exc.Get_error_string()}); every survivor calls tracejit.distributed.shrink() to go "
                f"on without it", failed) from None
        self._fail(DistError(f"rank {self.rank}: MPI error in {what}: {exc.Get_error_string()}"))

    # ---------------------------------------------------------------- leaving
    def leave(self, why: str) -> Optional[str]:
        """Tell the peers this rank is leaving and wait until they all have left too.

        Returns None once every peer has left, else what went wrong (the caller aborts).
        """
        if self.size == 1:
            return None
        self._send_all(_TAG_EXIT, {"started": list(self.started), "doing": self.doing(), "why": why})
        t0 = time.monotonic()
        told = set()
        while True:
            self.poll()
            waiting = [r for r, p in self.peers.items() if p.exit is None]
            if not waiting:
                break
            for r in waiting:
                if self.peers[r].abort is not None:
                    return f"left ({why}) {self.doing()}; rank {r} ended the job: {self.peers[r].abort}"
                w = self.peers[r].wait
                if w and r not in told and any(
                        (self.started[c] if c < len(self.started) else 0) <= s for c, s, _, _ in w["ops"]):
                    told.add(r)
                    import sys
                    sys.stderr.write(f"[tracejit.distributed rank {self.rank}/{self.size}] left ({why}) "
                                     f"{self.doing()} while rank {r} waits in {w['ops'][0][2]}\n")
                    sys.stderr.flush()
            if time.monotonic() - t0 > self.timeout:
                return (f"rank {self.rank} left ({why}) and waited {self.timeout:g} s for rank(s) "
                        f"{waiting} to leave too")
            time.sleep(0.002)
        self.MPI.Request.Waitall(self.sends)
        self.sends = []
        return None
