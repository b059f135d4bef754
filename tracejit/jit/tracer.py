"""Tracing: run Python with `Tracer` tensors and record every op into a `Graph`.

While a `TraceContext` is active, ``bind`` hands each op here instead of running it.
Operands are turned into atoms: tracers of this trace give their `Var`; tracers of an
enclosing trace (a branch body reading an outer value) and concrete tensors (module
parameters, closed-over tensors) are lifted into graph inputs, the latter read by identity
on every call so optimizer updates are seen without recapture. Python scalars become
`Literal`s, and so do dynamic sizes used as numbers (a `Sym` value, evaluated from the input
shapes on each call). dtype promotion inserts explicit ``cast`` equations, so the IR is fully
typed. Arithmetic on runtime scalar arguments alone stays weakly typed, like the Python
numbers it stands for. ``detach()`` and ``with no_grad():`` inside the function become
``detach`` equations, so the graph keeps where gradients stop. Anything needing a concrete
value (``bool(t)``, ``t.item()``) of a tensor raises a `TraceError` naming the user's line;
of a value computed from runtime scalar arguments alone, it is read from the call being
captured and recorded as a guarded decision (see `scalars`).
"""
from __future__ import annotations

from sys import _getframe
from typing import Callable, Optional

from .. import dtypes as _dt, shapes as _shapes
from ..device import CPU
from ..errors import (_OURS, CompileError, DeviceMismatchError, TraceError, asker_where, operand_error,
                      user_location, user_where)
from ..autograd.grad_mode import is_grad_enabled as _grad_enabled
from ..ops import registry as _reg
from ..ops.registry import Aval, Primitive
from ..ops.promotion import compute_dtype, scalar_aval
from ..tensor import Tensor
from ..size import Size
from .side_effects import EffectLog, refuse_recording_off
from .state_writes import StateWrites
from . import view_writes as _views
from .ir import Eqn, Graph, Literal, Var
from .python_values import PythonValues
from .scalars import NOT_KNOWN, evaluate, note, scalar_expr, symbols_in
from .constfold import known_values as _known_values
from ..ops.shape import RESHAPE as _RESHAPE, TO_DEVICE
from ..ops.complex_ops import COMPLEX_CALL as _COMPLEX_CALL, involves as _complex_involved
from ..ops.host_steps import broadcast_data_sizes, reshape_data_sizes, refuse_data_size as _refuse_data_size

__all__ = ["Tracer", "TraceContext", "trace_graph", "SymbolicSizeError"]


class SymbolicSizeError(CompileError):
    """Building a program from a capture (its gradient) needed the value of symbolic sizes:
    the entry is captured again with those dims static."""

    def __init__(self, message: str, symbols: frozenset):
        super().__init__(message)
        self.symbols = symbols


class Tracer(PythonValues, Tensor):
    """A symbolic tensor: an IR value standing in for data during tracing."""

    # _view_src: (base tracer, the base's value when this view was taken) for the result of
    # a view op (reshape, permute, expand, basic indexing) of a tracer, else None.
    __slots__ = ("_var", "_trace", "_view_src")

    @property
    def shape(self) -> Size:
        return tuple.__new__(Size, self._var.aval.shape)   # (its dims may be symbolic: `Sym`)

    @property
    def ndim(self) -> int:
        return len(self._var.aval.shape)

    # User code sees eager autograd's answer; tracejit's own code keeps the flag its capture
    # paths were chosen by (an argument's only: cross_entropy's and relu_'s graphs stay)
    requires_grad = property(lambda self: self._requires_grad or (not _getframe(1).f_code.co_filename.startswith(
        _OURS) and self._trace._reaches_grad([self._var])), Tensor.requires_grad.fset)

    @property
    def is_leaf(self) -> bool:
        # A tracer has no grad_fn: as eagerly, only a value a gradient flows into from an
        # input (not the input itself) is an interior node.
        return self._requires_grad or not self._trace._reaches_grad([self._var], grad_mode=False)

    def is_contiguous(self, memory_format=None) -> bool:
        arr = _views.eager_layout(self, exact=True)   # (as eagerly: False for a transposed view)
        return _views.contiguous_answer(self, arr, memory_format)

    # Tensor's versions of these build a new Tensor around `_data`, which a tracer lacks.
    def detach(self) -> "Tracer":
        # An equation (the IR keeps where gradients stop) that views self, as eagerly:
        # in-place writes through it reach self, without a gradient (view_writes.py).
        t = _reg.bind(DETACH, self)
        if isinstance(t, Tracer):
            t._view_src = _views.view_source(t._trace, DETACH, (self,), {})
        return t

    def detach_(self) -> "Tracer":
        # As eagerly: the values from here on carry no gradient to what self was computed from.
        src = self._view_src   # (a detach() result shares memory but is no view, as eagerly)
        if src is not None and (src[2] is None or any(step[0] is not DETACH for step in src[2])):
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        t = _reg.bind(DETACH, self)
        if isinstance(t, Tracer):
            self._var = t._var
        self._requires_grad = False
        return self

    @property
    def data(self) -> "Tracer":
        return self.detach()

    @data.setter
    def data(self, value) -> None:
        raise TraceError("assigning `.data` of a traced tensor is not supported inside a compiled "
                         "function; compute a new tensor instead")

    def data_ptr(self):
        self._concrete("tensor.data_ptr()")

    def __dlpack__(self, *args, **kwargs):
        self._concrete("tensor.__dlpack__()")

    def backward(self, *args, **kwargs):
        raise TraceError(f"backward(){user_where()} inside a compiled function is not supported: return "
                         "the loss from the function and call .backward() on the result")

    def register_hook(self, hook=None):
        raise TraceError("register_hook and retain_grad on a tensor inside a compiled function are not "
                         "supported; call them on the result outside the function")
    retain_grad = register_hook

    def __repr__(self) -> str:
        return f"Tracer({self._var.aval})"


def _make_tracer(var: Var, trace: "TraceContext", requires_grad: bool = False) -> Tracer:
    t = object.__new__(Tracer)
    t._init(None, var.aval.dtype, var.aval.device)  # the same fields as any Tensor, no data
    t._requires_grad = requires_grad
    t._var = var
    t._trace = trace
    t._view_src = None
    return t


class TraceContext(StateWrites):
    """Records equations; nested contexts trace branch and loop bodies."""

    def __init__(self, parent: Optional["TraceContext"] = None):
        self.parent = parent
        self.inputs: list = []
        self.grad_inputs: list = []    # the inputs that require grad (`_reaches_grad`)
        self.eqns: list = []
        self.consts: dict = {}         # id(concrete tensor) -> Var
        self.const_tensors: list = []  # lifted concrete tensors, in input order
        self.captured: dict = {}       # outer Var -> local input Var (sub-traces)
        self.captured_outer: list = []  # outer atoms, in order, for the enclosing eqn
        self.specialized: dict = {}  # symbol user code asked the concrete value of -> where
        self.host_steps: dict = {}     # host steps' results, boolean-mask selections (ops/host_steps.py)
        # Runtime scalar arguments (root context): graph input Var -> leaf index, the
        # leaves of the call being captured, and the decisions Python code took on them.
        self.scalar_leaves: dict = {}
        self.leaves: Optional[list] = None
        self.decisions: list = []
        self.lifted: dict = {}   # graph input Var -> `Lifted`: a float read from Python state
        self.sizes = None   # the int arguments that may become symbolic sizes (size_args.py)
        # State the function writes (root context): in-place updates of captured tensors
        # (a module's buffers: BatchNorm's running stats) and tensor attributes set on a
        # module (``self.mask = ...``). They become graph outputs written back after each
        # call; no tracer is ever left in the module (see `finish_state_writes`).
        self.buffer_writes: dict = {}   # id(tensor) -> [tensor, Var of its new value]
        self.tensor_leaves: dict = {}   # argument's input Var -> leaf index (root context)
        self.viewed: dict = {}   # id -> tracer a view was taken of (held: an id is not reused)
        # (a write through ``t.data`` is keyed by t's id; t requiring grad: `_written_leaf`)
        self.grad_data_written: set = set()
        self.grad_data_reads: dict = {}   # id(tensor) -> (the written Var, the Var its reads get)
        self.attr_writes: dict = {}     # (id(obj), name) -> [obj, name, value before capture]
        self.effects = EffectLog()      # Python state the code changes (side_effects.py)
        self.value_reads: list = []     # (concrete tensor, value, "file:line") read by Python (root)
        self.folded_reads: set = set()  # ids of those read through computed values (constfold.py)
        self.const_names: Optional[dict] = None  # id(tensor) -> name (a module's parameter names)
        self.capture_grad = True  # the grad mode the graph will run under (root context)
        # Source location given to the equations recorded while set (the backward pass
        # records each VJP at its forward equation's line, not at the .backward() call).
        self.loc_override: Optional[tuple] = None
        self._prev = None
        self._prev_hook = None
        self._prev_number = None

    # ---- activation ---------------------------------------------------------
    def __enter__(self):
        self._prev = _reg.trace_state.tracer
        _reg.trace_state.tracer = self
        _reg.tracer_entered()
        self._prev_hook = _shapes.set_specialize_hook(self._on_specialize)
        self._prev_number = _shapes.set_number_hook(self._sym_number)
        return self

    def __exit__(self, *exc):
        _reg.trace_state.tracer = self._prev
        _reg.tracer_exited()
        _shapes.set_specialize_hook(self._prev_hook), _shapes.set_number_hook(self._prev_number)
        return False

    def _root(self) -> "TraceContext":
        t = self
        while t.parent is not None:
            t = t.parent
        return t

    def _on_specialize(self, sym) -> None:
        _refuse_data_size(sym)   # (then where it was asked for: recompile reasons name it)
        spec = self._root().specialized
        spec.update({s: asker_where(2) for s in sym.free_symbols - spec.keys()})

    def _sym_number(self, sym, dtype=_dt.float64) -> "Tracer":
        """A symbolic size as a traced Python-like number (weak float64, as ``n / (n - 1)``
        computes in Python's float): evaluated from the input shapes on each call."""
        params = {"shape": (), "value": sym, "dtype": dtype, "device": CPU}
        var = self._emit(_FULL, [], params, Aval((), dtype, CPU, weak=True))[0]
        return _make_tracer(var, self)

    def concretize(self, t: "Tracer", kind: str, what: str):
        """The value of a tracer computed from runtime scalar arguments and symbolic sizes
        alone, read from the call being captured; recorded as a decision the entry's guard
        replays (sizes: specialized, as ``int(x.shape[0])`` is). NOT_KNOWN when it depends
        on anything else."""
        root = self._root()
        expr = scalar_expr(self, t._var)
        if expr is None:
            return NOT_KNOWN
        syms = symbols_in(expr)
        if syms:
            # The value of symbolic sizes is needed: those dims become static and the
            # capture runs again (scalar arguments come only with the leaves of a call).
            for sym in syms:
                sym._specialized()
            value = evaluate(expr, root.leaves or ())
            return bool(value) if kind == "bool" else value
        if root.leaves is None:
            return NOT_KNOWN
        value = evaluate(expr, root.leaves)
        expected = bool(value) if kind == "bool" else value
        note(root.decisions, expr, kind, expected, what.split(" (")[0])
        return expected

    def _concrete_params(self, prim: Primitive, params: dict) -> dict:
        """Op parameters are Python values: a runtime scalar passed as one (``clamp(min=lo)``)
        is specialized to its value, guarded."""
        out = None
        for k, v in params.items():
            if isinstance(v, Tracer) and v._var.aval.weak:
                out = dict(params) if out is None else out
                out[k] = v._concrete(f"parameter {k!r} of {prim.name}")
            elif isinstance(v, (tuple, list)) and any(isinstance(x, Tracer) for x in v):
                out = dict(params) if out is None else out
                out[k] = type(v)(x._concrete(f"parameter {k!r} of {prim.name}")
                                 if isinstance(x, Tracer) and x._var.aval.weak else x for x in v)
        return params if out is None else out

    # ---- values -------------------------------------------------------------------
    def new_input(self, aval: Aval, hint: str = "", requires_grad: bool = False) -> Tracer:
        v = Var(aval, hint)
        self.inputs.append(v)
        if requires_grad:
            self.grad_inputs.append(v)
        return _make_tracer(v, self, requires_grad)

    def atom(self, a, prim_name: str = "op"):
        if isinstance(a, Tracer):
            if a._view_src is not None:
                _views.refresh(self, a)
            if a._trace is self:
                return a._var
            return self._capture(a)
        if isinstance(a, Tensor):
            return self._const(a)
        if isinstance(a, _shapes.Sym):
            # A dynamic size used as a number (``x.sum() / x.shape[0]``, ``mean``): a literal
            # evaluated from the input shapes on every call, so the dim stays dynamic.
            return Literal(a, Aval((), _dt.int64, CPU, weak=True))
        if isinstance(a, (bool, int, float, complex)) or type(a).__module__ == "numpy":
            av = scalar_aval(a, _DUMMY_PRIM)
            return Literal(a.item() if hasattr(a, "item") else a, av)
        if type(a).__name__ == "Unbound":  # control.Unbound: a variable bound on one path only
            raise a.error()
        raise operand_error(prim_name, a)

    def _capture(self, t: Tracer) -> Var:
        """A tracer from an enclosing trace used here: becomes an input of this sub-graph."""
        if self.parent is None:
            raise TraceError("a tensor from a finished trace was used; tracers must not escape "
                             "the function being compiled (e.g. stored in a global)")
        return self._local(self.parent.atom(t))

    def _local(self, outer: Var) -> Var:
        """This sub-graph's input for the enclosing trace's value `outer`."""
        v = self.captured.get(outer)
        if v is None:
            v = self.captured[outer] = Var(outer.aval)
            self.captured_outer.append(outer)
        return v

    def _const(self, t: Tensor) -> Var:
        if self.parent is not None:
            return self._local(self.parent._const(t))
        owner = t._data_of
        written = self.buffer_writes.get(id(t) if owner is None else id(owner))
        if written is not None:
            if owner is None and id(t) in self.grad_data_written:
                return self._written_leaf(t, written[1])
            return written[1]
        return self._const_var(t)

    def _const_var(self, t: Tensor) -> Var:
        v = self.consts.get(id(t))
        if v is None:
            name = (self.const_names or {}).get(id(t)) or t._name or ""
            v = Var(Aval(t._data.shape, t.dtype, t.device), "".join(c if c.isalnum() else "_" for c in name))
            self.consts[id(t)] = v
            self.const_tensors.append(t)
        return v

    # ---- recording ------------------------------------------------------------------
    def record(self, prim: Primitive, args, params):
        if _complex_involved(prim, args, params):
            return self._complex_call(prim, args, params)
        if params:
            params = self._concrete_params(prim, params)
        atoms = [self.atom(a, prim.name) for a in args]
        avals = [a.aval for a in atoms]
        # Arithmetic on runtime scalar arguments only (``n + 1`` in @script) is Python
        # arithmetic in the original code: its results stay weakly typed, so they promote
        # like Python numbers and are returned as Python numbers.
        scalar_math = all(av.weak for av in avals) and any(isinstance(a, Var) for a in atoms)
        dev = None
        for av in avals:
            if not av.weak:
                if dev is None:
                    dev = av.device
                elif av.device is not dev:
                    where = user_where(2)
                    raise DeviceMismatchError(
                        f"{prim.name}{where}: expected all tensors on the same device, got {dev} and "
                        f"{av.device} (move one with .to(device) inside or outside the compiled function)")
        if prim.promote and atoms:
            cd = compute_dtype(prim, avals)
            for i, (at, av) in enumerate(zip(atoms, avals)):
                if isinstance(at, Literal) and isinstance(at.value, _shapes.Sym):
                    atoms[i] = Literal(at.value, Aval((), cd, CPU, weak=True))
                elif isinstance(at, Literal):
                    val = at.value
                    conv = float(val) if cd.is_floating_point else (bool(val) if cd.is_bool else int(val))
                    atoms[i] = Literal(conv, Aval((), cd, CPU, weak=True))
                elif av.dtype is not cd:
                    atoms[i] = self._emit(_CAST, [at], {"dtype": cd},
                                          Aval(av.shape, cd, av.device, weak=av.weak))[0]
            avals = [a.aval for a in atoms]
        if prim.kind == "elementwise" and len(atoms) > 1:
            atoms, avals = broadcast_data_sizes(self, atoms, avals)
        elif prim is _RESHAPE:
            atoms, avals = reshape_data_sizes(self, atoms, avals, params["shape"])
        out_aval = prim.rule(*avals, **params)
        if dev is not None and out_aval.device is not dev and prim is not TO_DEVICE:
            out_aval = Aval(out_aval.shape, out_aval.dtype, dev)
        if scalar_math and out_aval.shape == ():
            out_aval = Aval((), out_aval.dtype, out_aval.device, weak=True)
        return self._result(self._emit(prim, atoms, params, out_aval)[0], prim, args, params)

    def _result(self, var: Var, prim, args, params) -> Tracer:
        """The tracer of `var`, `prim`'s result: detached in a no_grad region, a view where
        `prim` makes one."""
        if self._no_grad_region() and var.aval.dtype.differentiable and prim is not DETACH:
            var = self._emit(DETACH, [var], {}, var.aval)[0]
        elif var.aval.dtype.differentiable and _grad_enabled() and not self._root().capture_grad:
            refuse_recording_off(self, var, prim)
        t = _make_tracer(var, self)
        if args and (prim.is_view or (prim.view_if is not None and prim.view_if(params))):
            # Eagerly this shares memory with its operand: remember the base and the view
            # ops, so an in-place write through the view reaches the base (view_writes).
            t._view_src = _views.view_source(self, prim, args, params)
        return t

    def _complex_call(self, prim, args, params) -> Tracer:
        """A call on the complex path (complex_ops.py): one `COMPLEX_CALL` equation, run as
        eagerly; refused inside a branch or loop body."""
        atoms = [self.atom(a, prim.name) for a in args]
        if self.parent is not None:
            where = user_where(3)
            raise TraceError(f"{prim.name}{where}: complex tensors inside a branch or loop body run eagerly, "
                             f"they cannot be compiled; move the complex math out of the loop")
        avals = tuple(a.aval for a in atoms)
        var = self._emit(_COMPLEX_CALL, atoms, {"op": prim, "params": params, "avals_in": avals},
                         _COMPLEX_CALL.rule(*avals, op=prim, params=params, avals_in=avals))[0]
        return self._result(var, prim, args, params)

    known_values = _known_values   # (atoms' values when the capture knows them all: constfold.py)

    def _reaches_grad(self, atoms, grad_mode: bool = True) -> bool:
        """Whether a gradient may flow into `atoms` (autodiff.py's active values, from the
        inputs and captured tensors that require grad); with `grad_mode`, none under no_grad."""
        if grad_mode and not _grad_enabled():
            return False
        grads = self.grad_inputs + [self.consts[id(t)] for t in self.const_tensors if t.requires_grad]
        # (kept between calls and extended by the new equations: Tracer.requires_grad asks often)
        seen, act = getattr(self, "_active", (0, None))
        if act is None or not act.issuperset(v for v in grads if v.aval.dtype.differentiable):
            seen, act = 0, set()
        from types import SimpleNamespace
        act = active_vars(SimpleNamespace(inputs=grads, eqns=self.eqns[seen:]), [True] * len(grads), act)
        self._active = (len(self.eqns), act)
        return any(isinstance(a, Var) and a in act for a in atoms)

    def _no_grad_region(self) -> bool:
        """Inside ``with no_grad():`` in a capture run with grad mode on: values here stop gradients."""
        return not _grad_enabled() and self._root().capture_grad

    def _emit(self, prim, atoms, params, out_aval=None):
        if out_aval is None:
            out_aval = prim.rule(*[a.aval for a in atoms], **params)
        outs = (Var(out_aval),)
        self.eqns.append(Eqn(prim, tuple(atoms), tuple(outs), dict(params),
                             self.loc_override or user_location(3)))
        return outs

    def emit_multi(self, prim, atoms, params, out_avals) -> list:
        outs = tuple(Var(a) for a in out_avals)
        self.eqns.append(Eqn(prim, tuple(atoms), outs, dict(params), self.loc_override or user_location(3)))
        vs = list(outs)
        if self._no_grad_region():
            vs = [self._emit(DETACH, [v], {}, v.aval)[0] if v.aval.dtype.differentiable else v for v in vs]
        return [_make_tracer(v, self) for v in vs]

    def record_function(self, cls, args, kwargs):
        """A custom autograd.Function call: one equation holding its traced forward."""
        from ..autograd.function import FunctionCtx
        from .control import CUSTOM_FUNCTION
        if kwargs:
            raise TraceError(f"{cls.__name__}.apply: keyword arguments are not supported when compiled")
        tensor_pos = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        static = tuple((i, a) for i, a in enumerate(args) if not isinstance(a, Tensor))
        if any(_holds_tensor(a) for _, a in static):
            # (the backward program re-runs forward on these: a tracer kept inside a container
            # would outlive its capture; eagerly such tensors are plain, gradient-free inputs)
            raise TraceError(f"{cls.__name__}.apply: a tensor inside a list, tuple or dict argument is not "
                             f"supported when compiled; pass it as an argument of its own")
        sub = TraceContext(self)
        with sub:
            ins = []
            full = list(args)
            for i in tensor_pos:
                a = args[i]
                aval = a._var.aval if isinstance(a, Tracer) else Aval(a._data.shape, a.dtype, a.device)
                full[i] = sub.new_input(aval, requires_grad=a.requires_grad)
                ins.append(full[i]._var)
            # (as eagerly: whether each argument requires grad as user code sees it)
            needs = tuple(isinstance(a, Tensor) and a.dtype.is_floating_point and (
                a._requires_grad or self._reaches_grad([a._var], grad_mode=False) if isinstance(a, Tracer)
                else a.requires_grad) for a in args)
            fctx = FunctionCtx(needs)
            out = cls._forward(fctx, *full)
        outs = out if isinstance(out, tuple) else (out,)
        # Plain outputs (a count, a flag) are constants of the capture, as PyTorch passes
        # them through; a container could hide tensors the graph would not record.
        static_outs = tuple((j, o) for j, o in enumerate(outs) if not isinstance(o, Tensor))
        if any(isinstance(o, (list, tuple, dict, set)) for _, o in static_outs):
            raise TraceError(f"{cls.__name__}.forward must return tensors (or plain numbers, strings, "
                             f"None) to be compiled, not containers")
        touts = [o for o in outs if isinstance(o, Tensor)]
        fwd = Graph(tuple(ins) + tuple(sub.captured.values()), tuple(sub.eqns),
                    tuple(sub.atom(o) for o in touts), f"{cls.__name__}.forward")
        res = self.emit_multi(CUSTOM_FUNCTION, [self.atom(args[i]) for i in tensor_pos] + list(sub.captured_outer),
                              {"fn_cls": cls, "static_args": static, "n_args": len(tensor_pos), "forward": fwd,
                               "static_outs": static_outs, "needs_input_grad": needs},
                              [a.aval for a in fwd.outputs])
        res = list(res)
        for j, o in enumerate(touts):   # (ctx.mark_non_differentiable: no gradient flows from it)
            if id(o) in fctx._non_diff:
                res[j] = res[j].detach()
        for j, o in enumerate(touts):   # (ctx.mark_dirty: the input itself now holds that output)
            i = next((i for i in tensor_pos if full[i] is o and any(d is o for d in fctx._dirty)), None)
            if i is not None:
                res[j] = self.assign(args[i], res[j], f"{cls.__name__}.forward (ctx.mark_dirty)")
        for j, o in static_outs:
            res.insert(j, o)
        return tuple(res) if isinstance(out, tuple) else res[0]

    def reshape_in_place(self, target: Tensor, make, what: str) -> Tensor:
        """Shape-changing in-place ops under tracing (``x.unsqueeze_(0)``): see
        view_writes.reshape_in_place."""
        return _views.reshape_in_place(self, target, make, what)

    def assign(self, target: Tensor, result: Tensor, what: str) -> Tensor:
        """In-place ops under tracing: rebind the target tracer to the new value."""
        if not isinstance(target, Tracer) and self.parent is None:
            return self._write_buffer(target, result, what)
        if not isinstance(target, Tracer) or target._trace is not self:
            name = "a tensor captured from outside the compiled function" if not isinstance(target, Tracer) \
                else "a tensor from outside this branch or loop body"
            raise TraceError(f"{what}: in-place modification of {name} is not supported inside a "
                             f"compiled function; compute a new tensor instead (x = x + 1)")
        res = self._in_place_value(result, target, what)
        if self._no_grad_region() and res.aval.dtype.is_floating_point:
            old = self.atom(target)
            if self._reaches_grad([old], False):   # (new values, the gradient still target's, as eagerly)
                res = self._emit(_views.DETACHED_WRITE, [old, res], {}, res.aval)[0]
        if target._view_src is not None and not _views.write_through(self, target, res, what):
            where = user_where(3)
            raise TraceError(
                f"{what}{where}: this in-place write through a view cannot reach the tensor it "
                f"views inside a compiled function (a view of a dynamic-size tensor, an expanded "
                f"view, a complex tensor's real or imaginary part, or a view taken outside this "
                f"branch or loop body). Write through the base "
                f"instead (x[idx] = value, x = x.index_put(...), tracejit.where(...)), or compute "
                f"a new tensor.")
        target._var = res
        return target

    def note_value_read(self, t, value) -> None:
        """A concrete tensor's value became a Python number during the capture: guarded."""
        root = self._root()
        if not any(r[0] is t for r in root.value_reads):
            loc = user_location()
            root.value_reads.append((t, value, f"{loc[0]}:{loc[1]}" if loc else "?"))

    def graph(self, outputs, name: str = "graph") -> Graph:
        return Graph(tuple(self.inputs) + tuple(self.captured.values())
                     if self.parent is not None else tuple(self.inputs) + tuple(self._const_vars()),
                     tuple(self.eqns), tuple(outputs), name)

    def _const_vars(self):
        return [self.consts[id(t)] for t in self.const_tensors]


def _holds_tensor(value, depth: int = 0) -> bool:
    """Whether a (nested) list, tuple or dict holds a tensor."""
    if isinstance(value, Tensor):
        return True
    if depth > 8:
        return False
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    return any(_holds_tensor(v, depth + 1) for v in items)


_DUMMY_PRIM = Primitive("literal", None, None)

# ``tensor.detach()`` inside a compiled function: the identity with no gradient (jax's
# stop_gradient). Eagerly it is what ``detach`` does: same data, no autograd edge.
DETACH = _reg.defprim("detach", lambda xp, a: a, lambda a: Aval(a.shape, a.dtype, a.device), None,
                      kind="elementwise", scalar=lambda e, a: a, save=lambda rq: ())
_CAST, _FULL = _reg.REGISTRY["cast"], _reg.REGISTRY["full"]


def trace_graph(fn: Callable, avals: list):
    """Trace ``fn(*tracers)`` in a fresh context; returns (ctx, outputs)."""
    ctx = TraceContext()
    with ctx:
        out = fn(*[ctx.new_input(a) for a in avals])
    return ctx, out


def active_vars(graph, active_inputs, act=None) -> set:
    """Values that depend on a differentiable input (floating or complex dtype) other than
    through ``detach``, whose output requires no grad, as in eager (a compiled call gave a
    detached output, and the running statistics that batch_norm's functional writes back
    into its arguments, a grad_fn and ``requires_grad``)."""
    act = set() if act is None else act   # (`act`: those of the equations before graph.eqns)
    act.update(v for v, a in zip(graph.inputs, active_inputs) if a and v.aval.dtype.differentiable)
    for e in graph.eqns:
        if e.prim is DETACH:
            continue
        if any(isinstance(a, Var) and a in act for a in e.inputs):
            for o in e.outs:
                if o.aval.dtype.differentiable:
                    act.add(o)
    return act
