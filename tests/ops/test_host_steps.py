"""Ops whose output size depends on the values, inside a compiled function (ops/host_steps.py):
one capture for every count, no eager fallback, PyTorch's values and gradients."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _valid_loss(lib, x, w):
    """A loss over the valid positions (a padding mask), the mask written twice."""
    y = x @ w
    return lib.nn.functional.mse_loss(y[x[:, 0] > 0], (y * 0.5 + 1)[x[:, 0] > 0])


CASES = {
    "mask": lambda lib, x, w: ((x[x > 0] * w[0, 1]) ** 2).sum(),
    "valid_loss": _valid_loss,
    "masked_select": lambda lib, x, w: lib.masked_select(x @ w, x > 0).exp().sum(),
    "nonzero": lambda lib, x, w: x[lib.nonzero(x > 0, as_tuple=True)].sum() * lib.nonzero(x > 0).sum(),
    "argwhere": lambda lib, x, w: (lib.argwhere(x < 0).float() * w.sum()).mean(),
    "where": lambda lib, x, w: (x @ w)[lib.where(x < 0)].tanh().sum(),
    "assign": lambda lib, x, w: (lambda y: (y.__setitem__(x > 0.5, x[x > 0.5] * w[0, 0]), y)[1])(x * 2).sum(),
    "unique": lambda lib, x, w: sum(t.float().sum() for t in lib.unique((x * 2).round().detach(), return_inverse=True,
                                                                         return_counts=True)) * w.sum(),
    "unique_consecutive": lambda lib, x, w: lib.unique_consecutive((x[:, 0] > 0).long(), return_counts=True)[1]
    .float().square().sum() * w.sum(),
    "unique_dim": lambda lib, x, w: lib.unique((x > 0).long(), dim=0, return_counts=True)[1].float().sum() * w.sum(),
    "bincount": lambda lib, x, w: (lib.bincount((x.abs() * 2).long().flatten(), weights=x.flatten().detach())
                                   * 2).sum() + w.sum(),
    "repeat_interleave": lambda lib, x, w: (x.repeat_interleave((x[:, 0] > 0).long() * 2 + 1, dim=0) @ w).sum(),
    "isin": lambda lib, x, w: (x * lib.isin((x * 2).round(), lib.tensor([0.0, 1.0]))).sum() + w.sum(),
    "bucketize": lambda lib, x, w: (lib.bucketize(x.detach(), lib.tensor([-1.0, 0.0, 1.0])).float() * x).sum()
    + w.sum(),
    "cummax": lambda lib, x, w: (lib.cummax(x @ w, 1)[0] * lib.cummin(x, 0)[1]).sum(),
    "counts": lambda lib, x, w: (x @ w).sum() + lib.nonzero(x > 0).shape[0] * 1.5 + x[x < 0].numel(),
}


def _data(i):
    r = np.random.default_rng(i)
    return r.standard_normal((6, 5)).astype(np.float32), r.standard_normal((5, 5)).astype(np.float32)


@pytest.mark.parametrize("name", list(CASES))
def test_compiles_once_with_torchs_values_and_gradients(name):
    fn = CASES[name]
    f = tj.compile(lambda x, w: fn(tj, x, w))
    counts = set()
    for i in range(4):   # (another count of selected elements in every call)
        xa, wa = _data(i)
        counts.add(int((xa > 0).sum()))
        xt, wt = (torch.tensor(v, requires_grad=True) for v in (xa, wa))
        want = fn(torch, xt, wt)
        want.backward()
        x, w = (tj.tensor(v, requires_grad=True) for v in (xa, wa))
        got = f(x, w)
        got.backward()
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
        for mine, ref in ((x, xt), (w, wt)):
            assert (mine.grad is None) == (ref.grad is None)
            if ref.grad is not None:
                np.testing.assert_allclose(mine.grad.numpy(), ref.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert len(counts) > 1
    stats = f.cache_stats()
    assert stats["compiles"] == 1 and stats["eager_fallbacks"] == 0, stats


@pytest.mark.parametrize("name", ["mask", "unique", "repeat_interleave", "cummax"])
def test_the_interpreter_runs_the_same_steps(name):
    fn = CASES[name]
    f = tj.trace(lambda x, w: fn(tj, x, w), compiler="interpret")
    for i in range(3):
        xa, wa = _data(i)
        got, want = f(tj.tensor(xa), tj.tensor(wa)), fn(tj, tj.tensor(xa), tj.tensor(wa))
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-6)
    assert f.cache_stats()["compiles"] == 1


def test_outputs_of_a_data_dependent_size_and_an_empty_selection():
    f = tj.compile(lambda x: (x[x > 0], tj.unique(x.long(), return_counts=True)))
    for xa in (_data(0)[0], -np.abs(_data(1)[0]), np.abs(_data(2)[0]) + 1):
        sel, (vals, counts) = f(tj.tensor(xa))
        np.testing.assert_array_equal(sel.numpy(), xa[xa > 0])
        v, c = np.unique(xa.astype(np.int64), return_counts=True)
        np.testing.assert_array_equal(vals.numpy(), v)
        np.testing.assert_array_equal(counts.numpy(), c)
    assert f.cache_stats()["compiles"] == 1 and f.cache_stats()["eager_fallbacks"] == 0


BREAKS = {
    "int": lambda x: x[x > 0].sum() / int(x[x > 0].shape[0]),
    "compare": lambda x: x[x > 0].mean() if x[x > 0].shape[0] > 0 else x.sum() * 0,
    "numel": lambda x: x[x > 0].mean() if x[x > 0].numel() != 0 else x.sum() * 0,
    "len": lambda x: x[x > 0].mean() if 0 < len(x[x > 0]) else x.sum() * 0,
}


@pytest.mark.parametrize("name", list(BREAKS))
def test_the_value_of_a_data_dependent_size_breaks_the_graph(name):
    fn = BREAKS[name]
    f = tj.compile(fn)
    with pytest.warns(RuntimeWarning, match="depends on the data"):
        got = f(tj.tensor(_data(0)[0]))
    np.testing.assert_allclose(got.item(), fn(tj.tensor(_data(0)[0])).item(), rtol=1e-6)
    with pytest.raises(tj.errors.TraceError, match="depends on the data"):
        tj.compile(fn, fullgraph=True)(tj.tensor(_data(0)[0]))


def test_eager_results_are_unchanged():
    x = tj.tensor([[0.0, 2.0], [3.0, 0.0]])
    np.testing.assert_array_equal(tj.nonzero(x).numpy(), [[0, 1], [1, 0]])
    assert tuple(tj.nonzero(tj.tensor(1.0)).shape) == (1, 0)
    np.testing.assert_array_equal(tj.tensor([1, 2]).repeat_interleave(tj.tensor([2, 0])).numpy(), [1, 1])
    with pytest.raises(tj.errors.ArgumentError, match="output_size"):
        tj.tensor([1, 2]).repeat_interleave(tj.tensor([2, 1]), output_size=2)
    with pytest.raises(tj.errors.ArgumentError, match="non-negative"):
        tj.bincount(tj.tensor([1, -1]))


def test_a_backward_through_one_of_two_data_sized_outputs():
    f = tj.compile(lambda x: ((x[x > 0] * 2).sum(), x[x > 0] * 3))
    for i in range(3):
        xa = _data(i)[0]
        x = tj.tensor(xa, requires_grad=True)
        total, sel = f(x)
        total.backward()   # (sel's gradient: zeros of its run-time size)
        np.testing.assert_array_equal(x.grad.numpy(), 2.0 * (xa > 0))
        np.testing.assert_allclose(sel.detach().numpy(), 3 * xa[xa > 0], rtol=1e-6)
    assert f.cache_stats()["compiles"] == 1


class _MultiCrop(tj.nn.Module):
    """DINO's MultiCropWrapper: the crops grouped by size (unique_consecutive of a tensor of
    their widths), each group through one backbone, a slice of the list per group."""

    def __init__(self, lib):
        super().__init__()
        self.backbone = lib.nn.Linear(3, 2)
        self.lib = lib

    def forward(self, x):
        idx_crops = self.lib.cumsum(self.lib.unique_consecutive(
            self.lib.tensor([inp.shape[-1] for inp in x]), return_counts=True)[1], 0)
        start_idx, output = 0, []
        for end_idx in idx_crops:
            output.append(self.backbone(self.lib.cat(x[start_idx: end_idx]).mean(-1, keepdim=True).expand(-1, 3)))
            start_idx = end_idx
        return self.lib.cat(output)


def test_a_step_on_values_known_at_capture_runs_there():
    m = _MultiCrop(tj)
    f = tj.compile(m, fullgraph=True)
    ref = _MultiCrop(torch)
    ref.backbone.load_state_dict({k: torch.tensor(v.numpy()) for k, v in m.backbone.state_dict().items()})
    r = np.random.default_rng(0)
    for widths in ((4, 4, 2, 2, 2), (4, 4, 2, 2, 2), (5, 3, 3)):
        crops = [r.standard_normal((2, w)).astype(np.float32) for w in widths]
        got = f([tj.tensor(c) for c in crops])
        want = ref([torch.tensor(c) for c in crops])
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
    stats = f.cache_stats()
    assert stats["compiles"] == 2 and stats["eager_fallbacks"] == 0, stats


def _segment_mean(lib, data, seg, n):
    """EGNN's mean over each node's edges: index_add_, divided by bincount's degrees."""
    out = lib.zeros(n, data.shape[1]).index_add_(0, seg, data)
    return out / lib.bincount(seg, minlength=n).clamp(min=1).unsqueeze(-1).to(data.dtype)


def test_a_count_broadcast_with_a_fixed_size_is_checked_when_it_runs():
    f = tj.compile(_segment_mean, fullgraph=True)
    r = np.random.default_rng(0)
    for i in range(3):   # (another degree vector in every call; some nodes without edges)
        seg, xa = r.integers(0, 5, 7), r.standard_normal((7, 3)).astype(np.float32)
        xt, x = torch.tensor(xa, requires_grad=True), tj.tensor(xa, requires_grad=True)
        want, got = _segment_mean(torch, xt, torch.tensor(seg), 5), f(tj, x, tj.tensor(seg), 5)
        (want * want).sum().backward()
        (got * got).sum().backward()
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
        np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-6)
    stats = f.cache_stats()
    assert stats["compiles"] == 1 and stats["eager_fallbacks"] == 0, stats
    g = tj.compile(lambda x, seg: x / tj.bincount(seg, minlength=4)[:, None], fullgraph=True)
    g(tj.ones(4, 2), tj.tensor([0, 1, 2, 3]))
    with pytest.raises(tj.errors.ShapeError, match=r"depends on the data \(\(6, 1\)\).*\(4, 1\)"):
        g(tj.ones(4, 2), tj.tensor([0, 1, 5, 3]))   # (a count past minlength: 6 rows)


def test_a_data_sized_operand_with_a_gradient_still_breaks_the_graph():
    with pytest.raises(tj.errors.TraceError, match="depends on the data"):
        tj.compile(lambda x, w: x[x > 0] * w, fullgraph=True)(tj.tensor([1.0, -1.0, 2.0], requires_grad=True),
                                                              tj.tensor([1.0, 2.0]))


def _masked_frames(lib, x, mask, w):
    """wav2vec 2.0's masked frames: ``x[mask].view(bsz, -1, c)`` (each row masks as many),
    their count used as a number and divided (the same size as the -1)."""
    bsz, c = x.size(0), x.size(-1)
    y = x[mask].view(bsz, -1, c)
    z = (x @ w)[mask].view(bsz, x[mask].size(0) // bsz, c)
    return (y * z).sum(-1) + lib.arange(bsz).unsqueeze(1) * y.size(1)


def _frames(i, t=6, per_row=None):
    r = np.random.default_rng(i)
    k = per_row or int(r.integers(1, t))
    mask = np.zeros((2, t), bool)
    for row in mask:
        row[r.permutation(t)[:k]] = True
    return r.standard_normal((2, t, 4)).astype(np.float32), mask, r.standard_normal((4, 4)).astype(np.float32)


@pytest.mark.parametrize("compiler", ["compile", "interpret"])
def test_a_view_of_a_data_sized_tensor_infers_its_minus_one(compiler):
    fn = (lambda *a: _masked_frames(tj, *a))
    f = tj.compile(fn, fullgraph=True) if compiler == "compile" else tj.trace(fn, compiler="interpret")
    counts = set()
    for i in range(4):
        xa, ma, wa = _frames(i)
        counts.add(int(ma[0].sum()))
        xt, wt = torch.tensor(xa, requires_grad=True), torch.tensor(wa, requires_grad=True)
        x, w = tj.tensor(xa, requires_grad=True), tj.tensor(wa, requires_grad=True)
        want, got = _masked_frames(torch, xt, torch.tensor(ma), wt), f(x, tj.tensor(ma), w)
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
        if compiler == "compile":
            (want * want).sum().backward()
            (got * got).sum().backward()
            for mine, ref in ((x, xt), (w, wt)):
                np.testing.assert_allclose(mine.grad.numpy(), ref.grad.numpy(), rtol=1e-5, atol=1e-5)
    assert len(counts) > 1 and f.cache_stats()["compiles"] == 1


def test_a_minus_one_that_does_not_divide_raises_as_pytorch_when_it_runs():
    f = tj.compile(lambda x, m: x[m].view(2, -1, 4).sum(), fullgraph=True)
    xa, ma, _ = _frames(0, per_row=2)
    f(tj.tensor(xa), tj.tensor(ma))
    ma[0, ~ma[0]] = [True, False, False, False]   # (5 masked frames: not 2 rows of as many)
    with pytest.raises(RuntimeError, match=r"shape '\[2, -1, 4\]' is invalid for input of size 20"):
        torch.tensor(xa)[torch.tensor(ma)].view(2, -1, 4)
    with pytest.raises(tj.errors.ShapeError, match=r"shape '\[2, -1, 4\]' is invalid for input of size 20"):
        f(tj.tensor(xa), tj.tensor(ma))
    assert f.cache_stats()["compiles"] == 1


def test_a_fixed_tensor_viewed_as_a_data_sized_one_is_checked_when_it_runs():
    f = tj.compile(lambda x, m, g: (x[m] * g.view_as(x[m])).sum(), fullgraph=True)
    xa, ma, _ = _frames(0, per_row=3)
    ga = np.arange(24, dtype=np.float32).reshape(4, 6)
    got = f(tj.tensor(xa), tj.tensor(ma), tj.tensor(ga))
    np.testing.assert_allclose(got.item(), (xa[ma] * ga.reshape(6, 4)).sum(), rtol=1e-5)
    with pytest.raises(tj.errors.ShapeError, match=r"shape '\[4, 4\]' is invalid for input of size 24"):
        f(tj.tensor(xa), tj.tensor(_frames(0, per_row=2)[1]), tj.tensor(ga))


def _negatives(lib, x, mask, neg_idxs, n_neg=3):
    """wav2vec 2.0's negatives: a fixed number of gathered rows viewed by the masked count."""
    bsz = x.size(0)
    y = x[mask].view(bsz, -1, x.size(-1))
    num = y.size(1)
    flat = (neg_idxs + lib.arange(bsz).unsqueeze(1) * num).view(-1)
    negs = y.reshape(-1, y.size(-1))[flat].view(bsz, num, n_neg, -1).permute(2, 0, 1, 3)
    return (y.unsqueeze(0) * negs).sum(-1)


def test_a_fixed_size_viewed_by_a_data_dependent_count_is_a_checked_quotient():
    f = tj.compile(lambda *a: _negatives(tj, *a), fullgraph=True)
    r = np.random.default_rng(0)
    for k in (4, 4, 5, 3):
        xa, ma, _ = _frames(k, t=8, per_row=k)
        ia = r.integers(0, k, (2, 3 * k))
        want = _negatives(torch, torch.tensor(xa), torch.tensor(ma), torch.tensor(ia))
        got = f(tj.tensor(xa), tj.tensor(ma), tj.tensor(ia))
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    st = f.cache_stats()
    assert st["compiles"] == 2 and st["eager_fallbacks"] == 0, st   # (the negatives' count went symbolic)
    xa, ma, _ = _frames(0, t=8, per_row=4)
    with pytest.raises(RuntimeError, match=r"shape '\[2, 4, 3, -1\]' is invalid for input of size 104"):
        _negatives(torch, torch.tensor(xa), torch.tensor(ma), torch.zeros(2, 13, dtype=torch.int64))
    with pytest.raises(tj.errors.ShapeError, match=r"is invalid for input of size 104"):
        f(tj.tensor(xa), tj.tensor(ma), tj.zeros(2, 13, dtype=tj.int64))


def test_a_mask_made_by_a_deep_shared_expression_keys_its_step_flat(monkeypatch):
    """A mask at the end of a long chain whose every step reads its input twice (a spline's
    bins, a flow's layers): the key that finds the same mask written again stays flat."""
    from tracejit.ops import host_steps
    keys = []
    value_keys = host_steps._value_keys
    monkeypatch.setattr(host_steps, "_value_keys", lambda tr, atoms: keys.append(value_keys(tr, atoms)) or keys[-1])

    def f(lib, x):
        y = x
        for _ in range(8):
            y = y * y - y * 0.5
        return (x[y > 0.01] * 2).sum() + x[y > 0.01].sum()
    g = tj.compile(lambda x: f(tj, x), fullgraph=True)
    for i in range(2):
        xa = _data(i)[0]
        np.testing.assert_allclose(g(tj.tensor(xa)).item(), f(torch, torch.tensor(xa)).item(), rtol=1e-5)
    assert keys and max(len(repr(k)) for k in keys) < 1000
    assert g.cache_stats()["compiles"] == 1


@pytest.mark.parametrize("form", ["x.unique()", "x.unique(return_counts=True)[1]", "x.unique_consecutive()",
                                  "x.cummax(0).values", "x.cummin(0).indices", "x.nonzero()",
                                  "L.searchsorted(x.sort().values, x)", "L.isin(x, x[6:])"])
def test_bfloat16_host_steps_see_values_not_storage_words(form):
    def run(L, fn=None):
        x = L.tensor([7.0, 1.0, -1.5, -float("inf"), 3.0, -0.0, 0.0, 1.0]).to(L.bfloat16)
        r = (fn or (lambda x: eval(form, {"L": L, "x": x})))(x)
        return r.float().tolist() if r.dtype is L.bfloat16 else r.tolist()
    want = run(torch)
    assert run(tj) == want
    assert run(tj, tj.compile(lambda x: eval(form, {"L": tj, "x": x}))) == want


_NO_DERIVATIVE = {
    "unique": lambda L, x: L.unique(x),
    "unique_dim": lambda L, x: L.unique(x.reshape(2, 3), dim=1, return_counts=True)[0],
    "unique_consecutive": lambda L, x: L.unique_consecutive(x, return_inverse=True)[0],
    "bincount": lambda L, x: L.bincount(L.tensor([0, 2, 2, 1, 0, 3]), weights=x),
    "histogram": lambda L, x: L.histogram(x, 3)[0],
    "histogram_edges": lambda L, x: L.histogram(x, 3)[1],
}


@pytest.mark.parametrize("name", sorted(_NO_DERIVATIVE))
def test_results_of_an_input_that_requires_grad_have_no_derivative_as_torch(name):
    """As PyTorch's, the values require grad and a backward through them raises (rather
    than dropping that term's gradient); other paths to the input still differentiate."""
    f = _NO_DERIVATIVE[name]
    for L in (torch, tj):
        x = L.tensor([3.0, 1.0, 1.0, -2.0, 3.0, 0.5], requires_grad=True)
        y = f(L, x)
        assert y.requires_grad and not y.is_leaf, L.__name__
        with pytest.raises(RuntimeError, match="derivative for .* not implemented"):
            (y.sum() + x.sum()).backward()
        with L.no_grad():
            assert not f(L, x).requires_grad
        (x * 2).sum().backward()
        assert x.grad.tolist() == [2.0] * 6


@pytest.mark.parametrize("name", sorted(_NO_DERIVATIVE))
def test_compiled_results_of_an_input_that_requires_grad_have_no_derivative_as_torch(name):
    """Compiled as eagerly (and as PyTorch's): the values require grad, the forward runs, and
    only a backward that reaches them raises; a backward through another output works."""
    f = _NO_DERIVATIVE[name]
    x0 = [3.0, 1.0, 1.0, -2.0, 3.0, 0.5]
    xt = torch.tensor(x0, requires_grad=True)
    want = f(torch, xt)
    g = tj.compile(lambda x: (f(tj, x) * 2, x * 3))
    x = tj.tensor(x0, requires_grad=True)
    y, other = g(x)
    assert y.requires_grad == want.requires_grad is True
    np.testing.assert_allclose(y.detach().numpy(), 2 * want.detach().numpy())
    other.sum().backward()
    assert x.grad.tolist() == [3.0] * 6
    y, _ = g(x)
    with pytest.raises(RuntimeError, match="derivative for .* not implemented"):
        y.sum().backward()
    with pytest.raises(RuntimeError, match="derivative for .* not implemented"):
        (want * 2).sum().backward()
    with tj.no_grad():
        assert not g(x)[0].requires_grad
