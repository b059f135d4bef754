from _harness import sync, comp  # the runner: weights shared with the PyTorch run; torch.compile
import math
import numpy as np, torch, torch.nn as nn, torch.fft as fft
# DDSP (Engel et al.; acids-ircam/ddsp_pytorch style): an MLP + GRU decoder from pitch and
# loudness to harmonic amplitudes and noise bands; a harmonic synthesizer (phase by cumsum of
# the instantaneous frequency, sin of the harmonics times their amplitudes, harmonics above
# Nyquist masked), filtered noise (irfft of the bands into a windowed impulse response, FFT
# convolution), a reverb tail, and a multi-scale spectral loss by torch.stft(return_complex=True)
# over several FFT sizes (hann_window, .abs(), log magnitudes by clamp_min)
torch.manual_seed(0)


def safe_log(x, eps=1e-7):
    return torch.log(x.clamp_min(eps))


def scale_function(x):
    return 2 * torch.sigmoid(x) ** (math.log(10)) + 1e-7


def multiscale_fft(signal, scales, overlap):
    stfts = []
    for s in scales:
        S = torch.stft(signal, s, int(s * (1 - overlap)), s, torch.hann_window(s).to(signal), True,
                       normalized=True, return_complex=True).abs()
        stfts.append(S)
    return stfts


def upsample(signal, factor):
    signal = signal.permute(0, 2, 1)
    signal = nn.functional.interpolate(signal, size=signal.shape[-1] * factor)
    return signal.permute(0, 2, 1)


def remove_above_nyquist(amplitudes, pitch, sampling_rate):
    n_harm = amplitudes.shape[-1]
    pitches = pitch * torch.arange(1, n_harm + 1).to(pitch)
    aa = (pitches < sampling_rate / 2).float() + 1e-4
    return amplitudes * aa


def harmonic_synth(pitch, amplitudes, sampling_rate):
    n_harmonic = amplitudes.shape[-1]
    omega = torch.cumsum(2 * math.pi * pitch / sampling_rate, 1)
    omegas = omega * torch.arange(1, n_harmonic + 1).to(omega)
    signal = (torch.sin(omegas) * amplitudes).sum(-1, keepdim=True)
    return signal


def amp_to_impulse_response(amp, target_size):
    amp = torch.stack([amp, torch.zeros_like(amp)], -1)
    amp = torch.view_as_complex(amp)
    amp = fft.irfft(amp)
    filter_size = amp.shape[-1]
    amp = torch.roll(amp, filter_size // 2, -1)
    win = torch.hann_window(filter_size, dtype=amp.dtype, device=amp.device)
    amp = amp * win
    amp = nn.functional.pad(amp, (0, int(target_size) - int(filter_size)))
    amp = torch.roll(amp, -filter_size // 2, -1)
    return amp


def fft_convolve(signal, kernel):
    signal = nn.functional.pad(signal, (0, signal.shape[-1]))
    kernel = nn.functional.pad(kernel, (kernel.shape[-1], 0))
    output = fft.irfft(fft.rfft(signal) * fft.rfft(kernel))
    output = output[..., output.shape[-1] // 2:]
    return output


def mlp(in_size, hidden_size, n_layers):
    channels = [in_size] + (n_layers) * [hidden_size]
    net = []
    for i in range(n_layers):
        net.append(nn.Linear(channels[i], channels[i + 1]))
        net.append(nn.LayerNorm(channels[i + 1]))
        net.append(nn.LeakyReLU())
    return nn.Sequential(*net)


def gru(n_input, hidden_size):
    return nn.GRU(n_input * hidden_size, hidden_size, batch_first=True)


class Reverb(nn.Module):
    def __init__(self, length, sampling_rate, initial_wet=0, initial_decay=5):
        super().__init__()
        self.length = length
        self.sampling_rate = sampling_rate
        self.noise = nn.Parameter((torch.rand(length) * 2 - 1).unsqueeze(-1))
        self.decay = nn.Parameter(torch.tensor(float(initial_decay)))
        self.wet = nn.Parameter(torch.tensor(float(initial_wet)))
        t = torch.arange(self.length) / self.sampling_rate
        t = t.reshape(1, -1, 1)
        self.register_buffer("t", t)

    def build_impulse(self):
        t = torch.exp(-nn.functional.softplus(-self.decay) * self.t * 500)
        noise = self.noise * t
        impulse = noise * torch.sigmoid(self.wet)
        impulse[:, 0] = 1
        return impulse

    def forward(self, x):
        lenx = x.shape[1]
        impulse = self.build_impulse()
        impulse = nn.functional.pad(impulse, (0, 0, 0, lenx - self.length))
        x = fft_convolve(x.squeeze(-1), impulse.squeeze(-1)).unsqueeze(-1)
        return x


class DDSP(nn.Module):
    def __init__(self, hidden_size, n_harmonic, n_bands, sampling_rate, block_size):
        super().__init__()
        self.register_buffer("sampling_rate", torch.tensor(sampling_rate))
        self.register_buffer("block_size", torch.tensor(block_size))
        self.in_mlps = nn.ModuleList([mlp(1, hidden_size, 3)] * 2)
        self.gru = gru(2, hidden_size)
        self.out_mlp = mlp(hidden_size + 2, hidden_size, 3)
        self.proj_matrices = nn.ModuleList([nn.Linear(hidden_size, n_harmonic + 1), nn.Linear(hidden_size, n_bands)])
        self.reverb = Reverb(sampling_rate // 20, sampling_rate)

    def forward(self, pitch, loudness, noise):
        hidden = torch.cat([self.in_mlps[0](pitch), self.in_mlps[1](loudness)], -1)
        hidden = torch.cat([self.gru(hidden)[0], pitch, loudness], -1)
        hidden = self.out_mlp(hidden)
        # harmonic part
        param = scale_function(self.proj_matrices[0](hidden))
        total_amp = param[..., :1]
        amplitudes = param[..., 1:]
        amplitudes = remove_above_nyquist(amplitudes, pitch, self.sampling_rate)
        amplitudes /= amplitudes.sum(-1, keepdim=True)
        amplitudes *= total_amp
        amplitudes = upsample(amplitudes, self.block_size)
        pitch = upsample(pitch, self.block_size)
        harmonic = harmonic_synth(pitch, amplitudes, self.sampling_rate)
        # noise part
        param = scale_function(self.proj_matrices[1](hidden) - 5)
        impulse = amp_to_impulse_response(param, self.block_size)
        noise = fft_convolve(noise, impulse).contiguous()
        noise = noise.reshape(noise.shape[0], -1, 1)
        signal = harmonic + noise
        signal = self.reverb(signal)
        return signal


SR, BLOCK, FRAMES, B = 8000, 64, 8, 3
scales, overlap = [256, 128, 64], 0.75
r = np.random.default_rng(0)
model = DDSP(hidden_size=32, n_harmonic=12, n_bands=17, sampling_rate=SR, block_size=BLOCK)
sync(model)
net = comp(model)
opt = torch.optim.Adam(model.parameters(), lr=5e-4)
schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.9 ** e)
t = np.arange(FRAMES * BLOCK) / SR


def batch():
    f0 = r.uniform(80, 220, (B, 1)) * (1 + 0.05 * np.sin(np.linspace(0, 3, FRAMES)))   # [B, F]
    f0_audio = np.repeat(f0, BLOCK, axis=1)
    phase = 2 * np.pi * np.cumsum(f0_audio, 1) / SR
    s = sum(np.sin(k * phase) / k for k in range(1, 6)) * 0.3
    s = s + 0.01 * r.standard_normal(s.shape)
    loud = np.log(np.abs(s).reshape(B, FRAMES, BLOCK).mean(-1) + 1e-3)
    # the filtered-noise source: uniform in [-1, 1) per frame block (torch.rand's role)
    noise = r.uniform(-1, 1, (B, FRAMES, BLOCK))
    f = lambda a: torch.from_numpy(a.astype(np.float32))
    return f(s), f(f0).unsqueeze(-1), f((loud - loud.mean()) / (loud.std() + 1e-5)).unsqueeze(-1), f(noise)


LOSSES = []
for step in range(3):
    s, pitch, loudness, noise = batch()
    y = net(pitch, loudness, noise).squeeze(-1)
    ori_stft = multiscale_fft(s, scales, overlap)
    rec_stft = multiscale_fft(y, scales, overlap)
    loss = 0
    for s_x, s_y in zip(ori_stft, rec_stft):
        lin_loss = (s_x - s_y).abs().mean()
        log_loss = (safe_log(s_x) - safe_log(s_y)).abs().mean()
        loss = loss + lin_loss + log_loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    schedule.step()
    LOSSES += [loss.item(), y.abs().mean().item()]
model.eval()
with torch.no_grad():
    s, pitch, loudness, noise = batch()
    y = net(pitch, loudness, noise).squeeze(-1)
    LOSSES.append(y.pow(2).mean().item())
    # analysis / resynthesis round trip: istft of the stft gives the signal back
    spec = torch.stft(y, 128, 32, window=torch.hann_window(128), return_complex=True)
    back = torch.istft(spec, 128, 32, window=torch.hann_window(128), length=y.shape[-1])
    LOSSES += [(back - y).abs().max().item() < 1e-5, spec.real.abs().mean().item(),
               torch.stft(s, 64, window=torch.hann_window(64), center=False, return_complex=True).abs().sum().item()]
