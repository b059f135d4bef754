"""The ``out=`` keyword of the functions beyond elementwise math (tracejit/outarg.py):
each against PyTorch's value, an out of the wrong shape resized, an input requiring grad
refused under grad mode, and an out of another dtype taken or refused as PyTorch does."""
import warnings

import numpy as np
import pytest

import tracejit as tj
from tests.ops.test_view_copies import VIEW_COPIES

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.filterwarnings(r"ignore:torch\.\w+ is deprecated"),   # (ger, chain_matmul)
              pytest.mark.filterwarnings(r"ignore:at..(frobenius|nuclear)_norm is deprecated")]

X = np.array([[0.3, -1.6, 2.0], [2.2, 0.9, -0.4]], dtype=np.float32)
S = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
I = np.array([[0, 1, 0], [1, 0, 1]])
A = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]], dtype=np.float32)
B = np.array([[1.0, -2.0], [0.5, 3.0], [2.5, 1.0]], dtype=np.float32)
P = np.array([[0.2, 0.7, 0.5], [0.9, 0.05, 0.35]], dtype=np.float32)
INF = np.array([[np.inf, -np.inf, 1.0], [0.0, -np.inf, np.nan]], dtype=np.float32)

# name -> call(m, t, out): m the library, t(array) its tensor of the array
CALLS = {
    "gather": lambda m, t, out: m.gather(t(X), 1, t(I), out=out),
    "gather axis": lambda m, t, out: m.gather(t(X), axis=1, index=t(I), out=out),
    "scatter": lambda m, t, out: m.scatter(t(X), 1, t(I), t(S), out=out),
    "scatter value": lambda m, t, out: m.scatter(t(X), 1, t(I), value=-2.5, out=out),
    "scatter_add": lambda m, t, out: m.scatter_add(t(X), 1, t(I), t(S), out=out),
    "index_select": lambda m, t, out: m.index_select(t(X), 1, t(I[0]), out=out),
    "index_add": lambda m, t, out: m.index_add(t(X), 1, t(I[0]), t(S), alpha=2, out=out),
    "index_copy": lambda m, t, out: m.index_copy(t(X), 1, t(np.array([2, 0, 1])), t(S), out=out),
    "take_along_dim": lambda m, t, out: m.take_along_dim(t(X), t(I), 1, out=out),
    "slice_scatter": lambda m, t, out: m.slice_scatter(t(X), t(S[:, :2]), 1, 1, 3, out=out),
    "kthvalue": lambda m, t, out: m.kthvalue(t(X), 2, 1, keepdim=True, out=out),
    "median": lambda m, t, out: m.median(t(X), 1, out=out),
    "median axis": lambda m, t, out: m.median(t(X), axis=0, keepdims=True, out=out),
    "nanmedian": lambda m, t, out: m.nanmedian(t(np.where(X > 2, np.nan, X)), 1, out=out),
    "mode": lambda m, t, out: m.mode(t(np.round(X)), 1, out=out),
    "cummax": lambda m, t, out: m.cummax(t(X), 1, out=out),
    "cummin": lambda m, t, out: m.cummin(t(X), dim=0, out=out),
    "aminmax": lambda m, t, out: m.aminmax(t(X), dim=1, out=out),
    "frexp": lambda m, t, out: m.frexp(t(X), out=out),
    "logcumsumexp": lambda m, t, out: m.logcumsumexp(t(X), 1, out=out),
    "nansum": lambda m, t, out: m.nansum(t(np.where(X > 2, np.nan, X)), 1, out=out),
    "nanmean": lambda m, t, out: m.nanmean(t(np.where(X > 2, np.nan, X)), 0, keepdim=True, out=out),
    "norm": lambda m, t, out: m.norm(t(X), 2, 1, out=out),
    "norm fro": lambda m, t, out: m.norm(t(X), out=out),
    "quantile": lambda m, t, out: m.quantile(t(X), 0.3, 1, out=out),
    "nanquantile": lambda m, t, out: m.nanquantile(t(np.where(X > 2, np.nan, X)), 0.7, out=out),
    "histc": lambda m, t, out: m.histc(t(X), 4, out=out),
    "histogram": lambda m, t, out: m.histogram(t(X), 3, out=out),
    "renorm": lambda m, t, out: m.renorm(t(X), 2, 0, 1.0, out=out),
    "diff": lambda m, t, out: m.diff(t(X), 1, 0, out=out),
    "addmv": lambda m, t, out: m.addmv(t(X[0, :2]), t(S[:, :2]), t(X[1, :2]), beta=0.5, alpha=2, out=out),
    "addbmm": lambda m, t, out: m.addbmm(t(S[:, :2]), t(np.stack([X, S])), t(np.stack([S.T, X.T])[:, :, :2]),
                                         out=out),
    "addr": lambda m, t, out: m.addr(t(S), t(X[0, :2]), t(X[1]), alpha=3, out=out),
    "ger": lambda m, t, out: m.ger(t(X[0]), t(S[1]), out=out),
    "vdot": lambda m, t, out: m.vdot(t(X[0]), t(S[1]), out=out),
    "tensordot": lambda m, t, out: m.tensordot(t(X), t(S.T), 1, out=out),
    "cross": lambda m, t, out: m.cross(t(X), t(S), dim=1, out=out),
    "addcmul": lambda m, t, out: m.addcmul(t(X), t(S), t(X), value=2, out=out),
    "addcdiv": lambda m, t, out: m.addcdiv(t(X), t(S), t(S + 1), value=-0.5, out=out),
    "chain_matmul": lambda m, t, out: m.chain_matmul(t(X), t(S.T), t(X), out=out),
    "isin": lambda m, t, out: m.isin(t(X), t(X[0]), invert=True, out=out),
    "isneginf": lambda m, t, out: m.isneginf(t(INF), out=out),
    "isposinf": lambda m, t, out: m.isposinf(t(INF), out=out),
    "hardshrink": lambda m, t, out: m.hardshrink(t(X), 0.5, out=out),
    "threshold": lambda m, t, out: m.threshold(t(X), 0.5, 9.0, out=out),
    "softmax": lambda m, t, out: m.softmax(t(X), 1, out=out),
    "softmax dtype": lambda m, t, out: m.softmax(t(X), 1, m.float64, out=out),
    "log_softmax": lambda m, t, out: m.log_softmax(t(X), 0, out=out),
    "conj_physical": lambda m, t, out: m.conj_physical(t(X), out=out),
    "polygamma": lambda m, t, out: m.polygamma(1, t(np.abs(X) + 1), out=out),
    "nonzero": lambda m, t, out: m.nonzero(t(np.round(X)), out=out),
    "hstack": lambda m, t, out: m.hstack([t(X), t(S)], out=out),
    "vstack": lambda m, t, out: m.vstack([t(X), t(S)], out=out),
    "dstack": lambda m, t, out: m.dstack([t(X), t(S)], out=out),
    "column_stack": lambda m, t, out: m.column_stack([t(X[0]), t(S)[0]], out=out),
    "row_stack": lambda m, t, out: m.row_stack([t(X), t(S)], out=out),
    "concat": lambda m, t, out: m.concat([t(X), t(S)], 1, out=out),
    "concatenate": lambda m, t, out: m.concatenate([t(X), t(S)], axis=1, out=out),
}
SPECIAL = {   # torch.special's one-tensor functions, given P (in (0, 1))
    n: (lambda n: lambda m, t, out: getattr(m.special, n)(t(P), out=out))(n)
    for n in ("digamma", "psi", "entr", "erf", "erfc", "erfcx", "erfinv", "exp2", "expit", "expm1", "gammaln",
              "i0", "i0e", "i1", "i1e", "log1p", "log_ndtr", "logit", "modified_bessel_i0", "modified_bessel_i1",
              "ndtr", "ndtri", "sinc", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_k0",
              "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "airy_ai",
              "spherical_bessel_j0")}
CALLS.update({"special." + n: f for n, f in SPECIAL.items()})
CALLS.update({
    "special.gammainc": lambda m, t, out: m.special.gammainc(t(P), t(S), out=out),
    "special.gammaincc": lambda m, t, out: m.special.gammaincc(t(P), t(S), out=out),
    "special.logsumexp": lambda m, t, out: m.special.logsumexp(t(X), 1, keepdim=True, out=out),
    "special.multigammaln": lambda m, t, out: m.special.multigammaln(t(S), 2, out=out),
    "special.polygamma": lambda m, t, out: m.special.polygamma(2, t(S), out=out),
    "special.round": lambda m, t, out: m.special.round(t(X * 10), decimals=1, out=out),
    "special.xlog1py": lambda m, t, out: m.special.xlog1py(t(X), t(S), out=out),
    "special.xlogy": lambda m, t, out: m.special.xlogy(t(X), t(S), out=out),
    "special.zeta": lambda m, t, out: m.special.zeta(t(S + 1), t(P), out=out),
    "special.chebyshev_polynomial_t": lambda m, t, out: m.special.chebyshev_polynomial_t(t(P), 3, out=out),
    "special.hermite_polynomial_h": lambda m, t, out: m.special.hermite_polynomial_h(t(X), t(S), out=out),
    "special.legendre_polynomial_p": lambda m, t, out: m.special.legendre_polynomial_p(t(X), 2, out=out),
})
LINALG = {   # torch.linalg's functions of A (symmetric positive definite) and B
    "cholesky": ("A",), "cond": ("A",), "det": ("A",), "eigh": ("A",), "eigvalsh": ("A",), "inv": ("A",),
    "inv_ex": ("A",), "cholesky_ex": ("A",), "lu": ("A",), "lu_factor": ("A",), "lu_factor_ex": ("A",),
    "matrix_norm": ("A",), "matrix_rank": ("A",), "norm": ("A",), "pinv": ("A",), "qr": ("A",),
    "slogdet": ("A",), "svd": ("A",), "svdvals": ("A",), "vector_norm": ("B",), "solve": ("A", "B"),
    "solve_ex": ("A", "B"), "matmul": ("A", "B"), "multi_dot": (["A", "B"],), "vecdot": ("B", "B"),
    "cross": ("A", "A"), "tensorinv": ("A4", 2), "tensorsolve": ("A4", "B2"), "matrix_power": ("A", 3),
    "householder_product": ("A", "tau"), "lstsq": ("A", "B"),
}
_M = {"A": A, "B": B, "A4": (np.eye(4) * 3 + np.arange(16).reshape(4, 4) / 10).astype(np.float32).reshape(2, 2, 2, 2),
      "B2": B[:2, :2], "tau": np.array([0.5, 1.2], dtype=np.float32)}


def _linalg_call(name, args):
    def call(m, t, out):
        given = [[t(_M[x]) for x in a] if isinstance(a, list) else t(_M[a]) if isinstance(a, str) else a for a in args]
        return getattr(m.linalg, name)(*given, out=out)
    return call


CALLS.update({"linalg." + n: _linalg_call(n, a) for n, a in LINALG.items()})
CALLS.update({
    "linalg.solve_triangular": lambda m, t, out: m.linalg.solve_triangular(t(np.tril(A)), t(B), upper=False, out=out),
    "linalg.lu_solve": lambda m, t, out: m.linalg.lu_solve(*m.linalg.lu_factor(t(A)), t(B), out=out),
    "linalg.ldl_factor": lambda m, t, out: m.linalg.ldl_factor(t(A), out=out),
    "linalg.ldl_solve": lambda m, t, out: m.linalg.ldl_solve(*m.linalg.ldl_factor(t(A).detach()), t(B), out=out),
    "cholesky": lambda m, t, out: m.cholesky(t(A), out=out),
    "qr": lambda m, t, out: m.qr(t(A), out=out),
    "svd": lambda m, t, out: m.svd(t(A), out=out),
    "inverse": lambda m, t, out: m.inverse(t(A), out=out),
    "cholesky_inverse": lambda m, t, out: m.cholesky_inverse(t(np.linalg.cholesky(A)), out=out),
    "cholesky_solve": lambda m, t, out: m.cholesky_solve(t(B), t(np.linalg.cholesky(A)), out=out),
    "triangular_solve": lambda m, t, out: m.triangular_solve(t(B), t(np.triu(A)), out=out),
    "lu_solve": lambda m, t, out: m.lu_solve(t(B), *m.linalg.lu_factor(t(A).detach()), out=out),
    "lu_unpack": lambda m, t, out: m.lu_unpack(*m.linalg.lu_factor(t(A)), out=out),
    "orgqr": lambda m, t, out: m.orgqr(t(A), t(_M["tau"]), out=out),
    "ormqr": lambda m, t, out: m.ormqr(t(A), t(np.array([0.5, 1.2, 0.0], dtype=np.float32)), t(B), out=out),
    "matrix_power": lambda m, t, out: m.matrix_power(t(A), 2, out=out),
    "frobenius_norm": lambda m, t, out: m.frobenius_norm(t(A), (0, 1), out=out),
    "zeros": lambda m, t, out: m.zeros(2, 3, out=out),
    "ones": lambda m, t, out: m.ones((2, 3), out=out),
    "full": lambda m, t, out: m.full((2,), 2.5, out=out),
    "eye": lambda m, t, out: m.eye(3, 2, out=out),
    "linspace": lambda m, t, out: m.linspace(0, 3, 5, out=out),
    "logspace": lambda m, t, out: m.logspace(0, 2, 3, out=out),
    **{n: (lambda f: lambda m, t, out: f(m, t(X), out=out))(f) for n, f in VIEW_COPIES.items()},
    "arange": lambda m, t, out: m.arange(0.5, 3, out=out),
    "arange step": lambda m, t, out: m.arange(0, 4, 1.5, out=out),
    "nuclear_norm": lambda m, t, out: m.nuclear_norm(t(A), out=out),
})


def _call(m, name, out, grad=False):
    def t(a):
        return m.tensor(a, requires_grad=grad and a.dtype.kind == "f")
    return CALLS[name](m, t, out)


def _values(r):
    return [np.asarray(x.numpy()) for x in r] if isinstance(r, tuple) else [np.asarray(r.numpy())]


def _outs(m, like, n=5):
    """Outs of `like`'s dtypes, shaped (n,): wrong, so resized."""
    def one(x):
        return m.full((n,), 7, dtype=getattr(m, str(x.dtype).split(".")[-1]))
    return tuple(one(x) for x in like) if isinstance(like, tuple) else one(like)


@pytest.mark.parametrize("name", list(CALLS))
def test_out_gets_pytorchs_values_resized(name):
    got, warned = {}, []
    for m in (torch, tj):
        out = _outs(m, _call(m, name, None))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            r = _call(m, name, out)
        warned.append(any("was resized" in str(x.message) for x in w))
        for o, x in zip(out if isinstance(out, tuple) else (out,), r if isinstance(r, tuple) else (r,)):
            assert o is x
        got[m] = [(v.dtype, v.shape, v) for v in _values(r)]
    assert warned[1] or not warned[0]   # (PyTorch's addbmm alone resizes without it)
    for (dt, shape, want), (gdt, gshape, v) in zip(got[torch], got[tj]):
        assert (str(gdt), gshape) == (str(dt), shape)
        np.testing.assert_allclose(v, want, rtol=2e-6, atol=1e-6)


# PyTorch's functions whose out= under grad mode is taken, the out getting a grad_fn (quantile's,
# tensordot's, slice_scatter's and the view copies' copy with autograd, the others' is
# NotImplemented); tracejit refuses them as the others.
_TAKEN_WITH_GRAD = ("quantile", "nanquantile", "histogram", "tensordot", "slice_scatter", "softmax", "softmax dtype",
                    "log_softmax", "conj_physical", "special.ndtr", "linalg.cond", "linalg.matrix_norm",
                    "linalg.norm", "linalg.tensorinv", "linalg.tensorsolve", "nuclear_norm", "linalg.ldl_factor",
                    "linalg.ldl_solve",
                    *(n for n in VIEW_COPIES if n != "narrow_copy"),
                    # (PyTorch's have no derivative, so results not requiring grad; tracejit's do)
                    "special.modified_bessel_i0", "special.modified_bessel_i1")


@pytest.mark.parametrize("name", [n for n in CALLS if n not in _TAKEN_WITH_GRAD])
def test_out_with_an_input_requiring_grad_is_refused_as_pytorch(name):
    refused = []
    for m in (torch, tj):
        out = _outs(m, _call(m, name, None), 0)
        try:
            _call(m, name, out, grad=True)
            refused.append(False)
        except RuntimeError as e:
            assert "don't support automatic differentiation" in str(e)
            refused.append(True)
        with m.no_grad():
            _call(m, name, out, grad=True)   # (without grad mode it is taken)
    assert refused[1] == refused[0]


@pytest.mark.parametrize("name", list(CALLS))
@pytest.mark.parametrize("dtype", ["float64", "float16", "int64", "bool"])
def test_out_of_another_dtype_taken_or_refused_as_pytorch(name, dtype):
    if name in ("linspace", "logspace") and dtype == "bool":
        pytest.skip("tracejit's linspace makes bools, PyTorch's refuses to (with or without out=)")
    result = {}
    for m in (torch, tj):
        like = _call(m, name, None)
        first = like[0] if isinstance(like, tuple) else like
        out = m.empty(0, dtype=getattr(m, dtype))
        outs = (out,) + tuple(m.empty(0, dtype=x.dtype) for x in like[1:]) if isinstance(like, tuple) else out
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = _call(m, name, outs)
            result[m] = _values(r)[0].astype(np.float64) if first.dtype is not m.bool else _values(r)[0]
        except (RuntimeError, NotImplementedError, TypeError):   # (PyTorch's cat: TypeError)
            result[m] = None
    if result[torch] is None:
        assert result[tj] is None, f"{name}: torch refuses an out of {dtype}"
    else:
        assert result[tj] is not None, f"{name}: torch takes an out of {dtype}"
        np.testing.assert_allclose(result[tj], result[torch], rtol=1e-3)


PAIRS = {**dict.fromkeys(["kthvalue", "median", "nanmedian", "mode", "cummax", "cummin"], ("values", "indices")),
         "aminmax": ("min", "max"), "frexp": ("mantissa", "exponent")}


@pytest.mark.parametrize("name", PAIRS)
def test_pairs_take_a_tuple_out_of_their_own_dtypes(name):
    for m in (torch, tj):
        like = _call(m, name, None)
        outs = tuple(m.empty(0, dtype=x.dtype) for x in like)
        r = _call(m, name, outs)
        assert r[0] is outs[0] and r[1] is outs[1]
        assert all(getattr(r, f) is o for f, o in zip(PAIRS[name], outs))   # (named as PyTorch's)
        wrong = m.int32 if like[1].dtype is not m.int32 else m.int64
        with pytest.raises(RuntimeError):
            _call(m, name, (outs[0], m.empty(0, dtype=wrong)))
        with pytest.raises(TypeError, match="tuple"):
            _call(m, name, outs[0])


def test_varargs_functions_keep_the_generic_out_wrapper():
    import tracejit.ops as ops
    from tracejit.outarg import OUT_FUNCTIONS_VARARGS, _exact
    for name in OUT_FUNCTIONS_VARARGS:
        assert getattr(tj, name).__wrapped__ is getattr(ops, name) and _exact(getattr(ops, name), name) is None
    x = np.array([1.0, 2.0], dtype=np.float32)
    for m in (torch, tj):   # (the deprecated order: value second)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = m.empty(0)
            assert m.addcmul(m.tensor(x), 3, m.tensor(x), m.tensor(x), out=out) is out
        assert out.tolist() == [4.0, 14.0]


def test_round_takes_an_out_of_its_own_dtype_only():
    x = np.array([1.26, -2.5, 3.14], dtype=np.float32)
    for m in (torch, tj):
        for f in (lambda out: m.round(m.tensor(x), out=out), lambda out: m.round(m.tensor(x), decimals=1, out=out),
                  lambda out: m.special.round(m.tensor(x), out=out)):
            out = m.full((3,), 7.0, dtype=m.float64)
            with pytest.raises(RuntimeError, match="dtype"):
                f(out)
            assert out.tolist() == [7.0] * 3


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
def test_random_and_uninitialized_creation_makes_outs_dtype(dtype):
    calls = {"empty": lambda m, out: m.empty(2, 3, out=out), "rand": lambda m, out: m.rand(2, 3, out=out),
             "randn": lambda m, out: m.randn((2, 3), out=out),
             "randint": lambda m, out: m.randint(0, 2, (2, 3), out=out),
             "randperm": lambda m, out: m.randperm(6, out=out).reshape(2, 3),
             "bernoulli": lambda m, out: m.bernoulli(m.full((2, 3), 0.5), out=out),
             "multinomial": lambda m, out: m.multinomial(m.ones(2, 4), 3, out=out)}
    for name, call in calls.items():
        got = []
        for m in (torch, tj):
            out = m.empty(0, dtype=getattr(m, dtype))
            try:
                r = call(m, out)
            except (RuntimeError, NotImplementedError, TypeError):   # (tracejit's rand of ints: TypeError)
                got.append(None)
                continue
            assert str(r.dtype).split(".")[-1] == dtype and tuple(r.shape) == (2, 3)
            v = np.asarray(r.numpy(), dtype=np.float64)
            if name in ("rand", "bernoulli", "randint"):
                assert ((v >= 0) & (v <= 1)).all()
            if name == "randperm" and dtype != "bool":
                assert sorted(v.ravel().tolist()) == list(range(6))
            if name == "multinomial":   # (without replacement: distinct indices of 4 per row)
                assert all(len(set(row)) == 3 and set(row) <= {0, 1, 2, 3} for row in v.tolist())
            got.append(dtype)
        if name in ("randperm", "randint") and dtype == "bool":
            continue   # (PyTorch's refuse bools: randperm's not implemented, randint bounds-checked)
        assert got[1] == got[0], (name, dtype)


def test_creation_with_a_dtype_other_than_outs_is_refused():
    for m in (torch, tj):
        out = m.full((2,), 7.0)
        with pytest.raises(RuntimeError, match="does not match dtype of out"):
            m.zeros(2, dtype=m.float64, out=out)
        with pytest.raises(RuntimeError, match="does not match dtype of out"):
            m.full((2,), 1.0, dtype=m.int64, out=out)
        assert out.tolist() == [7.0, 7.0]
        assert m.full((2,), 3, dtype=m.float32, out=out) is out and out.tolist() == [3.0, 3.0]

