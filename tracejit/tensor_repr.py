"""How a tensor prints: PyTorch's ``tensor([...], dtype=..., grad_fn=<...>)`` text under
the print options `tracejit.set_printoptions` sets (`PRINT`), laid out by numpy's
array printer with PyTorch's widths, number formats and elision."""
from __future__ import annotations

import numpy as np

from . import dtypes as _dt
from .device import CPU

__all__ = ["tensor_repr", "PRINT", "PRINT_PROFILES"]

# PyTorch's print profiles; `PRINT` holds the options in force (defaults.set_printoptions
# sets them)
PRINT_PROFILES = {
    "default": dict(precision=4, threshold=1000, edgeitems=3, linewidth=80),
    "short": dict(precision=2, threshold=1000, edgeitems=2, linewidth=80),
    "full": dict(precision=4, threshold=2 ** 63 - 1, edgeitems=3, linewidth=80),
}
PRINT = dict(PRINT_PROFILES["default"], sci_mode=None)


def tensor_repr(t) -> str:
    """`t` as PyTorch prints it (Tensor.__repr__)."""
    a = t._values()
    extras = []
    if a.size == 0:
        body = "[]"
        if a.shape != (0,):
            extras.append(f"size={tuple(a.shape)}")
    else:
        opts = PRINT
        # (numpy's width counts a line's final separator with its space, PyTorch's the comma)
        layout = dict(separator=", ", prefix="tensor(", threshold=opts["threshold"],
                      edgeitems=opts["edgeitems"], max_line_width=opts["linewidth"] + 1)
        p, sci = opts["precision"], opts["sci_mode"]
        if a.dtype.kind == "c":
            body = np.array2string(a, formatter={"complexfloat": _complex_format(a, p, sci)}, **layout)
        else:
            formatter = None
            if a.dtype == bool and a.all():
                # (numpy pads True to False's width even where no False is shown; PyTorch does not)
                formatter = {"bool": str}
            elif sci is not None and a.dtype.kind == "f":
                formatter = {"float_kind": _aligned(_part_format(a, p, sci), a)}
            body = np.array2string(a, precision=p, suppress_small=False, floatmode=_float_mode(a),
                                   formatter=formatter, **layout)
        body = body.replace(", ...,", ",  ...,")   # (PyTorch's elision is " ...")
    if t.device is not CPU:
        extras.append(f"device='{t.device}'")
    default = _dt.get_default_dtype()
    if a.size == 0 and t.dtype is not default or \
            t.dtype not in (default, default.to_complex(), _dt.int64, _dt.bool_):
        extras.append(f"dtype={t.dtype!r}")
    if t.grad_fn is not None:
        extras.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        extras.append("requires_grad=True")
    # Each of dtype=, grad_fn= ... follows on the last line, or on a line of its own,
    # indented under the values, where that line would pass the width (as PyTorch's)
    text = "tensor(" + body
    width = len(text) - text.rfind("\n") + 1
    for e in extras:
        if width + len(e) + 2 > PRINT["linewidth"]:
            text += ",\n" + " " * len("tensor(") + e
            width = len("tensor(") + len(e)
        else:
            text += ", " + e
            width += len(e) + 2
    return text + ")"


def _float_mode(a) -> str:
    """PyTorch's look: ``1., 2.`` for whole numbers, else 4 fixed decimals (numpy switches
    to scientific notation on the same ranges PyTorch does)."""
    if a.dtype.kind != "f":
        return "maxprec"
    finite = a[np.isfinite(a)]
    if finite.size == 0:
        return "maxprec"
    nz = np.abs(finite[finite != 0]).astype(np.float64)
    sci = nz.size > 0 and (nz.max() >= 1e8 or nz.min() < 1e-4 or nz.max() / nz.min() > 1e3)
    whole = bool(np.all(finite == np.round(finite)))
    return "maxprec" if whole and not sci else "fixed"


def _part_format(x, precision: int, sci_mode):
    """How PyTorch prints one part (real or imaginary) of complex elements: as a real
    tensor's values (``2.`` when all are whole, else `precision` decimals, or scientific;
    `sci_mode` True or False forces the choice)."""
    finite = x[np.isfinite(x)]
    nz = np.abs(finite[finite != 0]).astype(np.float64)
    sci = nz.size > 0 and (nz.max() >= 1e8 or nz.min() < 1e-4 or nz.max() / nz.min() > 1e3)
    if sci_mode or (sci and sci_mode is None):
        return f"{{:.{precision}e}}".format
    if bool(np.all(finite == np.round(finite))):
        return lambda v: f"{v:.0f}." if np.isfinite(v) else f"{v}"
    return f"{{:.{precision}f}}".format


def _aligned(fmt, a):
    """`fmt` right-justified to the widest of `a`'s nonzero finite values (numpy aligns only
    its own formats; PyTorch pads every element to that width)."""
    flat = a.reshape(-1)
    shown = flat[np.isfinite(flat) & (flat != 0)]
    width = max((len(fmt(v)) for v in shown), default=0)
    return lambda v: fmt(v).rjust(width)


def _complex_format(a, precision: int, sci_mode):
    real = _aligned(_part_format(a.real, precision, sci_mode), a.real)
    imag = _part_format(np.abs(a.imag), precision, sci_mode)
    return lambda z: real(z.real) + ("-" if np.signbit(z.imag) else "+") + imag(abs(z.imag)) + "j"
