"""Check mode: run the compiled entry and the eager function side by side and compare.

On a mismatch the error names the first IR equation whose value diverges from the
reference interpreter, with the user's source line, so a wrong kernel or a wrong
capture points at the code that produced it.
"""
from __future__ import annotations

import os

import numpy as np

from ..autograd import grad_mode as _gm
from ..errors import CheckMismatchError
from ..tensor import Tensor
from .interpreter import interpret
from .pytree import flatten

__all__ = ["run_checked", "compare"]

RTOL, ATOL = 1e-4, 1e-5


def _arr(x):
    if isinstance(x, Tensor):
        return np.asarray(x.detach()._host(), dtype=np.float64 if x.dtype.is_floating_point else None)
    return np.asarray(x)


def compare(a, b, rtol=RTOL, atol=ATOL) -> bool:
    a, b = _arr(a), _arr(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))
    return bool(np.array_equal(a, b))


def _clone_leaves(leaves):
    out = []
    for x in leaves:
        if isinstance(x, Tensor):
            c = x.detach().clone()
            if x.requires_grad:
                c.requires_grad_(True)
            out.append(c)
        else:
            out.append(x)
    return out


def run_checked(fn, entry, leaves, args):
    from .pytree import unflatten
    ref_leaves = _clone_leaves(leaves)
    result = entry.run(leaves)
    ref = fn._call_eager(tuple(unflatten(entry.arg_spec, ref_leaves)) if hasattr(entry, "arg_spec") else tuple(ref_leaves), {})
    got, _ = flatten(result)
    exp, _ = flatten(ref)
    bad = [i for i, (g, r) in enumerate(zip(got, exp)) if isinstance(g, Tensor) and not compare(g, r)]
    if len(got) != len(exp) or bad:
        raise CheckMismatchError(_diagnose(fn, entry, leaves, bad))
    # Gradients: backprop a fixed cotangent through both and compare input grads.
    diff_leaves = [i for i, x in enumerate(leaves) if isinstance(x, Tensor) and x.requires_grad]
    outs = [(g, r) for g, r in zip(got, exp) if isinstance(g, Tensor) and g.requires_grad and r.requires_grad]
    if diff_leaves and outs and _gm.is_grad_enabled():
        from ..autograd import grad as _grad
        gi = [leaves[i] for i in diff_leaves]
        ri = [ref_leaves[i] for i in diff_leaves]
        cot = [(g * 0 + 1).detach() for g, _ in outs]
        g1 = _grad([g for g, _ in outs], gi, cot, retain_graph=True, allow_unused=True)
        g2 = _grad([r for _, r in outs], ri, cot, allow_unused=True)
        for k, (a, b) in enumerate(zip(g1, g2)):
            if (a is None) != (b is None) or (a is not None and not compare(a, b)):
                raise CheckMismatchError(f"check mode: gradient of input "
                                         f"{entry.descs[diff_leaves[k]].name!r} differs between compiled "
                                         f"and eager execution of {fn.__name__}")
    return result


def _diagnose(fn, entry, leaves, bad) -> str:
    ins = [leaves[i] for i in entry.input_leaf_idx] + list(entry.const_tensors)
    # Reference values of every equation, from the interpreter (the IR's meaning).
    ref_vals = {}

    def rec(e, outs):
        for o, v in zip(e.outs, outs):
            ref_vals[o] = v
    with _gm.no_grad():
        interpret(entry.opt_graph, [x.detach() if isinstance(x, Tensor) else x for x in ins], record=rec)
    probe = getattr(entry.executor, "debug_values", None)
    if probe is not None:
        got = probe([x.detach() if isinstance(x, Tensor) else x for x in ins])
        for e in entry.opt_graph.eqns:
            for o in e.outs:
                if o in got and o in ref_vals and not compare(got[o], ref_vals[o]):
                    loc = f"{os.path.basename(e.loc[0])}:{e.loc[1]}" if e.loc else "unknown location"
                    return (f"check mode: compiled {fn.__name__} diverges from eager at IR equation "
                            f"`{e.prim.name}` (from {loc}); outputs {bad} differ")
    first = next((e for e in entry.opt_graph.eqns), None)
    # Interpreter agrees with compiled output: the capture itself differs from the Python.
    loc = ""
    for e in entry.graph.eqns:
        if e.loc:
            loc = f" (graph starts at {os.path.basename(e.loc[0])}:{e.loc[1]})"
            break
    del first
    return (f"check mode: outputs {bad} of compiled {fn.__name__} differ from eager execution{loc}; "
            f"the captured graph does not match the Python function for these inputs (a value the "
            f"trace treated as constant probably changed). Use @tracejit.script or pass it as an argument.")
