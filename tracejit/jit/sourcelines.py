"""A function's source lines found from its code object, without the tokenizer.

`inspect.getblock` finds where a function's source ends by running Python's tokenizer
over the lines after its first; the tokenizer's first use in a process compiles its
regular expressions (4-8 ms), which a script function's first call (script.py's
conversion, part of the capture) paid every time. The code object already says where
the function ends: the last line any of its instructions (or of the code objects nested
in it: inner functions, lambdas, comprehensions) comes from. `block` takes the lines
from the first (decorators included, as `co_firstlineno` counts them) to that one and
keeps them only when they parse as one definition; anything else (a block whose last
lines compile to no instruction and leave it cut short) goes to `inspect.getblock` as
before.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import types
from typing import Optional

__all__ = ["last_line", "block", "block_tree"]


def last_line(code: types.CodeType) -> int:
    """The last source line `code` or any code object nested in it was compiled from."""
    last = code.co_firstlineno
    todo = [code]
    while todo:
        c = todo.pop()
        if hasattr(c, "co_positions"):   # Python 3.11+: each instruction's end line
            lines = [end if end is not None else start for start, end, _, _ in c.co_positions()]
        else:   # 3.10: start lines only (a cut multi-line statement fails the parse check)
            lines = [line for _, _, line in c.co_lines()]
        last = max([last] + [line for line in lines if line is not None])
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return last


def _definition_tree(src: str, first: int = 1) -> Optional[ast.Module]:
    """The parsed (dedented) `src` when it is one function definition, else None. Its
    lines are numbered from `first` (blank lines ahead of it: no second walk over the tree
    as `ast.increment_lineno` would make)."""
    try:
        tree = ast.parse("\n" * (first - 1) + textwrap.dedent(src))
    except (SyntaxError, ValueError):
        return None
    if len(tree.body) == 1 and isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return tree
    return None


def block_tree(code: types.CodeType, lines: list) -> tuple:
    """(`block`'s source, its parsed dedented text numbered as in the file, or None): the
    check that the lines are one definition parses them already, and script.py would
    parse them again."""
    first = code.co_firstlineno
    src: Optional[str] = "".join(lines[first - 1:last_line(code)])
    tree = _definition_tree(src, first) if src else None
    if tree is not None:
        return src, tree
    return "".join(inspect.getblock(lines[first - 1:])), None


def block(code: types.CodeType, lines: list) -> str:
    """The source of the function compiled to `code`, from its file's `lines` (its first
    line is ``lines[code.co_firstlineno - 1]``)."""
    return block_tree(code, lines)[0]
