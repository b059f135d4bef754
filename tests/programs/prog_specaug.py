from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, random, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset
torch.manual_seed(0)
random.seed(0)
# An audio classifier with a SpecAugment front end: log-mel features as torchaudio
# computes them (a centred reflect-padded stft, HTK mel filters built by broadcasting
# triangle slopes, AmplitudeToDB with top_db), SpecAugment in the Dataset as speech
# recipes write it (frequency and time masks of Python-random widths written in place
# into slices with the utterance mean), a collate_fn padding by pad_sequence; a CNN of
# Conv2d/BatchNorm2d/ReLU/MaxPool2d over (freq, time), masked mean pooling over the valid
# frames; the model compiled with dynamic=True over the padded length, SGD with
# nesterov momentum under CosineAnnealingWarmRestarts, label smoothing
SR, N_FFT, HOP, N_MELS, N_CLASSES = 4000, 128, 64, 16, 4
def melscale_fbanks(n_freqs, f_min, f_max, n_mels, sample_rate):
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs)
    m_min, m_max = 2595.0 * math.log10(1.0 + f_min / 700.0), 2595.0 * math.log10(1.0 + f_max / 700.0)
    m_pts = torch.linspace(m_min, m_max, n_mels + 2)
    f_pts = 700.0 * (10 ** (m_pts / 2595.0) - 1.0)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)
    down_slopes = (-1.0 * slopes[:, :-2]) / f_diff[:-1]
    up_slopes = slopes[:, 2:] / f_diff[1:]
    return torch.max(torch.zeros(1), torch.min(down_slopes, up_slopes))
class LogMel(nn.Module):
    def __init__(self, top_db=80.0):
        super().__init__()
        self.register_buffer("window", torch.hann_window(N_FFT))
        self.register_buffer("fb", melscale_fbanks(N_FFT // 2 + 1, 0.0, SR / 2, N_MELS, SR))
        self.top_db = top_db
    def forward(self, wav):
        spec = torch.stft(wav, N_FFT, HOP, window=self.window, center=True, pad_mode="reflect",
                          return_complex=True).abs().pow(2.0)
        mel = torch.matmul(spec.transpose(-1, -2), self.fb).transpose(-1, -2)
        x_db = 10.0 * torch.log10(torch.clamp(mel, min=1e-10))
        return torch.max(x_db, (x_db.amax(dim=(-2, -1)) - self.top_db)[..., None, None])
class SpecAugment:
    def __init__(self, freq_mask=4, time_mask=3, n_freq_masks=2, n_time_masks=2):
        self.F, self.T, self.nF, self.nT = freq_mask, time_mask, n_freq_masks, n_time_masks
    def __call__(self, spec):                       # (mels, frames), in place
        n_mels, n_frames = spec.shape
        mean = spec.mean()
        for _ in range(self.nF):
            f = random.randint(0, self.F)
            f0 = random.randint(0, n_mels - f)
            spec[f0:f0 + f, :] = mean
        for _ in range(self.nT):
            t = random.randint(0, min(self.T, n_frames // 4))
            t0 = random.randint(0, n_frames - t)
            spec[:, t0:t0 + t] = mean
        return spec
class Tones(Dataset):
    """Each class a chord of its own two pitches, of varying length, in noise."""
    def __init__(self, n, seed, augment=None):
        r = np.random.default_rng(seed)
        self.items = []
        self.logmel, self.augment = LogMel(), augment
        for i in range(n):
            c = int(r.integers(0, N_CLASSES))
            length = int(r.integers(6, 12)) * HOP
            t = np.arange(length) / SR
            wav = (np.sin(2 * np.pi * (300 + 250 * c) * t) + 0.5 * np.sin(2 * np.pi * (900 + 200 * c) * t)
                   + 0.3 * r.standard_normal(length)).astype(np.float32)
            self.items.append((torch.from_numpy(wav), c))
    def __len__(self):
        return len(self.items)
    def __getitem__(self, i):
        wav, c = self.items[i]
        feats = self.logmel(wav)
        if self.augment is not None:
            feats = self.augment(feats.clone())
        return feats, c
def collate(batch):
    feats = [f.t() for f, _ in batch]                  # (frames, mels) to pad along time
    lengths = torch.tensor([f.shape[0] for f in feats])
    x = pad_sequence(feats, batch_first=True).transpose(1, 2).unsqueeze(1)   # (B, 1, mels, T)
    return x, lengths, torch.tensor([c for _, c in batch])
class AudioCNN(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.input_norm = nn.BatchNorm2d(1)
        self.convs = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.MaxPool2d((2, 1)),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(inplace=True),
            nn.MaxPool2d((2, 1)))
        self.fc = nn.Linear(2 * width * (N_MELS // 4), N_CLASSES)
    def forward(self, x, lengths):
        h = self.convs(self.input_norm(x))                 # (B, C, mels / 4, T)
        h = h.flatten(1, 2)                                # (B, C * mels / 4, T)
        mask = (torch.arange(h.shape[-1], device=h.device)[None, :] < lengths[:, None]).to(h.dtype)
        pooled = (h * mask[:, None, :]).sum(-1) / lengths[:, None].to(h.dtype)
        return self.fc(pooled)
model = AudioCNN()
sync(model)
net = comp(model, dynamic=True)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=2, T_mult=2)
train = DataLoader(Tones(12, 0, SpecAugment()), batch_size=4, collate_fn=collate)
test = DataLoader(Tones(6, 1), batch_size=3, collate_fn=collate)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
LOSSES = []
for epoch in range(1):
    for i, (x, lengths, y) in enumerate(train):
        loss = criterion(net(x, lengths), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step(epoch + i / len(train))
        LOSSES += [loss.item(), scheduler.get_last_lr()[0]]
model.eval()
with torch.inference_mode():
    correct = 0
    for x, lengths, y in test:
        logits = net(x, lengths)
        correct += (logits.argmax(-1) == y).sum().item()
        LOSSES += logits.flatten().tolist()
    LOSSES.append(correct)
