"""Differential fuzzing against PyTorch: seeded random small programs over shapes (0-size,
1-size, odd, 0-d), dtypes (float32/64, int64, bool), layouts (transposed, strided),
views and in-place ops, run eagerly and captured (``tj.trace``, the IR interpreter, so no
kernel compiles), compared with PyTorch's eager results: every intermediate value (an
in-place write through an alias changes earlier values too), the arguments after the
call, the gradients of a weighted sum of the float results, and the compile count (a
second call with new values of the same shapes captures nothing new).

A program is planned once with PyTorch as the oracle of which op applies to which value;
both libraries then run the same op table (their APIs agree). Tolerances: float32 1e-4,
float64 1e-9 (relative and absolute); other dtypes exactly."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

SHAPES = [(3, 4), (1, 4), (3, 1), (0, 4), (5,), (1,), (), (2, 3, 5), (2, 1, 3)]
DTYPES = ["float32", "float64", "int64", "bool"]


def _f(t):
    return t.dtype in (torch.float32, torch.float64) if isinstance(t, torch.Tensor) else t.dtype.is_floating_point


def _b(t):
    return (t.dtype == torch.bool) if isinstance(t, torch.Tensor) else t.dtype.name == "bool"


def _num(t):
    return not _b(t)


def _dims(t):
    return t.ndim > 0


def _bc(a, b):
    try:
        torch.broadcast_shapes(tuple(a.shape), tuple(b.shape))
        return True
    except RuntimeError:
        return False


def _into(a, b):   # b broadcasts into a's shape (an in-place op's operand)
    return _bc(a, b) and torch.broadcast_shapes(tuple(a.shape), tuple(b.shape)) == tuple(a.shape)


def _w(applies):
    """`applies` for an in-place op: its target must not be expanded (PyTorch refuses most
    writes there, and tracejit all of them, as read-only memory)."""
    return lambda x, *rest: 0 not in x.stride() and applies(x, *rest)


def _set(x, i, v):
    x[i] = v
    return x


# name -> (arity, applies(*operands), fn(lib, *operands, dim=...), takes a dim)
OPS = {
    "neg": (1, _num, lambda lib, x: -x, False),
    "abs": (1, _num, lambda lib, x: x.abs(), False),
    "sign": (1, _num, lambda lib, x: x.sign(), False),
    "exp": (1, _f, lambda lib, x: x.exp(), False),
    "tanh": (1, _f, lambda lib, x: x.tanh(), False),
    "sqrt_abs": (1, _f, lambda lib, x: x.abs().sqrt(), False),
    "floor": (1, _f, lambda lib, x: x.floor(), False),
    "relu": (1, _f, lambda lib, x: x.relu(), False),
    "not": (1, _b, lambda lib, x: ~x, False),
    "to_float": (1, lambda x: not _f(x), lambda lib, x: x.float(), False),
    "to_long": (1, _f, lambda lib, x: x.long(), False),
    "gt0": (1, _num, lambda lib, x: x > 0, False),
    "clamp": (1, _num, lambda lib, x: x.clamp(-1, 2), False),
    "add_s": (1, _num, lambda lib, x: x + 2, False),
    "mul_f": (1, _num, lambda lib, x: x * 0.5, False),
    "rem": (1, _num, lambda lib, x: x % 3, False),
    "add": (2, lambda a, b: _bc(a, b) and _num(a) and _num(b), lambda lib, a, b: a + b, False),
    "mul": (2, lambda a, b: _bc(a, b) and _num(a) and _num(b), lambda lib, a, b: a * b, False),
    "div": (2, lambda a, b: _bc(a, b) and _f(a) and _f(b), lambda lib, a, b: a / b, False),
    "maximum": (2, lambda a, b: _bc(a, b) and _num(a) and _num(b), lambda lib, a, b: lib.maximum(a, b), False),
    "lt": (2, lambda a, b: _bc(a, b) and _num(a) and _num(b), lambda lib, a, b: a < b, False),
    "where": (2, lambda a, b: _bc(a, b) and _num(a) and _num(b), lambda lib, a, b: lib.where(a > b, a, b), False),
    "sum": (1, lambda x: True, lambda lib, x: x.sum(), False),
    "sum_dim": (1, _dims, lambda lib, x, dim: x.sum(dim), True),
    "mean_keep": (1, lambda x: _f(x) and _dims(x), lambda lib, x, dim: x.mean(dim, keepdim=True), True),
    "amax": (1, lambda x: _num(x) and _dims(x) and x.numel() > 0, lambda lib, x, dim: x.amax(dim), True),
    "argmax": (1, lambda x: _num(x) and _dims(x) and x.numel() > 0, lambda lib, x, dim: x.argmax(dim), True),
    "cumsum": (1, lambda x: _num(x) and _dims(x), lambda lib, x, dim: x.cumsum(dim), True),
    "softmax": (1, lambda x: _f(x) and _dims(x), lambda lib, x, dim: x.softmax(dim), True),
    "log_softmax": (1, lambda x: _f(x) and _dims(x), lambda lib, x, dim: x.log_softmax(dim), True),
    "any": (1, _dims, lambda lib, x, dim: x.any(dim), True),
    "t": (1, lambda x: x.ndim >= 2, lambda lib, x: x.transpose(0, -1), False),
    "flip": (1, _dims, lambda lib, x, dim: x.flip(dim), True),
    "reshape": (1, lambda x: True, lambda lib, x: x.reshape(-1), False),
    "unsqueeze": (1, lambda x: True, lambda lib, x: x.unsqueeze(0), False),
    "squeeze": (1, lambda x: True, lambda lib, x: x.squeeze(), False),
    "expand": (1, lambda x: _dims(x) and x.shape[0] == 1, lambda lib, x: x.expand(3, *x.shape[1:]), False),
    "slice": (1, _dims, lambda lib, x: x[1:], False),
    "step": (1, _dims, lambda lib, x: x[::2], False),
    "last": (1, lambda x: x.ndim > 1, lambda lib, x: x[..., :2], False),
    "index0": (1, lambda x: _dims(x) and x.shape[0] > 0, lambda lib, x: x[0], False),
    "contiguous": (1, lambda x: True, lambda lib, x: x.contiguous(), False),
    "clone": (1, lambda x: True, lambda lib, x: x.clone(), False),
    "detach": (1, lambda x: True, lambda lib, x: x.detach(), False),
    "cat": (2, lambda a, b: _dims(a) and a.ndim == b.ndim and a.dtype == b.dtype and a.shape[1:] == b.shape[1:],
            lambda lib, a, b: lib.cat([a, b]), False),
    "masked_fill": (1, _num, lambda lib, x: x.masked_fill(x > 0, 7), False),
    "add_": (1, _w(_num), lambda lib, x: x.add_(1), False),
    "mul_": (1, _w(_f), lambda lib, x: x.mul_(2), False),
    "clamp_": (1, _w(_num), lambda lib, x: x.clamp_(min=0), False),
    "zero_": (1, _w(lambda x: True), lambda lib, x: x.zero_(), False),
    "set0": (1, _w(lambda x: _dims(x) and x.shape[0] > 0), lambda lib, x: _set(x, 0, 5), False),
    "set_step": (1, _w(_dims), lambda lib, x: _set(x, slice(None, None, 2), 3), False),
    "set_mask": (1, _w(_num), lambda lib, x: _set(x, x > 1, 0), False),
    "copy_": (2, _w(_into), lambda lib, a, b: a.copy_(b), False),
    "add_t_": (2, _w(lambda a, b: _num(a) and _num(b) and _into(a, b) and (_f(a) or not _f(b))),
               lambda lib, a, b: a.add_(b), False),
    "set_mask_t": (2, _w(lambda a, b: a.shape == b.shape and _num(b) and _dims(a)),
                   lambda lib, a, b: _set(a, b > 0, b[b > 0]), False),
}
_NAMES = sorted(OPS)


def _input(r, lib, shape, dtype, layout):
    arr = (r.random(shape) > 0.5 if dtype == "bool" else r.integers(-3, 4, shape) if dtype == "int64"
           else r.standard_normal(shape).astype(dtype))
    if layout == "t":
        return lib.tensor(np.ascontiguousarray(arr.swapaxes(0, 1))).transpose(0, 1)
    if layout == "s":
        return lib.tensor(np.repeat(arr, 2, axis=-1))[..., ::2]
    return lib.tensor(arr)


def _inputs(seed, lib, grad):
    r = np.random.default_rng(seed)
    out = []
    for _ in range(2):
        shape = SHAPES[r.integers(len(SHAPES))]
        dtype = DTYPES[r.choice(4, p=[0.45, 0.2, 0.2, 0.15])]
        layout = str(r.choice(["c", "t", "s"], p=[0.6, 0.2, 0.2])) if len(shape) >= 2 else "c"
        x = _input(r, lib, shape, dtype, layout)
        out.append(x.detach().requires_grad_(True) if grad and dtype.startswith("float") else x)
    return out


def _plan(seed, steps=6):
    """[(op name, operand positions, dim)]: picked with PyTorch as the oracle."""
    r = np.random.default_rng(seed + 10_000)
    pool = _inputs(seed, torch, False)
    prog = []
    for _ in range(steps):
        for _attempt in range(40):
            name = _NAMES[r.integers(len(_NAMES))]
            arity, applies, fn, takes_dim = OPS[name]
            idx = [int(r.integers(len(pool))) for _ in range(arity)]
            xs = [pool[i] for i in idx]
            if not applies(*xs):
                continue
            dim = int(r.integers(-xs[0].ndim, xs[0].ndim)) if takes_dim else None
            try:
                out = fn(torch, *xs, **({"dim": dim} if takes_dim else {}))
            except RuntimeError:
                continue
            prog.append((name, idx, dim))
            pool.append(out)
            break
    return prog


def _run(lib, xs, prog):
    pool = list(xs)
    for name, idx, dim in prog:
        fn = OPS[name][2]
        pool.append(fn(lib, *[pool[i] for i in idx], **({} if dim is None else {"dim": dim})))
    return tuple(pool)


def _same(got, want, what):
    g, w = got.detach().numpy(), want.detach().numpy()
    assert g.shape == w.shape and str(g.dtype) == str(w.dtype), (what, g.shape, w.shape, g.dtype, w.dtype)
    if w.dtype.kind == "f":
        tol = 1e-4 if w.dtype == np.float32 else 1e-9
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(g, w, err_msg=what)


def _weighted(lib, outs):
    floats = [o for o in outs if o.requires_grad and _f(o)]   # (PyTorch: a float written into a bool keeps it)
    return sum(((o * (lib.arange(o.numel(), dtype=o.dtype).reshape(tuple(o.shape)) % 3 - 1)).sum()
                for o in floats), lib.zeros((), dtype=lib.float64)), len(floats)


def _check(seed, grad):
    prog = _plan(seed)
    leaves = _inputs(seed, torch, grad)
    xs = [x * 1 if x.requires_grad else x for x in leaves]   # (non-leaves: in-place is legal)
    want = _run(torch, xs, prog)
    loss, n_float = _weighted(torch, want) if grad else (None, 0)
    try:
        if n_float:
            loss.backward()
        torch_grads = [x.grad for x in leaves]
    except RuntimeError:   # (PyTorch saved a value a later step wrote: nothing to compare)
        torch_grads = None
    for captured in (False, True):
        f = tj.trace(lambda *a: _run(tj, a, prog), compiler="interpret") if captured else (
            lambda *a: _run(tj, a, prog))
        tleaves = _inputs(seed, tj, grad)
        txs = [x * 1 if x.requires_grad else x for x in tleaves]
        got = f(*txs)
        what = f"seed {seed} grad={grad} captured={captured} program {prog}"
        for k, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{what}: value {k}")
        if grad and torch_grads is not None:
            tloss, n = _weighted(tj, got)
            assert n == n_float, what
            if n:
                tloss.backward()
            for k, (tl, tg) in enumerate(zip(tleaves, torch_grads)):
                assert (tl.grad is None) == (tg is None), f"{what}: gradient {k}"
                if tg is not None:
                    _same(tl.grad, tg, f"{what}: gradient {k}")
        if captured:
            compiles = f.cache_stats()["compiles"]
            assert f.cache_stats()["eager_fallbacks"] == 0, (what, f.cache_stats()["fallback_reason"])
            f(*[x * 1 if x.requires_grad else x for x in _inputs(seed + 1_000_000, tj, grad)]
              if _shapes_agree(seed) else txs)
            assert f.cache_stats()["compiles"] == compiles, (what, f.cache_stats()["recompile_reasons"])


def _shapes_agree(seed):
    a, b = _inputs(seed, torch, False), _inputs(seed + 1_000_000, torch, False)
    return all(x.shape == y.shape and x.dtype == y.dtype and x.is_contiguous() == y.is_contiguous()
               for x, y in zip(a, b))


@pytest.mark.parametrize("grad", [False, True], ids=["values", "grads"])
@pytest.mark.parametrize("block", range(4))
def test_random_programs_match_torch(block, grad):
    for seed in range(block * 50, block * 50 + 50):
        _check(seed, grad)
