"""Padding layers: constant, zero, reflection, replication and circular padding in one,
two and three dimensions, each ``F.pad`` with its mode and a padding tuple (an int pads
every side by it; a tuple lists (left, right[, top, bottom[, front, back]]))."""
from __future__ import annotations

from ..ops.spatial import pad
from .module import Module, layer_class

__all__ = [f"{kind}Pad{n}d" for kind in ("Constant", "Zero", "Reflection", "Replication", "Circular")
           for n in (1, 2, 3)]


class _PadNd(Module):
    _n = 1
    _mode = "constant"

    def __init__(self, padding, value: float = 0.0):
        super().__init__()
        n = self._n
        if isinstance(padding, int):
            self.padding = (padding,) * (2 * n)
        else:
            padding = tuple(padding)
            if len(padding) != 2 * n:
                raise ValueError(f"{type(self).__name__}: padding must be an int or a {2 * n}-tuple, "
                                 f"got {padding!r}")
            self.padding = padding
        self.value = value

    def forward(self, input):
        if self._mode == "constant":
            return pad(input, self.padding, "constant", self.value)
        return pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}" + (f", value={self.value}" if self._mode == "constant" else "")


def _make(kind: str, mode: str, n: int):
    if kind == "Constant":
        def __init__(self, padding, value: float):
            _PadNd.__init__(self, padding, value)
    elif kind == "Zero":
        def __init__(self, padding):
            _PadNd.__init__(self, padding, 0.0)
    else:
        def __init__(self, padding):
            _PadNd.__init__(self, padding)
    return layer_class(f"{kind}Pad{n}d", _PadNd, _n=n, _mode=mode, __init__=__init__,
                       __doc__=f"{mode.capitalize()} padding of the last {n} dim(s).")


for _kind, _mode in (("Constant", "constant"), ("Zero", "constant"), ("Reflection", "reflect"),
                     ("Replication", "replicate"), ("Circular", "circular")):
    for _n in (1, 2, 3):
        globals()[f"{_kind}Pad{_n}d"] = _make(_kind, _mode, _n)
del _kind, _mode, _n
