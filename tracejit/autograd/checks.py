"""``gradcheck`` / ``gradgradcheck`` (finite differences against autograd, as in
``torch.autograd``), the legacy ``Variable`` constructor and anomaly detection switches.

tracejit's engine reports a failing backward op by name already; ``detect_anomaly`` and
``set_detect_anomaly`` are accepted (and change nothing) so programs that turn them on run.
"""
from __future__ import annotations

import contextlib

import numpy as np

from ..tensor import Tensor

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError", "Variable", "detect_anomaly", "set_detect_anomaly",
           "set_multithreading_enabled", "is_anomaly_enabled"]

_ANOMALY = [False]


class GradcheckError(RuntimeError):
    """``gradcheck``'s mismatch (a RuntimeError, as PyTorch's)."""


def _flat_inputs(inputs):
    return (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)


def _numerical_jacobian(fn, inputs, i, eps):
    x = inputs[i]
    base = x.detach()._host().astype(np.float64).copy()
    outs = []
    for k in range(base.size):
        cols = []
        for sign in (1, -1):
            pert = base.copy()
            pert.reshape(-1)[k] += sign * eps
            args = list(inputs)
            args[i] = Tensor._wrap(pert.astype(x.dtype.np), x.dtype, x.device)
            if x.requires_grad:     # (gradgradcheck differentiates inside fn)
                args[i].requires_grad_()
            out = fn(*args)
            out = out if isinstance(out, (tuple, list)) else (out,)
            cols.append(np.concatenate([o.detach()._host().astype(np.float64).reshape(-1)
                                        for o in out if isinstance(o, Tensor)]))
        outs.append((cols[0] - cols[1]) / (2 * eps))
    return np.stack(outs, 0) if outs else np.zeros((0, 0))       # (n_in, n_out)


def _analytical_jacobian(fn, inputs, i):
    from . import grad as _grad
    args = [a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a for a in inputs]
    out = fn(*args)
    out = [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, Tensor)]
    rows = []
    for j, o in enumerate(out):
        for k in range(o.numel()):
            g = np.zeros(o.numel())
            g[k] = 1.0
            gt = Tensor._wrap(g.reshape(tuple(o.shape)).astype(o.dtype.np), o.dtype, o.device)
            (gi,) = _grad([o], [args[i]], [gt], retain_graph=True, allow_unused=True)
            rows.append(np.zeros(args[i].numel()) if gi is None else gi._host().astype(np.float64).reshape(-1))
    return np.stack(rows, 1) if rows else np.zeros((args[i].numel(), 0))   # (n_in, n_out)


def gradcheck(func, inputs, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True, **kwargs) -> bool:
    """Compare autograd's gradients of `func` at `inputs` with central finite differences,
    for every floating input that requires grad (use float64 inputs, as PyTorch advises)."""
    inputs = _flat_inputs(inputs)
    for i, x in enumerate(inputs):
        if not (isinstance(x, Tensor) and x.requires_grad):
            continue
        num = _numerical_jacobian(func, inputs, i, eps)
        ana = _analytical_jacobian(func, inputs, i)
        if num.shape != ana.shape or not np.allclose(ana, num, rtol=rtol, atol=atol):
            if raise_exception:
                err = np.abs(ana - num).max() if num.shape == ana.shape else float("nan")
                raise GradcheckError(f"Jacobian mismatch for output 0 with respect to input {i}: largest "
                                   f"difference {err:.3g}\nnumerical:{num}\nanalytical:{ana}")
            return False
    return True


def gradgradcheck(func, inputs, grad_outputs=None, *, eps: float = 1e-6, atol: float = 1e-5,
                  rtol: float = 1e-3, raise_exception: bool = True, **kwargs) -> bool:
    """gradcheck of the gradients themselves (second derivatives)."""
    from . import grad as _grad
    inputs = _flat_inputs(inputs)
    diff = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]

    def first(*args):
        out = func(*args)
        out = out if isinstance(out, (tuple, list)) else (out,)
        out = [o for o in out if isinstance(o, Tensor)]
        gos = grad_outputs if grad_outputs is not None else [
            Tensor._wrap(np.ones(tuple(o.shape), o.dtype.np), o.dtype, o.device) for o in out]
        gs = _grad(out, [args[i] for i in diff], list(gos), create_graph=True, allow_unused=True)
        return tuple(g for g in gs if g is not None)
    return gradcheck(first, inputs, eps=eps, atol=atol, rtol=rtol, raise_exception=raise_exception)


def Variable(data, requires_grad: bool = False, volatile: bool = False):  # noqa: N802
    """The pre-0.4 wrapper, as PyTorch keeps it: a new leaf sharing `data`'s storage
    (``data.detach()``: no gradient flows back into `data`), requiring grad if asked."""
    if not isinstance(data, Tensor):
        raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
    t = data.detach()
    return t.requires_grad_() if requires_grad else t


class detect_anomaly:  # noqa: N801
    """Context manager / decorator accepted for PyTorch programs (see the module docstring)."""

    def __init__(self, check_nan: bool = True):
        self.check_nan = check_nan

    def __enter__(self):
        self.prev = _ANOMALY[0]
        _ANOMALY[0] = True
        return self

    def __exit__(self, *exc) -> bool:
        _ANOMALY[0] = self.prev
        return False

    def __call__(self, fn):
        def wrapped(*a, **k):
            with self:
                return fn(*a, **k)
        return wrapped


class set_detect_anomaly(detect_anomaly):  # noqa: N801
    def __init__(self, mode: bool, check_nan: bool = True):
        super().__init__(check_nan)
        self.prev = _ANOMALY[0]
        _ANOMALY[0] = bool(mode)

    def __enter__(self):
        return self


def is_anomaly_enabled() -> bool:
    return _ANOMALY[0]


@contextlib.contextmanager
def set_multithreading_enabled(mode: bool):
    yield
