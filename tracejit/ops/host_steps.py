"""Ops whose output size depends on the values (nonzero, unique, bincount, ...): one array
step, eagerly and inside a capture.

``host_step(fn, args, shapes, dtypes, name, **kw)`` is ``fn(xp, *arrays, **kw)``'s arrays as
tensors. Eagerly it is just that call. While tracing it is one `HOST_STEP` equation that the
compiled plan runs as that call; a dim given as a string is a fresh *data-dependent size*
(`DataSize`, torch's unbacked symbol), known only once the step has run: the plan binds it
from the step's array, and everything after it compiles against it as against a symbolic
batch dim. User code that needs its value (``int(n)``, ``if n > 0:``) raises the TraceError
of a graph break. The step's results carry no gradient (indices, counts): the differentiable
part of an op (``x[mask]``, ``masked_select``, ``repeat_interleave``, ``cummax``'s values)
is a gather at those indices, whose VJP scatters back. A step on values the capture knows
(sizes, small tensors of Python state: constfold.py) runs at capture, its sizes static.
Where such a size must equal a fixed one (a broadcast, a view's element count), it is taken
as equal and a check equation raises at run time where it is not.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ..device import CPU
from ..errors import ShapeError, TraceError, user_where
from ..shapes import DataSize, Derived, Sym, data_sized as _data_sized, hint, numel
from ..tensor import Tensor
from .registry import Aval, defprim
from .eager import trace_state

__all__ = ["DataSize", "HOST_STEP", "host_step", "step_function", "size_bindings", "without_derivative"]


# The step functions by name: an equation holds the name, so the graph's text (the key of
# its kernels' on-disk marker, compiler/tierhints.py) is the same in every process
FUNCTIONS: dict = {}


def step_function(name: str):
    """The module-level function named `name` ("module.function")."""
    fn = FUNCTIONS.get(name)
    if fn is None:   # (a graph loaded from an archive)
        import importlib
        module, _, attr = name.rpartition(".")
        fn = FUNCTIONS[name] = getattr(importlib.import_module(module), attr)
    return fn


def _impl(xp, *arrays, fn, avals, **kw):
    return step_function(fn)(xp, *arrays, **kw)


HOST_STEP = defprim("host_step", _impl, lambda *avals_in, fn, avals, **kw: avals[0], kind="other")


def host_step(fn, args, shapes, dtypes, name: str, **kw) -> tuple:
    """``fn(xp, *arrays, **kw)`` of the tensors `args` as tensors of `dtypes`; `shapes` (read
    only while tracing) gives each result's dims, a string for a data-dependent size (the
    same string within one call: the same size). bfloat16 operands reach `fn` as float32
    values (not their storage words), and bfloat16 results are rounded from float32."""
    if any(a.dtype is _dt.bfloat16 for a in args):
        from .elementwise import cast
        f32, bf = _dt.float32, _dt.bfloat16
        out = host_step(fn, [cast(a, f32) if a.dtype is bf else a for a in args], shapes,
                        [f32 if d is bf else d for d in dtypes], name, **kw)
        return tuple(cast(o, bf) if d is bf else o for o, d in zip(out, dtypes))
    tr = trace_state.tracer
    if tr is None:
        dev = args[0].device
        arrays = fn(np if dev is CPU else args[0]._xp(), *[a._data for a in args], **kw)
        return tuple([Tensor._wrap(a, dt, dev) for a, dt in zip(arrays, dtypes)])
    if tr.parent is not None:
        where = user_where(3)
        raise TraceError(f"{name}{where} gives a shape that depends on the data, which a branch or loop "
                         f"body cannot capture; call it outside the body")
    args = [a.detach() if a.dtype.is_floating_point else a for a in args]   # (no gradient through it)
    atoms = tuple(tr.atom(a, name) for a in args)
    known = tr.known_values(atoms)
    if args and known is not None:   # (of sizes and Python state: static sizes)
        dev = args[0].device
        arrays = fn(np, *known, **kw)
        return tuple([Tensor._wrap(np.asarray(a), dt, CPU).to(dev) for a, dt in zip(arrays, dtypes)])
    key = (fn, _value_keys(tr, atoms), tuple(sorted(kw.items())))
    hit = tr.host_steps.get(key)   # (the same mask, or one written twice: the same size)
    if hit is not None and all(t._var is v for t, v in zip(*hit)):   # (none written in place)
        return hit[0]
    n = hint(args[0].numel()) if args else 2
    fresh: dict = {}

    def dim(d):
        if isinstance(d, str) and d not in fresh:
            fresh[d] = Sym.symbol(DataSize(f"u{len(tr.host_steps)}_{len(fresh)}"), max(n, 2))
        return fresh[d] if isinstance(d, str) else d
    avals = tuple(Aval(tuple(dim(d) for d in shape), dt, args[0].device)
                  for shape, dt in zip(shapes, dtypes))
    key_name = f"{fn.__module__}.{fn.__qualname__}"
    FUNCTIONS[key_name] = fn
    out = tuple(tr.emit_multi(HOST_STEP, list(atoms), {"fn": key_name, "avals": avals, **kw}, avals))
    tr.host_steps[key] = (out, [t._var for t in out])
    return out


def _no_derivative_vjp(g, out, values, *sources, op):
    message = (f"the derivative for '{op}' is not implemented (as in PyTorch); detach() its inputs "
               f"(or, for unique, gather from the input at its inverse indices)")
    if trace_state.tracer is None:
        raise NotImplementedError(message)
    # A compiled plan builds its backward with its forward: the backward graph gets a check
    # that raises when it runs, so a forward alone still works. The plan's backward gets
    # zeros for outputs no gradient reached: the check raises for a nonzero gradient, so a
    # backward through the plan's other outputs works, as eagerly
    from .value_checks_prim import CHECK
    from .eager import bind
    bind(CHECK, (g != 0).any(), exc_type=NotImplementedError, message=message, where="")
    return (None,) * (1 + len(sources))


NO_DERIVATIVE = defprim("no_derivative", lambda xp, values, *sources, op: values,
                        lambda values, *sources, op: values, _no_derivative_vjp, kind="other",
                        save=lambda rq: ())


def without_derivative(values: Tensor, *sources, op: str) -> Tensor:
    """`values` (a step's result of the tensors `sources`: ``unique``'s values) requiring
    grad where one of them does, as PyTorch's, with a backward that raises as PyTorch's
    (its derivative is not implemented): a loss reaching it fails rather than silently
    dropping that term's gradient; in a compiled plan, when its backward runs."""
    from ..autograd.grad_mode import is_grad_enabled
    tr = trace_state.tracer
    sources = [t for t in sources if isinstance(t, Tensor) and (t.requires_grad or (
        tr is not None and getattr(t, "_var", None) is not None and tr._reaches_grad([t._var])))]
    if not sources or not is_grad_enabled():
        return values
    from .eager import bind
    return bind(NO_DERIVATIVE, values, *sources, op=op)


def _value_keys(tr, atoms) -> tuple:
    """A key per operand equal for equal values: ``x[:, 1] > 0`` written twice has one.
    Each value is numbered once per trace by its op, its operands' numbers and its params,
    so a key stays flat however deep and shared the expression that made it."""
    numbers = tr.host_steps.setdefault(("value numbers",), {})
    made = {o: e for e in tr.eqns for o in e.outs if len(e.outs) == 1 and e.prim.kind != "random"}

    def key(a, depth=0):
        k = numbers.get(a)
        if k is not None:
            return k
        e = made.get(a)
        if e is None or depth > 64:
            return a
        k = (e.prim, tuple(key(x, depth + 1) for x in e.inputs), tuple(sorted(e.params.items())))
        try:
            k = numbers.setdefault(k, len(numbers))
        except TypeError:
            k = a
        numbers[a] = k
        return k
    return tuple(key(a) for a in atoms)


def _check_size(xp, a, *, shape):
    if tuple(a.shape) != tuple(shape):
        raise ShapeError(f"a size that depends on the data ({a.shape}) was broadcast with the fixed size "
                         f"{tuple(shape)} in a compiled graph, which takes them equal, as eagerly they must be")
    return a


SIZE_CHECK = defprim("size_check", _check_size, lambda a, *, shape: Aval(tuple(shape), a.dtype, a.device),
                     kind="other")


def broadcast_data_sizes(tr, atoms: list, avals: list) -> tuple:
    """(atoms, avals) of a broadcasting op, each data-dependent size that meets a fixed
    one (``sums / bincount(ids, minlength=n)[:, None]``) taken as that size, as torch's
    size-oblivious broadcast (a size of 1 would broadcast, which such a size is not taken
    to be): a `SIZE_CHECK` checks it once the step has run. An operand a gradient reaches
    is left as it is (the broadcast then asks for the size's value: a graph break)."""
    if not any(_data_sized(d) for av in avals for d in av.shape):
        return atoms, avals
    nd = max(len(av.shape) for av in avals)
    shapes = [(None,) * (nd - len(av.shape)) + tuple(av.shape) for av in avals]
    fixed = [next((s[i] for s in shapes if s[i] is not None and not _data_sized(s[i])
                   and not (isinstance(s[i], int) and s[i] == 1)), None) for i in range(nd)]
    atoms, avals = list(atoms), list(avals)
    for k, (av, s) in enumerate(zip(avals, shapes)):
        new = tuple(f if _data_sized(d) and f is not None else d for d, f in zip(s, fixed))[nd - len(av.shape):]
        grad = av.dtype.differentiable and tr._reaches_grad([atoms[k]])
        if any(a is not b for a, b in zip(new, av.shape)) and not grad:
            atoms[k] = tr._emit(SIZE_CHECK, [atoms[k]], {"shape": new}, SIZE_CHECK.rule(av, shape=new))[0]
            avals[k] = atoms[k].aval
    return atoms, avals


def _check_count(xp, a, *, shape, inferred):
    if math.prod(shape) != a.size:   # (a quotient that did not divide: floored)
        asked = [-1 if i in inferred else d for i, d in enumerate(shape)]
        raise ShapeError(f"shape '{asked}' is invalid for input of size {a.size} (of shape {list(a.shape)})")
    return a


COUNT_CHECK = defprim("count_check", _check_count, lambda a, *, shape, inferred: a,
                      lambda g, out, a, *, shape, inferred: (g,), kind="other", save=lambda rq: ())


def reshape_data_sizes(tr, atoms: list, avals: list, shape: tuple) -> tuple:
    """(atoms, avals) of a reshape to `shape` where an element count depends on the data,
    taken as equal to the other, ``-1`` as the quotient (``x[mask].view(bsz, -1, c)``,
    ``noise.view_as(x[mask])``): a `COUNT_CHECK` checks them equal once the step has run,
    raising as the view would eagerly."""
    n_in, n_out = numel(avals[0].shape), numel(shape)
    if not (_data_sized(n_in) or _data_sized(n_out)) or isinstance(n_in, Sym) and isinstance(n_out, Sym) \
            and n_in == n_out:
        return atoms, avals
    inferred = tuple(i for i, d in enumerate(shape) if _data_sized(d) and len(d.terms) == 1
                     and d.terms[0][1] == 1 and len(d.terms[0][0]) == 1 and isinstance(d.terms[0][0][0], Derived))
    atoms = [tr._emit(COUNT_CHECK, atoms, {"shape": tuple(shape), "inferred": inferred}, avals[0])[0]]
    return atoms, [atoms[0].aval]


def size_bindings(e) -> list:
    """(symbol, output position, dim) binding each data-dependent size equation `e` makes."""
    out, seen = [], set()
    for i, o in enumerate(e.outs):
        for j, d in enumerate(o.aval.shape):
            if isinstance(d, Sym) and len(d.terms) == 1 and d.terms[0][1] == 1 and len(d.terms[0][0]) == 1:
                s = d.terms[0][0][0]
                if isinstance(s, DataSize) and s not in seen:
                    seen.add(s)
                    out.append((s, i, j))
    return out


def refuse_data_size(sym) -> None:
    """The specialize hook's check: a data-dependent size has no value while capturing."""
    names = sorted(s for s in sym.free_symbols if isinstance(s, DataSize))
    if names:
        where = user_where(4)
        raise TraceError(f"a size that depends on the data ({', '.join(names)}, from nonzero, a boolean mask, "
                         f"unique, ...) is read as a Python number (int, len, a comparison){where}; a capture "
                         f"only knows it at run time")
