"""tracejit/tensor_compat.py against PyTorch: Tensor methods (apply_) and the ``_foreach_*``
list functions (in-place forms returning the tensors given, with a list, a scalar or a list
of scalars, keyword arguments, and the out-of-place forms)."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_apply_replaces_each_element_by_the_callables_value_in_place(dtype):
    a = np.array([[0.2, 0.7, 3.0], [0.5, 0.1, -2.0]]).astype(dtype)
    binarize = lambda v: 0 if v < 0.5 else 1 + v   # noqa: E731 (pytorch-ntm's idiom)
    t, j = torch.from_numpy(a.copy()), tj.tensor(a.copy())
    version = j._version
    assert j.apply_(binarize) is j and j._version > version
    assert j.dtype == getattr(tj, dtype)
    np.testing.assert_array_equal(j.numpy(), t.apply_(binarize).numpy())


def test_apply_on_a_view_writes_through_to_its_base():
    j = tj.zeros(2, 3)
    j[1].apply_(lambda v: v + 5)
    assert j.tolist() == [[0.0, 0.0, 0.0], [5.0, 5.0, 5.0]]


class GradMultiply(tj.autograd.Function):
    """fairseq's: ``x.new(x)`` in the forward (an alias of x), the gradient scaled."""
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.new(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


def test_new_of_a_tensor_aliases_it_as_pytorchs_and_compiles():
    x = tj.arange(4.0).requires_grad_()
    y = x.new(x)
    t = torch.arange(4.0).requires_grad_()
    assert y.requires_grad == t.new(t).requires_grad and y.tolist() == t.tolist()
    with pytest.raises(TypeError, match="int64"):
        x.new(tj.arange(3))
    f = tj.compile(lambda v: (GradMultiply.apply(v * 2, 0.1) ** 2).sum(), fullgraph=True)
    f(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), 0.1 * 8 * np.arange(4.0), rtol=1e-6)


def test_foreach_functions_match_pytorch():
    r = np.random.default_rng(0)
    a = [r.standard_normal(s).astype(np.float32) for s in ((3,), (2, 4))]
    b = [r.standard_normal(s).astype(np.float32) for s in ((3,), (2, 4))]
    got = {}
    for lib in (torch, tj):
        ema, p = [lib.tensor(x) for x in a], [lib.tensor(x) for x in b]
        out = lib._foreach_lerp_(ema, p, 0.1)       # timm's ModelEmaV3 update
        assert all(o is e for o, e in zip(out, ema))
        lib._foreach_mul_(ema, [0.5, 2.0])
        lib._foreach_add_(ema, p, alpha=-0.25)
        lib._foreach_addcmul_(ema, p, p, value=0.3)
        norms = lib._foreach_norm(ema, 2)
        sq = lib._foreach_mul(p, 3.0)
        got[lib] = [t.numpy() for t in list(ema) + list(norms) + list(sq)]
    for x, y in zip(got[tj], got[torch]):
        np.testing.assert_allclose(x, y, rtol=1e-6)
    with pytest.raises(AttributeError, match="_foreach_no_such_op"):
        tj._foreach_no_such_op


def test_layout_and_stream_queries_match_torch():
    for lib in (torch, tj):
        x = lib.zeros(2, 3, 4)
        assert x.dim_order() == (0, 1, 2) and x.permute(2, 0, 1).dim_order() == (1, 2, 0)
        assert x.const_data_ptr() == x.data_ptr() and x.is_neg() is False and x.is_xla is False
    assert tj.zeros(1).record_stream(object()) is None   # (no streams to record on)


@pytest.mark.parametrize("lib", [torch, tj], ids=["torch", "tracejit"])
def test_set_as_subclass_nonzero_static(lib):
    a, b = lib.arange(4.0), lib.zeros(2, 3)
    assert a.set_(b) is a and tuple(a.shape) == (2, 3)
    b[0, 0] = 5.0   # (the memory is shared)
    assert a[0, 0].item() == 5.0 and a.set_().numel() == 0
    x = lib.tensor([0.0, 1.0, 0.0, 2.0])
    assert x.nonzero_static(size=3).tolist() == [[1], [3], [-1]]
    assert x.nonzero_static(size=1, fill_value=7).tolist() == [[1]]

    class Sub(lib.Tensor):
        pass
    w = lib.ones(2, requires_grad=True)
    s = (w * 2).as_subclass(Sub)
    assert type(s) is Sub and s.requires_grad and s.tolist() == [2.0, 2.0]
    s.sum().backward()
    assert w.grad.tolist() == [2.0, 2.0]
    assert not lib.is_inference(w)


def test_legacy_and_layout_methods_as_torch():
    torch = pytest.importorskip("torch")
    import warnings
    for m in (tj, torch):
        x = m.ones(2, 3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert (x.dense_dim(), x.sparse_dim(), (x * 1).output_nr, x.volatile) == (2, 0, 0, False)
            assert x.is_set_to(x) and not x.is_set_to(x.clone()) and not x.is_set_to(x.t())
            assert tuple(x.resize(3, 2).shape) == (3, 2) and tuple(x.resize_as(m.ones(6)).shape) == (6,)
            with pytest.raises(RuntimeError, match="can only change the shape"):
                x.resize(4, 2)
        y = x.clone().map_(m.tensor([1.0, 2.0, 3.0]), lambda a, b: a * 10 + b)
        assert y.tolist() == [[11.0, 12.0, 13.0]] * 2


def test_module_load_copies_or_assigns_as_pytorch():
    torch = pytest.importorskip("torch")
    got = []
    for m in (torch, tj):
        p = m.nn.Parameter(m.zeros(3))
        with m.no_grad():
            r = p.module_load(m.ones(3))
        a = p.module_load(m.full((3,), 2.0), assign=True)
        got.append((r.tolist(), p.tolist(), r.requires_grad, a.tolist(), a.requires_grad))
    assert got[0] == got[1] == ([1.0] * 3, [1.0] * 3, False, [2.0] * 3, False)
    with pytest.raises(TypeError, match="module_load"):
        tj.zeros(3).module_load([1.0, 2.0, 3.0])


@pytest.mark.parametrize("change", [lambda b: b.t_(), lambda b: b.unsqueeze_(0), lambda b: b.transpose_(0, 1)])
def test_an_inplace_shape_change_of_a_saved_tensor_is_refused_at_backward(change):
    for m in (torch, tj):
        b = m.ones(2, 3, requires_grad=True) * 1
        v = b._version
        c = b.sin()   # (saves b)
        change(b)
        assert b._version == v + 1
        with pytest.raises(RuntimeError, match="modified by an in.?place operation"):
            c.sum().backward()


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0,), (2, 0, 3), (0, 0), (1, 0), (0, 1, 4)])
def test_empty_tensors_have_pytorchs_row_major_strides(shape):
    for make in ("zeros", "ones", "empty"):
        assert getattr(tj, make)(*shape).stride() == getattr(torch, make)(*shape).stride()
    assert tj.zeros(*shape).clone().stride() == torch.zeros(*shape).clone().stride()
    assert tj.zeros(*shape).stride(-1) == torch.zeros(*shape).stride(-1)
