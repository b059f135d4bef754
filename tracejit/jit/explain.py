"""``tracejit.explain``: what a compiled function does for given inputs, as readable text."""
from __future__ import annotations

from . import config
from .function import compiled_function_of

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

    __repr__ = __str__   # (IPython and notebooks print the repr)


def explain(fn, *args, **kwargs) -> Explanation:
    """Call `fn` (a compiled function or module) with these arguments and describe the
    entry that ran: guards, tier, graphs, and the backend's sections (fusion, kernels);
    ``entries`` lists every entry of `fn` with its tier (this one marked ``*``)."""
    fn = compiled_function_of(fn)
    if fn is None:
        raise TypeError("explain expects a function decorated with @tracejit.script/@tracejit.trace")
    before = fn.cache_stats()["compiles"]
    fn(*args, **kwargs)
    stats = fn.cache_stats()
    reasons = stats["recompile_reasons"]
    entry = fn.entry_for(*args, **kwargs)
    if entry is None:
        why = stats.get("fallback_reason") or "; ".join(reasons[-3:]) or (
            "eager mode is on (tracejit.eager() or eager=True)" if fn._eager or config.is_eager()
            else "no entry serves these arguments")
        return Explanation([("status", "the call ran eagerly (no compiled entry): " + why)])
    secs = [("status", f"{fn.__name__}: {'captured now' if stats['compiles'] > before else 'cache hit'}; "
                       f"{stats['entries']} entries, {stats['compiles']} compiles, {stats['hits']} hits")]
    guard_lines = [d.text() for d in entry.descs] + [d.text() for d in entry.const_descs]
    guard_lines.append(f"grad mode is {'on' if entry.grad_mode else 'off'}")
    names = [d.name for d in entry.descs]
    guard_lines += [d.text(names) for d in entry.decisions]
    extra = entry.extra
    if extra is not None and hasattr(extra, "text"):
        guard_lines.append(extra.text())
    secs.append(("guards", "\n".join(guard_lines)))
    backend = entry.origin.explain_sections()   # (a background compile's: once it planned)
    secs.append(("tier", entry.origin.describe()))
    secs.append(("entries", _entries(fn, entry)))
    secs.append(("graph", str(entry.graph)))
    secs.append(("optimized graph", str(entry.opt_graph)))
    secs.extend(backend)
    if reasons:
        secs.append(("recompile reasons", "\n".join(reasons)))
    return Explanation(secs)


def _entries(fn, this) -> str:
    """One line per entry of `fn`: its signature, grad mode and tier (`this` is marked)."""
    lines = []
    for k, e in enumerate(fn.entries):
        sig = ", ".join(d.text() for d in e.descs if d.kind == "tensor") or "no tensors"
        mark = "*" if e is this else " "
        lines.append(f"{mark}{k}: ({sig}), grad {'on' if e.grad_mode else 'off'}: "
                     f"{e.origin.describe()}")
    return "\n".join(lines)
