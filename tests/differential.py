"""Differential testing: run a function eagerly, through the IR interpreter and compiled,
and check that all three agree (outputs and gradients).

The IR interpreter is the meaning of a captured program and eager execution is the
meaning of the user's code, so a compiled result is right when it matches both::

    from differential import assert_compiled_matches
    assert_compiled_matches(lambda x, y: (x * y).sum(1), x, y)

What is compared, for every output leaf and every gradient:

- type (Tensor or not), shape and dtype: exactly;
- values: ``|a - b| <= atol * scale + rtol * |b|`` where ``scale`` is the largest finite
  magnitude of the expected value (at least 1), so sums with cancellation are judged
  against their terms' size; integers and bools exactly;
- special values: nan, +inf and -inf at exactly the same positions;
- ``requires_grad`` of every output tensor: exactly;
- gradients: ``None`` exactly where eager gives ``None``.

Gradients are taken w.r.t. the floating-point leaves that require grad, of the scalar
``sum_k <out_k, cot_k>`` with fixed random cotangents (the same for every run), through
``tracejit.autograd.grad``. ``prep`` turns the leaves into the arguments outside the
compiled function (views, aliases, broadcasts), so non-contiguous and aliased inputs
are tested with gradients flowing back to the leaves.

Also the tests' disk-cache switch (`kernel_cache_at`) and the check of a fusion partition
(`assert_valid_partition`).
"""
from __future__ import annotations

import contextlib
import os
import warnings
from typing import Any, Callable, Iterator, Optional

import numpy as np

from tracejit import autograd
from tracejit.jit import script as _script, trace as _trace
from tracejit.tensor import Tensor

__all__ = ["assert_compiled_matches", "assert_same", "TOLERANCES", "Mismatch", "kernel_cache_at",
           "assert_valid_partition"]

#: (rtol, atol) per floating dtype for compiled-vs-eager comparisons. float32 kernels use
#: polynomial transcendentals (a few ulps, see compiler/mathlib.py) and reassociated
#: reductions, so they get a little more room than a bit-for-bit comparison.
TOLERANCES = {"float32": (1e-4, 1e-5), "float64": (1e-9, 1e-12), "float16": (1e-2, 1e-3)}


class Mismatch(AssertionError):
    """A compiled (or interpreted) result differs from eager."""


def _leaves(x, path="out"):
    """Flatten nested tuples/lists/dicts into (path, leaf) pairs."""
    if isinstance(x, (tuple, list)):
        out = []
        for i, v in enumerate(x):
            out += _leaves(v, f"{path}[{i}]")
        return out
    if isinstance(x, dict):
        out = []
        for k in x:
            out += _leaves(x[k], f"{path}[{k!r}]")
        return out
    return [(path, x)]


def assert_same(actual, expected, what: str = "value", rtol: Optional[float] = None,
                atol: Optional[float] = None) -> None:
    """Compare two Tensors / arrays / numbers as described in the module docstring."""
    if isinstance(expected, Tensor) or isinstance(actual, Tensor):
        if not (isinstance(expected, Tensor) and isinstance(actual, Tensor)):
            raise Mismatch(f"{what}: got {type(actual).__name__}, expected {type(expected).__name__}")
        if actual.dtype is not expected.dtype:
            raise Mismatch(f"{what}: dtype {actual.dtype.name}, expected {expected.dtype.name}")
        dname = expected.dtype.name
        a, e = actual.detach().numpy(), expected.detach().numpy()
    elif isinstance(expected, np.ndarray):
        a, e = np.asarray(actual), expected
        dname = e.dtype.name
    else:
        if isinstance(expected, float) and isinstance(actual, float):
            a, e, dname = np.float64(actual), np.float64(expected), "float64"
        else:
            if type(actual) is not type(expected) or actual != expected:
                raise Mismatch(f"{what}: got {actual!r}, expected {expected!r}")
            return
    if a.shape != e.shape:
        raise Mismatch(f"{what}: shape {a.shape}, expected {e.shape}")
    if e.dtype.kind not in "fc":
        if not np.array_equal(a, e):
            bad = np.argwhere(a != e)[:5].tolist()
            raise Mismatch(f"{what}: {dname} values differ at {bad}\n got {a!r}\n expected {e!r}")
        return
    r0, a0 = TOLERANCES.get(dname, TOLERANCES["float64"])
    rtol = r0 if rtol is None else rtol
    atol = a0 if atol is None else atol
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    for name, mask in (("nan", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        ma, me = mask(a64), mask(e64)
        if not np.array_equal(ma, me):
            where = np.argwhere(ma != me)[:5].tolist()
            raise Mismatch(f"{what}: {name} positions differ (first at {where})\n got {a!r}\n expected {e!r}")
    fin = np.isfinite(e64)
    if not fin.any():
        return
    scale = max(1.0, float(np.max(np.abs(e64[fin]))))
    err = np.abs(a64[fin] - e64[fin])
    tol = atol * scale + rtol * np.abs(e64[fin])
    if (err > tol).any():
        k = int(np.argmax(err - tol))
        idx = np.argwhere(fin)[k].tolist()
        raise Mismatch(f"{what}: values differ beyond rtol={rtol}, atol={atol}*{scale:.3g}: "
                       f"at {idx} got {a64[fin][k]!r}, expected {e64[fin][k]!r} "
                       f"(max abs err {err.max():.3g})\n got {a!r}\n expected {e!r}")


def _clone_leaf(x):
    """A fresh leaf with the same values, layout (strides) and requires_grad."""
    if not isinstance(x, Tensor):
        return x
    data = x._data
    if data.flags.c_contiguous:
        data = data.copy()
    # Non-contiguous (or broadcast, read-only) arrays are shared, not copied, so the
    # layout the function sees is the caller's; the functions under test do not write
    # into their inputs.
    t = Tensor._wrap(data, x.dtype, x.device)
    if x.requires_grad:
        t.requires_grad_()
    return t


def _cotangent(out: Tensor, k: int):
    rng = np.random.default_rng(1000 + k)
    g = rng.uniform(-1.0, 1.0, out.shape).astype(out.dtype.np)
    return Tensor._wrap(np.asarray(g, dtype=out.dtype.np), out.dtype, out.device)


def _run(fn, leaves, prep, grads: bool, what: str):
    mine = [_clone_leaf(x) for x in leaves]
    # Aliasing of the leaves is part of the input: keep repeated objects repeated.
    seen: dict = {}
    for i, x in enumerate(leaves):
        if isinstance(x, Tensor):
            if id(x) in seen:
                mine[i] = mine[seen[id(x)]]
            else:
                seen[id(x)] = i
    args = prep(*mine) if prep is not None else tuple(mine)
    if not isinstance(args, tuple):
        args = (args,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = fn(*args)
        flat = _leaves(out)
        grad_res = None
        diff = [x for x in mine if isinstance(x, Tensor) and x.requires_grad]
        if grads and diff:
            uniq = []
            for x in diff:
                if all(x is not u for u in uniq):
                    uniq.append(x)
            # One scalar loss <out_k, cot_k> summed over outputs: a single root for the
            # backward pass, whatever the outputs share (one compiled node, one tensor).
            loss = None
            for k, (_, o) in enumerate(flat):
                if isinstance(o, Tensor) and o.requires_grad and o.grad_fn is not None:
                    term = (o * _cotangent(o, k)).sum()
                    loss = term if loss is None else loss + term
            if loss is not None:
                grad_res = list(autograd.grad([loss], uniq, allow_unused=True))
            else:
                grad_res = [None] * len(uniq)
    return flat, grad_res


def _compare(got, expect, label, rtol, atol):
    flat_g, grads_g = got
    flat_e, grads_e = expect
    if [p for p, _ in flat_g] != [p for p, _ in flat_e]:
        raise Mismatch(f"{label}: output structure {[p for p, _ in flat_g]}, "
                       f"expected {[p for p, _ in flat_e]}")
    for (path, a), (_, e) in zip(flat_g, flat_e):
        assert_same(a, e, f"{label}: {path}", rtol, atol)
        if isinstance(e, Tensor) and a.requires_grad != e.requires_grad:
            raise Mismatch(f"{label}: {path}.requires_grad is {a.requires_grad}, eager gives {e.requires_grad}")
    if grads_e is None:
        return
    for i, (a, e) in enumerate(zip(grads_g, grads_e)):
        if (a is None) != (e is None):
            raise Mismatch(f"{label}: gradient of leaf {i} is {'None' if a is None else 'a tensor'}, "
                           f"eager gives {'None' if e is None else 'a tensor'}")
        if e is not None:
            assert_same(a, e, f"{label}: gradient of leaf {i}", rtol, atol)


def _describe_program(cf) -> str:
    try:
        entry = cf._entries[-1]
    except (AttributeError, IndexError):
        return "(no captured program)"
    return f"captured IR:\n{entry.opt_graph}"


def assert_compiled_matches(fn: Callable, *leaves: Any, prep: Optional[Callable] = None,
                            mode: str = "trace", grads: bool = True, rtol: Optional[float] = None,
                            atol: Optional[float] = None, interpreter: bool = True, calls: int = 2,
                            compiled: Any = None, **compile_kw) -> Any:
    """Check that ``fn`` compiled agrees with eager ``fn`` (and with the IR interpreter).

    ``leaves``: Tensors (cloned for each run; those with ``requires_grad`` are
    differentiated) and Python values. ``prep(*leaves) -> args`` builds the arguments
    (outside the compiled function). ``mode``: "trace" or "script". The compiled function
    is called ``calls`` times (the first call captures, later ones hit its cache).
    ``compiled``: an already-decorated function to use instead of compiling ``fn`` (its
    cache is then shared across calls of this helper). Returns the compiled function.
    On a mismatch raises `Mismatch` naming the output and showing the captured IR.
    """
    deco = _script if mode == "script" else _trace
    expect = _run(fn, leaves, prep, grads, "eager")
    if interpreter:
        interp = deco(fn, compiler="interpret", **compile_kw)
        got = _run(interp, leaves, prep, grads, "interpreter")
        try:
            _compare(got, expect, "interpreter vs eager", rtol, atol)
        except Mismatch as exc:
            raise Mismatch(f"{exc}\n{_describe_program(interp)}") from None
    cf = compiled if compiled is not None else deco(fn, **compile_kw)
    for call in range(calls):
        got = _run(cf, leaves, prep, grads, "compiled")
        try:
            _compare(got, expect, f"compiled (call {call + 1}) vs eager", rtol, atol)
        except Mismatch as exc:
            raise Mismatch(f"{exc}\n{_describe_program(cf)}") from None
    return cf


@contextlib.contextmanager
def kernel_cache_at(path) -> Iterator[None]:
    """Point the disk kernel cache at `path` (``None``: turn it off) inside the block.

    Tests use it to keep kernels out of the user's cache: a session-wide temporary
    directory still lets every test reuse what the others compiled.
    """
    saved = {k: os.environ.get(k) for k in ("TRACEJIT_CACHE_DIR", "TRACEJIT_CACHE")}
    if path is None:
        os.environ["TRACEJIT_CACHE"] = "0"
    else:
        os.environ["TRACEJIT_CACHE_DIR"] = str(path)
        os.environ.pop("TRACEJIT_CACHE", None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def assert_valid_partition(items, graph) -> None:
    """`items` (from ``compiler.fusion.partition(graph)``) is a valid program for `graph`:
    every equation appears exactly once (as itself, or as a step that computes the same
    values from other operands: a shape-only operand given another value of its shape,
    compiler/windows.py), each item's inputs exist before it runs, a group's members
    share its iteration shape, and whatever is read outside a group is written."""
    from tracejit.compiler.fusion import Group
    from tracejit.jit.ir import Var
    produced = set(graph.inputs)
    seen = []
    for it in items:
        if isinstance(it, Group):
            members = it.members
            for e in it.eqns:
                assert tuple(e.out.aval.shape) in (tuple(it.shape), it.row_shape), (e.prim.name, it.shape)
            for a in it.inputs:
                assert a in produced, f"group {it.gid} reads a value computed later"
            defined = it.defined
            for e in members:
                for a in e.inputs:
                    assert not isinstance(a, Var) or a in produced or a in defined, \
                        f"group {it.gid}: {e.prim.name} reads a value that is not ready"
            produced |= set(it.outputs)
            seen += members
        else:
            for a in it.inputs:
                assert not isinstance(a, Var) or a in produced, f"step {it.prim.name} reads a later value"
            produced |= set(it.outs)
            seen.append(it)
    same = {id(e) for e in graph.eqns}
    for e in seen:
        if id(e) not in same:   # a rewritten step: its shape-only operands alone differ
            only = e.prim.extra.get("shape_only", ())
            orig = next(o for o in graph.eqns if o.outs == e.outs)
            assert orig.prim is e.prim and all(a is b for k, (a, b) in enumerate(zip(e.inputs, orig.inputs))
                                               if k not in only), f"step {e.prim.name} changed"
    outs = lambda es: sorted(id(v) for e in es for v in e.outs)  # noqa: E731
    assert outs(seen) == outs(graph.eqns), "equations lost or duplicated"
    for a in graph.outputs:
        assert not isinstance(a, Var) or a in produced, "a graph output is never written"
