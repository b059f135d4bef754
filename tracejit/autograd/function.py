"""User-defined differentiable functions: ``class Exp(tracejit.autograd.Function)``."""
from __future__ import annotations

import weakref

from ..errors import ShapeError
from ..ops import registry as _reg
from .grad_mode import is_grad_enabled, no_grad
from .node import Node, SavedTensor, edge, leaf_node
from .saved import HOOKS as _SAVED_HOOKS, PackedSaved
from ..tensor import _MADE as _INFERENCE_MADE, Tensor, _refuse_saved

__all__ = ["Function", "FunctionCtx", "InplaceFunction", "once_differentiable"]


class FunctionCtx:
    """The ``ctx`` handed to forward/backward."""

    def __init__(self, needs_input_grad: tuple):
        self.needs_input_grad = needs_input_grad
        self._saved = ()
        self._node = None
        self._non_diff = set()
        self._dirty = ()
        self.materialize_grads = True

    def save_for_backward(self, *tensors) -> None:
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward takes tensors (or None), got {type(t).__name__}")
        if _INFERENCE_MADE[0]:
            _refuse_saved(*tensors)
        hooks = _SAVED_HOOKS.stack[-1] if _SAVED_HOOKS.stack else None   # (saved_tensors_hooks)
        if hooks:
            self._saved = tuple([None if t is None else PackedSaved(t, hooks) for t in tensors])
        else:
            self._saved = tuple([None if t is None else SavedTensor(t) for t in tensors])
        self._raw = tensors

    @property
    def saved_tensors(self) -> tuple:
        ref = self._node
        if ref is None:  # forward still running, or no graph was recorded
            return tuple(getattr(self, "_raw", ()))
        node = ref()
        if node is None:
            raise RuntimeError("saved_tensors: the graph this ctx belonged to has been freed")
        if node._freed:
            node._check_not_freed()
        return tuple(None if s is None else s.unpack(node, i, node._create_graph)
                     for i, s in enumerate(self._saved))

    def mark_non_differentiable(self, *tensors) -> None:
        self._non_diff.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors) -> None:
        """The inputs forward modified in place (and returns): their history becomes this
        Function's output instead of a copy's."""
        self._dirty = tensors

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value


class FunctionNode(Node):
    __slots__ = ("fn_cls", "ctx", "_create_graph", "out_meta")

    def __init__(self, fn_cls, ctx, nexts, num_outputs, out_meta):
        super().__init__(nexts, num_outputs)
        self.fn_cls = fn_cls
        self.ctx = ctx
        self._create_graph = False
        self.out_meta = out_meta

    def name(self) -> str:
        return f"{self.fn_cls.__name__}Backward"

    def apply(self, grads, create_graph, retain_graph):
        self._create_graph = create_graph
        if self.ctx.materialize_grads:
            from .. import ops
            grads = [g if g is not None else ops.zeros(s, dtype=d, device=dev)
                     for g, (s, d, dev) in zip(grads, self.out_meta)]
        res = self.fn_cls.backward(self.ctx, *grads)
        if not isinstance(res, tuple):
            res = (res,)
        n = len(self._next)
        if len(res) < n:
            raise RuntimeError(f"{self.fn_cls.__name__}.backward returned {len(res)} gradients "
                               f"but forward took {n} inputs")
        check_grads(self.name(), res, [m and m[0] for m in self._meta])
        if not retain_graph and self.ctx._saved:
            # (as PyTorch: a backward that reads no saved tensor may run again; one that
            # does finds them freed, `saved_tensors`)
            self._freed = True
            self.ctx._saved = ()
        return list(res[:n])


def check_grads(name: str, grads, shapes) -> None:
    """Raise PyTorch's error where a custom Function's backward returned a gradient that
    does not sum to its input's shape (`shapes`, None for a non-tensor argument)."""
    for k, (g, s) in enumerate(zip(grads, shapes)):
        gs = getattr(g, "shape", None)
        if gs is None or s is None or gs == s:
            continue
        if not all(type(d) is int for d in (*gs, *s)):
            continue   # (a symbolic size is checked when the program runs)
        if len(s) > len(gs) or any(d != 1 and d != e for d, e in zip(s[::-1], gs[::-1])):
            raise ShapeError(f"Function {name} returned an invalid gradient at index {k} - got {list(gs)} "
                             f"but expected shape compatible with {list(s)}")


class Function:
    """Subclass with static ``forward(ctx, *args)`` and ``backward(ctx, *grads)``; call ``.apply``.
    Or (PyTorch 2's style) ``forward(*args)`` and ``setup_context(ctx, inputs, output)``."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError

    @classmethod
    def _forward(cls, ctx, *args, **kwargs):
        """The forward in either style: given the context, or followed by ``setup_context``."""
        if cls.setup_context is Function.setup_context:
            return cls.forward(ctx, *args, **kwargs)
        out = cls.forward(*args, **kwargs)
        cls.setup_context(ctx, args, out)
        return out

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError

    @classmethod
    def apply(cls, *args, **kwargs):
        tracer = _reg.trace_state.tracer
        if tracer is not None and hasattr(tracer, "record_function"):
            return tracer.record_function(cls, args, kwargs)
        needs = tuple([isinstance(a, Tensor) and a.requires_grad and a.dtype.is_floating_point
                       for a in args])
        ctx = FunctionCtx(needs)
        with no_grad():
            out = cls._forward(ctx, *args, **kwargs)
        if True not in needs or not is_grad_enabled():
            return out
        outs = out if isinstance(out, tuple) else (out,)
        # (the node's fields set here, as autograd/node.py's `_attach` sets a PrimNode's:
        # this runs per call, a split's or chunk's with gradients among them)
        node = _new(FunctionNode)
        node._next = tuple([_edge_node(a) if need else None for a, need in zip(args, needs)])
        node._nrs = tuple([a._output_nr if need and a.grad_fn is not None else 0 for a, need in zip(args, needs)])
        node.num_outputs = len(outs)
        node._hooks = None
        node._freed = False
        node.fn_cls = cls
        node.ctx = ctx
        node._create_graph = False
        node.out_meta = [(o.shape, o.dtype, o.device) if isinstance(o, Tensor) else ((), None, None)
                         for o in outs]
        node._meta = [(a._data.shape, a.dtype) if isinstance(a, Tensor) else None for a in args]
        # ctx and node must not hold each other (nor ctx the outputs, whose grad_fn is the
        # node): a reference cycle would leave every graph through a Function to the cycle
        # collector instead of freeing it when the last output goes.
        ctx._node = weakref.ref(node)
        dirty = _check_dirty(cls, ctx, args, outs)
        non_diff = ctx._non_diff
        arg_ids = None
        wrapped = []
        for i, o in enumerate(outs):
            if isinstance(o, Tensor) and o.dtype.is_floating_point and (not non_diff or id(o) not in non_diff):
                if dirty and id(o) in dirty:
                    _rebase_dirty(o, node, i)
                    wrapped.append(o)
                    continue
                if arg_ids is None:
                    arg_ids = {id(a) for a in args}
                if id(o) in arg_ids:  # forward returned an input: its own identity
                    o = o.detach()
                if type(o) is Tensor and not _INFERENCE_MADE[0]:
                    o._requires_grad = True   # (the setter's checks: a floating tensor, no inference)
                else:
                    o.requires_grad = True
                o.grad_fn = node
                o._output_nr = i
            wrapped.append(o)
        raw = getattr(ctx, "_raw", ())
        if raw:
            # A saved output must unpack linked to this node, so that double backward
            # (create_graph=True) differentiates through it.
            saved = list(ctx._saved)
            for j, r in enumerate(raw):
                for i, o in enumerate(outs):
                    if r is o and wrapped[i].grad_fn is node and type(saved[j]) is not PackedSaved:
                        saved[j] = SavedTensor(wrapped[i], is_output=True)
            ctx._saved = tuple(saved)
            ctx._raw = ()
        return tuple(wrapped) if isinstance(out, tuple) else wrapped[0]


_new = object.__new__


def _edge_node(t):
    """The node of `t`'s gradient edge (`edge`'s first item) for a tensor requiring grad."""
    fn = t.grad_fn
    return fn if fn is not None else leaf_node(t)


_NONE_DIRTY: frozenset = frozenset()


def _check_dirty(cls, ctx, args, outs) -> set:
    """The ids of the tensors ``ctx.mark_dirty`` named, each an input that forward returned."""
    if not ctx._dirty:
        return _NONE_DIRTY
    dirty = {id(t) for t in ctx._dirty}
    inputs, returned = {id(a) for a in args}, {id(o) for o in outs}
    for t in ctx._dirty:
        if id(t) not in inputs or id(t) not in returned:
            raise RuntimeError(f"{cls.__name__}: a tensor passed to ctx.mark_dirty() must be an input "
                               "of forward that forward also returns")
        if t._requires_grad and t.grad_fn is None and (t._base is None or t._base.grad_fn is None):
            what = "a view of a leaf Variable" if t._base is not None else "a leaf Variable"
            raise RuntimeError(f"{cls.__name__}: {what} that requires grad has been used in an in-place "
                               "operation (ctx.mark_dirty).")
    return dirty


def _rebase_dirty(t, node, i: int) -> None:
    """`t`, written in place by the Function of `node`, is that node's output `i` (through
    the base's history for a view, as an in-place op's result)."""
    from ..tensor import Tensor
    base = t._base
    if base is not None and base._requires_grad:
        from .views import ACTIVE, rebase_view_history, view_positions
        positions = view_positions(t, base)
        if positions is None:
            raise RuntimeError("ctx.mark_dirty: this view's elements cannot be located in its base; "
                               "modify the base (or a contiguous view of it) instead")
        result = Tensor._wrap(t._data, t.dtype, t.device)
        result._requires_grad, result.grad_fn, result._output_nr = True, node, i
        ACTIVE[0] = True   # (older views of the base must now be checked when used)
        rebase_view_history(t, base, positions, result)
        return
    old, nr = t.grad_fn, t._output_nr
    t._requires_grad, t.grad_fn, t._output_nr = True, node, i
    if old is not None and old._hooks is not None:   # (a retain_grad follows the new value)
        old._pass_retain(nr, t)


class InplaceFunction(Function):
    """A `Function` told whether it may work in place (``inplace``), as PyTorch's."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace


class _DelayedError(Node):
    """grad_fn of what a ``once_differentiable`` backward returned under ``create_graph``:
    differentiating through it raises, as PyTorch's, instead of silently dropping the terms."""
    __slots__ = ("message",)

    def __init__(self, message: str, num_outputs: int):
        super().__init__(((None, 0),) * num_outputs, num_outputs)
        self.message = message

    def name(self) -> str:
        return "DelayedError"

    def apply(self, grads, create_graph, retain_graph):
        raise RuntimeError(self.message)


def once_differentiable(fn):
    """Decorate a `Function`'s ``backward`` that is not itself differentiable: it runs with
    grad mode off; where a double backward would need to go through it (a gradient handed
    to it requires grad), its results carry a node that raises when reached."""
    import functools

    from ..tensor import Tensor

    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with no_grad():
            out = fn(ctx, *args)
        if not is_grad_enabled() or not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            return out
        outs = out if isinstance(out, tuple) else (out,)
        node = _DelayedError("trying to differentiate twice a function that was marked with "
                             "@once_differentiable", len(outs))
        wrapped = []
        for i, o in enumerate(outs):
            if isinstance(o, Tensor) and o.dtype.differentiable:
                o = o.detach()
                o.requires_grad, o.grad_fn, o._output_nr = True, node, i
            wrapped.append(o)
        return tuple(wrapped) if isinstance(out, tuple) else wrapped[0]
    return wrapper
