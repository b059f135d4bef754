from _harness import sync  # the runner: weights shared with the PyTorch run
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0); torch.set_default_dtype(torch.float64)
def gram_matrix(input):
    a, b, c, d = input.size()
    features = input.view(a * b, c * d)
    G = torch.mm(features, features.t())
    return G.div(a * b * c * d)
class StyleLoss(nn.Module):
    def __init__(s, target_feature):
        super().__init__(); s.target = gram_matrix(target_feature).detach()
    def forward(s, input):
        s.loss = F.mse_loss(gram_matrix(input), s.target); return input
class ContentLoss(nn.Module):
    def __init__(s, target):
        super().__init__(); s.target = target.detach()
    def forward(s, input):
        s.loss = F.mse_loss(input, s.target); return input
cnn = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=False), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=False), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1))
sync(cnn); cnn.eval().requires_grad_(False)
r = np.random.default_rng(0)
style_img = torch.from_numpy(r.random((1, 3, 16, 16)).astype(np.float64)); content_img = torch.from_numpy(r.random((1, 3, 16, 16)).astype(np.float64))
model = nn.Sequential(); sl, cl = [], []; i = 0
for layer in cnn.children():
    if isinstance(layer, nn.Conv2d): i += 1; name = f"conv_{i}"
    elif isinstance(layer, nn.ReLU): name = f"relu_{i}"; layer = nn.ReLU(inplace=False)
    elif isinstance(layer, nn.MaxPool2d): name = f"pool_{i}"
    model.add_module(name, layer)
    if name == "conv_2":
        target = model(content_img).detach(); c = ContentLoss(target); model.add_module(f"content_loss_{i}", c); cl.append(c)
    if name in ("conv_1", "conv_3"):
        tf = model(style_img).detach(); s = StyleLoss(tf); model.add_module(f"style_loss_{i}", s); sl.append(s)
input_img = content_img.clone().requires_grad_(True)
optimizer = torch.optim.LBFGS([input_img])
LOSSES = []
for run in range(3):
    def closure():
        with torch.no_grad(): input_img.clamp_(0, 1)
        optimizer.zero_grad(); model(input_img)
        loss = 1e4 * sum(s.loss for s in sl) + sum(c.loss for c in cl)
        loss.backward(); return loss
    LOSSES.append(optimizer.step(closure).item())
