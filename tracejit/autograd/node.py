"""Autograd graph nodes (``grad_fn``) and the saved-tensor snapshots they hold.

A node maps gradients of its outputs to gradients of its inputs; ``next_functions``
points at the nodes that produced those inputs (an `AccumulateGrad` for leaves).
A primitive's node keeps each input its VJP reads as the tensor and its version at
save time, as PyTorch's SavedVariable keeps a non-output input itself: any in-place
write bumps the version counter, so a changed value (or a ``grad_fn`` rebound by an
in-place op) is detected when the backward unpacks it. The node's own output is kept
as a snapshot without the tensor (which points back at the node: no cycle).
"""
from __future__ import annotations

import weakref

from ..errors import GraphFreedError
from ..ops.impls import TIER0_THREADS as _TIER0_THREADS, elementwise as _ew, outside as _outside_tier0, \
    serving_tier0 as _serving_tier0
from ..tensor import _MADE as _INFERENCE_MADE, Tensor, _refuse_saved
from .accumulate import _exclusive, _own_copy, dense_out_of_order, laid_out_as
from .saved import HOOKS as _SAVED_HOOKS, SavedMeta, SavedTensor, _modified, column_major, saved_meta, \
    shape_only  # noqa: F401
from .views import ACTIVE as _VIEWS_ACTIVE, refresh_stale_view as _refresh_view

__all__ = ["Node", "PrimNode", "Tier0PrimNode", "AccumulateGrad", "SavedTensor", "SavedMeta",
           "make_prim_node"]


class _Hooks:
    """A node's hooks, made at the first registration (most nodes never get one)."""

    __slots__ = ("pre", "post", "tensor", "retain")

    def __init__(self):
        self.pre = None     # [hook(grad_outputs) -> new grad_outputs or None]
        self.post = None    # [hook(grad_inputs, grad_outputs) -> new grad_inputs or None]
        self.tensor = None  # {output_nr: [hook(grad) -> grad or None]}
        self.retain = None  # {output_nr: weakref to the tensor} for retain_grad


class Node:
    """Base class of every grad_fn."""

    # The edges to the inputs' nodes are two flat tuples, `_next` (node or None per input)
    # and `_nrs` (its output index): a (node, index) tuple per input would be one more
    # object the garbage collector walks for as long as the graph lives.
    __slots__ = ("_next", "_nrs", "num_outputs", "_hooks", "__weakref__", "_freed", "_meta")

    def __init__(self, next_functions: tuple, num_outputs: int = 1):
        self.next_functions = next_functions
        self.num_outputs = num_outputs
        self._hooks = None         # _Hooks, or None while no hook is registered
        self._freed = False
        self._meta = None          # [(shape, dtype)] per input, for summing broadcast grads

    # ``unit_backward(t) -> bool``: a node type's own whole backward from its output `t` for
    # ``t.backward()`` with no arguments (autograd.backward), True when done; None: the engine.
    unit_backward = None

    def name(self) -> str:
        return type(self).__name__

    @property
    def next_functions(self) -> tuple:
        """((node or None, output index), ...) per input, as PyTorch's."""
        return tuple(zip(self._next, self._nrs))

    @next_functions.setter
    def next_functions(self, edges) -> None:
        self._next = tuple([e[0] for e in edges])
        self._nrs = tuple([e[1] for e in edges])

    def __repr__(self) -> str:
        return f"<{self.name()}>"

    def _hook_lists(self) -> _Hooks:
        h = self._hooks
        if h is None:
            h = self._hooks = _Hooks()
        return h

    def register_hook(self, fn):
        """fn(grad_inputs, grad_outputs) -> new grad_inputs or None; runs after the node."""
        h = self._hook_lists()
        if h.post is None:
            h.post = []
        h.post.append(fn)
        return _Handle(h.post, fn)

    def register_prehook(self, fn):
        """fn(grad_outputs) -> new grad_outputs or None; runs before the node."""
        h = self._hook_lists()
        if h.pre is None:
            h.pre = []
        h.pre.append(fn)
        return _Handle(h.pre, fn)

    def _add_tensor_hook(self, output_nr: int, fn):
        h = self._hook_lists()
        if h.tensor is None:
            h.tensor = {}
        lst = h.tensor.setdefault(output_nr, [])
        lst.append(fn)
        return _Handle(lst, fn)

    def _retain_output(self, output_nr: int, ref) -> None:
        """Keep the gradient of output `output_nr` in the tensor `ref()` (retain_grad)."""
        h = self._hook_lists()
        if h.retain is None:
            h.retain = {}
        h.retain[output_nr] = ref

    def _pass_retain(self, output_nr: int, t) -> None:
        """After an in-place op gave `t` a new history, its retain_grad follows it (PyTorch
        moves the retains_grad hook): ``t.grad`` is the gradient of t's latest value."""
        h = self._hooks
        ref = h.retain.get(output_nr) if h is not None and h.retain else None
        if ref is not None and ref() is t and t.grad_fn is not None and t.grad_fn is not self:
            del h.retain[output_nr]
            t.grad_fn._retain_output(t._output_nr, ref)

    def _retains(self, output_nr: int) -> bool:
        h = self._hooks
        return h is not None and bool(h.retain) and output_nr in h.retain

    def apply(self, grads: list, create_graph: bool, retain_graph: bool) -> list:
        raise NotImplementedError

    def _check_not_freed(self):
        if self._freed:
            raise GraphFreedError(
                f"trying to backward through the graph a second time ({self.name()}): its saved "
                f"tensors were freed after the first backward. Pass retain_graph=True to the "
                f"first backward() (or autograd.grad) if you need to backward twice.")


class _Handle:
    """Returned by hook registration; ``remove()`` unregisters."""

    def __init__(self, lst, fn):
        self._lst, self._fn = lst, fn

    def remove(self):
        try:
            self._lst.remove(self._fn)
        except ValueError:
            pass


class PrimNode(Node):
    """grad_fn of a primitive op: applies the primitive's VJP to the saved inputs.

    Made only by `_attach` (one per recorded op), which sets ``prim``, ``params``;
    ``saved``: per operand, what its VJP gets for it (the input Tensor, a SavedMeta, the
    Python scalar operand, or None); ``versions``: per operand, a kept tensor's version at
    save time; ``out``: the output's array when the VJP reads it, or None, with its version
    box and version at save time, dtype and device in ``_out_*`` (slots, not a tuple: one
    object less for the garbage collector per node). Tuples aligned with the operands, as
    the compiled path's node keeps them: fewer objects per op than dicts.
    """

    __slots__ = ("prim", "params", "saved", "versions", "out", "_out_box", "_out_v", "_out_dtype",
                 "_out_device")

    def name(self) -> str:
        return self.prim.grad_name

    def apply(self, grads, create_graph, retain_graph):
        saved = self.saved
        if saved is None:
            self._check_not_freed()
        inputs = list(saved)  # (scalar operands and None as they are)
        versions = self.versions
        kept = False   # (does the node keep an input's values? see the end)
        for i, s in enumerate(saved):
            if isinstance(s, Tensor):
                kept = True
                version = versions[i]
                if s._vbox[0] != version:
                    raise _modified(self, f"input {i}", version, s._vbox[0])
                if not create_graph:  # s.detach(), inline (one call less per saved input)
                    d = inputs[i] = _wrap(s._data, s.dtype, s.device)
                    d._vbox = s._vbox
            elif type(s) is SavedMeta:
                inputs[i] = s.unpack(self, i, create_graph)
        out = self.out
        if out is not None:
            out = _unpack_output(self, create_graph)
        params = self.params
        prim = self.prim
        if prim.needs:  # (registry.py: which inputs get a gradient, for the VJP)
            nexts = self._next
            needs = ((nexts[0] is not None, nexts[1] is not None) if len(nexts) == 2
                     else tuple([nxt is not None for nxt in nexts]))
            result = prim.vjp(grads[0], out, *inputs, needs=needs, **params)
        elif params:
            result = prim.vjp(grads[0], out, *inputs, **params)
        else:
            result = prim.vjp(grads[0], out, *inputs)
        # A backward frees what the node keeps of values, a kept input or output (its graph
        # is then spent). A node that kept only shapes and numbers, as PyTorch's
        # ``AddBackward0`` or ``MeanBackward0``, may run again without ``retain_graph``.
        # (PyTorch keeps the 2 of a lone ``x * 2`` as a tensor and refuses; here it is the
        # number a composite such as ``mean``'s division also keeps, so both run again.)
        if not retain_graph and (kept or out is not None):
            self.saved = self.out = None
            self._freed = True
        hooks = self._hooks
        if hooks is None or not hooks.post:
            return result  # inputs that need no gradient have no edge: the engine skips them
        return [r if nxt is not None else None for r, nxt in zip(result, self._next)]

    def keep_input(self, t) -> None:
        """`t`'s memory is about to be overwritten by an in-place op whose own node this is
        (``a.mul_(b)`` saves the old a for b's gradient): keep a copy of the old value."""
        saved = self.saved
        if not saved:
            return
        saved = list(saved)
        for i, old in enumerate(saved):
            # (or its memory: an interpreted call's ``detach`` is the same array, its own version)
            if isinstance(old, Tensor) and (old._vbox is t._vbox or old._data is t._data):
                version = self.versions[i]
                copy = Tensor._wrap(old._data.copy(), old.dtype, old.device)
                copy._vbox = [version]
                if old.grad_fn is not None:
                    copy._requires_grad = True
                    copy.grad_fn = old.grad_fn
                    copy._output_nr = old._output_nr
                saved[i] = copy
        self.saved = tuple(saved)


def _keep_output(node, result) -> None:
    """Keep `result`'s array and version in `node` (its VJP reads the output)."""
    vbox = result._vbox
    node.out = result._data
    node._out_box = vbox
    node._out_v = vbox[0]
    node._out_dtype = result.dtype
    node._out_device = result.device


def _unpack_output(node, create_graph):
    vbox, version = node._out_box, node._out_v
    if vbox[0] != version:
        raise _modified(node, "output", version, vbox[0])
    t = Tensor._wrap(node.out, node._out_dtype, node._out_device)
    t._vbox = vbox
    if create_graph:
        t._requires_grad = True
        t.grad_fn = node
    return t


class Tier0PrimNode(PrimNode):
    """A PrimNode recorded inside a tier-0 forward (compiler/tiers.Tier0): its backward
    runs inside ``impls.serving_tier0`` as the forward did, so the eager kernels it asks for
    queue behind those the compiled step waits for. The same fields and gradients as a
    PrimNode's; only the kernels' queue rank differs."""

    __slots__ = ()

    def apply(self, grads, create_graph, retain_graph):
        with _serving_tier0():
            return PrimNode.apply(self, grads, create_graph, retain_graph)


def _tier0_node():
    """The class of a node recorded now while some thread runs a tier-0 forward or has
    saved-tensor hooks (ops.impls.TIER0_THREADS counts both): this thread's own blocks
    decide (another thread's eager ops stay PrimNodes)."""
    if _SAVED_HOOKS.stack:
        return _SAVED_HOOKS.node_class   # (autograd/graph.py's HookedPrimNode)
    return PrimNode if _outside_tier0() else Tier0PrimNode


class AccumulateGrad(Node):
    """The node of a leaf tensor: adds incoming gradients into ``tensor.grad``."""

    __slots__ = ("variable", "_post_acc_hooks")

    def __init__(self, tensor):
        super().__init__((), 1)
        self.variable = weakref.ref(tensor)
        self._post_acc_hooks = None  # [hook(tensor)] run after .grad is updated

    def _add_post_acc_hook(self, fn):
        if self._post_acc_hooks is None:
            self._post_acc_hooks = []
        self._post_acc_hooks.append(fn)
        return _Handle(self._post_acc_hooks, fn)

    def apply(self, grads, create_graph, retain_graph):
        t = self.variable()
        g = grads[0]
        if t is not None and g is not None:
            old = t._grad
            if old is None and not create_graph and _exclusive(g) and (
                    t._data.flags.c_contiguous or not dense_out_of_order(t._data)):
                # Nobody else can see this gradient's memory: take it instead of copying
                # (the common step when .grad was set to None: zero_grad's default); the
                # gradient is row-major, the layout .grad has unless the leaf is dense in
                # another order (then .grad takes the leaf's strides: `_own_copy`).
                new = _wrap(g._data, g.dtype, g.device)  # a fresh leaf over the same memory
                if g.dtype is t.dtype and g.device is t.device and g._data.shape == t._data.shape:
                    t._grad = new  # (what the .grad setter checks, inline: 0.5 µs less per leaf)
                else:
                    t.grad = new   # (a leaf changed since it was recorded: the setter's error)
                new = None
            elif old is not None and not create_graph and not old._requires_grad:
                # The common step when .grad is kept: add into .grad's own memory (the
                # engine checked shape and dtype already)
                _ew.add_into(old._data, g._data)
                old._vbox[0] += 1
            else:
                old = None  # (`_exclusive` counts references to the gradient, not to .grad)
                if t.grad is None:
                    # Own the memory: a gradient may alias an array the graph still uses.
                    t.grad = laid_out_as(g, t) if create_graph else _own_copy(g, t)
                else:
                    # Out of place (create_graph, or a .grad that is part of a graph): an
                    # in-place add would corrupt a .grad a graph uses.
                    t.grad = t.grad + (g if create_graph else g.detach())
            # The hooks see the final .grad with no reference to the gradient held here
            # (the accumulation is written in this method: one Python call less per leaf).
            g = old = None
        hooks = self._post_acc_hooks
        if hooks and t is not None:
            for h in list(hooks):
                h(t)
        return []


def leaf_node(t) -> AccumulateGrad:
    # The tensor holds its accumulator strongly (the node holds the tensor weakly, so
    # there is no cycle): hooks registered on a leaf before any op uses it live on the
    # node and must not be collected with it.
    node = t._accumulator
    if node is None:
        node = t._accumulator = AccumulateGrad(t)
    return node


def edge(t):
    """(node, output_nr) for a tensor that requires grad, else (None, 0)."""
    if not t.requires_grad:
        return (None, 0)
    if t.grad_fn is not None:
        return (t.grad_fn, t._output_nr)
    return (leaf_node(t), 0)


_NR1, _NR2 = (0,), (0, 0)   # the output indices of most nodes' inputs (a shared tuple)


_KEEP, _META = 1, 2   # what a node keeps of an operand: its values, its shape and dtype


def _records(prim, needs: tuple):
    """(per operand: `_KEEP`, `_META` or 0, whether to keep the output) for one
    requires_grad pattern: functions of the flags alone, so each primitive keeps them per
    pattern instead of calling the rules per op."""
    recs = prim.records
    rec = recs.get(needs)
    if rec is None:
        n = len(needs)
        save = prim.save
        keep = tuple(range(n) if save is None else save(needs))
        meta_idx = prim.extra.get("meta")
        if meta_idx is None:
            meta_idx = ()
        elif callable(meta_idx):
            meta_idx = meta_idx(needs)
        hows = tuple(_KEEP if i in keep else _META if i in meta_idx else 0 for i in range(n))
        out = prim.save_out
        rec = recs[needs] = (hows, bool(out(needs) if callable(out) else out))
    return rec


def make_prim_node(prim, args, params, result, meta=None) -> None:
    """Attach a PrimNode to `result` (called by bind when some input requires grad).

    `meta` is the (shape, dtype) per operand when the caller already has it (bind's
    dispatch plan keeps it per operand signature); otherwise it is built here.
    """
    n = len(args)
    if n == 2:
        record_binary(prim, args[0], args[1], params, result, meta)
        return
    if n == 1:
        record_unary(prim, args[0], params, result, meta)
        return
    _record(prim, args, params, result, meta)


def _record(prim, args, params, result, meta) -> None:
    """The general case of make_prim_node: any operands, non-differentiable positions,
    views whose base was written in place."""
    nondiff = prim.nondiff
    views = _VIEWS_ACTIVE[0]
    if meta is None:
        meta = [(a._data.shape, a.dtype) if isinstance(a, Tensor) else None for a in args]
    needs = []
    nexts = []
    nrs = []
    i = 0
    for a in args:
        if (isinstance(a, Tensor) and a._requires_grad and a.dtype.differentiable
                and (not nondiff or i not in nondiff)):
            if views and a._base is not None:
                _refresh_view(a)  # its base was written in place since (autograd/views.py)
            fn = a.grad_fn
            if fn is None:
                nexts.append(a._accumulator or leaf_node(a))
                nrs.append(0)
            else:
                nexts.append(fn)
                nrs.append(a._output_nr)
            needs.append(True)
        else:
            nexts.append(None)
            nrs.append(0)
            needs.append(False)
        i += 1
    if True not in needs:   # (only non-differentiable operands require grad: neither does the result)
        return
    needs = tuple(needs)
    rec = prim.records.get(needs)
    hows, keep_out = rec if rec is not None else _records(prim, needs)
    saved = []
    versions = []
    for a, how in zip(args, hows):
        if how == _KEEP and isinstance(a, Tensor):
            if _INFERENCE_MADE[0]:
                _refuse_saved(a)
            saved.append(a)
            versions.append(a._vbox[0])
        else:
            # a scalar operand is kept as it is (the VJP gets it); of a tensor, its
            # SavedMeta or nothing
            saved.append(a if not isinstance(a, Tensor) else saved_meta(a) if how == _META else None)
            versions.append(None)
    _attach(prim, params, tuple(nexts), tuple(nrs), tuple(saved), tuple(versions), meta, result,
            keep_out)


# The one- and two-operand cases (nearly every recorded op) are spelled out below, so a
# recorded op costs about what PyTorch's does: bind calls them directly.

def record_unary(prim, a, params, result, meta) -> None:
    """make_prim_node for one operand."""
    if not (isinstance(a, Tensor) and a._requires_grad and a.dtype.is_floating_point
            and 0 not in prim.nondiff):
        _record(prim, (a,), params, result, meta)
        return
    if _VIEWS_ACTIVE[0] and a._base is not None:
        _refresh_view(a)  # its base was written in place since (autograd/views.py)
    fn = a.grad_fn
    if fn is None:
        fn = a._accumulator or leaf_node(a)
        nrs = _NR1
    else:
        nr = a._output_nr
        nrs = (nr,) if nr else _NR1
    if meta is None:
        meta = ((a._data.shape, a.dtype),)
    rec = prim.records.get(_NEEDS_ONE)
    (how,), keep_out = rec if rec is not None else _records(prim, _NEEDS_ONE)
    if how == _KEEP:
        if _INFERENCE_MADE[0]:
            _refuse_saved(a)
        # (`_attach(prim, params, (fn,), nrs, (a,), (a._vbox[0],), meta, result, keep_out)`
        # written out: one Python call of nine arguments less per recorded op)
        node = _new(_tier0_node() if _TIER0_THREADS[0] else PrimNode)
        node._next = (fn,)
        node._nrs = nrs
        node.num_outputs = 1
        node._hooks = None
        node._freed = False
        node._meta = meta
        node.prim = prim
        node.params = params
        node.saved = (a,)
        v = a._vbox[0]
        node.versions = (v,) if v else _ZERO1
        result._requires_grad = True
        result.grad_fn = node
        if keep_out:
            _keep_output(node, result)
        else:
            node.out = None
    else:
        m = saved_meta(a) if how else None
        saved = _ALONE.get(m) or _ALONE.setdefault(m, (m,))
        _attach(prim, params, (fn,), nrs, saved, _NONES1, meta, result, keep_out)


_NEEDS_ONE = (True,)
# Fields that hold no tensor are shared tuples: an op whose node keeps only shapes (a reshape,
# an index, an add) then allocates no tuple for them, and the garbage collector, whose young
# collections follow the count of new container objects, runs less often (NTM: 6 of 10 nodes).
_NONES1, _NONES2 = (None,), (None, None)
_ZERO1, _ZERO2 = (0,), (0, 0)
_ALONE = {None: _NONES1}   # the operand's SavedMeta (one per device and layout) -> its 1-tuple


def record_binary(prim, a, b, params, result, meta) -> None:
    """make_prim_node for two operands (tensors or Python scalars)."""
    if prim.nondiff:
        _record(prim, (a, b), params, result, meta)
        return
    k = 0
    fa = fb = None
    ra = rb = 0
    ta = isinstance(a, Tensor)
    if ta and a._requires_grad and a.dtype.is_floating_point:
        k = 2
        if _VIEWS_ACTIVE[0] and a._base is not None:
            _refresh_view(a)  # its base was written in place since (autograd/views.py)
        fa = a.grad_fn
        if fa is None:
            fa = a._accumulator or leaf_node(a)
        else:
            ra = a._output_nr
    tb = isinstance(b, Tensor)
    if tb and b._requires_grad and b.dtype.is_floating_point:
        k += 1
        if _VIEWS_ACTIVE[0] and b._base is not None:
            _refresh_view(b)
        fb = b.grad_fn
        if fb is None:
            fb = b._accumulator or leaf_node(b)
        else:
            rb = b._output_nr
    rec = prim.records2[k]  # (2 * (a requires grad) + (b requires grad): a list index)
    if rec is None:
        rec = prim.records2[k] = _records(prim, (k > 1, k & 1 == 1))
    (ha, hb), keep_out = rec
    if _INFERENCE_MADE[0]:
        _refuse_saved(a if ta and ha == _KEEP else None, b if tb and hb == _KEEP else None)
    # per operand: a scalar as it is; a tensor's values with their version, a stand-in, or None
    if ta and ha == _KEEP:
        sa, va = a, a._vbox[0]
    else:
        sa, va = (saved_meta(a) if ha else None) if ta else a, None
    if tb and hb == _KEEP:
        sb, vb = b, b._vbox[0]
    else:
        sb, vb = (saved_meta(b) if hb else None) if tb else b, None
    if meta is None:
        meta = ((a._data.shape, a.dtype) if ta else None, (b._data.shape, b.dtype) if tb else None)
    # (`_attach(prim, params, (fa, fb), (ra, rb), (sa, sb), (va, vb), meta, result, keep_out)`
    # written out: one Python call of nine arguments less per recorded op; _attach's fields)
    node = _new(_tier0_node() if _TIER0_THREADS[0] else PrimNode)
    node._next = (fa, fb)
    node._nrs = (ra, rb) if ra or rb else _NR2
    node.num_outputs = 1
    node._hooks = None
    node._freed = False
    node._meta = meta
    node.prim = prim
    node.params = params
    node.saved = (sa, sb) if sa is not None or sb is not None else _NONES2
    # (a tensor never written in place: version 0, the common case, shared)
    node.versions = _NONES2 if va is None and vb is None else _ZERO2 if va == 0 == vb else (va, vb)
    result._requires_grad = True
    result.grad_fn = node
    if keep_out:
        _keep_output(node, result)
    else:
        node.out = None


_new = object.__new__
_wrap = Tensor._wrap


def _attach(prim, params, nexts, nrs, saved, versions, meta, result, keep_out) -> None:
    """Make the PrimNode (fields set here rather than by __init__: one Python frame
    less per recorded op) and make it `result`'s grad_fn; `keep_out`: save the output.
    `record_binary` and `record_unary`'s kept-input case set the same fields themselves
    (tests/autograd/test_node_fields.py checks the three agree)."""
    node = _new(_tier0_node() if _TIER0_THREADS[0] else PrimNode)
    node._next = nexts
    node._nrs = nrs
    node.num_outputs = 1
    node._hooks = None
    node._freed = False
    node._meta = meta
    node.prim = prim
    node.params = params
    node.saved = saved
    node.versions = versions
    result._requires_grad = True
    result.grad_fn = node
    if keep_out:
        _keep_output(node, result)
    else:
        node.out = None
