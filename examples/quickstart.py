"""tracejit in two minutes: tensors, autograd, and a small model trained with Adam.

Run:  python examples/quickstart.py
If you know PyTorch, read ``tj`` as ``torch``.
"""
import tracejit as tj
import tracejit.nn.functional as F
from tracejit import nn

tj.manual_seed(0)

# ---- tensors ---------------------------------------------------------------
a = tj.tensor([[1.0, 2.0], [3.0, 4.0]])
b = tj.ones(2, 2)
print("a @ b =", (a @ b).tolist())
print("a.sum(dim=0) =", a.sum(dim=0).tolist(), " a.T.shape =", a.T.shape)

# ---- autograd --------------------------------------------------------------
x = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = (x * x).sum()        # y = sum(x^2)
y.backward()             # dy/dx = 2x
print("grad of sum(x^2) at", x.tolist(), "is", x.grad.tolist())

# ---- a small model ---------------------------------------------------------
# Fit y = sin(3x) on [-1, 1] with a two-layer MLP.
inputs = tj.linspace(-1, 1, 128).reshape(128, 1)
targets = tj.sin(3 * inputs)

model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))
print(model)
opt = tj.optim.Adam(model.parameters(), lr=0.02)

for step in range(301):
    loss = F.mse_loss(model(inputs), targets)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(f"step {step:3d}  loss {loss.item():.5f}")

# ---- save and load ---------------------------------------------------------
import io  # noqa: E402

buf = io.BytesIO()
tj.save(model.state_dict(), buf)
buf.seek(0)
clone = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))
clone.load_state_dict(tj.load(buf))
with tj.no_grad():
    same = (clone(inputs) - model(inputs)).abs().max().item()
print("reloaded model max difference:", same)
