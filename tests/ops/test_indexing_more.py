"""Indexing composites (ops/indexing_more.py): ``masked_scatter`` compiles as one graph
whose mask is a value (a LLaVA-style merge of image features into token embeddings), with
PyTorch's values and gradients for every mask, and checks its source's size eagerly."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import ArgumentError

torch = pytest.importorskip("torch")


def _merge(lib, embeds, ids, features):
    mask = (ids == 7).unsqueeze(-1).expand_as(embeds)
    return embeds.masked_scatter(mask, features) * 2


def test_masked_scatter_compiles_once_with_torchs_values_and_gradients():
    r = np.random.default_rng(0)
    c = tj.compile(lambda e, i, f: _merge(tj, e, i, f), fullgraph=True)
    for ids in ([[7, 1, 7, 2], [3, 7, 4, 5]], [[1, 1, 7, 7], [7, 7, 7, 0]]):
        e, f = r.standard_normal((2, 4, 3)).astype(np.float32), r.standard_normal((6, 3)).astype(np.float32)
        got, want = [], []
        for lib, fn, out in ((tj, c, got), (torch, lambda *a: _merge(torch, *a), want)):
            te, tf = lib.tensor(e, requires_grad=True), lib.tensor(f, requires_grad=True)
            y = fn(te, lib.tensor(ids), tf)
            (y * lib.arange(24.0).view(2, 4, 3)).sum().backward()
            out += [y.detach().numpy(), te.grad.numpy(), tf.grad.numpy()]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6)
    assert c.cache_stats()["compiles"] == 1 and c.cache_stats()["eager_fallbacks"] == 0


def test_masked_scatter_source_too_small_or_of_another_dtype():
    with pytest.raises(ArgumentError, match="source has 1 elements, the mask selects 2"):
        tj.zeros(3).masked_scatter(tj.tensor([True, True, False]), tj.ones(1))
    with pytest.raises(Exception, match="masked_scatter"):
        tj.zeros(3).masked_scatter(tj.tensor([True, True, False]), tj.ones(3, dtype=tj.float64))
    np.testing.assert_array_equal(tj.zeros(2).masked_scatter(tj.tensor([False, False]), tj.ones(0)).numpy(), [0, 0])


def test_compiled_masked_scatter_refuses_a_source_too_small_and_keeps_bool():
    from tracejit.errors import IndexRangeError
    c = tj.compile(lambda x, m, s: x.masked_scatter(m, s), backend="interpret")
    with pytest.raises(IndexRangeError):
        c(tj.zeros(4), tj.tensor([True, False, True, True]), tj.ones(2))
    out = tj.zeros(2, dtype=tj.bool).masked_scatter(tj.tensor([False, False]), tj.ones(0, dtype=tj.bool))
    assert out.dtype is tj.bool


def test_compiled_masked_scatter_of_an_empty_source_refuses_a_selecting_mask():
    c = tj.compile(lambda x, m, s: x.masked_scatter(m, s))
    with pytest.raises(RuntimeError, match="masked_scatter"):
        c(tj.zeros(3), tj.tensor([False, True, False]), tj.zeros(0))
    assert c(tj.arange(3.0), tj.tensor([False, False, False]), tj.zeros(0)).tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("value", [1 + 2j, 1 + 0j, "complex0d", "1d", "300"])
def test_index_fill_checks_its_value_as_torch(value):
    def fill(lib):
        x = lib.zeros(3, dtype=lib.int8 if value == "300" else lib.float32)
        v = {"complex0d": lib.tensor(1 + 0j), "1d": lib.tensor([1.0]), "300": lib.tensor(300)}.get(value, value)
        return x.index_fill(0, lib.tensor([1]), v)
    with pytest.raises(RuntimeError):
        fill(torch)
    with pytest.raises(RuntimeError):
        fill(tj)


def test_index_fill_takes_a_0_dim_tensor_as_torch_eager_and_compiled():
    def fill(lib, x, v):
        return x.index_fill(0, lib.tensor([0, 2]), v)
    want = fill(torch, torch.zeros(3, dtype=torch.int64), torch.tensor(1.7)).tolist()
    assert fill(tj, tj.zeros(3, dtype=tj.int64), tj.tensor(1.7)).tolist() == want == [1, 0, 1]
    assert tj.compile(lambda x, v: fill(tj, x, v))(tj.zeros(3, dtype=tj.int64), tj.tensor(1.7)).tolist() == want


@pytest.mark.parametrize("form", ["x[i] = v", "x[[0, 1]] = v", "x.index_put_((i,), v)", "x.index_put_((i,), v, True)",
                                  "x[m] = v", "x.put_(i, v)", "x[m] = v[0]", "x[1:3] = v", "x[0] = v[0]"])
def test_an_indexed_write_of_another_dtype_raises_where_torch_does(form):
    def write(lib):
        x, v = lib.zeros(3), lib.tensor([1.5, 2.5], dtype=lib.float64)
        exec(form, {"x": x, "v": v, "i": lib.tensor([0, 1]), "m": lib.tensor([True, False, True])})
        return x.tolist()
    try:
        want = write(torch)
    except RuntimeError:
        with pytest.raises(RuntimeError, match="dtype"):
            write(tj)
        return
    assert write(tj) == want


@pytest.mark.parametrize("call", [lambda m: m.zeros(3).scatter(0, m.tensor([-1]), m.ones(1)),
                                  lambda m: m.zeros(2, 3).scatter_(1, m.tensor([[0], [-2]]), 2.0),
                                  lambda m: m.ones(3).scatter(0, m.tensor([-1]), m.ones(1), reduce="multiply"),
                                  lambda m: m.ones(3).scatter_reduce(0, m.tensor([3]), m.ones(1), "prod"),
                                  lambda m: m.zeros(3).index_copy(0, m.tensor([-1]), m.ones(1))])
def test_a_negative_or_too_large_scatter_index_raises_as_pytorch(call):
    with pytest.raises((RuntimeError, IndexError)):
        call(torch)
    with pytest.raises(IndexError, match="out of range"):
        call(tj)


def _on_0d(m, a, v):
    i, j = m.tensor(0), m.tensor([0])
    return (a.gather(0, i), a.gather(-1, m.tensor([0, 0])), a.scatter(0, i, v), a.scatter(0, j, 4.0),
            a.scatter_add(0, i, v), a.scatter_reduce(0, i, v, "amax"), a.scatter_reduce(0, j, v[None], "mean"),
            a.index_add(0, j, v, alpha=2), a.index_copy(0, j, v), a.index_fill(0, j, -1.0),
            a.index_reduce(0, j, v, "amin"), a.clone().scatter_add_(0, i, v))


@pytest.mark.parametrize("compiled", [False, True])
def test_index_ops_of_a_0d_tensor_read_it_as_one_element(compiled):
    ta, tv = torch.tensor(2.5, requires_grad=True), torch.tensor(1.5, requires_grad=True)
    ja, jv = tj.tensor(2.5, requires_grad=True), tj.tensor(1.5, requires_grad=True)
    want = _on_0d(torch, ta, tv)
    got = (tj.compile(lambda a, v: _on_0d(tj, a, v), fullgraph=True) if compiled else lambda a, v: _on_0d(tj, a, v))(ja, jv)
    for k, (g, w) in enumerate(zip(got, want)):
        assert tuple(g.shape) == tuple(w.shape) and g.tolist() == w.tolist(), k
    sum((w * (k + 1)).sum() for k, w in enumerate(want) if w.requires_grad).backward()
    sum((g * (k + 1)).sum() for k, g in enumerate(got) if g.requires_grad).backward()
    assert (ja.grad.item(), jv.grad.item()) == (ta.grad.item(), tv.grad.item())
    with pytest.raises(IndexError):
        tj.tensor(2.5).gather(1, tj.tensor(0))


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dim, index", [(0, [0, 0, 3]), (1, [4, 2, 4, 4])])
def test_index_fill_counts_a_repeated_slice_once_in_the_value_gradient(dim, index, compiled):
    def f(lib, x, v):
        return x.index_fill(dim, lib.tensor(index), v[1])
    got, want = [], []
    for lib, out in ((tj, got), (torch, want)):
        x = lib.tensor(np.arange(20.0).reshape(4, 5) / 7, requires_grad=True)
        v = lib.tensor([0.5, -2.0], requires_grad=True)
        fn = tj.compile(lambda x, v: f(tj, x, v)) if lib is tj and compiled else (lambda x, v: f(lib, x, v))
        y = fn(x, v)
        (y * lib.arange(20.0).reshape(4, 5).sin()).sum().backward()
        out += [y.detach().numpy(), x.grad.numpy(), v.grad.numpy()]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape,dim,ishape", [((6, 5), 0, (4, 5)), ((6, 5), 1, (6, 3)), ((4, 5, 6), 1, (3, 2, 6)),
                                             ((4, 5, 6), -1, (4, 5, 2)), ((7,), 0, (4,)), ((3, 4, 5), 0, (2, 4, 3))])
@pytest.mark.parametrize("src_kind", ["tensor", "larger", "value"])
@pytest.mark.parametrize("transposed", [False, True])
def test_scatter_by_flat_positions_matches_pytorch(shape, dim, ishape, src_kind, transposed):
    """scatter writes by one flat index into the row-major input: values and the input's
    and source's gradients equal PyTorch's (distinct targets: a repeated one is undefined)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(len(shape) * 10 + dim)
    n = shape[dim]
    # distinct targets along dim within each line of the index
    idx = np.argsort(rng.random(ishape[:dim % len(shape)] + (n,) + ishape[dim % len(shape) + 1:]), axis=dim)
    idx = np.take(idx, np.arange(ishape[dim]), axis=dim)
    a = rng.standard_normal(shape[::-1] if transposed else shape)
    sshape = tuple(d + 1 for d in ishape) if src_kind == "larger" else ishape
    s = rng.standard_normal(sshape)
    got = []
    for lib in (torch, tj):
        x = lib.tensor(a, requires_grad=True)
        xin = x.permute(*range(len(shape) - 1, -1, -1)) if transposed else x
        st = lib.tensor(s, requires_grad=src_kind == "tensor")   # (PyTorch's own backward
        if src_kind == "value":                                      # refuses a larger source)
            out = xin.scatter(dim, lib.tensor(idx), 2.5)
        else:
            out = xin.scatter(dim, lib.tensor(idx), st)
        (out * lib.tensor(np.arange(out.numel(), dtype=np.float64).reshape(tuple(out.shape)))).sum().backward()
        got.append((out.detach().numpy(), x.grad.numpy(), st.grad.numpy() if src_kind == "tensor" else None))
    for m, t in zip(got[1], got[0]):
        if t is not None:
            np.testing.assert_array_equal(m, t)


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [False, True])
@pytest.mark.parametrize("form", ["rows dim 0", "rows dim 1", "elements"])
def test_scatter_extreme_values_and_grads_match_torch(reduce, include_self, form):
    torch = pytest.importorskip("torch")
    import tracejit as tj
    r = np.random.default_rng(3)
    a = r.integers(-3, 4, (6, 5)).astype(np.float32)            # small integers: many ties
    if form == "rows dim 0":      # a GNN readout's ``batch[:, None].expand(-1, 5)``
        dim, rows = 0, np.array([0, 2, 2, 5, 0, 2, 5, 5, 0])
        src = r.integers(-3, 4, (9, 5)).astype(np.float32)
        index = lambda m: m.tensor(rows)[:, None].expand(-1, 5)   # noqa: E731
    elif form == "rows dim 1":
        dim, rows = 1, np.array([4, 1, 4, 4])
        src = r.integers(-3, 4, (6, 4)).astype(np.float32)
        index = lambda m: m.tensor(rows)[None, :].expand(6, -1)   # noqa: E731
    else:
        dim, src = 0, r.integers(-3, 4, (4, 5)).astype(np.float32)
        idx = r.integers(0, 6, (4, 5))
        index = lambda m: m.tensor(idx)   # noqa: E731
    got = []
    for m in (tj, torch):
        x, s = m.tensor(a, requires_grad=True), m.tensor(src, requires_grad=True)
        y = x.scatter_reduce(dim, index(m), s, reduce, include_self=include_self)
        (y * m.tensor(np.arange(30, dtype=np.float32).reshape(6, 5))).sum().backward()
        got.append([t.detach().numpy() for t in (y, x.grad, s.grad)])
    for mine, theirs in zip(*got):
        np.testing.assert_allclose(mine, theirs, rtol=1e-6)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("include_self", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_scatter_sum_and_mean_match_torch(reduce, include_self, dtype):
    torch = pytest.importorskip("torch")
    import tracejit as tj
    r = np.random.default_rng(4)
    a = r.integers(-9, 10, (6, 5)).astype(dtype)
    src = r.integers(-9, 10, (9, 5)).astype(dtype)
    rows = np.array([0, 2, 2, 5, 0, 2, 5, 5, 0])           # rows 1, 3 and 4 not hit
    got = []
    for m in (tj, torch):
        grad = dtype == "float32"
        x, s = m.tensor(a, requires_grad=grad), m.tensor(src, requires_grad=grad)
        y = x.scatter_reduce(0, m.tensor(rows)[:, None].expand(-1, 5), s, reduce, include_self=include_self)
        outs = [y.detach().numpy()]
        if grad:
            (y * m.tensor(np.arange(30, dtype=np.float32).reshape(6, 5))).sum().backward()
            outs += [x.grad.numpy(), s.grad.numpy()]
        got.append(outs)
    for mine, theirs in zip(*got):
        assert mine.dtype == theirs.dtype
        np.testing.assert_allclose(mine, theirs, rtol=1e-6)
