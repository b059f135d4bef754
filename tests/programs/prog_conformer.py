from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# A Conformer (Gulati et al. 2020) CTC recognizer as torchaudio and ESPnet write it, scaled
# down: log-mel features by torch.stft, a mel matrix (register_buffer) and log, per-utterance
# mean/variance normalization and SpecAugment's time and frequency masks by masked_fill;
# Conv2d subsampling by 4 with the output lengths computed from the input lengths; blocks
# of two half-step (macaron) feed-forwards with SiLU, multi-head self-attention (ESPnet's
# relative-position form with pos_bias_u/v and rel_shift by pad/view/slice in the first
# block, nn.MultiheadAttention with a key_padding_mask in the second), the convolution
# module (pointwise Conv1d to 2x, GLU over channels, depthwise Conv1d, BatchNorm1d, SiLU,
# pointwise), a final LayerNorm; wenet's CTC module computing the loss (CTCLoss, sum over
# padded targets / batch) inside the compiled forward, which returns a dict; Adam under a
# Noam warmup by LambdaLR (Adam's eps 1e-6, not ESPnet's 1e-9: the key and pre-BatchNorm
# biases' gradients are rounding noise, which a tiny eps makes full-size steps of either
# sign in either framework); greedy CTC decoding at the end
def mel_filterbank(n_fft, n_mels, sr):
    def hz_to_mel(f):
        return 2595.0 * np.log10(1.0 + f / 700.0)
    mels = np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    bins = np.fft.rfftfreq(n_fft, 1.0 / sr)
    fb = np.zeros((n_mels, len(bins)), dtype=np.float32)
    for m in range(1, n_mels + 1):
        left, center, right = hz[m - 1], hz[m], hz[m + 1]
        fb[m - 1] = np.maximum(0, np.minimum((bins - left) / (center - left), (right - bins) / (right - center)))
    return fb
class LogMel(nn.Module):
    def __init__(self, n_fft=128, hop=64, n_mels=20, sr=8000):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft), persistent=False)
        self.register_buffer("fb", torch.from_numpy(mel_filterbank(n_fft, n_mels, sr)), persistent=False)
    def forward(self, wav):
        spec = torch.stft(wav, self.n_fft, hop_length=self.hop, window=self.window, return_complex=True)
        power = spec.abs().pow(2)                       # (B, F, T)
        mel = torch.matmul(self.fb, power)              # (B, M, T)
        return torch.log(mel + 1e-6).transpose(1, 2)    # (B, T, M)
class Conv2dSubsampling(nn.Module):
    def __init__(self, idim, odim):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, odim, 3, 2), nn.ReLU(), nn.Conv2d(odim, odim, 3, 2), nn.ReLU())
        self.out = nn.Linear(odim * (((idim - 1) // 2 - 1) // 2), odim)
    def forward(self, x, lengths):
        x = self.conv(x.unsqueeze(1))                   # (b, c, t, f)
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))
        return x, ((lengths - 1) // 2 - 1) // 2
class RelPositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=200):
        super().__init__()
        self.d_model = d_model
        self.xscale = math.sqrt(d_model)
        pos = torch.arange(max_len - 1, -max_len, -1.0).unsqueeze(1)      # max_len-1 ... -(max_len-1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
        pe = torch.zeros(2 * max_len - 1, d_model)
        pe[:, 0::2] = torch.sin(pos * div_term)
        pe[:, 1::2] = torch.cos(pos * div_term)
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)
        self.max_len = max_len
    def forward(self, x):
        T = x.size(1)
        pos_emb = self.pe[:, self.max_len - T: self.max_len + T - 1]
        return x * self.xscale, pos_emb
class RelPositionMultiHeadedAttention(nn.Module):
    def __init__(self, n_head, n_feat):
        super().__init__()
        self.d_k, self.h = n_feat // n_head, n_head
        self.linear_q, self.linear_k = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)
        self.linear_v, self.linear_out = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)
        self.linear_pos = nn.Linear(n_feat, n_feat, bias=False)
        self.pos_bias_u = nn.Parameter(torch.empty(self.h, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.empty(self.h, self.d_k))
        torch.nn.init.xavier_uniform_(self.pos_bias_u)
        torch.nn.init.xavier_uniform_(self.pos_bias_v)
    def rel_shift(self, x):
        zero_pad = torch.zeros((*x.size()[:3], 1), device=x.device, dtype=x.dtype)
        x_padded = torch.cat([zero_pad, x], dim=-1)
        x_padded = x_padded.view(*x.size()[:2], x.size(3) + 1, x.size(2))
        x = x_padded[:, :, 1:].view_as(x)[:, :, :, : x.size(-1) // 2 + 1]
        return x
    def forward(self, query, key, value, pos_emb, mask):
        n_batch = query.size(0)
        q = self.linear_q(query).view(n_batch, -1, self.h, self.d_k)
        k = self.linear_k(key).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(value).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        p = self.linear_pos(pos_emb).view(pos_emb.size(0), -1, self.h, self.d_k).transpose(1, 2)
        q_with_bias_u = (q + self.pos_bias_u).transpose(1, 2)
        q_with_bias_v = (q + self.pos_bias_v).transpose(1, 2)
        matrix_ac = torch.matmul(q_with_bias_u, k.transpose(-2, -1))
        matrix_bd = self.rel_shift(torch.matmul(q_with_bias_v, p.transpose(-2, -1)))
        scores = (matrix_ac + matrix_bd) / math.sqrt(self.d_k)
        mask = mask.unsqueeze(1).eq(0)                       # (batch, 1, 1, time2)
        min_value = torch.finfo(scores.dtype).min
        attn = torch.softmax(scores.masked_fill(mask, min_value), dim=-1).masked_fill(mask, 0.0)
        x = torch.matmul(attn, v).transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k)
        return self.linear_out(x)
class FeedForwardModule(nn.Module):
    def __init__(self, d, hidden, dropout=0.0):
        super().__init__()
        self.sequential = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, hidden, bias=True), nn.SiLU(),
                                        nn.Dropout(dropout), nn.Linear(hidden, d, bias=True), nn.Dropout(dropout))
    def forward(self, input):
        return self.sequential(input)
class ConvolutionModule(nn.Module):
    def __init__(self, d, kernel_size=7, dropout=0.0):
        super().__init__()
        self.layer_norm = nn.LayerNorm(d)
        self.sequential = nn.Sequential(
            nn.Conv1d(d, 2 * d, 1, stride=1, padding=0), nn.GLU(dim=1),
            nn.Conv1d(d, d, kernel_size, stride=1, padding=(kernel_size - 1) // 2, groups=d),
            nn.BatchNorm1d(d), nn.SiLU(), nn.Conv1d(d, d, kernel_size=1), nn.Dropout(dropout))
    def forward(self, input):
        x = self.layer_norm(input)
        x = x.transpose(1, 2)
        x = self.sequential(x)
        return x.transpose(1, 2)
class ConformerLayer(nn.Module):
    def __init__(self, d, ffn_dim, heads, relative):
        super().__init__()
        self.ffn1, self.ffn2 = FeedForwardModule(d, ffn_dim), FeedForwardModule(d, ffn_dim)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.relative = relative
        self.self_attn = RelPositionMultiHeadedAttention(heads, d) if relative else nn.MultiheadAttention(d, heads)
        self.conv_module = ConvolutionModule(d)
        self.final_layer_norm = nn.LayerNorm(d)
    def forward(self, x, pos_emb, key_padding_mask):
        residual = x
        x = self.ffn1(x)
        x = x * 0.5 + residual
        residual = x
        x = self.self_attn_layer_norm(x)
        if self.relative:
            x = self.self_attn(x, x, x, pos_emb, (~key_padding_mask).unsqueeze(1))
        else:
            x = x.transpose(0, 1)                               # time-major, as torchaudio
            x, _ = self.self_attn(query=x, key=x, value=x, key_padding_mask=key_padding_mask, need_weights=False)
            x = x.transpose(0, 1)
        x = x + residual
        x = x + self.conv_module(x)
        residual = x
        x = self.ffn2(x)
        x = x * 0.5 + residual
        return self.final_layer_norm(x)
class ConformerCTC(nn.Module):
    def __init__(self, n_mels=20, d=32, heads=4, ffn_dim=64, num_layers=2, n_tokens=12):
        super().__init__()
        self.subsample = Conv2dSubsampling(n_mels, d)
        self.pos = RelPositionalEncoding(d)
        self.layers = nn.ModuleList([ConformerLayer(d, ffn_dim, heads, relative=(i == 0)) for i in range(num_layers)])
        self.ctc = CTC(n_tokens, d)
    def forward(self, feats, lengths, ys_pad=None, ys_lens=None):
        x, lengths = self.subsample(feats, lengths)
        x, pos_emb = self.pos(x)
        key_padding_mask = torch.arange(x.size(1), device=x.device)[None, :] >= lengths[:, None]
        for layer in self.layers:
            x = layer(x, pos_emb, key_padding_mask)
        if ys_pad is None:
            return self.ctc.log_softmax(x), lengths
        loss_ctc = self.ctc(x, lengths, ys_pad, ys_lens)
        return {"loss": loss_ctc, "loss_ctc": loss_ctc.detach(), "frames": lengths.sum()}
class CTC(nn.Module):   # wenet's: the loss inside the model's forward, padded targets
    def __init__(self, odim, encoder_output_size, dropout_rate=0.0, reduce=True):
        super().__init__()
        self.dropout_rate = dropout_rate
        self.ctc_lo = nn.Linear(encoder_output_size, odim)
        self.ctc_loss = nn.CTCLoss(reduction="sum" if reduce else "none", zero_infinity=True)
    def forward(self, hs_pad, hlens, ys_pad, ys_lens):
        ys_hat = self.ctc_lo(F.dropout(hs_pad, p=self.dropout_rate))
        ys_hat = ys_hat.transpose(0, 1).log_softmax(2)      # (L, B, D)
        loss = self.ctc_loss(ys_hat, ys_pad, hlens, ys_lens)
        return loss / ys_hat.size(1)
    def log_softmax(self, hs_pad):
        return F.log_softmax(self.ctc_lo(hs_pad), dim=2)
frontend, model = LogMel(), ConformerCTC(); sync(model)
net = comp(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-6)
d_model, warmup = 32, 4
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda s: 0.05 * d_model ** -0.5 * min((s + 1) ** -0.5, (s + 1) * warmup ** -1.5))
r = np.random.default_rng(0)
LOSSES = []
for step in range(5):
    n = r.integers(4000, 6001, 3)
    wav = np.zeros((3, 6000), np.float32)
    for i, k in enumerate(n):
        wav[i, :k] = (np.sin(np.arange(k) * r.uniform(0.05, 0.5)) + 0.3 * r.standard_normal(k)).astype(np.float32)
    feats = frontend(torch.from_numpy(wav))                       # (B, T, M)
    frames = torch.from_numpy(n // 64 + 1)
    valid = (torch.arange(feats.size(1))[None, :] < frames[:, None]).unsqueeze(-1)
    mean = (feats * valid).sum(1, keepdim=True) / frames[:, None, None]
    var = ((feats - mean) ** 2 * valid).sum(1, keepdim=True) / frames[:, None, None]
    feats = ((feats - mean) / torch.sqrt(var + 1e-5)).masked_fill(~valid, 0.0)
    t0, f0 = r.integers(0, 40), r.integers(0, 14)                 # SpecAugment: one mask each
    feats[:, t0:t0 + 8, :] = 0.0
    feats = feats.masked_fill((torch.arange(20) >= f0) & (torch.arange(20) < f0 + 4), 0.0)
    targets = torch.from_numpy(r.integers(1, 12, (3, 6)))
    target_lengths = torch.from_numpy(r.integers(3, 7, 3))
    model.train()
    out = net(feats, frames, targets, target_lengths)
    loss = out["loss"]
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    scheduler.step()
    LOSSES += [loss.item(), out["frames"].item(), scheduler.get_last_lr()[0] * 1e3]
model.eval()
with torch.no_grad():
    log_probs, out_lengths = net(feats, frames)
best = log_probs.argmax(-1)
for b in range(best.size(0)):
    seq = torch.unique_consecutive(best[b, :out_lengths[b]])
    LOSSES.append(float(seq[seq != 0].numel()))
LOSSES += log_probs.max(-1).values.mean(1).tolist()
LOSSES.append(model.layers[0].conv_module.sequential[3].running_var.mean().item())
