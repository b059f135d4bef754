"""PyTorch's legacy tensor types: ``tracejit.FloatTensor``, ``LongTensor``, ... and their
``tracejit.cuda`` twins.

Each is a callable type, as in PyTorch: ``FloatTensor(2, 3)`` is an uninitialized float32
tensor of that size, ``FloatTensor([1, 2])`` one made from data, ``LongTensor(t)`` the
tensor ``t`` as int64; ``isinstance(t, FloatTensor)`` is True for a float32 tensor on
that type's device; ``t.type(FloatTensor)`` casts to it and ``t.type()`` names the type
of ``t`` ("torch.FloatTensor": the string programs compare against).
"""
from __future__ import annotations

from . import dtypes as _dt

__all__ = ["FloatTensor", "DoubleTensor", "HalfTensor", "ByteTensor", "CharTensor", "ShortTensor",
           "IntTensor", "LongTensor", "BoolTensor", "LEGACY_BY_NAME", "legacy_name", "cuda_types",
           "set_default_tensor_type", "typename"]

_NAMES = (("FloatTensor", _dt.float32), ("DoubleTensor", _dt.float64), ("HalfTensor", _dt.float16),
          ("ByteTensor", _dt.uint8), ("CharTensor", _dt.int8), ("ShortTensor", _dt.int16),
          ("IntTensor", _dt.int32), ("LongTensor", _dt.int64), ("BoolTensor", _dt.bool_))


class _LegacyMeta(type):
    def __instancecheck__(cls, obj) -> bool:
        from .tensor import Tensor
        return isinstance(obj, Tensor) and obj.dtype is cls.dtype and obj.device.type == cls.device_type

    def __call__(cls, *args, device=None):
        from . import ops
        from .tensor import Tensor
        dev = device if device is not None else cls.device_type
        if len(args) == 1 and isinstance(args[0], Tensor):
            return args[0].to(device=dev, dtype=cls.dtype)
        if len(args) == 1 and not isinstance(args[0], int):
            if hasattr(args[0], "__len__") and not isinstance(args[0], (str, bytes)) and \
                    all(isinstance(s, int) for s in args[0]) and type(args[0]).__name__ == "Size":
                return ops.empty(*args[0], dtype=cls.dtype, device=dev)
            return ops.tensor(args[0], dtype=cls.dtype, device=dev)
        if not all(isinstance(s, int) and not isinstance(s, bool) for s in args):
            raise TypeError(f"{cls.__name__}(): expected sizes (ints), a sequence of data or a tensor, "
                            f"got {args!r}")
        return ops.empty(*args, dtype=cls.dtype, device=dev)

    def __repr__(cls) -> str:
        return f"<class '{cls.__qualname__}'>"


def _make(name: str, dtype, device_type: str):
    qual = ("torch.cuda." if device_type == "cuda" else "torch.") + name
    return _LegacyMeta(name, (), {"dtype": dtype, "device_type": device_type, "__qualname__": qual,
                                  "__module__": "tracejit" if device_type == "cpu" else "tracejit.cuda",
                                  "__doc__": f"{qual}: {dtype.name} tensors on the {device_type}."})


for _name, _dtype in _NAMES:
    globals()[_name] = _make(_name, _dtype, "cpu")

LEGACY_BY_NAME = {f"torch.{n}": globals()[n] for n, _ in _NAMES}


def cuda_types() -> dict:
    """The ``tracejit.cuda.FloatTensor``-style types, by name."""
    out = {n: _make(n, d, "cuda") for n, d in _NAMES}
    LEGACY_BY_NAME.update({f"torch.cuda.{n}": t for n, t in out.items()})
    return out


def legacy_name(t) -> str:
    """PyTorch's type string of tensor `t` ("torch.FloatTensor", "torch.cuda.LongTensor")."""
    for name, dtype in _NAMES:
        if dtype is t.dtype:
            return ("torch.cuda." if t.device.type == "cuda" else "torch.") + name
    if t.dtype.is_complex:   # (type strings only: PyTorch has no such classes either)
        name = "ComplexFloatTensor" if t.dtype is _dt.complex64 else "ComplexDoubleTensor"
        return ("torch.cuda." if t.device.type == "cuda" else "torch.") + name
    return f"torch.{t.dtype.name}"


def set_default_tensor_type(t) -> None:
    """The deprecated ``torch.set_default_tensor_type``: `t` (a legacy type or its name,
    "torch.FloatTensor", "torch.cuda.DoubleTensor") sets the default float dtype and, for a
    cuda type, the default device."""
    import warnings
    from .defaults import set_default_device
    if isinstance(t, str):
        if t.startswith("torch.cuda.") and t not in LEGACY_BY_NAME:
            cuda_types()
        if t not in LEGACY_BY_NAME:
            raise TypeError(f"set_default_tensor_type: invalid type string {t!r}")
        t = LEGACY_BY_NAME[t]
    if not isinstance(t, _LegacyMeta):
        raise TypeError(f"set_default_tensor_type: expected a tensor type or its name, got {t!r}")
    if not t.dtype.is_floating_point:
        raise TypeError("only floating-point types are supported as the default type")
    warnings.warn("torch.set_default_tensor_type() is deprecated as of PyTorch 2.1, please use "
                  "torch.set_default_dtype() and torch.set_default_device() as alternatives.", UserWarning,
                  stacklevel=2)
    _dt.set_default_dtype(t.dtype)
    if t.device_type == "cuda":
        set_default_device("cuda")


def typename(obj) -> str:
    """``torch.typename``: a tensor's type string ("torch.FloatTensor"), else the dotted
    name of `obj` (a class or function) or of its class."""
    from .tensor import Tensor
    if isinstance(obj, Tensor):
        return legacy_name(obj)
    module, qual = getattr(obj, "__module__", "") or "", getattr(obj, "__qualname__", None)
    if qual is None:
        qual = getattr(obj, "__name__", None)
    if qual is None:
        module, qual = type(obj).__module__ or "", type(obj).__qualname__
    return qual if module in ("", "builtins") else f"{module}.{qual}"
