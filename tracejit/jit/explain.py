"""``tracejit.explain``: what a compiled function does for given inputs, as readable text."""
from __future__ import annotations

__all__ = ["explain", "Explanation"]


class Explanation:
    """Sections of text; ``print(ex)`` shows them all, and notebooks render it as text."""

    def __init__(self, sections: list):
        self.sections = sections  # [(title, text)]

    def __getitem__(self, title: str) -> str:
        for t, body in self.sections:
            if t == title:
                return body
        raise KeyError(title)

    def __str__(self) -> str:
        return "\n\n".join(f"== {t} ==\n{b}" for t, b in self.sections)

    __repr__ = __str__

    def _repr_pretty_(self, p, cycle):  # IPython
        p.text(str(self))


def explain(fn, *args, **kwargs) -> Explanation:
    from .function import CompiledFunction
    if not isinstance(fn, CompiledFunction):
        fn = getattr(fn, "_tracejit_compiled", None) or fn
        if not isinstance(fn, CompiledFunction):
            raise TypeError("explain expects a function decorated with @tracejit.script/@tracejit.trace")
    before = fn._stats["compiles"]
    from ..autograd import grad_mode
    fn(*args, **kwargs)
    gm = grad_mode.is_grad_enabled()
    entry = None
    bound = fn._bind(args, kwargs) if (kwargs or not fn._simple or len(args) != fn._nparams) else args
    from .pytree import flatten
    leaves, spec = flatten(list(bound))
    for e in fn._entries:
        if e.arg_spec == spec and e.guard(leaves, e.const_tensors, gm):
            entry = e
            break
    if entry is None:
        return Explanation([("status", "the call ran eagerly (no compiled entry): "
                             + "; ".join(fn._stats["recompile_reasons"][-3:]))])
    secs = [("status", f"{fn.__name__}: {'captured now' if fn._stats['compiles'] > before else 'cache hit'}; "
                       f"{len(fn._entries)} entries, {fn._stats['compiles']} compiles, {fn.cache_stats()['hits']} hits")]
    guard_lines = [d.text() for d in entry.descs] + [d.text() for d in entry.const_descs]
    guard_lines.append(f"grad mode is {'on' if entry.grad_mode else 'off'}")
    names = [d.name for d in entry.descs]
    guard_lines += [d.text(names) for d in getattr(entry, "decisions", ())]
    extra = getattr(entry, "extra", None)
    if extra is not None and hasattr(extra, "text"):
        guard_lines.append(extra.text())
    secs.append(("guards", "\n".join(guard_lines)))
    from ..compiler.tiers import describe_tier
    secs.append(("tier", describe_tier(entry.executor)))
    secs.append(("graph", str(entry.graph)))
    secs.append(("optimized graph", str(entry.opt_graph)))
    extra = getattr(entry.executor, "explain_sections", None)
    if extra is not None:
        secs.extend(extra())
    if fn._stats["recompile_reasons"]:
        secs.append(("recompile reasons", "\n".join(fn._stats["recompile_reasons"])))
    return Explanation(secs)
