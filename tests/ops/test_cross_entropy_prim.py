"""cross_entropy over class indices as one primitive each way (ops/cross_entropy_prim.py;
log_softmax then nll_loss's primitive while a graph records, as PyTorch)
with its kernels (rendered from rows forms: compiler/cpu/kernels/row_forms.py): values and gradients against PyTorch with the
kernels and with the numpy forms, out-of-range targets named in the error either way,
ignored rows, the forms that keep the composite, and the primitive recorded when traced."""
import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.ops import cross_entropy_prim

torch = pytest.importorskip("torch")


@pytest.fixture(params=["kernel", "numpy"])
def path(request, monkeypatch):
    """Run a test with the row kernels (sync mode loads them at once) and without."""
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1" if request.param == "kernel" else "0")
    return request.param


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype, tol", [(np.float32, 2e-6), (np.float64, 1e-13)])
def test_values_and_gradients_match_pytorch(path, reduction, dtype, tol):
    r = np.random.default_rng(0)
    xv = (r.standard_normal((256, 10)) * 3).astype(dtype)
    tv = r.integers(0, 10, 256)
    tv[[3, 100]] = -100
    gv = r.standard_normal(() if reduction != "none" else (256,)).astype(dtype)
    x = tj.tensor(xv, requires_grad=True)
    loss = F.cross_entropy(x, tj.tensor(tv), reduction=reduction)
    assert loss.grad_fn.name() == "NllLossBackward0" and loss.dtype.np == dtype
    loss.backward(tj.tensor(gv))
    xt = torch.tensor(xv, requires_grad=True)
    lt = torch.nn.functional.cross_entropy(xt, torch.tensor(tv), reduction=reduction)
    lt.backward(torch.tensor(gv))
    np.testing.assert_allclose(loss.detach().numpy(), lt.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=tol, atol=tol)
    if reduction == "none":
        assert loss.detach().numpy()[3] == 0.0 and not x.grad.numpy()[[3, 100]].any()


def test_a_strided_target_column_matches_pytorch(path):
    """A target taken as a column of an index matrix (a strided view) is read as given."""
    r = np.random.default_rng(2)
    xv = r.standard_normal((64, 10)).astype(np.float32)
    tv = r.integers(0, 10, (64, 3))
    x = tj.tensor(xv, requires_grad=True)
    loss = F.cross_entropy(x, tj.tensor(tv)[:, 1])
    loss.backward()
    xt = torch.tensor(xv, requires_grad=True)
    lt = torch.nn.functional.cross_entropy(xt, torch.tensor(tv)[:, 1])
    lt.backward()
    np.testing.assert_allclose(loss.item(), lt.item(), rtol=2e-6)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=2e-6, atol=2e-7)


def test_kernel_and_numpy_forms_agree(monkeypatch):
    r = np.random.default_rng(1)
    xv = (r.standard_normal((37, 23)) * 5).astype(np.float32)
    xv[5, 7] = -np.inf                       # exp(-inf) = 0: a finite loss
    tv = r.integers(0, 23, 37).astype(np.int32)   # int32 targets, as PyTorch allows
    out = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", flag)
        x = tj.tensor(xv, requires_grad=True)
        loss = F.cross_entropy(x, tj.tensor(tv), reduction="none")
        loss.sum().backward()
        out[flag] = loss.detach().numpy(), x.grad.numpy()
    assert np.isfinite(out["1"][0]).all()
    for a, b in zip(out["1"], out["0"]):
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7)


def test_out_of_range_targets_are_named(path):
    x = tj.randn(4, 3, requires_grad=True)
    with pytest.raises(IndexError, match="nll_loss: index 5 is out of range for size 3"):
        F.cross_entropy(x, tj.tensor([0, 5, 1, 2]))
    with pytest.raises(IndexError, match="nll_loss: index -3 is out of range for size 3"):
        F.cross_entropy(x, tj.tensor([0, 1, -3, 2]))
    for reduction in ("sum", "none"):
        with pytest.raises(IndexError, match="nll_loss: index 3 is out of range for size 3"):
            F.cross_entropy(x, tj.tensor([0, 3, 1, 2]), reduction=reduction)
    # a nan logit is no range error: its row's loss is nan, as PyTorch's
    xv = x.detach().numpy().copy()
    xv[1, 2] = np.nan
    got = F.cross_entropy(tj.tensor(xv), tj.tensor([0, 1, 2, 2]), reduction="none").numpy()
    assert np.isnan(got[1]) and np.isfinite(got[[0, 2, 3]]).all()
    # the ignored index itself is fine, in range or not
    assert np.isfinite(F.cross_entropy(x, tj.tensor([0, -100, 1, 2])).item())
    assert np.isfinite(F.cross_entropy(x, tj.tensor([0, 7, 1, 2]), ignore_index=7).item())
    with pytest.raises(tj.errors.ShapeError, match=r"input \(N, C\) and target \(N,\)"):
        F.cross_entropy(x, tj.tensor([0, 1, 2]))


def test_all_rows_ignored_gives_nan_mean_like_pytorch(path):
    x = tj.randn(3, 4, requires_grad=True)
    loss = F.cross_entropy(x, tj.tensor([-100, -100, -100]))
    assert np.isnan(loss.item())
    assert F.cross_entropy(x, tj.tensor([-100, -100, -100]), reduction="sum").item() == 0.0


@pytest.mark.parametrize("runner", ["eager", "interpret", "compiled"])
@pytest.mark.parametrize("kw", [{}, {"weight": [1.0, 2.0, 0.5, 1.5]}, {"label_smoothing": 0.1}],
                         ids=["plain", "weight", "label_smoothing"])
def test_an_all_padding_batch_leaves_the_weights_as_pytorch_does(path, runner, kw):
    """nan loss, zero gradient (not 0 * inf): one SGD step changes nothing, as in PyTorch."""
    torch.manual_seed(0)
    tm = torch.nn.Linear(5, 4)
    jm = tj.nn.Linear(5, 4)
    jm.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    xv = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    tv = np.full(3, -100)
    jkw = {k: tj.tensor(v) if isinstance(v, list) else v for k, v in kw.items()}
    tkw = {k: torch.tensor(v) if isinstance(v, list) else v for k, v in kw.items()}

    def loss_fn(x, t):
        return F.cross_entropy(jm(x), t, **jkw)
    step = {"eager": loss_fn, "interpret": tj.trace(loss_fn, compiler="interpret"),
            "compiled": tj.trace(loss_fn)}[runner]
    loss = step(tj.tensor(xv), tj.tensor(tv))
    loss.backward()
    lt = torch.nn.functional.cross_entropy(tm(torch.tensor(xv)), torch.tensor(tv), **tkw)
    lt.backward()
    assert np.isnan(loss.item()) and np.isnan(lt.item())
    for name, p in jm.named_parameters():
        np.testing.assert_array_equal(p.grad.numpy(), getattr(tm, name).grad.numpy(), err_msg=name)
    tj.optim.SGD(jm.parameters(), lr=0.1).step()
    assert all(np.isfinite(p.detach().numpy()).all() for p in jm.parameters())


@pytest.mark.parametrize("runner", ["eager", "interpret", "compiled"])
@pytest.mark.parametrize("kw", [{}, {"reduction": "none"}, {"ignore_index": 2, "reduction": "sum"},
                                {"weight": [1.0, 2.0, 0.5, 1.5, 1.0]}, {"label_smoothing": 0.2}],
                         ids=["mean", "none", "ignore_index", "weight", "label_smoothing"])
def test_writing_the_logits_in_place_before_backward_works_like_pytorch(runner, kw):
    """The gradient reads log_softmax's result, as PyTorch's: the logits may change."""
    r = np.random.default_rng(3)
    xv, tv = r.standard_normal((6, 5)).astype(np.float32), np.array([0, 2, 4, 1, 2, 3])
    got = []
    for lib in (tj, torch):
        k = {a: lib.tensor(v) if isinstance(v, list) else v for a, v in kw.items()}

        def loss_fn(x, t):
            return lib.nn.functional.cross_entropy(x, t, **k)
        if lib is tj and runner != "eager":
            loss_fn = tj.trace(loss_fn, **({"compiler": "interpret"} if runner == "interpret" else {}))
        leaf = lib.tensor(xv, requires_grad=True)
        x = leaf * 1.0
        loss = loss_fn(x, lib.tensor(tv))
        x.mul_(3.0)
        loss.sum().backward()
        got.append((loss.detach().numpy(), leaf.grad.numpy(), x.detach().numpy()))
    for a, b in zip(*got):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_writing_nll_losss_own_input_before_backward_raises_like_pytorch():
    """PyTorch's NllLossBackward0 saves its input (the log-probabilities), so writing into
    them before backward() raises there; the same here, naming the node."""
    for lib, error in ((torch, RuntimeError), (tj, tj.errors.InplaceModifiedError)):
        x = lib.tensor(np.zeros((4, 3), np.float32), requires_grad=True)
        lp = x + 0.0
        loss = lib.nn.functional.nll_loss(lp, lib.tensor([0, 1, 2, 0]))
        lp.mul_(2.0)
        with pytest.raises(error, match="modified by an in-?place operation"):
            loss.backward()


def test_other_forms_keep_the_composite():
    x = tj.randn(4, 3)
    t = tj.tensor([0, 2, 1, 1])
    assert cross_entropy_prim.applies(x, t, None, 0.0)
    assert not cross_entropy_prim.applies(x, t, tj.ones(3), 0.0)
    assert not cross_entropy_prim.applies(x, t, None, 0.1)
    assert not cross_entropy_prim.applies(tj.randn(2, 3, 4), tj.tensor([[0, 1, 2, 0], [1, 1, 1, 1]]), None, 0.0)
    assert not cross_entropy_prim.applies(x.to(tj.float16), t, None, 0.0)


def test_traced_program_records_the_primitive_and_compiled_gradients_equal_eager():
    from tracejit.jit.tracer import trace_graph
    from tracejit.ops.registry import Aval

    def f(x, t):
        return F.cross_entropy(x * 2.0, t)
    ctx, _ = trace_graph(f, [Aval((5, 4), tj.float64), Aval((5,), tj.int64)])
    names = {e.prim.name for e in ctx.eqns}
    assert "cross_entropy" in names and not names & {"gather", "logsumexp", "ne"}
    r = np.random.default_rng(2)
    xv, tv = r.standard_normal((5, 4)), np.array([0, 3, -100, 1, 2])
    grads = []
    for fn in (f, tj.trace(f)):
        x = tj.tensor(xv, requires_grad=True)
        loss = fn(x, tj.tensor(tv))
        loss.backward()
        grads.append((loss.item(), x.grad.numpy()))
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-12)
    np.testing.assert_allclose(grads[1][1], grads[0][1], rtol=1e-12, atol=1e-14)


def test_kernel_sums_exponentials_in_float64(path):
    # a long float32 row: the sum of exponentials summed in float32 one by one drifts by
    # ~1e-5 relative over 60,000 classes; the kernel (and numpy's pairwise sum) do not
    r = np.random.default_rng(2)
    xv = r.uniform(-1, 1, (3, 60000)).astype(np.float32)
    tv = np.array([0, 17, 59999])
    x = tj.tensor(xv, requires_grad=True)
    loss = F.cross_entropy(x, tj.tensor(tv), reduction="none")
    loss.sum().backward()
    x64 = xv.astype(np.float64)
    z = x64 - x64.max(1, keepdims=True)
    s = np.exp(z).sum(1)
    want = np.log(s) - z[np.arange(3), tv]
    np.testing.assert_allclose(loss.detach().numpy(), want, rtol=3e-7)
    g = np.exp(z) / s[:, None]
    g[np.arange(3), tv] -= 1
    np.testing.assert_allclose(x.grad.numpy(), g, rtol=1e-5, atol=1e-11)


@pytest.mark.parametrize("shape", [(3, 5, 7), (2, 4, 3, 5), (0, 3, 4)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype, tol", [(np.float32, 2e-6), (np.float64, 1e-13)])
@pytest.mark.parametrize("compiled", [False, True])
def test_nll_loss_over_extra_dims_is_one_primitive_and_matches_pytorch(shape, reduction, dtype, tol,
                                                                        compiled):
    # ((N, C, d1, ...) scores pick their targets by flat position, no transposed copy)
    r = np.random.default_rng(sum(shape))
    xv = r.standard_normal(shape).astype(dtype)
    tv = r.integers(0, shape[1], (shape[0],) + shape[2:])
    tv.reshape(-1)[::4] = -100
    gv = r.standard_normal(tv.shape if reduction == "none" else ()).astype(dtype)
    x = tj.tensor(xv, requires_grad=True)

    def f(v, t):
        return F.nll_loss(v * 2.0, t, reduction=reduction)
    loss = (tj.compile(f) if compiled else f)(x, tj.tensor(tv))
    if not compiled:
        assert loss.grad_fn.name() == "NllLossBackward0"
    loss.backward(tj.tensor(gv))
    xt = torch.tensor(xv, requires_grad=True)
    lt = torch.nn.functional.nll_loss(xt * 2.0, torch.tensor(tv), reduction=reduction)
    lt.backward(torch.tensor(gv))
    assert loss.dtype.np == dtype and tuple(loss.shape) == tuple(lt.shape)
    np.testing.assert_allclose(loss.detach().numpy(), lt.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=tol, atol=tol)


def test_cross_entropy_over_extra_dims_first_and_second_order_match_pytorch():
    r = np.random.default_rng(4)
    xv, wv = r.standard_normal((2, 4, 3, 5)), r.standard_normal((2, 4, 3, 5))
    tv = r.integers(0, 4, (2, 3, 5))
    tv[0, 1, 2] = -100
    got = []
    for lib in (tj, torch):
        x, w = lib.tensor(xv, requires_grad=True), lib.tensor(wv, requires_grad=True)
        loss = lib.nn.functional.cross_entropy(x * w, lib.tensor(tv))
        (gx,) = lib.autograd.grad(loss, x, create_graph=True)
        (gw,) = lib.autograd.grad((gx * gx).sum(), w)
        got.append([loss.item(), gx.detach().numpy(), gw.numpy()])
    for a, b in zip(*got):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)


def test_nll_loss_over_extra_dims_under_vmap_matches_per_sample_calls():
    r = np.random.default_rng(5)
    xv, tv = r.standard_normal((3, 2, 4, 5)), r.integers(0, 4, (3, 2, 5))
    tv[1, 0, 3] = -100
    for reduction in ("mean", "sum", "none"):
        def f(x, t):
            return F.nll_loss(x, t, reduction=reduction)

        def scalar(x, t):
            return F.nll_loss(x, t, reduction="sum" if reduction == "none" else reduction)
        got = tj.func.vmap(f)(tj.tensor(xv), tj.tensor(tv)).numpy()
        gx = tj.func.vmap(tj.func.grad(scalar))(tj.tensor(xv), tj.tensor(tv)).numpy()
        xt = torch.tensor(xv, requires_grad=True)
        red = "sum" if reduction == "none" else reduction
        want = [torch.nn.functional.nll_loss(xt[i], torch.tensor(tv[i]), reduction=reduction)
                for i in range(3)]
        sum(torch.nn.functional.nll_loss(xt[i], torch.tensor(tv[i]), reduction=red)
            for i in range(3)).backward()
        np.testing.assert_allclose(got, np.stack([w.detach().numpy() for w in want]), rtol=1e-12)
        np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-12)
