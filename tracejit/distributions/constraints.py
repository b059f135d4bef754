"""Constraints on parameters and values (``torch.distributions.constraints``): each has
``check(value) -> bool tensor`` and ``holds(value) -> bool``, whether all of `value`
satisfies it (argument validation's question)."""
from __future__ import annotations

import numpy as np

from ..dtypes import _BY_NP

__all__ = ["Constraint", "real", "positive", "nonnegative", "unit_interval", "simplex", "boolean",
           "nonnegative_integer", "positive_definite", "real_vector", "interval", "half_open_interval",
           "integer_interval", "greater_than", "independent", "lower_cholesky", "corr_cholesky",
           "greater_than_eq", "less_than", "positive_integer", "one_hot", "square", "symmetric",
           "positive_semidefinite", "lower_triangular", "dependent", "dependent_property", "is_dependent", "cat",
           "stack", "multinomial"]


class Constraint:
    is_discrete = False
    event_dim = 0

    def check(self, value):
        raise NotImplementedError

    def holds(self, value) -> bool:
        """Whether every element of the tensor `value` satisfies the constraint. An eager
        CPU tensor of a numpy dtype is judged on its array in one fused numpy pass
        (`_verdict`: no tensor ops, no autograd nodes; a policy step validates its
        distributions' parameters and samples some 150 times); anything else, or a
        subclass with a `check` of its own, by ``check(value).all()``."""
        a = getattr(value, "_data", None)
        # (not bf16, whose array holds its words: `value.dtype` names the values' type)
        if type(a) is np.ndarray and a.dtype.kind in "biuf" and value.dtype is _BY_NP.get(a.dtype):
            verdict = _verdicts.get(type(self))
            if verdict is None:
                verdict = _verdicts[type(self)] = _own_verdict(type(self))
            if verdict is not False:
                got = verdict(self, a)
                if got is not None:
                    return bool(got)
        return bool(self.check(value).all())

    # (self, array) -> bool: `holds` on a numpy array, or None where it cannot say (bounds
    # that are tensors: elementwise, broadcast)
    _verdict = None

    def __repr__(self) -> str:
        return type(self).__name__.lstrip("_") + "()"


_verdicts: dict = {}   # constraint class -> its `_verdict`, or False (`_own_verdict`)


def _own_verdict(cls):
    """`cls._verdict` when the class that defines it also defines the `check` in force (a
    subclass that redefines `check` alone is judged by its `check`), else False."""
    def owner(name):
        return next((k for k in cls.__mro__ if name in k.__dict__), None)
    v = cls._verdict
    return v if v is not None and owner("_verdict") is owner("check") else False


def _no_nan(a) -> bool:
    return a.dtype.kind != "f" or not np.isnan(a).any()


_BOUNDS = (int, float, type(None))


def _within(a, lo, hi):
    """lo <= a <= hi everywhere (None: no bound; NaN is outside: min and max carry it), or
    None for a bound that is not a number."""
    if type(lo) not in _BOUNDS or type(hi) not in _BOUNDS:
        return None
    if not a.size:
        return True
    return (lo is None or bool(a.min() >= lo)) and (hi is None or bool(a.max() <= hi))


def _whole(a) -> bool:
    return a.dtype.kind != "f" or not np.mod(a, 1).any()


class _Real(Constraint):
    def check(self, value):
        return value == value            # not NaN

    def _verdict(self, a):
        return _no_nan(a)


class _GreaterThan(Constraint):
    def __init__(self, lower_bound, strict: bool = True):
        self.lower_bound, self.strict = lower_bound, strict

    def check(self, value):
        return value > self.lower_bound if self.strict else value >= self.lower_bound

    def _verdict(self, a):
        if not self.strict:
            return _within(a, self.lower_bound, None)
        if type(self.lower_bound) not in _BOUNDS:
            return None
        return not a.size or bool(a.min() > self.lower_bound)


class _Interval(Constraint):
    def __init__(self, lower_bound, upper_bound, half_open: bool = False):
        self.lower_bound, self.upper_bound, self.half_open = lower_bound, upper_bound, half_open

    def check(self, value):
        upper = value < self.upper_bound if self.half_open else value <= self.upper_bound
        return (value >= self.lower_bound) & upper

    def _verdict(self, a):
        w = _within(a, self.lower_bound, self.upper_bound)
        if not w:
            return w
        return not self.half_open or not a.size or bool(a.max() < self.upper_bound)


class _IntegerInterval(Constraint):
    is_discrete = True

    def __init__(self, lower_bound, upper_bound):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        return (value % 1 == 0) & (value >= self.lower_bound) & (value <= self.upper_bound)

    def _verdict(self, a):
        w = _within(a, self.lower_bound, self.upper_bound)
        return w if not w else _whole(a)


class _IntegerGreaterThan(Constraint):
    """Whole numbers >= `lower_bound` (nonnegative_integer: 0, positive_integer: 1)."""
    is_discrete = True

    def __init__(self, lower_bound=0):
        self.lower_bound = lower_bound

    def check(self, value):
        return (value % 1 == 0) & (value >= self.lower_bound)

    def _verdict(self, a):
        return _within(a, self.lower_bound, None) and _whole(a)


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value):
        return (value == 0) | (value == 1)

    def _verdict(self, a):
        return a.dtype.kind == "b" or bool(((a == 0) | (a == 1)).all())


class _Simplex(Constraint):
    event_dim = 1

    def check(self, value):
        return (value >= 0).all(-1) & ((value.sum(-1) - 1).abs() < 1e-6)

    def _verdict(self, a):
        if a.ndim == 0 or not a.size:
            return bool(self.check(_tensor(a)).all())
        return _within(a, 0, None) and bool((np.abs(a.sum(-1) - 1) < 1e-6).all())


class _RealVector(Constraint):
    event_dim = 1

    def check(self, value):
        return (value == value).all(-1)

    def _verdict(self, a):
        return _no_nan(a)


class _PositiveDefinite(Constraint):
    event_dim = 2

    def check(self, value):
        a = value.detach().numpy()
        sym = np.isclose(a, np.swapaxes(a, -1, -2), atol=1e-6).all((-2, -1))
        with np.errstate(invalid="ignore"):
            ok = sym & (np.linalg.eigvalsh(np.where(sym[..., None, None], a, 0)).min(-1) > 0)
        return _tensor(ok)


class _LowerTriangular(Constraint):
    event_dim = 2

    def check(self, value):
        from ..ops.tensorfns import tril
        return (tril(value) == value).all(-1).all(-1)


class _LowerCholesky(_LowerTriangular):
    """Lower-triangular square matrices with a positive diagonal."""

    def check(self, value):
        return super().check(value) & (value.diagonal(0, -2, -1) > 0).all(-1)


class _CorrCholesky(_LowerCholesky):
    """Cholesky factors of correlation matrices: lower Cholesky with rows of unit length."""

    def check(self, value):
        import numpy as np
        tol = float(np.finfo(value.dtype.np).eps) * value.shape[-1] * 10
        row_norm = (value.detach() ** 2).sum(-1).sqrt()
        return super().check(value) & ((row_norm - 1.0).abs() <= tol).all(-1)


class _Independent(Constraint):
    def __init__(self, base, reinterpreted_batch_ndims: int):
        self.base, self.reinterpreted_batch_ndims = base, reinterpreted_batch_ndims
        self.event_dim = base.event_dim + reinterpreted_batch_ndims

    def check(self, value):
        r = self.base.check(value)
        for _ in range(self.reinterpreted_batch_ndims):
            r = r.all(-1)
        return r

    def holds(self, value) -> bool:
        if type(self).check is _Independent.check:   # (all of the base's verdicts)
            return self.base.holds(value)
        return super().holds(value)


class _LessThan(Constraint):
    def __init__(self, upper_bound):
        self.upper_bound = upper_bound

    def check(self, value):
        return value < self.upper_bound


class _OneHot(Constraint):
    is_discrete = True
    event_dim = 1

    def check(self, value):
        return ((value == 0) | (value == 1)).all(-1) & (value.sum(-1) == 1)


class _Multinomial(Constraint):
    """Nonnegative counts summing to at most `upper_bound`."""
    is_discrete = True
    event_dim = 1

    def __init__(self, upper_bound):
        self.upper_bound = upper_bound

    def check(self, value):
        return (value >= 0).all(-1) & (value.sum(-1) <= self.upper_bound)


class _Square(Constraint):
    event_dim = 2

    def check(self, value):
        return _tensor(np.full(tuple(value.shape[:-2]), value.shape[-2] == value.shape[-1]))


class _Symmetric(_Square):
    def check(self, value):
        ok = super().check(value)
        if not ok.all():
            return ok
        from ..ops import isclose
        return isclose(value, value.transpose(-2, -1), atol=1e-6).all(-2).all(-1)


class _PositiveSemidefinite(_Symmetric):
    def check(self, value):
        ok = super().check(value)
        if not ok.all():
            return ok
        return _tensor(np.linalg.eigvalsh(value.detach().numpy()).min(-1) >= 0.0)


class _Dependent(Constraint):
    """A constraint that depends on other values (a bound that is a parameter): it cannot
    be checked alone."""

    def __init__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        self._is_discrete, self._event_dim = is_discrete, event_dim

    def _static(name):
        def get(self):
            value = getattr(self, "_" + name)
            if value is NotImplemented:
                raise NotImplementedError(f".{name} cannot be determined statically")
            return value
        return property(get)

    is_discrete, event_dim = _static("is_discrete"), _static("event_dim")
    del _static

    def __call__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented) -> "_Dependent":
        return _Dependent(is_discrete=self._is_discrete if is_discrete is NotImplemented else is_discrete,
                          event_dim=self._event_dim if event_dim is NotImplemented else event_dim)

    def check(self, value):
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint) -> bool:
    return isinstance(constraint, _Dependent)


class dependent_property(property, _Dependent):  # noqa: N801  (torch's name)
    """A property that is also a dependent constraint (``Distribution.support`` that depends
    on the parameters)."""

    def __init__(self, fn=None, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        property.__init__(self, fn)
        _Dependent.__init__(self, is_discrete=is_discrete, event_dim=event_dim)

    def __call__(self, fn):
        return dependent_property(fn, is_discrete=self._is_discrete, event_dim=self._event_dim)


class _Cat(Constraint):
    """Constraints `cseq` applied to consecutive pieces (of `lengths`) along `dim`."""

    def __init__(self, cseq, dim: int = 0, lengths=None):
        self.cseq, self.dim = list(cseq), dim
        self.lengths = [1] * len(self.cseq) if lengths is None else list(lengths)
        if len(self.lengths) != len(self.cseq):
            raise ValueError(f"cat: {len(self.cseq)} constraints but {len(self.lengths)} lengths")

    @property
    def event_dim(self):
        return max(c.event_dim for c in self.cseq)

    def check(self, value):
        from ..ops import cat as _cat
        start, parts = 0, []
        for c, n in zip(self.cseq, self.lengths):
            parts.append(c.check(value.narrow(self.dim, start, n)))
            start += n
        return _cat(parts, self.dim)


class _Stack(Constraint):
    """Constraints `cseq` applied to the slices of `dim`."""

    def __init__(self, cseq, dim: int = 0):
        self.cseq, self.dim = list(cseq), dim

    @property
    def event_dim(self):
        # (a `dim` among the event dims counted from the right is one of them too)
        n = max(c.event_dim for c in self.cseq)
        return n + 1 if self.dim + n < 0 else n

    def check(self, value):
        from ..ops import stack as _stack
        return _stack([c.check(value.select(self.dim, i)) for i, c in enumerate(self.cseq)], self.dim)


def _tensor(a):
    from ..ops.creation import tensor
    return tensor(a)


real = _Real()
positive = _GreaterThan(0.0)
nonnegative = _GreaterThan(0.0, strict=False)
unit_interval = _Interval(0.0, 1.0)
simplex = _Simplex()
boolean = _Boolean()
nonnegative_integer = _IntegerGreaterThan(0)
positive_definite = _PositiveDefinite()
lower_cholesky = _LowerCholesky()
corr_cholesky = _CorrCholesky()
real_vector = _RealVector()
interval = _Interval
half_open_interval = lambda lo, hi: _Interval(lo, hi, half_open=True)  # noqa: E731
integer_interval = _IntegerInterval
greater_than = _GreaterThan
greater_than_eq = lambda lower_bound: _GreaterThan(lower_bound, strict=False)  # noqa: E731
less_than = _LessThan
independent = _Independent
positive_integer = _IntegerGreaterThan(1)
one_hot = _OneHot()
square = _Square()
symmetric = _Symmetric()
positive_semidefinite = _PositiveSemidefinite()
lower_triangular = _LowerTriangular()
dependent = _Dependent()
cat = _Cat
stack = _Stack
multinomial = _Multinomial
