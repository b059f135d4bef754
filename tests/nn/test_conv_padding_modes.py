"""Conv1d/2d/3d with padding_mode reflect, replicate and circular equal PyTorch's
(values and gradients, float64, with the same weights), 'same' padding included."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("layer, args, shape", [
    ("Conv1d", (2, 3, 3), dict(padding=2, stride=2)),
    ("Conv2d", (2, 3, (3, 2)), dict(padding=(1, 2))),
    ("Conv2d", (2, 4, 4), dict(padding="same", dilation=2, groups=2)),
    ("Conv3d", (2, 3, 3), dict(padding=1)),
])
def test_padding_modes_equal_pytorch(mode, layer, args, shape):
    kw = shape
    ref = getattr(torch.nn, layer)(*args, padding_mode=mode, **kw).double()
    mine = getattr(tj.nn, layer)(*args, padding_mode=mode, dtype=tj.float64, **kw)
    mine.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    nd = int(layer[4])
    x = np.random.default_rng(nd).standard_normal((2, 2) + (6,) * nd)
    rx, mx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    ro, mo = ref(rx), mine(mx)
    np.testing.assert_allclose(mo.detach().numpy(), ro.detach().numpy(), rtol=1e-10, atol=1e-12)
    (ro ** 2).sum().backward()
    (mo ** 2).sum().backward()
    np.testing.assert_allclose(mx.grad.numpy(), rx.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(mine.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_unknown_padding_mode_names_itself():
    with pytest.raises(ValueError, match="padding_mode must be one of .* got 'mirror'"):
        tj.nn.Conv2d(2, 3, 3, padding_mode="mirror")


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_compiled_padding_modes_over_changing_lengths_capture_twice(mode):
    """A compiled Conv1d with a padding mode, then F.pad by a changing int, on inputs of a new
    length each call: PyTorch's values and gradients, and one capture for every length."""
    ref = torch.nn.Conv1d(2, 3, 3, padding=2, padding_mode=mode).double()
    mine = tj.nn.Conv1d(2, 3, 3, padding=2, padding_mode=mode, dtype=tj.float64)
    mine.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    f = lambda F, conv, x, n: F.pad(conv(x), (n, 1), mode=mode)   # noqa: E731
    cf = tj.compile(lambda x, n: f(tj.nn.functional, mine, x, n))
    for length, n in [(5, 2), (6, 3), (9, 4), (12, 2), (7, 5)]:
        x = np.random.default_rng(length).standard_normal((2, 2, length))
        rx, mx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
        ro, mo = f(torch.nn.functional, ref, rx, n), cf(mx, n)
        np.testing.assert_allclose(mo.detach().numpy(), ro.detach().numpy(), rtol=1e-10, atol=1e-12)
        (ro ** 2).sum().backward()
        (mo ** 2).sum().backward()
        np.testing.assert_allclose(mx.grad.numpy(), rx.grad.numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(mine.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-10)
    assert cf.cache_stats()["compiles"] == 2, cf.cache_stats()["recompile_reasons"]
