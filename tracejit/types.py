"""``torch.types``: the type aliases annotations name (``Number``, ``_size``, ``_dtype``)."""
from __future__ import annotations

from typing import List, Sequence, Tuple, Union

from .device import device as _device_cls
from .dtypes import DType
from .size import Size
from .tensor import Tensor

_TensorOrTensors = Union[Tensor, Sequence[Tensor]]
_int = int
_float = float
_bool = bool
_complex = complex
_dtype = DType
_device = _device_cls
_size = Union[Size, List[int], Tuple[int, ...]]
Number = Union[int, float, bool]
Device = Union[_device_cls, str, int, None]
