"""Autograd graph nodes (``grad_fn``) and the saved-tensor snapshots they hold.

A node maps gradients of its outputs to gradients of its inputs; ``next_functions``
points at the nodes that produced those inputs (an `AccumulateGrad` for leaves).
Saved tensors are snapshots (data, version at save time, producer) rather than the
Tensor objects, so a later in-place op that rebinds a tensor's ``grad_fn`` cannot
corrupt the graph, and modifying saved data is detected by the version counter.
"""
from __future__ import annotations

import sys
import weakref

import numpy as np

from ..device import CPU, array_module
from ..errors import GraphFreedError, InplaceModifiedError
from ..tensor import Tensor
from .views import ACTIVE as _VIEWS_ACTIVE, refresh_stale_view as _refresh_view

__all__ = ["Node", "PrimNode", "AccumulateGrad", "SavedTensor", "SavedMeta", "make_prim_node"]


class SavedTensor:
    __slots__ = ("data", "vbox", "version", "grad_fn", "output_nr", "leaf", "dtype", "device", "is_output")

    def __init__(self, t, is_output: bool = False):
        self.data = t._data
        vbox = self.vbox = t._vbox
        self.version = vbox[0]
        self.dtype = t.dtype
        self.device = t.device
        self.is_output = is_output
        fn = t.grad_fn
        if is_output:
            self.grad_fn = None  # the node itself; filled at unpack time to avoid a cycle
            self.leaf = None
            self.output_nr = t._output_nr
        elif fn is None:
            self.grad_fn = None
            self.leaf = t if t._requires_grad else None
            self.output_nr = 0
        else:
            self.grad_fn = fn
            self.leaf = None
            self.output_nr = t._output_nr

    def unpack(self, node: "Node", index: int, create_graph: bool):
        if self.vbox[0] != self.version:
            what = "output" if self.is_output else f"input {index}"
            raise InplaceModifiedError(
                f"one of the tensors needed for gradient computation has been modified by an "
                f"in-place operation: {what} of {node.name()} was saved at version {self.version} "
                f"and is now at version {self.vbox[0]}. Clone it before modifying it in place "
                f"(x = x.clone()), or use the out-of-place op.")
        if self.leaf is not None:
            return self.leaf if create_graph else self.leaf.detach()
        t = Tensor._wrap(self.data, self.dtype, self.device)
        t._vbox = self.vbox
        if create_graph:
            fn = node if self.is_output else self.grad_fn
            if fn is not None:
                t.requires_grad = True
                t.grad_fn = fn
                t._output_nr = self.output_nr
        return t


class SavedMeta:
    """What a VJP needs of an input whose values it never reads: shape, dtype, device.

    Unpacks to a tensor of the right shape backed by one broadcast zero, so no data is
    kept alive and later in-place changes of the input do not trip the version check
    (as in PyTorch, where e.g. SumBackward stores only the input's sizes).
    """

    __slots__ = ("shape", "dtype", "device")

    def __init__(self, t):
        self.shape = t._data.shape
        self.dtype = t.dtype
        self.device = t.device

    def unpack(self, node, index: int, create_graph: bool):
        if self.device is CPU:
            # np.broadcast_to's Python-level checks cost more than the rest of a small
            # backward node; an ndarray over one zero with all strides 0 is the same view.
            shape = self.shape
            zeros = np.ndarray(shape, self.dtype.np, _zero_buffer(self.dtype.np), 0, (0,) * len(shape))
            zeros.flags.writeable = False
            return Tensor._wrap(zeros, self.dtype, CPU)
        xp = array_module(self.device)
        return Tensor._wrap(xp.broadcast_to(xp.zeros((), self.dtype.np), self.shape), self.dtype, self.device)


_ZEROS: dict = {}


def _zero_buffer(npd):
    """One read-only zero of dtype `npd`, shared by every SavedMeta view."""
    z = _ZEROS.get(npd)
    if z is None:
        z = _ZEROS[npd] = np.zeros(1, npd)
        z.flags.writeable = False
    return z


class Node:
    """Base class of every grad_fn."""

    __slots__ = ("next_functions", "_pre_hooks", "_post_hooks", "_tensor_hooks",
                 "_retain", "num_outputs", "__weakref__", "_freed", "_meta")

    def __init__(self, next_functions: tuple, num_outputs: int = 1):
        self.next_functions = next_functions
        self.num_outputs = num_outputs
        self._pre_hooks = None
        self._post_hooks = None
        self._tensor_hooks = None  # {output_nr: [hook(grad) -> grad|None]}
        self._retain = None        # {output_nr: weakref to tensor} for retain_grad
        self._freed = False
        self._meta = None          # [(shape, dtype)] per input, for summing broadcast grads

    def name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return f"<{self.name()}>"

    def register_hook(self, fn):
        """fn(grad_inputs, grad_outputs) -> new grad_inputs or None; runs after the node."""
        if self._post_hooks is None:
            self._post_hooks = []
        self._post_hooks.append(fn)
        return _Handle(self._post_hooks, fn)

    def register_prehook(self, fn):
        """fn(grad_outputs) -> new grad_outputs or None; runs before the node."""
        if self._pre_hooks is None:
            self._pre_hooks = []
        self._pre_hooks.append(fn)
        return _Handle(self._pre_hooks, fn)

    def _add_tensor_hook(self, output_nr: int, fn):
        if self._tensor_hooks is None:
            self._tensor_hooks = {}
        lst = self._tensor_hooks.setdefault(output_nr, [])
        lst.append(fn)
        return _Handle(lst, fn)

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
    """grad_fn of a primitive op: applies the primitive's VJP to saved snapshots."""

    __slots__ = ("prim", "params", "saved", "saved_out", "scalars", "needs")

    def __init__(self, prim, params, next_functions, saved, saved_out, scalars, needs):
        # Node.__init__ inlined: one PrimNode is made per recorded op.
        self.next_functions = next_functions
        self.num_outputs = 1
        self._pre_hooks = self._post_hooks = self._tensor_hooks = self._retain = None
        self._freed = False
        self._meta = None
        self.prim = prim
        self.params = params
        self.saved = saved          # {input index: SavedTensor}
        self.saved_out = saved_out  # SavedTensor or None
        self.scalars = scalars      # {input index: python scalar}
        self.needs = needs          # [bool]: which inputs want a gradient

    def name(self) -> str:
        return self.prim.grad_name

    def apply(self, grads, create_graph, retain_graph):
        if self._freed:
            self._check_not_freed()
        inputs = [None] * len(self.needs)
        for i, s in self.saved.items():
            inputs[i] = s.unpack(self, i, create_graph)
        scalars = self.scalars
        if scalars:
            for i, v in scalars.items():
                inputs[i] = v
        out = self.saved_out.unpack(self, -1, create_graph) if self.saved_out is not None else None
        result = self.prim.vjp(grads[0], out, *inputs, **self.params)
        if not retain_graph:
            self.saved = self.saved_out = None
            self._freed = True
        if self._post_hooks is None:
            return result  # inputs that need no gradient have no edge: the engine skips them
        return [r if need else None for r, need in zip(result, self.needs)]


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
        # The accumulation lives in its own method so that `apply` holds no reference to
        # the gradient (`_exclusive` counts them) while the hooks see the final .grad.
        self._accumulate(grads, create_graph)
        hooks = self._post_acc_hooks
        if hooks:
            t = self.variable()
            if t is not None:
                for h in list(hooks):
                    h(t)
        return []

    def _accumulate(self, grads, create_graph):
        t = self.variable()
        g = grads[0]
        if t is None or g is None:
            return []
        if t.grad is None and not create_graph and _exclusive(g):
            # Nobody else can see this gradient's memory: take it instead of copying.
            t.grad = g._wrap(g._data, g.dtype, g.device)  # a fresh leaf over the same memory
            return []
        if not create_graph:
            g = g.detach()
        if t.grad is None:
            # Own the memory: a gradient may alias an array the graph still uses.
            t.grad = g if create_graph else g.clone()
        elif create_graph or t.grad.requires_grad:
            # Out of place: an in-place add would corrupt a .grad that is part of a graph.
            t.grad = t.grad + g
        else:
            t.grad._data += g._data
            t.grad._vbox[0] += 1
        return []


def _exclusive(g) -> bool:
    """True when `g` (a gradient arriving at a leaf) is referenced only by the engine.

    Expected references to the tensor: the engine's buffer list, `apply`'s local, this
    function's parameter and getrefcount's argument (the engine drops its other locals
    before each apply). To the array: the tensor, the local `arr` and getrefcount's
    argument. The array must own its memory (or be a reshape of a whole buffer nobody
    else holds; never a broadcast view, whose stride is 0), be writable and
    C-contiguous. Then no user tensor, saved value or other gradient shares the memory
    and `.grad` can take it without a copy, as PyTorch's AccumulateGrad steals a
    gradient whose use count allows it.
    """
    arr = g._data
    if sys.getrefcount(g) > 4 or sys.getrefcount(arr) > 3:
        return False
    if not (arr.flags.writeable and arr.flags.c_contiguous):
        return False
    base = arr.base
    if base is None:
        return True
    # A reshaped view of a whole buffer held by nothing else (a reduction's result, as
    # ``bias.grad``): the view's .base, `base` and getrefcount's argument are its three
    # references, and the view covers it all in the same order.
    return (sys.getrefcount(base) <= 3 and type(base) is type(arr) and base.base is None
            and base.size == arr.size and base.flags.c_contiguous)


def leaf_node(t) -> AccumulateGrad:
    # The tensor holds its accumulator strongly (the node holds the tensor weakly, so
    # there is no cycle): hooks registered on a leaf before any op uses it live on the
    # node and must not be collected with it.
    node = t._accumulator
    if node is None:
        node = AccumulateGrad(t)
        t._accumulator = node
    return node


def edge(t):
    """(node, output_nr) for a tensor that requires grad, else (None, 0)."""
    if not t.requires_grad:
        return (None, 0)
    if t.grad_fn is not None:
        return (t.grad_fn, t._output_nr)
    return (leaf_node(t), 0)


_NO_EDGE = (None, 0)


def make_prim_node(prim, args, params, result) -> None:
    """Attach a PrimNode to `result` (called by bind when some input requires grad)."""
    # One call per recorded op: written for speed (no enumerate, attributes read once).
    if len(args) == 2 and not prim.nondiff and not _VIEWS_ACTIVE[0]:
        _binary_node(prim, args, params, result)
        return
    needs = []
    nexts = []
    meta = []
    scalars = _EMPTY
    nondiff = prim.nondiff
    views = _VIEWS_ACTIVE[0]
    i = 0
    for a in args:
        if isinstance(a, Tensor):
            dt = a.dtype
            if a._requires_grad and dt.is_floating_point and (not nondiff or i not in nondiff):
                needs.append(True)
                if views and a._base is not None:
                    _refresh_view(a)  # its base was written in place since (autograd/views.py)
                fn = a.grad_fn
                if fn is None:
                    fn = a._accumulator
                    nexts.append((fn if fn is not None else leaf_node(a), 0))
                else:
                    nexts.append((fn, a._output_nr))
            else:
                needs.append(False)
                nexts.append(_NO_EDGE)
            meta.append((a._data.shape, dt))
        else:
            needs.append(False)
            nexts.append(_NO_EDGE)
            if scalars is _EMPTY:
                scalars = {}
            scalars[i] = a
            meta.append(None)
        i += 1
    save = prim.save
    saved = {}
    for i in (range(len(args)) if save is None else save(needs)):
        if i not in scalars:
            a = args[i]
            if a is not None:
                saved[i] = SavedTensor(a)
    meta_idx = prim.extra.get("meta")
    if meta_idx is not None:
        # Inputs whose shape (not values) the VJP reads: keep metadata only.
        n = len(args)
        for i in (meta_idx(needs) if callable(meta_idx) else meta_idx):
            if i < n and i not in saved and i not in scalars and args[i] is not None:
                saved[i] = SavedMeta(args[i])
    node = PrimNode(prim, params, tuple(nexts), saved, None, scalars, needs)
    node._meta = meta
    result._requires_grad = True
    result.grad_fn = node
    result._output_nr = 0
    if prim.save_out:
        node.saved_out = SavedTensor(result, is_output=True)


def _binary_node(prim, args, params, result) -> None:
    """make_prim_node for two operands (most recorded ops), with tuples built directly."""
    a, b = args
    scalars = _EMPTY
    if isinstance(a, Tensor):
        da = a.dtype
        ra = a._requires_grad and da.is_floating_point
        if ra:
            fn = a.grad_fn
            if fn is None:
                fn = a._accumulator
                ea = (fn if fn is not None else leaf_node(a), 0)
            else:
                ea = (fn, a._output_nr)
        else:
            ea = _NO_EDGE
        ma = (a._data.shape, da)
    else:
        ra, ea, ma = False, _NO_EDGE, None
        scalars = {0: a}
    if isinstance(b, Tensor):
        db = b.dtype
        rb = b._requires_grad and db.is_floating_point
        if rb:
            fn = b.grad_fn
            if fn is None:
                fn = b._accumulator
                eb = (fn if fn is not None else leaf_node(b), 0)
            else:
                eb = (fn, b._output_nr)
        else:
            eb = _NO_EDGE
        mb = (b._data.shape, db)
    else:
        rb, eb, mb = False, _NO_EDGE, None
        if scalars is _EMPTY:
            scalars = {1: b}
        else:
            scalars[1] = b
    needs = [ra, rb]
    save = prim.save
    saved = {}
    for i in ((0, 1) if save is None else save(needs)):
        if i not in scalars:
            t = args[i]
            if t is not None:
                saved[i] = SavedTensor(t)
    meta_idx = prim.extra.get("meta")
    if meta_idx is not None:
        for i in (meta_idx(needs) if callable(meta_idx) else meta_idx):
            if i < 2 and i not in saved and i not in scalars and args[i] is not None:
                saved[i] = SavedMeta(args[i])
    node = PrimNode(prim, params, (ea, eb), saved, None, scalars, needs)
    node._meta = [ma, mb]
    result._requires_grad = True
    result.grad_fn = node
    result._output_nr = 0
    if prim.save_out:
        node.saved_out = SavedTensor(result, is_output=True)


_EMPTY: dict = {}
