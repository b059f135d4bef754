"""Module state a captured function writes: in-place updates of captured tensors (a
module's buffers: BatchNorm's running statistics; writes through a tensor's ``.data``)
tensor attributes set on a module (``self.mask = ...``), number attributes set to
numbers (``self.ptr = (self.ptr + n) % K``) and other constants (``self.log_prior = 0``).

Tensors become graph outputs that each call writes back (entry.py), constants are set
again by each call, and later reads in the same trace see the new values; no tracer is
left in a module. A parameter read after a
write through its ``.data`` (PixelCNN's ``w.data *= mask`` before the conv) gets the new
values with the gradient going to the parameter, as eagerly to the leaf.
`StateWrites` is `TraceContext`'s part for these (tracer.py).
"""
from __future__ import annotations

from ..autograd.grad_mode import is_grad_enabled as _grad_enabled
from ..errors import TraceError, user_where
from ..ops import registry as _reg
from ..dtypes import int64
from ..ops.elementwise_logic import CAST
from ..shapes import Sym
from ..tensor import Tensor
from . import view_writes as _views
from .ir import Var
from .lifted import NUMBERS, written
from .module_guard import _plain, read_in_capture
from .pytree import flatten

__all__ = ["StateWrites"]


class StateWrites:
    """The state-writing methods of `TraceContext` (its ``buffer_writes``,
    ``attr_writes``, ``grad_data_written`` and ``grad_data_reads`` tables)."""

    def _written_leaf(self, t: Tensor, new: Var) -> Var:
        """A parameter read after a write through its ``.data``: the new values, with
        the gradient going to `t`, as eagerly to the leaf (view_writes.py's write)."""
        from .tracer import _make_tracer
        done = self.grad_data_reads.get(id(t))
        if done is None or done[0] is not new:
            tw = _make_tracer(self._const_var(t), self)
            done = self.grad_data_reads[id(t)] = (new, self.atom(
                _reg.bind(_views.DETACHED_WRITE, tw, _make_tracer(new, self))))
        return done[1]

    def _in_place_value(self, result: Tensor, target, what: str):
        """`result`'s atom in the dtype of in-place target `target` (an aval, or a tensor):
        cast down the categories as eagerly, refused up them (a float into an int tensor);
        its shape must be the target's."""
        res = self.atom(result)
        if res.aval.dtype is not target.dtype:
            if target.dtype.category < res.aval.dtype.category:
                from ..errors import DTypeError
                raise DTypeError(f"{what}: result type {res.aval.dtype.name} can't be cast to the "
                                 f"in-place output type {target.dtype.name}")
            res = self._emit(CAST, [res], {"dtype": target.dtype})[0]
        if tuple(res.aval.shape) != tuple(target.shape):
            raise RuntimeError(f"{what}: output of shape {tuple(res.aval.shape)} doesn't match the "
                               f"in-place tensor of shape {tuple(target.shape)}")
        return res

    def _write_buffer(self, target: Tensor, result: Tensor, what: str) -> Tensor:
        """An in-place update of a captured tensor (``self.running_mean.mul_(0.9)``): later
        reads in this trace see the new value, and the call writes it back."""
        old = self._const(target)
        res = self._in_place_value(result, old.aval, what)
        if target.requires_grad and _grad_enabled():
            raise TraceError(f"{what}: in-place update of a captured tensor that requires grad (a "
                             f"parameter) inside a compiled function with grad mode on; do it under "
                             f"tracejit.no_grad(), as optimizers and EMA updates do")
        owner = target._data_of   # (a write through ``p.data``: p's reads see it)
        key = id(target) if owner is None else id(owner)
        prev = self.buffer_writes.get(key)
        self.buffer_writes[key] = [target if prev is None else prev[0], res]
        # a write through ``p.data`` or to ``p`` under no_grad: later reads of p get the new
        # values with the gradient going to p, as eagerly to the leaf
        if (target if owner is None else owner).requires_grad:
            self.grad_data_written.add(key)
        return target

    def write_attribute(self, obj, name: str, value) -> bool:
        """``obj.name = tensor`` (a module caching a mask) or a number over a number
        (``self.nfe += 1``) inside the function: held for the rest of this trace and written
        back by each call (True when handled). A number known at capture is written as that
        constant; the guard sees it change, and the next capture lifts it (lifted.py). Another
        constant (None, a string, ``self.log_prior = 0`` over a tensor) set before any read
        is set again by each call."""
        from .tracer import Tracer
        active = self._root().effects.active
        if isinstance(value, Sym) and type(_read_attr(obj, name)) is int and active:
            value = self._sym_number(value, int64)   # (``self.seen += x.shape[0]``, a symbolic dim)
        traced = isinstance(value, Tracer)
        # (trace/script keep torch.jit.trace's meaning: Python state changes once, at capture)
        number = active and type(_read_attr(obj, name)) in NUMBERS and (
            type(value) in NUMBERS or traced and value.ndim == 0 and self.atom(value).aval.weak)
        # a new list, tuple or dict set before any read (N-BEATS' ``self._intermediary_outputs
        # = []``, then appended to): each call sets a new one holding its outputs
        tree = type(value) in (list, tuple, dict) and not _plain(value) and not self.effects.known(value)
        if not (traced or number) and (not (_plain(value) or tree) or self.parent is not None or not active
                                       or read_in_capture(obj, name) is not False):
            return False
        if tree:
            number = "tree"
            self.effects.own(value)
        if self.parent is not None or traced and value._trace is not self:
            where = user_where(3)
            raise TraceError(f"assigning a traced value to `{type(obj).__name__}.{name}`{where} inside a "
                             f"branch or loop body decided at run time is not supported; assign it after "
                             f"the if/loop")
        key = (id(obj), name)
        if key not in self.attr_writes:
            self.attr_writes[key] = [obj, name, _read_attr(obj, name), number]
        written(obj, name)   # (later reads see this value, not the runtime input)
        _set_attr(obj, name, value)
        return True

    def finish_state_writes(self, out_atoms: list) -> list:
        """Append the written state to `out_atoms`; restore every attribute the trace set
        (the module must not keep a tracer); return the write-backs as
        ("buffer", tensor, output k), ("attr", obj, name, output k), ("number", obj, name,
        output k) (a Python number), ("const", obj, name, value), ("tree", obj, name, spec,
        leaves) (a container, `_tree_write`) and ("store", find, key or None to append,
        output k) (side_effects.py's `stores`), and ("rebind",) when a call's writes must make
        its guard look again (entry.py)."""
        writes = []
        for t, res in self.buffer_writes.values():
            writes.append(("buffer", t, len(out_atoms)))
            out_atoms.append(res)
        # (compiled, a tensor set over a value the guard may hold, ``if self.h is None``:
        # the call's guard must look again after each write; trace keeps its capture)
        rebind = self._root().effects.active and any(
            before is not _MISSING and not isinstance(before, Tensor) and _plain(before) and
            isinstance(_read_attr(obj, name), Tensor) for obj, name, before, number in self.attr_writes.values())
        for obj, name, before, number in self.attr_writes.values():
            now = _read_attr(obj, name)
            _set_attr(obj, name, before)
            if number == "tree" and type(now) in (list, tuple, dict):
                writes.append(self._tree_write(obj, name, now, out_atoms))
                continue
            if not isinstance(now, Tensor):
                writes.append(("const", obj, name, now))
                continue
            writes.append(("number" if number else "attr", obj, name, len(out_atoms)))
            out_atoms.append(self.atom(now))
        self.attr_writes.clear()
        for find, key, t in self.effects.stores:
            writes.append(("store", find, key, len(out_atoms)))
            out_atoms.append(self.atom(t))
        if self.effects.arg_writes:
            writes.append(("args", self.effects.arg_writes))
        if rebind:
            writes.append(("rebind",))
        return writes

    def _tree_write(self, obj, name: str, now, out_atoms: list) -> tuple:
        """("tree", obj, name, spec, leaves): the container `now` with each traced tensor
        in it an output k (leaf ("out", k)), anything else kept as it is."""
        from .tracer import Tracer
        leaves, spec = flatten(now)
        kept = []
        for v in leaves:
            if isinstance(v, Tracer):
                if v._trace is not self:
                    self.restore_attributes()
                    raise TraceError(f"`{type(obj).__name__}.{name}` holds a tensor computed in a branch "
                                     f"or loop body decided at run time; store it after the if/loop")
                kept.append(("out", len(out_atoms)))
                out_atoms.append(self.atom(v))
            else:
                kept.append(("const", v))
        return ("tree", obj, name, spec, kept)

    def restore_attributes(self) -> None:
        """After a failed capture: put back what the trace set."""
        for obj, name, before, _ in self.attr_writes.values():
            _set_attr(obj, name, before)
        self.attr_writes.clear()
        self.effects.restore()


_MISSING = object()


def _read_attr(obj, name: str):
    bufs = obj.__dict__.get("_buffers")
    if bufs is not None and name in bufs:
        return bufs[name]
    return obj.__dict__.get(name, _MISSING)


def _set_attr(obj, name: str, value) -> None:
    """Set (or, for _MISSING, remove) an attribute without going through the module's
    tracing hook; a buffer stays a buffer."""
    bufs = obj.__dict__.get("_buffers")
    if bufs is not None and name in bufs:
        bufs[name] = None if value is _MISSING else value
    elif value is _MISSING:
        obj.__dict__.pop(name, None)
    else:
        object.__setattr__(obj, name, value)
