from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# Demucs (v2) music source separation as facebookresearch/demucs writes it: a waveform U-Net
# of strided Conv1d + ReLU + 1x1 Conv1d + GLU encoders, a bidirectional LSTM (time-major by
# permute) in the bottleneck, decoders of a context Conv1d + GLU + ConvTranspose1d whose
# skips are center-trimmed to the shorter decoder output, inputs normalized by the mono
# mix's std, weights rescaled at init (.data /= scale), the augmentations FlipSign,
# FlipChannels (gather of a channel index) and Remix (argsort of noise within groups),
# an L1 loss on the center-trimmed sources under Adam, and apply_model's random shifts in eval
def center_trim(tensor, reference):
    if hasattr(reference, "size"):
        reference = reference.size(-1)
    delta = tensor.size(-1) - reference
    if delta < 0:
        raise ValueError("tensor must be larger than reference. " f"Delta is {delta}.")
    if delta:
        tensor = tensor[..., delta // 2:-(delta - delta // 2)]
    return tensor
class BLSTM(nn.Module):
    def __init__(self, dim, layers=1):
        super().__init__()
        self.lstm = nn.LSTM(bidirectional=True, num_layers=layers, hidden_size=dim, input_size=dim)
        self.linear = nn.Linear(2 * dim, dim)
    def forward(self, x):
        x = x.permute(2, 0, 1)
        x = self.lstm(x)[0]
        x = self.linear(x)
        x = x.permute(1, 2, 0)
        return x
def rescale_conv(conv, reference):
    std = conv.weight.std().detach()
    scale = (std / reference)**0.5
    conv.weight.data /= scale
    if conv.bias is not None:
        conv.bias.data /= scale
def rescale_module(module, reference):
    for sub in module.modules():
        if isinstance(sub, (nn.Conv1d, nn.ConvTranspose1d)):
            rescale_conv(sub, reference)
class Demucs(nn.Module):
    def __init__(self, sources=2, audio_channels=2, channels=4, depth=3, rewrite=True, glu=True,
                 context=3, kernel_size=8, stride=4, growth=2., lstm_layers=1, rescale=0.1):
        super().__init__()
        self.audio_channels, self.sources = audio_channels, sources
        self.kernel_size, self.context, self.stride, self.depth = kernel_size, context, stride, depth
        self.encoder = nn.ModuleList()
        self.decoder = nn.ModuleList()
        if glu:
            activation = nn.GLU(dim=1)
            ch_scale = 2
        else:
            activation = nn.ReLU()
            ch_scale = 1
        in_channels = audio_channels
        for index in range(depth):
            encode = []
            encode += [nn.Conv1d(in_channels, channels, kernel_size, stride), nn.ReLU()]
            if rewrite:
                encode += [nn.Conv1d(channels, ch_scale * channels, 1), activation]
            self.encoder.append(nn.Sequential(*encode))
            decode = []
            if index > 0:
                out_channels = in_channels
            else:
                out_channels = sources * audio_channels
            if rewrite:
                decode += [nn.Conv1d(channels, ch_scale * channels, context), activation]
            decode += [nn.ConvTranspose1d(channels, out_channels, kernel_size, stride)]
            if index > 0:
                decode.append(nn.ReLU())
            self.decoder.insert(0, nn.Sequential(*decode))
            in_channels = channels
            channels = int(growth * channels)
        channels = in_channels
        self.lstm = BLSTM(channels, lstm_layers) if lstm_layers else None
        if rescale:
            rescale_module(self, reference=rescale)
    def valid_length(self, length):
        for _ in range(self.depth):
            length = math.ceil((length - self.kernel_size) / self.stride) + 1
            length = max(1, length)
            length += self.context - 1
        for _ in range(self.depth):
            length = (length - 1) * self.stride + self.kernel_size
        return int(length)
    def forward(self, mix):
        x = mix
        mono = mix.mean(dim=1, keepdim=True)
        mean = mono.mean(dim=-1, keepdim=True)
        std = mono.std(dim=-1, keepdim=True)
        x = (x - mean) / (1e-5 + std)
        saved = []
        for encode in self.encoder:
            x = encode(x)
            saved.append(x)
        if self.lstm:
            x = self.lstm(x)
        for decode in self.decoder:
            skip = center_trim(saved.pop(-1), x)
            x = x + skip
            x = decode(x)
        x = x * std + mean
        x = x.view(x.size(0), self.sources, self.audio_channels, x.size(-1))
        return x
class FlipSign(nn.Module):
    def forward(self, wav, signs):
        return wav * (2 * signs - 1)
class FlipChannels(nn.Module):
    def forward(self, wav, left):
        batch, sources, channels, time = wav.size()
        if self.training and wav.size(2) == 2:
            left = left.expand(-1, -1, -1, time)
            right = 1 - left
            wav = torch.cat([wav.gather(2, left), wav.gather(2, right)], dim=2)
        return wav
class Remix(nn.Module):
    def __init__(self, group_size=2):
        super().__init__()
        self.group_size = group_size
    def forward(self, wav, noise):
        batch, streams, channels, time = wav.size()
        if self.training:
            group_size = self.group_size or batch
            groups = batch // group_size
            wav = wav.view(groups, group_size, streams, channels, time)
            permutations = torch.argsort(noise.view(groups, group_size, streams, 1, 1), dim=1)
            wav = wav.gather(1, permutations.expand(-1, -1, -1, channels, time))
            wav = wav.view(batch, streams, channels, time)
        return wav
def apply_model(model, mix, shifts, r, max_shift=32):
    """apply_model's shift trick: the mix padded and cut at random offsets, the outputs averaged."""
    channels, length = mix.size()
    valid_length = model.valid_length(length)
    delta = valid_length - length
    padded = F.pad(mix, (delta // 2, delta - delta // 2 + max_shift))
    out = 0
    for _ in range(shifts):
        offset = int(r.integers(0, max_shift))
        shifted = padded[..., offset:offset + valid_length]
        out += center_trim(fwd(shifted[None])[0], length)
    return out / shifts
def make_sources(r, batch, sources, length):
    t = np.arange(length) / 800.0
    f = r.uniform(20, 120, (batch, sources, 1, 1))
    wav = np.sin(2 * np.pi * f * t) * r.uniform(0.3, 1.0, (batch, sources, 2, 1))
    return torch.from_numpy((wav + 0.05 * r.standard_normal(wav.shape)).astype(np.float32))
model = Demucs()
sync(model)
fwd = comp(model)
flip_sign, flip_channels, remix = FlipSign(), FlipChannels(), Remix()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
r = np.random.default_rng(0)
LENGTH = model.valid_length(200)
LOSSES = [LENGTH]
for step in range(2):
    sources = make_sources(r, 4, 2, LENGTH)
    sources = flip_sign(sources, torch.from_numpy(r.integers(0, 2, (4, 2, 1, 1)).astype(np.float32)))
    sources = flip_channels(sources, torch.from_numpy(r.integers(0, 2, (4, 2, 1, 1))))
    sources = remix(sources, torch.from_numpy(r.random((4, 2)).astype(np.float32)))
    mix = sources.sum(dim=1)
    estimates = fwd(mix)
    sources = center_trim(sources, estimates)
    loss = F.l1_loss(estimates, sources)
    optimizer.zero_grad()
    loss.backward()
    grad_norm = 0
    for p in model.parameters():
        if p.grad is not None:
            grad_norm += p.grad.data.norm()**2
    LOSSES += [loss.item(), grad_norm.sqrt().item()]
    optimizer.step()
model.eval()
with torch.no_grad():
    track = make_sources(r, 1, 2, 160)[0]
    estimates = apply_model(model, track.sum(0), shifts=2, r=r)
    LOSSES += [F.l1_loss(estimates, track).item()] + estimates[:, :, ::17].flatten()[:16].tolist()
