"""Forwarding functions with the exact signature of the function they call.

A wrapper written ``def call(*args, **kwargs): return fn(*args, **kwargs)`` packs a tuple
and a dict on every call and unpacks them again: ~0.4 µs, as much as a third of a small
eager op. `forwarder` makes the wrapper from `fn`'s own parameter list instead (named
parameters only: no ``*args``/``**kwargs``), so arguments pass straight through, and a
wrong call raises `fn`'s own TypeError text (the wrapper's code has `fn`'s name). Used by
the ``out=`` wrappers of ``tracejit.<fn>`` (outarg.py), the Tensor methods that forward
to the op of the same name (tensor_operators.py), and the numpy spellings PyTorch's argument
parser takes (``x.gather(axis=1, index=i)``, `with_numpy_names`).
"""
from __future__ import annotations

import inspect

__all__ = ["forwarder", "numpy_names", "specialize", "with_numpy_names"]

# The parameter names PyTorch's argument parser also takes by numpy's name, for every
# native function and Tensor method (``torch.gather(x, axis=1, index=i)``).
NUMPY_NAMES = {"dim": "axis", "keepdim": "keepdims"}
_UNSET = object()


def numpy_names(fn) -> tuple:
    """The parameters of `fn` (a plain function) that PyTorch also takes by their numpy name
    and that `fn` does not take by it itself."""
    code = getattr(_passed_through(fn), "__code__", None)
    if code is None:
        return ()
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    return tuple(n for n, a in NUMPY_NAMES.items() if n in names and a not in names)


def _passed_through(fn):
    """What `fn` wraps where it only passes ``*args, **kwargs`` on (a ``functools.wraps``
    argument check, ops/dtype_checks.takes), else `fn`: the parameters it takes."""
    inner, code = getattr(fn, "__wrapped__", None), getattr(fn, "__code__", None)
    varargs = code is not None and code.co_argcount == 0 and code.co_flags & 0x0C == 0x0C
    return inner if inner is not None and varargs else fn


def with_numpy_names(fn, module: str, qualname: str):
    """`fn` taking ``axis=`` for ``dim=`` (and ``keepdims=`` for ``keepdim=``) as PyTorch's
    functions do, through an exact-signature forwarder named `module`.`qualname` (where it is
    installed, so pickle finds it); `fn` itself where it needs none."""
    aliases = numpy_names(fn)
    m = forwarder(fn, aliases=aliases) if aliases else None
    if m is None:
        return fn
    m.__module__, m.__qualname__, m.__doc__ = module, qualname, fn.__doc__
    if hasattr(fn, "__wrapped__"):   # (an out= wrapper: the op function it calls stays reachable)
        m.__wrapped__ = fn.__wrapped__
    return m


def forwarder(fn, out=None, aliases: tuple = ()):
    """``def <name>(<fn's parameters>): return fn(<them>)``, or None when `fn`'s signature
    is not plain named parameters. With ``out=(call_out, name)`` the wrapper also takes a
    keyword ``out=None`` and, when it is given, returns
    ``call_out(fn, name, positional args, keyword-only args, out)``. Each parameter named in
    `aliases` is also taken by its numpy name (NUMPY_NAMES), a keyword-only parameter."""
    name = getattr(fn, "__name__", "")
    if not name.isidentifier():
        return None
    try:
        sig = inspect.signature(_passed_through(fn) if aliases else fn, follow_wrapped=not aliases)
    except (TypeError, ValueError):
        return None
    if aliases and out is not None:
        raise ValueError("forwarder: aliases and out together")
    P = inspect.Parameter
    params, pos, kw = [], [], []
    ns = {"_fn": fn, "_U": _UNSET}
    in_posonly = kwonly = False
    checks, optional, done = [], False, []   # the argument checks an aliased parameter's wrapper makes
    for i, p in enumerate(sig.parameters.values()):
        if (p.kind not in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)
                or not p.name.isidentifier() or p.name.startswith("_")
                or (out is not None and p.name == "out")):
            return None
        text = p.name
        if p.default is not P.empty:
            ns[f"_d{i}"] = p.default  # the very default object, so identity checks hold
        if p.name in aliases and p.kind is not P.POSITIONAL_ONLY:
            # unset unless given by either name; a positional parameter after it is then
            # optional in the signature, its absence checked in the body
            a, n = NUMPY_NAMES[p.name], p.name
            done.append(a)
            missing = (f"{n} = _d{i}" if p.default is not P.empty else
                       f"raise TypeError(\"{name}() missing 1 required argument: '{n}'\")")
            checks.append(f"    if {a} is not _U:\n        if {n} is not _U:\n            raise TypeError("
                          f"\"{name}() got multiple values for argument '{n}' (also given as '{a}')\")\n"
                          f"        {n} = {a}\n    elif {n} is _U:\n        {missing}\n")
            text += "=_U"
            optional = optional or p.kind is P.POSITIONAL_OR_KEYWORD
        elif p.default is not P.empty:
            text += f"=_d{i}"
        elif optional and p.kind is P.POSITIONAL_OR_KEYWORD:
            checks.append(f"    if {p.name} is _U:\n        raise TypeError("
                          f"\"{name}() missing 1 required argument: '{p.name}'\")\n")
            text += "=_U"
        if p.kind is P.POSITIONAL_ONLY:
            in_posonly = True
        elif in_posonly:
            params.append("/")
            in_posonly = False
        if p.kind is P.KEYWORD_ONLY:
            if not kwonly:
                params.append("*")
                kwonly = True
            kw.append(p.name)
        else:
            pos.append(p.name)
        params.append(text)
    if in_posonly:
        params.append("/")
    args = ", ".join(pos + [f"{k}={k}" for k in kw])
    body = f"    return _fn({args})\n"
    if checks:
        if not kwonly:
            params.append("*")
            kwonly = True
        params += [f"{a}=_U" for a in done]
        body = "".join(checks) + body
    if out is not None:
        if not kwonly:
            params.append("*")
        params.append("out=None")
        ns["_call_out"], ns["_name"] = out
        kwargs = ", ".join(f"{k!r}: {k}" for k in kw)
        body = (f"    if out is None:\n    {body}"
                f"    return _call_out(_fn, _name, ({''.join(p + ', ' for p in pos)}), {{{kwargs}}}, out)\n")
    # The source is made of `fn`'s own parameter names (checked identifiers) only.
    # Compiled under a "<tracejit ...>" file name: errors.user_frame skips such frames, so
    # the locations recorded at capture and in error messages stay the user's line.
    src = f"def {name}({', '.join(params)}):\n{body}"
    exec(compile(src, f"<tracejit forwarder {name}>", "exec"), ns)
    return ns[name]


def specialize(impl, name: str, /, **fixed):
    """The public function `name`: `impl` called with the keyword-only arguments `fixed`
    (a rank, an op name), with impl's signature less its keyword-only parameters and docs;
    a wrong call's TypeError names `name`, not impl. One impl serves a family so (max_pool1d
    to 3d, fft to fftn)."""
    prefix = impl.__name__ + "()"

    def fn(*args, **kwargs):
        try:
            return impl(*args, **kwargs, **fixed)
        except TypeError as e:
            if not str(e).startswith(prefix):
                raise
            raise TypeError(name + str(e)[len(impl.__name__):]) from None
    params = inspect.signature(impl).parameters.values()
    fn.__signature__ = inspect.Signature([p for p in params if p.kind is not p.KEYWORD_ONLY])
    fn.__name__ = fn.__qualname__ = name
    fn.__module__, fn.__doc__ = impl.__module__, impl.__doc__
    return fn
