"""Running a compiled graph: inference plans, training plans and their autograd node.

Without gradients a call is one generated plan over arrays. With gradients, the
forward plan also returns the values the backward needs, and the outputs share one
`CompiledNode` whose ``apply`` runs the compiled backward plan. Plans are built on
first use, so an entry that never needs gradients never compiles a backward.
"""
from __future__ import annotations

import linecache
import sys

import numpy as np

from ..autograd import grad_mode as _gm
from ..autograd.node import AccumulateGrad, leaf_node
from ..envflags import is_off
from ..jit.autodiff import active_vars, drawn, loss_joint, split
from ..jit.backend import Executor, InputKeeper, raise_kernel_error
from ..jit import batchnorm_split as _batchnorm_split  # noqa: F401  (its pattern: registered at import)
from ..jit import patterns as _patterns
from ..jit.ir import Graph, Var
from ..jit.passes import _possible_views, drop_detach, lift_symbolic_literals, optimize
from ..memory import free_kept, kept_refs, sole_padded_view
from ..tensor import Tensor
from .compiled_node import CompiledNode, _hand_to_leaf, _no_take
from .graph_facts import (_gradients_apart, _inputs_recomputed, _inputs_snapshot,
                          _inputs_used, _inputs_watched, _nbytes, _outputs_saved, _same_memory,
                          _shapes_of, copy_inputs, root_array)
from .bf16_graph import has_bf16, save_wide
from .plan import Plan
from .saving import recompute_unless_written
from ..jit.control import COND, WHILE
from ..jit.tracer import DETACH
from ..jit.zero_cotangents import without_cotangents

__all__ = ["CompiledProgram"]


def _exec_generated(src: str, fname: str, names: dict) -> None:
    """Run generated source `src` in `names`, its text registered under the pseudo-file
    `fname` so that tracebacks and debuggers show the generated lines."""
    linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
    exec(compile(src, fname, "exec"), names)


def _all_finite(arrays) -> bool:
    """Whether every float array holds finite values (one summing pass: an overflow to inf
    reads as non-finite, which only costs the caller a second, exact, backward)."""
    for a in arrays:
        if getattr(a, "dtype", None) is not None and a.dtype.kind in "fc" and not np.isfinite(a.sum()):
            return False
    return True


class CompiledProgram(Executor):
    def __init__(self, graph: Graph, name: str = "graph"):
        graph = lift_symbolic_literals(graph)
        self.graph = graph
        self.name = name
        self._infer = None
        self._train: dict = {}  # diff_idx tuple -> (fwd plan, bwd plan, n_saved)
        self._draws: dict = {}  # diff_idx -> the draws a training forward returns after its saved values
        self._identity = {}
        for k, a in enumerate(graph.outputs):
            if isinstance(a, Var) and a in graph.inputs:
                self._identity[k] = graph.inputs.index(a)
        from .backends import for_graph
        self.backend = for_graph(graph)     # array module, allocation, kernels (backends.py)
        self._backend = self.backend.name
        self._scalar_inputs = any(v.aval.weak for v in graph.inputs)
        self._diff_cached = None
        self._loss_k: dict = {}  # diff_idx -> the loss output whose gradients the forward computes
        self._saved_outs: dict = {}  # diff_idx -> outputs whose memory the backward reads
        self._active_outs: dict = {}
        self._watched: dict = {}   # diff_idx -> `watched_inputs`
        self._copied: dict = {}   # diff_idx -> inputs the backward reads as the forward's copies
        self._recomputed: dict = {}   # diff_idx -> `recomputed_inputs`
        self._reached: dict = {}  # (branches taken, outputs without gradient) -> `reached`
        self._takers: dict = {}   # diff_idx -> `taker`
        self._vjp_programs: dict = {}  # create_graph.py's programs (or joint graphs) by key
        self._absent: dict = {}   # (diff_idx, outputs without gradient) -> `_without_absent`'s plan
        self._parent = None   # (program, key) whose create_graph backward made this one
        # Outputs that may be views of an input (a chain of movement ops): a view must share
        # its input's version counter, or an in-place write through it goes unseen.
        self._view_outs = _possible_views(graph)
        self._simple_out = not self._identity and not self._view_outs
        self._out_types = [(a.aval.dtype, a.aval.device) for a in graph.outputs]
        self._out_avals = [a.aval for a in graph.outputs]

    # ---- plans ----------------------------------------------------------------------
    def infer_plan(self) -> Plan:
        if self._infer is None:
            self._infer = Plan(self.graph, self.name)
        return self._infer

    def train_plans(self, diff_idx: tuple):
        """(forward plan, backward plan, n_saved) for these differentiable inputs. For a loss
        (one 0-d output) the forward also computes the gradients for a unit cotangent; the
        backward plan is then None and `run_backward` only scales them."""
        t = self._train.get(diff_idx)
        if t is None:
            active = [i in diff_idx for i in range(len(self.graph.inputs))]
            # The forward also reports which branch each top-level cond took, so gradients of
            # inputs only the untaken branch reads are None, exactly as in eager mode.
            preds = tuple(e.inputs[0] for e in self.graph.eqns if e.prim is COND)
            # and its random draws, kept by the node for a create_graph backward (create_graph.py)
            draws = self._draws[diff_idx] = drawn(self.graph, active)
            k, n_out = self._loss_output(diff_idx), len(self.graph.outputs)
            if k is not None:
                # the forward stage's patterns only now, after differentiation (BatchNorm +
                # max pooling, BatchNorm's split: they drop the op that carries BatchNorm's VJP)
                joint = drop_detach(optimize(loss_joint(self.graph, active, k)))
                fwd = lift_symbolic_literals(_patterns.apply("forward", joint))
                fwd = _gradients_apart(fwd, n_out)
                bwd, n_saved, suffix = None, len(fwd.outputs) - n_out, "_fwd_grads"
                self._loss_k[diff_idx] = k
            else:
                # elementwise values the forward writes anyway are saved, not recomputed
                fwd, bwd, n_saved = split(self.graph, active, cheap=recompute_unless_written(self.graph))
                fwd, suffix = _patterns.apply("forward", drop_detach(fwd)), "_fwd"
                bwd = lift_symbolic_literals(_patterns.apply("backward", optimize(bwd)))
                if has_bf16(fwd):
                    fwd, bwd = save_wide(fwd, bwd, len(self.graph.inputs), n_out, n_saved)
                eager = _inputs_watched(self.graph, active_vars(self.graph, active), None)
                bwd, self._copied[diff_idx] = _inputs_snapshot(bwd, eager, len(active), n_saved)
            fwd = Graph(fwd.inputs, fwd.eqns, fwd.outputs + draws + preds, fwd.name)
            fwd_plan = Plan(fwd, self.name + suffix)
            t = self._train[diff_idx] = (fwd_plan, bwd and Plan(bwd, self.name + "_bwd"), n_saved)
            # (none for a loss plan: what it saves is its gradients, which `_gradients_apart`
            # keeps apart from every output)
            if bwd is not None:
                self._saved_outs[diff_idx] = _outputs_saved(fwd, n_out, n_saved)
        return t

    def plans_for(self, ins, grad_enabled: bool) -> list:
        """The plans a call with `ins` runs (built, not compiled: their kernels compile on
        first use). What a background compile prepares, and what ``fn.compile`` loads."""
        diff_idx = self._diff_of(ins) if grad_enabled else ()
        if not diff_idx:
            return [self.infer_plan()]
        fwd, bwd, _ = self.train_plans(diff_idx)
        return [fwd] if bwd is None else [fwd, bwd]

    def _loss_output(self, diff_idx: tuple):
        """The output whose gradients the forward computes: a lone active 0-d output, or None
        (also with ``TRACEJIT_LOSS_GRADS=0``)."""
        if is_off("TRACEJIT_LOSS_GRADS"):
            return None
        g = self.graph
        if any(e.prim is WHILE for e in g.eqns):
            return None  # not differentiable: let the ordinary path raise its error
        act = self._active_outputs(diff_idx)
        if len(act) != 1:
            return None
        (k,) = act
        if k in self._identity or g.outputs[k].aval.shape != () or g.outputs.count(g.outputs[k]) != 1:
            return None
        return k

    def _active_outputs(self, diff_idx: tuple) -> set:
        """Positions of the outputs that depend on a differentiable input (they require
        grad, as in eager)."""
        act = self._active_outs.get(diff_idx)
        if act is None:
            flags = [i in diff_idx for i in range(len(self.graph.inputs))]
            av = active_vars(self.graph, flags)
            act = self._active_outs[diff_idx] = {k for k, a in enumerate(self.graph.outputs)
                                                 if isinstance(a, Var) and a in av}
        return act

    def watched_inputs(self, diff_idx: tuple) -> tuple:
        """Inputs whose in-place change after the forward makes backward() refuse
        (graph_facts.py `_inputs_watched`)."""
        w = self._watched.get(diff_idx)
        if w is None:
            _, bwd, _ = self.train_plans(diff_idx)
            flags = [i in diff_idx for i in range(len(self.graph.inputs))]
            w = self._watched[diff_idx] = _inputs_watched(
                self.graph, active_vars(self.graph, flags), None if bwd is None else bwd.graph)
        return w

    def recomputed_inputs(self, diff_idx: tuple) -> tuple:
        """Inputs a create_graph (or hooked) backward reads when it recomputes the forward
        from the call's inputs (graph_facts.py `_inputs_recomputed`)."""
        r = self._recomputed.get(diff_idx)
        if r is None:
            flags = [i in diff_idx for i in range(len(self.graph.inputs))]
            r = self._recomputed[diff_idx] = _inputs_recomputed(self.graph, active_vars(self.graph, flags))
        return r

    def read_outputs(self) -> frozenset:
        """Outputs the graph's own equations also read (or that it returns twice): the
        gradient reaching one of them from outside the call is not its whole gradient."""
        r = self.__dict__.get("_read_outputs")
        if r is None:
            used = {id(v) for e in self.graph.eqns for v in e.inputs}
            outs = [id(v) for v in self.graph.outputs]
            r = self._read_outputs = frozenset(k for k, v in enumerate(outs) if v in used or outs.count(v) > 1)
        return r

    def reached(self, taken: list, grads=None) -> set:
        """Graph inputs that the outputs given a gradient depend on, given the branch each
        cond took (inputs returned as-is are the caller's own tensors). Kept per such pattern:
        every backward of a training step asks the same question."""
        # (a loss's one gradient without a generator: each new frame costs microseconds
        # on the caches a large kernel has just swept)
        key = (tuple(taken), None if grads is None else (grads[0] is None,) if len(grads) == 1
               else tuple([x is None for x in grads]))
        live = self._reached.get(key)
        if live is None:
            if len(self._reached) > 64:
                self._reached.clear()
            live = self._reached[key] = frozenset(self._reached_walk(taken, grads))
        return live

    def _reached_walk(self, taken: list, grads) -> set:
        g = self.graph
        live = {a for k, a in enumerate(g.outputs)
                if isinstance(a, Var) and a.aval.dtype.differentiable and k not in self._identity
                and (grads is None or grads[k] is not None)}
        conds = [e for e in g.eqns if e.prim is COND]
        which = {id(e): t for e, t in zip(conds, taken)}
        for e in reversed(g.eqns):
            if not any(o in live for o in e.outs):
                continue
            if e.prim is COND:
                br = e.params["true_graph"] if which.get(id(e), True) else e.params["false_graph"]
                used = _inputs_used(br)
                for k, a in enumerate(e.inputs[1:]):
                    if k in used and isinstance(a, Var):
                        live.add(a)
            elif e.prim is not DETACH:   # (a bool or integer operand, a comparison's, carries no gradient)
                live.update(a for a in e.inputs if isinstance(a, Var)
                            and a.aval.dtype.differentiable)
        return {i for i, v in enumerate(g.inputs) if v in live}

    def taker(self, diff_idx: tuple):
        """``take(node, t) -> bool``: `CompiledNode.unit_backward` generated and unrolled for
        differentiable inputs `diff_idx`: it runs right after the loss kernel swept the
        caches, where each frame of a general version cost 0.5-4 us. ``take.shells()`` makes
        the gradients' tensors before the kernels run, on warm caches."""
        take = self._takers.get(diff_idx)
        if take is None:
            take = self._takers[diff_idx] = self._generated_take(diff_idx)
        return take

    def _generated_take(self, diff_idx: tuple):
        k_loss = self._loss_k.get(diff_idx)
        if k_loss is None:      # no loss plan for these inputs: the engine's backward
            return _no_take
        n = len(diff_idx)
        n_out = len(self.graph.outputs)
        pattern = [True if k == k_loss else None for k in range(n_out)]   # (`reached`'s grads)
        conds = any(e.prim is COND for e in self.graph.eqns)
        live = None if conds else self.reached([], pattern)
        ls = [f"l{k}" for k in range(n)]
        ins = [f"i{k}" for k in range(len(self.graph.inputs))]
        vs = [f"w{k}" for k in range(len(ins))]
        # distinct leaves: pairwise `is` for a few (no set built), one set for more (the
        # pairs grow as n^2: a model's dozens of parameters)
        distinct = ([f"{ls[j]} is {ls[k]}" for j in range(n) for k in range(j)] if n <= 4
                    else [f"len({{{', '.join(ls)}}}) != {n}"])
        hookless = " or ".join(
            [f"type({l}) is not AG or {l}._hooks is not None" for l in ls] + distinct)
        lines = ["def take(node, t):",
                 "    if (node._hooks is not None or node._freed or node._meta is not None",
                 f"            or t._output_nr != {k_loss}):",
                 "        return False",
                 f"    {''.join(f'({l}, _), ' for l in ls)}= node.next_functions",
                 f"    if {hookless}:",
                 "        return False",
                 f"    {', '.join(ins)}, = node.inputs",
                 f"    {', '.join(vs)}, = node.versions"]
        watched = self.watched_inputs(diff_idx)
        if watched:
            lines += ["    if " + " or ".join(f"({vs[i]} is not None and {ins[i]}._vbox[0] != {vs[i]})"
                                           for i in watched) + ":",
                      "        node._check_versions()     # (raises)"]
        lines += ["    s = node.saved",
                 "    node.saved = None",
                 "    node._freed = True",
                 "    node.draws = None",
                 f"    {', '.join(f's{k}' for k in range(n))}, = s",
                 "    s = None     # each gradient array now held by one local here (and its slot)",
                 "    sh = node.shells",
                 "    node.shells = None",
                 "    if sh is None:",
                 "        sh = SHELLS()",
                 f"    {', '.join(f'g{k}' for k in range(n))}, = sh",
                 "    sh = None"]
        if conds:
            lines.append("    live = PROG.reached(node.taken, PATTERN)")
        names = {"AG": AccumulateGrad, "PROG": self, "PATTERN": pattern, "ND": np.ndarray,
                 "WRAP": Tensor._wrap, "FREE": free_kept, "RC": sys.getrefcount, "KREFS": kept_refs,
                 "SOLE": sole_padded_view, "GIVE": _hand_to_leaf}
        # the engine's order (its ready stack: the last edge first)
        for k in range(n - 1, -1, -1):
            i = diff_idx[k]
            if live is not None and i not in live:
                lines.append(f"    s{k} = None")
                continue
            ind = "    "
            if conds:
                lines.append(f"    if {i} in live:")
                ind = "        "
            a, l, x = f"s{k}", f"l{k}", "x"
            lines += [
                f"{ind}{x} = {l}.variable()",
                # Nobody else holds the array: .grad takes it, as AccumulateGrad takes a
                # gradient only the engine holds
                f"{ind}if ({x} is not None and {x}._grad is None and {l}._post_acc_hooks is None",
                f"{ind}        and {x}.dtype is D{k} and {x}.device is V{k}",
                f"{ind}        and type({a}) is ND and {a}.shape == {x}._data.shape",
                f"{ind}        and (FREE({a}) or (RC({a}) <= 2 + KREFS({a}) and {a}.flags.writeable",
                f"{ind}                         and {a}.flags.c_contiguous and ({a}.base is None or SOLE({a}))))):",
                f"{ind}    g{k}._data = {a}",
                f"{ind}    {x}._grad = g{k}",
                f"{ind}else:",
                # in a list of its own and nowhere else, as the engine hands it
                f"{ind}    g{k}._data = {a}",
                f"{ind}    b = [g{k}]",
                f"{ind}    {a} = {x} = g{k} = None",
                f"{ind}    GIVE({l}, b)",
                f"{ind}    b = None",
                f"{ind}{a} = {x} = g{k} = None"]
        lines.append("    return True")
        for k, i in enumerate(diff_idx):   # the gradients' dtypes and devices: their inputs'
            aval = self.graph.inputs[i].aval
            names[f"D{k}"], names[f"V{k}"] = aval.dtype, aval.device
        lines += ["", "", "def shells():",
                  f"    return ({''.join(f'WRAP(None, D{k}, V{k}), ' for k in range(n))})"]
        src = "\n".join(lines) + "\n"
        fname = f"<tracejit-take-{self.name}-{id(self):x}-{len(self._takers)}>"
        _exec_generated(src, fname, names)
        names["SHELLS"] = names["shells"]
        names["take"].shells = names["shells"]
        return names["take"]

    # ---- calls ------------------------------------------------------------------------------
    def _arrays(self, ins):
        # Runtime Python scalars (script arguments) become 0-d arrays of their graph dtype.
        xp = self.backend.array_module()
        return [x._data if isinstance(x, Tensor) else xp.asarray(x, dtype=v.aval.dtype.np)
                for x, v in zip(ins, self.graph.inputs)]

    def __call__(self, ins) -> list:
        # The hot path of a cache hit. The entry's guard pins grad mode and each input's
        # requires_grad, so whether this program runs with gradients is decided once.
        diff_idx = self._diff_cached
        if diff_idx is None:
            diff_idx = self._diff_cached = self._diff_of(ins) if _gm._state.enabled else ()
        if self._scalar_inputs:
            arrays = self._arrays(ins)
        else:
            arrays = [x._data for x in ins]
        if not diff_idx:
            plan = self._infer or self.infer_plan()
            res = plan.fn(*arrays)
            if self._simple_out:
                wrap = Tensor._wrap
                return [wrap(r, d, dev) for r, (d, dev) in zip(res, self._out_types)]
            return self._wrap(ins, res, None)
        fwd, bwd, n_saved = self.train_plans(diff_idx)
        res = fwd.fn(*arrays)
        n_out = len(self.graph.outputs)
        outs, saved, taken = res[:n_out], res[n_out:n_out + n_saved], res[n_out + n_saved:]
        if self._copied.get(diff_idx):
            saved = copy_inputs(saved, arrays, self._copied[diff_idx])
        node = CompiledNode(self, list(ins), saved, diff_idx, self._out_avals)
        draws = self._draws[diff_idx]
        if draws:
            node.draws, taken = (draws, taken[:len(draws)]), taken[len(draws):]
        # (no comprehension without a cond: after a large kernel each new frame runs cold)
        node.taken = [bool(t) for t in taken] if taken else []
        return self._wrap(ins, outs, node)

    def _wrap(self, ins, arrays, node):
        out = []
        # Only outputs that depend on a differentiable input require grad (as in eager).
        active = None if node is None else self._active_outputs(node.diff_idx)
        for k, (a, arr) in enumerate(zip(self.graph.outputs, arrays)):
            j = self._identity.get(k)
            if j is not None:
                out.append(ins[j])
                continue
            t = Tensor._wrap(arr, a.aval.dtype, a.aval.device)
            j = self._view_outs.get(k)
            if j is not None and isinstance(ins[j], Tensor) and _same_memory(arr, ins[j]._data):
                src = ins[j]
                t._vbox = src._vbox
                t._base = src if src._base is None else src._base
            if node is not None and a.aval.dtype.differentiable and k in active:
                t._requires_grad = True
                t.grad_fn = node
                t._output_nr = k
            out.append(t)
        if node is not None:
            kept = self._saved_outs.get(node.diff_idx)
            if kept:
                node.out_versions = tuple((k, out[k]._vbox, out[k]._vbox[0]) for k in kept)
        return out

    def run_backward(self, inputs, saved, grads, retain_graph: bool = True, diff_idx=None):
        if diff_idx is None:
            diff_idx = self._diff_of(inputs)
        fwd, bwd, n_saved = self.train_plans(diff_idx)
        if bwd is None:
            return self._scale_loss_grads(diff_idx, saved, grads[self._loss_k[diff_idx]], retain_graph,
                                          inputs)
        g_arrays = []
        arrays = self._arrays(inputs)
        # (a data-dependent size: bound from the residuals or another gradient, once a call)
        shape = _shapes_of(lambda: arrays + list(saved) + [None if x is None else x._data for x in grads],
                           bwd.graph)
        for g, a in zip(grads, self.graph.outputs):
            if g is None:
                g_arrays.append(self.backend.array_module().zeros(shape(a), a.aval.dtype.np))
            else:
                g_arrays.append(g._data)
        try:
            res = bwd.fn(*arrays, *saved, *g_arrays)
            if len(g_arrays) > 1 and any(g is None for g in grads) and not _all_finite(res):
                res = self._without_absent(diff_idx, bwd, grads, len(arrays) + len(saved)).fn(
                    *arrays, *saved, *g_arrays)
        except Exception as exc:
            raise_kernel_error(exc)
            raise
        return [Tensor._wrap(r, self.graph.inputs[i].aval.dtype) for r, i in zip(res, diff_idx)]

    def _without_absent(self, diff_idx, bwd, grads, n_before: int):
        """The backward plan for outputs without a gradient left out, not given zeros
        (`zero_cotangents`): asked for only where the zeros gave a non-finite gradient (an
        unused output's infinite local derivative), or `bwd` where it cannot be built."""
        key = (diff_idx, tuple(g is None for g in grads))
        plan = self._absent.get(key)
        if plan is None:
            cts = list(bwd.graph.inputs[n_before:])
            part = without_cotangents(bwd.graph, cts, {v for v, g in zip(cts, grads) if g is None})
            plan = self._absent[key] = bwd if part is None else Plan(part, self.name + "_bwd_part")
        return plan

    def _scale_loss_grads(self, diff_idx, saved, g, retain_graph, inputs=()):
        """Gradients for cotangent `g` from the ones the forward computed for 1."""
        c = g._data
        unit = c.item() == 1 if c.ndim == 0 else bool(c == 1)
        out = []
        # The plan may return one buffer for several gradients, or an input's own array:
        # such a buffer is neither scaled in place nor handed over.
        roots = [id(root_array(a)) for a in saved]
        shared = {r for r in roots if roots.count(r) > 1}
        shared.update(id(root_array(x._data)) for x in inputs if isinstance(x, Tensor))
        for a, i, root in zip(saved, diff_idx, roots):
            own = root not in shared
            if unit:
                # Handed over when this is the last backward (the grad may then take the
                # memory); a retained graph keeps its own copy for the next one.
                r = a.copy() if retain_graph or not own else a
            elif retain_graph or not own:
                r = (a * c).astype(a.dtype, copy=False)
            else:
                r = a
                r *= c.astype(a.dtype)
            out.append(Tensor._wrap(r, self.graph.inputs[i].aval.dtype))
        return out

    def _diff_of(self, inputs):
        """The differentiable inputs of a call with `inputs` (as `__call__` decides them)."""
        return tuple(i for i, x in enumerate(inputs)
                     if isinstance(x, Tensor) and x._requires_grad and x.dtype.differentiable)

    # ---- the Executor interface (jit/backend.py) --------------------------------------------
    @property
    def tier(self) -> str:
        return "compiled"

    @property
    def target(self) -> str:
        """Where the plans run: "cpu" or "cuda"."""
        return self._backend

    def precompile(self, ins, grad_mode: bool) -> None:
        for plan in self.plans_for(ins, grad_mode):
            for kern, layouts, parallel in plan.all_first_variants():
                kern.get(layouts, parallel)

    def fast_training(self, diff_idx: tuple):
        """``[train]`` (backend.Executor's contract): at its first call ``train`` becomes
        the `_generated_train` function (~30% less time a loss call on swept caches)."""
        if not diff_idx or self._scalar_inputs or not self._simple_out or len(self.graph.outputs) != 1:
            return None
        if self._diff_cached is not None and self._diff_cached != diff_idx:
            return None
        cell = [None]

        def first(L):
            # (the plans are built here, at a call, not when the entry builds its hit: a
            # background compile's switch builds it on a worker thread)
            fn = self._generated_train(diff_idx)
            cell[0] = fn if fn is not None else (lambda L: self(L)[0])
            return cell[0](L)
        cell[0] = first
        return cell

    def _generated_train(self, diff_idx: tuple):
        """A generated ``train(L)``: `__call__` with gradients for `diff_idx`, unrolled for
        this program, for an entry whose leaves are its tensor inputs and whose one output
        is a new tensor."""
        g = self.graph
        n_out = len(g.outputs)
        fwd, bwd, n_saved = self.train_plans(diff_idx)
        n_in = len(g.inputs)
        draws = self._draws[diff_idx]
        n_taken = len(fwd.graph.outputs) - n_out - n_saved - len(draws)
        xs = [f"i{k}" for k in range(n_in)]
        edges = [f"((i{k}.grad_fn, i{k}._output_nr) if i{k}.grad_fn is not None else (LEAF(i{k}), 0))"
                 for k in diff_idx]
        taken = (f"[bool(t) for t in res[{n_out + n_saved + len(draws)}:]]" if n_taken else "[]")
        (d, dev), = self._out_types
        if d is None or dev is None:     # (the tensor is made before its array: both known)
            return None
        # The node and output tensor are built before the kernels run, while the guard's
        # reads are still in cache
        lines = ["def train(L):",
                 f"    {', '.join(xs)}, = L",
                 f"    node = NODE(PROG, [{', '.join(xs)}], None, DIFF, AVALS, ({', '.join(edges)},), "
                 f"[{', '.join(x + '._vbox[0]' for x in xs)}])",
                 "    node.take = TAKE",
                 "    node.shells = SHELLS()",
                 "    t = WRAP(None, OD, OV)"]
        if d.differentiable and 0 in self._active_outputs(diff_idx):
            lines += ["    t._requires_grad = True", "    t.grad_fn = node", "    t._output_nr = 0"]
        if self._saved_outs.get(diff_idx):   # (the backward reads the output's memory)
            lines.append("    node.out_versions = ((0, t._vbox, t._vbox[0]),)")
        copies = "".join(f", i{i}._data.copy()" for i in self._copied.get(diff_idx, ()))   # (copy_inputs)
        lines += [f"    res = FWD({', '.join(x + '._data' for x in xs)})",
                  f"    node.saved = [*res[{n_out}:{n_out + n_saved}]{copies}]" if copies else
                  f"    node.saved = res[{n_out}:{n_out + n_saved}]",
                  f"    node.taken = {taken}",
                  *([f"    node.draws = (DRAWS, res[{n_out + n_saved}:{n_out + n_saved + len(draws)}])"] if draws else []),
                  "    t._data = res[0]",
                  "    return t"]
        names = {"FWD": fwd.fn, "NODE": CompiledNode, "PROG": self, "DIFF": diff_idx, "DRAWS": draws,
                 "AVALS": self._out_avals, "LEAF": leaf_node, "WRAP": Tensor._wrap, "OD": d, "OV": dev,
                 "TAKE": self.taker(diff_idx), "SHELLS": self.taker(diff_idx).shells}
        src = "\n".join(lines) + "\n"
        fname = f"<tracejit-train-{self.name}-{id(self):x}>"
        _exec_generated(src, fname, names)
        self._diff_cached = diff_idx
        return names["train"]

    def fast_inference(self):
        if self._scalar_inputs or not self._simple_out or len(self.graph.outputs) != 1:
            return None
        (dtype, device), = self._out_types
        return self.infer_plan().fn, dtype, device

    # ---- introspection ------------------------------------------------------------------
    def explain_sections(self):
        secs = [("fusion groups (inference)", self.infer_plan().describe())]
        for diff_idx, (fwd, bwd, n_saved) in self._train.items():
            saved_bytes = sum(_nbytes(v) for v in fwd.graph.outputs[len(self.graph.outputs):])
            if bwd is None:
                secs.append(("fusion groups (training forward, with the loss's gradients)", fwd.describe()))
                secs.append(("saved for backward", f"the {n_saved} gradients for a cotangent of 1, "
                                                    f"{saved_bytes} bytes (backward scales them)"))
                continue
            secs.append(("fusion groups (training forward)", fwd.describe()))
            secs.append(("fusion groups (backward)", bwd.describe()))
            secs.append(("saved for backward", f"{n_saved} values, {saved_bytes} bytes "
                                                f"(elementwise intermediates are recomputed, not saved)"))
            secs.append(("backward graph", str(bwd.graph)))
        plan = self.infer_plan()
        secs.append(("plan", plan.source))
        srcs = plan.kernel_sources()
        for fwd, bwd, _ in self._train.values():
            srcs += fwd.kernel_sources() + (bwd.kernel_sources() if bwd is not None else [])
        secs.append(("kernels", "\n\n".join(srcs) if srcs else "(none)"))
        return secs

    def debug_values(self, ins) -> dict:
        """Every value the compiled plan computes (for check mode's divergence search)."""
        vals = {}
        arrays = self._arrays(ins)
        # Run each fused group's graph prefix: simplest faithful way is a plan per output.
        for e in self.graph.eqns:
            for o in e.outs:
                try:
                    sub = Graph(self.graph.inputs, self.graph.eqns, (o,), "probe")
                    vals[o] = Plan(sub, "probe").fn(*arrays)[0]
                except Exception:
                    pass
        return vals


InputKeeper.register(CompiledNode)
