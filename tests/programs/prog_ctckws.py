from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# A keyword-sequence recognizer under CTC: MFCC-like features (a DCT-II matrix applied to
# log filterbank energies of torch.stft frames), per-utterance CMVN under the frame mask,
# a depthwise-separable Conv1d stack with SiLU and a BiGRU, compiled with
# dynamic=True over batches of different lengths; F.ctc_loss on log_softmax over
# (T, B, C) with per-utterance input and target lengths (zero_infinity), AdamW with
# clip_grad_norm_ and a CosineAnnealingLR; greedy decoding by argmax,
# torch.unique_consecutive per utterance and the blank removed, scored by edit distance
BLANK, N_WORDS, N_FFT, HOP, N_BANDS, N_CEPS = 0, 6, 64, 32, 16, 10
def dct_matrix(n_out, n_in):
    k = torch.arange(n_out, dtype=torch.float32)[:, None]
    n = torch.arange(n_in, dtype=torch.float32)[None]
    m = torch.cos(torch.pi / n_in * (n + 0.5) * k) * (2.0 / n_in) ** 0.5
    m[0] /= 2 ** 0.5
    return m
class Features(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(N_FFT))
        bands = torch.linspace(0, N_FFT // 2 + 1, N_BANDS + 1).long()
        fb = torch.zeros(N_BANDS, N_FFT // 2 + 1)
        for b in range(N_BANDS):
            fb[b, bands[b]:max(bands[b + 1], bands[b] + 1)] = 1.0
        self.register_buffer("fbank", fb)
        self.register_buffer("dct", dct_matrix(N_CEPS, N_BANDS))
    def forward(self, wav, lengths):
        spec = torch.stft(wav, N_FFT, HOP, window=self.window, return_complex=True).abs().pow(2)
        mfcc = self.dct @ torch.log(self.fbank @ spec + 1e-6)          # (B, ceps, frames)
        frames = lengths // HOP + 1
        mask = (torch.arange(mfcc.shape[-1])[None] < frames[:, None]).float()[:, None]
        mean = (mfcc * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True)
        var = ((mfcc - mean) ** 2 * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True)
        return (mfcc - mean) / torch.sqrt(var + 1e-5) * mask, frames
class SeparableConv(nn.Module):
    def __init__(self, c_in, c_out, k, stride=1):
        super().__init__()
        self.depthwise = nn.Conv1d(c_in, c_in, k, stride=stride, padding=k // 2, groups=c_in, bias=False)
        self.pointwise = nn.Conv1d(c_in, c_out, 1, bias=False)   # (a BatchNorm follows)
        self.norm = nn.BatchNorm1d(c_out)
    def forward(self, x):
        return F.silu(self.norm(self.pointwise(self.depthwise(x))))
class CTCModel(nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.convs = nn.Sequential(SeparableConv(N_CEPS, hidden, 5, stride=2), SeparableConv(hidden, hidden, 3))
        self.gru = nn.GRU(hidden, hidden, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, N_WORDS + 1)
    def forward(self, feats):                        # (B, ceps, T) -> (T', B, classes)
        x = self.convs(feats).transpose(1, 2)
        x, _ = self.gru(x)
        return F.log_softmax(self.fc(x), dim=-1).transpose(0, 1)
def synth(r, n, max_words=3):
    """Each word a 96-sample tone of its own pitch, separated by silence."""
    counts = r.integers(1, max_words + 1, n)
    words = [r.integers(1, N_WORDS + 1, c) for c in counts]
    lengths = np.array([128 * c + 32 for c in counts])
    wav = 0.01 * r.standard_normal((n, lengths.max())).astype(np.float32)
    t = np.arange(96) / 1000.0
    for i, ws in enumerate(words):
        for j, w in enumerate(ws):
            wav[i, 32 + 128 * j: 128 + 128 * j] += np.sin(2 * np.pi * 40 * w * t).astype(np.float32)
    targets = torch.from_numpy(np.concatenate(words))
    return torch.from_numpy(wav), torch.from_numpy(lengths), targets, torch.from_numpy(counts), words
def edit_distance(a, b):
    d = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(b) + 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (a[i - 1] != b[j - 1]))
    return d[len(b)]
features, model = Features(), CTCModel()
sync(model)
fwd = comp(model, dynamic=True)   # (not fullgraph: torch.compile breaks at the GRU)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=6)
r = np.random.default_rng(0)
LOSSES = []
for step in range(6):
    wav, lengths, targets, target_lengths, _ = synth(r, 4)
    feats, frames = features(wav, lengths)
    log_probs = fwd(feats)
    out_lengths = (frames - 1) // 2 + 1                 # the stride-2 conv
    loss = F.ctc_loss(log_probs, targets, out_lengths, target_lengths, blank=BLANK, zero_infinity=True)
    optimizer.zero_grad()
    loss.backward()
    LOSSES.append(nn.utils.clip_grad_norm_(model.parameters(), 5.0).item())
    optimizer.step()
    scheduler.step()
    LOSSES.append(loss.item())
model.eval()
with torch.no_grad():
    wav, lengths, targets, target_lengths, words = synth(r, 3)
    feats, frames = features(wav, lengths)
    log_probs = fwd(feats)
    out_lengths = (frames - 1) // 2 + 1
    best = log_probs.argmax(-1).t()                  # (B, T')
    errors = 0
    for i in range(best.shape[0]):
        collapsed = torch.unique_consecutive(best[i, :out_lengths[i]])
        hyp = collapsed[collapsed != BLANK].tolist()
        errors += edit_distance(hyp, words[i].tolist())
        LOSSES += [len(hyp)]
    LOSSES += [errors] + log_probs[:, 0].flatten()[:20].tolist()
