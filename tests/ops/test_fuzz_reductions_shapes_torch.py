"""Differential fuzzing against PyTorch of reductions (dim tuples, negative dims, keepdim,
empty dims, correction, nan and inf entries), shape ops (expand, movedim, unflatten,
tensor_split, chunk, repeat, tile, roll over several dims, tril/triu offsets, diag_embed,
splits) and einsum equations (repeated indices, ellipsis, broadcasting), eagerly and
captured: values and the gradients of float inputs; empty-dim min/max/argmax/median/mode
raise IndexError as PyTorch's do."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

SHAPES = [(3, 4), (2, 3, 4), (0, 3), (4,), (1, 3, 1), (), (2, 0, 3)]
REDUCTIONS = ["sum", "mean", "amax", "amin", "nansum", "logsumexp", "std", "var", "prod", "argmax", "max",
              "aminmax", "cumsum", "norm"]
SHAPE_OPS = {
    "expand": lambda lib, x, k: x.unsqueeze(0).expand(2, *[-1] * x.ndim),
    "movedim": lambda lib, x, k: lib.movedim(x, (0, -1), (-1, 0)) if x.ndim > 1 else x,
    "unflatten": lambda lib, x, k: x.unflatten(-1, (2, -1)) if x.shape[-1] % 2 == 0 else x.unflatten(-1, (1, -1)),
    "tensor_split": lambda lib, x, k: x.tensor_split(k + 1, -1) if k % 2 else x.tensor_split([1, k + 1], 0),
    "chunk": lambda lib, x, k: x.chunk(k + 1, -1),
    "repeat": lambda lib, x, k: x.repeat(*([k % 3 + 1] * (x.ndim + 1))),
    "tile": lambda lib, x, k: x.tile((k % 3 + 1,) * (k % 4 + 1)),
    "roll": lambda lib, x, k: x.roll((k, -k - 1), (0, -1)) if x.ndim > 1 else x.roll(k),
    "tril": lambda lib, x, k: x.tril(k - 2) if x.ndim >= 2 else x,
    "triu": lambda lib, x, k: x.triu(2 - k) if x.ndim >= 2 else x,
    "diag_embed": lambda lib, x, k: lib.diag_embed(x, k % 3 - 1, 0, -1),
    "split": lambda lib, x, k: x.split([1, x.shape[-1] - 1], -1) if x.shape[-1] else x.split(1, 0),
    "flip": lambda lib, x, k: x.flip((0, -1)),
    "rot90": lambda lib, x, k: x.rot90(k, (0, -1)) if x.ndim >= 2 else x,
    "repeat_interleave": lambda lib, x, k: x.repeat_interleave(k % 3 + 1, dim=-1),
}
EINSUM = [("ii->i", [(3, 3)]), ("ii", [(3, 3)]), ("...ij,...jk->...ik", [(2, 2, 3), (3, 4)]), ("iij->j", [(2, 2, 3)]),
          ("i,j->ij", [(3,), (4,)]), ("...i,...i->...", [(2, 3, 4), (4,)]), ("ij,ij,ij->i", [(2, 3)] * 3),
          ("ijj->i", [(2, 3, 3)]), ("a...b,b...->a...", [(2, 3, 4), (4, 3)]), ("ij,jk->ik", [(2, 0), (0, 3)]),
          ("bij,bj->bi", [(1, 2, 3), (4, 3)]), ("ji,j->i", [(1, 3), (1,)])]


def _array(r, dt, shape, special=True):
    if dt == "int64":
        return np.asarray(r.integers(-5, 6, shape), dtype=dt)
    a = np.asarray(r.standard_normal(shape), dtype=dt)
    if r.random() < 0.2 and a.size and special:
        a.flat[int(r.integers(a.size))] = [np.nan, np.inf, -np.inf][int(r.integers(3))]
    return a


def _case(r):
    kind = ["reduce", "shape", "einsum"][int(r.integers(3))]
    dt = ["float32", "float64", "int64"][int(r.integers(3))]
    if kind == "einsum":
        eq, shapes = EINSUM[int(r.integers(len(EINSUM)))]
        return (lambda lib, *xs: lib.einsum(eq, *xs)), [_array(r, dt.replace("int64", "float64"), s) for s in shapes], eq
    if kind == "shape":
        name, k = sorted(SHAPE_OPS)[int(r.integers(len(SHAPE_OPS)))], int(r.integers(0, 4))
        shape = [(2, 3, 4), (4, 6), (6,), (1, 3, 1), (3, 0, 2)][int(r.integers(5))]
        return (lambda lib, x: SHAPE_OPS[name](lib, x, k)), [_array(r, dt, shape)], (name, k, shape)
    op, shape = REDUCTIONS[int(r.integers(len(REDUCTIONS)))], SHAPES[int(r.integers(len(SHAPES)))]
    nd = len(shape)
    dims = tuple(int(d) - nd * int(r.integers(2)) for d in r.choice(nd, int(r.integers(1, nd + 1)), replace=False)) \
        if nd else ()
    keep, corr = bool(r.integers(2)), [0, 1, 2][int(r.integers(3))]

    def fn(lib, x):
        if op in ("mean", "std", "var", "logsumexp", "norm") and not x.dtype.is_floating_point:
            x = x.double()
        if op in ("std", "var"):
            return getattr(x, op)(dim=dims or None, correction=corr, keepdim=keep)
        if op == "norm":
            return lib.linalg.vector_norm(x, [2, 1, 0, 3][corr], dim=dims or None, keepdim=keep)
        if op in ("prod", "argmax", "max", "cumsum"):
            d = dims[0] if dims else 0
            out = getattr(x, op)(d) if op == "cumsum" else getattr(x, op)(d, keepdim=keep)
            return out[0] if op == "max" else out
        if op == "aminmax":
            return tuple(lib.aminmax(x, dim=dims[0] if dims and corr else None, keepdim=keep))
        return getattr(x, op)(dim=dims, keepdim=keep)
    # (an inf in a row: PyTorch's var gradient is (x - inf) * 2 / (n - c), ours NaN)
    return fn, [_array(r, dt, shape, op not in ("std", "var"))], (op, shape, dims, keep, corr)


def _run(lib, fn, arrays, captured):
    xs = [lib.tensor(a).requires_grad_(a.dtype.kind == "f") for a in arrays]
    f = tj.trace(lambda *a: fn(tj, *a), compiler="interpret") if captured else (lambda *a: fn(lib, *a))
    out = f(*xs)
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    grads = [o for o in out if o.requires_grad]
    if grads:
        sum((o * (lib.arange(o.numel(), dtype=o.dtype).reshape(o.shape) % 3 - 1)).sum() for o in grads).backward()
    return out + [x.grad for x in xs]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("captured", [False, True])
def test_random_reductions_shapes_einsum_match_torch(captured):
    for seed in range(600 if not captured else 150):
        r = np.random.default_rng(seed)
        fn, arrays, info = _case(r)
        try:
            want = _run(torch, fn, arrays, False)
        except (RuntimeError, IndexError):
            with pytest.raises((RuntimeError, IndexError)):
                _run(tj, fn, arrays, captured)
            continue
        got = _run(tj, fn, arrays, captured)
        assert len(got) == len(want), (seed, info)
        for k, (g, w) in enumerate(zip(got, want)):
            assert (g is None) == (w is None), (seed, info, k)
            if w is not None:
                assert tuple(g.shape) == tuple(w.shape), (seed, info, k, g.shape, w.shape)
                np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=1e-4, atol=1e-5,
                                           equal_nan=True, err_msg=f"seed {seed} {info} result {k}")


@pytest.mark.parametrize("call", [lambda lib, e: e.min(0), lambda lib, e: e.amax(0), lambda lib, e: e.argmax(0),
                                  lambda lib, e: e.median(0), lambda lib, e: e.nanmedian(0), lambda lib, e: e.mode(0),
                                  lambda lib, e: lib.aminmax(e, dim=0)])
def test_empty_dim_selections_raise_index_error(call):
    with pytest.raises(IndexError):
        call(torch, torch.zeros(0, 3))
    with pytest.raises(IndexError, match="dim 0"):
        call(tj, tj.zeros(0, 3))


def test_aminmax_keepdim_without_dim_keeps_every_dim():
    x = np.arange(6).reshape(2, 3)
    for lib in (torch, tj):
        lo, hi = lib.aminmax(lib.tensor(x), keepdim=True)
        assert tuple(lo.shape) == (1, 1) and (int(lo), int(hi)) == (0, 5)


def test_diag_embed_keeps_inf_on_its_diagonal():
    x = np.array([[1.0, np.inf, np.nan], [2.0, -np.inf, 0.5]])
    for offset in (-1, 0, 2):
        want = torch.diag_embed(torch.tensor(x), offset).numpy()
        got = tj.diag_embed(tj.tensor(x), offset).numpy()
        np.testing.assert_array_equal(got, want)
