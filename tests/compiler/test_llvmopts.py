"""LLVM options for tracejit's kernels: chosen per kernel, applied only to our compiles,
reset afterwards, and part of the disk cache key.

The interleave count is seen in machine code: a loop whose body divides once per
element holds one vector divide per interleaved vector (x86-64 only: the assembly is
what we count).
"""
from __future__ import annotations

import platform
import re
import warnings

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler import diskcache, llvmopts
from differential import assert_compiled_matches, kernel_cache_at

x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="counts x86 instructions")


pytestmark = pytest.mark.usefixtures("kernels_in_session_tmp")


def test_kernel_options_follow_stores_and_parallelism():
    wide = ("prefer-vector-width=512",) + llvmopts.SHORT_TAILS
    tails = llvmopts.SHORT_TAILS
    assert llvmopts.kernel_options(1, True) == ("-force-vector-interleave=4",) + wide
    assert llvmopts.kernel_options(2, True) == ("-force-vector-interleave=4",) + wide
    assert llvmopts.kernel_options(3, True) == ("-force-vector-interleave=4",) + wide
    assert llvmopts.kernel_options(4, True) == ("-force-vector-interleave=2",) + wide
    assert llvmopts.kernel_options(1, False) == tails
    # column reductions keep their sums in memory: 4 whatever they store
    assert llvmopts.kernel_options(5, True, "column_blocks") == ("-force-vector-interleave=4",) + wide
    # flat full reductions too (the GELU loss: three outputs and the sum)
    assert llvmopts.kernel_options(4, True, "flat_blocked_sum") == ("-force-vector-interleave=4",) + wide
    assert llvmopts.kernel_options(4, True, "flat_reduce") == ("-force-vector-interleave=4",) + wide
    assert llvmopts.kernel_options(4, False, "flat_serial_reduce") == tails
    assert llvmopts.kernel_options(3, True, "map") == ("-force-vector-interleave=4",) + wide
    assert llvmopts.kernel_options(4, True, "map") == ("-force-vector-interleave=2",) + wide
    assert llvmopts.kernel_options(5, True, "rows") == ("-force-vector-interleave=2",) + wide
    assert llvmopts.kernel_options(5, False, "column_blocks") == tails


def test_a_short_inner_loop_keeps_one_vector_per_iteration():
    short = llvmopts.SHORT_LOOP - 1
    for form in ("nested_map", "row_passes", "column_blocks"):
        assert llvmopts.kernel_options(1, True, form, inner=short) == llvmopts.SHORT_TAILS
        assert llvmopts.kernel_options(1, True, form, inner=llvmopts.SHORT_LOOP)[0] == "-force-vector-interleave=4"
    assert llvmopts.kernel_options(1, True, "nested_map", inner=1) == llvmopts.SHORT_TAILS
    assert llvmopts.kernel_options(1, True, "nested_map", inner=0)[0] == "-force-vector-interleave=4"


def test_a_loop_needing_many_alias_checks_is_allowed_them():
    # 9 inputs, 14 outputs (an LSTM backward group): 14*13/2 + 14*9 = 217 checks > 128
    assert llvmopts._alias_checks(14, 23) == 217
    assert llvmopts._alias_checks(1, 3) == 2 and llvmopts._alias_checks(3, 0) == 0
    tails = llvmopts.SHORT_TAILS
    assert llvmopts.kernel_options(14, False, "flat", arrays=23) == tails + llvmopts.MANY_CHECKS
    assert llvmopts.kernel_options(14, True, "flat", arrays=23) == (
        ("-force-vector-interleave=2", "prefer-vector-width=512") + tails + llvmopts.MANY_CHECKS)
    # up to LLVM's default (8 outputs of 12 arrays: 28 + 32 = 60) nothing is added
    assert llvmopts.kernel_options(8, False, "flat", arrays=12) == tails
    assert llvmopts.kernel_options(14, False, "flat") == tails      # operands unknown


def test_unknown_option_is_refused_before_anything_is_set():
    with pytest.raises(ValueError, match="-no-such-option"):
        with llvmopts.applied(("-force-vector-interleave=4", "-no-such-option=1")):
            pass
    with pytest.raises(ValueError, match="no-such-attribute"):
        with llvmopts.applied(("prefer-vector-width=512", "no-such-attribute=1")):
            pass


# Enough work per element that LLVM's own cost model keeps one vector per iteration.
_DIV_LOOP = '''
from numba import njit

@njit("void(float32[::1], float32[::1], int64)", cache=CACHE, error_model="numpy")
def kernel(a, out, n):
    for i in range(n):
        x = a[i]
        y = x * x * np.float32(0.25) + x * np.float32(1.5) - np.float32(3.0)
        out[i] = (y * x + np.float32(2.0)) / (y * y + np.float32(1.0)) + y * np.float32(0.5)
'''


_WIDTH = {"xmm": 128, "ymm": 256, "zmm": 512}


def _dispatcher(kernel):
    """The numba dispatcher whose machine code runs: a plan's parallel variant is a parfor
    dispatcher, or (TRACEJIT_PARALLEL=auto on a two-CPU machine with a pthreads OpenBLAS)
    a chunk kernel whose shares run that chunk kernel's dispatcher."""
    return getattr(kernel, "kernel", kernel)


def _vector_divides(dispatcher) -> int:
    """Packed float32 divides at the widest vector width the kernel uses.

    LLVM picks the width from the CPU (xmm/ymm on AVX2, ymm or zmm on AVX-512); what the
    interleave promises is the number of vectors per loop iteration, at whatever width
    that is. Narrower divides (a remainder loop) are not counted.
    """
    with warnings.catch_warnings():
        # numba shows no real code for a kernel it loaded from a cache, only a warning:
        # an error here, so a cached kernel cannot pass for "no vector divides" (a skip)
        warnings.simplefilter("error")
        dispatcher = _dispatcher(dispatcher)
        asm = dispatcher.inspect_asm(dispatcher.signatures[0])
    regs = re.findall(r"\b(?:v?divps)\s+[^\n]*?%([xyz]mm)", asm)
    if not regs:
        return 0
    widest = max(regs, key=_WIDTH.__getitem__)
    return regs.count(widest)


def _load(tag: str, options: tuple) -> object:
    # a distinct source per call, so each load compiles
    src = f"# {tag}\nimport numpy as np\n" + _DIV_LOOP
    return diskcache.load_module(src, name_hint=tag, llvm_options=options).kernel


@x86
def test_interleave_applies_inside_the_block_only():
    plain = _load("llvmopts-plain", ())
    four = _load("llvmopts-four", ("-force-vector-interleave=4",))
    after = _load("llvmopts-after", ())   # compiled after the option was reset
    # x86-64 always has packed float divides (SSE2 at least): no vector loop is a failure
    assert _vector_divides(plain) >= 1, "the divide loop was not vectorized"
    assert _vector_divides(four) >= 4 > _vector_divides(plain)
    assert _vector_divides(after) == _vector_divides(plain)
    a = np.linspace(-3, 3, 1001, dtype=np.float32)
    o1, o2 = np.empty_like(a), np.empty_like(a)
    plain(a, o1, a.size)
    four(a, o2, a.size)
    np.testing.assert_array_equal(o1, o2)     # same arithmetic, only more of it per iteration


def _many_outputs_loop(tag: str) -> str:
    """A float64 map of 6 inputs to 14 outputs: 14*13/2 + 14*6 = 175 alias checks."""
    ins, outs = [f"a{i}" for i in range(6)], [f"o{i}" for i in range(14)]
    sig = ", ".join(["float64[::1]"] * 20)
    body = [f"        {o}[i] = a{j % 6}[i] * {j + 2}.0 + a{(j + 1) % 6}[i]" for j, o in enumerate(outs)]
    return "\n".join([f"# {tag}", "import numpy as np", "from numba import njit", "",
                      f'@njit("void({sig}, int64)", cache=CACHE, error_model="numpy")',
                      f"def kernel({', '.join(ins + outs)}, n):", "    for i in range(n):"] + body) + "\n"


def _packed_multiplies(kernel) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # a cached kernel shows no asm: fail, do not pass
        asm = kernel.inspect_asm(kernel.signatures[0])
    return len(re.findall(r"\bv?mulpd\b", asm)) + len(re.findall(r"\bvfn?m(?:add|sub)\d+pd\b", asm))


@x86
def test_many_alias_checks_let_a_many_output_loop_vectorize():
    plain = diskcache.load_module(_many_outputs_loop("checks-plain"), name_hint="checks-plain").kernel
    many = diskcache.load_module(_many_outputs_loop("checks-many"), name_hint="checks-many",
                                 llvm_options=llvmopts.MANY_CHECKS).kernel
    # x86-64 always has packed double multiplies (SSE2 at least)
    assert _packed_multiplies(plain) == 0 < _packed_multiplies(many)
    a = [np.linspace(-1, 1, 1001) + i for i in range(6)]
    o1, o2 = [np.empty(1001) for _ in range(14)], [np.empty(1001) for _ in range(14)]
    plain(*a, *o1, 1001)
    many(*a, *o2, 1001)
    for x, y in zip(o1, o2):
        np.testing.assert_array_equal(x, y)


@x86
def test_options_are_reset_when_the_compile_fails():
    bad = "from numba import njit\n\n@njit('void(float32[::1])')\ndef kernel(a):\n    a[0] = undefined_name\n"
    with pytest.raises(Exception):
        diskcache.load_module(bad, name_hint="llvmopts-bad", llvm_options=("-force-vector-interleave=4",))
    plain = _load("llvmopts-plain-2", ())
    # x86-64 always has packed float divides (SSE2 at least): no vector loop is a failure
    assert _vector_divides(plain) >= 1, "the divide loop was not vectorized"
    assert _vector_divides(plain) < 4


def _widest_divide(dispatcher) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # a cached kernel shows no asm: fail, do not pass
        asm = dispatcher.inspect_asm(dispatcher.signatures[0])
    return max((_WIDTH[r] for r in re.findall(r"\bv?divps\s+[^\n]*?%([xyz]mm)", asm)), default=0)


def _host_has_avx512() -> bool:
    """Whether the code numba emits here may use AVX-512: the features numba compiles for
    (NUMBA_CPU_FEATURES where set: bench.isa's avx2 emulation on an AVX-512 host), else the
    host's."""
    from tracejit.compiler.cpu.gemm.template import _ask_avx512
    return _ask_avx512()


@x86
def test_vector_width_attribute_applies_to_our_kernel_only(capfd):
    from numba import njit
    from numba.core import codegen
    plain = _load("llvmopts-w-plain", ())
    wide = _load("llvmopts-w-wide", ("prefer-vector-width=512",))
    assert codegen.CPUCodeLibrary.add_ir_module.__module__ == "numba.core.codegen"  # hook removed

    def user(a, out, n):                     # user code compiled afterwards: LLVM's own choice
        for i in range(n):
            out[i] = (a[i] * a[i] + np.float32(2.0)) / (a[i] + np.float32(9.0))
    user = njit("void(float32[::1], float32[::1], int64)", error_model="numpy")(user)
    assert _widest_divide(plain) >= 128, "the divide loop was not vectorized"
    if _host_has_avx512():
        assert _widest_divide(wide) == 512
    else:                                    # AVX2 and older: 512 bits is no width they have
        assert _widest_divide(wide) == _widest_divide(plain)
    assert _widest_divide(user) == _widest_divide(plain)
    assert capfd.readouterr().err == ""      # no LLVM remarks at compile
    a = np.linspace(-3, 3, 1001, dtype=np.float32)
    o1, o2 = np.empty_like(a), np.empty_like(a)
    plain(a, o1, a.size)
    wide(a, o2, a.size)
    np.testing.assert_array_equal(o1, o2)     # the same arithmetic on wider vectors


def test_options_are_part_of_the_cache_key(tmp_path):
    src = "import numpy as np\n" + _DIV_LOOP
    with kernel_cache_at(tmp_path):
        diskcache.clear_memory_cache()
        m0 = diskcache.load_module(src, name_hint="llvmopts-key")
        m4 = diskcache.load_module(src, name_hint="llvmopts-key", llvm_options=("-force-vector-interleave=4",))
        again = diskcache.load_module(src, name_hint="llvmopts-key", llvm_options=("-force-vector-interleave=4",))
        wide = diskcache.load_module(src, name_hint="llvmopts-key", llvm_options=("prefer-vector-width=512",))
    assert m0 is not m4 and again is m4 and wide not in (m0, m4)
    assert len(list((tmp_path / "kernels").glob("*/*"))) == 3


def gelu(x, y, z):
    a = x * y + z
    return 0.5 * a * (1 + tj.tanh(0.79788456 * (a + 0.044715 * a ** 3)))


@x86
def test_compiled_gelu_kernel_is_interleaved_and_matches_eager():
    n = 1 << 15                                  # above plan.PARALLEL_MIN: the parallel kernel
    xs = [tj.tensor(np.random.default_rng(s).standard_normal(n).astype(np.float32)) for s in range(3)]
    diskcache.clear_memory_cache()               # compiled here: numba shows no asm of cached code
    with kernel_cache_at(None):
        cf = assert_compiled_matches(gelu, *xs)
    src = str(cf.explain(*xs))
    assert "# compiled with LLVM options: -force-vector-interleave=4 prefer-vector-width=512" in src
    plan = cf.entries[0].executor.infer_plan()
    kernel = plan.kernels[0].get(("flat", "flat", "flat"), True)
    assert _vector_divides(kernel) >= 4


def test_many_outputs_and_a_sum_get_interleave_four():
    xs = [tj.tensor(np.random.default_rng(s).standard_normal(1 << 15).astype(np.float32), requires_grad=True)
          for s in range(3)]
    cf = assert_compiled_matches(lambda x, y, z: gelu(x, y, z).sum(), *xs)
    src = str(cf.explain(*xs))
    # the backward: dx, dy, dz and the loss in one kernel (a flat blocked sum: 4 vectors)
    assert "# compiled with LLVM options: -force-vector-interleave=4 prefer-vector-width=512" in src
    assert "-force-vector-interleave=2" not in src


def _gathers_scatters(dispatcher) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # a cached kernel shows no asm: fail, do not pass
        dispatcher = _dispatcher(dispatcher)
        asm = dispatcher.inspect_asm(dispatcher.signatures[0])
    return len(re.findall(r"\bv(?:p?gather|p?scatter)\w*", asm))


@x86
def test_loss_kernel_reads_and_writes_consecutive_elements():
    """The GELU loss's fused forward+backward loops over blocks (`range(bs, be)`). numba
    indexes arrays with a signed index as ``a[i + len if i < 0 else i]``; LLVM cannot
    prove ``bs >= 0``, and on AVX-512 it vectorizes the loop with gathers and scatters
    instead of consecutive loads and stores: 3x slower (measured, see the hwlimit note).
    An unsigned index (``np.uintp(i)``) removes the select. Until the code generator
    emits one, the test is an expected failure where the gathers appear."""
    n = 1 << 15
    xs = [tj.tensor(np.random.default_rng(s).standard_normal(n).astype(np.float32), requires_grad=True)
          for s in range(3)]
    diskcache.clear_memory_cache()
    with kernel_cache_at(None):
        cf = assert_compiled_matches(lambda x, y, z: gelu(x, y, z).sum(), *xs)
        fwd, _, _ = cf.entries[0].executor.train_plans((0, 1, 2))
        found = [(fn, k._specs[key].source) for k in fwd.kernels for key, fn in k.variants.items() if key[1]]
    assert found, "no parallel kernel in the loss's forward plan"
    for fn, src in found:
        bad = _gathers_scatters(fn)
        if bad and "np.uintp(" not in src:
            pytest.xfail(f"{bad} gather/scatter instructions: the block loop indexes with a signed int")
        assert bad == 0, src


def _divide_widths(dispatcher) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # a cached kernel shows no asm: fail, do not pass
        asm = dispatcher.inspect_asm(dispatcher.signatures[0])
    return [_WIDTH[r] for r in re.findall(r"\bv?divps\s+[^\n]*?%([xyz]mm)", asm)]


@x86
def test_short_tails_run_the_remainder_of_a_loop_in_narrower_vectors():
    plain = _load("llvmopts-tail-plain", ())
    tails = _load("llvmopts-tail-short", llvmopts.SHORT_TAILS)
    widest = max(_divide_widths(plain), default=0)
    assert widest >= 128, "the divide loop was not vectorized"
    if widest == 128:
        pytest.skip("128-bit vectors (no AVX): no narrower vector for a tail")
    # (LLVM's default remainder is scalar on most x86 targets, a narrower vector on some
    # (znver5): the option must give the narrower one either way, the main loop unchanged)
    assert min(_divide_widths(tails)) < widest == max(_divide_widths(tails))
    for n in (1, 7, 13, 1001):
        a = np.linspace(-3, 3, n, dtype=np.float32)
        o1, o2 = np.empty_like(a), np.empty_like(a)
        plain(a, o1, n)
        tails(a, o2, n)
        np.testing.assert_array_equal(o1, o2)


def _bases(x, g, b):
    """One step of a B-spline recursion: a short last dim (the knots) broadcast against x."""
    x = x.unsqueeze(-1)
    left = (x - g[:, :-2]) / (g[:, 1:-1] - g[:, :-2]) * b[..., :-1]
    right = (g[:, 2:] - x) / (g[:, 2:] - g[:, 1:-1]) * b[..., 1:]
    return (left + right).sum(-1).tanh() + (left * right).sum()


@pytest.mark.parametrize("rows, knots, transposed", [((67, 29), 15, False), ((67, 29), 15, True),
                                                     ((301, 55), 3, False)])
def test_short_inner_loops_match_the_interpreter(rows, knots, transposed):
    r = np.random.default_rng(knots)
    x = r.uniform(-1, 1, rows[::-1] if transposed else rows).astype(np.float32)
    x = tj.tensor(x).t() if transposed else tj.tensor(x)          # a non-contiguous input
    g = np.sort(r.uniform(-2, 2, (rows[1], knots)), axis=1).astype(np.float32)
    g[:, 1:] += np.float32(0.01) * np.arange(1, knots, dtype=np.float32)   # no equal knots
    b = r.uniform(0, 1, rows + (knots - 1,)).astype(np.float32)
    cf = assert_compiled_matches(_bases, x.requires_grad_(), tj.tensor(g), tj.tensor(b, requires_grad=True),
                                 rtol=1e-5, atol=1e-5)
    src = str(cf.explain(x, tj.tensor(g), tj.tensor(b, requires_grad=True)))
    # every kernel over (rows, knots - 2) runs its innermost loop one vector at a time
    assert llvmopts.SHORT_TAILS[0] in src
