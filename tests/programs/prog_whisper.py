from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from typing import Optional
torch.manual_seed(0)
# A Whisper-style speech recognizer written as openai-whisper's model.py: log-mel features
# (torch.stft with a Hann window, the last frame dropped, a mel filterbank matmul, log10
# clamped to 8 below the maximum), a conv stem and sinusoidal positions in the encoder,
# attention with q and k each scaled by d ** -0.25 and a float softmax, a decoder with
# learned positions read from the cache's length, a -inf triu mask and logits against the
# tied embedding; trained teacher-forced with ignore_index padding, then decoded greedily
# under torch.inference_mode with the key/value cache kept by forward hooks on the key and
# value projections (self-attention's grown by torch.cat, cross-attention's computed once),
# suppressed tokens set to -inf, and the hooks removed at the end
SR, N_FFT, HOP, N_MELS = 1600, 64, 16, 16
SOT, EOT, BLANK, VOCAB = 10, 11, 12, 13
def mel_filters(n_mels=N_MELS, n_fft=N_FFT, sr=SR):
    hz_to_mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)
    mel_to_hz = lambda m: 700.0 * (10 ** (m / 2595.0) - 1.0)
    pts = mel_to_hz(np.linspace(hz_to_mel(0), hz_to_mel(sr / 2), n_mels + 2))
    freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    lower = (freqs[None] - pts[:-2, None]) / (pts[1:-1, None] - pts[:-2, None])
    upper = (pts[2:, None] - freqs[None]) / (pts[2:, None] - pts[1:-1, None])
    return torch.from_numpy(np.maximum(0, np.minimum(lower, upper)).astype(np.float32))
FILTERS = mel_filters()
def log_mel_spectrogram(audio):
    window = torch.hann_window(N_FFT)
    stft = torch.stft(audio, N_FFT, HOP, window=window, return_complex=True)
    magnitudes = stft[..., :-1].abs() ** 2
    mel_spec = FILTERS @ magnitudes
    log_spec = torch.clamp(mel_spec, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0
def sinusoids(length, channels, max_timescale=10000):
    inc = np.log(max_timescale) / (channels // 2 - 1)
    inv = torch.exp(-inc * torch.arange(channels // 2))
    t = torch.arange(length)[:, np.newaxis] * inv[np.newaxis, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1)
class MultiHeadAttention(nn.Module):
    def __init__(self, n_state, n_head):
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)
    def forward(self, x, xa: Optional[torch.Tensor] = None, mask=None, kv_cache: Optional[dict] = None):
        q = self.query(x)
        if kv_cache is None or xa is None or self.key not in kv_cache:
            k = self.key(x if xa is None else xa)
            v = self.value(x if xa is None else xa)
        else:
            k, v = kv_cache[self.key], kv_cache[self.value]
        n_batch, n_ctx, n_state = q.shape
        scale = (n_state // self.n_head) ** -0.25
        q = q.view(*q.shape[:2], self.n_head, -1).permute(0, 2, 1, 3) * scale
        k = k.view(*k.shape[:2], self.n_head, -1).permute(0, 2, 3, 1) * scale
        v = v.view(*v.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
        qk = q @ k
        if mask is not None:
            qk = qk + mask[:n_ctx, :n_ctx]
        w = F.softmax(qk.float(), dim=-1).to(q.dtype)
        return self.out((w @ v).permute(0, 2, 1, 3).flatten(start_dim=2))
class ResidualAttentionBlock(nn.Module):
    def __init__(self, n_state, n_head, cross_attention=False):
        super().__init__()
        self.attn, self.attn_ln = MultiHeadAttention(n_state, n_head), nn.LayerNorm(n_state)
        self.cross_attn = MultiHeadAttention(n_state, n_head) if cross_attention else None
        self.cross_attn_ln = nn.LayerNorm(n_state) if cross_attention else None
        self.mlp = nn.Sequential(nn.Linear(n_state, 4 * n_state), nn.GELU(), nn.Linear(4 * n_state, n_state))
        self.mlp_ln = nn.LayerNorm(n_state)
    def forward(self, x, xa=None, mask=None, kv_cache=None):
        x = x + self.attn(self.attn_ln(x), mask=mask, kv_cache=kv_cache)
        if self.cross_attn:
            x = x + self.cross_attn(self.cross_attn_ln(x), xa, kv_cache=kv_cache)
        return x + self.mlp(self.mlp_ln(x))
class AudioEncoder(nn.Module):
    def __init__(self, n_mels, n_ctx, n_state, n_head, n_layer):
        super().__init__()
        self.conv1 = nn.Conv1d(n_mels, n_state, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(n_state, n_state, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", sinusoids(n_ctx, n_state))
        self.blocks = nn.ModuleList([ResidualAttentionBlock(n_state, n_head) for _ in range(n_layer)])
        self.ln_post = nn.LayerNorm(n_state)
    def forward(self, x):
        x = F.gelu(self.conv1(x))
        x = F.gelu(self.conv2(x)).permute(0, 2, 1)
        x = (x + self.positional_embedding[: x.shape[1]]).to(x.dtype)
        for block in self.blocks:
            x = block(x)
        return self.ln_post(x)
class TextDecoder(nn.Module):
    def __init__(self, n_vocab, n_ctx, n_state, n_head, n_layer):
        super().__init__()
        self.token_embedding = nn.Embedding(n_vocab, n_state)
        self.positional_embedding = nn.Parameter(torch.empty(n_ctx, n_state).normal_(0, 0.02))
        self.blocks = nn.ModuleList([ResidualAttentionBlock(n_state, n_head, cross_attention=True) for _ in range(n_layer)])
        self.ln = nn.LayerNorm(n_state)
        self.register_buffer("mask", torch.empty(n_ctx, n_ctx).fill_(-np.inf).triu_(1), persistent=False)
    def forward(self, x, xa, kv_cache: Optional[dict] = None):
        offset = next(iter(kv_cache.values())).shape[1] if kv_cache else 0
        x = self.token_embedding(x) + self.positional_embedding[offset: offset + x.shape[-1]]
        x = x.to(xa.dtype)
        for block in self.blocks:
            x = block(x, xa, mask=self.mask, kv_cache=kv_cache)
        x = self.ln(x)
        return (x @ torch.transpose(self.token_embedding.weight.to(x.dtype), 0, 1)).float()
class Whisper(nn.Module):
    def __init__(self, n_state=16, n_head=2, n_layer=2, n_audio_ctx=32, n_text_ctx=12):
        super().__init__()
        self.n_text_ctx = n_text_ctx
        self.encoder = AudioEncoder(N_MELS, n_audio_ctx, n_state, n_head, n_layer)
        self.decoder = TextDecoder(VOCAB, n_text_ctx, n_state, n_head, n_layer)
    def install_kv_cache_hooks(self, cache=None):
        cache = {**cache} if cache is not None else {}
        hooks = []
        def save_to_cache(module, _, output):
            if module not in cache or output.shape[1] > self.n_text_ctx:
                cache[module] = output   # the first token, or cross attention's keys and values
            else:
                cache[module] = torch.cat([cache[module], output], dim=1).detach()
            return cache[module]
        def install_hooks(layer):
            if isinstance(layer, MultiHeadAttention):
                hooks.append(layer.key.register_forward_hook(save_to_cache))
                hooks.append(layer.value.register_forward_hook(save_to_cache))
        self.decoder.apply(install_hooks)
        return cache, hooks
def synth(r, n, max_len=5):
    """Each digit token a 40 ms tone of its own pitch; lengths vary, the rest silence."""
    lens = r.integers(2, max_len + 1, n)
    digits = r.integers(0, 10, (n, max_len))
    t = np.arange(64) / SR
    audio = np.zeros((n, 64 * max_len * 2), np.float32)
    for i in range(n):
        for j in range(lens[i]):
            audio[i, 64 * j: 64 * (j + 1)] = np.sin(2 * np.pi * (100 + 60 * digits[i, j]) * t)
    audio += 0.01 * r.standard_normal(audio.shape).astype(np.float32)
    tokens = np.full((n, max_len + 2), -100)
    tokens[:, 0] = SOT
    for i in range(n):
        tokens[i, 1:lens[i] + 1] = digits[i, :lens[i]]
        tokens[i, lens[i] + 1] = EOT
    return torch.from_numpy(audio), torch.from_numpy(tokens), lens
model = Whisper(); sync(model)
encoder, decoder = comp(model.encoder), comp(model.decoder)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
r = np.random.default_rng(0)
LOSSES = []
for step in range(4):
    audio, tokens, _ = synth(r, 4)
    mel = log_mel_spectrogram(audio)
    inp = tokens[:, :-1].clamp(min=0)
    logits = decoder(inp, encoder(mel))
    loss = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], ignore_index=-100)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    LOSSES.append(loss.item())
model.eval()
audio, tokens, lens = synth(r, 3)
LOSSES += log_mel_spectrogram(audio)[0, :, :4].flatten().tolist()
with torch.inference_mode():
    mel = log_mel_spectrogram(audio)
    audio_features = encoder(mel)
    cache, hooks = model.install_kv_cache_hooks()
    seq = torch.full((3, 1), SOT, dtype=torch.long)
    done = torch.zeros(3, dtype=torch.bool)
    for i in range(7):
        logits = decoder(seq if i == 0 else seq[:, -1:], audio_features, kv_cache=cache)[:, -1]
        logits[:, BLANK] = -np.inf                  # SuppressTokens
        if i == 0:
            logits[:, EOT] = -np.inf                # SuppressBlank at the first step
        LOSSES += logits.log_softmax(-1).max(-1).values.tolist()
        nxt = torch.where(done, torch.full_like(done, EOT, dtype=torch.long), logits.argmax(-1))
        seq = torch.cat([seq, nxt[:, None]], dim=-1)
        done |= nxt == EOT
        if done.all():
            break
    for h in hooks:
        h.remove()
LOSSES += seq.flatten().tolist() + [len(cache)]
