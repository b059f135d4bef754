"""Differential fuzzing of one compiled function called with batch sizes 1, 0, 7, 1, 3, 0
(size-1 specialization, an empty batch, symbolic dims with ``dynamic=True``) against
PyTorch: reductions (sum 0, prod 1, mean NaN, max of nothing refused), scans, norms,
losses, indexing, shape ops and size-dependent Python branches; values and gradients."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

OPS = {
    "sum": lambda lib, x: x.sum(0), "prod": lambda lib, x: x.prod(0), "mean": lambda lib, x: x.mean(0),
    "sum_all": lambda lib, x: x.sum(), "mean_all": lambda lib, x: x.mean(), "prod_all": lambda lib, x: x.prod(),
    "amax": lambda lib, x: x.amax(0), "max_dim": lambda lib, x: x.max(0)[0], "max_all": lambda lib, x: x.max(),
    "argmax": lambda lib, x: x.argmax(0), "var": lambda lib, x: x.var(0), "std_all": lambda lib, x: x.std(),
    "logsumexp": lambda lib, x: x.logsumexp(0), "softmax": lambda lib, x: x.softmax(0),
    "log_softmax": lambda lib, x: x.log_softmax(-1), "cumsum": lambda lib, x: x.cumsum(0),
    "cumprod": lambda lib, x: x.cumprod(0), "norm": lambda lib, x: x.norm(dim=0), "norm_all": lambda lib, x: x.norm(),
    "any": lambda lib, x: (x > 0).any(0), "count": lambda lib, x: lib.count_nonzero(x, 0),
    "gram": lambda lib, x: x.t() @ x, "outer_mm": lambda lib, x: x @ x.t(),
    "center": lambda lib, x: x.mean(0, keepdim=True) - x, "sort": lambda lib, x: x.sort(0)[0],
    "cat": lambda lib, x: lib.cat([x, x * 2], 0).sum(0), "stack": lambda lib, x: lib.stack([x, x], 1),
    "expand": lambda lib, x: x[:, None].expand(-1, 2, -1).sum(1), "flip": lambda lib, x: x.flip(0) * 2,
    "mask": lambda lib, x: x[x.sum(1) > 0], "nonzero": lambda lib, x: (x > 0).nonzero(),
    "layer_norm": lambda lib, x: lib.nn.functional.layer_norm(x, (3,)),
    "batch_norm": lambda lib, x: lib.nn.functional.batch_norm(x, None, None, lib.ones(3) * 2, lib.ones(3),
                                                              training=True),
    "linear": lambda lib, x: lib.nn.functional.linear(x, lib.ones(2, 3)), "min_dim": lambda lib, x: x.min(1)[0],
    "reshape": lambda lib, x: x.reshape(-1, 3).sum(), "branch": lambda lib, x: x * 2 if x.shape[0] > 1 else x - 1,
    "where": lambda lib, x: lib.where(x > 0, x, 0.5), "clamp": lambda lib, x: x.clamp(min=x.mean(0)),
    "median": lambda lib, x: x.median(0)[0], "cummax": lambda lib, x: x.cummax(0)[0],
    "std_mean": lambda lib, x: lib.std_mean(x, 0)[1], "diff": lambda lib, x: lib.diff(x, dim=0),
    "einsum": lambda lib, x: lib.einsum("ij,ij->j", x, x),
    "cross_entropy": lambda lib, x: lib.nn.functional.cross_entropy(x, lib.zeros(x.shape[0], dtype=lib.int64)),
    "nll_sum": lambda lib, x: lib.nn.functional.cross_entropy(x, lib.zeros(x.shape[0], dtype=lib.int64),
                                                             reduction="sum"),
    "mse": lambda lib, x: lib.nn.functional.mse_loss(x, x * 0), "repeat": lambda lib, x: x.repeat(2, 1),
    "roll": lambda lib, x: x.roll(1, 0), "pad": lambda lib, x: lib.nn.functional.pad(x, (1, 1, 1, 0)),
    "gather": lambda lib, x: x.gather(1, lib.zeros(x.shape[0], 1, dtype=lib.int64)),
    "index_add": lambda lib, x: lib.zeros(2, 3).index_add(0, lib.zeros(x.shape[0], dtype=lib.int64), x),
    "conv1d": lambda lib, x: lib.nn.functional.conv1d(x[:, None, :], lib.ones(2, 1, 2)),
    "conv2d": lambda lib, x: lib.nn.functional.conv2d(x[:, None, :, None].expand(-1, 2, 3, 2), lib.ones(1, 2, 2, 2)),
    "group_norm": lambda lib, x: lib.nn.functional.group_norm(x[:, None, :].expand(-1, 2, 3), 2),
    "instance_norm": lambda lib, x: lib.nn.functional.instance_norm(x[:, None, :]),
}
SIZES = (1, 0, 7, 1, 3, 0)


def _run(lib, f, a):
    x = lib.tensor(a, requires_grad=True)
    try:
        y = f(x)
    except (RuntimeError, ValueError, IndexError) as e:
        return e
    if y.requires_grad:
        (y * 1.5).sum().backward()
    return y.detach().numpy(), None if x.grad is None else x.grad.numpy()


@pytest.mark.parametrize("name", sorted(OPS))
def test_compiled_function_called_with_sizes_1_0_7_1(name):
    op = OPS[name]
    for kw in ({}, {"dynamic": True})[sorted(OPS).index(name) % 2:][:1]:   # (half of each, for time)
        f = tj.compile(lambda x: op(tj, x), **kw)
        for n in SIZES:
            a = np.random.default_rng(n).standard_normal((n, 3)).astype("float32")
            want = _run(torch, lambda x: op(torch, x), a)
            got = _run(tj, f, a)
            what = f"{name} {kw} n={n}"
            if isinstance(want, Exception):
                assert isinstance(got, Exception), (what, want)
                continue
            assert not isinstance(got, Exception), (what, got)
            for g, w in zip(got, want):
                assert (g is None) == (w is None), what
                if w is not None:
                    assert g.shape == w.shape and g.dtype == w.dtype, (what, g.shape, w.shape, g.dtype, w.dtype)
                    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=what)
