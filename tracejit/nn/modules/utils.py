"""``tracejit.nn.modules.utils``: the argument helpers layers use (``_pair(3) == (3, 3)``)
and ``consume_prefix_in_state_dict_if_present`` (a DataParallel checkpoint's ``module.``)."""
from __future__ import annotations

import collections.abc
from itertools import repeat

__all__ = ["_single", "_pair", "_triple", "_quadruple", "_ntuple", "consume_prefix_in_state_dict_if_present"]


def _ntuple(n: int, name: str = "parse"):
    def parse(x):
        if isinstance(x, collections.abc.Iterable) and not isinstance(x, str):
            return tuple(x)
        return tuple(repeat(x, n))
    parse.__name__ = name
    return parse


_single = _ntuple(1, "_single")
_pair = _ntuple(2, "_pair")
_triple = _ntuple(3, "_triple")
_quadruple = _ntuple(4, "_quadruple")


def consume_prefix_in_state_dict_if_present(state_dict: dict, prefix: str) -> None:
    """Strip `prefix` from the keys of `state_dict` (and of its ``_metadata``) in place,
    where they have it, keeping their order."""
    if not isinstance(prefix, str):
        raise TypeError(f"consume_prefix_in_state_dict_if_present: prefix must be a str, got {type(prefix).__name__}")
    for key in list(state_dict):
        if key.startswith(prefix):
            state_dict[key[len(prefix):]] = state_dict.pop(key)
    meta = getattr(state_dict, "_metadata", None)
    for key in list(meta or ()):
        # '' is the wrapper's own entry; 'module' (the prefix without its dot) the model's
        if key and (key == prefix.replace(".", "") or key.startswith(prefix)):
            meta[key[len(prefix):]] = meta.pop(key)
