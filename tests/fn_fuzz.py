"""The harness of the functional fuzzers (tests/ops/test_fuzz_losses_torch.py,
tests/ops/test_fuzz_spatial_torch.py): a case draws a call from a seeded generator and
returns (fn(lib, *tensors), input arrays, a description); `check` runs fn on PyTorch and
on tracejit, eagerly or through ``tj.compile``, and compares every output (values,
shapes, dtypes; nan where PyTorch has nan) and the gradients of a weighted sum of the
float outputs with respect to every float input. A call PyTorch refuses must be refused
by tracejit too."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj


def draw(r, lo: int, hi: int) -> int:
    return int(r.integers(lo, hi))


def pick(r, options):
    return options[int(r.integers(len(options)))]


def normal(r, *shape, dtype="float64"):
    return r.standard_normal(shape).astype(dtype)


def _flat(out):
    return tuple(x for o in out for x in _flat(o)) if isinstance(out, (tuple, list)) else (out,)


def _run(lib, fn, arrays, compiled):
    xs = [lib.tensor(a).requires_grad_(a.dtype.kind == "f") for a in arrays]
    f = tj.compile(lambda *a: fn(tj, *a)) if compiled else (lambda *a: fn(lib, *a))
    out = _flat(f(*xs))
    graded = [o for o in out if o.requires_grad]
    if graded:
        sum((o * (lib.arange(o.numel(), dtype=o.dtype).reshape(tuple(o.shape)) % 3 - 1)).sum()
            for o in graded).backward()
    return list(out) + [x.grad for x in xs]


def check(torch, case, seed: int, compiled: bool, tol: float = 1e-4) -> None:
    """One seeded call drawn by `case`, tracejit (eager or `compiled`) against PyTorch."""
    fn, arrays, info = case(np.random.default_rng(seed))
    what = f"seed {seed} {case.__name__} {info} compiled={compiled}"
    try:
        want = _run(torch, fn, arrays, False)
    except (RuntimeError, ValueError, IndexError):
        with pytest.raises((RuntimeError, ValueError, IndexError)):
            _run(tj, fn, arrays, compiled)
        return
    got = _run(tj, fn, arrays, compiled)
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        assert (g is None) == (w is None), (what, k)
        if w is None:
            continue
        g, w = g.detach().numpy(), w.detach().numpy()
        assert g.shape == w.shape and str(g.dtype) == str(w.dtype), (what, k, g.shape, w.shape, g.dtype, w.dtype)
        t = tol if w.dtype != np.float64 else 1e-9
        np.testing.assert_allclose(g, w, rtol=t, atol=t, equal_nan=True, err_msg=f"{what} result {k}")
