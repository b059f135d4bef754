"""The autograd node of a compiled call with gradients: the outputs of one call share it,
and its ``apply`` runs the compiled backward plan (executor.py
`CompiledProgram.run_backward`)."""
from __future__ import annotations

import numpy as np

from ..autograd import grad_mode as _gm
from ..autograd.grad_mode import set_mode as _set_grad_mode
from ..autograd.node import Node, _Handle, edge
from ..errors import InplaceModifiedError
from ..tensor import Tensor
from ..jit.autodiff import replaying
from ..jit.interpreter import interpret
from .create_graph import graph_backward


def _saved_owners(saved) -> tuple:
    """({id: position} of the saved arrays that own their memory, positions of the other
    saved arrays): an array that owns its memory shares it with another only by being
    that array's root, so an in-place write checks those by identity, not one by one (a
    YOLO step's 18 BatchNorm statistics writes each tested ~190 saved arrays)."""
    own, views = {}, []
    for j, a in enumerate(saved):
        if isinstance(a, np.ndarray):
            if a.base is None and a.flags.owndata:
                own[id(a)] = j
            else:
                views.append(j)
    return own, views


class CompiledNode(Node):
    """The single grad_fn of a compiled call's outputs."""

    __slots__ = ("program", "inputs", "versions", "saved", "diff_idx", "out_avals", "taken", "take", "shells",
                 "out_versions", "draws", "inner_hooks", "owners")

    def __init__(self, program, inputs, saved, diff_idx, out_avals, edges=None, versions=None):
        # (`edges` and `versions` when the caller has them: a generated training call)
        super().__init__(tuple(edge(inputs[i]) for i in diff_idx) if edges is None else edges,
                         len(out_avals))
        self.program = program
        self.inputs = inputs
        self.versions = [x._vbox[0] if isinstance(x, Tensor) else None for x in inputs] \
            if versions is None else versions
        self.saved = saved
        self.diff_idx = diff_idx
        self.out_avals = out_avals
        self.take = None   # the program's `taker` for diff_idx, once asked for
        self.shells = None  # the gradients' tensors, made before the kernels (`taker`)
        # (output position, its version box, its version) for each output whose memory the
        # backward reads (`_outputs_saved`); None when there is none
        self.out_versions = None
        self.draws = None   # (Vars, arrays): the forward's random draws, for a create_graph backward
        self.inner_hooks = None   # {output: [hook]} on outputs the call also reads (`_add_tensor_hook`)
        self.owners = None   # (`keep_input`'s index of `saved`: `_saved_owners`)

    def keep_input(self, t) -> None:
        """`t`, an input of this call, is about to be overwritten by the call's own in-place
        update: keep the value the forward read where the backward reads it (its watched
        inputs, and those a create_graph backward recomputes from, as a spectral norm's
        power-iteration vector; not, e.g., the running statistics a BatchNorm step updates)."""
        p = self.program
        for i in sorted({*p.watched_inputs(self.diff_idx), *p.recomputed_inputs(self.diff_idx)}):
            x = self.inputs[i]
            if x is t:
                self.inputs[i] = Tensor._wrap(x._data.copy(), x.dtype, x.device)
                self.versions[i] = 0
        # (a residual may be a view of t's memory: x[1] saved for clamp's backward)
        if self.saved and isinstance(t._data, np.ndarray):
            if self.owners is None or self.owners[0] is not self.saved:
                self.owners = (self.saved, *_saved_owners(self.saved))
            _, own, views = self.owners
            data = root = t._data
            while isinstance(root.base, np.ndarray):
                root = root.base
            if root.base is None and root.flags.owndata:   # t's memory is an array's own
                hits = [j for j in (own.get(id(root)),) if j is not None]
            else:
                hits = [j for j in own.values() if np.may_share_memory(self.saved[j], data)]
            hits += [j for j in views if np.may_share_memory(self.saved[j], data)]
            if hits:
                self.saved = list(self.saved)
                for j in hits:
                    self.saved[j] = self.saved[j].copy()

    def name(self) -> str:
        return f"Compiled{self.program.name}Backward"

    def _add_tensor_hook(self, output_nr: int, fn):
        """A hook on an output the call's own later work also reads must see that work's
        gradient too, as eager's: the compiled backward adds it inside its kernels, so
        such a hook makes this node's backward recompute the call op by op (`_interpreted`)."""
        if output_nr not in self.program.read_outputs():
            return super()._add_tensor_hook(output_nr, fn)
        if self.inner_hooks is None:
            self.inner_hooks = {}
        lst = self.inner_hooks.setdefault(output_nr, [])
        lst.append(fn)
        return _Handle(lst, fn)

    def _retain_output(self, output_nr: int, ref) -> None:
        # (`retain_grad` on such an output: its whole gradient too, after its other hooks)
        if output_nr not in self.program.read_outputs():
            return super()._retain_output(output_nr, ref)
        if not self._retains(output_nr):
            self._add_tensor_hook(output_nr, _Retained(ref))

    def _retains(self, output_nr: int) -> bool:
        return super()._retains(output_nr) or any(
            type(f) is _Retained for f in (self.inner_hooks or {}).get(output_nr, ()))

    def _interpreted(self, grads: list, create_graph: bool) -> list:
        """The gradients of the differentiable inputs by the captured graph interpreted with
        autograd recording from the call's inputs (and its random draws), the inner hooks on
        the recomputed outputs."""
        from ..autograd import grad
        dvars, darrays = self.draws if self.draws is not None else ((), ())
        ins = list(self.inputs)
        xs = [ins[i].detach().requires_grad_() for i in self.diff_idx]
        for i, x in zip(self.diff_idx, xs):
            ins[i] = x
        ins += [Tensor._wrap(a, v.aval.dtype, v.aval.device) for v, a in zip(dvars, darrays)]
        with _gm.enable_grad():
            outs = interpret(replaying(self.program.graph, dvars), ins)
        for k, fns in self.inner_hooks.items():
            for fn in sorted(fns, key=lambda f: type(f) is _Retained):   # (PyTorch's order)
                outs[k].register_hook(fn)
        pairs = [(o, g) for o, g in zip(outs, grads)
                 if g is not None and isinstance(o, Tensor) and o.requires_grad]
        if not pairs:
            return [None] * len(xs)
        return list(grad([o for o, _ in pairs], xs, [g for _, g in pairs], create_graph=create_graph,
                         allow_unused=True))

    def _check_versions(self, recomputing: bool = False) -> None:
        # (a backward that recomputes the forward from the inputs, create_graph's or a hooked
        # one, reads them too where the compiled backward reads the forward's copies)
        watched = self.program.watched_inputs(self.diff_idx)
        if recomputing:
            watched = sorted({*watched, *self.program._copied.get(self.diff_idx, ())})
        for i in watched:
            x, v = self.inputs[i], self.versions[i]
            if v is not None and x._vbox[0] != v:
                raise InplaceModifiedError(
                    f"input {i} of compiled {self.program.name} was modified in place after the "
                    f"forward pass (version {v} -> {x._vbox[0]}); clone it before modifying it")
        if self.out_versions is not None:
            for k, box, v in self.out_versions:
                if box[0] != v:
                    # (the backward reads this output's memory: it would use the new values)
                    raise InplaceModifiedError(
                        f"output {k} of compiled {self.program.name} was modified in place after "
                        f"the forward pass (version {v} -> {box[0]}), and its backward needs the "
                        f"value it returned; clone the output before modifying it in place")

    def unit_backward(self, t) -> bool:
        """``t.backward()`` for `t`, this node's loss output, on a compiled training step's
        usual last backward (implicit unit gradient, no retained graph, gradients computed
        by the forward, distinct hook-less leaves): the program's generated `take` hands
        each leaf its gradient directly (GELU over 4M, cold: ~2.3x faster). False
        (nothing done) when the general path is needed."""
        take = self.take
        if take is None:
            take = self.take = self.program.taker(self.diff_idx)
        return take(self, t)

    def apply(self, grads, create_graph, retain_graph):
        self._check_not_freed()
        hooked = self.inner_hooks and any(self.inner_hooks.values())
        self._check_versions(bool(hooked or create_graph))
        if hooked:
            res = self._interpreted(grads, create_graph)
        elif create_graph:
            # (only the gradients the walk reads: an R1 penalty's of the image, not the weights')
            needed = _gm._state.needed   # (a walk's that reaches this node)
            want = self.diff_idx if needed is None or self not in needed else tuple(
                i for i, n in zip(self.diff_idx, self._next) if n in needed)
            got = dict(zip(want, graph_backward(self.program, self.inputs, grads, want, self.draws) if want else ()))
            res = [got.get(i) for i in self.diff_idx]
        else:
            saved, self.saved = self.saved, (self.saved if retain_graph else None)
            res = self.program.run_backward(self.inputs, saved, grads, retain_graph, self.diff_idx)
            del saved
        if not retain_graph:
            self.saved = self.draws = None
            self._freed = True
        if hooked:
            return res
        live = self.program.reached(self.taken, grads)
        return [r if i in live else None for r, i in zip(res, self.diff_idx)]


class _Retained:
    """`retain_grad` of an output as a hook on its recomputed twin: the gradient lands in
    the tensor the user holds (weakly)."""

    def __init__(self, ref):
        self.ref = ref

    def __call__(self, g):
        t = self.ref()
        if t is not None:
            g = g.detach()
            t.grad = g if t.grad is None else t.grad + g


def _no_take(node, t) -> bool:
    """`CompiledProgram.taker` where the forward computed no gradients: the engine's way."""
    return False


_no_take.shells = lambda: None


def _hand_to_leaf(leaf, buf: list) -> None:
    """A gradient in `buf` (a list of its own) to `leaf`'s AccumulateGrad as the engine
    hands it, with grad mode off."""
    prev_mode = _gm._state.enabled
    _set_grad_mode(False)
    try:
        leaf.apply(buf, False, False)
    finally:
        _set_grad_mode(prev_mode)
