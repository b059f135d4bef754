"""Complex tensors (complex64, complex128): the eager path of every call with a complex
operand, and the complex-only primitives (conj, real, imag, view_as_real,
view_as_complex, complex, polar, angle, sgn).

Complex tensors run eagerly on numpy's complex arithmetic. A traced or compiled function
records each complex call as one `COMPLEX_CALL` equation that runs it so (jit/tracer.py),
differentiated by the same VJPs; the kernel generators never see a complex dtype.
`bind`'s plans are never made for a complex signature: such a call takes the general
path, which hands it to `run` here.

Every primitive says in `_WAYS` how it treats complex operands; one that is not listed
refuses them with an error naming it, so no op gives a silently wrong complex result
(``lt``, ``amax``, ``softmax`` refuse, as in PyTorch).

Gradients follow PyTorch's convention: for a real loss L and ``z = x + iy``, z's
gradient is ``dL/dx + i dL/dy``; for ``mul`` it is ``g * conj(b)``. For an op that is
holomorphic with real Taylor coefficients (exp, mul, div, matmul), ``conj(f'(z)) =
f'(conj(z))``, so the record's own VJP called on the conjugated saved values gives it
(`_HOLO`). Ops linear with real coefficients (add, reshape, sum, indexing) keep their
VJP as it is (`_LINEAR`). A real input of a complex op takes the real part of its
gradient (the autograd engine casts a gradient to its input's dtype).
"""
from __future__ import annotations

from builtins import complex as _pycomplex

import numpy as np

from .. import dtypes as _dt
from ..device import CPU, array_module
from ..errors import DTypeError, ShapeError, operand_error
from ..tensor import Tensor
from .registry import Aval, Primitive, defprim
from .promotion import compute_dtype
from .eager import bind

__all__ = ["conj", "conj_physical", "real", "imag", "view_as_real", "view_as_complex", "complex", "polar",
           "angle", "sgn", "is_complex", "resolve_conj", "resolve_neg", "is_conj"]

_LINEAR = ("add", "sub", "neg", "copy", "detach", "expand", "flip", "permute", "reshape", "concat", "stack",
           "roll", "getitem", "gather", "index_put", "index_add", "scatter_add", "sum", "where", "to_device", "full",
           "cumsum", "eq", "ne", "isnan", "cast")
_WRITES = ("index_put", "index_add", "scatter_add")   # (results of operand 0's dtype)
_HOLO = ("mul", "div", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "pow", "pow_backward", "matmul",
         "tanh", "tanh_backward", "sigmoid", "sigmoid_backward", "expm1", "log1p", "asin", "acos", "atan",
         "asinh", "atanh",
         "matmul_nt", "matmul_tn", "prod", "cumprod", "linalg_inv", "linalg_solve", "linalg_det", "linalg_cofactor",
         "linalg_logabsdet", "linalg_matrix_exp")
# (VJPs written with conjugate transposes, so right for complex operands as they are)
_CONJUGATED = ("linalg_svd", "linalg_qr", "linalg_cholesky", "linalg_eigh", "linalg_pinv", "linalg_lu_factor",
               "lu_pivots_to_perm")


def involves(prim: Primitive, args, params) -> bool:
    """Whether a call takes the complex path: a complex operand, a complex dtype asked for
    (``cast``, ``full``), or one of this module's primitives."""
    if prim.kind == "complex":
        return True
    for a in args:
        if isinstance(a, Tensor):
            if a.dtype.is_complex:
                return True
        elif type(a) is _pycomplex:
            return True
    if params:
        d = params.get("dtype")
        if type(d) is _dt.DType and d.is_complex:
            return True
    return False


def _aval(a, name):
    if isinstance(a, Tensor):
        return Aval(a._data.shape, a.dtype, a.device)
    if isinstance(a, (bool, int, float, _pycomplex, np.number, np.bool_)):
        return Aval((), _dt.scalar_dtype(a), CPU, weak=True)
    raise operand_error(name, a)


def _way(prim: Primitive):
    if not _WAYS:
        _build_ways()
    way = _WAYS.get(prim.name)
    if way is None and prim.kind == "complex":   # (tracejit/fft.py's transforms)
        way = (prim, None, None)
    if way is None:
        raise DTypeError(f"{prim.name}: complex tensors are not supported by this op "
                         f"(complex operands run eagerly on the ops in tracejit/ops/complex_ops.py)")
    return way


def run(prim: Primitive, args, params):
    """Eager run of `prim` on operands of which one is complex (see the top)."""
    way = _way(prim)
    if prim.name in _WRITES and not args[0].dtype.is_complex:
        raise DTypeError(f"{prim.name}: can't write complex values into a {args[0].dtype.name} tensor")
    avals = [_aval(a, prim.name) for a in args]
    dev = next((a.device for a in args if isinstance(a, Tensor)), None) or params.get("device") or CPU
    if prim.promote:
        cd = compute_dtype(prim, avals)
        arrays = []
        for a, v in zip(args, avals):
            arrays.append(_as(_array(a), cd.np))
            v.dtype = cd
    else:   # (a complex call reads bf16 words itself, as in a compiled plan)
        arrays = [_array(a) if prim is not COMPLEX_CALL else getattr(a, "_data", a) for a in args]
    node_prim, impl, rule = way
    out_aval = (rule or prim.rule)(*avals, **params)
    xp = np if dev is CPU else array_module(dev)
    out = (impl or prim.impl)(xp, *arrays, **params)
    odt = out_aval.dtype
    if type(out) is not xp.ndarray or out.dtype != odt.np:
        out = xp.asarray(out, dtype=odt.np)
    result = Tensor._wrap(out, odt, params.get("device") or dev)
    if prim.is_view or (prim.view_if is not None and prim.view_if(params)):
        result._vbox = args[0]._vbox
        result._base = args[0] if args[0]._base is None else args[0]._base
    if odt.differentiable and node_prim.vjp is not None and _grad_state.enabled:
        for a in args:
            if isinstance(a, Tensor) and a._requires_grad:
                _record(node_prim, args, params, result, None)
                break
    return result


def _call_impl(xp, *arrays, op, params, avals_in):
    """`COMPLEX_CALL` on arrays: `run` of `op` on them as tensors (numbers stay numbers)."""
    from ..autograd.grad_mode import no_grad
    args = [(a.item() if isinstance(a, xp.ndarray) else a) if v.weak else Tensor._wrap(a, v.dtype, v.device)
            for a, v in zip(arrays, avals_in)]
    with no_grad():
        out = run(op, args, params)._data
    # (a view, `real` or a reshape, would alias an operand the program may reuse)
    return out.copy() if getattr(out, "base", None) is not None else out


def _call_rule(*avals, op, params, avals_in=()):
    """`COMPLEX_CALL`'s result: `op`'s on its complex path, as `run` makes it."""
    if op.promote:
        cd = compute_dtype(op, avals)
        avals = [Aval(v.shape, cd, v.device, weak=v.weak) for v in avals]
    return (_way(op)[2] or op.rule)(*avals, **params)


def _call_vjp(g, out, *inputs, op, params, avals_in):
    """`COMPLEX_CALL`'s gradient: the VJP eager autograd records for `op` (more complex
    calls when traced)."""
    node = _way(op)[0]
    return node.vjp(g, out if node.save_out else None, *inputs, **params)


# A complex call inside a captured graph (an STFT front-end, RotatE's rotations), run as
# eagerly, outside any kernel; its gradient is the eager one, recorded the same way.
COMPLEX_CALL = defprim("complex_call", _call_impl, _call_rule, _call_vjp, kind="complex", save_out=True)


def _array(a):
    """An operand's array (a bf16 tensor's values in float32, not its words), or the number."""
    if isinstance(a, Tensor):
        return a._data if a.dtype is not _dt.bfloat16 else to_float32(a._data)
    return a


def _as(x, npd):
    """An operand in the compute dtype; a complex one cast to a real dtype keeps its real
    part (what a real input's gradient takes), without numpy's ComplexWarning."""
    if isinstance(x, np.ndarray):
        if x.dtype == npd:
            return x
        if x.dtype.kind == "c" and npd.kind != "c":
            x = x.real
        return x.astype(npd)
    if type(x) is _pycomplex and npd.kind != "c":
        x = x.real
    return npd.type(x)


def _conj_any(x):
    """conj of a saved complex value; anything else (a real tensor, a stand-in whose shape
    only the VJP reads, None) as it is."""
    if isinstance(x, Tensor):
        return conj(x) if x.dtype.is_complex and not shape_only(x) else x
    return x.conjugate() if type(x) is _pycomplex else x


def _node_prim(prim: Primitive, vjp) -> Primitive:
    """The record autograd keeps for `prim` on complex operands: its saving rules, `vjp`."""
    extra = {k: v for k, v in prim.extra.items() if k in ("meta", "needs")}
    return Primitive(prim.name, prim.impl, prim.rule, vjp, kind="complex", save=prim.save,
                     save_out=prim.save_out, nondiff=prim.nondiff, grad_name=prim.grad_name, extra=extra)


def _holomorphic(prim: Primitive) -> Primitive:
    real_vjp = prim.vjp

    def vjp(g, out, *inputs, **params):
        return real_vjp(g, _conj_any(out), *[_conj_any(x) for x in inputs], **params)
    return _node_prim(prim, vjp)


# ---------------------------------------------------------------- cast and abs
def _cast_impl(xp, a, dtype):
    """cast with complex operands (a bf16 operand arrives as float32 values, `_array`)."""
    from .elementwise_logic import _cast_impl as real_cast
    if dtype.is_complex:
        return a.astype(dtype.np)
    # (PyTorch warns that the imaginary part is discarded; this keeps the real part quietly)
    return real_cast(xp, a.real if a.dtype.kind == "c" else a, dtype)


def _same_dtype(rule):
    def same(a, **params):
        out = rule(a, **params)
        return Aval(out.shape, a.dtype, out.device)
    return same


# ---------------------------------------------------------------- the complex-only primitives
def _real_rule(a):
    return Aval(a.shape, a.dtype.to_real(), a.device)


def _need_complex(name):
    def rule(a):
        if not a.dtype.is_complex:
            raise DTypeError(f"{name}: expected a complex tensor, got {a.dtype.name}")
        return Aval(a.shape, a.dtype, a.device)
    return rule


CONJ = defprim("conj", lambda xp, a: xp.conjugate(a), lambda a: Aval(a.shape, a.dtype, a.device),
               lambda g, out, a: (conj(g),), kind="complex", save=lambda rq: ())
REAL = defprim("real", lambda xp, a: a.real, _real_rule, lambda g, out, a: (cast(g, g.dtype.to_complex()),),
               kind="complex", save=lambda rq: (), extra={"view": True})
IMAG = defprim("imag", lambda xp, a: a.imag, _real_rule,
               lambda g, out, a: (complex(_zeros(g), g),), kind="complex", save=lambda rq: (),
               extra={"view": True})


def _view_as_real_rule(a):
    if not a.dtype.is_complex:
        raise DTypeError(f"view_as_real: expected a complex tensor, got {a.dtype.name}")
    return Aval(tuple(a.shape) + (2,), a.dtype.to_real(), a.device)


def _view_as_real_impl(xp, a):
    r = a.real   # (a view with a's strides; the imaginary parts lie one element further)
    return np.lib.stride_tricks.as_strided(r, a.shape + (2,), a.strides + (r.itemsize,)) if xp is np \
        else xp.stack([a.real, a.imag], -1)


def _view_as_complex_rule(a):
    if a.dtype not in (_dt.float32, _dt.float64):
        raise DTypeError(f"view_as_complex: expected a float32 or float64 tensor, got {a.dtype.name}")
    if not a.shape or a.shape[-1] != 2:
        raise ShapeError(f"view_as_complex: expected the last dimension to have size 2, got shape "
                         f"{tuple(a.shape)}")
    return Aval(tuple(a.shape[:-1]), a.dtype.to_complex(), a.device)


def _view_as_complex_impl(xp, a):
    isz = a.itemsize
    if a.strides[-1] != isz or any(s % (2 * isz) for s, n in zip(a.strides[:-1], a.shape[:-1]) if n > 1):
        raise ShapeError("view_as_complex: the tensor must have a last dimension of stride 1 and every "
                         "other stride divisible by 2 (call .contiguous() first)")
    cdt = np.complex64 if a.dtype == np.float32 else np.complex128
    if a.size == 0:
        return xp.zeros(a.shape[:-1], dtype=cdt)
    return a.view(cdt)[..., 0]   # (a view: numpy reinterprets a contiguous last axis)


VIEW_AS_REAL = defprim("view_as_real", _view_as_real_impl, _view_as_real_rule,
                       lambda g, out, a: (view_as_complex(g.contiguous()),), kind="complex",
                       save=lambda rq: (), extra={"view": True})
VIEW_AS_COMPLEX = defprim("view_as_complex", _view_as_complex_impl, _view_as_complex_rule,
                          lambda g, out, a: (view_as_real(g),), kind="complex", save=lambda rq: (),
                          extra={"view": True})


def _pair_rule(name):
    def rule(a, b):
        if a.dtype is not b.dtype or a.dtype not in (_dt.float32, _dt.float64, _dt.float16):
            raise DTypeError(f"{name}: expected two float tensors of one dtype, got {a.dtype.name} and "
                             f"{b.dtype.name}")
        from ..shapes import broadcast_shapes
        return Aval(broadcast_shapes(name, a.shape, b.shape), a.dtype.to_complex(), a.device)
    return rule


def _complex_impl(xp, re, im):
    out = xp.empty(np.broadcast_shapes(re.shape, im.shape),
                   dtype=np.complex128 if re.dtype == np.float64 else np.complex64)
    out.real = re
    out.imag = im
    return out


COMPLEX = defprim("complex", _complex_impl, _pair_rule("complex"),
                  lambda g, out, re, im: (real(g), imag(g)), kind="complex", save=lambda rq: ())


def _polar_vjp(g, out, r, theta):
    gc = conj(g)
    return (real(gc * sgn(out)), real(gc * (out * 1j)))


POLAR = defprim("polar", lambda xp, r, t: _complex_impl(xp, r * xp.cos(t), r * xp.sin(t)),
                _pair_rule("polar"), _polar_vjp, kind="complex", save=lambda rq: (), save_out=True)


def _sgn_impl(xp, a):
    r = xp.abs(a)
    with np.errstate(divide="ignore"):
        inv = xp.reciprocal(r, out=xp.empty_like(r))   # (times a real: 1/3 of a complex division)
    inv[r == 0] = 0
    return a * inv


def _sgn_vjp(g, out, a):
    r = abs(a)
    return (where(r == 0, 0.0, (g - real(g * conj(out)) * out) / r),)


SGN = defprim("sgn", _sgn_impl, _need_complex("sgn"), _sgn_vjp, kind="complex", save_out=True)


def _angle_vjp(g, out, a):
    r2 = real(a * conj(a))
    return (where(r2 == 0, 0.0, g * (a * 1j) / r2),)


ANGLE = defprim("angle", lambda xp, a: xp.angle(a), _real_rule, _angle_vjp, kind="complex")


# ---------------------------------------------------------------- public functions
def is_complex(input: Tensor) -> bool:
    return input.dtype.is_complex


def conj(input: Tensor) -> Tensor:
    """The complex conjugate (a copy; PyTorch's is a lazy view); a real tensor itself."""
    return bind(CONJ, input) if input.dtype.is_complex else input


conj_physical = conj


def resolve_conj(input: Tensor) -> Tensor:
    return input   # (conj is never lazy here)


resolve_neg = resolve_conj


def is_conj(input: Tensor) -> bool:
    return False


def real(input: Tensor) -> Tensor:
    """The real parts, a view (writes go to the complex tensor); a real tensor itself."""
    return bind(REAL, input) if input.dtype.is_complex else input


def imag(input: Tensor) -> Tensor:
    if not input.dtype.is_complex:
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
    return bind(IMAG, input)


def view_as_real(input: Tensor) -> Tensor:
    if not input.dtype.is_complex:
        raise DTypeError(f"view_as_real is only supported for complex tensors, got {input.dtype.name}")
    return bind(VIEW_AS_REAL, input)


def view_as_complex(input: Tensor) -> Tensor:
    return bind(VIEW_AS_COMPLEX, input)


def complex(real: Tensor, imag: Tensor) -> Tensor:  # noqa: A001  (torch.complex)
    return bind(COMPLEX, real, imag)


def polar(abs: Tensor, angle: Tensor) -> Tensor:  # noqa: A002
    return bind(POLAR, abs, angle)


def angle(input: Tensor) -> Tensor:
    return bind(ANGLE if input.dtype.is_complex else ANGLE_REAL, input)


def sgn(input: Tensor) -> Tensor:
    """z / |z| (0 at 0) for complex tensors; sign for real ones."""
    if not input.dtype.is_complex:
        return sign(input)
    return bind(SGN, input)


from ..autograd.grad_mode import _state as _grad_state  # noqa: E402
from ..autograd.node import _record, shape_only  # noqa: E402
from ..bf16 import to_float32  # noqa: E402
from .elementwise import _unary, _zeros, cast, sign, where  # noqa: E402


def _angle_real_impl(xp, a):
    zero, pi = a.dtype.type(0), a.dtype.type(np.pi)
    return xp.where(a < zero, pi, xp.where(a != a, a, zero))


# A real number's angle: pi for negatives, NaN for NaN, 0 otherwise (-0.0 too, as PyTorch's,
# where numpy's says pi); its gradient is zeros, so the result requires grad as PyTorch's.
ANGLE_REAL = _unary("angle_real", _angle_real_impl, lambda g, out, a: (_zeros(g),),
                    lambda e, a: f"({e.const(np.pi)} if {a} < {e.const(0)} else ({a} if {a} != {a} else {e.const(0)}))",
                    save_in=False)

# per primitive name: (the record autograd keeps, impl or None for the record's, rule or
# None for the record's); built on the first complex call, once every ops module has
# registered its primitives (this module loads with ops/eager.py)
_WAYS: dict = {}


def _build_ways() -> None:
    from .registry import REGISTRY
    ways = {p: (REGISTRY[p], None, None) for p in _LINEAR}
    ways.update((p, (_holomorphic(REGISTRY[p]), None, None)) for p in _HOLO)
    ways["cast"] = (REGISTRY["cast"], _cast_impl, None)
    ways["abs"] = (_node_prim(REGISTRY["abs"], lambda g, out, a: (g * sgn(a),)), None, _real_rule)
    from .linalg_dense import signdet_complex_vjp
    ways["linalg_signdet"] = (_node_prim(REGISTRY["linalg_signdet"], signdet_complex_vjp), None, None)
    ways.update((p, (REGISTRY[p], None, None)) for p in _CONJUGATED)
    for p in ("cumsum", "cumprod"):   # (their rules send non-floating dtypes to int64)
        ways[p] = ways[p][:2] + (_same_dtype(REGISTRY[p].rule),)
    _WAYS.update(ways)
