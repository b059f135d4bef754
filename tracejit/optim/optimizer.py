"""`Optimizer`: parameter groups, per-parameter state, zero_grad, and state_dict round trips.

An elementwise update is written once, as a form over arrays (`Optimizer._form`): the
array path runs it on numpy or cupy arrays, the fused path traces it into one kernel
launch over many parameters (`compiler/cpu/kernels/foreach.py`), bitwise the same values.
Other subclasses implement ``_update(param, grad_array, state, group)``, which changes
``param._data`` in place with array-module arithmetic. Working on
the arrays rather than through tensor ops means a step records no autograd graph and
costs no dispatch, and the Parameter objects (which the JIT holds by identity) keep
both their identity and their memory. Each update bumps the parameter's version
counter, so autograd still notices a parameter changed under a saved graph.
"""
from __future__ import annotations

import functools
import math
import sys
from collections import defaultdict
from typing import Any, Callable, Iterable

import numpy as np

from .. import bf16
from .. import dtypes as _dt
from ..autograd.grad_mode import enable_grad
from ..device import CPU, module_of
from ..ops.eager import refuse_effect
from ..tensor import Tensor
from ..threads import PARALLEL_MIN
from .optimizer_hooks import (OptimizerHooks, register_optimizer_step_post_hook,  # noqa: F401
                              register_optimizer_step_pre_hook)

__all__ = ["Optimizer", "register_optimizer_step_pre_hook", "register_optimizer_step_post_hook"]


def _check_number(opt: str, name: str, value, low: float | None = 0.0, high: float | None = None,
                   high_open: bool = False) -> None:
    """ValueError/TypeError naming `name` unless low <= value (< or <=) high."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{opt}: {name} must be a number, got {type(value).__name__} {value!r}")
    if math.isnan(value):
        raise ValueError(f"{opt}: invalid {name}: {value}")
    if low is not None and value < low:
        raise ValueError(f"{opt}: invalid {name}: {value} (must be >= {low})")
    if high is not None and (value >= high if high_open else value > high):
        raise ValueError(f"{opt}: invalid {name}: {value} (must be {'<' if high_open else '<='} {high})")


def _check_betas(opt: str, group: dict) -> None:
    """A group's ``betas``: a pair of numbers in [0, 1), kept as a tuple."""
    betas = group["betas"]
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise ValueError(f"{opt}: betas must be a pair (beta1, beta2), got {betas!r}")
    group["betas"] = tuple(betas)
    for i, b in enumerate(betas):
        _check_number(opt, f"beta parameter at index {i}", b, 0.0, 1.0, high_open=True)


class Optimizer(OptimizerHooks):
    """Base class: holds ``param_groups`` (list of dicts) and ``state`` (param -> dict)."""

    # what a compiled function reading the optimizer (its learning rate) is guarded on
    # (jit/value_snapshot.py)
    _guarded_attrs = ("param_groups",)
    # complex parameters step as PyTorch's do: on real views (`_as_real`)
    _steps_complex = True
    # state PyTorch keeps as float32 0-d CPU tensors (`_scalar_state`): the update reads
    # them as Python numbers and writes them in place
    _number_state: tuple = ("step",)

    def __init__(self, params: Iterable, defaults: dict) -> None:
        self.defaults = dict(defaults)
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict] = []
        if isinstance(params, Tensor):
            raise TypeError(f"{type(self).__name__}: params should be an iterable of Tensors or dicts, "
                            f"but got a single Tensor (wrap it in a list)")
        if isinstance(params, (set, frozenset)):
            raise TypeError(f"{type(self).__name__}: params must be an ordered collection (a set's "
                            f"order changes between runs); use a list")
        groups = list(params)
        if not groups:
            raise ValueError(f"{type(self).__name__} got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        # Validate every group before registering any, so a bad call leaves no half-built state.
        seen: set = set()
        checked = [self._check_group(g, seen) for g in groups]
        self.param_groups.extend(checked)

    def _impl_options(self, foreach, capturable, differentiable) -> dict:
        """PyTorch's implementation choices, kept in the groups as PyTorch keeps them. Every
        update here is one array expression per parameter: ``foreach`` (one kernel over the
        list) and ``capturable`` (state on the device, for graph capture) give the same
        numbers either way; an update autograd could differentiate through is not built."""
        name = type(self).__name__
        if foreach is not None and not isinstance(foreach, bool):
            raise TypeError(f"{name}: foreach must be None or a bool, got {foreach!r}")
        for key, value in (("capturable", capturable), ("differentiable", differentiable)):
            if not isinstance(value, bool) and not (key == "capturable" and value is None):
                raise TypeError(f"{name}: {key} must be a bool, got {value!r}")
        if differentiable:
            raise NotImplementedError(f"{name}: differentiable=True is not supported: tracejit's "
                                      f"optimizers update parameters outside autograd")
        # (capturable None: the optimizer has no such option in PyTorch, so its groups have none)
        return dict(foreach=foreach, differentiable=differentiable,
                    **({} if capturable is None else {"capturable": capturable}))

    # ---- groups ---------------------------------------------------------------------------
    def _check_group(self, group, seen: set) -> dict:
        name = type(self).__name__
        if not isinstance(group, dict):
            raise TypeError(f"{name}: a param group must be a dict, got {type(group).__name__}")
        params = group.get("params")
        if params is None:
            raise ValueError(f"{name}: a param group needs a 'params' entry")
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, (set, frozenset)):
            raise TypeError(f"{name}: optimizer parameters need to be an ordered collection, not a set; "
                            f"use a list")
        else:
            params = list(params)
        names = None
        if params and isinstance(params[0], tuple):  # model.named_parameters()
            names = [n for n, _ in params]
            params = [p for _, p in params]
        ids = set()
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(f"{name} can only optimize Tensors, but parameter {i} of a group is a "
                                f"{type(p).__name__}")
            if not p.is_leaf:
                raise ValueError(f"{name}: can't optimize a non-leaf Tensor (parameter {i} of a group "
                                 f"has grad_fn={p.grad_fn}); optimize the leaf it was computed from")
            if not (p.dtype.is_floating_point or p.dtype.is_complex and self._steps_complex):
                raise TypeError(f"{name}: parameter {i} has dtype {p.dtype.name}; only floating point "
                                f"{'' if self._steps_complex else 'real '}tensors can be optimized")
            if id(p) in ids:
                raise ValueError(f"{name}: parameter {i} appears twice in the same parameter group")
            ids.add(id(p))
        if ids & seen or any(id(p) in ids for g in self.param_groups for p in g["params"]):
            raise ValueError(f"{name}: some parameters appear in more than one parameter group")
        out = dict(group)
        out["params"] = params
        if names is not None:
            out["param_names"] = names
        for k, default in self.defaults.items():
            out.setdefault(k, default)
        if isinstance(out.get("lr"), Tensor) and out["lr"].numel() == 1:
            out["lr"] = out["lr"].item()   # (a tensor lr, as compile-minded code passes: its value)
        if isinstance(out.get("betas"), (tuple, list)):   # (likewise tensor betas, as PyTorch takes)
            out["betas"] = tuple(b.item() if isinstance(b, Tensor) and b.numel() == 1 else b for b in out["betas"])
        self._validate(out)
        seen |= ids
        return out

    def add_param_group(self, param_group: dict) -> None:
        self.param_groups.append(self._check_group(param_group, set()))

    # the hyperparameters that must be numbers >= 0, as errors name them (the group's key
    # is the last word: "learning rate lr"), or (label, low, high) for other bounds
    _numbers: tuple = ()

    def _validate(self, group: dict) -> None:
        """Raise ValueError/TypeError naming a bad hyperparameter of `group` (`_numbers`
        here; subclasses check the rest)."""
        for entry in self._numbers:
            label, *bounds = (entry,) if isinstance(entry, str) else entry
            _check_number(type(self).__name__, label, group[label.split()[-1]], *bounds)

    # ---- stepping -------------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        from ..nn.module import _zero_grad
        for g in self.param_groups:
            for p in g["params"]:
                _zero_grad(p, set_to_none)

    def step(self, closure: Callable[[], Any] | None = None):
        """One update of every parameter that has a gradient; returns closure's loss if given."""
        refuse_effect("step updates the parameters and its state", self)
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        for group in self.param_groups:
            todo, views = [], None
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                gd = g._data
                if gd.shape != p._data.shape:    # (the arrays' tuples: Tensor.shape builds a Size)
                    raise RuntimeError(f"{type(self).__name__}: gradient of shape {tuple(g.shape)} does "
                                       f"not match its parameter of shape {tuple(p.shape)}")
                if p.dtype.is_complex:
                    cp, (p, gd) = p, self._as_real(p, gd)
                    views = [(p, cp)] if views is None else views + [(p, cp)]
                todo.append((p, gd))
            self._update_group(todo, group)
            for p, _ in todo:
                p._vbox[0] += 1
            if views is not None:
                for rp, p in views:
                    self._back_to_complex(rp, p)
        return loss

    def _as_real(self, p: Tensor, grad) -> tuple:
        """A complex parameter's step as PyTorch takes it (``view_as_real``): the parameter,
        its gradient and its state as real views with a trailing dim of 2, so every update
        rule applies to the real and imaginary parts as to two real numbers. The state
        stays complex (its state_dict is PyTorch's)."""
        real = _dt.float32 if p.dtype is _dt.complex64 else _dt.float64

        def view(arr):
            return arr[..., None].view(real.np)

        rp = Tensor._wrap(view(p._data), real, p.device)
        rp._vbox = p._vbox
        self.state[rp] = {k: (Tensor._wrap(view(v._data), real, v.device)
                              if isinstance(v, Tensor) and v.dtype.is_complex else v)
                          for k, v in self.state[p].items()}
        return rp, view(grad)

    def _back_to_complex(self, rp: Tensor, p: Tensor) -> None:
        """Keep what the step put in real view `rp`'s state under its complex parameter `p`:
        new tensors (the first step's moments) as complex views, the rest (``step``) as is."""
        st = self.state[p]
        for k, v in self.state.pop(rp).items():
            old = st.get(k)
            if isinstance(v, Tensor) and tuple(v.shape) == tuple(rp.shape) and v.dtype is rp.dtype:
                if isinstance(old, Tensor) and old.dtype.is_complex:
                    continue   # (the view wrote into it)
                v = Tensor._wrap(v._data.view(p.dtype.np)[..., 0], p.dtype, p.device)
            st[k] = v

    # An update whose arithmetic is elementwise is written once, as `_form(*flags)`: a
    # function of an array namespace (numpy, cupy, or tracejit when traced), p, g, the
    # state arrays and the scalars, returning p's and each state array's new values.
    # `_prepare` does the rest (state, step counts, bias corrections as scalars). The
    # array path runs the form on the arrays (`_run_arrays`); the fused path traces it
    # into one kernel launch over a batch of parameters (`_run_fused`).
    _form = None
    # a fused launch shares over the process's threads from this many elements
    _parallel_min = PARALLEL_MIN

    def _prepare(self, p: Tensor, state: dict, group: dict) -> tuple:
        """Start `p`'s step: make its state on the first one, count the step; returns (the
        form's flags, the state tensors it updates, its scalars as Python numbers)."""
        raise NotImplementedError

    def _update_group(self, todo: list, group: dict) -> None:
        """Update the (parameter, gradient array) pairs of `group` that have gradients: by
        `_form`, in one kernel launch per (flags, scalars, dtype) where the fused path
        applies (module docstring), else one `_update` each."""
        if self._form is None:
            for p, grad in todo:
                self._update(p, grad, self.state[p], group)
            return
        fused = group.get("fused")
        # asked once per step, not per parameter
        may_fuse = fused is True or (fused is None and _fused_default())
        batches: dict = {}     # (flags, scalars, dtype, fits) -> [[p, g, *state arrays], ...]
        state_of = self.state
        for p, grad in todo:
            state = state_of.get(p)
            if state is None:   # (kept only once the update stores something: plain SGD keeps none)
                state = {}
            flags, tensors, scalars = self._prepare(p, state, group)
            if state:
                state_of[p] = state
            arrays = [p._data, grad] + [t._data for t in tensors]
            for t in tensors:
                t._vbox[0] += 1
            key = (flags, scalars, grad.dtype, may_fuse and _fits(*arrays))
            batch = batches.get(key)
            if batch is None:
                batch = batches[key] = []
            batch.append(arrays)
        for (flags, scalars, dtype, fits), batch in batches.items():
            # fused=None: small parameters only never wait for a compile, and in background
            # compile mode the array path runs until the kernel is loaded; fused=True waits
            if fits and (fused is not None or sum(arrays[0].size for arrays in batch) >= FUSED_MIN) \
                    and self._run_fused(flags, batch, scalars, wait=fused is True):
                continue
            form = self._form(*flags)
            if dtype == bf16.STORAGE:
                for arrays in batch:
                    _run_bf16(form, arrays, scalars)
                continue
            numbers = [dtype.type(s) for s in scalars]
            for arrays in batch:
                _run_arrays(form, arrays, numbers)

    def _run_fused(self, flags: tuple, batch: list, scalars: tuple, wait: bool) -> bool:
        """`_form` over the batch's parameters in one kernel launch (`foreach.run`), or False
        where the kernel is not loaded or the form is no flat group."""
        import tracejit
        from ..compiler.cpu.kernels import foreach
        form = self._form(*flags)
        columns = [[a.reshape(-1) for a in column] for column in zip(*batch)]
        return foreach.run(functools.partial(form, tracejit), (form.__name__,) + flags, columns, scalars,
                           (0,) + tuple(range(2, len(columns))), wait=wait, parallel_min=self._parallel_min)

    def _update(self, p: Tensor, grad, state: dict, group: dict) -> None:
        raise NotImplementedError

    # ---- state dict -----------------------------------------------------------------------
    def state_dict(self) -> dict:
        """``{'state': {index: {...}}, 'param_groups': [{..., 'params': [index, ...]}]}`` as in PyTorch.

        Parameters are replaced by their position across groups; state tensors are the
        live ones (save or clone them to keep a snapshot).
        """
        self._run_state_hooks("_state_dict_pre_hooks")
        index: dict = {}
        groups = []
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            ids = []
            for p in g["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            packed["params"] = ids
            groups.append(packed)
        state = {index[id(p)]: self._exported_state(s)
                 for p, s in self.state.items() if id(p) in index}
        return self._run_state_hooks("_state_dict_post_hooks", {"state": state, "param_groups": groups})

    def _exported_state(self, s: dict) -> dict:
        """A parameter's state as PyTorch's state_dict holds it: the optimizer's own dict,
        whose tensors (``step`` included) are the live ones."""
        return s

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore hyperparameters and state; checks everything before changing anything."""
        name = type(self).__name__
        state_dict = self._run_state_hooks("_load_state_dict_pre_hooks", state_dict)
        if not isinstance(state_dict, dict) or "state" not in state_dict or "param_groups" not in state_dict:
            raise ValueError(f"{name}.load_state_dict: expected a dict with 'state' and 'param_groups'")
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(f"{name}.load_state_dict: loaded state dict has {len(saved_groups)} parameter "
                             f"groups, the optimizer has {len(self.param_groups)}")
        id_map = {}
        for gi, (saved, cur) in enumerate(zip(saved_groups, self.param_groups)):
            if len(saved["params"]) != len(cur["params"]):
                raise ValueError(f"{name}.load_state_dict: loaded parameter group {gi} has "
                                 f"{len(saved['params'])} parameters, the optimizer's group has "
                                 f"{len(cur['params'])}")
            for old, p in zip(saved["params"], cur["params"]):
                id_map[old] = p
        new_state: defaultdict = defaultdict(dict)
        for key, st in state_dict["state"].items():
            if key not in id_map:
                raise ValueError(f"{name}.load_state_dict: state refers to parameter {key!r}, which no "
                                 f"parameter group lists")
            p = id_map[key]
            new_state[p] = {k: self._load_value(p, key, k, v) for k, v in st.items()}
        updates = [{k: (tuple(v) if isinstance(self.defaults.get(k), tuple) and isinstance(v, list) else v)
                    for k, v in saved.items() if k != "params"} for saved in saved_groups]
        for update, cur in zip(updates, self.param_groups):
            self._validate(dict(cur, **update))
        for update, cur in zip(updates, self.param_groups):
            cur.update(update)
        self.state = new_state
        self._run_state_hooks("_load_state_dict_post_hooks")

    def _load_value(self, p: Tensor, pkey, k: str, v):
        """A private copy of a loaded state value, on p's device and (if floating) dtype; a
        value kept in `_number_state` (a tensor, or an older checkpoint's int ``step``) as a
        float32 0-d tensor. (PyTorch's load_state_dict shares a tensor it need not convert
        with the loaded dict: stepping two optimizers loaded from one state_dict would then
        update each other's state.)"""
        name = type(self).__name__
        if k in self._number_state:
            return _scalar_state(float(v.item()) if isinstance(v, Tensor) else float(v))
        if isinstance(v, Tensor):
            if v.ndim > 0 and tuple(v.shape) != tuple(p.shape):
                raise ValueError(f"{name}.load_state_dict: state {k!r} of parameter {pkey} has shape "
                                 f"{tuple(v.shape)}, but the parameter has shape {tuple(p.shape)}")
            dtype = p.dtype if v.dtype.is_floating_point else v.dtype
            arr = v.to(device=p.device, dtype=dtype)._data
            return Tensor._wrap(arr.copy(), dtype, p.device)
        return v

    def __repr__(self) -> str:
        lines = [type(self).__name__ + " ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k not in ("params", "param_names"):
                    lines.append(f"    {k}: {g[k]}")
        lines.append(")")
        return "\n".join(lines)



def _new_state_tensor(p: Tensor, arr) -> Tensor:
    return Tensor._wrap(arr, p.dtype, p.device)


def _zeros(p: Tensor, value: float = 0) -> Tensor:
    """A state tensor of `p`'s shape, dtype and device, every element 0 (or `value`)."""
    data = p._data
    return _new_state_tensor(p, p._xp().full_like(data, bf16.to_bfloat16(value) if data.dtype == bf16.STORAGE
                                                  else value))


def _bump(*ts: Tensor) -> None:
    """Count an in-place write into each of `ts` (autograd's version counters)."""
    for t in ts:
        t._vbox[0] += 1


def _scalar_state(value: float) -> Tensor:
    """A 0-d float32 CPU tensor holding `value`: how PyTorch keeps an optimizer's ``step``
    (and NAdam's ``mu_product``, ASGD's ``eta`` and ``mu``)."""
    return Tensor._wrap(np.array(value, dtype=np.float32), _dt.float32, CPU)


def _read(state: dict, k: str) -> float:
    """Scalar state `k` as a Python number (a tensor's float32 value)."""
    v = state[k]
    return v._data.item() if isinstance(v, Tensor) else v


def _write(state: dict, k: str, value: float) -> float:
    """Store `value` into scalar state `k` in place (rounded to the tensor's float32, as
    PyTorch's ``copy_`` does); returns the stored number."""
    t = state[k]
    if not isinstance(t, Tensor):   # (a number a user put there)
        t = state[k] = _scalar_state(value)
    else:
        t._data.fill(value)
        t._vbox[0] += 1
    return t._data.item()


def _step_once(state: dict) -> float:
    """``state["step"] += 1``; returns the new count."""
    return _write(state, "step", _read(state, "step") + 1.0)


def _count_step(state: dict, p: Tensor, *names: str) -> float:
    """Count a step of `p`: on the first one its state gets ``step`` and a zeros tensor
    per name (in PyTorch's key order). Returns the step number."""
    if not state:
        state["step"] = _scalar_state(0.0)
        for name in names:
            state[name] = _zeros(p)
    return _step_once(state)


# With fused=None, a group whose parameters hold fewer elements in all keeps the array
# path: it saves microseconds per step, and a small model never waits for the kernel's
# first compile. The fused kernel is the default exactly where it runs parallel: one
# size, one definition.
FUSED_MIN = PARALLEL_MIN
_FUSED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# The array path goes `_BLOCK` elements at a time: each block's operations run while its
# arrays stay in cache, and no full-size temporary is allocated and page-faulted in.
_BLOCK = 1 << 14


def _direction(g, p, maximize: bool, coupled: bool, wd):
    """A form's gradient to follow: negated to maximize, plus L2 weight decay."""
    g = -g if maximize else g
    return g + wd * p if coupled else g


def _check_fused(name: str, group: dict) -> None:
    """A group's ``fused`` (Adam, AdamW, SGD, Adagrad): None, True or False; True for CPU
    parameters only."""
    fused = group.get("fused")
    if fused is not None and not isinstance(fused, bool):  # (1 == True: not enough)
        raise TypeError(f"{name}: fused must be None, True or False, got {fused!r}")
    if fused:  # (float dtypes are checked for every optimizer)
        for k, p in enumerate(group["params"]):
            if p.device is not CPU:
                raise ValueError(f"{name}: fused=True supports parameters on the CPU only; "
                                 f"parameter {k} is on {p.device}")


def _fused_default() -> bool:
    """``fused=None``: the kernel once numba is loaded (an eager script never pays numba's
    start-up) and compilation is on."""
    from ..jit.config import is_eager
    return "numba" in sys.modules and not is_eager()


def _blockable(*arrays) -> bool:
    """Whether `arrays` are numpy arrays of one floating dtype and shape, in C order."""
    first = arrays[0]
    return all(type(a) is np.ndarray and a.dtype == first.dtype and a.shape == first.shape
               and a.flags.c_contiguous for a in arrays) and first.dtype.kind == "f"


def _fits(*arrays) -> bool:
    """The arrays as the fused kernel takes them: `_blockable`, float32 or float64 (a strided
    view, cupy arrays: the array path, same results)."""
    return _blockable(*arrays) and arrays[0].dtype in _FUSED_DTYPES


def _run_bf16(form, arrays: list, scalars: tuple) -> None:
    """`_run_arrays` for bfloat16 arrays [p, g, *state]: the update computed in float32
    (PyTorch's fused opmath), p and the state rounded once on store."""
    with bf16.widened([arrays[0], *arrays[2:]], [arrays[1]]) as ((p, *state), (g,)):
        _run_arrays(form, [p, g, *state], [np.float32(s) for s in scalars])


def _run_arrays(form, arrays: list, scalars: list) -> None:
    """`form` on [p, g, *state] arrays, its results written back into p and the state: on
    `_BLOCK`-element blocks of the flattened arrays where they are larger and `_blockable`,
    else on the whole arrays (elementwise: the same values either way). `scalars`: numbers
    of the arrays' dtype, as the fused kernel takes them (and numpy a Python float)."""
    if arrays[0].size > _BLOCK and _blockable(*arrays):
        flat = [a.reshape(-1) for a in arrays]
        parts = ([a[lo:lo + _BLOCK] for a in flat] for lo in range(0, flat[0].size, _BLOCK))
        xp = np
    else:
        parts, xp = [arrays], module_of(arrays[0])
    for part in parts:
        new = form(xp, *part, *scalars)
        part[0][...] = new[0]
        for a, value in zip(part[2:], new[1:]):
            a[...] = value
