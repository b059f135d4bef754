"""Test inputs for the CUDA backend: small graphs and data for every elementwise primitive.

Shared by the simulator tests (``sim_kernels.py``, run in a subprocess) and the PTX
checks (``test_cuda_ptx.py``). Imports nothing of ``numba.cuda``: which CUDA target numba
uses is fixed when that is first imported.
"""
from __future__ import annotations

import numpy as np

import tracejit as tj
from tracejit import dtypes
from tracejit.jit.passes import optimize
from tracejit.jit.tracer import TraceContext
from tracejit.ops import registry
from tracejit.ops.registry import Aval

SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5, -0.5, 2.0, 100.0, -100.0,
                     1e-30, -3.0, 0.25, 7.5], np.float32)


def graph_of(fn, arrays):
    ctx = TraceContext()
    with ctx:
        ts = [ctx.new_input(Aval(a.shape, dtypes.as_dtype(a.dtype)), f"a{i}") for i, a in enumerate(arrays)]
        out = fn(*ts)
    outs = out if isinstance(out, tuple) else (out,)
    return optimize(ctx.graph([ctx.atom(o) for o in outs]))


def eager(fn, arrays):
    out = fn(*[tj.tensor(a) for a in arrays])
    outs = out if isinstance(out, tuple) else (out,)
    return [o.numpy() for o in outs]


# --------------------------------------------------------------------------- every elementwise op

def bind(name, **params):
    prim = registry.REGISTRY[name]
    return lambda *xs: registry.bind(prim, *xs, **params)


def floats(n=64, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32) * 3
    x[:len(SPECIALS)] = SPECIALS
    return x.reshape(8, n // 8)


def finite(x):
    return np.where(np.isfinite(x), x, 1.0).astype(x.dtype)


def bools(seed):
    return np.random.default_rng(seed).random((8, 8)) > 0.5


def ints(seed):
    return np.random.default_rng(seed).integers(-50, 50, (8, 8)).astype(np.int32)


# Ops whose inputs are not "one or two float tensors"; everything else in the registry is
# tried as unary, then binary, on float32 data with inf/nan/+-0 in it.
SPECIAL_CASES = {
    "clamp": lambda: [(bind("clamp", min=-0.5, max=0.5), [floats()])],
    "cast": lambda: [(lambda x: tj.cast(x, tj.int32), [finite(floats()).round()]),
                     (lambda x: tj.cast(x, tj.bool), [floats()]),
                     (lambda x: tj.cast(x, tj.float32), [ints(1)]),
                     (lambda x: tj.cast(x, tj.float64), [floats()])],
    "where": lambda: [(lambda c, a, b: tj.where(c, a, b), [bools(1), floats(), floats(seed=2)])],
    "logical_not": lambda: [(bind("logical_not"), [bools(1)])],
    "logical_and": lambda: [(bind("logical_and"), [bools(1), bools(2)])],
    "logical_or": lambda: [(bind("logical_or"), [bools(1), bools(2)])],
    "pow": lambda: [(bind("pow"), [np.abs(floats()), floats(seed=3)]),
                    (lambda x: x ** 2, [floats()]), (lambda x: x ** 3.0, [floats()]),
                    (lambda x: x ** -1, [floats()]), (lambda x: x ** 0.5, [floats()]),
                    (lambda x: x ** 1.5, [floats()])],
    # the gradient of a ** e (cotangent, base) for the exponents pow's cases use
    "pow_backward": lambda: [(bind("pow_backward", exponent=e), [floats(seed=1), floats()])
                             for e in (2.0, 3.0, -1.0, 0.5, 1.5)],
}
# Integer variants, for the ops that compute in integers.
INT_OPS = ("add", "sub", "mul", "maximum", "minimum", "neg", "abs", "relu", "sign", "floor",
           "eq", "ne", "lt", "le", "gt", "ge")


def _cpu_helpers(prim) -> set:
    """The CPU-only helpers `prim`'s scalar rule asks a float32 CUDA emitter for."""
    from tracejit.compiler.codegen_cuda import CudaEmitter
    for arity in (1, 2, 3):
        em = CudaEmitter("float32")
        try:
            prim.scalar(em, *"abc"[:arity])
        except TypeError:   # another arity, or parameters it needs
            continue
        except Exception:  # noqa: BLE001 - refused for float32: not a helper question
            return set()
        return em.imports
    return set()


_SCALAR = {n: p for n, p in registry.REGISTRY.items() if p.kind == "elementwise" and p.scalar is not None}
# Primitives whose rules need CPU-only helpers: the CUDA renderer refuses them by name.
CPU_ONLY = sorted(n for n, p in _SCALAR.items() if _cpu_helpers(p))
ELEMENTWISE = sorted(set(_SCALAR) - set(CPU_ONLY))


def cases(name):
    if name in SPECIAL_CASES:
        return SPECIAL_CASES[name]()
    f = bind(name)
    for arity in (1, 2):
        arrays = [floats(seed=s) for s in range(arity)]
        try:
            eager(f, arrays)
        except Exception:  # noqa: BLE001 - not this arity
            continue
        cases = [(f, arrays)]
        if name in INT_OPS:
            cases.append((f, [ints(s) for s in range(arity)]))
        return cases
    raise AssertionError(f"elementwise primitive {name!r} takes neither one nor two float tensors: "
                         f"add a case to SPECIAL_CASES in {__file__}")
