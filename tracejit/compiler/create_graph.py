"""create_graph=True through a compiled call: its backward as compiled programs called with
autograd recording. `split` cuts the joint graph in two: a program recomputing the values the
backward reads (differentiable, their own node, as eager's saved tensors) and the backward
program proper, so a second order differentiates each part once. Built per (differentiated
inputs, the cotangents' needs, the draws replayed) at the first call. The recompute reads the
random draws the forward made (its node keeps them, autodiff.py `drawn`): a dropout mask is
the forward's. The joint graph is interpreted op by op instead where a backward cannot be
differentiated again in the IR, and for a third order; the fallback topic says why.
"""
from __future__ import annotations

import logging

from .. import ops
from ..autograd import grad_mode as _gm
from ..errors import CompileError
from ..jit.autodiff import joint, replaying, split
from ..jit.interpreter import interpret
from ..jit.ir import Graph
from ..jit.passes import optimize
from ..tensor import Tensor
from .graph_facts import _shapes_of

__all__ = ["graph_backward"]

log = logging.getLogger("tracejit.fallback")


def _replayed(prog, key) -> tuple:
    """(`prog`'s graph reading the forward's draws after its inputs, its active inputs) for `key`."""
    active, _, draws = key
    return replaying(prog.graph, draws), list(active) + [False] * len(draws)


def graph_backward(prog, inputs, grads, diff_idx, draws=None) -> list:
    """The gradients of `prog`'s differentiable inputs `diff_idx` for cotangents `grads`,
    as tensors autograd recorded. `draws`: (the draws' Vars, their arrays) the forward kept."""
    from .executor import CompiledProgram   # (executor.py imports this module)
    active = tuple(i in diff_idx for i in range(len(prog.graph.inputs)))
    shape = _shapes_of(inputs, prog.graph)
    gs = [g if g is not None else ops.zeros(shape(a), dtype=a.aval.dtype)
          for g, a in zip(grads, prog.graph.outputs)]
    dvars, darrays = draws if draws is not None else ((), ())
    key = (active, prog._diff_of(gs), dvars)
    progs = prog._vjp_programs.get(key)
    if progs is None and prog._parent is not None:
        # A third order: each compiled order recomputes the values the one below saved
        # (a PINN's u_xx: 2x the matmuls of eager autograd), so the order that made this
        # program is interpreted op by op from its next call on, and this one now.
        parent, pkey = prog._parent
        parent._vjp_programs[pkey] = joint(*_replayed(parent, pkey))
        log.info("create_graph=True through the create_graph backward of compiled %s: its backward "
                 "is interpreted op by op from now on (third order)", parent.name)
        progs = prog._vjp_programs[key] = joint(*_replayed(prog, key))
    elif progs is None:
        fwd, bwd, n_saved = split(*_replayed(prog, key))
        saved = Graph(fwd.inputs, fwd.eqns, fwd.outputs[len(fwd.outputs) - n_saved:], fwd.name)
        progs = prog._vjp_programs[key] = (
            CompiledProgram(optimize(saved), prog.name + "_saved") if n_saved else None,
            CompiledProgram(optimize(bwd), prog.name + "_vjp"))
        for p in progs:
            if p is not None:
                p._parent = (prog, key)
    ins = list(inputs) + [Tensor._wrap(a, v.aval.dtype, v.aval.device) for v, a in zip(dvars, darrays)]
    with _gm.enable_grad():
        if isinstance(progs, Graph):
            return interpret(progs, ins + gs)
        saved = progs[0](ins) if progs[0] is not None else []
        try:
            return progs[1](ins + saved + gs)
        except (CompileError, NotImplementedError) as exc:
            if progs[1]._train:
                raise
            # (differentiating it failed before it ran a kernel)
            log.warning("create_graph=True through compiled %s: its backward is interpreted op by op, "
                        "as differentiating it again in the IR failed: %s", prog.name, exc)
            j = prog._vjp_programs[key] = joint(*_replayed(prog, key))
            return interpret(j, ins + gs)
