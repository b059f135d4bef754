"""`Parameter`: a Tensor that a Module registers as one of its learnable weights.

It is a Tensor subclass with no extra slots, so every op treats it as a plain
Tensor (op results are base Tensors, as in PyTorch) while ``isinstance(p,
nn.Parameter)`` is what makes ``module.weight = p`` register it. A Parameter shares
memory with the tensor it was made from, like ``torch.nn.Parameter``.
"""
from __future__ import annotations

from ..tensor import Tensor

__all__ = ["Parameter", "UninitializedParameter", "UninitializedBuffer", "Buffer"]


class Parameter(Tensor):
    __slots__ = ()

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True, *args, **kwargs):
        # Made here, not in __init__, as PyTorch's: a subclass's ``__new__`` may call
        # ``super().__new__(cls, data, requires_grad)`` and take arguments of its own.
        self = super().__new__(cls)
        self._setup(data, requires_grad)
        return self

    def __init__(self, *args, **kwargs) -> None:
        pass   # (set up by __new__)

    def _setup(self, data: Tensor | None, requires_grad: bool) -> None:
        if data is None:
            from ..ops.creation import empty
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter: expected a Tensor, got {type(data).__name__}; "
                            f"wrap data with tracejit.tensor(...) first")
        if data._data is None:   # a traced value: it has no memory to own
            from ..errors import TraceError
            raise TraceError("Parameter: a module (or parameter) is being created inside a compiled "
                             "function; create it once outside and call it inside")
        if data.grad_fn is not None:
            # Like PyTorch: a parameter is a leaf, so detach a computed tensor's value.
            data = data.detach()
        self._init(data._data, data.dtype, data.device)
        self._vbox = data._vbox  # same memory, same version counter
        if data.is_inference():   # (the same memory: PyTorch's parameter is the same tensor)
            self._inference = True
        if requires_grad:
            self.requires_grad = True  # raises a clear DTypeError for integer data

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        out = Parameter(Tensor._wrap(self._data.copy(), self.dtype, self.device), self.requires_grad)
        if self.grad is not None:
            out.grad = Tensor._wrap(self.grad._data.copy(), self.grad.dtype, self.grad.device)
        memo[id(self)] = out
        return out


class UninitializedParameter(Parameter):
    """A parameter whose shape is not known yet (a lazy layer's, before its first input).

    `materialize` gives it memory of the shape in place -- the object becomes a plain
    `Parameter` -- so an optimizer made before the first forward updates the real weight.
    """
    __slots__ = ()

    def __new__(cls, requires_grad: bool = True, device=None, dtype=None):
        return Parameter.__new__(cls, None, requires_grad)

    def materialize(self, shape, device=None, dtype=None) -> None:
        from ..ops.creation import empty
        data = empty(*tuple(shape), dtype=dtype or self.dtype, device=device or self.device)
        self._init(data._data, data.dtype, data.device)
        self._vbox = data._vbox
        self._requires_grad = True
        self.__class__ = Parameter

    def __repr__(self) -> str:
        return "<UninitializedParameter>"


class UninitializedBuffer(Tensor):
    """A buffer whose shape is not known yet (a lazy normalization layer's statistics)."""
    __slots__ = ()

    def __init__(self, requires_grad: bool = False, device=None, dtype=None):
        from ..ops.creation import empty
        data = empty(0)
        self._init(data._data, data.dtype, data.device)

    def materialize(self, shape, device=None, dtype=None) -> None:
        from ..ops.creation import empty
        data = empty(*tuple(shape), dtype=dtype or self.dtype, device=device or self.device)
        self._init(data._data, data.dtype, data.device)
        self.__class__ = Tensor

    def __repr__(self) -> str:
        return "<UninitializedBuffer>"


class Buffer(Tensor):
    """``module.name = nn.Buffer(tensor, persistent=True)`` registers `tensor` as a buffer
    (the module keeps the tensor itself, as with ``register_buffer``)."""
    __slots__ = ("persistent",)

    def __init__(self, data: Tensor | None = None, *, persistent: bool = True):
        if data is None:
            from ..ops.creation import empty
            data = empty(0)
        self._init(data._data, data.dtype, data.device)
        self._vbox = data._vbox
        self.persistent = persistent

    def as_tensor(self) -> Tensor:
        t = Tensor._wrap(self._data, self.dtype, self.device)
        t._vbox = self._vbox
        return t
