"""``Tensor.untyped_storage()`` and ``storage()``: the memory behind a tensor, for the queries programs make
of it (``data_ptr`` to tell whether two tensors share memory, ``nbytes``). Views of one
tensor (and tensors ``tracejit.load`` gave back sharing memory) report the same storage."""
from __future__ import annotations

import numpy as np

__all__ = ["UntypedStorage", "TypedStorage"]


class UntypedStorage:
    """The whole buffer a tensor's elements lie in (read-only queries)."""

    def __init__(self, tensor):
        self.device = tensor.device
        arr = tensor._data
        if isinstance(arr, np.ndarray):
            while isinstance(arr.base, np.ndarray):
                arr = arr.base
            self._ptr, self._nbytes = arr.__array_interface__["data"][0], int(arr.nbytes)
        else:   # a GPU array: the view chain tracejit keeps
            while tensor._base is not None:
                tensor = tensor._base
            self._ptr, self._nbytes = tensor.data_ptr(), int(tensor._data.nbytes)

    def data_ptr(self) -> int:
        return self._ptr

    def nbytes(self) -> int:
        return self._nbytes

    def size(self) -> int:
        return self._nbytes

    def __len__(self) -> int:
        return self._nbytes

    def element_size(self) -> int:
        return 1

    def __repr__(self) -> str:
        return f"UntypedStorage(device={self.device}, nbytes={self._nbytes})"


class TypedStorage(UntypedStorage):
    """``Tensor.storage()``: the buffer counted in elements of the tensor's dtype."""

    def __init__(self, tensor):
        super().__init__(tensor)
        self.dtype = tensor.dtype

    def size(self) -> int:
        return self._nbytes // self.dtype.itemsize

    def __len__(self) -> int:
        return self.size()

    def element_size(self) -> int:
        return self.dtype.itemsize

    def __repr__(self) -> str:
        return f"TypedStorage(dtype={self.dtype}, device={self.device}, size={self.size()})"
