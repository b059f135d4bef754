"""conv1d, conv_transpose2d, adaptive pooling, avg/max pooling modes, interpolate, pad,
dropout2d, and their modules: forward and gradients equal PyTorch's (float64)."""
import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit import nn

torch = pytest.importorskip("torch", reason="compares with PyTorch")
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")  # torch's own notice
TF = torch.nn.functional


def _check(fn, *arrays):
    """fn(lib, functional, *tensors) on both libraries: same output, same input gradients."""
    rng = np.random.default_rng(7)
    tt = [torch.tensor(a, requires_grad=True) for a in arrays]
    jt = [tj.tensor(a, requires_grad=True) for a in arrays]
    ro, jo = fn(torch, TF, *tt), fn(tj, F, *jt)
    assert tuple(jo.shape) == tuple(ro.shape)
    np.testing.assert_allclose(jo.detach().numpy(), ro.detach().numpy(), rtol=1e-10, atol=1e-12)
    g = rng.standard_normal(tuple(ro.shape))
    ro.backward(torch.tensor(g))
    jo.backward(tj.tensor(g))
    for a, b in zip(jt, tt):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-10, atol=1e-12)


R = np.random.default_rng(0)
X1 = R.standard_normal((2, 4, 9))
X2 = R.standard_normal((2, 4, 5, 6))
X3 = R.standard_normal((2, 3, 7, 10))


@pytest.mark.parametrize("kw", [dict(stride=2, padding=1, dilation=2, groups=2), dict(padding="same"),
                                dict(padding="same", dilation=3), dict(padding="valid"),
                                dict(stride=(2,), padding=(1,), dilation=(2,)),
                                dict(stride=np.int64(2), padding=np.int64(1))])
def test_conv1d(kw):
    w = R.standard_normal((6, 4 // kw.get("groups", 1), 4))
    _check(lambda m, f, x, w, b: f.conv1d(x, w, b, **kw), X1, w, R.standard_normal(6))


@pytest.mark.parametrize("compiled", [False, True])
def test_wide_stride_conv1d_layers_match_torch(compiled):
    """An 80-tap Conv1d at stride 16 over one channel (a speech model's first layer) and a
    ConvTranspose1d at stride 4: run over the input's phases; same weights by state_dict
    name, same output and gradients."""
    rng = np.random.default_rng(3)
    for tl, jl, x in ((torch.nn.Conv1d(1, 6, 80, stride=16), nn.Conv1d(1, 6, 80, stride=16),
                       rng.standard_normal((2, 1, 800), np.float32)),
                      (torch.nn.ConvTranspose1d(3, 4, 8, stride=4, padding=2),
                       nn.ConvTranspose1d(3, 4, 8, stride=4, padding=2), rng.standard_normal((2, 3, 40), np.float32))):
        jl.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in tl.state_dict().items()})
        fn = tj.compile(lambda t: jl(t)) if compiled else jl
        tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
        ro, jo = tl(tx), fn(jx)
        np.testing.assert_allclose(jo.detach().numpy(), ro.detach().numpy(), rtol=1e-4, atol=1e-4)
        g = rng.standard_normal(tuple(ro.shape), np.float32)
        ro.backward(torch.tensor(g))
        jo.backward(tj.tensor(g))
        np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
        for name, p in jl.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), dict(tl.named_parameters())[name].grad.numpy(),
                                       rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1),
                                dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2,
                                     dilation=(1, 2))])
def test_conv_transpose2d(kw):
    w = R.standard_normal((4, 3, 3, 2))
    _check(lambda m, f, x, w, b: f.conv_transpose2d(x, w, b, **kw), X2, w, R.standard_normal(3 * kw.get("groups", 1)))


@pytest.mark.parametrize("size", [(3, 4), (7, 5), 2, (None, 3), 1])
def test_adaptive_pools(size):
    _check(lambda m, f, x: f.adaptive_avg_pool2d(x, size), X3)
    _check(lambda m, f, x: f.adaptive_max_pool2d(x, size), X3)


@pytest.mark.parametrize("kw", [dict(kernel_size=3, stride=2, ceil_mode=True),
                                dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
                                dict(kernel_size=2, ceil_mode=True, count_include_pad=False),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                dict(kernel_size=2, divisor_override=3)])
def test_avg_pool2d_modes(kw):
    _check(lambda m, f, x: f.avg_pool2d(x, **kw), X3)


@pytest.mark.parametrize("pad", [0, 1])
def test_max_pool2d_ceil_mode(pad):
    _check(lambda m, f, x: f.max_pool2d(x, 3, 2, pad, ceil_mode=True), X3)


@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(size=(5, 13)), dict(scale_factor=1.7),
                                dict(size=(9, 3), mode="nearest-exact"),
                                dict(scale_factor=2, mode="bilinear", align_corners=False),
                                dict(scale_factor=2, mode="bilinear", align_corners=True),
                                dict(size=(4, 17), mode="bilinear", align_corners=False),
                                dict(size=(4, 17), mode="bilinear", align_corners=True),
                                dict(scale_factor=(1.5, 0.5), mode="bilinear")])
def test_interpolate_2d(kw):
    _check(lambda m, f, x: f.interpolate(x, **kw), X3)


def test_interpolate_linear_1d():
    _check(lambda m, f, x: f.interpolate(x, scale_factor=3, mode="linear", align_corners=False), X1)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes(mode):
    _check(lambda m, f, x: f.pad(x, (2, 3, 1, 0), mode=mode), X3)


def test_pad_negative_crops():
    _check(lambda m, f, x: f.pad(x, (-1, 2, 1, -2), value=1.5), X3)


def test_bad_arguments_name_the_culprit():
    x = tj.randn(1, 2, 5)
    with pytest.raises(ValueError, match="reflect padding"):
        F.pad(x, (5, 0), mode="reflect")
    with pytest.raises(tj.errors.ShapeError, match="channels"):
        F.conv_transpose2d(tj.randn(1, 3, 4, 4), tj.randn(2, 2, 3, 3))
    with pytest.raises(ValueError, match="exactly one"):
        F.interpolate(tj.randn(1, 1, 4, 4))
    with pytest.raises(ValueError, match="output_padding"):
        nn.ConvTranspose2d(2, 2, 3, stride=2, output_padding=2)


def _copy_weights(tm, jm):
    jm.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})


@pytest.mark.parametrize("make", [
    lambda lib: lib.nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2),
    lambda lib: lib.nn.Conv1d(4, 6, 4, padding="same", bias=False),
    lambda lib: lib.nn.ConvTranspose2d(4, 6, 4, stride=2, padding=1, bias=False),
    lambda lib: lib.nn.ConvTranspose2d(4, 6, 3, stride=2, output_padding=1, groups=2, dilation=2),
    lambda lib: lib.nn.Conv2d(4, 6, (3, 2), padding="same"),          # even kernels: one more right
    lambda lib: lib.nn.Conv2d(4, 6, (2, 2), padding="same", bias=False),
    lambda lib: lib.nn.Conv2d(4, 6, (1, 2), padding="same", dilation=(2, 1)),
    lambda lib: lib.nn.ConvTranspose2d(4, 6, 2, output_padding=1, dilation=2),  # >= stride, < dilation
    lambda lib: lib.nn.ConvTranspose2d(4, 6, 3, stride=(1, 2), padding=2, output_padding=(2, 1), dilation=3),
])
def test_conv_modules_state_dict_init_and_values(make):
    torch.manual_seed(0)
    tm, jm = make(torch), make(tj)
    assert list(jm.state_dict()) == list(tm.state_dict())
    for k, v in tm.state_dict().items():
        assert tuple(jm.state_dict()[k].shape) == tuple(v.shape)
        # same init distribution: U(-b, b) with PyTorch's bound (compare the range)
        bound = float(v.abs().max())
        assert float(jm.state_dict()[k].abs().max()) <= bound * 1.6 + 1e-6
    _copy_weights(tm, jm)
    x = (X1 if isinstance(tm, torch.nn.Conv1d) else X2).astype(np.float32)
    tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    to, jo = tm(tx), jm(jx)
    np.testing.assert_allclose(jo.detach().numpy(), to.detach().numpy(), rtol=1e-4, atol=1e-5)
    (to * to).sum().backward()
    (jo * jo).sum().backward()
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(jm.weight.grad.numpy(), tm.weight.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_conv_transpose2d_output_size_argument():
    torch.manual_seed(0)
    tm = torch.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1)
    jm = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1)
    _copy_weights(tm, jm)
    x = X2.astype(np.float32)
    to = tm(torch.tensor(x), output_size=(10, 12))
    jo = jm(tj.tensor(x), output_size=(10, 12))
    np.testing.assert_allclose(jo.detach().numpy(), to.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_pooling_and_upsample_modules():
    x = X3.astype(np.float32)
    pairs = [(torch.nn.AdaptiveAvgPool2d((3, 4)), nn.AdaptiveAvgPool2d((3, 4))),
             (torch.nn.AdaptiveMaxPool2d(2), nn.AdaptiveMaxPool2d(2)),
             (torch.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
              nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)),
             (torch.nn.Upsample(size=(9, 9)), nn.Upsample(size=(9, 9))),
             (torch.nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
              nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False)),
             (torch.nn.MaxPool2d(3, 2, ceil_mode=True), nn.MaxPool2d(3, 2, ceil_mode=True))]
    for tm, jm in pairs:
        np.testing.assert_allclose(jm(tj.tensor(x)).numpy(), tm(torch.tensor(x)).numpy(),
                                   rtol=1e-5, atol=1e-6, err_msg=repr(jm))


@pytest.mark.parametrize("make", [
    lambda lib: lib.nn.MaxPool2d(3, 2, return_indices=True),
    lambda lib: lib.nn.MaxPool2d(3, 2, 1, ceil_mode=True, return_indices=True),
    lambda lib: lib.nn.MaxPool2d((2, 3), (3, 2), dilation=2, ceil_mode=True, return_indices=True),
    lambda lib: lib.nn.AdaptiveMaxPool2d((3, 4), return_indices=True),
    lambda lib: lib.nn.AdaptiveMaxPool2d(2, return_indices=True),
    lambda lib: lib.nn.AdaptiveMaxPool2d((4, None), return_indices=True),
])
def test_max_pool_modules_return_indices_as_pytorch(make):
    """(values, flat H*W indices of each window's first maximum) on ties, eagerly, in the
    interpreter and compiled, batched and unbatched."""
    xv = np.random.default_rng(3).integers(0, 3, (2, 3, 7, 10)).astype(np.float32)
    tm, jm = make(torch), make(tj)
    for x in (xv, xv[0]):
        to, ti = tm(torch.tensor(x))
        for run in (jm, tj.trace(jm, compiler="interpret"), tj.trace(jm)):
            jo, ji = run(tj.tensor(x))
            assert ji.dtype is tj.int64
            np.testing.assert_array_equal(jo.numpy(), to.numpy())
            np.testing.assert_array_equal(ji.numpy(), ti.numpy())


def test_dropout2d_zeroes_whole_channels_and_scales():
    tj.manual_seed(0)
    m = nn.Dropout2d(0.5)
    x = tj.ones(8, 16, 3, 3)
    y = m(x).numpy()
    per_channel = y.reshape(8, 16, 9)
    assert np.all(per_channel.min(-1) == per_channel.max(-1))  # a channel is kept or dropped whole
    assert set(np.unique(y)) == {0.0, 2.0}
    assert 0.3 < (per_channel[..., 0] == 0).mean() < 0.7
    m.eval()
    assert m(x) is x
    xg = tj.ones(2, 3, 2, 2, requires_grad=True)
    tj.manual_seed(1)
    out = F.dropout2d(xg, 0.5)
    out.sum().backward()
    np.testing.assert_array_equal(xg.grad.numpy(), out.detach().numpy())  # grad is the mask * scale


def test_dropout2d_reads_3d_and_2d_inputs_as_pytorch_does():
    # (N, C, L): one draw per (sample, channel), whole rows; (N, C): one draw per element
    tj.manual_seed(0)
    with pytest.warns(UserWarning, match="channel-wise 1D"):
        y = F.dropout2d(tj.ones(6, 40, 5), 0.5).numpy()
    assert np.all(y.min(-1) == y.max(-1))
    row = y[..., 0]
    assert 0.2 < (row == 0).mean() < 0.8 and np.any(row.min(1) != row.max(1))  # channels differ in a sample
    with pytest.warns(UserWarning, match="deprecated"):
        y2 = F.dropout2d(tj.ones(8, 40), 0.5).numpy()
    assert np.any(y2.min(1) != y2.max(1))


def test_spatial_ops_under_script_and_trace():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(4, 8, 3, padding="same"), nn.ReLU())
    x = tj.tensor(X1.astype(np.float32))
    np.testing.assert_allclose(tj.script(model)(x).detach().numpy(), model(x).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    up = nn.Sequential(nn.ConvTranspose2d(4, 2, 4, stride=2, padding=1), nn.Upsample(scale_factor=2, mode="bilinear"),
                       nn.AdaptiveAvgPool2d((3, 5)), nn.AdaptiveMaxPool2d(2))
    x2 = tj.tensor(X2.astype(np.float32), requires_grad=True)
    ref = up(x2)
    ref.sum().backward()
    g_ref = x2.grad.numpy().copy()
    x2.grad = None
    got = tj.trace(up)(x2)
    np.testing.assert_allclose(got.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    got.sum().backward()
    np.testing.assert_allclose(x2.grad.numpy(), g_ref, rtol=1e-5, atol=1e-6)

    def reflect_twice(t):
        return F.pad(t, (1, 2), mode="reflect") * 2
    padded = tj.script(reflect_twice)(x)
    np.testing.assert_allclose(padded.numpy(), np.pad(X1.astype(np.float32), ((0, 0), (0, 0), (1, 2)),
                                                       mode="reflect") * 2, rtol=1e-6)


@pytest.mark.parametrize("name,args,kw", [
    ("Conv2d", (3, 8, 3), {}),
    ("Conv2d", (3, 8, 3), dict(padding=1, bias=False, dilation=2)),
    ("Conv2d", (4, 8, 3), dict(padding="same", groups=2)),
    ("Conv2d", (4, 8, 3), dict(padding="valid")),
    ("Conv1d", (3, 8, 3), dict(padding=2, stride=2, bias=False)),
    ("Conv1d", (4, 8, 3), dict(padding="valid", groups=4)),
    ("ConvTranspose2d", (3, 8, 3), dict(stride=2, padding=1, output_padding=1)),
    ("ConvTranspose2d", (3, 8, 3), dict(bias=False, dilation=2)),
])
def test_conv_layers_print_as_pytorch(name, args, kw):
    assert repr(getattr(nn, name)(*args, **kw)) == repr(getattr(torch.nn, name)(*args, **kw))


@pytest.mark.parametrize("op", [0, 1])
def test_grouped_conv_transpose2d_is_the_input_gradient_primitive(op):
    # With groups too, conv_transpose2d is conv2d's input gradient (ops/conv_gemm.py), run
    # by blocks of images; output_padding of a stride or more takes it over the unpadded
    # result, cropped.
    torch = pytest.importorskip("torch")
    x = R.standard_normal((3, 4, 5, 6)).astype(np.float32)
    w = R.standard_normal((4, 3, 3, 3)).astype(np.float32)
    geo = dict(stride=1, padding=1, output_padding=op, groups=2, dilation=2)
    f = tj.script(lambda a, b: F.conv_transpose2d(a, b, **geo))
    got = f(tj.tensor(x), tj.tensor(w)).numpy()
    names = [e.prim.name for e in f.entries[0].opt_graph.eqns]
    assert "conv2d_xgrad" in names and "matmul" not in names and "fold" not in names, names
    ref = torch.nn.functional.conv_transpose2d(torch.tensor(x), torch.tensor(w), **geo).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_inplace_activation_on_conv_output_is_not_a_view_write(monkeypatch):
    # conv2d returns a value of its own, as in PyTorch: ReLU(inplace=True) after it is a
    # plain in-place op (no rebuilding of a base's history through index_put), and the
    # gradients are PyTorch's.
    from tracejit.ops.registry import REGISTRY
    puts = {"n": 0}
    orig = REGISTRY["index_put"].impl

    def counted(*a, **k):
        puts["n"] += 1
        return orig(*a, **k)
    monkeypatch.setattr(REGISTRY["index_put"], "impl", counted)
    xv, wv = R.standard_normal((2, 3, 6, 6)), R.standard_normal((4, 3, 3, 3))
    outs = []
    for lib, f in ((tj, F), (torch, TF)):
        x, w = lib.tensor(xv, requires_grad=True), lib.tensor(wv, requires_grad=True)
        y = f.conv2d(x, w, stride=1, padding=1)
        f.leaky_relu(y, 0.2, inplace=True)
        (y * y).sum().backward()
        outs.append((y.detach().numpy(), x.grad.numpy(), w.grad.numpy()))
    assert puts["n"] == 0
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("layers", [
    lambda m: [m.Conv2d(3, 6, 3), m.ReLU()],
    lambda m: [m.Conv2d(4, 6, 3, groups=2, bias=False)],
    lambda m: [m.Conv2d(3, 6, 3), m.BatchNorm2d(6).eval(), m.ReLU(), m.MaxPool2d(2)],
    lambda m: [m.Conv1d(3, 5, 2), m.Tanh()],
    lambda m: [m.ConvTranspose2d(3, 4, 3, stride=2), m.ReLU()],
], ids=["conv_relu", "grouped", "conv_bn_eval_relu_pool", "conv1d", "conv_transpose"])
def test_layer_outputs_are_contiguous_as_in_pytorch_so_view_flattens_them(layers):
    # the classic `x.view(x.size(0), -1)` after convolutional layers (DQN, MNIST nets)
    torch.manual_seed(0)
    tm = torch.nn.Sequential(*layers(torch.nn))
    jm = tj.nn.Sequential(*layers(tj.nn))
    jm.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    for t, j in zip(tm, jm):
        j.train(t.training)
    x = np.random.default_rng(0).standard_normal((8, tm[0].in_channels) + (9,) * (
        1 if isinstance(tm[0], torch.nn.Conv1d) else 2)).astype(np.float32)
    for _ in range(3):     # and after the eager kernels have had time to load
        to, jo = tm(torch.tensor(x)), jm(tj.tensor(x))
        assert jo.is_contiguous() == to.is_contiguous() is True
        np.testing.assert_allclose(jo.view(8, -1).detach().numpy(), to.view(8, -1).detach().numpy(),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layer, k", [("Conv1d", 3), ("Conv2d", (3, 3)), ("Conv3d", (3, 3, 3))])
def test_same_padding_with_a_stride_is_refused_as_pytorch_does(layer, k):
    with pytest.raises(ValueError, match="padding='same' is not supported for strided"):
        getattr(tj.nn, layer)(2, 4, k, stride=2, padding="same")
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError):
        getattr(torch.nn, layer)(2, 4, k, stride=2, padding="same")


@pytest.mark.parametrize("mode, pad", [("reflect", (3, 0)), ("circular", (4, 0))])
def test_pad_larger_than_the_input_raises_torchs_runtime_error(mode, pad):
    """PyTorch raises RuntimeError (augmentation code catches it to fall back to another mode);
    ours is also a ValueError, as before."""
    for m in (torch, tj):
        with pytest.raises(RuntimeError):
            m.nn.functional.pad(m.zeros(1, 1, 3), pad, mode=mode)
    with pytest.raises(ValueError):
        tj.nn.functional.pad(tj.zeros(1, 1, 3), pad, mode=mode)
