"""Inputs the tests share: seeded random tensors, the GELU chain, the fused groups a
function captures into, and a packed recurrent layer's held states.

``from inputs import T, gelu, fused_groups`` (the tests directory is on ``sys.path``, see conftest).
"""
from __future__ import annotations

import numpy as np

import tracejit as tj


def T(*shape, seed=0, rg=True, dtype=np.float32, low=None):
    """A standard-normal tensor of `shape` (|x| + low when `low` is given), requiring grad
    unless ``rg=False``. Different shapes draw different data for the same seed."""
    a = np.random.default_rng(seed + 13 * len(shape)).standard_normal(shape).astype(dtype)
    if low is not None:
        a = np.abs(a) + low
    t = tj.tensor(a)
    return t.requires_grad_() if rg else t


def gelu(x, y, z):
    """The GELU chain: a = x*y + z; 0.5*a*(1 + tanh(0.79788456*(a + 0.044715*a**3)))."""
    a = x * y + z
    return 0.5 * a * (1 + tj.tanh(0.79788456 * (a + 0.044715 * a ** 3)))


def fused_groups(fn, *avals):
    """The fused groups of `fn` captured on abstract inputs, each ``(shape, dtype name)``,
    after the IR passes: what the loop nest and the renderers are given."""
    from tracejit import dtypes
    from tracejit.compiler.fusion import Group, partition
    from tracejit.jit.passes import optimize
    from tracejit.jit.tracer import TraceContext
    from tracejit.ops.registry import Aval
    ctx = TraceContext()
    with ctx:
        ts = [ctx.new_input(Aval(s, dtypes.as_dtype(dt)), f"a{i}") for i, (s, dt) in enumerate(avals)]
        out = fn(*ts)
    outs = out if isinstance(out, tuple) else (out,)
    g = optimize(ctx.graph([ctx.atom(o) for o in outs]))
    return [i for i in partition(g) if isinstance(i, Group)]


def captured_graph(fn, *args):
    """The IR graph `fn` captures (traced on `args`, after the passes)."""
    cf = tj.trace(fn, compiler="interpret")
    cf(*args)
    (entry,) = cf.entries
    return entry.graph


def op_names(g) -> list:
    """The primitive names of `g`'s equations, in order."""
    return [e.prim.name for e in g.eqns]


def training_variant(cf, only: bool = True):
    """The compiled training variant (forward plan, backward plan, ...) of `cf`'s last entry;
    with `only`, asserting there is exactly one."""
    prog = cf._entries[-1].executor
    if only:
        assert len(prog._train) == 1, "expected one training variant"
    return next(iter(prog._train.values()))


def activation(rng, shape, dtype, channel_major: bool = False):
    """A BatchNorm-style input (mean ~5, std ~3) of `shape`; ``channel_major``: in (C, N, ...)
    memory seen as (N, C, ...), as convolution outputs are."""
    x = (rng.standard_normal(shape) * 3 + 5).astype(dtype)
    if channel_major:
        x = np.ascontiguousarray(np.swapaxes(x, 0, 1)).swapaxes(0, 1)
    return x


def same_bits_under_uneven_split(run, cuts, calls: int) -> None:
    """``run()`` (a tuple of float32 arrays) gives the same bits when sharepool.split is
    replaced by a fixed uneven cut of its range: `cuts` maps the range's length n to the
    (lo, hi) parts, which may be empty. Kernels that split their work over the cores must
    not depend on where it is cut, so this holds whatever the core count. `calls`: how
    many splits `run` makes (each kernel went through the cut)."""
    import pytest
    from tracejit.compiler.cpu.runtime import sharepool
    whole = run()
    seen = []

    def uneven(fn, n, work):
        seen.append(n)
        for lo, hi in cuts(n):
            fn(lo, hi)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sharepool, "split", uneven)
        parts = run()
    assert len(seen) == calls, seen
    for a, b in zip(whole, parts):
        np.testing.assert_array_equal(a.view(np.int32), b.view(np.int32))


def packed_hold(m, new, prev, batch_sizes, t):
    """A packed layer's step t: the sequences without a step t keep their state."""
    if batch_sizes is None or batch_sizes[t] == new.shape[1]:
        return new
    n = batch_sizes[t]
    if m is np:
        return np.concatenate([new[:, :n], prev[:, n:]], 1)
    return m.cat([new[:, :n], prev[:, n:]], 1)


def first_max_grad(g, x, kernel, stride, padding, dilation) -> np.ndarray:
    """The max-pool gradient found again from x, re-reading it: g added at each window's
    first maximum in row-major window order (a NaN window: its last NaN, as PyTorch's),
    window offset by window offset: the reference the record's scatter is held against."""
    from tracejit.ops.pooling_prim import _fill_low, _max_pool_impl, _padded, _views
    n, c, h, w = x.shape
    ph, pw = padding
    out = _max_pool_impl(np, x, kernel, stride, padding, dilation)
    xpad = _padded(np, x, padding, _fill_low(x.dtype))
    gx = np.zeros((n, c, h + 2 * ph, w + 2 * pw), g.dtype)
    xs = list(_views(xpad, kernel, stride, dilation, out.shape[2], out.shape[3]))
    gs = _views(gx, kernel, stride, dilation, out.shape[2], out.shape[3])
    nan = np.isnan(out)
    last_nan = np.full(out.shape, -1)
    for o, xv in enumerate(xs):
        last_nan[np.isnan(xv)] = o
    taken = np.zeros(out.shape, bool)
    for o, (xv, gv) in enumerate(zip(xs, gs)):
        hit = np.where(nan, last_nan == o, xv == out) & ~taken
        taken |= hit
        gv += g * hit    # overlapping windows accumulate, in window order
    return gx[:, :, ph:ph + h, pw:pw + w]


def pool_input(kind: str, dtype, shape=(3, 4, 9, 11), seed=7) -> np.ndarray:
    """An NCHW array for pooling tests: standard normal ("normal"), many equal maxima
    ("ties"), NaNs in a few windows ("nan"), rows of -inf ("-inf"), or channel-major memory
    under an NCHW view as eager convolutions leave it ("channel-major")."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    if kind == "ties":
        x = np.maximum(np.round(x), 0)         # ReLU'd integers
    elif kind == "nan":
        x[0, 1, 2, 3] = x[1, 2, 4, 4] = x[1, 2, 4, 5] = np.nan
    elif kind == "-inf":
        x[:, :, :4, :] = -np.inf
    elif kind == "channel-major":
        x = np.ascontiguousarray(x.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)
    return x
