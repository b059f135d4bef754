"""Differential fuzzing of aliasing in compiled functions against PyTorch: a seeded body
writes in place into its arguments through chains of views (select, slice, transpose,
view, diagonal, narrow, unsqueeze) and returns arguments, views of them and new values.
After each call (plain, ``dynamic=True``, eagerly) the arguments, the results, which
results are the arguments or views of them (``is``, ``_base``), a write through each
returned tensor, the version counters and the gradients must be PyTorch's."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

VIEWS = [  # (name, ranks it applies to, the view)
    ("row", (2,), lambda t: t[1]), ("col", (2,), lambda t: t[:, 1]), ("t", (2,), lambda t: t.t()),
    ("flat", (2,), lambda t: t.view(-1) if t.is_contiguous() else t.reshape(-1)[:0]),
    ("tail", (1, 2), lambda t: t[1:]), ("diag", (2,), lambda t: t.diagonal()),
    ("narrow", (2,), lambda t: t.narrow(1, 0, 2)), ("unsq", (1,), lambda t: t.unsqueeze(0)),
    ("step", (1,), lambda t: t[::2]),
]
WRITES = [
    ("add_", lambda v: v.add_(1)), ("mul_", lambda v: v.mul_(2)), ("zero_", lambda v: v.zero_()),
    ("fill_", lambda v: v.fill_(3)), ("clamp_", lambda v: v.clamp_(max=2.5)), ("neg_", lambda v: v.neg_()),
    ("copy_", lambda v: v.copy_(v * 0 + 7)), ("setitem", lambda v: v.__setitem__(0, -5.0)),
]


def _chain(r, rank):
    chain = []
    for _ in range(int(r.integers(0, 3))):
        fits = [v for v in VIEWS if rank in v[1]]
        name, _, f = fits[int(r.integers(len(fits)))]
        chain.append((name, f))
        rank = {"row": 1, "col": 1, "flat": 1, "diag": 1, "unsq": 2}.get(name, rank)
    return chain


def _case(r):
    steps = [(int(r.integers(2)), _chain(r, 2), WRITES[int(r.integers(len(WRITES)))]) for _ in range(int(r.integers(1, 4)))]
    rets = [(int(r.integers(2)), _chain(r, 2), int(r.integers(4))) for _ in range(int(r.integers(1, 4)))]

    def body(x, y):
        args = (x, y)
        for which, chain, (_, write) in steps:
            v = args[which]
            for _, f in chain:
                v = f(v)
            if v.numel():
                write(v)
        out = []
        for which, chain, kind in rets:
            v = args[which]
            for _, f in chain:
                v = f(v)
            out.append(v * 1 if kind == 0 else v)
        return tuple(out)
    info = [(w, [c[0] for c in ch], op[0]) for w, ch, op in steps], [(w, [c[0] for c in ch], k) for w, ch, k in rets]
    return body, info


def _run(lib, f, grad):
    w = lib.arange(12.0).reshape(3, 4).requires_grad_(grad)
    x = w * 1 if grad else w
    y = lib.arange(12.0).reshape(3, 4) * -1
    vx, vy = x._version, y._version
    out = f(x, y)
    ident = [(o is x, o is y, o._base is x or (o._base is not None and o._base is x._base and x._base is not None),
              o._base is y) for o in out]
    vals = [o.detach().numpy().copy() for o in out]
    bumped = (x._version > vx, y._version > vy)
    grads = None
    if grad:
        sum(((o * (lib.arange(o.numel(), dtype=o.dtype).reshape(o.shape) % 3)).sum() for o in out
             if o.requires_grad), x.sum() * 0.5).backward()
        grads = w.grad.numpy().copy()
    for o in out:
        if not o.requires_grad:
            o.add_(100)     # (a write through each result: reaches the argument it views)
    return vals, ident, bumped, x.detach().numpy().copy(), y.numpy().copy(), grads


@pytest.mark.parametrize("block", range(3))
def test_compiled_writes_through_views_of_arguments_alias_as_eagerly(block):
    for seed in range(block * 40, block * 40 + 40):
        body, info = _case(np.random.default_rng(seed))
        grad = seed % 3 == 0
        try:
            want = _run(torch, body, grad)
        except RuntimeError:
            continue    # (PyTorch refuses some writes under autograd: covered elsewhere)
        for mode in ("eager", "compiled", "dynamic"):
            f = body if mode == "eager" else tj.compile(body, dynamic=mode == "dynamic")
            got = _run(tj, f, grad)
            what = f"seed {seed} {mode} grad={grad} {info}"
            for k, (g, w) in enumerate(zip(got, want)):
                if isinstance(w, list) and w and isinstance(w[0], np.ndarray):
                    for a, b in zip(g, w):
                        np.testing.assert_array_equal(a, b, err_msg=what)
                elif isinstance(w, np.ndarray):
                    np.testing.assert_array_equal(g, w, err_msg=f"{what} part {k}")
                else:
                    assert g == w, (what, k, g, w)


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_compiled_module_returns_its_written_buffer_itself(dynamic):
    """A forward that updates a buffer in place and returns it (or a view of it) gives the
    buffer itself, as eagerly: writes through the result reach the module's state."""
    def build(lib):
        class M(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("ema", lib.zeros(4))

            def forward(self, x):
                self.ema.mul_(0.5).add_(x.sum(0) * 0.5)
                return x * 2, self.ema, self.ema[1:]
        return M()
    got = []
    for lib in (torch, tj):
        m = build(lib)
        f = tj.compile(m, dynamic=dynamic) if lib is tj else m
        for n in (2, 3, 2):
            y, e, v = f(lib.arange(4.0 * n).reshape(n, 4))
        assert e is m.ema and v._base is m.ema, lib.__name__
        v.add_(100)
        got.append((y.numpy(), m.ema.numpy().copy()))
    np.testing.assert_array_equal(got[1][0], got[0][0])
    np.testing.assert_array_equal(got[1][1], got[0][1])


@pytest.mark.parametrize("write", [False, True])
def test_contiguous_of_a_contiguous_argument_is_the_argument(write):
    """Eagerly ``x.contiguous()`` of a contiguous x is x: a compiled call returns x itself,
    so a write through the result reaches the argument."""
    def f(x):
        if write:
            x.mul_(2)
        return x.contiguous(), x * 1
    for lib, g in ((torch, f), (tj, tj.compile(f))):
        x = lib.arange(4.0)
        r, s = g(x)
        r.add_(10)
        assert r is x and s is not x, lib.__name__
        assert x.tolist() == [10.0 + (2 if write else 1) * k for k in range(4)]
