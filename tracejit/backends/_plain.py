"""``tracejit.backends.mkldnn`` / ``mkl`` / ``openmp`` / ``opt_einsum``: availability
questions PyTorch programs ask, answered for tracejit (no oneDNN, no MKL of its own; numba's
parallel kernels use OpenMP where it is the threading layer; einsum plans its own
contraction order, so opt_einsum's switches are kept and unused)."""
from __future__ import annotations

import types


def _module(name: str, available, **attrs) -> types.ModuleType:
    m = types.ModuleType(f"tracejit.backends.{name}", f"tracejit.backends.{name}: see backends/_plain.py")
    m.is_available = available
    for k, v in attrs.items():
        setattr(m, k, v)
    return m


mkldnn = _module("mkldnn", lambda: False, enabled=False, deterministic=False)
mkl = _module("mkl", lambda: False)
openmp = _module("openmp", lambda: True)
opt_einsum = _module("opt_einsum", lambda: False, enabled=False, strategy=None, get_opt_einsum=lambda: None)
