"""One ``tj.compile``d function called again and again with what its cache has not seen:
new dtypes, new ranks, transposed / strided / expanded arguments and arguments that alias
each other (``f(x, x)``, ``f(base[1:], base[:-1])``), with and without gradients. After
every call the results, the arguments (an in-place body writes one) and the gradients
equal eager PyTorch's: a cache entry is never reused for a call it does not fit.
Tolerances: 1e-5 (float32 sums)."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _elementwise(lib, x, y):
    a = (x * 2 + y).relu()
    return a.sum(-1), (x - y).abs().amax(-1, keepdim=True), a.transpose(0, -1)


def _inplace(lib, x, y):
    x.mul_(2).add_(y)
    return x.sum(), y * 1


def _views(lib, x, y):
    return x[..., :2] + y[..., :2], x.reshape(-1)[:3] * 1


def _rows(lib, x, y):
    return x.softmax(-1) * y, (x * y).mean(0), x.cumsum(-1)


def _integer(lib, x, y):
    return x // 2 + y % 3, (x > y).sum(), lib.where(x > 0, x, y)


BODIES = [_elementwise, _inplace, _views, _rows, _integer]
SHAPES = [(3, 4), (2, 3, 4), (4,), (5, 4), (1, 4), (2, 1, 3, 4)]


def _make(lib, r, layout, shape, dtype):
    a = (r.integers(-4, 5, shape) if dtype.startswith("int") else r.standard_normal(shape)).astype(dtype)
    if layout == "t" and len(shape) >= 2:
        return lib.tensor(np.ascontiguousarray(a.swapaxes(0, -1))).transpose(0, -1)
    if layout == "s":
        return lib.tensor(np.repeat(a, 2, axis=-1))[..., ::2]
    if layout == "e":
        return lib.tensor(a[..., :1].copy()).expand(*shape)
    return lib.tensor(a)


def _arguments(lib, seed, call, body, grad):
    r = np.random.default_rng(seed * 100 + call)
    dtype = str(r.choice(["float32", "float64", "int64", "int32"] if body is _integer else ["float32", "float64"]))
    shape = SHAPES[int(r.integers(len(SHAPES)))]
    layout = str(r.choice(["c", "t", "s"] + ([] if body is _inplace else ["e"])))
    alias = int(r.integers(4))   # 0: distinct, 1: f(x, x), 2: overlapping rows of one buffer, 3: y broadcast
    x = _make(lib, r, layout, shape, dtype)
    leaf = None
    if grad and dtype.startswith("float") and body not in (_inplace, _integer):   # (PyTorch: no derivative of //)
        leaf = x.detach().clone().requires_grad_(True)
        x = leaf.transpose(0, -1).contiguous().transpose(0, -1) if layout == "t" else leaf * 1
    if alias == 1:
        y = x
    elif alias == 2 and shape[0] > 1:
        base = _make(lib, r, "c", (shape[0] + 1,) + shape[1:], dtype)
        x, y = base[1:], base[:-1]
        leaf = None
    elif alias == 3:
        y = _make(lib, r, "c", shape[-1:], dtype)
    else:
        y = _make(lib, r, "c", shape, dtype)
    return x, y, leaf, dict(dtype=dtype, shape=shape, layout=layout, alias=alias)


def _close(got, want, what):
    g, w = got.detach().numpy(), want.detach().numpy()
    assert g.shape == w.shape and str(g.dtype) == str(w.dtype), (what, g.shape, w.shape, g.dtype, w.dtype)
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, equal_nan=True, err_msg=what)


def _check(seed):
    r = np.random.default_rng(seed)
    body, grad = BODIES[int(r.integers(len(BODIES)))], bool(r.integers(2))
    compiled = tj.compile(lambda x, y: body(tj, x, y))
    for call in range(6):
        results = []
        for lib in (torch, tj):
            x, y, leaf, info = _arguments(lib, seed, call, body, grad)
            try:
                outs = body(torch, x, y) if lib is torch else compiled(x, y)
            except RuntimeError:   # (PyTorch refuses an in-place write read through an overlap)
                assert lib is torch and info["alias"] == 2
                break
            if leaf is not None:
                sum((o * (lib.arange(o.numel(), dtype=o.dtype).reshape(o.shape) % 3 - 1)).sum()
                    for o in outs if o.dtype.is_floating_point).backward()
            results.append((outs, x, y, None if leaf is None else leaf.grad))
        if len(results) < 2:
            continue
        what = f"seed {seed} {body.__name__} call {call} {info}"
        (w_out, wx, wy, wg), (g_out, gx, gy, gg) = results
        for k, (g, w) in enumerate(zip(g_out, w_out)):
            _close(g, w, f"{what}: output {k}")
        _close(gx, wx, f"{what}: x after the call")
        _close(gy, wy, f"{what}: y after the call")
        assert (gg is None) == (wg is None), what
        if wg is not None:
            _close(gg, wg, f"{what}: gradient")


@pytest.mark.parametrize("block", range(2))
def test_compiled_function_called_with_new_dtypes_ranks_layouts_and_aliases(block):
    for seed in range(block * 15, block * 15 + 15):
        _check(seed)
