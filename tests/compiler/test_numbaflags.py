"""numbaflags.lean: tracejit's kernel compiles leave out numba's cfunc wrappers, and only those."""
import threading

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from tracejit.compiler import diskcache, numbaflags  # noqa: E402


def _defined(dispatcher) -> set:
    (sig,) = dispatcher.signatures
    cres = dispatcher.overloads[sig]
    names = {f.name for f in cres.library._final_module.functions if not f.is_declaration}
    return names, cres.fndesc


SOURCE = '''
import numpy as np
from numba import njit


@njit(cache=False, error_model="numpy")
def helper(x):
    return x * np.float32(3.0) + np.float32(0.25)


@njit("void(Array(float32, 1, 'C', readonly=True), float32[::1])", cache=CACHE, error_model="numpy")
def kernel(a, out):
    for i in range(a.shape[0]):
        out[i] = helper(a[i])
'''


def test_a_loaded_kernel_has_no_cfunc_wrapper_and_computes(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    diskcache.clear_memory_cache()
    mod = diskcache.load_module(SOURCE + "# numbaflags test 1\n", name_hint="lean_test")
    names, fndesc = _defined(mod.kernel)
    assert fndesc.llvm_func_name in names
    assert fndesc.llvm_cpython_wrapper_name in names
    assert fndesc.llvm_cfunc_wrapper_name not in names
    a = np.linspace(-3, 3, 101, dtype=np.float32)
    out = np.empty_like(a)
    mod.kernel(a, out)
    np.testing.assert_array_equal(out, a * np.float32(3.0) + np.float32(0.25))
    # the helper, compiled as the kernel's callee inside the block, is callable from Python
    assert mod.helper(np.float32(2.0)) == np.float32(6.25)
    helper_names, helper_desc = _defined(mod.helper)
    assert helper_desc.llvm_cfunc_wrapper_name not in helper_names


def test_compiles_outside_the_block_or_in_another_thread_keep_their_wrapper():
    @numba.njit("float64(float64)")
    def outside(x):
        return x + 1.0

    names, fndesc = _defined(outside)
    assert fndesc.llvm_cfunc_wrapper_name in names

    other = {}

    def compile_elsewhere():
        @numba.njit("float64(float64)")
        def elsewhere(x):
            return x + 2.0
        other["d"] = elsewhere

    with numbaflags.lean():
        t = threading.Thread(target=compile_elsewhere)
        t.start()
        t.join()

        @numba.njit("float64(float64)")
        def inside(x):
            return x + 3.0
    names, fndesc = _defined(other["d"])
    assert fndesc.llvm_cfunc_wrapper_name in names
    names, fndesc = _defined(inside)
    assert fndesc.llvm_cfunc_wrapper_name not in names
    assert inside(1.0) == 4.0

    # a first-class function value (numba's use of the cfunc wrapper) still works outside
    @numba.njit
    def apply(f, x):
        return f(x)
    assert apply(outside, 1.5) == 2.5


def test_the_block_nests_and_restores():
    assert numbaflags._depth() == 0
    with numbaflags.lean():
        with numbaflags.lean():
            assert numbaflags._depth() == 2
        assert numbaflags._depth() == 1
    assert numbaflags._depth() == 0
    with pytest.raises(RuntimeError):
        with numbaflags.lean():
            raise RuntimeError("boom")
    assert numbaflags._depth() == 0
