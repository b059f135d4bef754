"""The harness of the nn layer fuzzers (tests/nn/test_fuzz_*layers_torch.py): a case draws a
layer configuration from a seeded generator and returns (make(lib) -> module, input arrays,
a description); `check` builds the PyTorch module, loads its state_dict into tracejit's by
name, and compares outputs, the gradients of every input and parameter, and the state
after the call (running statistics, max_norm renormalized rows), eager and compiled, in
float32 or float64, in train or eval mode. A configuration PyTorch refuses must be
refused by tracejit too."""
from __future__ import annotations

import numpy as np

import tracejit as tj


def draw(r, lo: int, hi: int) -> int:
    return int(r.integers(lo, hi))


def pick(r, options):
    return options[int(r.integers(len(options)))]


def normal(r, *shape):
    return r.standard_normal(shape)


def weighted(lib, outs):
    """A scalar that weighs each output element by -1, 0 or 1 (float outputs only)."""
    return sum((o * (lib.arange(o.numel(), dtype=o.dtype).reshape(tuple(o.shape)) % 3 - 1)).sum()
               for o in outs if o.dtype.is_floating_point)


def _close(got, want, tol, what):
    g, w = (got.detach().numpy() if hasattr(got, "detach") else got), want.detach().numpy()
    assert g.shape == w.shape and str(g.dtype) == str(w.dtype), (what, g.shape, w.shape, g.dtype, w.dtype)
    np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True, err_msg=what)


def _tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _run(lib, make, arrays, dtype, training, state=None, compiled=False, backward=True):
    m = make(lib).to(getattr(lib, dtype))
    m.train(training)
    if state is not None:
        m.load_state_dict({k: lib.tensor(v) for k, v in state.items()})
    xs = [lib.tensor(a, dtype=getattr(lib, dtype), requires_grad=True) for a in arrays]
    out = _tuple((tj.compile(m) if compiled else m)(*xs))
    graded = [o for o in out if o.requires_grad]
    if graded and backward:
        weighted(lib, graded).backward()
    return m, xs, out, graded


def check(torch, cases: dict, seed: int, compiled: bool, input_grads=lambda info: True) -> None:
    """One seeded configuration of `cases`, eager (and `compiled`) against PyTorch."""
    r = np.random.default_rng(seed)
    name = pick(r, sorted(cases))
    make, arrays, info = cases[name](r)
    dtype, training = pick(r, ["float32", "float64"]), bool(r.integers(2))
    tol = 2e-4 if dtype == "float32" else 1e-9
    what = f"seed {seed} {name} {dtype} training={training} {info}"
    torch.manual_seed(seed)
    init = {k: v.detach().numpy().copy() for k, v in make(torch).to(getattr(torch, dtype)).state_dict().items()}
    try:
        tm, tx, want, wgraded = _run(torch, make, arrays, dtype, training, init, backward=False)
    except (RuntimeError, ValueError, TypeError, AssertionError):
        try:
            _run(tj, make, arrays, dtype, training)
        except Exception:
            return
        raise AssertionError(f"{what}: PyTorch refuses this configuration, tracejit ran it")
    try:
        if wgraded:
            weighted(torch, wgraded).backward()
    except RuntimeError:
        return   # (PyTorch's backward of an empty adaptive pool refuses what its forward made)
    for mode in (False, True) if compiled else (False,):
        at = f"{what} compiled={mode}"
        jm, jx, got, jgraded = _run(tj, make, arrays, dtype, training, init, mode)
        assert len(got) == len(want) and len(jgraded) == len(wgraded), at
        for k, (g, w) in enumerate(zip(got, want)):
            _close(g, w, tol, f"{at}: output {k}")
        if wgraded:
            for k, (a, b) in enumerate(zip(jx, tx)):
                assert (a.grad is None) == (b.grad is None), f"{at}: input {k}'s gradient"
                if b.grad is not None and input_grads(info):
                    _close(a.grad, b.grad, tol * 10, f"{at}: input {k}'s gradient")
            params = dict(jm.named_parameters())
            for k, tp in tm.named_parameters():
                assert (params[k].grad is None) == (tp.grad is None), f"{at}: {k}.grad"
                if tp.grad is not None:
                    _close(params[k].grad, tp.grad, tol * 10, f"{at}: {k}.grad")
        state = jm.state_dict()
        for k, v in tm.state_dict().items():
            _close(state[k], v, tol, f"{at}: state {k}")
