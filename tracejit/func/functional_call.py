"""``functional_call``: run a module with the parameters and buffers given by name;
``stack_module_state``: the stacked weights of same-class modules, for an ensemble run by
``vmap`` over ``functional_call``."""
from __future__ import annotations

from typing import Any

from ..tensor import Tensor

__all__ = ["functional_call", "stack_module_state"]


def functional_call(module, parameter_and_buffer_dicts, args=(), kwargs=None, *,
                    tie_weights: bool = True, strict: bool = False) -> Any:
    """``module(*args, **kwargs)`` with each tensor named in the dict(s) (state_dict names,
    ``"layer.weight"``) standing in for the module's own for this call; the module is as it
    was afterwards, also when the call raises. Tied parameters follow their stand-in
    (``tie_weights``); ``strict`` requires every parameter and buffer to be given."""
    dicts = parameter_and_buffer_dicts
    if isinstance(dicts, dict):
        dicts = [dicts]
    given: dict = {}
    for d in dicts:
        for k, v in d.items():
            if k in given:
                raise ValueError(f"functional_call: {k!r} appeared in more than one of the dicts")
            if not isinstance(v, Tensor):
                raise TypeError(f"functional_call: the value for {k!r} must be a tensor, got {type(v).__name__}")
            given[k] = v
    slots = {}
    for prefix, m in module.named_modules(remove_duplicate=False):
        for kind in ("_parameters", "_buffers"):
            for name, t in m.__dict__[kind].items():
                full = f"{prefix}.{name}" if prefix else name
                slots[full] = (m, kind, name, t)
    unknown = sorted(set(given) - set(slots))
    if unknown:
        raise ValueError(f"functional_call: {type(module).__name__} has no parameter or buffer named "
                         f"{unknown}")
    if strict:
        missing = sorted(set(slots) - set(given))
        if missing:
            raise RuntimeError(f"functional_call (strict): missing {missing}")
    if tie_weights:   # a tensor shared by several names takes the stand-in given for any of them
        by_id: dict = {}
        for full, (_m, _k, _n, t) in slots.items():
            if t is not None:
                by_id.setdefault(id(t), []).append(full)
        for names in by_id.values():
            chosen = [given[n] for n in names if n in given]
            if len({id(v) for v in chosen}) > 1:   # which of them the call should use is ambiguous
                raise ValueError(f"functional_call got multiple values for keys {sorted(names)}, which are "
                                 f"tied. Consider using tie_weights=False")
            if chosen:
                for n in names:
                    given.setdefault(n, chosen[0])
    from ..nn.module import state_epoch
    saved = []
    try:
        for full, value in given.items():
            m, kind, name, old = slots[full]
            saved.append((m, kind, name, old))
            m.__dict__[kind][name] = value
        state_epoch[0] += 1   # (a compiled module's guard looks at its tensors again)
        return module(*(args if isinstance(args, tuple) else (args,)), **(kwargs or {}))
    finally:
        for m, kind, name, old in reversed(saved):
            m.__dict__[kind][name] = old
        state_epoch[0] += 1


def stack_module_state(models) -> tuple:
    """``(params, buffers)``: dicts from each state name to the models' tensors stacked on a
    new dim 0. The stacked parameters are new leaves, requiring grad where the models'
    do (an optimizer trains the ensemble through them); the models are not changed."""
    from ..ops.shape import stack
    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if len({m.training for m in models}) > 1:
        raise RuntimeError("stack_module_state: Expected all models to have the same training/eval mode.")
    if len({type(m) for m in models}) > 1:
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")

    def stacked(named: list) -> dict:
        out = {}
        for k in named[0]:
            ts = [d[k] for d in named]
            if len({t.requires_grad for t in ts}) > 1:
                raise RuntimeError(f"Expected {k} from each model to have the same .requires_grad")
            out[k] = stack([t.detach() for t in ts])
            if ts[0].requires_grad:
                out[k].requires_grad_()
        return out

    return (stacked([dict(m.named_parameters()) for m in models]),
            stacked([dict(m.named_buffers()) for m in models]))
