"""The dtypes an op takes, where PyTorch has kernels for floating point ones only.

Many ops compute fine on integers here (numpy promotes them), where PyTorch refuses them
(``F.gelu`` of an int64 tensor: "not implemented for 'Long'"); a program that runs here
would then fail there. `takes` declares, at an op's definition, which of its tensor
arguments must be floating point (or complex) and which other dtypes PyTorch also accepts
for it; one check (`errors.expect_floating`) raises `UnsupportedDTypeError` (a
RuntimeError and a NotImplementedError, as PyTorch's are one or the other), naming the op,
the argument and its dtype, before anything is computed. Traced arguments carry their dtype, so eager and compiled calls
raise alike.
"""
from __future__ import annotations

import functools
import inspect
from typing import Callable

from ..errors import expect_floating, expect_not_bool

__all__ = ["takes"]


def takes(*names: str, also: tuple = (), op: str = "", ints: bool = False) -> Callable:
    """Decorator: the arguments `names` of the op must be floating point, or of a dtype in
    `also` (``_dt.uint8``: PyTorch's nearest interpolation has a uint8 kernel); with `ints`,
    of any dtype but bool (hardtanh: "Bool inputs not supported"). A name
    ``"x:input"`` is parameter ``x``, called ``input`` in messages (PyTorch's name). A
    ``dtype=`` argument does not lift it (PyTorch's nanmean and norm refuse an integer input
    with ``dtype=torch.float32`` too). Primitives refuse bool in their rule instead
    (elementwise ``_unary(..., no_bool=True)``): no wrapper on their calls."""
    extra = frozenset(also)

    def deco(fn: Callable) -> Callable:
        params = list(inspect.signature(fn).parameters)
        pairs = [n.split(":") if ":" in n else (n, n) for n in names]
        where = tuple((params.index(p), shown) for p, shown in pairs)
        label = op or fn.__name__

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            for i, n in where:
                t = args[i] if i < len(args) else kwargs.get(params[i])
                dt = getattr(t, "dtype", None)   # (tested here: a call only to raise)
                if dt is None or dt.is_floating_point or dt.is_complex or dt in extra:
                    continue
                if ints:
                    expect_not_bool(label, n, t)
                else:
                    expect_floating(label, n, t, extra)
            return fn(*args, **kwargs)
        return checked
    return deco
