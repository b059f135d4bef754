"""jit/sourcelines.py: a function's source found from its code object (no tokenizer), the
same definition `inspect.getblock` finds, and its fallback to it."""
from __future__ import annotations

import ast
import inspect
import linecache
import textwrap

import pytest

from tracejit.jit import sourcelines


def _decorate(f):
    return f


@_decorate
def _decorated(x):
    return x + 1


def _ends_in_nested_code(x):
    def inner(y):
        return y * 2
    return [inner(v) for v in (x, x)] + list(map(lambda z: (z +
                                                       1), (x,)))


def _ends_in_pass_and_comment(x):
    if x:
        y = 1
    else:
        pass
    # a trailing comment


def _multi_line_tail(x):
    return (x
            + 1
            + 2)


class _Holder:
    def method(self, x):
        """A docstring
over lines with less indentation."""
        s = """
text at column 0
"""
        return x, s


CASES = [_decorated, _ends_in_nested_code, _ends_in_pass_and_comment, _multi_line_tail]


def _tree(src: str) -> str:
    return ast.dump(ast.parse(textwrap.dedent(src)))


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_block_is_the_definition_getblock_finds(fn, monkeypatch):
    code = fn.__code__
    lines = linecache.getlines(code.co_filename)
    expected = "".join(inspect.getblock(lines[code.co_firstlineno - 1:]))
    # Without the tokenizer: getblock is not called for these (all end on code).
    monkeypatch.setattr(inspect, "getblock", lambda *a: pytest.fail("used the tokenizer"))
    got = sourcelines.block(code, lines)
    assert _tree(got) == _tree(expected)
    assert got.splitlines()[0] == lines[code.co_firstlineno - 1].rstrip("\n")


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_block_tree_is_the_block_parsed_at_the_file_s_line_numbers(fn):
    code = fn.__code__
    lines = linecache.getlines(code.co_filename)
    src, tree = sourcelines.block_tree(code, lines)
    assert src == sourcelines.block(code, lines)
    expected = ast.parse(textwrap.dedent(src))
    ast.increment_lineno(expected, code.co_firstlineno - 1)
    assert ast.dump(tree, include_attributes=True) == ast.dump(expected, include_attributes=True)
    assert min(n.lineno for n in ast.walk(tree) if hasattr(n, "lineno")) == code.co_firstlineno


def test_a_block_that_does_not_dedent_has_no_tree():
    code = _Holder.method.__code__
    assert sourcelines.block_tree(code, linecache.getlines(code.co_filename))[1] is None


def test_a_block_that_does_not_dedent_gives_getblock_s_lines():
    # Lines at column 0 inside strings: no common indent, so the cut block does not parse
    # on its own; the answer is getblock's, whatever script.py makes of it (as before).
    code = _Holder.method.__code__
    lines = linecache.getlines(code.co_filename)
    assert sourcelines.block(code, lines) == "".join(inspect.getblock(lines[code.co_firstlineno - 1:]))


def test_last_line_covers_nested_code_and_multi_line_statements():
    code = _ends_in_nested_code.__code__
    lines = linecache.getlines(code.co_filename)
    last = sourcelines.last_line(code)
    assert lines[last - 1].strip() == "1), (x,)))"
    assert lines[sourcelines.last_line(_multi_line_tail.__code__) - 1].strip() == "+ 2)"


def test_a_block_cut_short_falls_back_to_getblock(monkeypatch):
    # As if the last lines compiled to no instruction: the cut source does not parse as
    # one definition, so the tokenizer's answer is taken.
    code = _ends_in_pass_and_comment.__code__
    lines = linecache.getlines(code.co_filename)
    monkeypatch.setattr(sourcelines, "last_line", lambda c: c.co_firstlineno + 3)
    got = sourcelines.block(code, lines)
    assert _tree(got) == _tree("".join(inspect.getblock(lines[code.co_firstlineno - 1:])))
    assert "pass" in got
