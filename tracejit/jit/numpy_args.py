"""Numpy array arguments of a compiled function: graph inputs, guarded by dtype and shape.

As torch.compile does, an ``np.ndarray`` argument (or one in a list, tuple or dict of
arguments) with a bool, integer or float dtype is an input of the graph, not a constant
of the capture, so a new batch of ids in fresh arrays reuses the entry (its dims go
symbolic when they keep changing). The function sees an `ArrayArg` while it is captured:
a tracer that becomes a tensor the way the array would (``torch.as_tensor``,
``torch.from_numpy``, ``torch.LongTensor(a)``, indexing a tensor with it, an operand of a
tensor op), and answers numpy's ``shape``, ``ndim``, ``size``, ``dtype``, ``len`` and
``isinstance(a, np.ndarray)``. numpy's comparisons and ``+ - * & | ^ ~`` on it are traced,
computed in numpy's result dtype (``a *= ids != 0`` into a plain array `a` rebinds `a`).
Other numpy code on it (numpy functions, its methods, its values as Python numbers)
raises `NumpyOnArray`; a capture that fails with array inputs is captured again with
those arrays as constants (guarded by identity), as before, and an array that numpy code
reads and that then changes between calls breaks the graph (tracejit.compile) rather
than capturing once per array.
"""
from __future__ import annotations

import dis
import opcode
import operator
import sys

import numpy as np

from .. import dtypes as _dt
from ..device import CPU
from ..errors import TraceError, _OURS, user_where
from ..ops.creation import as_tensor
from ..tensor import Tensor
from . import config
from .tracer import Tracer

__all__ = ["ArrayArg", "NumpyOnArray", "array_dtype", "as_tensors"]


class NumpyOnArray(TraceError):
    """User code ran numpy on an array argument while it was captured as a graph input."""

    def __init__(self, message: str, leaf: str):
        super().__init__(message)
        self.leaf = leaf


def array_dtype(x):
    """The tracejit dtype argument `x` becomes as a graph input, or None (not an array, or
    one kept a constant: object, string, complex or non-native dtypes, ndarray subclasses)."""
    if type(x) is not np.ndarray:
        return None
    d = x.dtype
    if d.kind not in "biuf" or d is not np.dtype(d.type):   # (the guard checks it by identity)
        return None
    try:
        return _dt.as_dtype(d)
    except TypeError:   # uint16 and the like: no tracejit dtype
        return None


def as_tensors(leaves, arrays) -> list:
    """The call's leaves with the arrays at indices `arrays` as tensors sharing their memory."""
    out = list(leaves)
    for i in arrays:
        a = out[i]
        out[i] = Tensor._wrap(a, _dt.as_dtype(a.dtype), CPU)
    return out


def _from_user() -> bool:
    return not sys._getframe(2).f_code.co_filename.startswith(_OURS)


class ArrayArg(Tracer):
    """What a compiled function sees for a numpy array argument while it is captured: a
    tensor to tracejit, an array's metadata to user code (see the module docstring)."""

    __slots__ = ()
    numpy_stand_in = True   # (what nn.Module's call checks for)

    def _numpy(self, what: str) -> NumpyOnArray:
        name = self._trace.arrays[id(self)][0]
        return NumpyOnArray(f"{what} on numpy array argument {name!r}{user_where(3)}: numpy code "
                            f"on an array argument is not captured (torch.as_tensor(a), "
                            f"torch.from_numpy(a) and indexing with it are)", name)

    def __getattribute__(self, name: str):
        if name == "__class__" and _from_user():
            return np.ndarray   # (isinstance(a, np.ndarray) holds in user code, as eagerly)
        if name[0] != "_" and _from_user():
            if name == "dtype":
                return _dtype(self)
            if name == "size":
                n = 1
                for d in Tracer.shape.__get__(self):
                    n = n * d
                return n
            if name not in ("shape", "ndim"):
                raise ArrayArg._numpy(self, f"array.{name}")
        return object.__getattribute__(self, name)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.pop("out", None)
        # ``a *= b`` with `a` a plain array: Python rebinds ``a`` to what this returns (the
        # array object itself keeps its values)
        if method != "__call__" or kwargs or out is not None and not (
                len(out) == 1 and out[0] is inputs[0] and type(out[0]) is np.ndarray and _inplace_operator()):
            raise self._numpy(f"numpy.{ufunc.__name__}.{method}")
        return _traced_ufunc(self, ufunc, inputs)

    def __array_function__(self, func, types, args, kwargs):
        raise self._numpy(f"numpy.{func.__name__}")

    def to(self, *args, **kwargs) -> Tracer:
        # What as_tensor and LongTensor(a) give: a tensor, a view of the input that
        # in-place writes reach (and so refuse: capture.py)
        t = Tracer.to(self, *args, **kwargs)
        return Tracer.detach(self) if t is self else t


_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "and": np.bitwise_and,
           "or": np.bitwise_or, "xor": np.bitwise_xor, "eq": np.equal, "ne": np.not_equal,
           "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}
_UNARY = {"neg": np.negative, "invert": np.invert}
# numpy's elementwise functions traced on array arguments: the tensor operator that computes
# the same on operands cast to numpy's common dtype (others raise NumpyOnArray)
_TRACED = {uf: getattr(operator, n + "_" if n in ("and", "or") else n)
           for n, uf in {**_BINARY, **_UNARY}.items()}


def _traced_ufunc(arg: ArrayArg, ufunc, inputs: tuple) -> ArrayArg:
    """numpy's `ufunc` on `inputs` (array arguments, arrays, numbers) as graph operations."""
    fn = _TRACED.get(ufunc)
    if fn is None:
        raise arg._numpy(f"numpy.{ufunc.__name__}")
    try:   # numpy's dtypes, from 0-d stand-ins (Python numbers stay weak, as in numpy)
        like = [np.zeros((), x.dtype) if isinstance(x, np.ndarray) else
                np.zeros((), _dtype(x)) if isinstance(x, ArrayArg) else x for x in inputs]
        want, common = ufunc(*like).dtype, _dt.as_dtype(np.result_type(*like))
        r = fn(*[(as_tensor(x) if isinstance(x, np.ndarray) else x).to(common)
                 if isinstance(x, (np.ndarray, Tensor)) else x for x in inputs])
        arrays = getattr(r._trace, "arrays", None)
    except Exception:   # (a dtype tracejit lacks, an operator it refuses)
        arrays = r = None
    if arrays is None or type(r) is not Tracer or r.dtype.np != want:
        raise arg._numpy(f"numpy.{ufunc.__name__}")
    r.__class__ = ArrayArg
    arrays[id(r)] = (arrays[id(arg)][0], want)
    return r


def _dtype(a: ArrayArg):
    return object.__getattribute__(a, "_trace").arrays[id(a)][1]


def _inplace_operator() -> bool:
    """Whether the user's line running now is an augmented assignment (``a *= b``)."""
    f = sys._getframe(2)
    code, i = f.f_code.co_code, f.f_lasti
    name = dis.opname[code[i]]
    return name.startswith("INPLACE_") or (name == "BINARY_OP" and _NB_OPS[code[i + 1]].endswith("="))


_NB_OPS = [sym for _, sym in getattr(opcode, "_nb_ops", ())]


def _user_op(name: str, base, ufunc, reflected: bool):
    def op(self, *args):
        if not _from_user():
            return base(self, *args)
        if args and isinstance(args[0], Tensor) and type(args[0]) is not ArrayArg:
            if reflected or name in ("__getitem__", "__setitem__", "__contains__"):
                return base(self, *args)   # (the tensor's operator, as eagerly)
            # eagerly numpy defers to the tensor's reflected operator, which refuses an array
            raise self._numpy(f"numpy's {name} with a tensor")
        if ufunc is None:
            raise self._numpy("numpy's " + name)
        return _traced_ufunc(self, ufunc, (args[0], self) if reflected else (self, *args))
    op.__name__ = name
    return op


for _name, _uf in list(_BINARY.items()) + [(n, None) for n in "truediv floordiv mod pow matmul lshift rshift divmod".split()]:
    for _form in ("__%s__", "__r%s__", "__i%s__"):
        if hasattr(Tracer, _form % _name):   # (in place: a write into the argument, refused)
            setattr(ArrayArg, _form % _name, _user_op(_form % _name, getattr(Tracer, _form % _name),
                                                      None if _form[2] == "i" else _uf, _form[2] == "r"))
for _name in ("__neg__ __pos__ __abs__ __invert__ __eq__ __ne__ __lt__ __le__ __gt__ __ge__ "
              "__getitem__ __setitem__ __iter__ __contains__ __int__ __float__ __complex__ "
              "__index__ __bool__ __array__ __round__").split():
    if hasattr(Tracer, _name):
        _uf = _BINARY.get(_name[2:-2]) or _UNARY.get(_name[2:-2])
        setattr(ArrayArg, _name, _user_op(_name, getattr(Tracer, _name), _uf, False))


def arrays_to_constants(cf, descs, exc: Exception) -> bool:
    """After a capture of compiled function `cf` failed with `exc`: its array inputs that
    numpy code read (all of them for another error: their values may have been needed)
    become constants, as before arrays were inputs; False when it had none."""
    arrays = {d.name for d in descs if d.value is not None and d.kind == "tensor"}
    if not arrays:
        return False
    read = {exc.leaf} & arrays if isinstance(exc, NumpyOnArray) else set()
    cf._const_arrays |= read or arrays
    cf._numpy_read |= read
    config.topic("fallback").info("%s: %s; capturing numpy arguments %s as constants", cf.__name__,
                                  exc, sorted(read or arrays))
    return True


def changed_array(descs, entries, numpy_read):
    """A `NumpyOnArray` when an array argument that numpy code read (a constant of every
    entry) is a different array now, else None."""
    for d in descs:
        if d.name in numpy_read and d.kind == "const" and entries and not any(
                o.name == d.name and o.value is d.value for e in entries for o in e.descs):
            return NumpyOnArray(f"numpy code reads array argument {d.name!r}, a different array "
                                f"in each call (torch.compile traces numpy; tracejit does not)", d.name)
    return None
