"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay (PyTorch's formulas).

``fused`` (PyTorch's argument, as for Adam): a group's CPU float parameters update in one
numba kernel launch (`_fused_step`), one pass over every p, g (and momentum
buffer), bitwise the array path's results. ``None`` (default): fused under Adam's rule
(``adam.FUSED_MIN`` elements, numba loaded, compilation on); ``True``: always (CPU only);
``False``: never.
"""
from __future__ import annotations

from .adam import FUSED_MIN, _check_fused, _fits, _fused_default
from .optimizer import Optimizer, _direction, _new_state_tensor

__all__ = ["SGD"]


class SGD(Optimizer):
    r"""PyTorch's SGD, per parameter with gradient g:

    g = g + weight_decay * p;  b = g (first step) or momentum * b + (1 - dampening) * g;
    g = g + momentum * b (nesterov) or b;  p = p - lr * g.
    """

    _numbers = ("learning rate lr", "momentum", ("dampening", None), "weight_decay")

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, differentiable: bool = False, fused: bool | None = None):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
                                      fused=fused, **self._impl_options(foreach, False, differentiable)))

    def _validate(self, group: dict) -> None:
        super()._validate(group)
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("SGD: Nesterov momentum requires a momentum > 0 and zero dampening")
        _check_fused("SGD", group)

    def _update_group(self, todo: list, group: dict) -> None:
        """The group's parameters in one kernel launch per (dtype, first momentum step) where
        the fused kernel applies (module docstring), the others one by one."""
        fused = group.get("fused")
        if not (fused is True or (fused is None and _fused_default())) or not _plain(group):
            super()._update_group(todo, group)
            return
        momentum = group["momentum"]
        batches: dict = {}     # (dtype, first) -> [(p, grad, momentum buffer or None), ...]
        rest = []
        for p, grad in todo:
            buf = self.state[p].get("momentum_buffer") if momentum != 0 else None
            if _fits(p._data, grad, None if buf is None else buf._data):
                batches.setdefault((grad.dtype, momentum != 0 and buf is None), []).append((p, grad, buf))
            else:
                rest.append((p, grad))
        for (_, first), batch in batches.items():
            # the first momentum step makes the buffers (the array path); fused=None in
            # background compile mode: the array path until the kernel is loaded
            if first or (fused is None and sum(p._data.size for p, _, _ in batch) < FUSED_MIN) \
                    or not _fused_step(batch, group, wait=fused is True):
                rest.extend((p, grad) for p, grad, _ in batch)
                continue
            for _, _, buf in batch:
                if buf is not None:
                    buf._vbox[0] += 1
        for p, grad in rest:
            self._update(p, grad, self.state[p], group)

    def _update(self, p, grad, state, group) -> None:
        lr, momentum = group["lr"], group["momentum"]
        dampening = group["dampening"]
        grad = _direction(grad, p, group)
        if momentum != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = _new_state_tensor(p, grad.copy())
            else:
                b = buf._data
                b *= momentum
                b += (1 - dampening) * grad
                buf._vbox[0] += 1
            grad = grad + momentum * buf._data if group["nesterov"] else buf._data
        p._data -= lr * grad


def _plain(group: dict) -> bool:
    """Whether the group's numbers are Python numbers: numpy takes those at the arrays'
    dtype (as the kernel takes them); a numpy float64 scalar would make the array path
    compute in float64."""
    return all(type(group[k]) in (float, int, bool) for k in ("lr", "momentum", "dampening", "weight_decay"))


def _fused_step(batch: list, group: dict, wait: bool) -> bool:
    """The batch's update ((p, grad, momentum buffer or None) of one dtype, buffers made)
    in one kernel launch (`foreach.run`), or False where the kernel is not loaded."""
    from ..compiler.cpu.kernels import foreach
    momentum = group["momentum"]
    flags = (bool(group["maximize"]), group["weight_decay"] != 0, momentum != 0, bool(group["nesterov"]))
    form = _forms.get(flags) or _forms.setdefault(flags, _sgd_form(*flags))
    columns = [[p._data.reshape(-1) for p, _, _ in batch], [g.reshape(-1) for _, g, _ in batch]]
    if flags[2]:
        columns.append([buf._data.reshape(-1) for _, _, buf in batch])
    scalars = (group["weight_decay"], momentum, 1 - group["dampening"], group["lr"])
    return foreach.run(form, ("sgd",) + flags, columns, scalars, (0, 2)[:1 + flags[2]], wait=wait,
                       parallel_min=_PARALLEL_MIN)


# SGD's update moves 12 bytes per float32 element and computes next to nothing: below this
# many elements one thread is faster than a two-share launch.
_PARALLEL_MIN = 1 << 22
_forms: dict = {}


def _sgd_form(maximize: bool, decay: bool, momentum: bool, nesterov: bool):
    """SGD's update of one parameter after its first momentum step as a function of
    tensors, `SGD._update`'s operations in its order (what `foreach.run` traces)."""
    def sgd_update(p, g, *rest):
        if momentum:
            buf, *rest = rest
        wd, mom, one_minus_dampening, lr = rest
        if maximize:
            g = -g
        if decay:
            g = g + wd * p
        if momentum:
            buf = buf * mom + one_minus_dampening * g
            g = g + mom * buf if nesterov else buf
        p = p - lr * g
        return (p, buf) if momentum else (p,)
    return sgd_update
