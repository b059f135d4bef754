"""The ``out=`` keyword of PyTorch's functions (``tj.add(a, b, out=c)``).

The op computes out of place as usual; its result is then written into ``out``'s
memory (``out`` is resized first when its shape differs, as PyTorch does for a
wrongly sized ``out``). Like PyTorch, ``out=`` refuses to take part in autograd:
with grad mode on and an input that requires grad it raises.
"""
from __future__ import annotations

import functools

from . import exactcall as _exactcall

__all__ = ["with_out", "install_out", "OUT_FUNCTIONS", "OUT_FUNCTIONS_VARARGS", "SPECIAL_OUT_FUNCTIONS",
           "LINALG_OUT_FUNCTIONS"]

# The functions tracejit's namespace gives an out= keyword.
OUT_FUNCTIONS = ("add", "sub", "mul", "div", "true_divide", "pow", "neg", "abs", "exp", "log",
                 "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "clamp", "maximum", "minimum",
                 "where", "matmul", "mm", "bmm", "mv", "dot", "sum", "mean", "prod", "amax",
                 "amin", "cumsum", "cat", "stack", "sort", "argsort", "topk", "tril", "triu", "arange",
                 # the other elementwise functions and scans PyTorch gives an out=
                 "acos", "asin", "atan", "acosh", "asinh", "atanh", "arccos", "arcsin", "arctan", "arccosh",
                 "arcsinh", "arctanh", "cosh", "sinh", "tan", "ceil", "floor", "round", "trunc", "fix", "frac",
                 "sign", "sgn", "signbit", "exp2", "expm1", "log2", "log10", "log1p", "reciprocal", "square",
                 "erf", "erfc", "erfinv", "lgamma", "digamma", "mvlgamma", "i0", "sinc", "logit", "negative",
                 "absolute", "angle", "deg2rad", "rad2deg", "nan_to_num", "clip", "logical_not", "bitwise_not",
                 "cumprod", "atan2", "arctan2", "remainder", "fmod", "floor_divide", "eq",
                 "ne", "lt", "le", "gt", "ge", "greater", "less", "greater_equal", "less_equal", "not_equal",
                 "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
                 "bitwise_left_shift", "bitwise_right_shift", "gcd", "lcm", "hypot", "copysign", "logaddexp",
                 "logaddexp2", "xlogy", "fmax", "fmin", "heaviside", "nextafter", "float_power", "ldexp",
                 "igamma", "igammac", "multiply", "subtract", "divide", "kron", "inner",
                 # reductions, searches and products
                 "argmax", "argmin", "std", "var", "logsumexp", "all", "any", "max", "min", "msort",
                 "outer", "diag", "searchsorted", "bucketize", "masked_select",
                 "take", "addmm", "baddbmm", "lerp", "clamp_min", "clamp_max", "polar", "complex",
                 # gathers and scatters along a dim
                 "gather", "scatter", "scatter_add", "index_select", "index_add", "index_copy", "take_along_dim",
                 "slice_scatter",
                 # (values, indices) and other pairs: out=(a, b)
                 "kthvalue", "median", "nanmedian", "mode", "cummax", "cummin", "aminmax", "frexp",
                 # more reductions and scans
                 "logcumsumexp", "nansum", "nanmean", "norm", "quantile", "nanquantile", "histc", "histogram",
                 "renorm", "diff",
                 # products
                 "addmv", "addbmm", "addr", "ger", "vdot", "tensordot", "cross",
                 # more elementwise functions, tests, softmaxes and joins
                 "isin", "isneginf", "isposinf", "hardshrink", "threshold", "softmax", "log_softmax",
                 "conj_physical", "polygamma", "nonzero", "hstack", "vstack", "dstack", "column_stack",
                 "row_stack", "concat", "concatenate",
                 # creation and sampling: the result takes out's dtype
                 "full", "eye", "linspace", "logspace", "randint", "randperm", "bernoulli", "multinomial",
                 # the copying spellings of the views (ops/view_copies.py)
                 "alias_copy", "as_strided_copy", "detach_copy", "diagonal_copy", "expand_copy", "narrow_copy",
                 "permute_copy", "select_copy", "slice_copy", "squeeze_copy", "t_copy", "transpose_copy",
                 "unfold_copy", "unsqueeze_copy", "view_as_complex_copy", "view_as_real_copy", "view_copy")
# The ones with *args (deprecated argument orders, any number of matrices): the generic wrapper.
OUT_FUNCTIONS_VARARGS = ("addcmul", "addcdiv", "chain_matmul", "zeros", "ones", "empty", "rand", "randn")

# The functions of tracejit.special given an out= keyword (install_out).
SPECIAL_OUT_FUNCTIONS = ("digamma", "psi", "entr", "erf", "erfc", "erfcx", "erfinv", "exp2", "expit", "expm1",
                         "gammainc", "gammaincc", "gammaln", "i0", "i0e", "i1", "i1e", "log1p", "log_ndtr",
                         "logit", "logsumexp", "modified_bessel_i0", "modified_bessel_i1", "multigammaln",
                         "ndtr", "ndtri", "polygamma", "round", "sinc", "xlog1py", "xlogy", "zeta",
                         "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_k0",
                         "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "airy_ai",
                         "spherical_bessel_j0", "chebyshev_polynomial_t", "chebyshev_polynomial_u",
                         "chebyshev_polynomial_v", "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
                         "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
                         "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
                         "laguerre_polynomial_l", "legendre_polynomial_p")

# The functions of tracejit.linalg given an out= keyword, by the name PyTorch's errors give them;
# the legacy spellings (tracejit.qr, .svd, ...) are defined there too.
LINALG_OUT_FUNCTIONS = {n: "linalg_" + n for n in (
    "cholesky", "cholesky_ex", "cond", "cross", "det", "eig", "eigh", "eigvals", "eigvalsh", "householder_product",
    "inv", "inv_ex", "ldl_factor", "ldl_factor_ex", "ldl_solve", "lstsq", "lu", "lu_factor", "lu_factor_ex", "lu_solve",
    "matmul", "matrix_norm", "matrix_power", "matrix_rank", "multi_dot", "norm", "pinv", "qr", "slogdet", "solve",
    "solve_ex", "solve_triangular", "svd", "svdvals", "tensorinv", "tensorsolve", "vecdot", "vector_norm")}
LINALG_OUT_FUNCTIONS.update({"cholesky_legacy": "cholesky", "qr_legacy": "qr", "svd_legacy": "svd",
                             "lu_solve_legacy": "lu_solve"})
LINALG_OUT_FUNCTIONS.update({n: n for n in ("inverse", "cholesky_inverse", "cholesky_solve", "ormqr",
                                            "triangular_solve", "lu_unpack", "frobenius_norm", "nuclear_norm")})

# The reductions that compute in out's dtype.
_IN_OUT_DTYPE = ("sum", "prod", "cumsum", "cumprod")
# The creation functions, made in out's dtype unless given another (refused then, as PyTorch).
_MADE_IN_OUT_DTYPE = ("zeros", "ones", "empty", "rand", "randn", "full", "eye", "linspace", "logspace", "arange",
                      "randint", "randperm")
# The functions whose out PyTorch takes only in the result's own dtype.
_SAME_DTYPE = frozenset(("matmul", "mm", "bmm", "mv", "dot", "inner", "addmm", "baddbmm", "amax", "amin",
                         "tril", "triu", "diag", "take", "masked_select", "msort",
                         "polar", "argmax", "argmin", "searchsorted", "bucketize", "float_power",
                         "gather", "scatter", "scatter_add", "index_select", "index_add", "index_copy",
                         "take_along_dim", "slice_scatter", "kthvalue", "median", "nanmedian", "mode", "cummax",
                         "cummin", "aminmax", "frexp", "logcumsumexp", "norm", "quantile", "nanquantile", "histc",
                         "histogram", "renorm", "addmv", "addbmm", "vdot", "tensordot", "cross",
                         "chain_matmul", "isin", "isneginf", "isposinf", "hardshrink", "softmax",
                         "log_softmax", "conj_physical", "nonzero", "round", "special_round",
                         "multinomial", *_MADE_IN_OUT_DTYPE, *LINALG_OUT_FUNCTIONS.values(),
                         *(n for n in OUT_FUNCTIONS if n.endswith("_copy")),
                         # (elementwise functions whose result keeps the input's dtype, and bool tests)
                         "neg", "negative", "abs", "absolute", "ceil", "floor", "trunc", "fix", "frac", "sign",
                         "sgn", "signbit", "nan_to_num", "heaviside", "all", "any"))
# The clamps: only the result's dtype with number bounds, any wider one with a tensor bound.
_SAME_DTYPE_WITH_NUMBERS = ("clamp", "clip", "clamp_min", "clamp_max")
_SAME_DTYPE -= {"linalg_cond", "linalg_matrix_rank", "linalg_pinv", "linalg_tensorinv", "linalg_tensorsolve",
                "linalg_householder_product", "linalg_lstsq", "cholesky", "cholesky_inverse", "cholesky_solve"}


def _write(out, value, name, same_dtype: bool):
    from .tensor import Tensor
    if not isinstance(out, Tensor):
        raise TypeError(f"{name}: out must be a Tensor, got {type(out).__name__}")
    if out.dtype.category < value.dtype.category:   # (float into an int tensor: refused as PyTorch)
        from .errors import DTypeError
        raise DTypeError(f"{name}: result type {value.dtype.name} can't be cast to the desired output "
                         f"type {out.dtype.name}")
    if same_dtype and out.dtype != value.dtype:
        from .errors import DTypeError
        raise DTypeError(f"{name}: expected out tensor to have dtype {value.dtype.name}, but got "
                         f"{out.dtype.name} instead")
    if tuple(out.shape) != tuple(value.shape):
        if out.numel():
            _warn_resized(out, value)
        out.resize_(tuple(value.shape))   # (as PyTorch does)
    from .autograd.grad_mode import no_grad
    with no_grad():
        out.copy_(value)
    return out


def _warn_resized(out, value) -> None:
    import warnings
    from .errors import user_stacklevel
    have, want = list(out.shape), list(value.shape)
    warnings.warn(f"An output with one or more elements was resized since it had shape {have}, which does "
                  f"not match the required output shape {want}. This behavior is deprecated, and in a future "
                  f"PyTorch release outputs will not be resized unless they have zero elements. You can "
                  f"explicitly reuse an out tensor t by resizing it, inplace, to zero elements with "
                  f"t.resize_(0).", UserWarning, stacklevel=user_stacklevel())


def with_out(fn, name: str):
    """`fn` with an ``out=`` keyword. Where `fn`'s signature is plain (named parameters, no
    ``*args``/``**kwargs``), the wrapper has that signature plus ``out`` and passes the
    arguments on by name (`_exact`): no argument tuple and dict are packed and unpacked on
    every call (~0.4 µs of a ~2.5 µs small ``tj.tanh(x)``). Otherwise it is generic."""
    call = _exact(fn, name)
    if call is None:
        def call(*args, out=None, **kwargs):
            if out is None:
                return fn(*args, **kwargs)
            return _call_out(fn, name, args, kwargs, out)
    return functools.wraps(fn)(call)


def install_out(namespace: dict, names, prefix: str = "") -> None:
    """Give each function `names` of `namespace` (a module's globals) an out= keyword; its
    errors name it as PyTorch's do (``special_erf()`` for prefix ``special_``), or as a dict
    `names` maps it."""
    for n in names:
        namespace[n] = with_out(namespace[n], names[n] if isinstance(names, dict) else prefix + n)


def _call_out(fn, name, args, kwargs, out):
    from .autograd.grad_mode import is_grad_enabled
    from .tensor import Tensor
    from .tensor_inplace import refuse_overlapping_operands
    for o in out if isinstance(out, (tuple, list)) else (out,):
        refuse_overlapping_operands(name, o, args)
    if name in _IN_OUT_DTYPE and isinstance(out, Tensor) and kwargs.get("dtype") is None:
        kwargs = {**kwargs, "dtype": out.dtype}   # (PyTorch's sum(float, out=long) sums longs)
    if name in _MADE_IN_OUT_DTYPE and isinstance(out, Tensor):
        if kwargs.get("dtype") is None:
            kwargs = {**kwargs, "dtype": out.dtype}   # (zeros(3, out=long tensor) makes longs)
        else:
            from .dtypes import as_dtype
            if as_dtype(kwargs["dtype"]) is not out.dtype:
                from .errors import DTypeError
                raise DTypeError(f"{name}: dtype {as_dtype(kwargs['dtype']).name} does not match dtype of out "
                                 f"parameter ({out.dtype.name})")
    result = fn(*args, **kwargs)
    if name == "bernoulli" and isinstance(out, Tensor):
        result = result.to(out.dtype)   # (0s and 1s: any out dtype takes them, as PyTorch's)
    # Refused where the result would take part in autograd, as PyTorch: argmax or eq of an
    # input requiring grad have results that do not, and fill an out.
    if is_grad_enabled() and any(isinstance(r, Tensor) and r.requires_grad
                                 for r in (result if isinstance(result, tuple) else (result,))):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic "
                           f"differentiation, but one of the arguments requires grad")
    same = name in _SAME_DTYPE or (name in _SAME_DTYPE_WITH_NUMBERS and not any(
        isinstance(a, Tensor) for a in list(args[1:]) + list(kwargs.values())))
    if isinstance(result, tuple):  # (values, indices) pairs: out is a pair too
        if not isinstance(out, (tuple, list)) or len(out) != len(result):
            raise TypeError(f"{name}: out must be a tuple of {len(result)} tensors")
        return type(result)(*(_write(o, r, name, same) for o, r in zip(out, result)))
    return _write(out, result, name, same)


def _exact(fn, name):
    """The out= wrapper with `fn`'s own signature (tracejit/exactcall.py), or None."""
    return _exactcall.forwarder(fn, out=(_call_out, name))
