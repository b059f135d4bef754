"""A background entry's verification (jit/capture.py `_verifier`, the numba backend's
executor): its first call runs tier 0 (the interpreter over the eager ops) before the
graph is verified, and its program is built only from a verified graph; a sync entry
verifies in the capture, before it compiles. Each test's function has its own constant,
so its kernels are new to the cache and really go to a worker."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from test_tiers import WAIT_S, _args, _loss_and_grad, _step   # (the step test_tiers.py uses)

import tracejit as tj
from tracejit.compiler import workers

pytestmark = pytest.mark.usefixtures("kernels_in_session_tmp")


@pytest.fixture(autouse=True, scope="module")
def _no_workers_after():
    yield
    workers.shutdown()


def _verify_and_compile_log(monkeypatch, bad=False):
    """The captures' `verify` calls and the backend's program builds, in order; with
    `bad`, every verification fails (as a pass that broke its graph would make it)."""
    from tracejit import compiler
    from tracejit.jit import capture, ir
    log = []
    real_verify, real_compile = capture.verify, compiler.compile_graph

    def verify(g):
        log.append("verify")
        if bad:
            raise ir.VerifyError("eqn 0 (mul): a broken pass (injected)")
        real_verify(g)
    monkeypatch.setattr(capture, "verify", verify)
    monkeypatch.setattr(compiler, "compile_graph", lambda *a, **k: log.append("compile") or
                        real_compile(*a, **k))
    return log


def test_a_background_entry_verifies_its_graph_before_building_its_program(monkeypatch):
    """Tier 0 (the interpreter over the eager ops) runs before the graph is verified (0.6 ms
    of the CNN's first call); the program is built from it only after both checks."""
    log = _verify_and_compile_log(monkeypatch)
    step = _step(1.5390625)
    f = tj.trace(step, compile="background")
    x, w = _args(5)
    eager = _loss_and_grad(step, x, w)
    first = _loss_and_grad(f, x, w)
    assert log == []
    assert first[0] == pytest.approx(eager[0], rel=1e-6)
    assert tj.compiler.wait(f, timeout=WAIT_S)
    assert log == ["verify", "verify", "compile"]   # the traced graph, the optimized one
    assert f.cache_stats()["tiers"] == ["compiled"]
    sync = tj.trace(_step(1.5390625), compile="sync")
    _loss_and_grad(sync, x, w)
    assert log[3:] == ["verify", "verify", "compile"]  # sync mode: in the capture, first


@pytest.mark.parametrize("mode", ["sync", "background"])
def test_a_graph_that_fails_verification_is_never_compiled(monkeypatch, mode):
    from tracejit.jit.ir import VerifyError
    log = _verify_and_compile_log(monkeypatch, bad=True)
    step = _step({"sync": 1.3671875, "background": 1.4453125}[mode])
    f = tj.trace(step, compile=mode)
    x, w = _args(6)
    if mode == "sync":
        with pytest.raises(VerifyError, match="injected"):
            f(x, w)
        assert log == ["verify"]
        return
    eager = _loss_and_grad(step, x, w)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        first = _loss_and_grad(f, x, w)       # tier 0: the eager ops, with their own checks
        tj.compiler.wait(f, timeout=WAIT_S)
        got = _loss_and_grad(f, x, w)
    ours = [str(r.message) for r in rec if "background compile" in str(r.message)]
    assert len(ours) == 1 and "VerifyError" in ours[0] and "injected" in ours[0], ours
    assert "compile" not in log and f.cache_stats()["tiers"] == ["tier0"]
    for r in (first, got):
        assert r[0] == pytest.approx(eager[0], rel=1e-6)
        np.testing.assert_allclose(r[1], eager[1], rtol=1e-6, atol=1e-7)
