"""os.fork while tracejit's background threads are busy: the child must not inherit an
import or a lock held by a thread it does not have (compiler/forkguard.py)."""
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

# The main thread forks while another thread imports slowmod; the child imports it too and
# exits 0 once it has it whole (status 14: killed by its alarm, the import never ended).
_FORK_THEN_IMPORT = textwrap.dedent("""
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)
        import slowmod
        os._exit(0 if slowmod.DONE else 3)
    _, status = os.waitpid(pid, 0)
    print("STATUS", status, flush=True)
""")

# A thread (as tiers' submit thread importing cshares) is inside a module's import when the
# main thread forks; the child then imports that module itself. Without the guard the
# child's import waits forever for the module's import lock, owned by a thread the child
# does not have (the alarm kills it).
_IMPORT_CHILD = textwrap.dedent("""
    import builtins, os, signal, sys, threading
    import tracejit.compiler  # noqa: F401  (installs the fork guard)
    sys.path.insert(0, sys.argv[1])
    builtins.started = threading.Event()
    threading.Thread(target=lambda: __import__("slowmod"), daemon=True).start()
    assert builtins.started.wait(30)
""") + _FORK_THEN_IMPORT

_SLOWMOD = textwrap.dedent("""
    import builtins, time
    builtins.started.set()
    time.sleep(0.5)
    DONE = True
""")


def _run(code: str, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_fork_waits_for_an_import_another_thread_is_in(tmp_path):
    (tmp_path / "slowmod.py").write_text(_SLOWMOD)
    out = _run(_IMPORT_CHILD, str(tmp_path))
    assert "STATUS 0" in out, out


# A lock handed to the guard (diskcache's, tiers' planning lock) is held by another thread
# at the fork: the fork waits for it, and the lock is free afterwards in parent and child.
# The lock is registered by a thread while the main thread's fork is already waiting for
# another one (a module imported by the planning thread): the fork waits for it as well.
_LOCK_CHILD = textwrap.dedent("""
    import os, sys, threading, time
    from tracejit.compiler import forkguard
    first, second = threading.Lock(), threading.RLock()
    forkguard.hold(first, rank=0)
    order = []

    def busy():
        with first:
            time.sleep(0.3)
            forkguard.hold(second, rank=1)
            second.acquire()
        time.sleep(0.3)
        order.append("released")
        second.release()
    first_taken = threading.Event()
    t = threading.Thread(target=lambda: (first_taken.set(), busy()), daemon=True)
    t.start()
    first_taken.wait()
    time.sleep(0.05)
    pid = os.fork()
    if pid == 0:
        ok = order == ["released"] and first.acquire(False) and second.acquire(False)
        os._exit(0 if ok else 4)
    _, status = os.waitpid(pid, 0)
    t.join(5)
    print("STATUS", status, order, first.acquire(False), second.acquire(False), flush=True)
""")


def test_fork_waits_for_held_locks_and_frees_them_in_both_processes():
    out = _run(_LOCK_CHILD)
    assert "STATUS 0 ['released'] True True" in out, out


# A module whose import never ends (its body waits for good): the fork waits for it at
# most IMPORT_WAIT_S, then goes on.
_STUCK_CHILD = textwrap.dedent("""
    import builtins, os, sys, threading, time
    from tracejit.compiler import forkguard
    forkguard.IMPORT_WAIT_S = 0.5
    sys.path.insert(0, sys.argv[1])
    builtins.started, builtins.never = threading.Event(), threading.Event()
    threading.Thread(target=lambda: __import__("stuckmod"), daemon=True).start()
    assert builtins.started.wait(30)
    t = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print("STATUS", status, "WAITED", round(time.monotonic() - t, 1), flush=True)
""")


def test_fork_waits_for_a_stuck_import_only_so_long(tmp_path):
    (tmp_path / "stuckmod.py").write_text("import builtins\nbuiltins.started.set()\nbuiltins.never.wait()\n")
    out = _run(_STUCK_CHILD, str(tmp_path))
    status, waited = out.split()[1], float(out.split()[3])
    assert status == "0" and 0.4 <= waited < 60, out   # (it waited, then forked)


# A thread is inside importlib's own code at the fork guard's look (holding the import lock
# that hands out module locks, as `_get_module_lock` does; its module's lock not taken yet),
# then takes its module's lock while os.fork waits for the import lock: the guard holds the
# import lock from its look to the fork, so the fork still waits for that import.
_RACE_CHILD = textwrap.dedent("""
    import _imp, builtins, os, signal, sys, threading, time
    import importlib._bootstrap as bs
    import tracejit.compiler  # noqa: F401  (installs the fork guard)
    sys.path.insert(0, sys.argv[1])
    builtins.started = threading.Event()
    inside = threading.Event()
    _get = bs._get_module_lock

    def get(name):
        if name != "slowmod":
            return _get(name)
        _imp.acquire_lock()
        try:
            inside.set()
            time.sleep(0.3)       # the fork's guard looks now
            return _get(name)
        finally:
            _imp.release_lock()
    bs._get_module_lock = get
    threading.Thread(target=lambda: __import__("slowmod"), daemon=True).start()
    assert inside.wait(30)
""") + _FORK_THEN_IMPORT


def test_fork_waits_for_an_import_begun_while_it_waited_for_the_import_lock(tmp_path):
    (tmp_path / "slowmod.py").write_text(_SLOWMOD)
    out = _run(_RACE_CHILD, str(tmp_path))
    assert "STATUS 0" in out, out
