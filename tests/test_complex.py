"""Complex tensors: dtypes and promotion, values and PyTorch-convention gradients against
PyTorch's, refusals, printing, serialization and the compile fallback."""
import io

import numpy as np
import pytest

import tracejit as tj
from tracejit import dtypes as D
from tracejit.errors import DTypeError, TraceError, ValueRangeError

torch = pytest.importorskip("torch")


def _c(shape, dtype=np.complex64, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def _r(shape, dtype=np.float32, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _np(t):
    return t.detach().resolve_conj().numpy() if isinstance(t, torch.Tensor) else t.detach().numpy()


def _close(a, b, tol=1e-5):
    a, b = _np(a), _np(b)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, atol=tol, rtol=tol)


# ---------------------------------------------------------------- dtypes and promotion
def test_dtype_names():
    assert tj.cfloat is tj.complex64 and tj.cdouble is tj.complex128
    assert D.as_dtype("cfloat") is tj.complex64 and D.as_dtype(np.complex128) is tj.complex128
    assert tj.complex64.is_complex and not tj.complex64.is_floating_point
    assert tj.complex64.to_real() is tj.float32 and tj.float64.to_complex() is tj.complex128
    assert tj.tensor([1 + 2j]).is_complex() and tj.is_complex(tj.zeros(2, dtype=tj.cdouble))
    assert not tj.ones(2).is_complex() and not tj.ones(2, dtype=tj.cfloat).is_floating_point()
    assert tj.finfo(tj.cfloat).eps == torch.finfo(torch.cfloat).eps and tj.finfo(tj.cdouble).dtype == "float64"
    assert tj.promote_types(tj.float64, tj.cfloat) is tj.complex128
    assert tj.ones(1, dtype=tj.cfloat).type() == torch.ones(1, dtype=torch.cfloat).type()
    assert tj.ones(1, dtype=tj.cdouble).type() == torch.ones(1, dtype=torch.cdouble).type()


def _name(torch_dtype):
    """PyTorch's dtype name; its complex32 (half parts) is complex64 here (no complex32)."""
    n = str(torch_dtype).split(".")[1]
    return "complex64" if n == "complex32" else n


_DTS = ["float16", "float32", "float64", "int64", "int32", "bool", "complex64", "complex128"]


@pytest.mark.filterwarnings("ignore:ComplexHalf")
@pytest.mark.parametrize("a", _DTS)
@pytest.mark.parametrize("b", ["complex64", "complex128"])
def test_promotion_matches_torch(a, b):
    assert D.promote_types(getattr(tj, a if a != "bool" else "bool_"), getattr(tj, b)).name == \
        _name(torch.promote_types(getattr(torch, a), getattr(torch, b)))
    ta, tb = torch.ones(3, dtype=getattr(torch, a)), torch.ones((), dtype=getattr(torch, b))
    ja, jb = tj.ones(3, dtype=getattr(tj, a if a != "bool" else "bool_")), tj.ones((), dtype=getattr(tj, b))
    assert (ja + jb).dtype.name == _name((ta + tb).dtype)  # a 0-d complex operand
    assert (jb + ja).dtype.name == _name((tb + ta).dtype)


@pytest.mark.parametrize("a", ["float32", "float64", "int64", "bool", "complex64", "complex128"])
def test_weak_complex_scalar(a):
    ta = torch.ones(2, dtype=getattr(torch, a))
    ja = tj.ones(2, dtype=getattr(tj, a if a != "bool" else "bool_"))
    assert (ja * 1j).dtype.name == str((ta * 1j).dtype).split(".")[1]
    assert (ja.to(tj.cfloat) * 2.5).dtype is tj.complex64 if a != "complex128" else True


# ---------------------------------------------------------------- values
def test_creation_printing_and_python_values():
    t = tj.tensor([1.5 + 2j, -3j])
    assert t.dtype is tj.complex64
    assert t.tolist() == [1.5 + 2j, -3j] and tj.tensor(1 + 2j).item() == 1 + 2j
    assert tj.tensor(1j).dtype is tj.complex64
    assert repr(t) == repr(torch.tensor([1.5 + 2j, -3j])) == "tensor([1.5000+2.j, -0.0000-3.j])"
    assert repr(tj.tensor([0.8506 + 0.637j, 1j])) == "tensor([0.8506+0.6370j, 0.0000+1.0000j])"
    assert "dtype=tracejit.complex128" in repr(t.to(tj.cdouble))
    assert tj.zeros(2, dtype=tj.cfloat).tolist() == [0j, 0j]
    x = tj.ones(2)
    with pytest.raises(ValueRangeError, match="index_put: value 1j cannot be converted to type float32"):
        x[0] = 1j   # (PyTorch: "value cannot be converted to type float without overflow")
    assert x.tolist() == [1.0, 1.0]
    r = tj.randn(1000, dtype=tj.cfloat)
    assert r.dtype is tj.complex64 and r.imag.abs().sum().item() > 0


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_elementwise_matches_torch(dtype):
    a, b = _c((3, 4), dtype), _c((4,), dtype, seed=2)
    ta, tb, ja, jb = torch.tensor(a), torch.tensor(b), tj.tensor(a), tj.tensor(b)
    tol = 1e-5 if dtype == np.complex64 else 1e-12
    for f in (lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: x / y,
              lambda x, y: x * 2.5 - 1j, lambda x, y: (-x).exp(), lambda x, y: x.conj(),
              lambda x, y: x.conj_physical(), lambda x, y: x.sum(0), lambda x, y: x.mean(),
              lambda x, y: x.mean(-1, keepdim=True), lambda x, y: x.t() * y[:3], lambda x, y: x.sqrt(),
              lambda x, y: x.log(), lambda x, y: x @ y, lambda x, y: x.reshape(2, 6).flip(0)[1:],
              lambda x, y: x ** 2):
        _close(f(ja, jb), f(ta, tb), tol)
    for f in (lambda x: x.mH, lambda x: x.H, lambda x: x.adjoint(), lambda x: x.norm(),
              lambda x: tj.nn.functional.normalize(x) if isinstance(x, tj.Tensor) else torch.nn.functional.normalize(x),
              lambda x: x.masked_fill(x.real > 0, 0), lambda x: x.roll(1, 1), lambda x: x.repeat(2, 1),
              lambda x: x[:, [2, 0]],
              lambda x: x.abs(), lambda x: x.angle(), lambda x: x.real, lambda x: x.imag,
              lambda x: x.sgn(), lambda x: x == x.conj(), lambda x: x.isnan()):
        _close(f(ja), f(ta), tol)


def test_edge_shapes():
    for shape in ((), (0,), (2, 0, 3)):
        a = _c(shape)
        _close(tj.tensor(a) * tj.tensor(a), torch.tensor(a) * torch.tensor(a))
        _close(tj.view_as_real(tj.tensor(a)), torch.view_as_real(torch.tensor(a)))
        _close(tj.tensor(a).sgn(), torch.tensor(a).sgn())
    for z in (np.complex64(0), np.array([0, 3 + 4j, -2j], np.complex128)):   # (sgn(0) is 0)
        _close(tj.tensor(z).sgn(), torch.tensor(z).sgn())
    a = _r((3, 4, 2))
    _close(tj.view_as_complex(tj.tensor(a)), torch.view_as_complex(torch.tensor(a)))


def test_views_share_memory():
    z = tj.tensor([1 + 2j, 3 + 4j])
    r = tj.view_as_real(z)
    r[0, 1] = 9.0
    assert z.tolist() == [1 + 9j, 3 + 4j]
    z.real[1] = 7.0
    assert z.tolist() == [1 + 9j, 7 + 4j]
    c = tj.view_as_complex(r)
    c[0] = 0j
    assert r.tolist() == [[0.0, 0.0], [7.0, 4.0]]
    x = tj.tensor(_r((3, 6)))
    _close(tj.view_as_complex(x[:, 2:4]), torch.view_as_complex(torch.tensor(x.numpy())[:, 2:4]))
    v = tj.view_as_complex(x[1:, 2:4])
    v[0] = 5j
    assert x[1, 2].item() == 0.0 and x[1, 3].item() == 5.0
    with pytest.raises(tj.errors.ShapeError, match="stride"):
        tj.view_as_complex(tj.ones(2, 4).t())


def test_complex_polar_constructors():
    re, im = _r((3,)), _r((3,), seed=5)
    _close(tj.complex(tj.tensor(re), tj.tensor(im)), torch.complex(torch.tensor(re), torch.tensor(im)))
    _close(tj.polar(tj.tensor(np.abs(re)), tj.tensor(im)), torch.polar(torch.tensor(np.abs(re)), torch.tensor(im)))
    with pytest.raises(DTypeError):
        tj.complex(tj.ones(2), tj.ones(2, dtype=tj.float64))


def test_casts():
    z = tj.tensor([1 + 2j, -3 - 4j])
    assert z.float().tolist() == [1.0, -3.0]   # the real part, as in PyTorch
    assert tj.tensor([1.0, 2.0]).to(tj.cdouble).tolist() == [1 + 0j, 2 + 0j]
    assert tj.arange(3).to(tj.cfloat).dtype is tj.complex64
    b = tj.tensor([1.5, -2.0]).bfloat16()   # bf16 operands take part as their values
    assert (b * 1j).tolist() == [1.5j, -2j] and b.to(tj.cfloat).tolist() == [1.5 + 0j, -2 + 0j]
    assert z.to(tj.bfloat16).float().tolist() == [1.0, -3.0]


@pytest.mark.parametrize("op", [lambda z: z < z, lambda z: z.max(), lambda z: z.amin(0), lambda z: z.argmax(),
                                lambda z: tj.softmax(z, 0), lambda z: tj.relu(z), lambda z: z.sign(),
                                lambda z: tj.maximum(z, z), lambda z: z.clamp(0, 1), lambda z: z.floor(),
                                lambda z: tj.nn.functional.layer_norm(z, (2,)), lambda z: z.erf()])
def test_unsupported_ops_refuse(op):
    z = tj.tensor([[1 + 2j, 3 - 1j]])
    with pytest.raises((DTypeError, TypeError, NotImplementedError, RuntimeError)):
        op(z)


def test_pairwise_distance_of_moduli():
    a, b = _c((2, 3)), _c((2, 3), seed=4)
    _close(tj.nn.functional.pairwise_distance(tj.tensor(a), tj.tensor(b)),
           torch.nn.functional.pairwise_distance(torch.tensor(a), torch.tensor(b)))


def test_mse_loss_refuses_complex():
    with pytest.raises(DTypeError, match="mse_loss"):
        tj.nn.functional.mse_loss(tj.ones(2, dtype=tj.cfloat), tj.zeros(2, dtype=tj.cfloat))


def test_refusal_names_the_op():
    with pytest.raises(DTypeError, match="lt: complex tensors are not supported"):
        tj.ones(2, dtype=tj.cfloat) < tj.ones(2, dtype=tj.cfloat)


# ---------------------------------------------------------------- gradients
def _grads(fn, *arrays):
    """fn's real loss and its inputs' gradients, in tracejit and in PyTorch."""
    tt = [torch.tensor(a, requires_grad=True) for a in arrays]
    jt = [tj.tensor(a, requires_grad=True) for a in arrays]
    fn(tt, torch).backward()
    fn(jt, tj).backward()
    for t, j in zip(tt, jt):
        assert (j.grad is None) == (t.grad is None)
        if t.grad is not None:
            _close(j.grad, t.grad, 1e-4)


def _real_loss(y, lib):
    y = lib.view_as_real(y.resolve_conj()) if y.is_complex() else y
    return (y * lib.arange(y.numel(), dtype=y.dtype).reshape(y.shape).sin()).sum()


@pytest.mark.parametrize("case", [
    lambda v, L: v[0] * v[1], lambda v, L: v[0] / v[1], lambda v, L: v[0].exp() + v[1],
    lambda v, L: v[0].conj() * v[1], lambda v, L: v[0] @ v[1].t(), lambda v, L: v[0].sqrt(),
    lambda v, L: v[0] ** 2 - v[1] * 3j, lambda v, L: v[0].sum(1, keepdim=True) * v[1].mean(0),
    lambda v, L: v[0].log() * v[1][:, :1], lambda v, L: v[0].prod(1), lambda v, L: v[0].cumprod(1),
    lambda v, L: v[0].cumsum(0) * v[1], lambda v, L: v[0].norm(), lambda v, L: L.linalg.vector_norm(v[0], dim=1),
    lambda v, L: v[0] ** v[1], lambda v, L: L.where(v[0].real > 0, v[0], v[1]),
    lambda v, L: v[0][L.tensor([2, 0])] * v[1][1], lambda v, L: L.cat([v[0], v[1].conj()], 1),
    lambda v, L: v[0][:, None, :].expand(3, 2, 4) * 1j, lambda v, L: v[0].reciprocal() + v[1].square(),
    lambda v, L: L.einsum("ij,kj->ik", v[0], v[1]), lambda v, L: L.nn.functional.linear(v[0], v[1]),
    lambda v, L: v[0].sin() * v[1].cos(), lambda v, L: v[0].rsqrt(), lambda v, L: 2.0 / v[0] + v[0] / (1 + 1j),
    lambda v, L: (v[0] * v[0].conj()).real, lambda v, L: v[0].t().clone() @ v[1]])
def test_complex_leaf_gradients(case):
    _grads(lambda v, L: _real_loss(case(v, L), L), _c((3, 4)), _c((3, 4), seed=3))


@pytest.mark.parametrize("case", [
    lambda v, L: v[0].abs(), lambda v, L: v[0].angle(), lambda v, L: v[0].real * 2 + v[0].imag,
    lambda v, L: v[0].sgn(), lambda v, L: L.view_as_real(v[0]).sum(-1)])
def test_complex_to_real_gradients(case):
    _grads(lambda v, L: _real_loss(case(v, L), L), _c((3, 4)))


@pytest.mark.parametrize("case", [
    lambda v, L: L.polar(v[0].abs() + 0.1, v[1]), lambda v, L: L.complex(v[0], v[1]),
    lambda v, L: L.view_as_complex(L.stack([v[0], v[1]], -1)) * (1 + 2j),
    lambda v, L: v[0].to(L.cfloat) * v[1]])
def test_real_to_complex_gradients(case):
    _grads(lambda v, L: _real_loss(case(v, L), L), _r((3, 4)), _r((3, 4), seed=4))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rotary_chain_gradients(dtype):
    """LLaMA's rotary embedding: real params through view_as_complex, a product with the
    frequencies and view_as_real; the real params' gradients as in PyTorch."""
    B, S, H, D = 2, 5, 3, 8
    x, w = _r((B, S, H * D), dtype), _r((H * D, H * D), dtype, seed=7)
    theta = np.outer(np.arange(S), 1.0 / 10000 ** (np.arange(0, D, 2) / D)).astype(np.float32)

    def run(L, v):
        xq, wq = v
        f = L.tensor(theta)
        fc = L.polar(L.ones_like(f), f)
        q = (xq @ wq).view(B, S, H, D)
        q_ = L.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
        out = L.view_as_real(q_ * fc.view(1, S, 1, D // 2)).flatten(3).type_as(q)
        return (out * out.detach().cos()).sum()
    tt = [torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)]
    jt = [tj.tensor(x, requires_grad=True), tj.tensor(w, requires_grad=True)]
    lt_, lj = run(torch, tt), run(tj, jt)
    lt_.backward()
    lj.backward()
    assert lj.item() == pytest.approx(lt_.item(), rel=1e-5)
    for t, j in zip(tt, jt):
        _close(j.grad, t.grad, 1e-4)


def test_complex_leaf_grad_accumulates_and_requires_grad():
    z = tj.tensor(_c((4,)), requires_grad=True)
    (z * z).abs().sum().backward()
    first = z.grad.clone()
    (z * z).abs().sum().backward()
    _close(z.grad, first * 2)
    assert z.grad.dtype is tj.complex64
    with pytest.raises(RuntimeError, match="only for real scalar outputs"):
        (z * 2).sum().backward()


# ---------------------------------------------------------------- serialization, compile
def test_save_load_roundtrip():
    buf = io.BytesIO()
    z = tj.tensor(_c((2, 3)))
    tj.save({"z": z, "w": z.to(tj.cdouble), "p": tj.tensor(_c((2,)), requires_grad=True)}, buf)
    buf.seek(0)
    back = tj.load(buf)
    assert back["z"].dtype is tj.complex64 and back["w"].dtype is tj.complex128
    np.testing.assert_array_equal(back["z"].numpy(), z.numpy())
    assert back["p"].requires_grad


def test_compiled_complex_chain_carries_gradients():
    """Complex calls inside a compiled graph (rotary-style view_as_complex of real inputs,
    a complex leaf as ComplEx's embeddings, RotatE's polar, complex Python numbers)
    differentiate as eagerly, with no fallback."""
    fc = np.exp(1j * _r((4, 2), seed=5)).astype(np.complex64)

    def f(x, e, L):
        z = L.view_as_complex(x.reshape(4, 2, 2))
        rot = L.polar(L.ones_like(x[:, :2]), x[:, 2:])     # (its gradient multiplies by 1j)
        return (L.view_as_real(z * L.tensor(fc) * e * 1j).flatten(1).sum() + (z * e.conj()).real.sum()
                + (rot * (2 - 1j)).abs().sum())
    xs, es = _r((4, 4)), _c((4, 2))
    tt = [torch.tensor(xs, requires_grad=True), torch.tensor(es, requires_grad=True)]
    f(*tt, torch).backward()
    cf = tj.compile(lambda x, e: f(x, e, tj), fullgraph=True)
    for _ in range(2):
        jt = [tj.tensor(xs, requires_grad=True), tj.tensor(es, requires_grad=True)]
        got = cf(*jt)
        got.backward()
        assert got.item() == pytest.approx(f(*tt, torch).item(), rel=1e-5)
        for t, j in zip(tt, jt):
            _close(j.grad, t.grad, 1e-5)
    assert cf.cache_stats()["compiles"] == 1
    with tj.no_grad():   # (the inference graph runs the same calls without a backward)
        assert cf(*jt).item() == pytest.approx(got.item(), rel=1e-6)


def test_compiled_complex_under_no_grad_stops_the_gradient():
    def f(x, L):
        with L.no_grad():
            r = L.polar(L.ones_like(x), x)     # a fixed rotation, as eagerly
        return (L.polar(L.ones_like(x), x) * r).real.sum() + L.view_as_real(r).sum()
    xs = _r((5,))
    t = torch.tensor(xs, requires_grad=True)
    f(t, torch).backward()
    j = tj.tensor(xs, requires_grad=True)
    tj.compile(lambda x: f(x, tj), fullgraph=True)(j).backward()
    _close(j.grad, t.grad)


def test_compiled_complex_call_on_a_bfloat16_operand():
    """A bf16 operand or result of a complex call in a compiled function is read by its
    values, and its gradient is PyTorch's."""
    def f(a, b, L):
        z = a * b - b.to(L.complex64)
        return z, z.to(L.bfloat16) * 2, z.abs().sum()
    cs, rs = _c((5,)), _r((5,))
    tb = torch.tensor(rs).bfloat16().requires_grad_()
    want = f(torch.tensor(cs), tb, torch)
    want[2].backward()
    jb = tj.tensor(rs).bfloat16().requires_grad_()
    got = tj.compile(lambda a, b: f(a, b, tj), fullgraph=True)(tj.tensor(cs), jb)
    got[2].backward()
    for g, w in zip(got + (jb.grad,), want + (tb.grad,)):
        _close(g.float() if g.dtype is tj.bfloat16 else g, w.float() if w.dtype is torch.bfloat16 else w, 1e-2)


@pytest.mark.parametrize("case", ["views_then_write", "write_through_view", "spectral_slots"])
def test_compiled_writes_into_complex_tensors(case):
    """In-place writes into complex tensors in a compiled function (FNO's out_ft[...] =
    spectral products): values, earlier views of the written tensor and gradients as eagerly."""
    def f(x, L):
        if case == "views_then_write":
            z = L.complex(x, x * 2)
            v = z[1]
            z[1] = z[0] * 1j
            return L.view_as_real(v * 2).sum() + (z * z.conj()).real.sum()
        if case == "write_through_view":
            z = L.polar(L.ones_like(x), x) * 1
            z[:, :2].mul_(1 + 1j)
            return L.view_as_real(z).pow(2).mul(L.arange(2.)).sum()
        out = L.zeros(3, 6, dtype=L.cfloat)
        out[:, :4] = L.polar(x, x)
        out[:, 4:] += 1j
        return L.view_as_real(out).pow(2).sum() + out.abs().sum()
    xs = _r((3, 4))
    t = torch.tensor(xs, requires_grad=True)
    want = f(t, torch)
    want.backward()
    j = tj.tensor(xs, requires_grad=True)
    got = tj.compile(lambda x: f(x, tj), fullgraph=True)(j)
    got.backward()
    assert got.item() == pytest.approx(want.item(), rel=1e-5)
    _close(j.grad, t.grad)


def test_compiled_write_into_a_complex_tensors_real_part_is_refused():
    def f(x):
        z = tj.polar(tj.ones_like(x), x) * 1
        z.real.mul_(2)
        return tj.view_as_real(z).sum()
    with pytest.raises(TraceError, match="real or imaginary part"):
        tj.compile(f, fullgraph=True)(tj.randn(3))


def test_complex_math_in_a_scripted_branch_names_the_op():
    @tj.script
    def f(x):
        z = tj.view_as_complex(x)
        if x.sum() > 0:
            z = z * z
        return z.abs().sum()
    with pytest.raises(TraceError, match="mul.*complex tensors inside a branch or loop body"):
        f(tj.randn(3, 2))


@pytest.mark.parametrize("name", ["tanh", "sigmoid", "expm1", "log1p", "asin", "acos", "atan", "asinh", "atanh"])
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_holomorphic_functions_values_and_two_orders_of_gradients_as_torch(name, dtype):
    """Each is holomorphic with real Taylor coefficients (they refused complex operands)."""
    zs = np.array([1 + 2j, -0.3 + 0.1j, 0.5 - 0.7j, -2 - 1j])
    got = []
    for m in (torch, tj):
        z = m.tensor(zs, dtype=getattr(m, dtype), requires_grad=True)
        y = getattr(m, name)(z)
        w = m.tensor([1.0, 2.0, -1.0, 0.5])
        (g,) = m.autograd.grad((y.real * w + y.imag * w * w).sum(), z, create_graph=True)
        (g2,) = m.autograd.grad((g.real * w).sum() + g.imag.sum(), z)
        got.append([t.detach().resolve_conj().numpy() for t in (y, g, g2)] + [str(y.dtype).split(".")[1]])
    tol = 1e-4 if dtype == "complex64" else 1e-10
    for a, b in zip(got[0][:3], got[1][:3]):
        np.testing.assert_allclose(b, a, rtol=tol, atol=tol)
    assert got[1][3] == got[0][3]


_Z = np.array([[1 + 2j, -3 + 0.5j, 0.2 - 1j], [2 - 2j, 0.5 + 0.5j, -1 + 0j]])
_W = np.arange(6.0).reshape(2, 3) + 1
_REAL_VIEW_WRITES = {
    "row_real": lambda m, z: (z[0].real.mul_(2), (z * z.conj()).real.sum() + z.abs().sum())[1],
    "imag_slice": lambda m, z: (z.imag[:, 1:].add_(m.tensor(_W)[:, 1:]), (z.abs() * m.tensor(_W)).sum())[1],
    "transposed_real": lambda m, z: (z.t().real.mul_(3), (z.angle() * m.tensor(_W)).sum())[1],
    "view_as_real_column": lambda m, z: (m.view_as_real(z)[..., 1].sub_(1), (z * z).real.sum())[1],
    "older_views_after": lambda m, z: (lambda r, i: (r.mul_(2), (i * m.tensor(_W)).sum() + (r * r).sum())[1])(
        z.real, z.imag),
    "setitem": lambda m, z: (z.real.__setitem__((0, 0), 7.0), z.abs().sum())[1],
    "hook_before": lambda m, z: (lambda r: (r.register_hook(lambda g: g * 10), r.mul_(2), z.abs().sum())[2])(z.real),
}


@pytest.mark.parametrize("name", list(_REAL_VIEW_WRITES))
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_in_place_writes_through_real_views_of_complex_tensors_under_autograd(name, dtype):
    """``z.real.mul_(2)`` and the like on a complex tensor in a graph: the base's history is
    rebuilt through view_as_real, as PyTorch's CopySlices (it raised)."""
    got = []
    for m in (torch, tj):
        z0 = m.tensor(_Z, dtype=getattr(m, dtype), requires_grad=True)
        out = _REAL_VIEW_WRITES[name](m, z0 * 1)
        out.backward()
        got.append((out.item(), z0.grad.resolve_conj().numpy()))
    tol = 1e-5 if dtype == "complex64" else 1e-12
    np.testing.assert_allclose(got[1][0], got[0][0], rtol=tol)
    np.testing.assert_allclose(got[1][1], got[0][1], rtol=tol, atol=tol)
