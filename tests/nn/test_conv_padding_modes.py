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
