"""Sparse COO tensors (``torch.sparse_coo_tensor``, ``Tensor.to_sparse``) and the products
graph networks use with them (``torch.sparse.mm``, ``torch.spmm``, ``sparse @ dense``).

A `SparseTensor` holds an int64 ``(sparse_dims, nnz)`` index tensor and a ``(nnz, *dense)``
value tensor. Its operations are written with tracejit's dense ops (``index_select``,
``index_add``): a product with a dense matrix gathers the rows its nonzeros name and adds
them into the output rows, so gradients flow to the dense operand and to the values, and
compiled functions trace it like any index op. Other dense ops take ``to_dense()``."""
from __future__ import annotations

import math

import numpy as np

from . import dtypes as _dt
from .formats import layout
from .tensor import Tensor

__all__ = ["SparseTensor", "sparse_coo_tensor", "mm", "addmm", "sum", "spmm", "FloatTensor",
           "DoubleTensor", "LongTensor", "sparse_coo"]

sparse_coo = layout("sparse_coo")


def _ops():
    from . import ops
    return ops


class SparseTensor:
    """A sparse COO tensor: `indices` (sparse_dims x nnz, int64), `values` (nnz, *dense_dims)."""
    is_sparse = True
    is_sparse_csr = False
    layout = sparse_coo

    def __init__(self, indices: Tensor, values: Tensor, size: tuple, coalesced: bool = False) -> None:
        self._idx, self._val, self._size, self._coalesced = indices, values, tuple(size), coalesced

    # ---- what PyTorch programs read --------------------------------------------------
    @property
    def shape(self):
        from .size import Size
        return Size(self._size)

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self._size[dim]

    def dim(self) -> int:
        return len(self._size)

    ndim = property(dim)
    dtype = property(lambda self: self._val.dtype)
    device = property(lambda self: self._val.device)
    requires_grad = property(lambda self: self._val.requires_grad)
    grad_fn = property(lambda self: self._val.grad_fn)

    def sparse_dim(self) -> int:
        return self._idx.shape[0]

    def dense_dim(self) -> int:
        return self._val.dim() - 1

    def _nnz(self) -> int:
        return self._idx.shape[1]

    def _indices(self) -> Tensor:
        return self._idx

    def _values(self) -> Tensor:
        return self._val

    def indices(self) -> Tensor:
        self._need_coalesced("indices")
        return self._idx

    def values(self) -> Tensor:
        self._need_coalesced("values")
        return self._val

    def _need_coalesced(self, what: str) -> None:
        if not self._coalesced:
            raise RuntimeError(f"Cannot get {what} on an uncoalesced tensor, please call .coalesce() first")

    def is_coalesced(self) -> bool:
        return self._coalesced

    def numel(self) -> int:
        return math.prod(self._size)

    def __len__(self) -> int:
        return self._size[0]

    def __repr__(self) -> str:
        return (f"tensor(indices={self._idx!r},\n       values={self._val!r},\n       size={self._size}, "
                f"nnz={self._nnz()}, layout=tracejit.sparse_coo)")

    # ---- conversions -----------------------------------------------------------------
    def _linear(self) -> np.ndarray:
        idx = self._idx.detach().cpu().numpy()
        return np.ravel_multi_index(tuple(idx), self._size[:idx.shape[0]]) if idx.shape[1] else \
            np.zeros(0, np.int64)

    def coalesce(self) -> "SparseTensor":
        """Indices sorted (row-major) and duplicates summed, as PyTorch's."""
        if self._coalesced:
            return self
        ops = _ops()
        lin = self._linear()
        uniq, inverse = np.unique(lin, return_inverse=True)
        sd = self._idx.shape[0]
        idx = np.stack(np.unravel_index(uniq, self._size[:sd])) if uniq.size else np.zeros((sd, 0), np.int64)
        inv = ops.tensor(inverse.reshape(-1), dtype=_dt.int64, device=self.device)
        zeros = ops.zeros((len(uniq),) + tuple(self._val.shape[1:]), dtype=self.dtype, device=self.device)
        vals = ops.index_add(zeros, 0, inv, self._val)
        return SparseTensor(ops.tensor(idx.astype(np.int64), device=self.device), vals, self._size, True)

    def to_dense(self, dtype=None, *, masked_grad: bool = True) -> Tensor:
        ops = _ops()
        sd = self._idx.shape[0]
        rows = math.prod(self._size[:sd])
        lin = ops.tensor(self._linear(), dtype=_dt.int64, device=self.device)
        flat = ops.zeros((rows,) + tuple(self._size[sd:]), dtype=self.dtype, device=self.device)
        out = ops.index_add(flat, 0, lin, self._val).reshape(self._size)
        return out if dtype is None else out.to(dtype)

    def to(self, *args, **kwargs) -> "SparseTensor":
        return SparseTensor(self._idx.to(*[a for a in args if not isinstance(a, _dt.DType)],
                                         **{k: v for k, v in kwargs.items() if k == "device"}),
                            self._val.to(*args, **kwargs), self._size, self._coalesced)

    def cpu(self) -> "SparseTensor":
        return self.to("cpu")

    def cuda(self, device=None) -> "SparseTensor":
        return self.to("cuda" if device is None else device)

    def float(self) -> "SparseTensor":
        return self.to(_dt.float32)

    def double(self) -> "SparseTensor":
        return self.to(_dt.float64)

    def detach(self) -> "SparseTensor":
        return SparseTensor(self._idx, self._val.detach(), self._size, self._coalesced)

    def requires_grad_(self, requires_grad: bool = True) -> "SparseTensor":
        self._val.requires_grad_(requires_grad)
        return self

    def t(self) -> "SparseTensor":
        if self.sparse_dim() != 2 or self.dense_dim():
            raise RuntimeError(f"t(): expects a 2-D sparse matrix, got size {self._size}")
        return SparseTensor(self._idx.flip(0), self._val, self._size[::-1], False)

    def transpose(self, d0: int, d1: int) -> "SparseTensor":
        return self.t() if sorted((d0 % 2, d1 % 2)) == [0, 1] else self

    def to_sparse(self) -> "SparseTensor":
        return self

    # ---- arithmetic ------------------------------------------------------------------
    def __mul__(self, other) -> "SparseTensor":
        if isinstance(other, (int, float)) or (isinstance(other, Tensor) and other.dim() == 0):
            return SparseTensor(self._idx, self._val * other, self._size, self._coalesced)
        raise TypeError("sparse * tensor: only a scalar factor is supported (use to_dense() first)")

    __rmul__ = __mul__

    def __neg__(self) -> "SparseTensor":
        return self * -1.0

    def mm(self, other):
        return mm(self, other)

    matmul = __matmul__ = mm

    def sum(self, dim=None, keepdim: bool = False):
        return sum(self, dim) if not keepdim else self.to_dense().sum(dim, keepdim=True)


def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None, pin_memory=False,
                      requires_grad: bool = False, check_invariants=None, is_coalesced=None) -> SparseTensor:
    """A sparse COO tensor from `indices` (sparse_dims x nnz) and `values` (nnz, ...)."""
    ops = _ops()
    idx = indices if isinstance(indices, Tensor) else ops.tensor(np.asarray(indices), dtype=_dt.int64)
    if idx.dtype != _dt.int64:
        idx = idx.to(_dt.int64)
    val = values if isinstance(values, Tensor) else ops.tensor(values, dtype=dtype)
    if dtype is not None and val.dtype != dtype:
        val = val.to(dtype)
    if device is not None:
        idx, val = idx.to(device), val.to(device)
    if idx.dim() != 2:
        raise RuntimeError(f"sparse_coo_tensor: indices must be 2-D (sparse_dims, nnz), got shape "
                           f"{tuple(idx.shape)}")
    if val.dim() < 1 or val.shape[0] != idx.shape[1]:
        raise RuntimeError(f"sparse_coo_tensor: indices give {idx.shape[1]} nonzeros but values have shape "
                           f"{tuple(val.shape)}")
    sd = idx.shape[0]
    arr = idx.detach().cpu().numpy()
    if size is None:
        size = tuple(int(m) + 1 for m in arr.max(1)) if arr.shape[1] else (0,) * sd
        size = size + tuple(val.shape[1:])
    size = tuple(int(s) for s in size)
    if len(size) != sd + val.dim() - 1:
        raise RuntimeError(f"sparse_coo_tensor: size {size} has {len(size)} dims but indices and values "
                           f"give {sd} sparse and {val.dim() - 1} dense dims")
    if arr.size and ((arr < 0).any() or (arr.max(1) >= np.array(size[:sd])).any()):
        raise RuntimeError(f"sparse_coo_tensor: an index is out of bounds for size {size[:sd]}")
    if requires_grad:
        val = val.detach().requires_grad_(True)
    return SparseTensor(idx, val, size, bool(is_coalesced))


def to_sparse(self: Tensor, sparse_dim: int | None = None, *, layout=None, blocksize=None,
              dense_dim=None) -> SparseTensor:
    """``Tensor.to_sparse()``: the nonzero entries (of the first `sparse_dim` dims) as COO."""
    ops = _ops()
    sd = self.dim() if sparse_dim is None else int(sparse_dim)
    if not 0 < sd <= self.dim():
        raise RuntimeError(f"to_sparse: sparse_dim {sparse_dim} is out of range for a {self.dim()}-d tensor")
    a = self.detach().cpu().numpy()
    nz = a.reshape(a.shape[:sd] + (-1,)).any(-1) if sd < a.ndim else (a != 0)
    idx = np.stack(np.nonzero(nz)).astype(np.int64) if nz.any() else np.zeros((sd, 0), np.int64)
    it = ops.tensor(idx, device=self.device)
    lin = ops.tensor(np.ravel_multi_index(tuple(idx), a.shape[:sd]) if idx.shape[1] else np.zeros(0, np.int64),
                     dtype=_dt.int64, device=self.device)
    vals = ops.index_select(self.reshape((-1,) + tuple(self.shape[sd:])), 0, lin)
    return SparseTensor(it, vals, tuple(self.shape), True)


def mm(sparse, dense):
    """``sparse @ dense`` for a 2-D sparse matrix and a dense matrix: each nonzero's value
    times the dense row its column names, added into the output row its row names."""
    ops = _ops()
    if not isinstance(sparse, SparseTensor):
        if isinstance(dense, SparseTensor):    # dense @ sparse = (sparse.T @ dense.T).T
            return mm(dense.t(), sparse.t()).t()
        return ops.mm(sparse, dense)
    if sparse.sparse_dim() != 2 or sparse.dense_dim():
        raise RuntimeError(f"sparse.mm: expects a 2-D sparse matrix, got size {sparse._size}")
    if isinstance(dense, SparseTensor):
        dense = dense.to_dense()
    if dense.dim() not in (1, 2) or dense.shape[0] != sparse._size[1]:
        raise RuntimeError(f"sparse.mm: sizes {sparse._size} and {tuple(dense.shape)} cannot be multiplied")
    vec = dense.dim() == 1
    d = dense.unsqueeze(1) if vec else dense
    rows, cols = sparse._idx[0], sparse._idx[1]
    gathered = ops.index_select(d, 0, cols) * sparse._val.unsqueeze(1)
    out = ops.zeros((sparse._size[0], d.shape[1]), dtype=gathered.dtype, device=d.device)
    out = ops.index_add(out, 0, rows, gathered)
    return out.squeeze(1) if vec else out


spmm = mm


def addmm(mat: Tensor, sparse: SparseTensor, dense: Tensor, *, beta: float = 1.0, alpha: float = 1.0) -> Tensor:
    return mat * beta + mm(sparse, dense) * alpha


def sum(input, dim=None, dtype=None):
    """The sum of a sparse tensor's entries (all, or over `dim`), as a dense tensor."""
    if not isinstance(input, SparseTensor):
        return input.sum() if dim is None else input.sum(dim)
    out = input._val.sum() if dim is None else input.to_dense().sum(dim)
    return out if dtype is None else out.to(dtype)


def _legacy(dtype):
    def make(*args, size=None, device=None):
        if len(args) >= 2 and isinstance(args[0], Tensor):
            shape = tuple(args[2]) if len(args) > 2 else size
            return sparse_coo_tensor(args[0], args[1], shape, dtype=dtype, device=device)
        raise TypeError("sparse legacy constructor: call it as (indices, values, size)")
    return make


FloatTensor = _legacy(_dt.float32)
DoubleTensor = _legacy(_dt.float64)
LongTensor = _legacy(_dt.int64)
