"""Flatten nested tuples/lists/dicts of leaves and rebuild them (for arguments and results)."""
from __future__ import annotations

__all__ = ["flatten", "unflatten", "LEAF"]

LEAF = None  # the spec of a leaf


def flatten(x, leaves=None):
    """-> (leaves, spec). Tuples, lists and dicts (sorted by insertion) are containers."""
    if leaves is None:
        leaves = []
    t = type(x)
    if t is tuple or t is list:
        specs = tuple(flatten(v, leaves)[1] for v in x)
        return leaves, (t, specs)
    if t is dict:
        keys = tuple(x.keys())
        specs = tuple(flatten(x[k], leaves)[1] for k in keys)
        # The key types are part of the structure: {1: a} and {1.0: a} are equal dicts
        # (1 == 1.0) but not the same call (a key may be used as a value: its dtype).
        return leaves, (dict, keys, specs, tuple(type(k) for k in keys))
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # namedtuple
        specs = tuple(flatten(v, leaves)[1] for v in x)
        return leaves, (t, specs)
    leaves.append(x)
    return leaves, LEAF


def unflatten(spec, leaves):
    it = iter(leaves)
    return _build(spec, it)


def _build(spec, it):
    if spec is LEAF:
        return next(it)
    kind = spec[0]
    if kind is dict:
        return {k: _build(s, it) for k, s in zip(spec[1], spec[2])}
    vals = [_build(s, it) for s in spec[1]]
    if kind is tuple or kind is list:
        return kind(vals)
    if hasattr(kind, "_fields"):
        return kind(*vals)
    return kind(vals)
