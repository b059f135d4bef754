"""Differential fuzzing of tensor ops against PyTorch, a sibling of test_fuzz_torch.py:
seeded random reductions (dim tuples, negative and empty dims, keepdim, correction),
scans, sorts and selections with ties, dtype promotion between bool / integer / float32 /
float64 tensors and Python scalars (integer division and remainder signs, comparisons
with nan and inf), advanced indexing mixed with slices, None and flips, index_put with
accumulate, scatter / gather / index_add with duplicate indices, masked ops, and in-place
writes through views (transpose, diagonal, unfold, narrow, view). Each runs eagerly and,
where its output shape does not depend on the data, captured (``tj.trace``, the IR
interpreter): values exactly (floats: float32 1e-5, float64 1e-10), and the gradients of
the float inputs where PyTorch's are unambiguous (not through tied sort keys)."""
from __future__ import annotations

import operator

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

SHAPES = [(3, 4), (2, 3, 4), (0, 3), (4,), (1, 3, 1), (), (5, 1)]


def _pick(r, options):
    return options[int(r.integers(len(options)))]


def _arr(r, dtype, shape):
    """Values with ties (rounded), and now and then a nan or an inf, for floats."""
    if dtype == "bool":
        return r.random(shape) > 0.5
    if dtype not in ("float32", "float64"):
        return r.integers(-5, 6, shape).astype(dtype)
    a = r.standard_normal(shape)
    if r.random() < 0.3:
        a = np.round(a)
    if r.random() < 0.2 and a.size:
        a.flat[int(r.integers(a.size))] = _pick(r, [np.nan, np.inf, -np.inf])
    return a.astype(dtype)


def _dims(r, nd):
    if nd == 0:
        return None
    ds = sorted(r.choice(nd, int(r.integers(1, nd + 1)), replace=False).tolist())
    return tuple(d - nd if r.random() < 0.5 else d for d in ds)


# case(rng) -> (fn(lib, *tensors), [arrays], arguments, traceable, differentiable)
CASES = []


def case(f):
    CASES.append(f)
    return f


@case
def reduce(r):
    dt, shape = _pick(r, ["float32", "float64", "int64", "bool"]), _pick(r, SHAPES)
    op = _pick(r, ["sum", "mean", "prod", "amax", "amin", "any", "all", "std", "var", "logsumexp", "nansum",
                   "norm", "count_nonzero", "aminmax"])
    dims, keep, correction = _dims(r, len(shape)), bool(r.integers(2)), int(r.integers(2))

    def fn(lib, x):
        if op in ("mean", "std", "var", "logsumexp", "norm") and not x.dtype.is_floating_point:
            x = x.double()
        if op == "count_nonzero":
            return lib.count_nonzero(x, dim=dims)
        if op == "norm":
            return lib.linalg.vector_norm(x, 2, dim=dims, keepdim=keep)
        if op in ("std", "var"):
            return getattr(x, op)(dim=dims, keepdim=keep, correction=correction)
        if dims is None:
            return x.logsumexp(0) if op == "logsumexp" else x.amax() if op == "aminmax" else getattr(x, op)()
        if op == "aminmax":
            return tuple(lib.aminmax(x, dim=dims[0], keepdim=keep))
        if op in ("any", "all", "prod"):
            return getattr(x, op)(dim=dims[0], keepdim=keep)
        return getattr(x, op)(dim=dims, keepdim=keep)
    return fn, [_arr(r, dt, shape)], dict(op=op, dims=dims, keep=keep, shape=shape, dt=dt), True, True


@case
def scan(r):
    dt, shape = _pick(r, ["float32", "float64", "int64", "bool"]), _pick(r, SHAPES) or (4,)
    op = _pick(r, ["cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"])
    d = int(r.integers(-len(shape), len(shape)))

    def fn(lib, x):
        if op == "logcumsumexp" and not x.dtype.is_floating_point:
            x = x.double()
        out = getattr(x, op)(d)
        return tuple(out) if op in ("cummax", "cummin") else out
    return fn, [_arr(r, dt, shape)], dict(op=op, d=d, shape=shape, dt=dt), op not in ("cummax", "cummin"), True


@case
def selection(r):
    dt, shape = _pick(r, ["float32", "float64", "int64"]), _pick(r, [(3, 5), (6,), (2, 3, 4), (0, 4)])
    x = _arr(r, dt, shape)
    x = x if dt == "int64" else np.round(x)    # (ties)
    op = _pick(r, ["sort", "argsort", "topk", "argmax", "argmin", "max_dim", "min_dim", "kthvalue", "median", "msort"])
    d, flag = int(r.integers(-len(shape), len(shape))), bool(r.integers(2))
    k = int(r.integers(1, shape[d] + 1)) if shape[d] else 0

    def fn(lib, x):
        if op == "sort":
            return tuple(x.sort(dim=d, descending=flag, stable=True))
        if op == "argsort":
            return x.argsort(dim=d, descending=flag, stable=True)
        if op == "topk":
            return x.topk(k, dim=d, largest=flag, sorted=True)[0]   # (tied indices: unspecified)
        if op in ("argmax", "argmin"):     # the first of tied extremes, as PyTorch
            return getattr(x, op)(d, keepdim=flag)
        if op in ("max_dim", "min_dim"):
            return tuple(getattr(x, op[:3])(d, keepdim=flag))
        if op == "kthvalue":
            return x.kthvalue(max(k, 1), d)[0]
        if op == "median":
            return x.median(d)[0]
        return lib.msort(x)
    # (a tied key's gradient may go to either element: only the stable sorts, argmax-like
    # selections and msort are compared)
    return fn, [x], dict(op=op, d=d, flag=flag, k=k, shape=shape, dt=dt), True, \
        op in ("sort", "msort", "max_dim", "min_dim")


_BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
           "%": operator.mod, "**": operator.pow, "<": operator.lt, "==": operator.eq, ">=": operator.ge,
           "&": operator.and_, "|": operator.or_, "^": operator.xor}


@case
def promotion(r):
    dts = ["float32", "float64", "int64", "int32", "bool", "uint8", "int8", "int16"]
    shapes = [(3, 4), (4,), (), (1, 4)]
    a, b = _arr(r, _pick(r, dts), _pick(r, shapes)), _arr(r, _pick(r, dts), _pick(r, shapes))
    op = _pick(r, sorted(_BINARY) + ["maximum", "minimum", "fmod", "remainder", "atan2", "where", "scalar"])
    sop, scalar, right = _pick(r, sorted(_BINARY)), _pick(r, [2, -3, 2.5, -0.5, True, 0, float("nan"), float("inf")]), \
        bool(r.integers(2))

    def fn(lib, a, b):
        if op == "scalar":
            return _BINARY[sop](scalar, a) if right else _BINARY[sop](a, scalar)
        if op in _BINARY:
            return _BINARY[op](a, b)
        if op == "where":
            return lib.where(a > 0 if a.dtype != lib.bool else a, a, b)
        return getattr(lib, op)(a, b)
    return fn, [a, b], dict(op=op, sop=sop, scalar=scalar, right=right, a=str(a.dtype), b=str(b.dtype)), True, True


@case
def indexing(r):
    x = _arr(r, _pick(r, ["float32", "float64", "int64"]), (4, 5, 3))
    kind, acc = int(r.integers(12)), bool(r.integers(2))
    i1, i2, m = r.integers(-4, 4, (2, 3)), r.integers(-5, 5, (3,)), r.random((4, 5)) > 0.5

    def fn(lib, x):
        a, b, mask = lib.tensor(i1), lib.tensor(i2), lib.tensor(m)
        y = x * 1
        if kind == 0:
            return x[a, 1:, None]
        if kind == 1:
            return x[:, b, ::2]
        if kind == 2:
            return x[None, b[:2], ..., lib.tensor([0, 2])]
        if kind == 3:
            return x[mask]
        if kind == 4:
            return x[mask, 1]
        if kind == 5:
            return x.flip(0)[a[0], :, b[0]]
        if kind == 6:
            y[a[0], 2:] = 7
        elif kind == 7:
            y.index_put_((a[0] % 4,), lib.ones_like(y[0]), accumulate=acc)   # (duplicate rows)
        elif kind == 8:
            y[mask] = y[mask] * 2
        elif kind == 9:
            return x[1:3, [0, 0, 4]]
        elif kind == 10:
            y[:, b] += 1     # (duplicates: the last write wins, once)
        else:
            return x[..., b % 3][:, :, -1]
        return y
    return fn, [x], dict(kind=kind, acc=acc), kind not in (3, 4, 8), True


@case
def scatter(r):
    dt = _pick(r, ["float32", "float64", "int64"])
    x, src = _arr(r, dt, (4, 5)), _arr(r, dt, (3, 5))
    idx, rows = r.integers(0, 4, (3, 5)), r.integers(0, 4, (3,))
    kind = _pick(r, ["scatter", "scatter_add", "scatter_reduce", "gather", "index_add", "index_copy", "index_fill",
                     "index_select", "masked_fill", "masked_scatter", "masked_select", "take_along_dim", "put_"])
    reduce_, flag, alpha = _pick(r, ["sum", "prod", "mean", "amax", "amin"]), bool(r.integers(2)), _pick(r, [1, 2])

    def fn(lib, x, src):
        i, i1, mask = lib.tensor(idx), lib.tensor(rows), x > 0
        if kind == "scatter":
            return x.scatter(0, i, src)
        if kind == "scatter_add":
            return x.scatter_add(0, i, src)
        if kind == "scatter_reduce":
            return x.scatter_reduce(0, i, src, reduce_, include_self=flag)
        if kind == "gather":
            return x.gather(0, i)
        if kind == "index_add":
            return x.index_add(0, i1, src, alpha=alpha)
        if kind == "index_copy":
            return x.index_copy(0, lib.tensor([3, 0, 1]), src)
        if kind == "index_fill":
            return x.index_fill(1, i1, -1)
        if kind == "index_select":
            return x.index_select(1, i1)
        if kind == "masked_fill":
            return x.masked_fill(mask, 0.5 if x.dtype.is_floating_point else 3)
        if kind == "masked_scatter":
            return x.masked_scatter(mask, src.reshape(-1).repeat(2)[:20].reshape(4, 5))
        if kind == "masked_select":
            return x.masked_select(mask)
        if kind == "take_along_dim":
            return lib.take_along_dim(x, i[:, :2], 1)
        y = x.clone()
        y.put_(lib.tensor([0, 3, 3, 19]), src.reshape(-1)[:4], accumulate=flag)
        return y
    # (scatter with duplicate indices: which write wins is unspecified, as in PyTorch)
    traceable = kind != "masked_select" and not (kind == "scatter_reduce" and reduce_ == "prod")
    return fn, [x, src], dict(kind=kind, reduce=reduce_, flag=flag, dt=dt), traceable, \
        kind not in ("scatter", "put_") or flag


@case
def inplace_views(r):
    kind = int(r.integers(8))

    def fn(lib, x):
        y = x * 1
        if kind == 0:
            y.t().mul_(2)[0].add_(1)
        elif kind == 1:
            y.diagonal().add_(10)
        elif kind == 2:
            y.unfold(0, 2, 2).mul_(3)
        elif kind == 3:
            y[:, ::2].transpose(0, 1).sub_(1)
        elif kind == 4:
            y.diagonal(1).copy_(lib.arange(3).to(y.dtype))
        elif kind == 5:
            y.view(2, 8)[1].zero_()
        elif kind == 6:
            y.flip(0)[0].fill_(3)    # (flip copies: y keeps its values)
        else:
            y.narrow(1, 1, 2).clamp_(-0.5, 0.5)
        return y
    return fn, [_arr(r, _pick(r, ["float32", "float64"]), (4, 4))], dict(kind=kind), True, True


def _to(lib, a, grad):
    t = lib.tensor(a)
    return t.requires_grad_(True) if grad and a.dtype.kind == "f" else t


def _weighted(lib, outs):
    return sum((o * (lib.arange(o.numel(), dtype=o.dtype).reshape(tuple(o.shape)) % 3 - 1)).sum() for o in outs)


def _same(got, want, what, tol=None):
    g, w = got.detach().numpy(), want.detach().numpy()
    assert g.shape == w.shape and str(g.dtype) == str(w.dtype), (what, g.shape, w.shape, g.dtype, w.dtype)
    if w.dtype.kind == "f":
        tol = tol or (1e-5 if w.dtype == np.float32 else 1e-10)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(g, w, err_msg=what)


def _check(seed):
    r = np.random.default_rng(seed)
    make = CASES[int(r.integers(len(CASES)))]
    fn, arrays, info, traceable, differentiable = make(r)
    grad = differentiable and bool(r.integers(2))
    tx = [_to(torch, a, grad) for a in arrays]
    try:
        want = fn(torch, *tx)
    except (RuntimeError, TypeError, ValueError, IndexError):
        return   # (what PyTorch refuses)
    want = want if isinstance(want, tuple) else (want,)
    wf = [o for o in want if o.requires_grad]
    try:
        if wf:
            _weighted(torch, wf).backward()
    except RuntimeError:   # (no derivative in PyTorch: floor_divide)
        wf = []
    for captured in (False, True) if traceable else (False,):
        what = f"seed {seed} {make.__name__} {info} grad={grad} captured={captured}"
        jx = [_to(tj, a, grad) for a in arrays]
        f = tj.trace(lambda *a: fn(tj, *a), compiler="interpret") if captured else (lambda *a: fn(tj, *a))
        got = f(*jx)
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(want), what
        for k, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{what}: output {k}")
        gf = [o for o in got if o.requires_grad]
        if wf:
            assert len(gf) == len(wf), what
            _weighted(tj, gf).backward()
            for k, (a, b) in enumerate(zip(jx, tx)):
                assert (a.grad is None) == (b.grad is None), f"{what}: gradient {k}"
                if b.grad is not None:
                    _same(a.grad, b.grad, f"{what}: gradient {k}", tol=1e-4)


@pytest.mark.parametrize("block", range(4))
def test_random_ops_match_torch(block):
    for seed in range(block * 100, block * 100 + 100):
        _check(seed)
