"""The classic PyTorch tutorial programs, written in tracejit, must train."""
import numpy as np

import tracejit as tj
import tracejit.nn.functional as F
from tracejit import nn, optim


def test_two_layer_net_by_hand():
    """x.mm(w1).clamp(min=0).mm(w2), updated with w -= lr * w.grad under no_grad."""
    tj.manual_seed(0)
    N, D_in, H, D_out = 64, 1000, 100, 10
    x = tj.randn(N, D_in)
    y = tj.randn(N, D_out)
    w1 = tj.randn(D_in, H, requires_grad=True)
    w2 = tj.randn(H, D_out, requires_grad=True)
    w1_data = w1._data
    learning_rate = 1e-6
    losses = []
    for _ in range(200):
        y_pred = x.mm(w1).clamp(min=0).mm(w2)
        loss = (y_pred - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        with tj.no_grad():
            w1 -= learning_rate * w1.grad
            w2 -= learning_rate * w2.grad
            w1.grad.zero_()
            w2.grad.zero_()
    assert w1._data is w1_data and w1.is_leaf and w1.requires_grad  # updated in place
    assert all(np.isfinite(losses))
    assert losses[0] > 1e5
    assert losses[-1] < 1e-3 * losses[0]
    assert losses[100] < losses[10] < losses[0]


def test_sequential_with_mse_loss_and_adam():
    tj.manual_seed(0)
    N, D_in, H, D_out = 64, 1000, 100, 10
    x = tj.randn(N, D_in)
    y = tj.randn(N, D_out)
    model = nn.Sequential(nn.Linear(D_in, H), nn.ReLU(), nn.Linear(H, D_out))
    opt = optim.Adam(model.parameters(), lr=1e-4)
    losses = []
    for _ in range(200):
        loss = F.mse_loss(model(x), y, reduction="sum")
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert losses[-1] < 0.05 * losses[0]
    assert all(b <= a * 1.05 for a, b in zip(losses, losses[1:]))  # falls, essentially monotonically


class TwoLayerNet(nn.Module):
    def __init__(self, D_in, H, D_out):
        super().__init__()
        self.linear1 = nn.Linear(D_in, H)
        self.linear2 = nn.Linear(H, D_out)

    def forward(self, x):
        return self.linear2(self.linear1(x).clamp(min=0))


def test_custom_module_with_sgd_and_dataloader():
    tj.manual_seed(0)
    x = tj.randn(256, 20)
    true_w = tj.randn(20, 3)
    y = x @ true_w
    loader = tj.data.DataLoader(tj.data.TensorDataset(x, y), batch_size=32, shuffle=True)
    model = TwoLayerNet(20, 64, 3)
    opt = optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    loss_fn = nn.MSELoss()

    def full_loss():
        with tj.no_grad():
            return loss_fn(model(x), y).item()

    start = full_loss()
    for _ in range(10):
        for xb, yb in loader:
            opt.zero_grad()
            loss_fn(model(xb), yb).backward()
            opt.step()
    assert full_loss() < 0.05 * start


def test_dcgan_example_runs_and_its_discriminator_learns():
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "dcgan.py"
    spec = importlib.util.spec_from_file_location("dcgan_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    losses = mod.main(["--steps", "3", "--batch", "4"])
    assert len(losses) == 3 and all(np.isfinite(v) for pair in losses for v in pair)
    assert losses[-1][0] < losses[0][0]          # D separates real from fake


def test_spatial_transformer_example_trains_its_transform():
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "spatial_transformer.py"
    spec = importlib.util.spec_from_file_location("stn_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model, losses = mod.main(["--steps", "15", "--batch", "16"])
    assert losses[-1] < losses[0]
    # the transform moved away from the identity it started at: gradients went through grid_sample
    bias = model.fc_loc[2].bias.detach().numpy()
    assert np.abs(bias - np.array([1, 0, 0, 0, 1, 0])).max() > 0
