"""Flatten nested tuples/lists/dicts of leaves and rebuild them (for arguments and results).

A function's results may also be dataclasses and dict subclasses (transformers'
``ModelOutput``, an ``OrderedDict`` dataclass): ``flatten(out, objects=True)`` takes their
fields as children, so a compiled call returns a new one holding its own tensors."""
from __future__ import annotations

import dataclasses

__all__ = ["flatten", "unflatten", "LEAF"]

LEAF = None  # the spec of a leaf
_MAPPING, _DATACLASS = "mapping", "dataclass"   # spec tags of results' objects


def flatten(x, leaves=None, objects: bool = False):
    """-> (leaves, spec). Tuples, lists and dicts (sorted by insertion) are containers;
    with `objects`, dict subclasses and dataclasses whose fields all go to ``__init__``."""
    if leaves is None:
        leaves = []
    t = type(x)
    if t is tuple or t is list:
        return leaves, (t, _children(x, leaves, objects))
    if t is dict:
        keys = tuple(x.keys())
        # The key types are part of the structure: {1: a} and {1.0: a} are equal dicts
        # (1 == 1.0) but not the same call (a key may be used as a value: its dtype).
        return leaves, (dict, keys, _children(x.values(), leaves, objects), tuple(type(k) for k in keys))
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # namedtuple
        specs = tuple(flatten(v, leaves, objects)[1] for v in x)
        return leaves, (t, specs)
    if objects and isinstance(x, dict):
        keys = tuple(x.keys())
        return leaves, (_MAPPING, t, keys, tuple(flatten(x[k], leaves, objects)[1] for k in keys))
    if objects and dataclasses.is_dataclass(x) and not isinstance(x, type) and \
            all(f.init for f in dataclasses.fields(x)):
        names = tuple(f.name for f in dataclasses.fields(x))
        return leaves, (_DATACLASS, t, names, tuple(flatten(getattr(x, n), leaves, objects)[1] for n in names))
    leaves.append(x)
    return leaves, LEAF


def _children(xs, leaves: list, objects: bool) -> tuple:
    """The specs of a container's items, its leaves appended without a call each (a
    compiled call's arguments are flattened on every call: a list of 10 pairs of
    tensors took 9 us)."""
    specs = []
    for v in xs:
        t = type(v)
        if t is tuple or t is list or t is dict or objects or isinstance(v, tuple):
            specs.append(flatten(v, leaves, objects)[1])
        else:
            leaves.append(v)
            specs.append(LEAF)
    return tuple(specs)


def unflatten(spec, leaves):
    return _build(spec, iter(leaves))


def _build(spec, it):
    if spec is LEAF:
        return next(it)
    kind = spec[0]
    if kind is dict:
        return {k: _build(s, it) for k, s in zip(spec[1], spec[2])}
    if kind is _MAPPING or kind is _DATACLASS:
        values = {k: _build(s, it) for k, s in zip(spec[2], spec[3])}
        if kind is _DATACLASS or dataclasses.is_dataclass(spec[1]):
            return spec[1](**values)   # (a ModelOutput: its set fields, by name)
        out = spec[1]()
        out.update(values)
        return out
    vals = [_build(s, it) for s in spec[1]]
    if kind is tuple or kind is list:
        return kind(vals)
    return kind(*vals) if hasattr(kind, "_fields") else kind(vals)
