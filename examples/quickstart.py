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

# ---- the JIT ---------------------------------------------------------------
# @tj.script captures the function into an IR, differentiates it, fuses the
# elementwise chains into numba kernels and caches the result per input signature.
# Python control flow on tensors or scalar arguments becomes graph control flow.


@tj.script
def gelu_mse(x, w, target, scale):
    h = x @ w
    a = 0.5 * h * (1 + tj.tanh(0.79788456 * (h + 0.044715 * h ** 3)))   # fused: one kernel
    if scale > 1.0:                                                       # a graph `cond`
        a = a * scale
    return ((a - target) ** 2).mean()                                     # fused with its reduction


w = tj.randn(16, 4, requires_grad=True)
for batch in (32, 32, 64, 48):          # 64 makes the batch dim symbolic; 48 reuses it
    x, target = tj.randn(batch, 16), tj.randn(batch, 4)
    loss = gelu_mse(x, w, target, 2.0 if batch == 64 else 1.0)
    loss.backward()
with tj.eager():                        # the same function run as plain Python
    reference = gelu_mse(x, w, target, 1.0)
print(f"compiled loss {loss.item():.6f}  eager loss {reference.item():.6f}")
stats = gelu_mse.cache_stats()
print(f"captures: {stats['compiles']}, cache hits: {stats['hits']}, dynamic dims: {stats['dynamic_dims']}")
print(gelu_mse.explain(x, w, target, 1.0)["optimized graph"])
