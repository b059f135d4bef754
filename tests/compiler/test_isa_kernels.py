"""The GELU kernels compiled for another instruction set: the same LLVM options and the
same results whichever CPU they were compiled for (llvmopts' choices must not depend on
the instruction set).

The test compiles the GELU forward and loss kernels for Haswell (AVX2, no
AVX-512) in a subprocess (``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``) and compares them
with this process's kernels, compiled for whatever CPU runs the test: it needs only a CPU
that can run Haswell code.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tracejit as tj
from bench import isa

# The features of LLVM's "haswell" CPU with AVX-512 switched off (one list, the bench's
# `--isa avx2` uses it too).
HASWELL_FEATURES = isa.HASWELL_FEATURES


pytestmark = pytest.mark.usefixtures("kernels_in_session_tmp")


def gelu(x, y, z):
    a = x * y + z
    return 0.5 * a * (1 + tj.tanh(0.79788456 * (a + 0.044715 * a ** 3)))


_N = (1 << 15) + 37                           # parallel kernels (above plan.PARALLEL_MIN), a tail


def _run_gelu():
    """(forward output, loss, dx, dy, dz, the kernels' LLVM option lines) in this process."""
    xs = [np.random.default_rng(s).standard_normal(_N).astype(np.float32) for s in range(3)]
    fwd = tj.script(gelu)
    loss = tj.script(lambda x, y, z: gelu(x, y, z).sum())
    out = fwd(*(tj.tensor(a) for a in xs)).numpy()
    ts = [tj.tensor(a, requires_grad=True) for a in xs]
    val = loss(*ts)
    val.backward()
    text = str(fwd.explain(*(tj.tensor(a) for a in xs))) + str(loss.explain(*ts))
    opts = sorted({ln for ln in text.splitlines() if ln.startswith("# compiled with LLVM options")})
    return out, float(val.item()), [t.grad.numpy() for t in ts], opts


_CHILD = """
import json, sys
import numpy as np
sys.path.insert(0, {tests!r})
from test_isa_kernels import _run_gelu, _vector_registers
out, val, grads, opts = _run_gelu()
np.savez({npz!r}, out=out, dx=grads[0], dy=grads[1], dz=grads[2])
print(json.dumps({{"loss": val, "opts": opts, "registers": _vector_registers()}}))
"""


def _vector_registers() -> list[str]:
    """The vector register kinds (xmm, ymm, zmm) in the machine code of the parallel GELU
    forward kernel, compiled in this process (the child's kernel cache starts empty)."""
    import re
    import warnings
    xs = [tj.tensor(np.ones(_N, np.float32) * (s + 1)) for s in range(3)]
    cf = tj.script(gelu)
    cf(*xs)
    kernel = cf.entries[0].executor.infer_plan().kernels[0].get(("flat", "flat", "flat"), True)
    kernel = getattr(kernel, "kernel", kernel)          # a chunk kernel's dispatcher (auto pairs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # a cached kernel shows no asm: fail
        asm = kernel.inspect_asm(kernel.signatures[0])
    return sorted(set(re.findall(r"%([xyz]mm)\d", asm)))


def _host_runs_haswell_code() -> bool:
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    import llvmlite.binding as ll
    feats = set(ll.get_host_cpu_features().flatten().split(","))
    return {"+avx2", "+fma", "+bmi2", "+f16c"} <= feats


@pytest.mark.skipif(not _host_runs_haswell_code(), reason="needs an x86-64 CPU that runs Haswell (AVX2+FMA) code")
def test_gelu_kernels_give_the_same_results_compiled_for_avx2(tmp_path):
    npz = tmp_path / "haswell.npz"
    env = dict(os.environ, NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES=HASWELL_FEATURES,
               TRACEJIT_CACHE_DIR=str(tmp_path / "kernels"), TRACEJIT_COMPILE="sync",
               PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    code = _CHILD.format(tests=os.path.dirname(__file__), npz=str(npz))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    assert child["opts"], "no parallel kernel compiled in the child"
    # compiled for Haswell, the kernels' 512-bit width preference (llvmopts.WIDE_VECTORS)
    # falls back to the widest vectors it has
    assert "ymm" in child["registers"] and "zmm" not in child["registers"], child["registers"]
    got = np.load(npz)
    out, val, grads, opts = _run_gelu()
    # the same loop shapes and options (forward: 4 vectors; loss with three gradients: 4)
    assert child["opts"] == opts == ["# compiled with LLVM options: -force-vector-interleave=4 prefer-vector-width=512 -epilogue-vectorization-minimum-VF=8"]
    # elementwise work is exact arithmetic without contraction: bitwise the same on both
    np.testing.assert_array_equal(got["out"], out)
    for name, g in zip(("dx", "dy", "dz"), grads):
        np.testing.assert_array_equal(got[name], g)
    # the sum's lanes fold in another order at another width: rounding only
    assert child["loss"] == pytest.approx(val, rel=1e-5)
