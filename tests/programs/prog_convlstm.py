from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)

# A ConvLSTM encoder-forecaster for video prediction (Shi et al. 2015, as the popular
# ConvLSTM_pytorch repository writes the cell): gates by one conv over cat([x, h]) split
# by torch.split, stacked cells in an nn.ModuleList, Python loops over frames, the
# forecaster fed its own output or (teacher forcing, decided by a numpy coin) the true
# frame, MSE on the future frames, Adam with clip_grad_norm_. Data: moving squares.
class ConvLSTMCell(nn.Module):
    def __init__(self, input_dim, hidden_dim, kernel_size, bias=True):
        super(ConvLSTMCell, self).__init__()
        self.input_dim = input_dim
        self.hidden_dim = hidden_dim
        self.kernel_size = kernel_size
        self.padding = kernel_size[0] // 2, kernel_size[1] // 2
        self.conv = nn.Conv2d(in_channels=self.input_dim + self.hidden_dim, out_channels=4 * self.hidden_dim,
                              kernel_size=self.kernel_size, padding=self.padding, bias=bias)
    def forward(self, input_tensor, cur_state):
        h_cur, c_cur = cur_state
        combined = torch.cat([input_tensor, h_cur], dim=1)
        combined_conv = self.conv(combined)
        cc_i, cc_f, cc_o, cc_g = torch.split(combined_conv, self.hidden_dim, dim=1)
        i = torch.sigmoid(cc_i)
        f = torch.sigmoid(cc_f)
        o = torch.sigmoid(cc_o)
        g = torch.tanh(cc_g)
        c_next = f * c_cur + i * g
        h_next = o * torch.tanh(c_next)
        return h_next, c_next
    def init_hidden(self, batch_size, image_size):
        height, width = image_size
        return (torch.zeros(batch_size, self.hidden_dim, height, width, device=self.conv.weight.device),
                torch.zeros(batch_size, self.hidden_dim, height, width, device=self.conv.weight.device))
class EncoderForecaster(nn.Module):
    def __init__(self, channels=1, hidden=(8, 8), kernel_size=(3, 3)):
        super().__init__()
        self.down = nn.Conv2d(channels, 8, 3, stride=2, padding=1)
        dims = [8] + list(hidden)
        self.encoder = nn.ModuleList([ConvLSTMCell(dims[i], dims[i + 1], kernel_size) for i in range(len(hidden))])
        self.forecaster = nn.ModuleList([ConvLSTMCell(dims[i], dims[i + 1], kernel_size) for i in range(len(hidden))])
        self.up = nn.ConvTranspose2d(sum(hidden), 8, 4, stride=2, padding=1)
        self.head = nn.Conv2d(8, channels, 1)
    def step(self, cells, x, states):
        h = F.leaky_relu(self.down(x), negative_slope=0.2)
        new = []
        for cell, state in zip(cells, states):
            h, c = cell(h, state)
            new.append((h, c))
        return new
    def decode(self, states):
        hs = torch.cat([h for h, _ in states], dim=1)
        return torch.sigmoid(self.head(F.relu(self.up(hs))))
    def forward(self, frames, future, target=None, teacher=()):
        # frames: (B, T, C, H, W), batch first as the repository's ConvLSTM takes them
        b, t, _, hh, ww = frames.size()
        states = [cell.init_hidden(b, (hh // 2, ww // 2)) for cell in self.encoder]
        for k in range(t):
            states = self.step(self.encoder, frames[:, k], states)
        x = frames[:, -1]
        outputs = []
        for k in range(future):
            states = self.step(self.forecaster, x, states)
            y = self.decode(states)
            outputs.append(y)
            x = target[:, k] if target is not None and teacher[k] else y
        return torch.stack(outputs, dim=1)
def moving_squares(rng, n, t, size=16, side=4):
    seq = np.zeros((n, t, 1, size, size), np.float32)
    for i in range(n):
        x, y = rng.integers(0, size - side, 2); dx, dy = rng.choice([-1, 1], 2)
        for k in range(t):
            seq[i, k, 0, y:y + side, x:x + side] = 1.0
            if not 0 <= x + dx <= size - side: dx = -dx
            if not 0 <= y + dy <= size - side: dy = -dy
            x, y = x + dx, y + dy
    return torch.from_numpy(seq)
model = EncoderForecaster(); sync(model)
net = comp(model)
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
rng = np.random.default_rng(0)
LOSSES = []
T_IN, T_OUT = 4, 3
for step in range(5):
    seq = moving_squares(rng, 3, T_IN + T_OUT)
    past, fut = seq[:, :T_IN], seq[:, T_IN:]
    ratio = max(0.0, 1.0 - step / 4)   # scheduled sampling: teacher forcing fades out
    teacher = [bool(c) for c in rng.random(T_OUT) < ratio]
    pred = net(past, T_OUT, fut, teacher)
    loss = F.mse_loss(pred, fut)
    opt.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    opt.step()
    LOSSES += [loss.item(), norm.item()]
model.eval()
with torch.no_grad():
    seq = moving_squares(rng, 2, T_IN + 5)
    pred = net(seq[:, :T_IN], 5)
    LOSSES += [F.mse_loss(pred, seq[:, T_IN:]).item(), F.binary_cross_entropy(pred, seq[:, T_IN:]).item(),
               pred[:, -1].sum().item()]
