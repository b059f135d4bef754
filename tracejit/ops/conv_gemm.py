"""A convolution and its two gradients as three primitives, each the others' VJP, so a
backend can run each by blocks of images (compiler/cpu/kernels/conv_blocks.py): columns of
a few images made and used while in cache, never the whole batch's.

- ``conv2d_gemm(x, w[, b])``: (N, C, H, W) by (O, C/G, kh, kw) -> (N, O, OH, OW), C-contiguous,
  plus the bias b (O,) while the block's output is in cache;
- ``conv2d_wgrad(g, x)``: the weight's gradient; with ``bias=True`` a flat record, the
  weight's gradient then the bias's;
- ``conv2d_xgrad(g, w)``: the input's gradient, W^T g folded (col2im): also
  conv_transpose2d's forward;
- ``conv_bgrad(g)``: a bias's gradient alone (no weight gradient asked for; depthwise's),
  g summed over all but its channel dim (BatchNorm's `channel_sums`).

A 1-d convolution is each primitive's on (N, C, L) operands with 1-tuples of geometry
(`as_2d`): one record, run as the height-1 2-d one on views.

With ``groups`` G (a param only where G > 1) the channels split into G groups, each its own
product over a contiguous slice of the column rows (channel-major, so a group's rows are
one run) and of the weight's output channels: one im2col for all groups. Their numpy forms
are the whole-batch im2col, one (batched over groups) GEMM and col2im (ops/conv.py), the
reference the blocked implementations match.
"""
from __future__ import annotations

import functools

import numpy as np

from ..errors import ShapeError
from ..shapes import as_dim
from .conv import _fold_impl, _ints, _out_hw, _unfold_impl
from .batchnorm_prim import channel_sums
from .eager import bind
from .registry import Aval, defprim
from .shape import narrow, reshape

__all__ = ["conv2d_gemm", "conv2d_wgrad", "conv2d_xgrad", "conv_bgrad", "as_2d", "as_2d_call"]


def _check(op: str, g, x_shape, o: int, kernel, stride, padding, dilation) -> None:
    oh, ow = _out_hw(x_shape[2], x_shape[3], kernel, stride, padding, dilation)
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"{op}: kernel {tuple(kernel)} with padding {tuple(padding)} and dilation "
                         f"{tuple(dilation)} is larger than the input of spatial size {tuple(x_shape[2:])}")
    if g is not None and tuple(g.shape) != (x_shape[0], o, oh, ow):
        raise ShapeError(f"{op}: gradient of shape {tuple(g.shape)} should be "
                         f"{(x_shape[0], o, oh, ow)} for an input of shape {tuple(x_shape)}")


def _gemm_rows(g):
    """(N, O, OH, OW) -> (O, N*OH*OW), the GEMM's layout."""
    n, o = g.shape[:2]
    return g.transpose(1, 0, 2, 3).reshape(o, -1)


def by_group(a, groups: int):
    """(R, M) rows as (G, R/G, M), a group's rows a contiguous slice (a itself where G is 1)."""
    return a if groups == 1 else a.reshape(groups, a.shape[0] // groups, a.shape[-1])


def _grouped(groups: int) -> dict:
    """The `groups` param as the primitives carry it: absent where 1 (existing IR text)."""
    return {} if groups == 1 else {"groups": groups}


# ---------------------------------------------------------------- one dimension
# A 2-d geometry param's first entry for a 1-d convolution's height-1 image.
_HEIGHT_ONE = {"kernel": 1, "stride": 1, "dilation": 1, "input_hw": 1, "padding": 0}


def _raised(a):
    """A 1-d convolution's (N, C, L) operand as (N, C, 1, L) (a bias stays as it is)."""
    if a.ndim < 2:
        return a
    if a.ndim != 3:
        raise ShapeError(f"a 1-d convolution takes 3-D operands, got shape {tuple(a.shape)}")
    if isinstance(a, Aval):
        return Aval(a.shape[:2] + (1,) + a.shape[2:], a.dtype, a.device)
    return a[:, :, None]


def _dropped(out):
    """A height-1 2-d result (N, C, 1, L) as the 1-d one's (N, C, L); a flat record as it is."""
    if out is None or out.ndim != 4:
        return out
    shape = tuple(out.shape[:2]) + tuple(out.shape[3:])
    return Aval(shape, out.dtype, out.device) if isinstance(out, Aval) else out.reshape(shape)


def _lifted(params: dict) -> dict:
    """A 1-d convolution's params as its height-1 2-d one's."""
    return {k: (_HEIGHT_ONE[k],) + tuple(v) if k in _HEIGHT_ONE else v for k, v in params.items()}


def as_2d(fn, lead: int = 0):
    """`fn(*lead, *operands, **params)` of a 2-d convolution taking a 1-d one's too, as the
    height-1 2-d one (views in, the height dropped out). `lead`: arguments before the
    operands (a numpy form's array module)."""
    @functools.wraps(fn)   # (its signature: the IR's checks count operands by it)
    def run(*args, **params):
        if len(params["kernel"]) != 1:
            return fn(*args, **params)
        return _dropped(fn(*args[:lead], *(_raised(a) for a in args[lead:]), **_lifted(params)))
    return run


def as_2d_call(spec):
    """A plan's call for a signature (`spec(shapes, dtype, params)`), as `as_2d` for 1-d ones."""
    def call(shapes, dtype, params):
        if len(params["kernel"]) != 1:
            return spec(shapes, dtype, params)
        shapes = tuple(s if s is None or len(s) != 3 else tuple(s[:2]) + (1,) + tuple(s[2:]) for s in shapes)
        f = spec(shapes, dtype, _lifted(params))
        return None if f is None else (lambda *arrays: _dropped(f(*(_raised(a) for a in arrays))))
    return call


# ---------------------------------------------------------------- forward
def _fwd_rule(x: Aval, w: Aval, *b: Aval, kernel, stride, padding, dilation, groups=1):
    if (x.ndim != 4 or w.ndim != 4 or x.shape[1] != w.shape[1] * groups or w.shape[0] % groups
            or tuple(w.shape[2:]) != tuple(kernel)):
        raise ShapeError(f"conv2d_gemm: input {tuple(x.shape)} and weight {tuple(w.shape)} do not "
                         f"fit kernel {tuple(kernel)} with groups={groups}")
    if b and tuple(b[0].shape) != (w.shape[0],):
        raise ShapeError(f"conv2d_gemm: bias of shape {tuple(b[0].shape)} should be ({w.shape[0]},)")
    _check("conv2d_gemm", None, x.shape, w.shape[0], kernel, stride, padding, dilation)
    return Aval((x.shape[0], w.shape[0]) + _out_hw(x.shape[2], x.shape[3], kernel, stride, padding,
                                                    dilation), x.dtype, x.device)


def _fwd_impl(xp, x, w, *b, kernel, stride, padding, dilation, groups=1):
    n, o = x.shape[0], w.shape[0]
    oh, ow = _out_hw(x.shape[2], x.shape[3], kernel, stride, padding, dilation)
    cols = _unfold_impl(xp, x, kernel, stride, padding, dilation, 0.0, "gemm")
    out = xp.matmul(by_group(w.reshape(o, -1), groups), by_group(cols, groups)).reshape(o, -1)
    if b:
        out += b[0].reshape(o, 1)
    return xp.ascontiguousarray(out.reshape(o, n, oh, ow).transpose(1, 0, 2, 3))


def _split_wgrad(rec, o: int, shape):
    """conv2d_wgrad(bias=True)'s record -> (the weight's gradient, the bias's)."""
    k = rec.shape[0] - o
    return reshape(narrow(rec, 0, 0, k), shape), narrow(rec, 0, k, o)


def _fwd_vjp(g, out, x, w, *b, kernel, stride, padding, dilation, groups=1, needs=None):
    needs = needs or (True,) * (2 + len(b))
    geo = dict(kernel=kernel, stride=stride, padding=padding, dilation=dilation, **_grouped(groups))
    gx = bind(CONV2D_XGRAD, g, w, input_hw=tuple(x.shape[2:]), **geo) if needs[0] else None
    bias = bool(b) and needs[2]
    gw = gb = None
    if needs[1]:   # (with the bias's in one record: the blocks sum it while in cache)
        gw = bind(CONV2D_WGRAD, g, x, bias=bias, **geo)
        if bias:
            gw, gb = _split_wgrad(gw, g.shape[1], (g.shape[1], x.shape[1] // groups) + tuple(kernel))
    elif bias:
        gb = bind(CONV_BGRAD, g)
    return (gx, gw, gb) if b else (gx, gw)


# ---------------------------------------------------------------- weight gradient
def _wgrad_rule(g: Aval, x: Aval, kernel, stride, padding, dilation, bias=False, groups=1):
    if g.ndim != 4 or x.ndim != 4:
        raise ShapeError(f"conv2d_wgrad: expected 4-D gradient and input, got {tuple(g.shape)} and "
                         f"{tuple(x.shape)}")
    if x.shape[1] % groups or g.shape[1] % groups:
        raise ShapeError(f"conv2d_wgrad: input {tuple(x.shape)} and gradient {tuple(g.shape)} do not "
                         f"split into groups={groups}")
    _check("conv2d_wgrad", g, x.shape, g.shape[1], kernel, stride, padding, dilation)
    shape = (g.shape[1], x.shape[1] // groups) + tuple(kernel)
    if bias:
        return Aval((g.shape[1] * (shape[1] * kernel[0] * kernel[1] + 1),), x.dtype, x.device)
    return Aval(shape, x.dtype, x.device)


def _wgrad_impl(xp, g, x, kernel, stride, padding, dilation, bias=False, groups=1):
    cols = _unfold_impl(xp, x, kernel, stride, padding, dilation, 0.0, "gemm")
    rows = _gemm_rows(g)
    dw = xp.matmul(by_group(rows, groups), xp.swapaxes(by_group(cols, groups), -1, -2))
    if bias:
        return xp.concatenate([dw.reshape(-1), rows.sum(1)])
    return dw.reshape((g.shape[1], x.shape[1] // groups) + tuple(kernel))


def _wgrad_vjp(u, out, g, x, kernel, stride, padding, dilation, bias=False, groups=1, needs=(True, True)):
    geo = dict(kernel=kernel, stride=stride, padding=padding, dilation=dilation, **_grouped(groups))
    ub = ()
    if bias:
        u, ub = _split_wgrad(u, g.shape[1], (g.shape[1], x.shape[1] // groups) + tuple(kernel))
        ub = (ub,)
    gg = bind(CONV2D_GEMM, x, u, *ub, **geo) if needs[0] else None
    gx = bind(CONV2D_XGRAD, g, u, input_hw=tuple(x.shape[2:]), **geo) if needs[1] else None
    return gg, gx


# ---------------------------------------------------------------- input gradient
def _xgrad_rule(g: Aval, w: Aval, input_hw, kernel, stride, padding, dilation, groups=1):
    if g.ndim != 4 or w.ndim != 4 or g.shape[1] != w.shape[0] or w.shape[0] % groups:
        raise ShapeError(f"conv2d_xgrad: gradient {tuple(g.shape)} does not fit weight {tuple(w.shape)} "
                         f"with groups={groups}")
    shape = (g.shape[0], w.shape[1] * groups) + tuple(input_hw)
    _check("conv2d_xgrad", g, shape, w.shape[0], kernel, stride, padding, dilation)
    return Aval(shape, g.dtype, g.device)


def _xgrad_impl(xp, g, w, input_hw, kernel, stride, padding, dilation, groups=1):
    wg = by_group(w.reshape(w.shape[0], -1), groups)
    cols = xp.matmul(xp.swapaxes(wg, -1, -2), by_group(_gemm_rows(g), groups))
    cols = cols.reshape(int(np.prod(cols.shape[:-1])), cols.shape[-1])   # (not -1: an empty batch)
    return xp.ascontiguousarray(_fold_impl(xp, cols, tuple(input_hw), kernel, stride, padding, dilation,
                                           "gemm"))


def _xgrad_vjp(u, out, g, w, input_hw, kernel, stride, padding, dilation, groups=1, needs=(True, True)):
    geo = dict(kernel=kernel, stride=stride, padding=padding, dilation=dilation, **_grouped(groups))
    gg = bind(CONV2D_GEMM, u, w, **geo) if needs[0] else None
    gw = bind(CONV2D_WGRAD, g, u, **geo) if needs[1] else None
    return gg, gw


# ---------------------------------------------------------------- bias gradient
def _bgrad_rule(g: Aval):
    if g.ndim < 2:
        raise ShapeError(f"conv_bgrad: expected a gradient of 2 or more dims (N, C, ...), got shape {tuple(g.shape)}")
    return Aval((g.shape[1],), g.dtype, g.device)


def _bgrad_impl(xp, g):
    g3 = g.reshape(g.shape[0], g.shape[1], int(np.prod(g.shape[2:])))
    if xp is np:   # (BatchNorm's sums over N and L, in the memory's order)
        return channel_sums(np, g3).astype(g.dtype, copy=False)
    return g3.sum((0, 2))


def _bgrad_vjp(u, out, g, needs=(True,)):
    from .shape import expand
    return (expand(reshape(u, (1, u.shape[0]) + (1,) * (g.ndim - 2)), tuple(g.shape)),)


def _saves(rq):
    """The operands a VJP reads: each input's gradient needs the other operand's values."""
    return tuple(i for i, other in ((1, 0), (0, 1)) if rq[other])


def _meta(pos: int):
    """An image operand (position 0 of conv2d_gemm, 1 of conv2d_wgrad) whose shape alone
    a gradient reads (input_hw) where its values are not saved."""
    return lambda flags: (pos,) if flags[pos] and not flags[1 - pos] else ()


_EXTRA = {"needs": True}
CONV2D_GEMM = defprim("conv2d_gemm", as_2d(_fwd_impl, 1), as_2d(_fwd_rule), _fwd_vjp, kind="other", save=_saves,
                      grad_name="ConvolutionBackward0", extra=dict(_EXTRA, meta=_meta(0)))
CONV2D_WGRAD = defprim("conv2d_wgrad", as_2d(_wgrad_impl, 1), as_2d(_wgrad_rule), _wgrad_vjp, kind="other", save=_saves,
                       extra=dict(_EXTRA, meta=_meta(1)))
CONV2D_XGRAD = defprim("conv2d_xgrad", as_2d(_xgrad_impl, 1), as_2d(_xgrad_rule), _xgrad_vjp, kind="other", save=_saves,
                       extra=dict(_EXTRA))
CONV_BGRAD = defprim("conv_bgrad", _bgrad_impl, _bgrad_rule, _bgrad_vjp, kind="other", save=lambda rq: (),
                     extra=dict(_EXTRA, meta=lambda flags: (0,) if flags[0] else ()))


def _geometry(stride, padding, dilation, groups: int = 1, nd: int = 2) -> dict:
    """The geometry params of an `nd`-d convolution (2, or 1: `as_2d`), as n-tuples."""
    def tup(v):
        if _ints(v, nd):   # (the common call, as it is)
            return v if type(v) is tuple else (v,) * nd
        return (int(v),) * nd if isinstance(v, (int, np.integer)) else tuple(int(e) for e in v)
    return dict(stride=tup(stride), padding=tup(padding), dilation=tup(dilation), **_grouped(int(groups)))


def conv2d_gemm(x, w, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """The convolution of x (N, C, H, W) with w (O, C/groups, kh, kw), plus the bias (O,)
    if given (of x's dtype); of x (N, C, L) with w (O, C/groups, k) in one dimension."""
    b = () if bias is None else (bias,)
    return bind(CONV2D_GEMM, x, w, *b, kernel=tuple(int(k) for k in w.shape[2:]),
                **_geometry(stride, padding, dilation, groups, w.ndim - 2))


def conv2d_wgrad(g, x, kernel, stride=1, padding=0, dilation=1, bias: bool = False, groups: int = 1):
    """The gradient of `conv2d_gemm`'s weight (O, C/groups, kh, kw) for output gradient g;
    with `bias`, (that, the bias's gradient (O,))."""
    rec = bind(CONV2D_WGRAD, g, x, kernel=tuple(int(k) for k in kernel), bias=bool(bias),
               **_geometry(stride, padding, dilation, groups, len(kernel)))
    return _split_wgrad(rec, g.shape[1], (g.shape[1], x.shape[1] // groups) + tuple(kernel)) if bias else rec


def conv_bgrad(g):
    """The gradient of a convolution's bias (C,) for output gradient g (N, C, ...)."""
    return bind(CONV_BGRAD, g)


def conv2d_xgrad(g, w, input_hw, stride=1, padding=0, dilation=1, groups: int = 1):
    """The gradient of `conv2d_gemm`'s input (N, C, *input_hw) for output gradient g; with
    g an input and w (C_in, C_out/groups, kh, kw), conv_transpose2d's result."""
    return bind(CONV2D_XGRAD, g, w, input_hw=tuple(as_dim(s) for s in input_hw),
                kernel=tuple(int(k) for k in w.shape[2:]),
                **_geometry(stride, padding, dilation, groups, w.ndim - 2))
