"""Tensor's operators (``+``, ``*``, ``@``, comparisons, ``x[i]``) and the methods that
forward unchanged to the op of the same name in ``tracejit.ops`` (``x.sum()``, ``x.exp()``).

They are installed on :class:`tracejit.tensor.Tensor` when the package imports this module, so
eager calls, traced calls and compiled code share one definition per op.
"""
from __future__ import annotations

from types import FunctionType as _FunctionType

import numpy as np

from . import dtypes as _dt
from . import exactcall as _exactcall
from .tensor import Tensor, _install_methods
from . import ops as _ops
from .ops import elementwise as _elementwise
from .ops.eager import bind as _bind, _make_binary


def _operand(self, o):
    """The right operand of a bitwise operator: numpy arrays become tensors."""
    return _ops.as_tensor(o, device=self.device) if isinstance(o, np.ndarray) else o


def _both_bool(self, o) -> bool:
    if self.dtype is not _dt.bool_:
        return False
    return o.__class__ is bool or getattr(o, "dtype", None) in (_dt.bool_, np.bool_)


class OperatorMethods:
    """Holder of the operator methods (copied onto Tensor below; never instantiated). The
    binary operators that are one op call (``+ - * / // % ** @ < <= > >=``) and the reflected
    ``+ - * /`` are made from the op tables further down (`_with_ndarray_operand`,
    `_reflected`), not written here."""

    def __rfloordiv__(self, o):
        return _ops.floor_divide(o, self)

    def __rmod__(self, o):
        return _ops.remainder(o, self)

    def __rpow__(self, o):
        return _ops.pow(o, self)

    def __rmatmul__(self, o):
        return _ops.matmul(o, self)

    def __neg__(self):
        return _ops.neg(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _ops.abs(self)

    # `~ & | ^` are logical on bool tensors and bitwise on integers (`5 & 3` is 1, not
    # True); `<< >>` shift integers. Float operands raise, as in PyTorch.
    def __invert__(self):
        if self.dtype is _dt.bool_:
            return _ops.logical_not(self)
        if not self.dtype.is_integer:
            raise TypeError(f"~ (bitwise not) is only implemented on integer and bool tensors, got "
                            f"{self.dtype.name}")
        return _ops.bitwise_not(self)

    def __eq__(self, o):
        if o is None or not isinstance(o, _OPERAND_TYPES):
            return NotImplemented  # `t == None` is False, as for any other object
        return _ops.eq(self, o)

    def __ne__(self, o):
        if o is None or not isinstance(o, _OPERAND_TYPES):
            return NotImplemented
        return _ops.ne(self, o)

    def __getitem__(self, index):
        return _ops.getitem(self, index)

    def __contains__(self, element) -> bool:
        """``v in x``: whether any element equals `v`, as PyTorch's (not a row-by-row walk)."""
        if not isinstance(element, (Tensor, int, float, complex, np.number, np.bool_)):
            raise RuntimeError(f"Tensor.__contains__ only supports Tensor or scalar, but you passed in a "
                               f"{type(element)}.")
        return bool(_ops.any(_ops.eq(self, element)).item())

    def where(self, condition, other):
        """``x.where(cond, y)`` is ``where(cond, x, y)``, as in PyTorch."""
        return _ops.where(condition, self, other)

    def nonzero(self, *, as_tuple: bool = False):
        return _ops.nonzero(self, as_tuple=as_tuple)

    @property
    def T(self) -> "Tensor":
        return _ops.permute(self, tuple(range(self.ndim))[::-1])

    @property
    def mT(self) -> "Tensor":
        if self.ndim < 2:
            if self.ndim == 1:
                from .errors import ShapeError
                raise ShapeError("tensor.mT is only supported on matrices or batches of matrices. "
                                 "Got 1-D tensor.")
            import warnings
            warnings.warn("Tensor.mT is deprecated on 0-D tensors. This function is the identity "
                          "in these cases.", UserWarning, stacklevel=2)
            return self
        return _ops.transpose(self, -2, -1)

    def view(self, *shape, size=None, dtype=None):
        if dtype is not None and not shape and size is None:
            return _ops.view_dtype(self, dtype)
        if len(shape) == 1 and isinstance(shape[0], (_dt.DType, type)):
            return _ops.view_dtype(self, shape[0])
        return _ops.view(self, *shape, size=size)

    def new_tensor(self, data, dtype=None):
        return _ops.tensor(data, dtype=dtype or self.dtype, device=self.device)

    def new_zeros(self, *size, dtype=None):
        return _ops.zeros(*size, dtype=dtype or self.dtype, device=self.device)

    def new_ones(self, *size, dtype=None):
        return _ops.ones(*size, dtype=dtype or self.dtype, device=self.device)

    def new_full(self, size, fill_value, dtype=None):
        return _ops.full(size, fill_value, dtype=dtype or self.dtype, device=self.device)

    def new_empty(self, *size, dtype=None):
        return _ops.empty(*size, dtype=dtype or self.dtype, device=self.device)


_OPERAND_TYPES = (Tensor, bool, int, float, complex, np.number, np.bool_)


def _bitwise(name: str, op, logical=None, reflected: bool = False):
    """Operator `name`: `op` of the operands (`logical` where both are bool), the right one
    a tensor where it is a numpy array."""
    def method(self, o):
        o = _operand(self, o)
        if logical is not None and _both_bool(self, o):
            return logical(self, o)
        return op(o, self) if reflected else op(self, o)
    method.__name__ = name
    return method


for _n, _op, _logical, _reflected in (
        ("__and__", _ops.bitwise_and, _ops.logical_and, False), ("__or__", _ops.bitwise_or, _ops.logical_or, False),
        ("__xor__", _ops.bitwise_xor, None, False), ("__lshift__", _ops.bitwise_left_shift, None, False),
        ("__rshift__", _ops.bitwise_right_shift, None, False),
        ("__rlshift__", _ops.bitwise_left_shift, None, True),
        ("__rrshift__", _ops.bitwise_right_shift, None, True)):
    setattr(OperatorMethods, _n, _bitwise(_n, _op, _logical, _reflected))
OperatorMethods.__rand__, OperatorMethods.__ror__, OperatorMethods.__rxor__ = (
    OperatorMethods.__and__, OperatorMethods.__or__, OperatorMethods.__xor__)
_install_methods(OperatorMethods)


# Methods that forward unchanged to the op of the same name.
_FORWARDED = """
add sub mul div pow neg abs exp log log1p sqrt rsqrt sin cos tanh sigmoid relu gelu erf sign floor
square clamp clip maximum minimum sum mean var std max min amax amin argmax argmin logsumexp prod
all any mm matmul bmm reshape transpose permute t squeeze unsqueeze expand expand_as flatten
contiguous chunk gather scatter_add masked_fill softmax log_softmax eq ne lt le gt ge
clone view_as reshape_as unbind repeat cumsum norm index_select logical_not
floor_divide remainder narrow isnan isinf isfinite nan_to_num dropout expm1 logical_and logical_or
movedim swapaxes outer dot mv take_along_dim isclose allclose
tril triu sort argsort topk multinomial cumprod
""".split()


def _forward(name, top: bool = False):
    """Tensor's method `name`: the op of that name in tracejit.ops (``top``: in the
    tracejit namespace, its legacy spellings), the tensor its first argument."""
    fwd = None

    def method(self, *args, **kwargs):
        # The op is looked up once, at the first call: the method then replaces itself
        # with a forwarder of the op's own signature (exactcall.py), or the generic one
        # below
        nonlocal fwd
        if fwd is None:
            if top:
                import tracejit
            fwd = _forwarder(getattr(tracejit if top else _ops, name), name)
            setattr(Tensor, name, fwd)
        return fwd(self, *args, **kwargs)
    method.__name__ = name
    method.__qualname__ = f"Tensor.{name}"
    return method


def _forwarder(fn, name):
    if type(fn) is _FunctionType and fn.__name__ == name:
        # A plain Python function, the tensor its first argument: the method is the op
        # itself (``x.mm(w)`` calls ``mm(x, w)``, as a forwarder would, with the same
        # TypeError texts), one Python frame less per call (5 in a two-layer step's forward);
        # a forwarder where it takes ``dim`` but not PyTorch's ``axis`` spelling of it
        return _exactcall.with_numpy_names(fn, Tensor.__module__, f"Tensor.{name}")
    m = _exactcall.forwarder(fn, aliases=_exactcall.numpy_names(fn))  # its __qualname__ stays the op's: TypeError texts use it
    if m is None:
        def m(self, *args, **kwargs):
            return fn(self, *args, **kwargs)
        m.__qualname__ = f"Tensor.{name}"
    m.__name__ = name
    m.__doc__ = fn.__doc__
    return m


for _n in _FORWARDED:
    if not hasattr(Tensor, _n):
        setattr(Tensor, _n, _forward(_n))


# Operators that are exactly one op call: the operator calls the op function itself
# rather than through the method above (one Python call less on every `a * b`).
_OPERATOR_OPS = {"__add__": "add", "__sub__": "sub", "__mul__": "mul", "__truediv__": "div",
                 "__floordiv__": "floor_divide", "__mod__": "remainder", "__pow__": "pow",
                 "__matmul__": "matmul", "__lt__": "lt", "__le__": "le", "__gt__": "gt",
                 "__ge__": "ge"}


# Of those, the ones whose op function is exactly ``bind(<its primitive>, a, b)`` (add and
# sub at their default alpha): their operators bind the primitive themselves, one more
# Python call less per op (the op function stays the one definition of what they do).
_OPERATOR_PRIMS = {"__add__": "ADD", "__sub__": "SUB", "__mul__": "MUL", "__truediv__": "DIV",
                   "__floordiv__": "FLOOR_DIVIDE", "__mod__": "REMAINDER",
                   "__lt__": "LT", "__le__": "LE", "__gt__": "GT", "__ge__": "GE"}


def _with_ndarray_operand(name):
    # PyTorch's operators take a numpy array as the right operand (as a tensor of its dtype);
    # like PyTorch, `ndarray op tensor` (the reflected forms) still raises a TypeError.
    ndarray = np.ndarray
    if name in _OPERATOR_PRIMS:
        prim = getattr(_elementwise, _OPERATOR_PRIMS[name])

        def miss(self, o, key, params):
            if isinstance(o, ndarray):
                o = _ops.as_tensor(o, device=self.device)
            return _bind(prim, self, o)
        # The operator is the primitive's dispatch-plan fast path itself (registry.py
        # `_make_binary`); a signature without a plan (or a numpy operand) takes `miss`.
        method = _make_binary(prim, miss)
        method.__name__ = name
        method.__qualname__ = f"Tensor.{name}"
        return method
    op = getattr(_ops, _OPERATOR_OPS[name]) if name in _OPERATOR_OPS else getattr(Tensor, name)

    def method(self, o):
        if isinstance(o, ndarray):
            o = _ops.as_tensor(o, device=self.device)
        return op(self, o)
    method.__name__ = name
    method.__qualname__ = f"Tensor.{name}"
    return method


for _n in ("__add__", "__sub__", "__mul__", "__truediv__", "__floordiv__", "__mod__", "__pow__",
           "__matmul__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"):
    setattr(Tensor, _n, _with_ndarray_operand(_n))


# The reflected forms of the four arithmetic operators (``lr * g``) call their primitive's
# dispatch-plan fast path themselves, one Python frame less than `bind` in an optimizer step.
def _reflected(name, prim):
    binary = prim.binary

    def method(self, o):
        return binary(o, self)
    method.__name__ = name
    method.__qualname__ = f"Tensor.{name}"
    return method


for _n, _p in (("__radd__", "ADD"), ("__rsub__", "SUB"), ("__rmul__", "MUL"), ("__rtruediv__", "DIV")):
    setattr(Tensor, _n, _reflected(_n, getattr(_elementwise, _p)))
