"""The numba backend's executors against the interface jit/backend.py declares."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler import NumbaCompiler, compile_graph
from tracejit.compiler.executor import CompiledNode
from tracejit.compiler.tiers import TieredExecutor
from tracejit.jit import backend


pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _graph(f, *args):
    cf = tj.trace(f, compiler="interpret")
    cf(*args)
    return cf.entries[0].opt_graph


def test_executors_declare_the_interface():
    assert issubclass(TieredExecutor, backend.Executor)
    assert issubclass(CompiledNode, backend.InputKeeper)
    assert isinstance(backend.get("numba"), NumbaCompiler)
    g = _graph(lambda x: x * 2.0, tj.ones(3))
    prog = compile_graph(g, name="double")
    assert isinstance(prog, backend.Executor) and prog.tier == "compiled" and prog.target == "cpu"
    assert prog.pending_kernels() == 0 and prog.describe() == "compiled kernels (sync mode)"
    fn, dtype, device = prog.fast_inference()
    out = fn(np.ones(3, np.float32))
    assert dtype is tj.float32 and device.type == "cpu"
    np.testing.assert_array_equal(out[0], np.full(3, 2.0, np.float32))
    interp = backend.executor_for("interpret", g)
    assert isinstance(interp, backend.Interpreted) and interp.tier == "interpret"
    assert interp.fast_inference() is None and interp.debug_values([tj.ones(3)]) is None
    np.testing.assert_array_equal(interp([tj.ones(3)])[0].numpy(), np.full(3, 2.0))


def test_fast_inference_is_refused_where_outputs_need_more_than_wrapping():
    x = tj.ones(2, 3)
    assert compile_graph(_graph(lambda x: x.t(), x)).fast_inference() is None        # a view of x
    assert compile_graph(_graph(lambda x: (x + 1, x * 2), x)).fast_inference() is None  # two outputs


def test_backward_differentiates_the_inputs_its_forward_did():
    """The backward uses the differentiable inputs of the call it belongs to, whichever
    training plans the program built before (it used to take the first one built)."""
    g = _graph(lambda x, y: x * y, tj.ones(3), tj.ones(3))
    prog = compile_graph(g, name="mul")
    xv = np.array([1.0, 2.0, 3.0], np.float32)
    yv = np.array([10.0, 20.0, 30.0], np.float32)
    # plans for "x requires grad" first (what fn.compile or a background compile prepares) ...
    prog.plans_for([tj.tensor(xv, requires_grad=True), tj.tensor(yv)], True)
    # ... then a call where only y requires grad
    x, y = tj.tensor(xv), tj.tensor(yv, requires_grad=True)
    (out,) = prog([x, y])
    out.backward(tj.ones(3))
    np.testing.assert_allclose(y.grad.numpy(), xv)
    assert x.grad is None


def test_a_backend_must_return_an_executor():
    class Bad(backend.Compiler):
        name = "bad-test-backend"

        def executor(self, graph, **kw):
            return lambda ins: ins

    backend.register(Bad())
    try:
        with pytest.raises(TypeError, match="not an Executor"):
            backend.executor_for("bad-test-backend", _graph(lambda x: x + 1, tj.ones(1)))
    finally:
        backend._registered.pop("bad-test-backend", None)
    with pytest.raises(TypeError):
        backend.register(object())
