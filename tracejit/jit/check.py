"""Check mode: run the compiled entry and the eager function side by side and compare.

On a mismatch the error names the first IR equation whose value diverges, with the
user's source line, so a wrong kernel or a wrong capture points at the code that
produced it. Two cases are told apart:

- the compiled program disagrees with the reference interpreter running the same
  graph: the backend is wrong, and the equation is found by comparing the executor's
  intermediate values (when it can report them) or by the output that differs;
- the interpreter agrees with the compiled program but not with the Python code: the
  captured graph no longer matches the function (a value the trace specialized
  changed). The function is traced again for the same inputs and the two graphs are
  compared equation by equation.
"""
from __future__ import annotations

import os

import numpy as np

from ..autograd import grad_mode as _gm
from ..autograd import grad as _grad
from ..errors import CheckMismatchError
from ..tensor import Tensor
from .interpreter import interpret
from .ir import Literal, eqn_lines, format_param
from .pytree import flatten, unflatten

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
    if a.dtype.kind in "fc" or b.dtype.kind in "fc":
        return bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))
    return bool(np.array_equal(a, b))


def _is_value(x) -> bool:
    return isinstance(x, (Tensor, bool, int, float, np.number))


def _clone_leaves(leaves):
    return [x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, Tensor) else x
            for x in leaves]


def run_checked(fn, entry, leaves, args):
    spec = getattr(entry, "arg_spec", None)
    ref_leaves = _clone_leaves(leaves)
    diag_leaves = _clone_leaves(leaves)  # untouched copies: in-place updates write back to `leaves`
    result = entry.run(leaves, args)
    ref = fn.run_eagerly(unflatten(spec, ref_leaves) if spec is not None else ref_leaves)
    got, gspec = flatten(result, objects=True)
    exp, espec = flatten(ref, objects=True)
    if len(got) != len(exp) or gspec != espec:
        raise CheckMismatchError(f"check mode: compiled {fn.__name__} returns a different structure "
                                 f"({len(got)} values) from eager execution ({len(exp)} values)")
    bad = [i for i, (g, r) in enumerate(zip(got, exp)) if _is_value(g) and not compare(g, r)]
    if bad:
        raise CheckMismatchError(_diagnose(fn, entry, diag_leaves, got, bad))
    # Gradients: backprop a fixed cotangent through both and compare input grads.
    diff_leaves = [i for i, x in enumerate(leaves) if isinstance(x, Tensor) and x.requires_grad]
    outs = [(g, r) for g, r in zip(got, exp) if isinstance(g, Tensor) and isinstance(r, Tensor)
            and g.requires_grad and r.requires_grad]
    if diff_leaves and outs and _gm.is_grad_enabled():
        gi = [leaves[i] for i in diff_leaves]
        ri = [ref_leaves[i] for i in diff_leaves]
        # One scalar per side (the sum of every output), so each side has a single root.
        g1 = _grad([_total(g for g, _ in outs)], gi, retain_graph=True, allow_unused=True)
        g2 = _grad([_total(r for _, r in outs)], ri, allow_unused=True)
        for k, (a, b) in enumerate(zip(g1, g2)):
            if a is None and b is None:
                continue
            shape = tuple((a if a is not None else b).shape)
            # A gradient that is None on one side (input unused) must be zero on the other.
            if compare(np.zeros(shape) if a is None else a, np.zeros(shape) if b is None else b):
                continue
            raise CheckMismatchError(f"check mode: gradient of input "
                                     f"{entry.descs[diff_leaves[k]].name!r} differs between compiled "
                                     f"and eager execution of {fn.__name__}")
    return result


def _total(tensors):
    out = None
    for t in tensors:
        out = t.sum() if out is None else out + t.sum()
    return out


def _where(e) -> str:
    return f"{os.path.basename(e.loc[0])}:{e.loc[1]}" if e.loc else "unknown location"


def _detached(ins):
    return [x.detach() if isinstance(x, Tensor) else x for x in ins]


def _record_all(graph, ins) -> tuple:
    vals: dict = {}

    def rec(e, outs):
        for o, v in zip(e.outs, outs):
            vals[o] = v
    with _gm.no_grad():
        outs = interpret(graph, ins, record=rec)
    return vals, outs


def _diagnose(fn, entry, leaves, got, bad) -> str:
    graph = entry.opt_graph
    ins = _detached(entry.graph_inputs(leaves))
    ref_vals, ref_outs = _record_all(graph, ins)
    lines = eqn_lines(graph)
    producer = {o: e for e in graph.eqns for o in e.outs}

    # 1. The compiled program against the reference interpreter on the same graph.
    vals = entry.executor.debug_values(ins)
    if vals is not None:
        for e in graph.eqns:
            for o in e.outs:
                if o in vals and o in ref_vals and not compare(vals[o], ref_vals[o]):
                    return (f"check mode: compiled {fn.__name__} diverges from the reference at IR "
                            f"equation `{lines[e]}` (from {_where(e)}); outputs {bad} differ from eager")
    for j in bad:
        kind, k = entry.out_leaves[j][0], entry.out_leaves[j][1]
        if kind not in ("graph", "number") or compare(got[j], ref_outs[k]):
            continue
        out = graph.outputs[k]
        e = producer.get(out)
        what = (f"IR equation `{lines[e]}` (from {_where(e)})" if e is not None
                else f"graph output {k}, an input of the graph")
        return (f"check mode: output {j} of compiled {fn.__name__} differs from the reference "
                f"interpreter running the same graph: the compiled code for {what} is wrong")

    # 2. The graph itself no longer computes what the Python code does: capture again and
    #    compare the two graphs equation by equation.
    try:
        new, new_consts = fn.recapture(entry, leaves)
    except Exception as ex:  # the function can't even be captured now
        return (f"check mode: outputs {bad} of compiled {fn.__name__} differ from eager execution, "
                f"and capturing it again fails ({type(ex).__name__}: {ex})")
    new_ins = entry.graph_inputs(leaves, new_consts)
    new_vals, _ = _record_all(new, _detached(new_ins))
    new_lines = eqn_lines(new)
    for i, e in enumerate(graph.eqns):
        n = new.eqns[i] if i < len(new.eqns) else None
        if n is None or not _same_eqn(e, n) or not all(
                o in ref_vals and m in new_vals and compare(ref_vals[o], new_vals[m])
                for o, m in zip(e.outs, n.outs)):
            now = f"; captured now it is `{new_lines[n]}`" if n is not None else ""
            return (f"check mode: outputs {bad} of compiled {fn.__name__} differ from eager execution. "
                    f"The captured graph no longer matches the Python code, first at IR equation "
                    f"`{lines[e]}` (from {_where(e)}){now}. A Python value the trace treated as a "
                    f"constant (a global, an attribute, a closure variable) has probably changed: "
                    f"pass it as an argument, or use @tracejit.script for scalars.")
    return (f"check mode: outputs {bad} of compiled {fn.__name__} differ from eager execution "
            f"although capturing it again gives the same graph (is the function nondeterministic?)")


def _same_eqn(a, b) -> bool:
    if a.prim is not b.prim or len(a.inputs) != len(b.inputs):
        return False
    for x, y in zip(a.inputs, b.inputs):
        if isinstance(x, Literal) != isinstance(y, Literal):
            return False
        if isinstance(x, Literal) and not (type(x.value) is type(y.value) and x.value == y.value):
            return False
    return ({k: format_param(v) for k, v in a.params.items()}
            == {k: format_param(v) for k, v in b.params.items()})

