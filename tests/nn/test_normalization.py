"""BatchNorm / GroupNorm / InstanceNorm against PyTorch: outputs, gradients, running statistics."""
import numpy as np
import pytest

import tracejit as tj
from tracejit import nn
from tracejit.errors import ShapeError
import tracejit.nn.functional as F

torch = pytest.importorskip("torch", reason="normalization layers are checked against PyTorch")


def _copy(m, t):
    m.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})


def _run_steps(m, t, shape, steps=3, seed=0):
    """Several forward/backward steps; compares outputs, input and parameter grads each step."""
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        x = rng.standard_normal(shape) * 2 + 0.5
        w = rng.standard_normal(shape)
        xt, xj = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
        yt, yj = t(xt), m(xj)
        np.testing.assert_allclose(yj.detach().numpy(), yt.detach().numpy(), rtol=1e-9, atol=1e-10)
        (yt * torch.tensor(w)).sum().backward()
        (yj * tj.tensor(w)).sum().backward()
        np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-8, atol=1e-10)
    tp = dict(t.named_parameters())
    for n, p in m.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), tp[n].grad.numpy(), rtol=1e-8, atol=1e-10, err_msg=n)
    tb = dict(t.named_buffers())
    for n, b in m.named_buffers():
        np.testing.assert_allclose(b.numpy(), tb[n].numpy(), rtol=1e-10, atol=1e-12, err_msg=n)


@pytest.mark.parametrize("cls,shape", [("BatchNorm1d", (6, 3)), ("BatchNorm1d", (4, 3, 5)),
                                       ("BatchNorm2d", (4, 3, 2, 5))])
@pytest.mark.parametrize("momentum,affine,track", [(0.1, True, True), (None, True, True),
                                                   (0.3, False, True), (0.1, True, False)])
def test_batchnorm_train_then_eval(cls, shape, momentum, affine, track):
    t = getattr(torch.nn, cls)(3, momentum=momentum, affine=affine, track_running_stats=track).double()
    m = getattr(nn, cls)(3, momentum=momentum, affine=affine, track_running_stats=track, dtype="float64")
    assert list(m.state_dict()) == list(t.state_dict())
    if affine:
        with torch.no_grad():
            t.weight.uniform_(0.5, 1.5)
            t.bias.uniform_(-1, 1)
    _copy(m, t)
    _run_steps(m, t, shape, steps=3)
    if track:
        assert m.num_batches_tracked.item() == 3 and m.num_batches_tracked.dtype == tj.int64
    t.eval()
    m.eval()
    _run_steps(m, t, shape, steps=2, seed=1)
    if track:
        assert m.num_batches_tracked.item() == 3   # eval does not count batches


@pytest.mark.parametrize("groups,shape,affine", [(1, (2, 6, 4), True), (3, (2, 6, 2, 3), True),
                                                 (6, (3, 6), False)])
def test_groupnorm(groups, shape, affine):
    t = torch.nn.GroupNorm(groups, 6, affine=affine).double()
    m = nn.GroupNorm(groups, 6, affine=affine, dtype="float64")
    if affine:
        with torch.no_grad():
            t.weight.uniform_(0.5, 1.5)
            t.bias.uniform_(-1, 1)
    _copy(m, t)
    _run_steps(m, t, shape, steps=1)


@pytest.mark.parametrize("affine,track", [(False, False), (True, True)])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (3, 4, 5)])
def test_instancenorm2d(affine, track, shape):
    t = torch.nn.InstanceNorm2d(3, affine=affine, track_running_stats=track).double()
    m = nn.InstanceNorm2d(3, affine=affine, track_running_stats=track, dtype="float64")
    assert list(m.state_dict()) == list(t.state_dict())
    _copy(m, t)
    _run_steps(m, t, shape, steps=2)
    t.eval()
    m.eval()
    _run_steps(m, t, shape, steps=1, seed=3)


def test_functionals_match_torch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6, 3))
    w, b = rng.standard_normal(6), rng.standard_normal(6)
    rm, rv = rng.standard_normal(6), rng.random(6) + 0.5
    T, J = torch.tensor, tj.tensor
    ref = torch.nn.functional.batch_norm(T(x), T(rm), T(rv), T(w), T(b), False)
    np.testing.assert_allclose(F.batch_norm(J(x), J(rm), J(rv), J(w), J(b), False).numpy(), ref.numpy(),
                               rtol=1e-10)
    rmt, rvt, rmj, rvj = T(rm), T(rv), J(rm), J(rv)
    ref = torch.nn.functional.batch_norm(T(x), rmt, rvt, training=True, momentum=0.2)
    got = F.batch_norm(J(x), rmj, rvj, training=True, momentum=0.2)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-10)
    np.testing.assert_allclose(rmj.numpy(), rmt.numpy(), rtol=1e-10)
    np.testing.assert_allclose(rvj.numpy(), rvt.numpy(), rtol=1e-10)
    ref = torch.nn.functional.group_norm(T(x), 2, T(w), T(b))
    np.testing.assert_allclose(F.group_norm(J(x), 2, J(w), J(b)).numpy(), ref.numpy(), rtol=1e-10)
    ref = torch.nn.functional.instance_norm(T(x), weight=T(w), bias=T(b))
    np.testing.assert_allclose(F.instance_norm(J(x), weight=J(w), bias=J(b)).numpy(), ref.numpy(),
                               rtol=1e-10)


def test_errors():
    with pytest.raises(ShapeError, match=r"BatchNorm2d: expected 4D input, got 3D input of shape \(2, 3, 4\)"):
        nn.BatchNorm2d(3)(tj.randn(2, 3, 4))
    with pytest.raises(ShapeError, match=r"BatchNorm1d: expected input with 3 channels .* shape \(2, 4\)"):
        nn.BatchNorm1d(3)(tj.randn(2, 4))
    bn = nn.BatchNorm1d(3)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        bn(tj.randn(1, 3))
    assert bn.num_batches_tracked.item() == 0   # a rejected call changes no state
    with pytest.raises(ValueError, match="divisible by num_groups"):
        nn.GroupNorm(4, 6)
    with pytest.raises(ShapeError, match=r"InstanceNorm2d: expected input with 3 channels .* \(2, 5, 4, 4\)"):
        nn.InstanceNorm2d(3, affine=True)(tj.randn(2, 5, 4, 4))
    with pytest.raises(ShapeError, match=r"InstanceNorm1d: expected input with 3 channels"):
        nn.InstanceNorm1d(3, track_running_stats=True)(tj.randn(2, 5, 4))


def test_instance_norm_without_state_runs_another_channel_count_with_a_warning():
    # affine=False, no running stats: num_features sizes nothing, so PyTorch warns and runs
    x = np.random.default_rng(0).standard_normal((2, 5, 4, 4)).astype(np.float32)
    with pytest.warns(UserWarning, match="size at dim=1 does not match num_features"):
        y = nn.InstanceNorm2d(3)(tj.tensor(x))
    mu, var = x.mean((2, 3), keepdims=True), x.var((2, 3), keepdims=True)
    np.testing.assert_allclose(y.numpy(), (x - mu) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)
    with pytest.warns(UserWarning, match="size at dim=0 does not match num_features"):
        assert nn.InstanceNorm1d(4)(tj.tensor(x[0, :2, :, 0])).shape == (2, 4)


@pytest.mark.parametrize("capture", ["trace", "script"])
def test_batchnorm_compiles_in_eval_and_without_running_stats(capture):
    rng = np.random.default_rng(5)
    x = tj.tensor(rng.standard_normal((8, 3, 2, 2)).astype("float32"))
    m = nn.BatchNorm2d(3)
    with tj.no_grad():
        m.running_mean.copy_(tj.tensor([0.5, -1.0, 2.0]))
        m.running_var.copy_(tj.tensor([0.5, 2.0, 3.0]))
    m.eval()
    np.testing.assert_allclose(getattr(tj, capture)(m)(x).detach().numpy(), m(x).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    free = nn.BatchNorm2d(3, track_running_stats=False)   # training mode, batch statistics only
    np.testing.assert_allclose(getattr(tj, capture)(free)(x).detach().numpy(), free(x).detach().numpy(),
                               rtol=1e-5, atol=1e-5)
    g = nn.GroupNorm(3, 3)
    np.testing.assert_allclose(getattr(tj, capture)(g)(x).detach().numpy(), g(x).detach().numpy(),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("capture", ["trace", "script"])
def test_batchnorm_compiled_updates_running_stats(capture):
    """Under tj.trace / tj.script, training-mode BatchNorm updates its buffers like eager."""
    rng = np.random.default_rng(5)
    xs = [tj.tensor(rng.standard_normal((8, 3, 2, 2)).astype("float32")) for _ in range(3)]
    eager = nn.BatchNorm2d(3, momentum=None)
    comp_mod = nn.BatchNorm2d(3, momentum=None)
    comp = getattr(tj, capture)(comp_mod)
    for x in xs:
        a = eager(x)
        b = comp(x)
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-5, atol=1e-6)
    for n, buf in eager.named_buffers():
        np.testing.assert_allclose(dict(comp_mod.named_buffers())[n].numpy(), buf.numpy(), rtol=1e-5,
                                   err_msg=n)


@pytest.mark.parametrize("name, args, shape", [("BatchNorm2d", (4,), (3, 4, 5, 5)), ("BatchNorm1d", (4,), (6, 4)),
                                                ("InstanceNorm2d", (4,), (3, 4, 5, 5)),
                                                ("GroupNorm", (2, 4), (3, 4, 5)), ("LayerNorm", ([5],), (3, 4, 5))])
def test_bias_false_as_pytorch(name, args, shape):
    kw = dict(bias=False, affine=True) if "Instance" in name else dict(bias=False)
    t = getattr(torch.nn, name)(*args, **kw).double()
    m = getattr(nn, name)(*args, **kw).double()
    with torch.no_grad():
        t.weight.uniform_(0.5, 2.0)
    assert m.bias is None and sorted(m.state_dict()) == sorted(t.state_dict())
    assert repr(m) == repr(t)
    _copy(m, t)
    _run_steps(m, t, shape)


@pytest.mark.parametrize("channels,size", [(5, 2), (5, 3), (8, 4), (8, 5), (3, 7), (1, 2)])
def test_cross_map_lrn2d_matches_torch(channels, size):
    """PyTorch's CrossMapLRN2d is not LocalResponseNorm: a symmetric window also for an even
    size, and channel 0's square in every sum past the window's half width. Its gradient is
    that formula's (PyTorch's hand-written backward fails for a batch of 2)."""
    x = np.random.default_rng(size).standard_normal((2, channels, 2, 3))
    want = torch.nn.CrossMapLRN2d(size, alpha=0.5, beta=0.75, k=1.5)(torch.tensor(x)).numpy()
    xt = tj.tensor(x, requires_grad=True)
    got = nn.CrossMapLRN2d(size, alpha=0.5, beta=0.75, k=1.5)(xt)
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-12, atol=1e-12)
    xr = torch.tensor(x, requires_grad=True)
    h, sq = (size - 1) // 2, xr * xr
    s = torch.stack([sq[:, max(0, c - h):c + h + 1].sum(1) + (sq[:, 0] if c > h else 0) for c in range(channels)], 1)
    w = torch.tensor(np.arange(want.size).reshape(want.shape) % 3 - 1.0)
    ((xr / (s * (0.5 / size) + 1.5) ** 0.75) * w).sum().backward()
    (got * tj.tensor(w.numpy())).sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape,groups", [((1, 6), 6), ((1, 6, 1), 6), ((1, 2, 1, 1), 2), ((2, 6), 6), ((1, 6), 3)])
def test_group_norm_of_one_value_per_group_is_refused_as_torch(shape, groups):
    """PyTorch refuses a group norm whose batch times channels per group times spatial size
    is 1 (each group a single value), in eval mode too; tracejit returned the bias there."""
    try:
        torch.nn.functional.group_norm(torch.ones(shape), groups)
    except ValueError:
        with pytest.raises(ValueError, match="more than 1 value"):
            F.group_norm(tj.ones(shape), groups)
    else:
        np.testing.assert_array_equal(F.group_norm(tj.ones(shape), groups).numpy(), np.zeros(shape))


@pytest.mark.parametrize("version", [None, 1, 2])
def test_an_old_checkpoint_without_num_batches_tracked_loads_as_pytorch(version):
    """Version 2 of the batch norms added num_batches_tracked: a checkpoint of version 1, or
    a plain dict, without it loads strictly (the layer keeps its count); version 2 misses it."""
    from collections import OrderedDict
    torch = pytest.importorskip("torch")
    res = []
    for L in (torch, tj):
        m = L.nn.Sequential(L.nn.BatchNorm1d(2))
        m[0].num_batches_tracked += 3
        sd = OrderedDict((k, v) for k, v in m.state_dict().items() if not k.endswith("num_batches_tracked"))
        if version is not None:
            sd._metadata = OrderedDict([("", {"version": 1}), ("0", {"version": version})])
        try:
            missing = list(m.load_state_dict(sd, strict=False).missing_keys)
            m.load_state_dict(sd)
        except RuntimeError as e:
            res.append((missing, "missing" if "Missing key(s)" in str(e) else str(e)))
        else:
            res.append((missing, int(m[0].num_batches_tracked), list(sd)))
        res[-1] += (dict(m.state_dict()._metadata),)
    assert res[1] == res[0]
