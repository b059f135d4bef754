"""The fast forms of the index ops graph and sparse models lean on, against PyTorch:
``index_add`` as one row add along its dim, ``scatter_add`` / ``gather`` over a flat array or
as row ops when the index is an expanded vector (gather also when it picks whole trailing rows), ``scatter_reduce`` amax/amin as one
ufunc.at with PyTorch's gradient (ties share it), and ``narrow``/``chunk`` building their
slice directly. Values and gradients must equal PyTorch's (bitwise where both add in the
same order)."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.ops import gather_prim

torch = pytest.importorskip("torch")


def _pair(a: np.ndarray):
    grad = a.dtype.kind == "f"
    return torch.tensor(a).requires_grad_(grad), tj.tensor(a).requires_grad_(grad)


def _backward(t_out, j_out, rng):
    w = rng.standard_normal(tuple(t_out.shape)).astype(np.float32)
    (t_out * torch.tensor(w)).sum().backward()
    (j_out * tj.tensor(w)).sum().backward()


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_index_add_matches_pytorch(dim):
    rng = np.random.default_rng(dim)
    shape = [5, 6, 7]
    x = rng.standard_normal(shape).astype(np.float32)
    shape[dim] = 40
    src = rng.standard_normal(shape).astype(np.float32)
    idx = rng.integers(0, x.shape[dim], 40)
    tx, jx = _pair(x)
    ts, js = _pair(src)
    t_out = tx.index_add(dim, torch.tensor(idx), ts, alpha=0.5)
    j_out = jx.index_add(dim, tj.tensor(idx), js, alpha=0.5)
    np.testing.assert_allclose(j_out.detach().numpy(), t_out.detach().numpy(), rtol=1e-6, atol=1e-6)
    _backward(t_out, j_out, rng)
    np.testing.assert_array_equal(jx.grad.numpy(), tx.grad.numpy())
    np.testing.assert_array_equal(js.grad.numpy(), ts.grad.numpy())


def test_index_add_in_place_and_bad_index():
    deg = tj.zeros(4).index_add_(0, tj.tensor([1, 3, 1, 0]), tj.ones(4))
    assert deg.tolist() == [1.0, 2.0, 0.0, 1.0]
    base = tj.zeros(3)
    with pytest.raises(IndexError, match="index_add"):
        base.index_add_(0, tj.tensor([0, 3]), tj.ones(2))
    assert base.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("accumulate", [False, True])
def test_put_takes_negative_indices(accumulate):
    idx, src = [0, -1, 3, -6], np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    t, j = _pair(np.zeros((2, 3), np.float32))
    ts, js = _pair(src)
    t_out = (t * 1).put(torch.tensor(idx), ts, accumulate=accumulate)
    j_out = (j * 1).put(tj.tensor(idx), js, accumulate=accumulate)
    np.testing.assert_array_equal(j_out.detach().numpy(), t_out.detach().numpy())
    _backward(t_out, j_out, np.random.default_rng(0))
    np.testing.assert_array_equal(js.grad.numpy(), ts.grad.numpy())
    np.testing.assert_array_equal(j.grad.numpy(), t.grad.numpy())


@pytest.mark.parametrize("dim", [0, 1, 2])
@pytest.mark.parametrize("form", ["expanded", "rows", "random", "smaller"])
def test_scatter_add_and_gather_match_pytorch(dim, form):
    rng = np.random.default_rng(10 + dim)
    shape = (5, 6, 7)
    ishape = list(shape)
    ishape[dim] = 40
    if form == "smaller":
        ishape = [n - 1 if d != dim else n for d, n in enumerate(ishape)]
    if form == "expanded":   # a vector along dim, expanded as graph code writes it
        view = [1, 1, 1]
        view[dim] = 40
        one = rng.integers(0, shape[dim], 40)
        t_idx = torch.tensor(one).view(view).expand(ishape)
        j_idx = tj.tensor(one).view(view).expand(ishape)
        assert gather_prim._row_index(j_idx._data, dim, shape) is not None
    elif form == "rows":     # whole rows picked: x.gather(1, idx[..., None].expand(-1, -1, C))
        lead = rng.integers(0, shape[dim], ishape[:dim + 1])
        view = lead.shape + (1,) * (2 - dim)
        t_idx = torch.tensor(lead).view(view).expand(ishape)
        j_idx = tj.tensor(lead).view(view).expand(ishape)
        assert (gather_prim._trailing_rows(j_idx._data, dim, shape) is None) == (dim == 2)
    else:
        idx = rng.integers(0, shape[dim], ishape)
        t_idx, j_idx = torch.tensor(idx), tj.tensor(idx)
    x = rng.standard_normal(shape).astype(np.float32)
    src = rng.standard_normal(ishape).astype(np.float32)
    tx, jx = _pair(x)
    ts, js = _pair(src)
    t_out = tx.scatter_add(dim, t_idx, ts)
    j_out = jx.scatter_add(dim, j_idx, js)
    # the same additions in the same order as np.add.at over the index
    want = x.copy()
    grids = list(np.indices(tuple(ishape), sparse=True))
    grids[dim] = np.asarray(j_idx.numpy())
    np.add.at(want, tuple(grids), src)
    np.testing.assert_array_equal(j_out.detach().numpy(), want)
    np.testing.assert_allclose(j_out.detach().numpy(), t_out.detach().numpy(), rtol=1e-6, atol=1e-6)
    _backward(t_out, j_out, rng)
    np.testing.assert_array_equal(js.grad.numpy(), ts.grad.numpy())
    np.testing.assert_array_equal(jx.grad.numpy(), tx.grad.numpy())
    np.testing.assert_array_equal(tj.gather(jx, dim, j_idx).detach().numpy(),
                                  torch.gather(tx, dim, t_idx).detach().numpy())


@pytest.mark.parametrize("dim,lead", [(3, 2), (2, 2), (2, 1), (3, 1)])
def test_gather_by_an_index_shared_over_leading_dims_matches_pytorch(dim, lead):
    # DeBERTa's relative positions ``pos.expand(B * H, L, L)``: one index for every leading
    # position, smaller than the input after them (gather reads a prefix there)
    rng = np.random.default_rng(dim * 3 + lead)
    shape = (3, 4, 30, 50)
    core = rng.integers(0, shape[dim], (4, 20, 45)[lead - 1:])
    x = rng.standard_normal(shape).astype(np.float32)
    tx, jx = _pair(x)
    t_idx = torch.tensor(core).expand(shape[:2] + core.shape[-2:])
    j_idx = tj.tensor(core).expand(shape[:2] + core.shape[-2:])
    assert gather_prim._shared_lead(j_idx._data, dim, shape) == lead
    t_out, j_out = torch.gather(tx, dim, t_idx), tj.gather(jx, dim, j_idx)
    np.testing.assert_array_equal(j_out.detach().numpy(), t_out.detach().numpy())
    _backward(t_out, j_out, rng)
    np.testing.assert_array_equal(jx.grad.numpy(), tx.grad.numpy())
    with pytest.raises(IndexError, match="gather: index 50"):
        tj.gather(jx, 3, tj.tensor(np.full((20, 45), 50)).expand(3, 4, 20, 45))


def test_gather_and_scatter_add_reject_bad_index():
    x = tj.zeros(3, 4)
    with pytest.raises(IndexError, match="gather: index 3"):
        tj.gather(x, 0, tj.tensor([[3, 0, 0, 0]]))
    with pytest.raises(IndexError, match="scatter_add: index -1"):
        x.scatter_add(1, tj.tensor([[0, -1]]), tj.ones(1, 2))
    assert x.sum().item() == 0.0


@pytest.mark.parametrize("shape", [(64, 64), (160, 96), (12, 30, 40), (5000,)])
def test_boolean_mask_getitem_and_nonzero_match_pytorch(shape):
    """nonzero over a large n-d mask comes from its flat positions; a mask's backward adds
    into the flat view. Both must be PyTorch's, the empty mask included."""
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    for keep in (x > 0.3, np.zeros(shape, bool)):
        for i, (got, want) in enumerate(zip(tj.nonzero(tj.tensor(keep), as_tuple=True),
                                            torch.nonzero(torch.tensor(keep), as_tuple=True))):
            assert got.dtype is tj.int64
            np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=f"dim {i}")
        np.testing.assert_array_equal(tj.nonzero(tj.tensor(keep)).numpy(),
                                      torch.nonzero(torch.tensor(keep)).numpy())
        tx, jx = _pair(x)
        t_out, j_out = tx[torch.tensor(keep)], jx[tj.tensor(keep)]
        np.testing.assert_array_equal(j_out.detach().numpy(), t_out.detach().numpy())
        _backward(t_out, j_out, rng)
        np.testing.assert_array_equal(jx.grad.numpy(), tx.grad.numpy())


@pytest.mark.parametrize("dtype", ["int64", "int32", "int16", "uint8"])
def test_gather_of_every_index_dtype_matches_pytorch_and_checks_range(dtype):
    """One unsigned reduction checks both bounds: a negative index of any width is caught,
    and an index of any integer dtype gathers PyTorch's values (the first call and the
    signature's planned ones, a strided input among them)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((32, 9, 5)).astype(np.float32)
    strided = tj.tensor(np.ascontiguousarray(x.transpose(2, 1, 0))).permute(2, 1, 0)
    for dim, ishape in ((1, (32, 1, 5)), (0, (4, 9, 5)), (2, (32, 9, 3))):
        idx = rng.integers(0, x.shape[dim], ishape).astype(dtype)
        want = torch.gather(torch.tensor(x), dim, torch.tensor(idx.astype(np.int64))).numpy()
        for xj in (tj.tensor(x), tj.tensor(x), strided):
            np.testing.assert_array_equal(tj.gather(xj, dim, tj.tensor(idx)).numpy(), want)
        bad = idx.copy()
        bad.flat[7] = x.shape[dim]
        with pytest.raises(IndexError, match=f"gather: index {x.shape[dim]} is out of range for dim {dim}"):
            tj.gather(tj.tensor(x), dim, tj.tensor(bad))
        if dtype != "uint8":
            bad.flat[7] = -1
            with pytest.raises(IndexError, match=f"gather: index -1 is out of range for dim {dim}"):
                tj.gather(tj.tensor(x), dim, tj.tensor(bad))


def test_planned_small_scatter_add_and_gather_backward_match_pytorch():
    """A signature's later calls run its plan (flat positions made once): the same sums in
    the same order as PyTorch's, and the same range check."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    idx = rng.integers(0, 6, (9, 4))   # (repeats: additions into one place, in order)
    src = rng.standard_normal((9, 4)).astype(np.float32)
    want = torch.tensor(x).scatter_add(0, torch.tensor(idx), torch.tensor(src)).numpy()
    for _ in range(3):
        np.testing.assert_array_equal(tj.tensor(x).scatter_add(0, tj.tensor(idx), tj.tensor(src)).numpy(), want)
    bad = idx.copy()
    bad[2, 1] = 6
    with pytest.raises(IndexError, match="scatter_add: index 6 is out of range for dim 0"):
        tj.tensor(x).scatter_add(0, tj.tensor(bad), tj.tensor(src))
    gidx = rng.integers(0, 5, (6, 2))
    for _ in range(3):   # gather's backward node: a scatter_add into zeros
        tx, jx = _pair(x)
        torch.gather(tx, 1, torch.tensor(gidx)).sum().backward()
        tj.gather(jx, 1, tj.tensor(gidx)).sum().backward()
        np.testing.assert_array_equal(jx.grad.numpy(), tx.grad.numpy())


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_reduce_extremes_match_pytorch_with_ties(reduce, include_self, dim):
    rng = np.random.default_rng(20 + dim)
    ishape = [5, 6]
    ishape[dim] = 12
    # small integer values: many ties, whose gradient PyTorch shares equally
    x = rng.integers(0, 4, (5, 6)).astype(np.float32)
    src = rng.integers(0, 4, ishape).astype(np.float32)
    idx = rng.integers(0, (5, 6)[dim], ishape)
    tx, jx = _pair(x)
    ts, js = _pair(src)
    t_out = tx.scatter_reduce(dim, torch.tensor(idx), ts, reduce=reduce, include_self=include_self)
    j_out = jx.scatter_reduce(dim, tj.tensor(idx), js, reduce=reduce, include_self=include_self)
    np.testing.assert_array_equal(j_out.detach().numpy(), t_out.detach().numpy())
    _backward(t_out, j_out, rng)
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(js.grad.numpy(), ts.grad.numpy(), rtol=1e-6)


def test_scatter_reduce_amax_integers_and_compiled():
    rng = np.random.default_rng(3)
    x = rng.integers(-5, 5, (4, 3))
    idx = rng.integers(0, 4, (6, 3))
    src = rng.integers(-9, 9, (6, 3))
    want = torch.tensor(x).scatter_reduce(0, torch.tensor(idx), torch.tensor(src), "amax",
                                          include_self=False).numpy()
    got = tj.tensor(x).scatter_reduce(0, tj.tensor(idx), tj.tensor(src), "amax", include_self=False)
    np.testing.assert_array_equal(got.numpy(), want)

    def f(a, i, s):
        return a.scatter_reduce(0, i, s, "amax", include_self=False) * 2.0

    xf = rng.standard_normal((4, 3)).astype(np.float32)
    sf = rng.standard_normal((6, 3)).astype(np.float32)
    want = torch.tensor(xf).scatter_reduce(0, torch.tensor(idx), torch.tensor(sf), "amax",
                                           include_self=False).numpy() * 2.0
    got = tj.compile(f)(tj.tensor(xf), tj.tensor(idx), tj.tensor(sf))
    np.testing.assert_array_equal(got.numpy(), want)


def test_narrow_and_chunk_match_pytorch():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 8, 5)).astype(np.float32)
    tx, jx = _pair(x)
    t_parts = tx.chunk(3, 1) + (tx.narrow(2, -3, 2),)
    j_parts = jx.chunk(3, 1) + (jx.narrow(2, -3, 2),)
    assert [tuple(p.shape) for p in j_parts] == [tuple(p.shape) for p in t_parts]
    for tp, jp in zip(t_parts, j_parts):
        np.testing.assert_array_equal(jp.detach().numpy(), tp.detach().numpy())
    t_loss = sum((p * (k + 1)).sum() for k, p in enumerate(t_parts))
    j_loss = sum((p * (k + 1)).sum() for k, p in enumerate(j_parts))
    t_loss.backward()
    j_loss.backward()
    np.testing.assert_array_equal(jx.grad.numpy(), tx.grad.numpy())
    with pytest.raises(IndexError, match="narrow"):
        jx.narrow(1, 6, 3)


def test_one_integer_tensor_index_matches_pytorch():
    rng = np.random.default_rng(5)
    table = rng.standard_normal((27, 10)).astype(np.float32)
    idx = rng.integers(-27, 27, (32, 3))
    t_tab, j_tab = _pair(table)
    t_out, j_out = t_tab[torch.tensor(idx)], j_tab[tj.tensor(idx)]
    np.testing.assert_array_equal(j_out.detach().numpy(), t_out.detach().numpy())
    _backward(t_out, j_out, rng)
    np.testing.assert_array_equal(j_tab.grad.numpy(), t_tab.grad.numpy())
    assert j_tab[tj.tensor(3)].tolist() == table[3].tolist()          # a 0-d index
    mask = table[:, 0] > 0
    np.testing.assert_array_equal(tj.tensor(table)[tj.tensor(mask)].numpy(), table[mask])
    with pytest.raises(IndexError, match="out of bounds|out of range"):
        tj.tensor(table)[tj.tensor([27])]
    with pytest.raises(IndexError, match="too many indices"):
        tj.tensor(1.0)[tj.tensor([0])]


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_index_select_and_sliced_index_match_pytorch(dim, layout):
    # one index tensor after whole slices (index_select, ``x[:, idx]``) runs as a take
    # along its axis: repeated and negative entries, a non-contiguous source, 2-D index
    rng = np.random.default_rng(6)
    x = rng.standard_normal((6, 5, 4)).astype(np.float32)
    if layout == "transposed":
        x = x.transpose(2, 1, 0)
    idx = np.array([1, 3, 1, 0, 3, 3])
    tx, jx = _pair(x)
    if layout == "transposed":   # (a view of a contiguous leaf, as x.permute gives)
        tx, jx = tx.detach().permute(0, 1, 2).requires_grad_(), jx.detach().permute(0, 1, 2).requires_grad_()
    t_sel, j_sel = tx.index_select(dim, torch.tensor(idx)), jx.index_select(dim, tj.tensor(idx))
    np.testing.assert_array_equal(j_sel.detach().numpy(), t_sel.detach().numpy())
    neg = np.array([[-1, 0], [2, -4]])
    lead = (slice(None),) * (dim % 3)
    t_ix, j_ix = tx[lead + (torch.tensor(neg),)], jx[lead + (tj.tensor(neg),)]
    assert tuple(j_ix.shape) == tuple(t_ix.shape)
    np.testing.assert_array_equal(j_ix.detach().numpy(), t_ix.detach().numpy())
    w1 = rng.standard_normal(tuple(t_sel.shape)).astype(np.float32)
    w2 = rng.standard_normal(tuple(t_ix.shape)).astype(np.float32)
    ((t_sel * torch.tensor(w1)).sum() + (t_ix * torch.tensor(w2)).sum()).backward()
    ((j_sel * tj.tensor(w1)).sum() + (j_ix * tj.tensor(w2)).sum()).backward()
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_index_select_empty_and_out_of_range():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    empty = tj.tensor(x).index_select(1, tj.tensor(np.zeros(0, np.int64)))
    assert tuple(empty.shape) == (3, 0)
    assert tuple(tj.zeros(0, 4)[tj.tensor(np.zeros(0, np.int64))].shape) == (0, 4)
    with pytest.raises(IndexError, match="index_select"):
        tj.tensor(x).index_select(0, tj.tensor([3]))
    with pytest.raises(IndexError, match="getitem"):
        tj.tensor(x)[:, tj.tensor([0, -5])]
    with pytest.raises(IndexError, match="getitem"):
        tj.zeros(0, 4)[tj.tensor([0])]


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("grad", [False, True])
def test_index_select_repeated_calls_match_pytorch(dim, index_dtype, grad):
    # the same signature again and again (the plan's calls after the first), 32 entries
    # (past the few a range check reads as Python ints), each call's values read afresh
    rng = np.random.default_rng(11)
    x = rng.standard_normal((256, 64)).astype(np.float32)
    tx, jx = torch.tensor(x, requires_grad=grad), tj.tensor(x, requires_grad=grad)
    n = x.shape[dim]
    for k in range(4):
        idx = rng.integers(0, n, 32).astype(index_dtype)
        idx[k] = n - 1
        t_sel, j_sel = tx.index_select(dim, torch.tensor(idx)), tj.index_select(jx, dim, tj.tensor(idx))
        assert j_sel.dtype is tj.float32 and tuple(j_sel.shape) == tuple(t_sel.shape)
        np.testing.assert_array_equal(j_sel.detach().numpy(), t_sel.detach().numpy())
        if grad:
            w = rng.standard_normal(tuple(t_sel.shape)).astype(np.float32)
            (t_sel * torch.tensor(w)).sum().backward()
            (j_sel * tj.tensor(w)).sum().backward()
            np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bad, value", [(256, 256), (-1, -1), (-257, -257)])
@pytest.mark.parametrize("compiled", [False, True])
def test_index_select_out_of_range_after_good_calls_raises_as_pytorch(bad, value, compiled):
    # a bad index of a signature already run (eager plan, compiled plan): the same error,
    # negative indices refused as PyTorch's index_select refuses them
    x = np.arange(256 * 4, dtype=np.float32).reshape(256, 4)
    f = tj.compile(lambda a, i: a.index_select(0, i)) if compiled else (lambda a, i: a.index_select(0, i))
    good = np.arange(32, dtype=np.int64)
    for _ in range(3):
        np.testing.assert_array_equal(f(tj.tensor(x), tj.tensor(good)).numpy(), x[good])
    idx = good.copy()
    idx[20] = bad
    with pytest.raises(IndexError, match="index out of range"):
        torch.tensor(x).index_select(0, torch.tensor(idx))
    with pytest.raises(IndexError, match=rf"^index_select: index {value} is out of range for size 256$"):
        f(tj.tensor(x), tj.tensor(idx))
    np.testing.assert_array_equal(f(tj.tensor(x), tj.tensor(good)).numpy(), x[good])


def test_index_select_of_a_float_index_raises_as_pytorch():
    x = np.zeros((5, 3), np.float32)
    tj.tensor(x).index_select(0, tj.tensor([0, 4]))
    with pytest.raises(RuntimeError, match="Expected dtype int32 or int64"):
        torch.tensor(x).index_select(0, torch.tensor([0.0, 1.0]))
    with pytest.raises(RuntimeError, match=r"^index_select: indices must be an integer tensor, got float32$"):
        tj.tensor(x).index_select(0, tj.tensor([0.0, 1.0]))


@pytest.mark.parametrize("compiled", [False, True])
def test_index_select_of_a_0d_index_or_input_keeps_pytorchs_shape(compiled):
    def fn(m, x, i):
        return x.index_select(1, i), x[0, 0].index_select(0, i.clamp(max=0)), x.index_select(-2, i)

    x, i = np.arange(12, dtype=np.float32).reshape(3, 4), np.array(2)
    tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    want = fn(torch, tx, torch.tensor(i))
    got = (tj.compile(lambda x, i: fn(tj, x, i)) if compiled else lambda x, i: fn(tj, x, i))(jx, tj.tensor(i))
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape)
        np.testing.assert_array_equal(g.detach().numpy(), w.detach().numpy())
    sum((g * (k + 1)).sum() for k, g in enumerate(got)).backward()
    sum((w * (k + 1)).sum() for k, w in enumerate(want)).backward()
    np.testing.assert_array_equal(jx.grad.numpy(), tx.grad.numpy())
    with pytest.raises(RuntimeError, match="one value"):
        tj.tensor(5.0).index_select(0, tj.tensor([0, 0]))


@pytest.mark.parametrize("call", [lambda m, x, i: x.index_select(0, i), lambda m, x, i: x.index_add(0, i, m.ones(2, 3)),
                                  lambda m, x, i: x.index_copy(0, i, m.ones(2, 3))])
def test_a_float_index_raises_pytorchs_runtime_error(call):
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        call(torch, torch.zeros(3, 3), torch.tensor([0.0, 1.0]))
    x = tj.zeros(3, 3)
    with pytest.raises(RuntimeError, match="integer tensor, got float32"):
        call(tj, x, tj.tensor([0.0, 1.0]))
    assert x.tolist() == [[0.0] * 3] * 3


def test_zero_dim_masks_as_torch():
    # a 0-d mask adds a dim of one element or none; nonzero of a 0-d tensor has no columns
    torch = pytest.importorskip("torch")
    for lib in (torch, tj):
        x = lib.arange(6.0).reshape(2, 3)
        assert tuple(x[lib.tensor(True)].shape) == (1, 2, 3)
        assert tuple(x[lib.tensor(False)].shape) == (0, 2, 3)
        assert tuple(lib.nonzero(lib.tensor(True)).shape) == (1, 0)
        assert [t.tolist() for t in lib.nonzero(lib.tensor(False), as_tuple=True)] == [[]]
        s = lib.tensor(2.0)
        s[s > 1] = 0.0
        x[lib.tensor(True)] = lib.tensor([1.0, 2.0, 3.0])
        x[lib.tensor(False)] = 9.0
        assert s.item() == 0.0 and x.tolist() == [[1.0, 2.0, 3.0]] * 2


def test_a_zero_dim_mask_keeps_the_tensors_dtype_as_torch():
    # a Python float written through a 0-d mask into integers is cast, not promoted
    torch = pytest.importorskip("torch")
    for lib in (torch, tj):
        a = lib.tensor([1, 2, 3])
        a[lib.tensor(True)] = 2.5
        assert str(a.dtype).endswith("int64") and a.tolist() == [2, 2, 2]
    assert tj.ops.index_put(tj.tensor([1, 2, 3]), tj.tensor(True), 2.5).dtype is tj.int64


def test_index_add_and_index_select_over_a_dynamic_dim_capture_once_and_check_range():
    """A graph's node count changes every batch: the range check follows it in each call."""
    def f(m, x, src, dst):
        agg = m.zeros_like(x).index_add_(0, dst, x.index_select(0, src))
        return (agg * x).sum(1)
    fn = tj.compile(lambda x, s, d: f(tj, x, s, d), dynamic=True)
    rng = np.random.default_rng(0)
    for n in (5, 9, 7):
        x = rng.standard_normal((n, 3)).astype(np.float32)
        s, d = rng.integers(0, n, 12), rng.integers(0, n, 12)
        want = f(torch, torch.tensor(x), torch.tensor(s), torch.tensor(d)).numpy()
        np.testing.assert_allclose(fn(tj.tensor(x), tj.tensor(s), tj.tensor(d)).numpy(), want, rtol=1e-5, atol=1e-6)
    assert fn.cache_stats()["compiles"] == 1
    x = tj.tensor(rng.standard_normal((6, 3)).astype(np.float32))
    with pytest.raises(IndexError, match="index_add"):
        fn(x, tj.tensor(rng.integers(0, 6, 12)), tj.tensor(np.full(12, 6)))
    with pytest.raises(IndexError, match="index_select"):
        fn(x, tj.tensor(np.full(12, 6)), tj.tensor(rng.integers(0, 6, 12)))


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_sum_and_mean_match_pytorch_values_and_gradients(reduce, include_self):
    """A graph readout (per-graph mean of node rows by an expanded index), untouched rows kept."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    src = rng.standard_normal((7, 3)).astype(np.float32)
    idx = np.repeat(rng.integers(0, 4, (7, 1)), 3, 1)   # row 4 (and maybe others) never hit
    tx, jx = _pair(x)
    ts, js = _pair(src)
    t_out = tx.scatter_reduce(0, torch.tensor(idx), ts, reduce, include_self=include_self)
    j_out = jx.scatter_reduce(0, tj.tensor(idx), js, reduce, include_self=include_self)
    np.testing.assert_allclose(j_out.detach().numpy(), t_out.detach().numpy(), rtol=1e-6, atol=1e-6)
    _backward(t_out, j_out, rng)
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(js.grad.numpy(), ts.grad.numpy(), rtol=1e-6, atol=1e-6)
    ints, isrc = np.arange(15).reshape(5, 3), np.arange(21).reshape(7, 3) % 4
    want, got = (m.tensor(ints).scatter_reduce(0, m.tensor(idx), m.tensor(isrc), reduce, include_self=include_self)
                 for m in (torch, tj))
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_scatter_reduce_without_self_keeps_infinite_sources(reduce):
    # (a target hit only by inf counted as not hit: its count was taken from src * 0 + 1)
    idx = np.array([0, 1, 1, 2])
    src = np.array([1.0, -np.inf, 2.0, np.inf])
    want = torch.zeros(4, dtype=torch.float64).scatter_reduce(0, torch.tensor(idx), torch.tensor(src), reduce,
                                                             include_self=False)
    got = tj.zeros(4, dtype=tj.float64).scatter_reduce(0, tj.tensor(idx), tj.tensor(src), reduce, include_self=False)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
