"""Which dims and int arguments of a compiled function's next capture are symbolic.

The first captures are specialized to exact shapes; a call that differs from an entry of the
same argument structure only in some dims makes those dims symbolic from then on (as
torch.compile's automatic dynamic shapes), and an int argument that changes a runtime input.
Dims of equal size share a symbol (the guard checks they stay equal), unless an earlier entry
saw them differ: then each keeps its own.
"""
from __future__ import annotations

import weakref

from . import config
from .guards import LeafDesc, _same_value

__all__ = ["DynamicDims"]

# function -> the (argument, dim)s its compiled instances saw change: a second module of a
# class starts with them symbolic (torch.compile's automatic dynamic is per code object)
_LEARNED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class DynamicDims:
    """The dynamic-dim methods of `Capture` (they use ``_entries``, ``_dynamic``, ``_static``,
    ``_grown``, ``_dynamic_ints``...)."""

    def _mark_dynamic(self, descs, spec):
        if not self._dynamic_ok:
            return
        found: list = []
        for e in self._entries:
            # Dims are compared with every entry of the same structure, whatever else
            # changed (torch.compile's automatic dynamic: an eval batch without labels after
            # training's); ints only between calls alike but for them. (Across structures a
            # decode step's mask would go symbolic before its cache's length, alone: static.)
            if e.arg_spec != spec:
                continue
            diffs, ints, ok = [], [], True
            for k, (o, n) in enumerate(zip(e.descs, descs)):
                if (o.kind == n.kind == "const" and type(o.value) is int and type(n.value) is int
                        and o.value != n.value and n.name not in self._static_ints):
                    ints.append(k)   # (torch.compile's automatic dynamic for ints)
                elif o.kind != n.kind or (o.kind == "tensor" and (o.dtype is not n.dtype or o.value is not n.value or o.device != n.device
                                                                  or len(o.shape) != len(n.shape)
                                                                  or o.requires_grad != n.requires_grad)):
                    ok = False
                    if o.kind == n.kind == "tensor" and len(o.shape) == len(n.shape):
                        diffs += _changed_dims(o, n, self._static, self._grown)
                elif o.kind == "const" and not (o.value is n.value or _same_value(o.value, n.value)):
                    ok = False
                elif o.kind == "tensor":
                    diffs += _changed_dims(o, n, self._static, self._grown)
            found += [d for d in diffs if d not in found]
            if ok and ints:
                # An int argument that changes (a step count, a length used in arithmetic)
                # becomes a runtime input: code that needs its value still gets it, guarded.
                for k in ints:
                    self._dynamic_ints.add(descs[k].name)
                    descs[k] = LeafDesc("scalar", descs[k].name, value=int)
                config.topic("recompiles").info("%s: making ints runtime inputs: %s", self.__name__,
                                                [descs[k].name for k in ints])
                break
        if found:
            self._dynamic.update(found)
            _LEARNED.setdefault(self._fn, set()).update(found)
            config.topic("recompiles").info("%s: making dims dynamic: %s", self.__name__, found)

    def _ints_that_changed(self, descs, leaves) -> None:
        """Int runtime inputs (``@script``'s) that an entry specialized to a value it no longer
        has: as an int argument that changes under ``trace``, they may be sizes from now on."""
        if not self._dynamic_ok:
            return
        for e in self._entries:
            for d in e.decisions:
                k = d.expr[1] if d.kind == "value" and d.expr[0] == "in" else None
                if (k is not None and k < len(descs) and descs[k].kind == "scalar"
                        and type(leaves[k]) is int and leaves[k] != d.expected):
                    self._dynamic_ints.add(descs[k].name)

    def _symbolic_descs(self, descs, allow_symbols: bool = True, spec=None):
        """Replace dynamic dims by symbols; equal sizes share a symbol (checked by the guard)
        where every earlier entry of this argument structure had them equal too: dims equal
        by chance at first (``pad_sequence``'s lengths) then keep their own symbols."""
        seen = [e.descs for e in self._entries if e.arg_spec == spec and len(e.descs) == len(descs)
                and all(o.kind == n.kind and len(o.shape) == len(n.shape) for o, n in zip(e.descs, descs))]
        by_size: dict = {}
        out = []
        for i, d in enumerate(descs):
            if d.kind != "tensor":
                out.append(d)
                continue
            shape = []
            for j, s in enumerate(d.shape):
                if (allow_symbols and s >= 2 and (d.name, j) not in self._static
                        and ((d.name, j) in self._dynamic or self._force_dynamic)):
                    key = (s, *(old[i].shape[j] for old in seen))
                    shape.append(by_size.setdefault(key, f"s{len(by_size)}"))
                else:
                    shape.append(s)
            out.append(LeafDesc("tensor", d.name, d.dtype, d.device, d.requires_grad, tuple(shape), d.value))
        return out


def _changed_dims(o: LeafDesc, n: LeafDesc, static: dict, grown: set) -> list:
    """(name, dim) of the static dims of `o` that `n` has another size in (not 0 or 1); also into `grown` if 1 in `o`."""
    dims = [(n.name, j) for j, (a, b) in enumerate(zip(o.shape, n.shape))
            if isinstance(a, int) and a != b and b not in (0, 1) and (n.name, j) not in static]
    grown.update(d for d in dims if o.shape[d[1]] == 1)
    return dims

