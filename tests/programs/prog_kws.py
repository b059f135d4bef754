from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
class LogSpectrogram(nn.Module):
    """Log-magnitude STFT features, the window kept as a buffer (moves with .to())."""
    def __init__(self, n_fft=32, hop_length=8):
        super().__init__()
        self.n_fft, self.hop_length = n_fft, hop_length
        self.register_buffer("window", torch.hann_window(n_fft))
    def forward(self, wav):                       # (batch, samples)
        spec = torch.stft(wav, self.n_fft, hop_length=self.hop_length, window=self.window,
                          center=True, return_complex=True)
        return torch.log(spec.abs().pow(2) + 1e-6)  # (batch, n_fft // 2 + 1, frames)
class M5(nn.Module):
    """The M5 keyword net of the torchaudio tutorial, over raw audio and STFT features."""
    def __init__(self, n_input=1, n_output=10, stride=4, n_channel=8, n_freq=17):
        super().__init__()
        self.conv1 = nn.Conv1d(n_input, n_channel, kernel_size=20, stride=stride)
        self.bn1 = nn.BatchNorm1d(n_channel)
        self.pool1 = nn.MaxPool1d(4)
        self.conv2 = nn.Conv1d(n_channel, n_channel, kernel_size=3)
        self.bn2 = nn.BatchNorm1d(n_channel)
        self.pool2 = nn.MaxPool1d(4)
        self.spec_conv = nn.Conv1d(n_freq, n_channel, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(2 * n_channel, n_output)
    def forward(self, x, spec):                    # (batch, 1, samples), (batch, freq, frames)
        s = F.relu(self.spec_conv(spec))
        x = self.pool1(F.relu(self.bn1(self.conv1(x))))
        x = self.pool2(F.relu(self.bn2(self.conv2(x))))
        x = F.avg_pool1d(x, x.shape[-1])
        x = torch.cat([x.squeeze(-1), s.mean(-1)], dim=1)
        return F.log_softmax(self.fc1(x), dim=1)
def fft_energy(wav, bands=4):
    """Band energies of the real FFT, as quick feature scripts compute them."""
    mag = torch.fft.rfft(wav, dim=-1).abs()
    return torch.stack([c.mean(-1) for c in mag.chunk(bands, dim=-1)], -1)
model = M5(); sync(model)
transform = LogSpectrogram()   # as the tutorial: features outside the (compiled) model
optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.0001)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.1)
fwd = comp(model)
r = np.random.default_rng(0)
t = np.arange(400) / 400.0
LOSSES = []
for epoch in range(2):
    model.train()
    for batch_idx in range(2):
        freqs = r.integers(1, 10, 6)
        wav = np.sin(2 * math.pi * freqs[:, None] * 8 * t) + 0.1 * r.standard_normal((6, 400))
        data = torch.from_numpy(wav.astype(np.float32)).unsqueeze(1)
        target = torch.from_numpy(freqs - 1)
        output = fwd(data, transform(data.squeeze(1)))
        loss = F.nll_loss(output.squeeze(), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        LOSSES.append(loss.item())
    scheduler.step()
    model.eval()
    with torch.no_grad():
        pred = fwd(data, transform(data.squeeze(1))).argmax(dim=-1)
        LOSSES.append(pred.eq(target).sum().item())
LOSSES += fft_energy(data.squeeze(1)).flatten().tolist()
spec = torch.stft(data[:2, 0], 16, hop_length=4, window=torch.hann_window(16), return_complex=True)
LOSSES += torch.istft(spec, 16, hop_length=4, window=torch.hann_window(16), length=400)[:, :8].flatten().tolist()
