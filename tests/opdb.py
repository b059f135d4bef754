"""The op database: one record per public op, driving every per-op test.

``from opdb import OPS`` (the tests directory is put on ``sys.path`` by
``tests/conftest.py``). ``OPS`` is a list of `OpInfo`; ``OPS_BY_NAME`` maps names to them.

An `OpInfo` holds

- ``name``: unique id (``"add"``, ``"sum.dim"``, ``"conv2d"``...);
- ``f(m, *tensors, **kwargs)``: the op written once against a module ``m``: ``tracejit``
  or ``torch`` (``F(m)`` gives ``torch.nn.functional`` for torch and ``tracejit`` for
  tracejit), so the same function is the tracejit op and the PyTorch reference;
- ``ref(*arrays, **kwargs)``: the numpy reference (float inputs are upcast to float64
  first unless ``upcast=False``); returns an array, or a tuple for multi-output ops;
- ``samples(dtype, rng) -> list[Sample]``: the inputs to try;
- ``dtypes``: tracejit dtypes the samples are made in;
- ``grad``: differentiable (w.r.t. each sample's ``grad`` positions, by default every
  floating input);
- ``traceable``: False when tracing cannot capture the op (a width read from the data);
- ``random``: output is random (only shapes/dtypes/statistics can be compared);
- ``torch``: False when there is no matching PyTorch call; ``atol``/``rtol``: forward
  tolerances for float32 (float64 uses 1e-10/1e-7).

A `Sample` holds ``inputs`` (numpy arrays: the tensor arguments, in order), ``kwargs``
(every non-tensor argument: dims, Python scalars, index templates), ``grad`` (positions in
``inputs`` to differentiate w.r.t.), ``desc``, and bound callables taking only tensors:

- ``sample.fn(*tensors)``: the tracejit op with kwargs bound: what traced/compiled
  runners call, e.g. ``tracejit.jit.trace(sample.fn)(*tensors)``;
- ``sample.ref_fn(*arrays)``: the numpy reference;
- ``sample.torch_fn(*torch_tensors)``: the PyTorch op (None when ``torch`` is False).

Typical use (``samples_for(op)`` yields ``(dtype, sample)`` over ``op.dtypes``, seeded)::

    from opdb import OPS, samples_for
    for op in OPS:
        if not op.traceable or op.random:
            continue                                # data-dependent shapes / random output
        for dtype, s in samples_for(op):
            ts = s.tensors()                        # tracejit tensors of s.inputs
            out = s.fn(*ts)                         # Tensor or tuple of Tensors
            expect = s.ref_fn(*s.inputs)            # numpy (float inputs upcast to float64)
            grads_wrt = s.grad                      # positions in s.inputs; s.check_fd, s.gradgrad

Adding an op is one record below (plus, if it is new, its definition in tracejit.ops).
"""
from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

import tracejit as tj
from tracejit.ops import conv as _conv_ops

F32, F64 = tj.float32, tj.float64
I32, I64 = tj.int32, tj.int64
FLOATS = (F32, F64)
INTS = (I32, I64)
NUMERIC = FLOATS + INTS


class _TracejitFunctional:
    """tracejit's functional namespace as a test reads it: ``tracejit.nn.functional``'s
    name where it has one (the top-level losses differ: integer reductions), else the
    top-level op of that name."""

    def __getattr__(self, name):
        return getattr(tj.nn.functional, name, None) or getattr(tj, name)


_TJ_F = _TracejitFunctional()


def F(m):
    """The functional namespace: ``torch.nn.functional`` or tracejit's (see above)."""
    return _TJ_F if m is tj else m.nn.functional


# --------------------------------------------------------------------------- records
@dataclass
class Sample:
    inputs: tuple
    kwargs: dict = field(default_factory=dict)
    grad: Optional[tuple] = None
    desc: str = ""
    check_fd: bool = True  # False: gradient is not the derivative of the forward (e.g. padding_idx)
    gradgrad: bool = True  # False: skip the second-derivative check for this sample
    op: Any = None  # the OpInfo, filled in by OpInfo.sample_inputs

    @property
    def fn(self) -> Callable:
        return functools.partial(self.op.f, tj, **self.kwargs)

    @property
    def ref_fn(self) -> Callable:
        op, kw = self.op, self.kwargs

        def ref(*arrays):
            if op.upcast:
                arrays = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]
            return op.ref(*arrays, **kw)
        return ref

    @property
    def torch_fn(self) -> Optional[Callable]:
        if not self.op.torch:
            return None
        import torch
        return functools.partial(self.op.f, torch, **self.kwargs)

    def tensors(self, dtype_override=None, requires_grad: bool = False) -> list:
        """The inputs as tracejit tensors (floating ones cast to `dtype_override` if given);
        with requires_grad, the `grad` positions require grad."""
        out = []
        for i, a in enumerate(self.inputs):
            if dtype_override is not None and a.dtype.kind == "f":
                a = a.astype(dtype_override.np)
            t = tj.tensor(a)
            if requires_grad and i in self.grad:
                t.requires_grad_()
            out.append(t)
        return out

    def __repr__(self) -> str:
        shapes = ", ".join(f"{a.dtype}{list(a.shape)}" for a in self.inputs)
        kw = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"<{self.op.name}: {self.desc or ''} ({shapes}) {kw}>"


@dataclass
class OpInfo:
    name: str
    f: Callable
    ref: Callable
    samples: Callable
    dtypes: tuple = FLOATS
    grad: bool = True
    traceable: bool = True
    random: bool = False
    torch: bool = True
    upcast: bool = True
    atol: float = 2e-5
    rtol: float = 2e-5

    def op(self, *tensors, **kwargs):
        """The tracejit op: ``op(*tensors, **sample.kwargs)``."""
        return self.f(tj, *tensors, **kwargs)

    def sample_inputs(self, dtype, rng) -> list:
        out = []
        for s in self.samples(dtype, rng):
            s.op = self
            if s.grad is None:
                s.grad = tuple(i for i, a in enumerate(s.inputs) if a.dtype.kind == "f") if self.grad else ()
            out.append(s)
        return out

    def __repr__(self) -> str:
        return f"OpInfo({self.name})"


OPS: list = []


def register(name, f, ref, samples, **kw) -> OpInfo:
    op = OpInfo(name, f, ref, samples, **kw)
    OPS.append(op)
    return op


# --------------------------------------------------------------------------- input makers
def arr(rng, shape, dtype, low=-2.0, high=2.0):
    """Random values of a tracejit dtype (ints in [low, high], bools half true)."""
    dtype = tj.dtypes.as_dtype(dtype)
    if dtype.is_floating_point:
        return np.asarray(rng.uniform(low, high, shape), dtype.np)
    if dtype.is_bool:
        return np.asarray(rng.random(shape) > 0.5)
    return np.asarray(rng.integers(int(low), int(high) + 1, shape), dtype.np)


def away(rng, shape, dtype, lo=0.2, hi=2.0):
    """Values with |x| in [lo, hi], random sign: keeps clear of kinks at 0."""
    dtype = tj.dtypes.as_dtype(dtype)
    if not dtype.is_floating_point:
        v = rng.integers(1, 4, shape) * rng.choice([-1, 1], shape)
        return np.asarray(v, dtype.np)
    return np.asarray(rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape), dtype.np)


def pos(rng, shape, dtype, lo=0.3, hi=2.0):
    dtype = tj.dtypes.as_dtype(dtype)
    if not dtype.is_floating_point:
        return np.asarray(rng.integers(1, 5, shape), dtype.np)
    return np.asarray(rng.uniform(lo, hi, shape), dtype.np)


def distinct(rng, shape, dtype):
    """Values at least 0.1 apart (no ties: max/min/sort gradients are then smooth)."""
    n = int(np.prod(shape)) if shape else 1
    v = (rng.permutation(n) - n / 2) * 0.1 + rng.uniform(0, 0.01, n)
    dtype = tj.dtypes.as_dtype(dtype)
    if not dtype.is_floating_point:
        v = rng.permutation(n) - n // 2
    return v.reshape(shape).astype(dtype.np)


def idx(rng, shape, n):
    return np.asarray(rng.integers(0, n, shape), np.int64)


# Shapes for binary elementwise ops: equal, broadcasting, 0-d, 0-size, 1-size.
BINARY_SHAPES = [
    ((3, 4), (3, 4)),
    ((2, 3, 4), (4,)),
    ((2, 1, 4), (3, 1)),
    ((), (3,)),
    ((3,), ()),
    ((1,), (0,)),
    ((0, 3), (1, 3)),
    ((2, 3), (2, 1)),
]
UNARY_SHAPES = [(3, 4), (), (0, 3), (1, 5), (2, 1, 3)]


def _binary_samples(make_a=arr, make_b=None, scalars=(2.5, -1.5), int_scalars=None):
    """Broadcasting pairs, plus tensor-op-scalar samples (none when scalars is empty)."""
    make_b = make_b or make_a
    if int_scalars is None:
        int_scalars = (3, -2) if scalars else ()

    def samples(dtype, rng):
        out = [Sample((make_a(rng, sa, dtype), make_b(rng, sb, dtype)), desc=f"{sa}x{sb}")
               for sa, sb in BINARY_SHAPES]
        sc = scalars if tj.dtypes.as_dtype(dtype).is_floating_point else int_scalars
        for s in sc:
            out.append(Sample((make_a(rng, (3, 2), dtype),), {"scalar": s}, desc="tensor op scalar"))
        if sc:
            out.append(Sample((make_b(rng, (4,), dtype),), {"scalar": sc[0], "rev": True},
                              desc="scalar op tensor"))
        return out
    return samples


def _unary_samples(make=arr, shapes=UNARY_SHAPES):
    def samples(dtype, rng):
        return [Sample((make(rng, s, dtype),), desc=str(s)) for s in shapes]
    return samples


def _bin(fname):
    """A binary op over two tensors, or a tensor and a Python scalar (kwargs scalar/rev)."""
    def f(m, *ts, scalar=None, rev=False):
        fn = getattr(m, fname)
        if scalar is None:
            return fn(*ts)
        return fn(scalar, ts[0]) if rev else fn(ts[0], scalar)
    f.__name__ = fname
    return f


def _bin_ref(npfn):
    def ref(*arrays, scalar=None, rev=False):
        if scalar is None:
            return npfn(*arrays)
        return npfn(scalar, arrays[0]) if rev else npfn(arrays[0], scalar)
    return ref


def _un(fname, functional=False):
    def f(m, x, **kw):
        return getattr(F(m) if functional else m, fname)(x, **kw)
    f.__name__ = fname
    return f


_np_erf = np.vectorize(math.erf, otypes=[np.float64])


def _np_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# --------------------------------------------------------------------------- elementwise
register("add", _bin("add"), _bin_ref(np.add), _binary_samples(), dtypes=NUMERIC)
register("sub", _bin("sub"), _bin_ref(np.subtract), _binary_samples(), dtypes=NUMERIC)
register("mul", _bin("mul"), _bin_ref(np.multiply), _binary_samples(), dtypes=NUMERIC)
register("div", _bin("div"), _bin_ref(np.true_divide), _binary_samples(arr, away, scalars=(2.5,)),
         dtypes=NUMERIC)
register("add.alpha", lambda m, a, b: m.add(a, b, alpha=2), lambda a, b: a + 2 * b,
         _binary_samples(scalars=()), dtypes=FLOATS)
register("div.floor", lambda m, a, b: m.div(a, b, rounding_mode="floor"),
         lambda a, b: np.floor_divide(a, b), _binary_samples(away, away, scalars=()),
         dtypes=NUMERIC, grad=False)
register("div.trunc", lambda m, a, b: m.div(a, b, rounding_mode="trunc"),
         lambda a, b: np.trunc(a / b).astype(np.result_type(a, b)) if a.dtype.kind != "f" else np.trunc(a / b),
         _binary_samples(away, away, scalars=()), dtypes=NUMERIC, grad=False)
register("floor_divide", _bin("floor_divide"), _bin_ref(np.floor_divide),
         _binary_samples(away, away, scalars=(1.5,), int_scalars=(2,)), dtypes=NUMERIC, grad=False)
register("remainder", _bin("remainder"), _bin_ref(np.remainder),
         _binary_samples(away, away, scalars=(1.5,), int_scalars=(2,)), dtypes=NUMERIC, grad=False)


def _off_multiples(r, shape, d, step=1.5):
    """Values at least 0.2 away from every multiple of `step` (remainder's jumps)."""
    k = r.integers(-3, 3, shape)
    return np.asarray(k * step + r.uniform(0.2, step - 0.2, shape), d.np)


# remainder's gradient: 1 for the dividend, -floor(a / b) for a tensor divisor (with the
# dividend alone requiring grad, the divisor is not saved and gets no gradient)
register("remainder.grad", lambda m, a, b=None: m.remainder(a, 1.5 if b is None else b),
         lambda a, b=None: np.remainder(a, 1.5 if b is None else b),
         lambda d, r: [Sample((_off_multiples(r, (3, 4), d),)),
                       Sample((_off_multiples(r, (3, 4), d), np.full((3, 4), 1.5, d.np)), grad=(0,)),
                       Sample((_off_multiples(r, (2, 3), d), np.full((3,), 1.5, d.np)))])
register("pow", _bin("pow"), _bin_ref(np.power),
         _binary_samples(pos, arr, scalars=(2, 3.0, 0.5, -1.5)), dtypes=FLOATS)
register("pow.int", _bin("pow"), _bin_ref(np.power),
         _binary_samples(arr, lambda r, s, d: r.integers(0, 3, s).astype(d.np), int_scalars=(2, 3)),
         dtypes=INTS)
register("maximum", _bin("maximum"), _bin_ref(np.maximum), _binary_samples(scalars=()), dtypes=NUMERIC)
register("minimum", _bin("minimum"), _bin_ref(np.minimum), _binary_samples(scalars=()), dtypes=NUMERIC)

def _cmp(opfn):
    """Comparisons as operators (``t < 2``, and ``2 < t`` reflected), like user code writes them."""
    def f(m, *ts, scalar=None, rev=False):
        if scalar is None:
            return opfn(*ts)
        return opfn(scalar, ts[0]) if rev else opfn(ts[0], scalar)
    return f


for _name, _npf, _opf in [("eq", np.equal, operator.eq), ("ne", np.not_equal, operator.ne),
                          ("lt", np.less, operator.lt), ("le", np.less_equal, operator.le),
                          ("gt", np.greater, operator.gt), ("ge", np.greater_equal, operator.ge)]:
    # Small integer values (also as floats) so that equality actually happens.
    register(_name, _cmp(_opf), _bin_ref(_npf),
             _binary_samples(lambda r, s, d: r.integers(-2, 3, s).astype(tj.dtypes.as_dtype(d).np),
                             scalars=(1.0, 0.5), int_scalars=(1,)),
             dtypes=NUMERIC, grad=False)

register("eq.function", _bin("eq"), _bin_ref(np.equal),
         _binary_samples(lambda r, s, d: r.integers(-2, 3, s).astype(tj.dtypes.as_dtype(d).np), scalars=()),
         dtypes=NUMERIC, grad=False)
register("logical_and", _bin("logical_and"), _bin_ref(np.logical_and),
         _binary_samples(scalars=()), dtypes=(tj.bool_,), grad=False)
register("logical_or", _bin("logical_or"), _bin_ref(np.logical_or),
         _binary_samples(scalars=()), dtypes=(tj.bool_,), grad=False)
register("logical_not", _un("logical_not"), np.logical_not, _unary_samples(), dtypes=(tj.bool_,), grad=False)

_UNARY = [
    # name, numpy ref, input maker, dtypes
    ("neg", np.negative, arr, NUMERIC),
    ("abs", np.abs, away, NUMERIC),
    ("exp", np.exp, arr, FLOATS + (I64,)),
    ("expm1", np.expm1, arr, FLOATS),
    ("log", np.log, pos, FLOATS + (I64,)),
    ("log1p", np.log1p, pos, FLOATS),
    ("sqrt", np.sqrt, pos, FLOATS + (I32,)),
    ("rsqrt", lambda x: 1 / np.sqrt(x), pos, FLOATS),
    ("sin", np.sin, arr, FLOATS),
    ("cos", np.cos, arr, FLOATS),
    ("tanh", np.tanh, arr, FLOATS + (I64,)),
    ("sigmoid", _np_sigmoid, arr, FLOATS + (I64,)),
    ("relu", lambda x: np.maximum(x, 0).astype(x.dtype), away, NUMERIC),
    ("erf", _np_erf, arr, FLOATS),
    ("square", np.square, arr, NUMERIC),
    ("floor", np.floor, arr, FLOATS),
]
for _name, _npf, _mk, _dts in _UNARY:
    register(_name, _un(_name), _npf, _unary_samples(_mk), dtypes=_dts)

register("sign", _un("sign"), np.sign, _unary_samples(away), dtypes=NUMERIC, grad=False)
register("sigmoid.extreme", _un("sigmoid"), _np_sigmoid,
         lambda d, r: [Sample((np.array([-100.0, -30.0, 0.0, 30.0, 100.0], d.np),))], grad=False)


def _special(rng, shape, dtype):
    a = arr(rng, shape, dtype)
    flat = a.reshape(-1)
    for i, v in enumerate([np.nan, np.inf, -np.inf][: flat.size]):
        flat[i] = v
    return a


for _name, _npf in [("isnan", np.isnan), ("isinf", np.isinf), ("isfinite", np.isfinite)]:
    register(_name, _un(_name), _npf, _unary_samples(_special, [(3, 4), (), (0,)]), grad=False)
def _isclose_samples(dtype, rng):
    a = _special(rng, (3, 4), dtype)
    b = a.copy()
    b.reshape(-1)[3:7] += np.array([1e-7, 1e-3, 0.0, 5.0], dtype.np)
    return [Sample((a, b)), Sample((a, b), {"equal_nan": True}), Sample((a, b), {"rtol": 1e-2, "atol": 0.0})]


register("isclose", lambda m, a, b, **kw: m.isclose(a, b, **kw), lambda a, b, **kw: np.isclose(a, b, **kw),
         _isclose_samples, grad=False, upcast=False)
register("nan_to_num", lambda m, x: m.nan_to_num(x, nan=0.5, posinf=100.0, neginf=-100.0),
         lambda x: np.nan_to_num(x, nan=0.5, posinf=100.0, neginf=-100.0),
         _unary_samples(_special, [(3, 4)]), grad=False)

for _name, _npf, _kw in [
    ("gelu", lambda x: 0.5 * x * (1 + _np_erf(x / math.sqrt(2))), {}),
    ("gelu.tanh", lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
     {"approximate": "tanh"}),
    ("silu", lambda x: x * _np_sigmoid(x), {}),
    ("softplus", lambda x: np.log1p(np.exp(x)), {}),
    ("softplus.beta", lambda x: np.where(2 * x > 1, x, np.log1p(np.exp(2 * x)) / 2), {"beta": 2.0, "threshold": 1.0}),
    ("leaky_relu", lambda x: np.where(x > 0, x, 0.01 * x), {}),
    ("logsigmoid", lambda x: -np.log1p(np.exp(-x)), {}),
]:
    register(_name, functools.partial(lambda m, x, _fn, **kw: getattr(F(m), _fn)(x, **kw),
                                      _fn=_name.split(".")[0], **_kw),
             _npf, _unary_samples(away), dtypes=FLOATS)


def _clamp_samples(dtype, rng):
    x = away(rng, (3, 4), dtype)
    lo, hi = (-1, 1) if not dtype.is_floating_point else (-0.5, 0.7)
    return [Sample((x,), {"min": lo, "max": hi}), Sample((x,), {"min": lo}),
            Sample((away(rng, (5,), dtype),), {"max": hi}),
            Sample((away(rng, (2, 0), dtype),), {"min": lo, "max": hi})]


register("clamp", lambda m, x, **kw: m.clamp(x, **kw), lambda x, min=None, max=None: np.clip(x, min, max),
         _clamp_samples, dtypes=NUMERIC)
register("clamp.tensor", lambda m, x, lo, hi: m.clamp(x, lo, hi), lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi),
         lambda d, r: [Sample((distinct(r, (3, 4), d), distinct(r, (4,), d) - 0.05, distinct(r, (3, 1), d) + 0.55))])


def _where_samples(dtype, rng):
    return [Sample((rng.random(sc) > 0.5, arr(rng, sa, dtype), arr(rng, sb, dtype)), desc=f"{sc},{sa},{sb}")
            for sc, sa, sb in [((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), (4,)), ((), (2,), ()),
                               ((0, 2), (1, 2), (2,))]] + [
        Sample((rng.random((3, 4)) > 0.5, arr(rng, (3, 4), dtype)), {"scalar": 0.0 if dtype.is_floating_point else 0},
               desc="scalar other")]


def _where(m, c, a, b=None, scalar=None):
    return m.where(c, a, b if scalar is None else scalar)


register("where", _where, lambda c, a, b=None, scalar=None: np.where(c, a, b if scalar is None else scalar),
         _where_samples, dtypes=NUMERIC)


# --------------------------------------------------------------------------- reductions
def _red_samples(make=arr, shapes=((3, 4), (2, 3, 4), (), (0, 3), (1, 5)), allow_empty=True,
                 dims=True, keepdim_only=False):
    def samples(dtype, rng):
        out = []
        for s in shapes:
            if not allow_empty and 0 in s:
                continue
            x = make(rng, s, dtype)
            out.append(Sample((x,), {}, desc=f"{s} all"))
            if not dims:
                continue
            nd = len(s)
            for d in ([0, -1] if nd else [0]):
                if not allow_empty and 0 in s:
                    continue
                out.append(Sample((x,), {"dim": d}, desc=f"{s} dim={d}"))
                out.append(Sample((x,), {"dim": d, "keepdim": True}, desc=f"{s} dim={d} keepdim"))
            if nd >= 2 and not keepdim_only:
                out.append(Sample((x,), {"dim": (0, -1)}, desc=f"{s} dims (0,-1)"))
                out.append(Sample((x,), {"dim": (-1, 0), "keepdim": True}, desc=f"{s} dims keepdim"))
        return out
    return samples


def _axis(dim):
    return None if dim is None else (tuple(dim) if isinstance(dim, (tuple, list)) else dim)


def _red(fname):
    def f(m, x, **kw):
        return getattr(m, fname)(x, **kw)
    return f


def _np_red(npf, **extra):
    def ref(x, dim=None, keepdim=False, **kw):
        if x.ndim == 0:
            dim = None  # dim 0 / -1 of a 0-d tensor is the tensor itself
        return npf(x, axis=_axis(dim), keepdims=keepdim, **extra, **kw)
    return ref


register("sum", _red("sum"), _np_red(np.sum), _red_samples(shapes=((3, 4), (2, 3, 4), (), (0, 3), (1, 5), (40, 3))),
         dtypes=NUMERIC + (tj.bool_,))
register("mean", _red("mean"), _np_red(np.mean), _red_samples(shapes=((3, 4), (2, 3, 4), (), (1, 5))))
register("prod", _red("prod"), _np_red(np.prod),
         _red_samples(shapes=((3, 4), (), (1, 5), (64, 3)), dims=True, keepdim_only=True), dtypes=NUMERIC)
# One zero in a slice: the gradient there is the product of the others. Two zeros: the
# gradient is 0 (right), but its derivative is not (a known limitation of prod's VJP).
register("prod.zeros", lambda m, x, **kw: m.prod(x, **kw), _np_red(np.prod),
         lambda d, r: [Sample((np.array([[1.5, 0.0, 2.0], [0.7, 1.1, 3.0], [0.5, 1.2, -2.0]], d.np),), kw)
                       for kw in ({"dim": 1}, {"dim": 0, "keepdim": True})] + [
             Sample((np.array([[1.5, 0.0, 2.0], [0.0, 0.0, 3.0]], d.np),), kw, gradgrad=False)
             for kw in ({}, {"dim": 1})])


def _np_var(fn):
    def ref(x, dim=None, keepdim=False, correction=1, unbiased=None):
        ddof = correction if unbiased is None else int(unbiased)
        return fn(x, axis=_axis(dim), keepdims=keepdim, ddof=ddof)
    return ref


def _var_samples(dtype, rng):
    x = arr(rng, (3, 4), dtype)
    return [Sample((x,), {}), Sample((x,), {"dim": 1}), Sample((x,), {"dim": 0, "keepdim": True}),
            Sample((x,), {"dim": -1, "correction": 0}), Sample((x,), {"unbiased": False}),
            Sample((arr(rng, (2, 3, 4), dtype),), {"dim": (0, 2), "correction": 2})]


register("var", _red("var"), _np_var(np.var), _var_samples)
register("std", _red("std"), _np_var(np.std), _var_samples)

for _name, _npf in [("amax", np.amax), ("amin", np.amin)]:
    register(_name, _red(_name), _np_red(_npf),
             _red_samples(distinct, shapes=((3, 4), (2, 3, 4), (), (1, 5), (40, 3)), allow_empty=False),
             dtypes=NUMERIC)


def _np_argx(npf):
    def ref(x, dim=None, keepdim=False):
        if dim is None:
            r = np.asarray(npf(x.reshape(-1)))
            return r.reshape((1,) * x.ndim) if keepdim else r
        r = npf(x, axis=dim)
        return np.expand_dims(r, dim) if keepdim else r
    return ref


def _argx_samples(dtype, rng):
    x = distinct(rng, (3, 4), dtype)
    ties = np.array([[1, 3, 3], [2, 2, 0]], dtype.np)  # first occurrence wins
    return [Sample((x,)), Sample((x,), {"dim": 1}), Sample((x,), {"dim": -2, "keepdim": True}),
            Sample((x,), {"keepdim": True}), Sample((ties,), {"dim": 1}), Sample((ties,)),
            Sample((distinct(rng, (), dtype),))]


register("argmax", _red("argmax"), _np_argx(np.argmax), _argx_samples, dtypes=NUMERIC, grad=False)
register("argmin", _red("argmin"), _np_argx(np.argmin), _argx_samples, dtypes=NUMERIC, grad=False)


def _np_max_dim(npf, argf):
    def ref(x, dim=None, keepdim=False):
        if dim is None:
            return npf(x)
        return (npf(x, axis=dim, keepdims=keepdim), _np_argx(argf)(x, dim, keepdim))
    return ref


def _max_f(name):
    def f(m, x, **kw):
        r = getattr(m, name)(x, **kw)
        return tuple(r) if isinstance(r, tuple) else r  # torch's namedtuple -> tuple
    return f


def _maxdim_samples(dtype, rng):
    x = distinct(rng, (3, 4), dtype)
    return [Sample((x,)), Sample((x,), {"dim": 1}), Sample((x,), {"dim": 0, "keepdim": True}),
            Sample((distinct(rng, (2, 3, 2), dtype),), {"dim": -1})]


register("max", _max_f("max"), _np_max_dim(np.max, np.argmax), _maxdim_samples, dtypes=NUMERIC)
register("min", _max_f("min"), _np_max_dim(np.min, np.argmin), _maxdim_samples, dtypes=NUMERIC)
register("max.binary", lambda m, a, b: m.max(a, b), np.maximum,
         lambda d, r: [Sample((distinct(r, (3, 4), d), distinct(r, (4,), d) + 0.05))])


def _np_logsumexp(x, dim=None, keepdim=False):
    ax = _axis(dim)
    if x.size == 0:
        return np.log(np.sum(np.exp(x), axis=ax, keepdims=keepdim))
    mx = np.max(x, axis=ax, keepdims=True)
    r = np.log(np.sum(np.exp(x - mx), axis=ax, keepdims=True)) + mx
    return r if keepdim else np.squeeze(r, axis=ax if ax is not None else tuple(range(x.ndim)))


def _lse_samples(dtype, rng):
    x = arr(rng, (3, 4), dtype, -5, 5)
    big = np.array([[1000.0, 1000.5, -1000.0], [-np.inf, 0.0, 1.0]], dtype.np)
    return [Sample((x,), {"dim": 1}), Sample((x,), {"dim": 0, "keepdim": True}),
            Sample((x,), {"dim": (0, 1)}), Sample((big,), {"dim": 1}, grad=()),
            Sample((arr(rng, (0, 3), dtype),), {"dim": 0}, desc="empty reduction is -inf", check_fd=False),
            # rows long enough for the CPU kernel; a short middle dim of many rows, which
            # the numpy form reduces with that dim copied to the front
            Sample((arr(rng, (3, 40), dtype, -5, 5),), {"dim": -1}, desc="long rows"),
            Sample((arr(rng, (20, 5, 4), dtype, -5, 5),), {"dim": 1, "keepdim": True},
                   desc="short middle dim", check_fd=False)]


register("logsumexp", lambda m, x, **kw: m.logsumexp(x, **kw), _np_logsumexp, _lse_samples)


def _bool_red_samples(dtype, rng):
    x = rng.random((3, 4)) > 0.3
    return [Sample((x,)), Sample((x,), {"dim": 1}), Sample((x,), {"dim": 0, "keepdim": True}),
            Sample((np.zeros((0, 3), bool),)), Sample((np.zeros((0, 3), bool),), {"dim": 0})]


register("all", _red("all"), _np_red(np.all), _bool_red_samples, dtypes=(tj.bool_,), grad=False)
register("any", _red("any"), _np_red(np.any), _bool_red_samples, dtypes=(tj.bool_,), grad=False)


def _np_norm(x, p=2, dim=None, keepdim=False):
    ax = _axis(dim)
    if p == 2:
        return np.sqrt(np.sum(x * x, axis=ax, keepdims=keepdim))
    if p == 1:
        return np.sum(np.abs(x), axis=ax, keepdims=keepdim)
    return np.sum(np.abs(x) ** p, axis=ax, keepdims=keepdim) ** (1.0 / p)


register("norm", lambda m, x, **kw: m.norm(x, **kw), _np_norm,
         lambda d, r: [Sample((away(r, (3, 4), d),), kw) for kw in
                       ({}, {"dim": 1}, {"p": 1, "dim": 0, "keepdim": True}, {"p": 3, "dim": -1})])
register("cumsum", lambda m, x, dim: m.cumsum(x, dim), lambda x, dim: np.cumsum(x, axis=dim),
         lambda d, r: [Sample((arr(r, (3, 4), d),), {"dim": 1}), Sample((arr(r, (3, 4), d),), {"dim": -2}),
                       Sample((arr(r, (0, 2), d),), {"dim": 0}),
                       # (rows the CPU kernels take: a scan of several rows)
                       Sample((arr(r, (8, 64), d),), {"dim": 1}, desc="rows", gradgrad=False)],
         dtypes=NUMERIC)


# --------------------------------------------------------------------------- linear algebra
def _matmul_samples(dtype, rng):
    pairs = [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
             ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3)), ((0, 4), (4, 3)), ((3, 0), (0, 2)), ((1, 1), (1, 1))]
    return [Sample((arr(rng, a, dtype), arr(rng, b, dtype)), desc=f"{a}@{b}") for a, b in pairs]


register("matmul", lambda m, a, b: m.matmul(a, b), np.matmul, _matmul_samples, dtypes=NUMERIC)
register("matmul.operator", lambda m, a, b: a @ b, np.matmul,
         lambda d, r: [Sample((arr(r, (2, 3), d), arr(r, (3, 2), d)))])
register("mm", lambda m, a, b: m.mm(a, b), np.matmul,
         lambda d, r: [Sample((arr(r, (3, 4), d), arr(r, (4, 2), d))), Sample((arr(r, (1, 0), d), arr(r, (0, 2), d)))])
register("bmm", lambda m, a, b: m.bmm(a, b), np.matmul,
         lambda d, r: [Sample((arr(r, (2, 3, 4), d), arr(r, (2, 4, 2), d)))])


def _linear_ref(x, w, b=None):
    y = x @ w.T
    return y if b is None else y + b


register("linear", lambda m, x, w, b=None: F(m).linear(x, w, b), _linear_ref,
         lambda d, r: [Sample((arr(r, (2, 3, 4), d), arr(r, (5, 4), d), arr(r, (5,), d))),
                       Sample((arr(r, (3, 4), d), arr(r, (2, 4), d))),
                       Sample((arr(r, (4,), d), arr(r, (3, 4), d), arr(r, (3,), d)))])
register("outer", lambda m, a, b: m.outer(a, b), np.outer,
         lambda d, r: [Sample((arr(r, (3,), d), arr(r, (4,), d)))])
register("dot", lambda m, a, b: m.dot(a, b), np.dot, lambda d, r: [Sample((arr(r, (5,), d), arr(r, (5,), d)))])


# --------------------------------------------------------------------------- shape ops
def _one(shape_kw_list, make=arr):
    """Samples of one tensor input: [(shape, kwargs), ...]."""
    def samples(dtype, rng):
        return [Sample((make(rng, s, dtype),), dict(kw), desc=f"{s} {kw}") for s, kw in shape_kw_list]
    return samples


register("reshape", lambda m, x, shape: m.reshape(x, shape), lambda x, shape: np.reshape(x, shape),
         _one([((2, 6), {"shape": (3, 4)}), ((2, 6), {"shape": (-1,)}), ((2, 3, 4), {"shape": (4, -1, 2)}),
               ((), {"shape": (1, 1)}), ((1,), {"shape": ()}), ((0, 3), {"shape": (3, 0)}),
               ((0, 3), {"shape": (-1, 3)})]),
         dtypes=NUMERIC)
register("view", lambda m, x, shape: x.view(*shape), lambda x, shape: np.reshape(x, shape),
         _one([((2, 6), {"shape": (3, 4)}), ((4,), {"shape": (2, -1)})]))
register("reshape.noncontiguous", lambda m, x: x.t().reshape(-1), lambda x: x.T.reshape(-1),
         _one([((3, 4), {})]))
register("transpose", lambda m, x, d0, d1: m.transpose(x, d0, d1), lambda x, d0, d1: np.swapaxes(x, d0, d1),
         _one([((3, 4), {"d0": 0, "d1": 1}), ((2, 3, 4), {"d0": -1, "d1": 0}), ((2, 3), {"d0": 1, "d1": 1}),
               ((0, 2), {"d0": 0, "d1": 1})]), dtypes=NUMERIC)
register("permute", lambda m, x, dims: x.permute(dims), lambda x, dims: np.transpose(x, dims),
         _one([((2, 3, 4), {"dims": (2, 0, 1)}), ((2, 3, 4), {"dims": (-1, -3, -2)}), ((), {"dims": ()})]))
register("t", lambda m, x: m.t(x), lambda x: x.T, _one([((3, 4), {}), ((5,), {}), ((), {})]))
register("T", lambda m, x: x.T if x.ndim <= 2 else x.permute(*range(x.ndim - 1, -1, -1)), lambda x: x.T,
         _one([((3, 4), {}), ((2, 3, 4), {})]))
register("squeeze", lambda m, x, **kw: m.squeeze(x, **kw),
         lambda x, dim=None: np.squeeze(x, dim) if dim is None or x.shape[dim] == 1 else x,
         _one([((1, 3, 1), {}), ((1, 3, 1), {"dim": 0}), ((1, 3, 1), {"dim": -1}), ((1, 3, 1), {"dim": 1}),
               ((), {}), ((1,), {})]))
register("unsqueeze", lambda m, x, dim: m.unsqueeze(x, dim), lambda x, dim: np.expand_dims(x, dim),
         _one([((3, 4), {"dim": 0}), ((3, 4), {"dim": -1}), ((3, 4), {"dim": 1}), ((), {"dim": 0})]))
register("expand", lambda m, x, shape: x.expand(*shape),
         lambda x, shape: np.broadcast_to(x, tuple(s if s != -1 else x.shape[i - len(shape) + x.ndim]
                                                   for i, s in enumerate(shape))),
         _one([((3, 1), {"shape": (3, 4)}), ((4,), {"shape": (2, 3, 4)}), ((1, 4), {"shape": (2, -1, 4)}),
               ((), {"shape": (2, 2)}), ((1,), {"shape": (0,)})]))
def _np_flatten(x, start_dim=0, end_dim=-1):
    if x.ndim == 0:
        return x.reshape(1)
    s, e = start_dim % x.ndim, end_dim % x.ndim
    return x.reshape(x.shape[:s] + (int(np.prod(x.shape[s:e + 1])),) + x.shape[e + 1:])


register("flatten", lambda m, x, **kw: m.flatten(x, **kw), _np_flatten,
         _one([((2, 3, 4), {}), ((2, 3, 4), {"start_dim": 1}), ((2, 3, 4, 5), {"start_dim": 1, "end_dim": 2}),
               ((), {}), ((2, 0, 3), {"start_dim": 1})]))
register("contiguous", lambda m, x: x.t().contiguous(), lambda x: np.ascontiguousarray(x.T),
         _one([((3, 4), {}), ((128, 130), {})]))   # (the second: a transpose copy's tiles and edges)
register("clone", lambda m, x: x.clone(), lambda x: x.copy(), _one([((3, 4), {}), ((), {})]), dtypes=NUMERIC)
register("flip", lambda m, x, dims: m.flip(x, dims), lambda x, dims: np.flip(x, dims),
         _one([((3, 4), {"dims": (0,)}), ((2, 3, 4), {"dims": (0, -1)})]))
register("repeat", lambda m, x, sizes: x.repeat(*sizes), lambda x, sizes: np.tile(x, sizes),
         _one([((2, 3), {"sizes": (2, 1)}), ((3,), {"sizes": (2, 2)}), ((2, 1), {"sizes": (1, 3)})]))
register("narrow", lambda m, x, dim, start, length: m.narrow(x, dim, start, length),
         lambda x, dim, start, length: np.take(x, range(start % x.shape[dim], start % x.shape[dim] + length), axis=dim),
         _one([((4, 5), {"dim": 1, "start": 1, "length": 3}), ((4, 5), {"dim": 0, "start": -2, "length": 2})]))
register("movedim", lambda m, x, s, d: m.movedim(x, s, d), lambda x, s, d: np.moveaxis(x, s, d),
         _one([((2, 3, 4), {"s": 0, "d": -1}), ((2, 3, 4), {"s": -1, "d": 0})]))


def _multi(*shapes_kw):
    def samples(dtype, rng):
        return [Sample(tuple(arr(rng, s, dtype) for s in shapes), dict(kw), desc=f"{shapes} {kw}")
                for shapes, kw in shapes_kw]
    return samples


register("cat", lambda m, *ts, dim=0: m.cat(ts, dim), lambda *a, dim=0: np.concatenate(a, axis=dim),
         _multi((((2, 3), (4, 3)), {}), (((2, 3), (2, 1), (2, 2)), {"dim": 1}), (((2, 3), (2, 3)), {"dim": -1}),
                (((0, 3), (2, 3)), {}), (((2, 3),), {})),
         dtypes=NUMERIC)
register("cat.mixed_dtypes", lambda m, a, b: m.cat([a, b.long()]),
         lambda a, b: np.concatenate([a, b.astype(np.int64)]),
         lambda d, r: [Sample((arr(r, (2,), d), np.array([1.0, 2.0], d.np)), grad=(0,))])
register("stack", lambda m, *ts, dim=0: m.stack(ts, dim), lambda *a, dim=0: np.stack(a, axis=dim),
         _multi((((2, 3), (2, 3)), {}), (((2, 3), (2, 3), (2, 3)), {"dim": -1}), (((), ()), {}),
                (((0,), (0,)), {"dim": 1}), (((2, 3, 4), (2, 3, 4)), {"dim": 1})))


def _split_ref(x, size, dim=0):
    n = x.shape[dim]
    if isinstance(size, int):
        cuts = list(range(size, n, size))
    else:
        cuts = list(np.cumsum(size)[:-1])
    return tuple(np.split(x, cuts, axis=dim))


register("split", lambda m, x, size, dim=0: tuple(m.split(x, size, dim)), _split_ref,
         _one([((5, 3), {"size": 2}), ((5, 3), {"size": [1, 4]}), ((2, 6), {"size": 3, "dim": -1}),
               ((4, 2), {"size": 4})]))
register("chunk", lambda m, x, chunks, dim=0: tuple(m.chunk(x, chunks, dim)),
         lambda x, chunks, dim=0: _split_ref(x, -(-x.shape[dim] // chunks), dim),
         _one([((5, 3), {"chunks": 2}), ((2, 6), {"chunks": 3, "dim": 1}), ((4,), {"chunks": 4})]))
register("unbind", lambda m, x, dim=0: tuple(m.unbind(x, dim)),
         lambda x, dim=0: tuple(np.moveaxis(x, dim, 0)), _one([((3, 2), {}), ((3, 2), {"dim": 1})]))


# --------------------------------------------------------------------------- indexing
def _key(template, idx_tensors):
    """An index with ``"I0"``, ``"I1"`` ... standing for the index-tensor inputs."""
    if not isinstance(template, tuple):
        template = (template,)
    return tuple(idx_tensors[int(t[1:])] if isinstance(t, str) else t for t in template)


def _getitem(m, x, *ix, index):
    return x[_key(index, ix)]


def _getitem_ref(x, *ix, index):
    return _torch_style_index(x, _key(index, ix))


def _torch_style_index(x, key):
    """numpy indexing with PyTorch's meaning: integers select first (see ops.indexing._locate)."""
    has_arr = any(isinstance(k, np.ndarray) for k in key)
    if has_arr and any(isinstance(k, int) for k in key):
        first = tuple(k if isinstance(k, int) else slice(None) for k in key if k is not None)
        rest = tuple(k for k in key if not isinstance(k, int))
        return x[first][rest]
    return x[key]


_S = slice


def _getitem_samples(dtype, rng):
    x = arr(rng, (4, 5, 3), dtype)
    basic = [1, -1, (_S(None), 1), (_S(1, 3),), (Ellipsis, _S(None, None, 2)), (None, 0), (1, Ellipsis, None),
             (_S(None), _S(None), -1), (_S(2, 2),), (_S(-3, None), 0, _S(None, 2))]
    out = [Sample((x,), {"index": k}, desc=f"basic {k}") for k in basic]
    out += [
        Sample((x, idx(rng, (3,), 4)), {"index": "I0"}, desc="int array first dim"),
        Sample((x, idx(rng, (2, 2), 5)), {"index": (_S(None), "I0")}, desc="2-d int array, second dim"),
        Sample((x, idx(rng, (3,), 4), idx(rng, (3,), 5)), {"index": ("I0", "I1")}, desc="two arrays"),
        Sample((x, idx(rng, (2, 1), 4), idx(rng, (3,), 3)), {"index": ("I0", _S(None), "I1")},
               desc="separated arrays broadcast"),
        Sample((x, idx(rng, (2,), 3)), {"index": (0, _S(None), "I0")}, desc="int + array (torch order)"),
        Sample((x, np.array([-1, 0, -4], np.int64)), {"index": "I0"}, desc="negative indices"),
        Sample((x, idx(rng, (4,), 4)), {"index": "I0"}, desc="repeated indices"),
        Sample((x, np.zeros((0,), np.int64)), {"index": "I0"}, desc="empty index"),
    ]
    return out


register("getitem", _getitem, _getitem_ref, _getitem_samples, dtypes=NUMERIC)


def _mask_samples(dtype, rng):
    x = arr(rng, (3, 4), dtype)
    return [Sample((x, rng.random((3, 4)) > 0.5), {"index": "I0"}, desc="full mask"),
            Sample((x, np.array([True, False, True])), {"index": "I0"}, desc="mask on first dim"),
            Sample((x, np.zeros((3, 4), bool)), {"index": "I0"}, desc="all false"),
            Sample((x, np.array([False, True, True, False])), {"index": (_S(None), "I0")}, desc="mask on dim 1")]


register("getitem.mask", _getitem, _getitem_ref, _mask_samples, dtypes=NUMERIC)


def _setitem(m, x, *rest, index, value=None):
    """Functional form of ``y[index] = v``: clone, assign, return."""
    y = x.clone()
    if value is None:
        v, ix = rest[0], rest[1:]
    else:
        v, ix = value, rest
    y[_key(index, ix)] = v
    return y


def _setitem_ref(x, *rest, index, value=None):
    y = x.copy()
    if value is None:
        v, ix = rest[0], rest[1:]
    else:
        v, ix = value, rest
    key = _key(index, ix)
    has_arr = any(isinstance(k, np.ndarray) for k in key)
    if has_arr and any(isinstance(k, int) for k in key):
        first = tuple(k if isinstance(k, int) else slice(None) for k in key if k is not None)
        y[first][tuple(k for k in key if not isinstance(k, int))] = v
    else:
        y[key] = v
    return y


def _setitem_samples(dtype, rng):
    x = arr(rng, (4, 3), dtype)
    return [
        Sample((x, arr(rng, (3,), dtype)), {"index": 1}, desc="row = vector"),
        Sample((x, arr(rng, (4,), dtype)), {"index": (_S(None), 0)}, desc="column = vector"),
        Sample((x, arr(rng, (1, 3), dtype)), {"index": (_S(1, 3),)}, desc="slice = broadcast row"),
        Sample((x, arr(rng, (), dtype)), {"index": (Ellipsis,)}, desc="everything = 0-d"),
        Sample((x,), {"index": (_S(None), 1), "value": 2}, desc="python scalar"),
        Sample((x, arr(rng, (2, 3), dtype), np.array([3, 0], np.int64)), {"index": "I0"}, desc="int array rows"),
        Sample((x, arr(rng, (2,), dtype), np.array([0, 2], np.int64), np.array([1, 1], np.int64)),
               {"index": ("I0", "I1")}, desc="point assignment"),
    ]


register("setitem", _setitem, _setitem_ref, _setitem_samples, dtypes=NUMERIC)


def _setitem_mask_samples(dtype, rng):
    x = arr(rng, (3, 4), dtype)
    m = rng.random((3, 4)) > 0.5
    return [Sample((x, arr(rng, (int(m.sum()),), dtype), m), {"index": "I0"}, desc="mask = values")]


def _setitem_mask_number_samples(dtype, rng):
    x = arr(rng, (3, 4), dtype)
    return [Sample((x, rng.random((3, 4)) > 0.5), {"index": "I0", "value": 0}, desc="mask = scalar"),
            Sample((x, arr(rng, (4,), dtype), rng.random(3) > 0.5), {"index": "I0"}, desc="row mask = row")]


# (values of the mask's count: spread by the mask's running count, the count checked in
# the graph; a number or one row: a where)
register("setitem.mask", _setitem, _setitem_ref, _setitem_mask_samples, dtypes=NUMERIC)
register("setitem.mask_number", _setitem, _setitem_ref, _setitem_mask_number_samples, dtypes=NUMERIC)


def _gather_ref(x, index, dim):
    sl = tuple(slice(0, s) if i != dim % x.ndim else slice(None) for i, s in enumerate(index.shape))
    return np.take_along_axis(x[sl], index, axis=dim)


register("gather", lambda m, x, index, dim: m.gather(x, dim, index), _gather_ref,
         lambda d, r: [Sample((arr(r, (3, 4), d), idx(r, (3, 2), 4)), {"dim": 1}),
                       Sample((arr(r, (3, 4), d), idx(r, (5, 4), 3)), {"dim": 0}),
                       Sample((arr(r, (2, 3, 4), d), idx(r, (2, 2, 4), 3)), {"dim": -2}),
                       Sample((arr(r, (3, 4), d), idx(r, (2, 2), 4)), {"dim": 1}, desc="smaller index")],
         dtypes=NUMERIC)


def _scatter_add_ref(x, index, src, dim):
    out = x.copy()
    grids = list(np.indices(index.shape, sparse=True))
    grids[dim] = index
    np.add.at(out, tuple(grids), src)
    return out


register("scatter_add", lambda m, x, index, src, dim: m.scatter_add(x, dim, index, src), _scatter_add_ref,
         lambda d, r: [Sample((arr(r, (3, 4), d), idx(r, (3, 5), 4), arr(r, (3, 5), d)), {"dim": 1}),
                       Sample((arr(r, (3, 4), d), idx(r, (6, 4), 3), arr(r, (6, 4), d)), {"dim": 0})])
# a GNN's readout: one row number per update, expanded over the row (whole rows added)
register("scatter_add_rows", lambda m, x, rows, src: m.scatter_add(x, 0, rows.reshape(-1, 1).expand(src.shape), src),
         lambda x, rows, src: _scatter_add_ref(x, np.broadcast_to(rows[:, None], src.shape), src, 0),
         lambda d, r: [Sample((arr(r, (5, 4), d), idx(r, (40,), 5), arr(r, (40, 4), d)), {})])
register("index_select", lambda m, x, index, dim: m.index_select(x, dim, index),
         lambda x, index, dim: np.take(x, index, axis=dim),
         lambda d, r: [Sample((arr(r, (3, 4), d), idx(r, (5,), 4)), {"dim": 1}),
                       Sample((arr(r, (3, 4), d), idx(r, (2,), 3)), {"dim": -2})], dtypes=NUMERIC)


def _masked_fill_samples(dtype, rng):
    v = 1.5 if dtype.is_floating_point else 7
    return [Sample((arr(rng, (3, 4), dtype), rng.random((3, 4)) > 0.5), {"value": v}),
            Sample((arr(rng, (3, 4), dtype), rng.random((1, 4)) > 0.5), {"value": v}, desc="broadcast mask"),
            Sample((arr(rng, (2, 3), dtype), rng.random((2, 3)) > 0.5), {"value": -math.inf}, desc="-inf",
                   check_fd=False)
            if dtype.is_floating_point else Sample((arr(rng, (0, 3), dtype), np.zeros((0, 3), bool)), {"value": v})]


register("masked_fill", lambda m, x, mask, value: x.masked_fill(mask, value),
         lambda x, mask, value: np.where(mask, value, x).astype(x.dtype), _masked_fill_samples, dtypes=NUMERIC)


# --------------------------------------------------------------------------- neural-net ops
def _np_softmax(x, dim=-1):
    if x.size == 0:
        return x.copy()
    e = np.exp(x - np.max(x, axis=dim, keepdims=True))
    return e / np.sum(e, axis=dim, keepdims=True)


def _np_log_softmax(x, dim=-1):
    if x.size == 0:
        return x.copy()
    return x - _np_logsumexp(x, dim, keepdim=True)


_SOFTMAX_SAMPLES = _one([((3, 5), {"dim": -1}), ((3, 5), {"dim": 0}), ((2, 3, 4), {"dim": 1}), ((4,), {"dim": 0}),
                         ((0, 3), {"dim": 1}), ((2, 0), {"dim": 1})])
register("softmax", lambda m, x, dim: F(m).softmax(x, dim), _np_softmax, _SOFTMAX_SAMPLES)
register("log_softmax", lambda m, x, dim: F(m).log_softmax(x, dim), _np_log_softmax, _SOFTMAX_SAMPLES)
register("softmax.large", lambda m, x, dim: F(m).softmax(x, dim), _np_softmax,
         lambda d, r: [Sample((np.array([[1000.0, 999.0, -1000.0]], d.np),), {"dim": 1})])


def _np_layer_norm(x, *wb, normalized_shape, eps=1e-5):
    dims = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mu = x.mean(axis=dims, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=dims, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    if wb:
        y = y * wb[0]
    if len(wb) > 1:
        y = y + wb[1]
    return y


def _layer_norm(m, x, *wb, normalized_shape, eps=1e-5):
    w = wb[0] if wb else None
    b = wb[1] if len(wb) > 1 else None
    return F(m).layer_norm(x, normalized_shape, w, b, eps)


register("layer_norm", _layer_norm, _np_layer_norm,
         lambda d, r: [Sample((arr(r, (3, 5), d),), {"normalized_shape": (5,)}),
                       Sample((arr(r, (2, 3, 4), d), arr(r, (4,), d), arr(r, (4,), d)), {"normalized_shape": (4,)}),
                       Sample((arr(r, (2, 3, 4), d), arr(r, (3, 4), d)), {"normalized_shape": (3, 4), "eps": 1e-3})],
         atol=1e-4, rtol=1e-4)


def _embedding(m, i, w, **kw):
    return F(m).embedding(i, w, **kw)


def _embedding_ref(i, w, padding_idx=None):
    return w[i]


register("embedding", _embedding, _embedding_ref,
         lambda d, r: [Sample((idx(r, (2, 3), 5), arr(r, (5, 4), d))), Sample((idx(r, (7,), 3), arr(r, (3, 2), d))),
                       Sample((np.array([[0, 2, 0]], np.int64), arr(r, (3, 2), d)), {"padding_idx": 0},
                              check_fd=False, desc="padding_idx: row 0 gets no gradient"),
                       Sample((idx(r, (), 3), arr(r, (3, 2), d)))])
def _np_one_hot(t, num_classes=-1):
    return np.eye(num_classes if num_classes > 0 else int(t.max()) + 1, dtype=np.int64)[t]


register("one_hot", lambda m, t, **kw: F(m).one_hot(t, **kw), _np_one_hot,
         lambda d, r: [Sample((idx(r, (4,), 3),), {"num_classes": 5}),
                       Sample((np.array([[0, 2], [1, 1]], np.int64),), {"num_classes": 3}),
                       Sample((np.zeros((0, 2), np.int64),), {"num_classes": 4})],
         dtypes=(I64,), grad=False)
# Without num_classes the width is read from the data: not traceable.
register("one_hot.infer", lambda m, t: F(m).one_hot(t), _np_one_hot,
         lambda d, r: [Sample((np.array([[0, 2], [1, 1]], np.int64),))], dtypes=(I64,), grad=False, traceable=False)


def _np_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    if x.ndim == 3:
        return _np_conv2d(x[None], w, b, stride, padding, dilation, groups)[0]
    st = (stride, stride) if isinstance(stride, int) else stride
    pd = (padding, padding) if isinstance(padding, int) else padding
    dl = (dilation, dilation) if isinstance(dilation, int) else dilation
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pd[0], pd[0]), (pd[1], pd[1])))
    oh = (h + 2 * pd[0] - dl[0] * (kh - 1) - 1) // st[0] + 1
    ow = (wd + 2 * pd[1] - dl[1] * (kw - 1) - 1) // st[1] + 1
    out = np.zeros((n, o, oh, ow), dtype=np.result_type(x, w))
    og = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dl[0]: i * dl[0] + st[0] * (oh - 1) + 1: st[0],
                           j * dl[1]: j * dl[1] + st[1] * (ow - 1) + 1: st[1]]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, w[g * og:(g + 1) * og, :, i, j])
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out


def _conv2d(m, x, w, b=None, **kw):
    return F(m).conv2d(x, w, b, **kw)


register("conv2d", _conv2d, _np_conv2d,
         lambda d, r: [Sample((arr(r, (2, 3, 5, 5), d), arr(r, (4, 3, 3, 3), d), arr(r, (4,), d))),
                       Sample((arr(r, (1, 2, 6, 5), d), arr(r, (3, 2, 2, 3), d)), {"stride": 2, "padding": 1}),
                       Sample((arr(r, (2, 4, 5, 5), d), arr(r, (6, 2, 3, 3), d), arr(r, (6,), d)),
                              {"groups": 2, "padding": (1, 0)}),
                       Sample((arr(r, (1, 2, 7, 7), d), arr(r, (2, 1, 3, 3), d)), {"groups": 2, "dilation": 2}),
                       Sample((arr(r, (1, 1, 3, 3), d), arr(r, (1, 1, 1, 1), d)), {"stride": (1, 2)}),
                       Sample((arr(r, (2, 5, 5), d), arr(r, (3, 2, 3, 3), d)), desc="unbatched")],
         atol=1e-4, rtol=1e-4)


def _np_pool(x, kernel_size, stride=None, padding=0, dilation=1, reduce=np.max, pad_value=-np.inf):
    k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    s = k if stride is None else ((stride, stride) if isinstance(stride, int) else stride)
    p = (padding, padding) if isinstance(padding, int) else padding
    d = (dilation, dilation) if isinstance(dilation, int) else dilation
    unbatched = x.ndim == 3
    if unbatched:
        x = x[None]
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])), constant_values=pad_value)
    oh = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    wins = np.stack([xp[:, :, i * d[0]: i * d[0] + s[0] * (oh - 1) + 1: s[0],
                        j * d[1]: j * d[1] + s[1] * (ow - 1) + 1: s[1]]
                     for i in range(k[0]) for j in range(k[1])], axis=2)
    out = reduce(wins, axis=2)
    return out[0] if unbatched else out


def _np_unfold(x, kernel_size, stride=1, padding=0, dilation=1):
    k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    n, c = x.shape[:2]
    s = (stride, stride) if isinstance(stride, int) else stride
    p = (padding, padding) if isinstance(padding, int) else padding
    d = (dilation, dilation) if isinstance(dilation, int) else dilation
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    h, w = x.shape[2:]
    oh = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    out = np.empty((n, c, k[0], k[1], oh, ow), x.dtype)
    for i in range(k[0]):
        for j in range(k[1]):
            out[:, :, i, j] = xp[:, :, i * d[0]: i * d[0] + s[0] * (oh - 1) + 1: s[0],
                                 j * d[1]: j * d[1] + s[1] * (ow - 1) + 1: s[1]]
    return out.reshape(n, c * k[0] * k[1], oh * ow)


def _np_fold(cols, output_size, kernel_size, stride=1, padding=0, dilation=1):
    # fold is the adjoint of unfold: sum each column entry back into its pixel.
    k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    n, ckk, _ = cols.shape
    c = ckk // (k[0] * k[1])
    probe = np.arange(n * c * output_size[0] * output_size[1], dtype=np.float64).reshape(n, c, *output_size)
    where = _np_unfold(probe, kernel_size, stride, padding, dilation)  # pixel id per column entry
    zeros_from_padding = _np_unfold(np.ones_like(probe), kernel_size, stride, padding, dilation) == 0
    out = np.zeros(n * c * output_size[0] * output_size[1], cols.dtype)
    np.add.at(out, where[~zeros_from_padding].astype(np.int64), cols[~zeros_from_padding])
    return out.reshape(n, c, *output_size)


register("unfold", lambda m, x, **kw: F(m).unfold(x, **kw), _np_unfold,
         lambda d, r: [Sample((arr(r, (2, 3, 4, 5), d),), {"kernel_size": 2}),
                       Sample((arr(r, (1, 2, 5, 5), d),), {"kernel_size": (3, 2), "stride": 2, "padding": 1}),
                       Sample((arr(r, (1, 1, 6, 6), d),), {"kernel_size": 2, "dilation": 2})])
register("fold", lambda m, c, **kw: F(m).fold(c, **kw), _np_fold,
         lambda d, r: [Sample((arr(r, (2, 12, 12), d),), {"output_size": (4, 5), "kernel_size": 2}),
                       Sample((arr(r, (1, 12, 9), d),), {"output_size": (5, 5), "kernel_size": (3, 2),
                                                         "stride": 2, "padding": 1})])


def _np_unfold_gemm(x, **kw):
    """unfold's "gemm" layout: (C*kh*kw, N*L), the batch layout's columns side by side."""
    cols = _np_unfold(x, **kw)
    return cols.transpose(1, 0, 2).reshape(cols.shape[1], -1)


def _np_fold_gemm(cols, output_size, **kw):
    k = kw["kernel_size"]
    probe = _np_unfold(np.zeros((1, cols.shape[0] // (k[0] * k[1]), *output_size)), **kw)
    n = cols.shape[1] // probe.shape[2]
    return _np_fold(cols.reshape(cols.shape[0], n, -1).transpose(1, 0, 2), output_size, **kw)


# conv2d's own column layout (tracejit only): the registered im2col/col2im loops take it
register("unfold_gemm", lambda m, x, **kw: _conv_ops.unfold(x, layout="gemm", **kw), _np_unfold_gemm,
         lambda d, r: [Sample((arr(r, (2, 3, 4, 5), d),), {"kernel_size": (2, 2)}),
                       Sample((arr(r, (1, 2, 5, 5), d),), {"kernel_size": (3, 2), "stride": 2, "padding": 1})],
         torch=False)
register("fold_gemm", lambda m, c, **kw: _conv_ops.fold(c, layout="gemm", **kw), _np_fold_gemm,
         lambda d, r: [Sample((arr(r, (12, 24), d),), {"output_size": (4, 5), "kernel_size": (2, 2)}),
                       Sample((arr(r, (12, 9), d),), {"output_size": (5, 5), "kernel_size": (3, 2),
                                                      "stride": 2, "padding": 1})],
         torch=False)


register("max_pool2d", lambda m, x, **kw: F(m).max_pool2d(x, **kw), _np_pool,
         lambda d, r: [Sample((distinct(r, (2, 3, 4, 4), d),), {"kernel_size": 2}),
                       Sample((distinct(r, (1, 2, 5, 5), d),), {"kernel_size": 3, "stride": 1, "padding": 1}),
                       Sample((distinct(r, (1, 1, 5, 6), d),), {"kernel_size": (2, 3), "stride": (1, 2)}),
                       Sample((distinct(r, (1, 1, 7, 7), d),), {"kernel_size": 2, "dilation": 2}),
                       Sample((distinct(r, (2, 4, 4), d),), {"kernel_size": 2}, desc="unbatched")],
         dtypes=FLOATS)
register("avg_pool2d", lambda m, x, **kw: F(m).avg_pool2d(x, **kw),
         lambda x, **kw: _np_pool(x, **kw, reduce=np.mean, pad_value=0.0),
         lambda d, r: [Sample((arr(r, (2, 3, 4, 4), d),), {"kernel_size": 2}),
                       Sample((arr(r, (1, 2, 5, 5), d),), {"kernel_size": 3, "stride": 1, "padding": 1})])
register("dropout.p0", lambda m, x, **kw: F(m).dropout(x, **kw), lambda x, **kw: x,
         lambda d, r: [Sample((arr(r, (3, 4), d),), {"p": 0.0}), Sample((arr(r, (3, 4), d),), {"p": 0.5, "training": False})])
register("dropout", lambda m, x, **kw: F(m).dropout(x, **kw), lambda x, **kw: x,
         lambda d, r: [Sample((arr(r, (64, 64), d),), {"p": 0.5})], random=True, grad=False)


# --------------------------------------------------------------------------- losses
def _reduce(loss, reduction):
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


def _loss_samples(make_input, make_target, shapes=((4, 3), (5,), ())):
    def samples(dtype, rng):
        out = []
        for s in shapes:
            for red in ("mean", "sum", "none"):
                out.append(Sample((make_input(rng, s, dtype), make_target(rng, s, dtype)), {"reduction": red},
                                  desc=f"{s} {red}"))
        return out
    return samples


def _loss(name):
    def f(m, *ts, **kw):
        return getattr(F(m), name)(*ts, **kw)
    return f


register("mse_loss", _loss("mse_loss"), lambda a, b, reduction="mean": _reduce((a - b) ** 2, reduction),
         _loss_samples(arr, arr))
register("l1_loss", _loss("l1_loss"), lambda a, b, reduction="mean": _reduce(np.abs(a - b), reduction),
         _loss_samples(arr, lambda r, s, d: arr(r, s, d) + 5.0))


def _probs(rng, shape, dtype):
    return rng.uniform(0.05, 0.95, shape).astype(dtype.np)


def _np_bce(p, t, *w, reduction="mean"):
    loss = -(t * np.maximum(np.log(p), -100) + (1 - t) * np.maximum(np.log(1 - p), -100))
    if w:
        loss = loss * w[0]
    return _reduce(loss, reduction)


def _bce(m, p, t, *w, **kw):
    return F(m).binary_cross_entropy(p, t, w[0] if w else None, **kw)


register("binary_cross_entropy", _bce, _np_bce,
         lambda d, r: _loss_samples(_probs, _probs)(d, r) + [
             Sample((_probs(r, (3, 2), d), _probs(r, (3, 2), d), arr(r, (3, 2), d)), {"reduction": "mean"},
                    grad=(0, 1), desc="weight (not differentiable in PyTorch)")])


def _np_bce_logits(x, t, *w, reduction="mean", pos_weight=None):
    # -(pw*t*log(sigmoid(x)) + (1-t)*log(1-sigmoid(x))) in a form that never overflows
    pw = 1.0 if pos_weight is None else np.asarray(pos_weight)
    log_sig = -(np.log1p(np.exp(-np.abs(x))) + np.maximum(-x, 0))
    log_one_minus = log_sig - x
    loss = -(pw * t * log_sig + (1 - t) * log_one_minus)
    if w:
        loss = loss * w[0]
    return _reduce(loss, reduction)


def _bce_logits(m, x, t, *w, pos_weight=None, **kw):
    if pos_weight is not None:
        pos_weight = m.tensor(pos_weight, dtype=x.dtype, device=x.device)
    return F(m).binary_cross_entropy_with_logits(x, t, w[0] if w else None, pos_weight=pos_weight, **kw)


register("binary_cross_entropy_with_logits", _bce_logits, _np_bce_logits,
         lambda d, r: _loss_samples(arr, _probs)(d, r) + [
             Sample((arr(r, (3, 2), d), _probs(r, (3, 2), d), arr(r, (3, 2), d)), {"pos_weight": [2.0, 0.5]},
                    grad=(0, 1)),
             Sample((np.array([-200.0, 0.0, 200.0], d.np), np.array([0.0, 0.5, 1.0], d.np)), {}, desc="large logits")])


def _np_nll(logp, target, *w, reduction="mean", ignore_index=-100):
    if logp.ndim == 1:
        logp, target = logp[None], np.asarray(target)[None]
    c = logp.shape[1]
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    picked = np.take_along_axis(logp, safe[:, None], axis=1)[:, 0]
    weight = (w[0][safe] if w else np.ones_like(picked)) * valid
    loss = -picked * weight
    if reduction == "mean":
        return loss.sum() / weight.sum()
    del c
    return loss.sum() if reduction == "sum" else loss


def _nll_samples(dtype, rng):
    out = []
    for red in ("mean", "sum", "none"):
        out.append(Sample((arr(rng, (4, 3), dtype), idx(rng, (4,), 3)), {"reduction": red}, desc=red))
    t = idx(rng, (5,), 4)
    t[1] = -100
    out.append(Sample((arr(rng, (5, 4), dtype), t), {}, desc="ignore_index"))
    out.append(Sample((arr(rng, (5, 4), dtype), idx(rng, (5,), 4), pos(rng, (4,), dtype)), {}, grad=(0,),
                      desc="weight"))
    out.append(Sample((arr(rng, (5, 4), dtype), np.array([0, 3, 3, 1, 2], np.int64)), {"ignore_index": 3},
                      desc="custom ignore_index"))
    return out


def _nll(m, x, t, *w, **kw):
    return F(m).nll_loss(x, t, w[0] if w else None, **kw)


def _ce(m, x, t, *w, **kw):
    return F(m).cross_entropy(x, t, w[0] if w else None, **kw)


def _np_ce(x, t, *w, reduction="mean", ignore_index=-100, label_smoothing=0.0):
    cdim = 1 if x.ndim > 1 else 0
    logp = _np_log_softmax(x, cdim)
    if t.dtype.kind == "f":
        t = t * (1 - label_smoothing) + label_smoothing / x.shape[cdim]
        lw = logp * w[0] if w else logp
        return _reduce(-(lw * t).sum(axis=cdim), reduction)
    if x.ndim > 2:  # (N, C, d) -> (N*d, C)
        logp = np.moveaxis(logp, 1, -1).reshape(-1, x.shape[1])
        tt = t.reshape(-1)
    else:
        tt = t
    nll = _np_nll(logp, tt, *w, reduction=reduction, ignore_index=ignore_index)
    if reduction == "none":
        nll = nll.reshape(t.shape)
    if label_smoothing:
        lp = logp if logp.ndim > 1 else logp[None]
        tt = np.asarray(tt).reshape(-1)
        valid = tt != ignore_index
        wc = w[0] if w else np.ones(lp.shape[1])
        smooth = -(lp * wc).sum(axis=1) / lp.shape[1] * valid
        if reduction == "mean":
            smooth = smooth.sum() / (wc[np.where(valid, tt, 0)] * valid).sum()
        elif reduction == "sum":
            smooth = smooth.sum()
        else:
            smooth = smooth.reshape(t.shape)
        nll = (1 - label_smoothing) * nll + label_smoothing * smooth
    return nll


def _ce_samples(dtype, rng):
    out = _nll_samples(dtype, rng)
    out.append(Sample((arr(rng, (2, 3, 4), dtype), idx(rng, (2, 4), 3)), {}, desc="(N, C, d)"))
    out.append(Sample((arr(rng, (2, 3, 4), dtype), idx(rng, (2, 4), 3)), {"reduction": "none"}, desc="(N, C, d) none"))
    out.append(Sample((arr(rng, (4,), dtype), idx(rng, (), 4)), {}, desc="unbatched"))
    out.append(Sample((arr(rng, (6, 5), dtype), idx(rng, (6,), 5)), {}, grad=(),
                      desc="no graph: the one-pass primitive"))
    out.append(Sample((arr(rng, (4, 3), dtype), idx(rng, (4,), 3)), {"label_smoothing": 0.1}, desc="label smoothing"))
    t = idx(rng, (5,), 4)
    t[2] = -100
    out.append(Sample((arr(rng, (5, 4), dtype), t, pos(rng, (4,), dtype)), {"label_smoothing": 0.2}, grad=(0,),
                      desc="weight + label smoothing + ignore"))
    out.append(Sample((arr(rng, (2, 3, 4), dtype), idx(rng, (2, 4), 3)), {"label_smoothing": 0.3, "reduction": "sum"},
                      desc="(N, C, d) label smoothing"))
    p = rng.uniform(0.1, 1, (4, 3))
    p = (p / p.sum(1, keepdims=True)).astype(dtype.np)
    out.append(Sample((arr(rng, (4, 3), dtype), p), {}, grad=(0,), desc="probability targets"))
    out.append(Sample((arr(rng, (4, 3), dtype), p, pos(rng, (3,), dtype)), {"label_smoothing": 0.1}, grad=(0,),
                      desc="probability targets, weight, smoothing"))
    return out


register("nll_loss", _nll, _np_nll, _nll_samples)
register("cross_entropy", _ce, _np_ce, _ce_samples)

# More records live in sibling modules named ``opdb_*.py`` (one per area: layers, tensor
# functions, ...), each calling `register` above; importing them here keeps ``OPS`` the one
# list every per-op test reads, while areas grow in files of their own.
def _load_extensions() -> None:
    import importlib
    import pathlib
    for path in sorted(pathlib.Path(__file__).parent.glob("opdb_*.py")):
        importlib.import_module(path.stem)


_load_extensions()

OPS_BY_NAME = {op.name: op for op in OPS}
assert len(OPS_BY_NAME) == len(OPS), "op names must be unique"


def samples_for(op: OpInfo, dtypes=None, seed: int = 0):
    """Yield (dtype, sample) for every dtype of `op` (or the given ones) with a fixed seed."""
    for dt in (dtypes if dtypes is not None else op.dtypes):
        for s in op.sample_inputs(dt, np.random.default_rng(seed)):
            yield dt, s
