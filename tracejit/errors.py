"""Exception types users can catch, and the helper that points errors at user code.

Every class derives from the builtin a PyTorch user would expect (shape problems are
RuntimeErrors there, and ValueErrors in numpy; we are both).
"""
from __future__ import annotations

import itertools
import linecache
import os
import sys
import weakref

__all__ = ["TracejitError", "ShapeError", "DeviceMismatchError", "DTypeError", "UnsupportedDTypeError", "IndexRangeError",
           "ArgumentError", "ValueRangeError", "GraphFreedError",
           "InplaceModifiedError", "TraceError", "ScriptError", "CompileError", "CheckMismatchError",
           "SerializationError", "OutOfMemoryError", "IntegerDivisionByZero", "user_frame"]


class TracejitError(RuntimeError):
    """Base class of tracejit's own errors."""


class ShapeError(TracejitError, ValueError):
    """Operands have incompatible shapes."""


class DeviceMismatchError(TracejitError):
    """Operands live on different devices."""


class DTypeError(TracejitError, TypeError):
    """An operand has a dtype the op cannot take."""


class UnsupportedDTypeError(DTypeError, NotImplementedError):
    """The op has no implementation for an operand's dtype (integer logits to
    cross_entropy): a NotImplementedError in PyTorch ("... not implemented for 'Long'")."""


def expect_floating(op: str, name: str, t, also: frozenset = frozenset()) -> None:
    """Raise UnsupportedDTypeError naming argument `name` of `op` unless tensor `t` is
    floating point, complex or of a dtype in `also`: the float-only ops would otherwise
    compute on integers. Anything without a dtype passes (a Python number)."""
    dt = getattr(t, "dtype", None)
    if dt is not None and not (dt.is_floating_point or dt.is_complex or dt in also):
        raise UnsupportedDTypeError(f"{op}: expected {name} to be a floating point tensor, got "
                                    f"{dt.name}; cast it with {name}.float()")


def expect_not_bool(op: str, name: str, t) -> None:
    """Raise UnsupportedDTypeError naming argument `name` of `op` where tensor `t` is bool:
    ops PyTorch computes on numbers of every dtype but bool (relu, floor, abs, hardtanh)."""
    dt = getattr(t, "dtype", None)
    if dt is not None and dt.is_bool:
        raise UnsupportedDTypeError(f"{op}: {name} of dtype bool is not supported; cast it with "
                                    f"{name}.int() or {name}.float()")


def no_bool_kernel(op: str):
    """An ``extra["operands"]`` check for `op`: raise UnsupportedDTypeError where every
    operand (tensor or number) is bool, as PyTorch has no bool kernel for it."""
    def check(operands) -> None:
        if all(a.dtype.is_bool for a in operands):
            raise UnsupportedDTypeError(f"{op}: not implemented for bool operands; cast them with .int()")
    return check


def refuse_bool_subtraction(operands) -> None:
    """Raise DTypeError where an operand (tensor or aval) of a subtraction is bool (a bool
    number too), as PyTorch."""
    n = sum(a.dtype.is_bool for a in operands)
    if n:
        raise DTypeError("Subtraction, the `-` operator, with " + (
            "two bool tensors is not supported. Use the `^` or `logical_xor()` operator instead." if n > 1 else
            "a bool tensor is not supported. If you are trying to invert a mask, use the `~` or "
            "`logical_not()` operator instead."))


def expect_same_dtype(op: str, a, b, name: str = "source") -> None:
    """Raise DTypeError where tensor `b` (argument `name` of `op`) has another dtype than
    `a`, the tensor it is written into (index_add, scatter): PyTorch refuses to cast it."""
    if getattr(b, "dtype", a.dtype) is not a.dtype:
        raise DTypeError(f"{op}: self ({a.dtype.name}) and {name} ({b.dtype.name}) must have the same dtype; "
                         f"cast it with {name}.to(self.dtype)")


class IntegerDivisionByZero(TracejitError, ZeroDivisionError):
    """Integer ``//``, ``%`` or ``fmod`` by zero: PyTorch's RuntimeError, Python's ZeroDivisionError."""


class IndexRangeError(TracejitError, IndexError):
    """An index tensor holds an entry outside the dim it indexes (PyTorch raises an
    IndexError for some ops and a RuntimeError for others, such as gather: this is both)."""


def numpy_index_error(op: str, exc: IndexError) -> IndexRangeError:
    """numpy's IndexError `exc` for an index past a dim's end, as op `op`'s IndexRangeError
    in PyTorch's words (``index 5 is out of bounds for dimension 0 with size 3``)."""
    return IndexRangeError(f"{op}: " + str(exc).replace(" for axis ", " for dimension "))


class ArgumentError(TracejitError, ValueError):
    """An argument's value is outside what the op accepts (a zero stride, a negative
    standard deviation): a RuntimeError in PyTorch, a ValueError by Python's convention."""


class ValueRangeError(TracejitError, ValueError):
    """A tensor holds values outside what the op accepts (binary_cross_entropy's
    probabilities outside [0, 1]); a RuntimeError in PyTorch, a ValueError in numpy."""


class GraphFreedError(TracejitError):
    """backward() ran through a graph whose saved tensors were already freed."""


class InplaceModifiedError(TracejitError):
    """A tensor saved for backward was modified in place before backward ran."""


class TraceError(TracejitError):
    """Tracing met something it cannot record (e.g. control flow on a tensor value)."""


class ScriptError(TracejitError, SyntaxError):
    """@script met Python it cannot convert."""

    def __init__(self, msg: str, filename: str | None = None, lineno: int | None = None):
        TracejitError.__init__(self, msg)
        self.msg = msg
        self.filename = filename
        self.lineno = lineno

    def __str__(self) -> str:
        return self.msg


class OutOfMemoryError(TracejitError):
    """An allocation failed (``torch.OutOfMemoryError``, ``torch.cuda.OutOfMemoryError``)."""


class CompileError(TracejitError):
    """Lowering or compiling a fused group failed."""


class KernelError(TracejitError):
    """A compiled kernel raised while running; the message names its fused group and the
    user's source lines, and the kernel's own exception is the ``__cause__``."""


class CheckMismatchError(TracejitError):
    """Check mode found a compiled result that differs from eager."""


class SerializationError(TracejitError, ValueError):
    """tracejit.load was given a file it cannot read."""


class LinAlgError(TracejitError):
    """A linear-algebra routine met a matrix it cannot factor or solve with
    (``tracejit.linalg.LinAlgError``, PyTorch's ``torch.linalg.LinAlgError``)."""


_PKG_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_OURS = (_PKG_DIR, "<tracejit")   # our files, and the code we generate


def operand_error(op: str, value) -> TypeError:
    """The TypeError for an op's operand that is neither a tensor nor a number: a PyTorch
    tensor named as one (its class is also called Tensor), with how to convert it."""
    if _is_torch_tensor(value):
        return TypeError(f"{op}: expected a Tensor or a number, got a PyTorch tensor (torch.Tensor); "
                         f"{_FROM_TORCH}")
    return TypeError(f"{op}: expected a Tensor or a number, got {type(value).__name__}")


_FROM_TORCH = "tracejit.from_numpy(t.numpy()) shares its memory, tracejit.tensor(t.numpy()) copies it"


def _is_torch_tensor(value) -> bool:
    return type(value).__module__.split(".")[0] == "torch" and hasattr(value, "numpy")


def not_a_tensor(op: str, value, exc: BaseException) -> "TypeError | None":
    """The TypeError for an op or built-in layer whose input `value` is not a tensor (a
    numpy array, a nested list of numbers), or None when it is one (or a list of them). It
    replaces the error `exc` the op met further in (``'list' object has no attribute
    'ndim'``, a dtype message that names float32 twice), so it is built only after one;
    None also when `exc` is such a TypeError already (the innermost op's names it best)."""
    if getattr(exc, "not_a_tensor", False):
        return None
    if type(value).__module__ == "numpy" and hasattr(value, "shape"):
        hint = "tracejit.from_numpy(a) shares its memory, tracejit.tensor(a) copies it"
    elif isinstance(value, (list, tuple)) and value and not any(hasattr(x, "_data") for x in value):
        hint = "tracejit.tensor(...) makes one from nested lists of numbers"
    elif _is_torch_tensor(value):
        hint = _FROM_TORCH
    else:
        return None
    got = "a PyTorch tensor (torch.Tensor)" if _is_torch_tensor(value) else type(value).__name__
    err = TypeError(f"{op}: expected the input to be a Tensor, got {got}; {hint}")
    err.not_a_tensor = True
    return err


def explain_module_error(module, args: tuple, exc: BaseException) -> None:
    """A module call that raised `exc`: raises the not-a-tensor TypeError in its place
    when a built-in layer's first input is no tensor, else notes the module's path on
    `exc` for the caller to re-raise."""
    if args and type(module).__module__.startswith("tracejit."):   # a built-in layer
        err = not_a_tensor(type(module).__name__, args[0], exc)
        if err is not None:
            raise err from None
    note_module_path(module, exc)


def note_module_path(module, exc: BaseException) -> None:
    """Called by each module an exception passes through, innermost first: keeps one note
    on `exc` naming the submodule it came from by its path from the outermost module so
    far (``raised in submodule enc.fc2 (Linear) of Net``), shown under the message in
    the traceback. Only error paths pay for it."""
    try:
        chain = exc.__dict__.setdefault("_tracejit_modules", [])
    except AttributeError:   # (an exception type without a __dict__)
        return
    if chain and chain[-1] is module:
        return
    chain.append(module)
    if len(chain) < 2:
        return
    # (a module called but not registered, kept in a plain list or passed in: its type)
    names = [next((n for n, m in getattr(parent, "_modules", {}).items() if m is child),
                  f"<{type(child).__name__}>") for child, parent in zip(chain, chain[1:])]
    note = (f"raised in submodule {'.'.join(reversed(names))} ({type(chain[0]).__name__}) of "
            f"{type(chain[-1]).__name__}")
    notes = exc.__dict__.setdefault("__notes__", [])
    old = exc.__dict__.get("_tracejit_note")
    if old is not None and old in notes:
        notes[notes.index(old)] = note
    else:
        notes.append(note)
    exc._tracejit_note = note


def user_frame(skip: int = 1):
    """The innermost stack frame outside the tracejit package: "the user's line"."""
    f = sys._getframe(skip)
    while f is not None:
        if not f.f_code.co_filename.startswith(_OURS):
            return f
        f = f.f_back
    return None


def user_stacklevel() -> int:
    """The ``stacklevel`` that points `warnings.warn`, called by our caller, at the innermost
    frame outside tracejit (the user's line, however many of our frames lie between)."""
    target = user_frame(2)
    f, level = sys._getframe(1), 1
    while f is not None and f is not target:
        f, level = f.f_back, level + 1
    return level if f is not None else 1


def user_location(skip: int = 1) -> tuple[str, int] | None:
    f = user_frame(skip + 1)
    if f is None:
        return None
    return (f.f_code.co_filename, f.f_lineno)


def user_where(skip: int = 1) -> str:
    """`` at file:line`` of the user's code `skip` frames up, or "" (for a message)."""
    loc = user_location(skip + 1)
    return f" at {loc[0]}:{loc[1]}" if loc else ""


def asker_where(skip: int = 1) -> str:
    """`user_where`, preceded by ``by tracejit/ops/x.py:12 (fn)`` where the innermost frame
    `skip` up outside `shapes.py` (which asks for values on its callers' behalf) is ours."""
    f = sys._getframe(skip + 1)
    while f is not None and f.f_code.co_filename.endswith(os.sep + "shapes.py"):
        f = f.f_back
    if f is None or not f.f_code.co_filename.startswith(_PKG_DIR):
        return user_where(skip + 1)
    path = os.path.relpath(f.f_code.co_filename, os.path.dirname(_PKG_DIR[:-1]))
    return f" by {path}:{f.f_lineno} ({f.f_code.co_name}){user_where(skip + 1)}"


_SOURCE_LINES: dict = {}   # generated source's file name -> ({its line: the IR item it runs}, function)
_source_ids = itertools.count()


def generated_source_name(kind: str, name: str) -> str:
    """A unique file name for code tracejit generates (a ``<tracejit`` name: `user_frame`
    skips its frames)."""
    return f"<tracejit-{kind}-{name}-{next(_source_ids)}>"


def register_source_lines(owner, fname: str, lines: dict, name: str) -> None:
    """Remember, while `owner` lives, which IR item (an equation, or a fused group with
    ``eqns``) each line of the generated source `fname` of function `name` runs, for the
    errors raised there (`raise_at_user_line`, compiler/kernel_errors.py)."""
    _SOURCE_LINES[fname] = (lines, name)
    weakref.finalize(owner, _SOURCE_LINES.pop, fname, None)


def innermost_source_item(tb, want=lambda item: True):
    """(item, function name) of the innermost frame of traceback `tb` in generated source
    whose item passes `want`, or None."""
    found = None
    while tb is not None:
        lines, name = _SOURCE_LINES.get(tb.tb_frame.f_code.co_filename, ({}, None))
        item = lines.get(tb.tb_lineno)
        if item is not None and want(item):
            found = (item, name)
        tb = tb.tb_next
    return found


def _loc_of(item):
    return next((e.loc for e in getattr(item, "eqns", None) or (item,) if getattr(e, "loc", None)), None)


def note_user_line(exc: BaseException, loc, name: str) -> None:
    """Note on `exc` the user's line `loc` (file, line) of the equation the IR interpreter
    ran when it was raised, for `raise_at_user_line`; the innermost graph's note stays."""
    if loc:
        exc.__dict__.setdefault("_tracejit_user_line", (loc[0], loc[1], name))


def _from_generated_line(exc: BaseException) -> BaseException:
    """An IndexError numpy raised on the user's data in a line of generated code (an index
    past a symbolic dim's end, checked only when the plan runs) as our IndexRangeError
    naming the op; any other exception unchanged."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    item = tb and _SOURCE_LINES.get(tb.tb_frame.f_code.co_filename, ({},))[0].get(tb.tb_lineno)
    if type(exc) is not IndexError or getattr(item, "prim", None) is None:
        return exc
    err = numpy_index_error(item.prim.name, exc).with_traceback(exc.__traceback__)
    err.__suppress_context__ = True
    return err


def raise_at_user_line(exc: BaseException) -> None:
    """Re-raise `exc`, one of our checks failing inside a compiled program, from the line of
    the user's code its op was traced from, so the traceback's last line is the user's, not
    one of tracejit's interpreter or generated code. Returns when `exc` is no such check
    (an internal error keeps its whole traceback)."""
    if not isinstance(exc, TracejitError):
        exc = _from_generated_line(exc)
    if not isinstance(exc, TracejitError) or isinstance(exc, (KernelError, CompileError, CheckMismatchError)):
        return
    loc = exc.__dict__.get("_tracejit_user_line")
    if loc is None:
        found = innermost_source_item(exc.__traceback__, lambda item: _loc_of(item) is not None)
        if found is None:
            return
        loc = (*_loc_of(found[0])[:2], found[1])
    # One `raise` statement at the user's line, as wide as its code there: the traceback
    # shows that line without carets under part of it.
    text = linecache.getline(loc[0], loc[1])
    indent, width = len(text) - len(text.lstrip()), len(text.strip())
    head = "\n" * (loc[1] - 2) + "if 1:\n" if indent and loc[1] > 1 else "\n" * (loc[1] - 1)
    src = head + " " * (indent if head.endswith(":\n") else 0) + "raise (exc" + " " * max(0, width - 11) + ")"
    code = compile(src, loc[0], "exec").replace(co_name=loc[2])
    exec(code, {"exc": exc.with_traceback(None)})
