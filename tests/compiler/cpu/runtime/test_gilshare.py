"""compiler/cpu/runtime/gilshare.py: the shorter GIL switch interval while background work runs."""
from __future__ import annotations

import sys
import threading

import pytest

from tracejit.compiler.cpu.runtime import gilshare


@pytest.fixture(autouse=True)
def _interval():
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield
    sys.setswitchinterval(before)


def test_nested_and_concurrent_blocks_restore_the_interval_after_the_last():
    with gilshare.shorter_switches():
        assert sys.getswitchinterval() == pytest.approx(gilshare.SWITCH_S)
        inside, go, done = threading.Event(), threading.Event(), threading.Event()

        def other():
            with gilshare.shorter_switches():
                inside.set()
                go.wait(10)
            done.set()
        t = threading.Thread(target=other)
        t.start()
        assert inside.wait(10)
        with gilshare.shorter_switches():
            pass
        assert sys.getswitchinterval() == pytest.approx(gilshare.SWITCH_S)
    # The other thread's block still runs: the interval stays short until it ends.
    assert sys.getswitchinterval() == pytest.approx(gilshare.SWITCH_S)
    go.set()
    assert done.wait(10)
    t.join()
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_a_value_set_meanwhile_or_already_short_is_left_alone():
    with gilshare.shorter_switches():
        sys.setswitchinterval(0.002)       # the user's own choice, made inside the block
    assert sys.getswitchinterval() == pytest.approx(0.002)
    sys.setswitchinterval(0.0001)          # already shorter than ours: untouched
    with gilshare.shorter_switches():
        assert sys.getswitchinterval() == pytest.approx(0.0001)
    assert sys.getswitchinterval() == pytest.approx(0.0001)


def test_a_forked_child_forgets_the_parents_blocks():
    with gilshare.shorter_switches():
        gilshare._after_fork_in_child()    # what os.fork's child hook runs
        assert sys.getswitchinterval() == pytest.approx(0.005)
        assert gilshare._users == 0
    assert gilshare._users == 0            # a block from before the fork ends: no underflow
    with gilshare.shorter_switches():      # and later blocks work as before
        assert sys.getswitchinterval() == pytest.approx(gilshare.SWITCH_S)
    assert sys.getswitchinterval() == pytest.approx(0.005)
