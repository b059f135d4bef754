from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
torch.manual_seed(0)
# FastSpeech (Ren et al.; xcmyz/FastSpeech-style) text-to-mel: phoneme embeddings with
# padding_idx=0 plus sinusoidal positions, FFT blocks (nn.MultiheadAttention with a key
# padding mask, a Conv1d feed-forward, post-norm, padded frames zeroed by masked_fill), a
# duration predictor (Conv1d, ReLU, LayerNorm on transposes) trained on log(d + 1), the
# length regulator (torch.repeat_interleave of each utterance's encodings by its integer
# durations, pad_sequence, a mel mask from the lengths), an FFT decoder and a mel Linear
# with a Conv1d postnet; masked L1 on the mel before and after the postnet plus MSE on the
# log durations, Adam with the Noam warmup as a LambdaLR; inference without targets by
# clamp(round(exp(d) - 1), min=1) durations under inference_mode
def sinusoid_table(n_position, d):
    pos = torch.arange(n_position, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(n_position, d)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)
    return table
class FFTBlock(nn.Module):
    def __init__(self, d, heads, d_inner, kernel=3):
        super().__init__()
        self.slf_attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.w_1 = nn.Conv1d(d, d_inner, kernel, padding=kernel // 2)
        self.w_2 = nn.Conv1d(d_inner, d, 1)
    def forward(self, x, pad_mask):
        a, _ = self.slf_attn(x, x, x, key_padding_mask=pad_mask, need_weights=False)
        x = self.norm1(x + a).masked_fill(pad_mask.unsqueeze(-1), 0)
        y = self.w_2(F.relu(self.w_1(x.transpose(1, 2)))).transpose(1, 2)
        return self.norm2(x + y).masked_fill(pad_mask.unsqueeze(-1), 0)
class Encoder(nn.Module):
    def __init__(self, n_vocab, d, n_layers=2, heads=2, max_len=64):
        super().__init__()
        self.src_word_emb = nn.Embedding(n_vocab, d, padding_idx=0)
        self.register_buffer("position_enc", sinusoid_table(max_len, d), persistent=False)
        self.layers = nn.ModuleList([FFTBlock(d, heads, 2 * d) for _ in range(n_layers)])
    def forward(self, src_seq):
        pad_mask = src_seq.eq(0)
        x = self.src_word_emb(src_seq) + self.position_enc[:src_seq.shape[1]].unsqueeze(0)
        for layer in self.layers:
            x = layer(x, pad_mask)
        return x, pad_mask
class DurationPredictor(nn.Module):
    def __init__(self, d, filt=24, kernel=3):
        super().__init__()
        self.conv1 = nn.Conv1d(d, filt, kernel, padding=1)
        self.ln1 = nn.LayerNorm(filt)
        self.conv2 = nn.Conv1d(filt, filt, kernel, padding=1)
        self.ln2 = nn.LayerNorm(filt)
        self.linear = nn.Linear(filt, 1)
    def forward(self, x, pad_mask):
        x = self.ln1(F.relu(self.conv1(x.transpose(1, 2))).transpose(1, 2))
        x = self.ln2(F.relu(self.conv2(x.transpose(1, 2))).transpose(1, 2))
        return self.linear(x).squeeze(-1).masked_fill(pad_mask, 0.0)
class Decoder(nn.Module):
    def __init__(self, d, n_mels, n_layers=2, heads=2, max_len=160):
        super().__init__()
        self.register_buffer("position_enc", sinusoid_table(max_len, d), persistent=False)
        self.layers = nn.ModuleList([FFTBlock(d, heads, 2 * d) for _ in range(n_layers)])
        self.mel_linear = nn.Linear(d, n_mels)
        self.postnet = nn.Sequential(nn.Conv1d(n_mels, 32, 5, padding=2), nn.Tanh(), nn.Conv1d(32, n_mels, 5, padding=2))
    def forward(self, x, mel_mask):
        x = x + self.position_enc[:x.shape[1]].unsqueeze(0)
        for layer in self.layers:
            x = layer(x, mel_mask)
        mel = self.mel_linear(x)
        post = mel + self.postnet(mel.transpose(1, 2)).transpose(1, 2)
        return mel, post
def length_regulate(x, durations):
    expanded = [torch.repeat_interleave(xi, di, dim=0) for xi, di in zip(x, durations)]
    mel_len = torch.tensor([len(e) for e in expanded])
    out = pad_sequence(expanded, batch_first=True)
    mel_mask = torch.arange(out.shape[1])[None, :] >= mel_len[:, None]
    return out, mel_mask, mel_len
class FastSpeech(nn.Module):
    def __init__(self, n_vocab, d=32, n_mels=12):
        super().__init__()
        self.encoder = Encoder(n_vocab, d)
        self.duration_predictor = DurationPredictor(d)
        self.decoder = Decoder(d, n_mels)
    def forward(self, src_seq, durations=None):
        enc, pad_mask = encoder(src_seq)
        log_d = duration_predictor(enc, pad_mask)
        if durations is None:
            durations = torch.clamp(torch.round(torch.exp(log_d) - 1), min=1).long().masked_fill(pad_mask, 0)
        x, mel_mask, mel_len = length_regulate(enc, durations)
        mel, post = decoder(x, mel_mask)
        return mel, post, log_d, mel_mask, mel_len
rng = np.random.default_rng(0)
VOCAB, N_MELS = 20, 12
def utterance():
    n = int(rng.integers(5, 11))
    ph = rng.integers(1, VOCAB, n)
    dur = 1 + (ph % 4) + rng.integers(0, 2, n)
    frames = np.repeat(np.sin(ph[:, None] * np.arange(1, N_MELS + 1)[None] / 5.0), dur, 0)
    return ph, dur, (frames + 0.05 * rng.standard_normal(frames.shape)).astype(np.float32)
data = [utterance() for _ in range(24)]
model = FastSpeech(VOCAB, n_mels=N_MELS); sync(model)
encoder, duration_predictor = comp(model.encoder), comp(model.duration_predictor)
decoder = comp(model.decoder, dynamic=True)
opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
d_model, warmup = 32, 20
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: d_model ** -0.5 * min((s + 1) ** -0.5, (s + 1) * warmup ** -1.5))
LOSSES = []
for epoch in range(2):
    model.train()
    for b in range(0, len(data), 8):
        batch = data[b:b + 8]
        src = pad_sequence([torch.from_numpy(p) for p, _, _ in batch], batch_first=True)
        dur = pad_sequence([torch.from_numpy(d) for _, d, _ in batch], batch_first=True)
        mel_t = pad_sequence([torch.from_numpy(m) for _, _, m in batch], batch_first=True)
        mel, post, log_d, mel_mask, _ = model(src, dur)
        keep = (~mel_mask).unsqueeze(-1).float()
        n = keep.sum() * N_MELS
        mel_loss = ((mel - mel_t).abs() * keep).sum() / n + ((post - mel_t).abs() * keep).sum() / n
        d_loss = F.mse_loss(log_d[src != 0], torch.log(dur[src != 0].float() + 1))
        loss = mel_loss + d_loss
        opt.zero_grad(); loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(); sched.step()
        LOSSES.append(loss.item())
model.eval()
with torch.inference_mode():
    src = pad_sequence([torch.from_numpy(p) for p, _, _ in data[:4]], batch_first=True)
    mel, post, log_d, mel_mask, mel_len = model(src)
    LOSSES += mel_len.float().tolist() + [post.masked_fill(mel_mask.unsqueeze(-1), 0).abs().sum().item()]
