"""The backward engine: runs grad_fn nodes in dependency order.

Work is ordered by dependency counts (how many edges still have to deliver a
gradient to a node) with an explicit ready stack, so graph depth never meets
Python's recursion limit. Gradients reaching an input whose shape or dtype differs
(broadcasting, mixed precision) are summed/cast back here, in one place.
"""
from __future__ import annotations

import sys
import weakref

import numpy as np

from ..memory import kept_refs, sole_padded_view
from ..ops.shape import sum_to
from ..ops.impls import elementwise as _ew
from .grad_mode import _state as _grad_state, set_mode as _set_grad_mode
from .. import bf16 as _bf16, dtypes as _dt
from ..ops.elementwise_logic import CAST as _CAST
from ..tensor import Tensor
from .node import AccumulateGrad, PrimNode, leaf_node
from .views import ACTIVE as _VIEWS_ACTIVE, refresh_stale_view as _refresh_view
from ..formats import CHANNELS_LAST_OF_RANK as _LAST


__all__ = ["run_backward"]


def _root_edge(t):
    if _VIEWS_ACTIVE[0] and t._base is not None and t._requires_grad:
        _refresh_view(t)  # a view whose base was written in place since (autograd/views.py)
    if t.grad_fn is not None:
        return t.grad_fn, t._output_nr
    return leaf_node(t), 0


_BF16, _F32 = _dt.bfloat16, _dt.float32
_wrap = Tensor._wrap

_NONES = ()  # the outputs of a node that received no gradient at all


def _all_none(grads) -> bool:
    for g in grads:
        if g is not None:
            return False
    return True


def _owned_by_engine(old, g) -> bool:
    """Whether the gradient `old` waiting in an engine buffer can take `g` in place: the
    engine holds the only reference to it and to its array (the buffer slot, the caller's
    local, this parameter and getrefcount's argument), the array owns its memory, and `g`
    has its shape and dtype. PyTorch's engine accumulates in place under the same condition.
    """
    a = old._data
    return (type(a) is np.ndarray and (a.base is None or sole_padded_view(a)) and a.flags.writeable
            and sys.getrefcount(old) <= 4
            and (sys.getrefcount(a) <= 3 or sys.getrefcount(a) <= 3 + kept_refs(a))
            and old.dtype is g.dtype and type(g._data) is np.ndarray and a.shape == g._data.shape)


def _fit(g, meta):
    """Sum a broadcast gradient back to its input's shape and dtype."""
    shape, dtype = meta
    # (ranks first: a symbolic size compared with another rank's int would need its value)
    if len(g.shape) != len(shape) or tuple(g.shape) != tuple(shape):
        g = sum_to(g, shape)
    if g.dtype is not dtype:
        g = g.to(dtype)
    return g


def _widens_back(node, targets) -> bool:
    """Whether `node` is a float32 -> bf16 cast whose gradient only widens back: a float32
    gradient rounded to bf16 is then handed to it as float32 holding the bf16 values, one
    pass instead of a rounding and a widening."""
    if not isinstance(node, PrimNode) or node.prim is not _CAST or node._hooks is not None:
        return False
    m = node._meta
    return m is not None and m[0] is not None and m[0][1] is _F32 and (targets is None or node not in targets)


def _user_layout(g):
    """`g` as user code receives a gradient (a tensor hook's argument, a retained or an
    autograd.grad result): C-contiguous unless channels-last, as PyTorch's are. A backward
    may leave its own order (BatchNorm's input gradient is channel-major, the rows the
    convolution backward reads), on which the user's ``g.view(n, -1)`` would fail."""
    flags = getattr(getattr(g, "_data", None), "flags", None)
    if flags is None or flags.c_contiguous or (
            g.ndim in _LAST and g.is_contiguous(memory_format=_LAST[g.ndim])):
        return g
    return g.contiguous()


def _hook_result(hook, new, old):
    """A tensor hook's replacement gradient, which must keep the gradient's shape, dtype and
    device (PyTorch's check: a silent cast or broadcast would hide the hook's mistake)."""
    name = getattr(hook, "__name__", type(hook).__name__)
    if not isinstance(new, Tensor):
        raise TypeError(f"hook '{name}' returned a {type(new).__name__}; a tensor hook must return a "
                        f"Tensor or None")
    if tuple(new.shape) != tuple(old.shape):
        raise RuntimeError(f"hook '{name}' has changed the size of value (was {tuple(old.shape)} got "
                           f"{tuple(new.shape)})")
    if new.dtype is not old.dtype or new.device != old.device:
        raise RuntimeError(f"hook '{name}' has changed the type of value (was {old.dtype} on {old.device} "
                           f"got {new.dtype} on {new.device})")
    return new


def _run_pre_hooks(hooks, grads: list, create_graph: bool) -> list:
    """A node's tensor hooks, retain_grad copies and pre-hooks, in PyTorch's order."""
    if hooks.tensor:
        for nr, fns in hooks.tensor.items():
            for h in list(fns):
                if grads[nr] is not None:
                    r = h(_user_layout(grads[nr]))
                    if r is not None:
                        grads[nr] = _hook_result(h, r, grads[nr])
    if hooks.retain:
        for nr, ref in hooks.retain.items():
            t = ref()
            if t is not None and grads[nr] is not None:
                g = _user_layout(grads[nr] if create_graph else grads[nr].detach())
                t.grad = g if t.grad is None else t.grad + g
    if hooks.pre:
        for h in list(hooks.pre):
            r = h(tuple(grads))
            if r is not None:
                grads = list(r)
    return grads


def _reachable_to(roots, targets: set) -> set:
    """Nodes from which some target node can be reached (including the targets)."""
    order, seen, stack = [], set(), list(roots)
    while stack:  # iterative DFS collecting every node
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        order.append(n)
        for nxt in n._next:
            if nxt is not None and nxt not in seen:
                stack.append(nxt)
    parents: dict = {}
    for n in order:
        for nxt in n._next:
            if nxt is not None:
                parents.setdefault(nxt, []).append(n)
    needed, stack = set(), [t for t in targets if t in seen]
    while stack:
        n = stack.pop()
        if n in needed:
            continue
        needed.add(n)
        stack.extend(parents.get(n, ()))
    return needed


def _leaves_only(node) -> bool:
    """Whether `node` (a root that is not a leaf) leads straight to distinct leaves with no
    hooks on any of them: a compiled training step's graph (its one node, then the
    parameters). Its backward needs no dependency counts (`_backward_to_leaves`)."""
    if node._hooks is not None or type(node) is AccumulateGrad:
        return False
    seen = []
    for nxt in node._next:
        if nxt is None:
            continue
        if type(nxt) is not AccumulateGrad or nxt._hooks is not None or nxt in seen:
            return False
        seen.append(nxt)
    return True


def _backward_to_leaves(node, nr: int, g, retain_graph: bool, create_graph: bool) -> None:
    """`run_backward`'s loop for a root that `_leaves_only` accepts: the node, then each
    leaf in the order the loop would run them, without the loop's walk and dictionaries."""
    grads = [None] * node.num_outputs
    grads[nr] = g
    g = None
    if grads[0] is None if len(grads) == 1 else _all_none(grads):
        return
    prev_mode = _grad_state.enabled
    _set_grad_mode(create_graph)
    try:
        outs = node.apply(grads, create_graph, retain_graph)
        grads = None
        meta = node._meta
        n_outs = len(outs)
        pending = []
        for i, nxt in enumerate(node._next):
            g = outs[i] if i < n_outs else None
            if nxt is None or g is None:
                continue
            if meta is not None:
                m = meta[i]
                if m is not None:
                    d = g._data
                    if d is None or (d.shape, g.dtype) != m:
                        g = _fit(g, m)
            pending.append((nxt, [g]))
        # Each gradient in a list of its own and nowhere else (as the engine's buffers):
        # AccumulateGrad takes its memory only when nothing else holds it.
        outs = g = d = None
        while pending:
            nxt, buf = pending.pop()
            nxt.apply(buf, create_graph, retain_graph)
        nxt = buf = None
    finally:
        _set_grad_mode(prev_mode)


# the backward running as graph.register_multi_grad_hook sees it, once one was registered:
# [registered, its number, weak references to its roots]
TASK = [False, 0, ()]


def run_backward(tensors, grad_tensors, retain_graph: bool, create_graph: bool,
                 inputs=None, allow_unused: bool = False):
    """Backpropagate from `tensors`; with `inputs`, return their gradients instead of accumulating."""
    if TASK[0]:
        TASK[1] += 1
        TASK[2] = tuple(map(weakref.ref, tensors))
    buffers: dict = {}
    targets = captured = needed = None
    if inputs is None and len(tensors) == 1:
        node, nr = _root_edge(tensors[0])
        if _leaves_only(node):
            _backward_to_leaves(node, nr, grad_tensors[0], retain_graph, create_graph)
            return None
        # One root (every ``loss.backward()``): its gradients are the ready stack's first
        # entry, and no edge can reach it (the graph has no cycle), so no roots to merge
        # in buffers nor to sort out after the walk below.
        roots = None
        grads = [None] * node.num_outputs
        grads[nr] = grad_tensors[0]
        root = (node, grads)
        deps: dict = {node: 0}
    else:
        roots = []
        for (node, nr), g in zip([_root_edge(t) for t in tensors], grad_tensors):
            roots.append(node)
            buf = buffers.setdefault(node, [None] * node.num_outputs)
            buf[nr] = g if buf[nr] is None else buf[nr] + g

        if inputs is not None:
            targets = {}
            for i, t in enumerate(inputs):
                node, nr = _root_edge(t)
                targets.setdefault(node, []).append((nr, i))
            captured = [None] * len(inputs)
            needed = _reachable_to(roots, set(targets))

        # Dependency counts over the part of the graph that will run: a node is a key of
        # `deps` once it has been visited (roots start at 0), so one dict does both jobs.
        deps = {}
        for r in roots:
            if needed is None or r in needed:
                deps[r] = 0
    stack = list(deps)
    get = deps.get
    while stack:
        n = stack.pop()
        for nxt in n._next:
            if nxt is None or (needed is not None and nxt not in needed):
                continue
            c = get(nxt)
            if c is None:
                deps[nxt] = 1
                stack.append(nxt)
            else:
                deps[nxt] = c + 1

    # The ready stack holds (node, its gradients). A node with one incoming edge (most of
    # them) gets its gradients straight from that edge: no buffer to make, look up, pop.
    if roots is None:
        ready = [root]
        root = grads = None
    else:
        ready = [(r, buffers.pop(r)) for r in dict.fromkeys(roots) if r in deps and deps[r] == 0]
    d = None

    filtered = needed is not None
    prev_mode = _grad_state.enabled
    _set_grad_mode(create_graph)
    if create_graph:
        prev_needed, _grad_state.needed = _grad_state.needed, needed
    try:
        while ready:
            node, grads = ready.pop()
            hooks = node._hooks
            if hooks is not None:
                grads = _run_pre_hooks(hooks, grads, create_graph)
            if targets is not None and node in targets:
                for nr, i in targets[node]:
                    g = grads[nr]
                    captured[i] = _user_layout(g if g is None or create_graph else g.detach())
                if isinstance(node, AccumulateGrad) or not any(
                        nxt is not None and nxt in needed for nxt in node._next):
                    continue
            nexts = node._next
            if grads[0] is None and (len(grads) == 1 or _all_none(grads)):
                outs = _NONES
            else:
                outs = node.apply(grads, create_graph, retain_graph)
                hooks = node._hooks
                if hooks is not None and hooks.post:
                    for h in list(hooks.post):
                        r = h(tuple(outs), tuple(grads))
                        if r is not None:
                            outs = list(r)
            if not nexts:   # a leaf's accumulator: nothing to pass on
                outs = grads = None
                continue
            meta = node._meta
            n_outs = len(outs)
            i = -1
            for nxt in nexts:   # (its output index, `node._nrs[i]`, read where needed)
                i += 1
                if nxt is None or (filtered and nxt not in needed):
                    continue
                g = outs[i] if i < n_outs else None
                if g is not None and meta is not None:
                    m = meta[i]
                    if m is not None:
                        d = g._data  # (None for a tracer, when a backward is being traced)
                        # (one tuple compare: a DType equals only itself, as with `is`)
                        if d is None or (d.shape, g.dtype) != m:
                            if (m[1] is _BF16 and g.dtype is _F32 and type(d) is np.ndarray and d.shape == m[0]
                                    and not create_graph and deps[nxt] == 1 and nxt not in buffers and _widens_back(nxt, targets)):
                                g = _wrap(_bf16.round_values(d), _F32, g.device)
                            else:
                                g = _fit(g, m)
                c = deps[nxt]
                if c == 1 and nxt not in buffers:  # this edge is its only one
                    n = nxt.num_outputs
                    if n == 1:
                        ready.append((nxt, [g]))
                    else:
                        buf = [None] * n
                        buf[node._nrs[i]] = g
                        ready.append((nxt, buf))
                        buf = None
                    continue
                if g is not None:
                    buf = buffers.get(nxt)
                    if buf is None:
                        buf = buffers[nxt] = [None] * nxt.num_outputs
                    nr = node._nrs[i]
                    old = buf[nr]
                    if old is None:
                        buf[nr] = g
                    elif create_graph or not _owned_by_engine(old, g):
                        buf[nr] = old + g
                    else:  # nobody else sees `old`: add in place, no new array per edge
                        # (large float gradients through add's eager kernel: impls.elementwise)
                        _ew.add_into(old._data, g._data)
                c -= 1
                deps[nxt] = c
                if c == 0:
                    buf = buffers.pop(nxt, None)
                    ready.append((nxt, buf if buf is not None else [None] * nxt.num_outputs))
            # Hold no stale references: AccumulateGrad takes a gradient's memory only
            # when the engine's buffer is its sole holder.
            outs = g = d = buf = old = grads = None
    finally:
        _set_grad_mode(prev_mode)
        if create_graph:
            _grad_state.needed = prev_needed

    if inputs is not None:
        for i, g in enumerate(captured):
            if g is None and not allow_unused:
                raise RuntimeError(
                    f"input {i} of autograd.grad does not appear in the graph of the outputs; "
                    f"pass allow_unused=True if that is expected")
        return tuple(captured)
    return None
