"""Differential fuzzing of in-place writes through a detached alias (``h.detach()``,
``h.data``) whose other operands require grad, against PyTorch: the alias takes the
operands' gradients, the base keeps its own history, the argument's memory shows the
write; eagerly, compiled and interpreted (``tj.trace(compiler="interpret")``, whose nodes
are eager ones: their backward must read the values from before the call's write-back)."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

OPS = {
    "mul_": lambda y, u, w: y.mul_(w), "add_": lambda y, u, w: y.add_(w, alpha=2.0),
    "addcmul_": lambda y, u, w: y.addcmul_(u, w, value=0.5), "div_": lambda y, u, w: y.div_(w.abs() + 1.0),
    "lerp_": lambda y, u, w: y.lerp_(u, w), "copy_": lambda y, u, w: y.copy_(u * w),
}


def _case(r):
    base = ["arg", "leaf", "inner"][int(r.integers(3))]
    how = ["detach", "data"][int(r.integers(2))]
    ops = [sorted(OPS)[int(i)] for i in r.integers(0, len(OPS), int(r.integers(1, 3)))]
    use = int(r.integers(3))

    def fn(x, u, w):
        h = x * 1.5 if base == "inner" else x
        y = h.detach() if how == "detach" else h.data
        for op in ops:
            OPS[op](y, u, w)
        if use == 0:
            return (y * y).sum()
        if use == 1:
            return (y * 3).sum() + (h * u).sum()
        return (y * h).sum()
    return fn, base, dict(base=base, how=how, ops=ops, use=use)


def _run(lib, fn, arrays, base, wrap):
    x = lib.tensor(arrays[0], requires_grad=base != "arg")
    u, w = (lib.tensor(a, requires_grad=True) for a in arrays[1:])
    out = wrap(fn)(x, u, w)
    out.backward()
    return [out, x.detach().clone(), x.grad, u.grad, w.grad]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("mode", ["eager", "compiled", "interpreted"])
def test_random_detached_writes_match_torch(mode):
    wrap = {"eager": lambda f: f, "compiled": tj.compile,
            "interpreted": lambda f: tj.trace(f, compiler="interpret")}[mode]
    for seed in range(40 if mode == "eager" else 15):
        r = np.random.default_rng(seed)
        fn, base, info = _case(r)
        arrays = [r.standard_normal(4) for _ in range(3)]
        try:
            want = _run(torch, fn, arrays, base, lambda f: f)
        except RuntimeError:   # (a leaf's data written where PyTorch refuses)
            continue
        got = _run(tj, fn, arrays, base, wrap)
        for k, (g, t) in enumerate(zip(got, want)):
            assert (g is None) == (t is None), (seed, info, k)
            if t is not None:
                np.testing.assert_allclose(g.detach().numpy(), t.detach().numpy(), rtol=1e-9, atol=1e-12,
                                           err_msg=f"seed {seed} {info} {mode} result {k}")
