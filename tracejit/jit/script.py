"""``@script``: rewrite a function's control flow into calls that trace as graph ops.

The function's source is parsed and transformed before tracing:

- ``if``/``elif``/``else`` statements become ``cond`` calls on nested branch functions
  that take and return the variables the branches assign (an ``if`` whose body
  returns swallows the statements after it as its ``else``);
- conditional expressions, ``and``/``or``/``not`` become their traceable versions;
- ``while`` loops become ``while_`` calls over the loop-carried variables;
- ``for i in range(...)`` becomes ``for_range`` (unrolled when the bounds are plain
  ints, a graph loop when they are runtime scalars).

With a concrete condition each helper simply runs Python, so one rewritten function
serves every case. Line numbers are kept, so IR locations and errors point at the
user's own lines. Constructs that cannot be converted raise a `ScriptError` naming
the construct and the line.
"""
from __future__ import annotations

import ast
import functools
import inspect
import linecache
import textwrap
import types

from ..errors import ScriptError
from . import control, loops

__all__ = ["convert"]

_UNSUPPORTED = {
    ast.Try: "try/except", ast.Yield: "yield (generators)", ast.YieldFrom: "yield from",
    ast.Await: "await", ast.AsyncFunctionDef: "async def", ast.AsyncFor: "async for",
    ast.AsyncWith: "async with", ast.Global: "global", ast.Nonlocal: "nonlocal",
    ast.ClassDef: "class definitions", ast.Match: "match statements",
}
if hasattr(ast, "TryStar"):   # Python 3.11
    _UNSUPPORTED[ast.TryStar] = "try/except*"
_UNSUPPORTED_TYPES = tuple(_UNSUPPORTED)   # (one isinstance per node: most nodes are none of them)
# What `_Rewriter` rewrites (statements and expressions of control flow) or refuses (with
# chained comparisons and `not`, `_rewritten`): a function without any is its own conversion.
_CONVERTED_TYPES = (ast.If, ast.While, ast.For, ast.IfExp, ast.BoolOp) + _UNSUPPORTED_TYPES


def _rewritten(node) -> bool:
    """Whether `_Rewriter` rewrites or refuses `node` (a chained comparison, `not`: its
    visit_Compare and visit_UnaryOp; `-1` and `a < b` stay as they are)."""
    if isinstance(node, _CONVERTED_TYPES):
        return True
    if isinstance(node, ast.Compare):
        return len(node.ops) > 1
    return isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)


class _Helpers:
    """What rewritten code calls, passed in as one object to keep the user's namespace clean."""

    cond = staticmethod(control.trace_cond)
    while_ = staticmethod(loops.trace_while)
    for_range = staticmethod(loops.trace_for_range)
    UNDEFINED = control.UNDEFINED

    @staticmethod
    def ifexp(pred, t, f):
        if not control.is_traced(pred):
            return t() if pred else f()
        return control.trace_ifexp(pred, t, f)

    @staticmethod
    def cond_return(pred, tf, ff):
        from .pytree import flatten, unflatten
        specs = {}

        def wrap(f, k):
            def g():
                leaves, spec = flatten(f())
                specs[k] = spec
                return tuple(leaves)
            return g
        out = control.trace_cond(pred, wrap(tf, 0), wrap(ff, 1), (), ())
        got = list(specs.values())
        if len(got) == 2 and got[0] != got[1]:
            raise ScriptError("the branches of an if/else return values of different structure")
        return unflatten(got[0], list(out))

    @staticmethod
    def and_(a, b):
        if control.is_traced(a):
            from ..ops import logical_and
            return logical_and(a, b())
        return a and b()

    @staticmethod
    def or_(a, b):
        if control.is_traced(a):
            from ..ops import logical_or
            return logical_or(a, b())
        return a or b()

    @staticmethod
    def compare_chain(ops, left, *rights):
        """``a < b < c``: each operand evaluated once, later ones only if needed, as Python."""
        import operator
        result = None
        for name, right_thunk in zip(ops, rights):
            right = right_thunk()
            r = getattr(operator, name)(left, right)
            if result is None:
                result = r
            elif control.is_traced(result) or control.is_traced(r):
                from ..ops import logical_and
                result = logical_and(result, r)
            else:
                result = result and r
            if not control.is_traced(result) and not result:
                return result
            left = right
        return result

    @staticmethod
    def not_(a):
        if control.is_traced(a):
            from ..ops import logical_not
            return logical_not(a)
        return not a


def _assigned(stmts) -> list:
    """Names bound by the statements (not inside nested functions)."""
    names: list = []

    def add(n):
        if n not in names and not n.startswith("__tj"):
            names.append(n)

    class V(ast.NodeVisitor):
        def visit_Name(self, node):
            if isinstance(node.ctx, ast.Store):
                add(node.id)

        def visit_FunctionDef(self, node):
            add(node.name)

        def visit_Lambda(self, node):
            pass

        def visit_ListComp(self, node):
            pass

        visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_ListComp
    for s in stmts:
        V().visit(s)
    return names


def _mutated(stmts) -> list:
    """Names whose object the statements may change in place without binding them
    (``out.append(y)``, ``d[k] = v``, ``del d[k]``), not inside nested functions."""
    names: list = []

    class V(ast.NodeVisitor):
        def visit_Call(self, node):
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id not in names:
                names.append(f.value.id)
            self.generic_visit(node)

        def visit_Subscript(self, node):
            if isinstance(node.ctx, (ast.Store, ast.Del)) and isinstance(node.value, ast.Name) \
                    and node.value.id not in names:
                names.append(node.value.id)
            self.generic_visit(node)

        def visit_FunctionDef(self, node):
            pass

        visit_Lambda = visit_ListComp = visit_SetComp = visit_DictComp = visit_FunctionDef
        visit_GeneratorExp = visit_FunctionDef
    for s in stmts:
        V().visit(s)
    return [n for n in names if not n.startswith("__tj")]


def _always_returns(stmts) -> bool:
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, ast.Return):
        return True
    if isinstance(last, ast.If):
        return _always_returns(last.body) and _always_returns(last.orelse)
    return False


def _contains(stmts, kinds) -> bool:
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, kinds):
                return True
    return False


def _contains_shallow(stmts, kinds) -> bool:
    """Like _contains but not looking into nested functions or loops (for break/continue)."""
    found = [False]

    class V(ast.NodeVisitor):
        def generic_visit(self, node):
            if isinstance(node, kinds):
                found[0] = True
            if isinstance(node, (ast.FunctionDef, ast.Lambda, ast.While, ast.For)):
                return
            super().generic_visit(node)
    for s in stmts:
        V().generic_visit(s) if not isinstance(s, kinds) else found.__setitem__(0, True)
    return found[0]


def _attribute_store(stmts):
    """The first ``obj.attr = ...`` in the statements (outside nested functions), or None."""
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                return n
    return None


class _Rewriter(ast.NodeTransformer):
    def __init__(self, filename: str):
        self.n = 0
        self.filename = filename

    def _fresh(self, kind: str) -> str:
        self.n += 1
        return f"__tj_{kind}_{self.n}"

    def _err(self, node, what):
        raise ScriptError(f"@script cannot convert {what} at {self.filename}:{node.lineno}",
                          self.filename, node.lineno)

    def generic_visit(self, node):
        if isinstance(node, _UNSUPPORTED_TYPES):
            self._err(node, next(what for k, what in _UNSUPPORTED.items() if isinstance(node, k)))
        return super().generic_visit(node)

    # -- statement lists ------------------------------------------------------------
    def _block(self, stmts):
        stmts = list(stmts)
        # `if c: ...return` followed by more code: the rest is the else branch.
        for i, s in enumerate(stmts):
            if isinstance(s, ast.If) and not s.orelse and _always_returns(s.body) and i + 1 < len(stmts):
                s.orelse = stmts[i + 1:]
                stmts = stmts[:i + 1]
                break
        out = []
        for s in stmts:
            r = self.visit(s)
            if isinstance(r, list):
                out.extend(r)
            elif r is not None:
                out.append(r)
        return out

    def visit_FunctionDef(self, node):
        node.body = self._block(node.body)
        return node

    # -- if ---------------------------------------------------------------------------------
    def visit_If(self, node):
        test = self.visit(node.test)
        body_returns = _always_returns(node.body)
        else_returns = _always_returns(node.orelse)
        if body_returns and else_returns:
            tf, ff = self._fresh("true"), self._fresh("false")
            defs = [self._def(tf, [], self._block(node.body), node),
                    self._def(ff, [], self._block(node.orelse), node)]
            call = self._call("cond_return", [test, ast.Name(tf, ast.Load()), ast.Name(ff, ast.Load())])
            return defs + [ast.copy_location(ast.Return(call), node)]
        if _contains(node.body + node.orelse, (ast.Return,)):
            self._err(node, "a `return` inside only some paths of an if/else (make both branches "
                            "return, or assign a variable and return once)")
        if _contains_shallow(node.body + node.orelse, (ast.Break, ast.Continue)):
            node.test = test
            node.body = self._block(node.body)
            node.orelse = self._block(node.orelse)
            return node  # inside a Python loop: keep it Python
        names = _assigned(node.body + node.orelse)
        tf, ff = self._fresh("true"), self._fresh("false")
        ret = ast.Return(self._tuple(names))
        effect = _attribute_store(node.body + node.orelse)
        defs = [self._def(tf, names, self._block(node.body) + [ret], node),
                self._def(ff, names, self._block(node.orelse) + [ret], node)]
        call = self._call("cond", [test, ast.Name(tf, ast.Load()), ast.Name(ff, ast.Load()),
                                   self._current(names), self._strs(names)])
        if effect is not None:
            what = f"assigning `{ast.unparse(effect)}` at {self.filename}:{effect.lineno}"
            call.keywords = [ast.keyword("effect", ast.Constant(what))]
        return defs + [self._assign(names, call, node)]

    # -- loops --------------------------------------------------------------------------
    def visit_While(self, node):
        if node.orelse or _contains_shallow(node.body, (ast.Break, ast.Continue)) or \
                _contains(node.body, (ast.Return,)):
            node.test = self.visit(node.test)
            node.body = self._block(node.body)
            return node  # stays Python: fine for conditions that don't depend on tensors
        names = _assigned(node.body)
        cf, bf = self._fresh("wcond"), self._fresh("wbody")
        defs = [self._def(cf, names, [ast.Return(self.visit(node.test))], node),
                self._def(bf, names, self._block(node.body) + [ast.Return(self._tuple(names))], node)]
        touched = [n for n in _mutated(node.body) if n not in names]   # (as in visit_For)
        call = self._call("while_", [ast.Name(cf, ast.Load()), ast.Name(bf, ast.Load()),
                                     self._current(names), self._strs(names), self._touched(touched)])
        return defs + [self._assign(names, call, node)]

    def visit_For(self, node):
        it = node.iter
        simple = (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                  and not it.keywords and isinstance(node.target, ast.Name) and not node.orelse
                  and not _contains_shallow(node.body, (ast.Break, ast.Continue))
                  and not _contains(node.body, (ast.Return,)))
        if not simple:
            node.iter = self.visit(node.iter)
            node.body = self._block(node.body)
            return node  # iteration over Python containers: unrolled while tracing
        names = [n for n in _assigned(node.body) if n != node.target.id]
        bf = self._fresh("fbody")
        defs = [self._def(bf, [node.target.id] + names,
                          self._block(node.body) + [ast.Return(self._tuple(names))], node)]
        args = ast.Tuple([self.visit(a) for a in it.args], ast.Load())
        # (what the body changes in place, a Python list it appends to: for_range runs the
        # loop in Python then, as a graph loop's body, traced once, cannot fill it)
        touched = [n for n in _mutated(node.body) if n not in names and n != node.target.id]
        call = self._call("for_range", [args, ast.Name(bf, ast.Load()), self._current(names),
                                        self._strs(names), self._touched(touched)])
        return defs + [self._assign(names, call, node)]

    # -- expressions ----------------------------------------------------------------------------
    def visit_IfExp(self, node):
        node = self.generic_visit(node)
        call = self._call("ifexp", [node.test, _thunk(node.body), _thunk(node.orelse)])
        return ast.copy_location(call, node)

    def visit_BoolOp(self, node):
        node = self.generic_visit(node)
        fn = "and_" if isinstance(node.op, ast.And) else "or_"
        expr = node.values[-1]
        for v in reversed(node.values[:-1]):
            expr = self._call(fn, [v, _thunk(expr)])
        return ast.copy_location(expr, node)

    def visit_Compare(self, node):
        node = self.generic_visit(node)
        names = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
        if len(node.ops) < 2 or not all(type(o) in names for o in node.ops):
            return node
        ops = ast.Tuple([ast.Constant(names[type(o)]) for o in node.ops], ast.Load())
        thunks = [_thunk(c) for c in node.comparators]
        return ast.copy_location(self._call("compare_chain", [ops, node.left] + thunks), node)

    def visit_UnaryOp(self, node):
        node = self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(self._call("not_", [node.operand]), node)
        return node

    # -- builders --------------------------------------------------------------------------------
    def _call(self, fn, args):
        return ast.Call(ast.Attribute(ast.Name("__tj", ast.Load()), fn, ast.Load()), args, [])

    def _tuple(self, names):
        return ast.Tuple([ast.Name(n, ast.Load()) for n in names], ast.Load())

    def _strs(self, names):
        return ast.Tuple([ast.Constant(n) for n in names], ast.Load())

    def _touched(self, names):
        # {name: locals().get(name, UNDEFINED)}: what a loop body changes in place (`_mutated`)
        return ast.Dict([ast.Constant(n) for n in names], list(self._current(names).elts))

    def _current(self, names):
        # locals().get(name, UNDEFINED) for each: the value on entry, or "not bound yet".
        get = lambda n: ast.Call(  # noqa: E731
            ast.Attribute(ast.Call(ast.Name("locals", ast.Load()), [], []), "get", ast.Load()),
            [ast.Constant(n), ast.Attribute(ast.Name("__tj", ast.Load()), "UNDEFINED", ast.Load())], [])
        return ast.Tuple([get(n) for n in names], ast.Load())

    def _def(self, name, params, body, node):
        args = ast.arguments([], [ast.arg(p) for p in params], None, [], [], None, [])
        fd = ast.FunctionDef(name, args, body or [ast.Pass()], [], None)
        return ast.copy_location(fd, node)

    def _assign(self, names, value, node):
        # The generated call sits on the statement's first line (`if ...:`), so messages
        # that name "the if/else at file:line" point at the `if`, not at its last line.
        for n in ast.walk(value):
            if "lineno" in n._attributes and not hasattr(n, "lineno"):
                n.lineno = n.end_lineno = node.lineno
                n.col_offset = n.end_col_offset = node.col_offset
        if not names:
            return ast.copy_location(ast.Expr(value), node)
        target = ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())
        return ast.copy_location(ast.Assign([target], value), node)


def _thunk(expr):
    """``lambda: expr``."""
    return ast.Lambda(ast.arguments([], [], None, [], [], None, []), expr)


class _SuperFix(ast.NodeTransformer):
    """Zero-argument super() needs a class cell the rewritten function lacks."""

    def __init__(self, self_name):
        self.self_name = self_name

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "super" and not node.args and self.self_name:
            node.args = [ast.Name("__class__", ast.Load()), ast.Name(self.self_name, ast.Load())]
        return node


class NoSource(ScriptError):
    """The callable has no Python source to convert (a builtin, code made by exec)."""


def convert(fn):
    """Return the control-flow-converted version of `fn` (same signature); `fn` itself when
    it has no control flow to convert.

    Takes what JAX and torch.compile users pass: a function, a lambda (its body is an
    expression; a conditional expression in it becomes a ``cond``), a bound method, a
    ``functools.partial`` and an object with ``__call__`` (each converted at its
    function and re-bound the same way). Raises `NoSource` when there is no source.
    """
    if isinstance(fn, functools.partial):
        return functools.partial(convert(fn.func), *fn.args, **fn.keywords)
    if isinstance(fn, types.MethodType):
        return types.MethodType(convert(fn.__func__), fn.__self__)
    if not isinstance(fn, types.FunctionType):
        call = getattr(type(fn), "__call__", None)
        if isinstance(call, types.FunctionType):   # an object with a Python __call__
            return types.MethodType(convert(call), fn)
        raise NoSource(f"@script needs Python source, and {fn!r} has none")
    fdef, filename, super_calls = _function_def(fn)
    if not any(_rewritten(node) for node in ast.walk(fdef)):
        # Straight-line code (LeNet's forward): the rewrite would change nothing, and
        # tracing the function itself gives the same program without compiling a copy
        # (0.3-0.4 ms of a first call: the rewrite's walk, locations, compile, exec).
        return fn
    return _build(fn, fdef, filename, super_calls)


def _function_def(target) -> tuple:
    """(ast.FunctionDef with the file's line numbers, filename, whether it may call super())
    for a function or lambda."""
    try:
        filename = inspect.getsourcefile(target) or "<unknown>"
        if target.__name__ == "<lambda>":
            return _lambda_def(target, filename), filename, True
        # From the code object: inspect would follow a functools.wraps wrapper's
        # __wrapped__ to the inner function, whose source is not this function's.
        src, first = _code_source(target)
    except (OSError, TypeError) as e:
        raise NoSource(f"@script needs the source of {getattr(target, '__name__', target)!r} ({e})") from None
    tree = ast.parse(textwrap.dedent(src))
    ast.increment_lineno(tree, first - 1)
    fdef = tree.body[0]
    if isinstance(fdef, ast.AsyncFunctionDef):
        raise ScriptError(f"@script cannot convert async def at {filename}:{first}", filename, first)
    if not isinstance(fdef, ast.FunctionDef):
        raise ScriptError(f"@script expects a function definition, got {type(fdef).__name__} at {filename}:{first}")
    # A super() call needs the name in the source: without it, no node to fix (the fix
    # walks the whole tree).
    return fdef, filename, "super" in src


def _code_source(target) -> tuple:
    """(source text, first line) of `target`'s code object.

    Read from linecache by the code's own file and first line: `inspect.getsource` first
    finds the function's module, which walks every module in ``sys.modules`` once per new
    module loaded since (about 0.1 s of a warm-cache first call once numba is imported)."""
    code = target.__code__
    lines = linecache.getlines(code.co_filename, target.__globals__)
    first = code.co_firstlineno
    if not lines or first > len(lines):
        lines, first = inspect.getsourcelines(code)    # inspect's own search and its error
        return "".join(lines), first
    return "".join(inspect.getblock(lines[first - 1:])), first


def _lambda_def(target, filename: str) -> ast.FunctionDef:
    """The lambda's node, found in its file by line, parameters and column, as a def."""
    lines = linecache.getlines(filename, target.__globals__)
    if not lines:
        raise OSError("the lambda's file cannot be read")
    code = target.__code__
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    found = [n for n in ast.walk(ast.parse("".join(lines)))
             if isinstance(n, ast.Lambda) and n.lineno == code.co_firstlineno
             and tuple(a.arg for a in n.args.posonlyargs + n.args.args + n.args.kwonlyargs) == names]
    if len(found) > 1:  # several alike on one line: the one whose body holds the code's first position
        pos = [(ln, col) for ln, _, col, _ in code.co_positions() if ln is not None and col is not None]
        start = min(pos) if pos else None
        found = [n for n in found if start is not None and
                 (n.body.lineno, n.body.col_offset) <= start <= (n.body.end_lineno, n.body.end_col_offset)]
    if len(found) != 1:
        raise OSError(f"cannot tell which lambda on line {code.co_firstlineno} this is")
    lam = found[0]
    ret = ast.Return(lam.body)
    ast.copy_location(ret, lam.body)
    fdef = ast.FunctionDef("__tj_lambda", lam.args, [ret], [], None)
    ast.copy_location(fdef, lam)
    return fdef


def _build(target, fdef: ast.FunctionDef, filename: str, super_calls: bool = True):
    fdef.decorator_list = []
    # Annotations are not needed, and evaluating them again here could fail (forward
    # references under `from __future__ import annotations`).
    fdef.returns = None
    a = fdef.args
    for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
        arg.annotation = None
    self_name = fdef.args.args[0].arg if fdef.args.args else None
    if super_calls:
        fdef = _SuperFix(self_name).visit(fdef)
    fdef = _Rewriter(filename).visit(fdef)
    freevars = list(target.__code__.co_freevars)
    cls_cell = "__class__" in freevars
    params = ["__tj"] + [v for v in freevars]
    if not cls_cell:
        params.append("__class__")
    factory = ast.FunctionDef("__tj_factory", ast.arguments([], [ast.arg(p) for p in params], None, [], [], None, []),
                              [fdef, ast.Return(ast.Name(fdef.name, ast.Load()))], [], None)
    mod = ast.Module([factory], [])
    ast.fix_missing_locations(mod)
    code = compile(mod, filename, "exec")
    ns: dict = {}
    exec(code, target.__globals__, ns)
    cells = []
    for i, v in enumerate(freevars):
        try:
            cells.append(target.__closure__[i].cell_contents)
        except ValueError:  # an empty cell (defined later)
            cells.append(None)
    owner = None
    qual = target.__qualname__.split(".")
    if len(qual) > 1 and self_name:
        owner = target.__globals__.get(qual[-2])
    if not cls_cell:
        cells.append(owner)
    new = ns["__tj_factory"](_Helpers, *cells)
    new.__tracejit_source__ = ast.unparse(fdef)   # (what the rewrite made: for reading)
    return new
