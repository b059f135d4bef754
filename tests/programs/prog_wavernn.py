from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# WaveRNN (fatchord's model, at toy size) on a mel-conditioned synthetic waveform: mu-law
# companding by torch.sign / log1p and 8-bit labels, a MelResNet of Conv1d + BatchNorm1d
# residual blocks, an upsampling network (Stretch2d by repeat and view, Conv2d smoothing
# with constant-initialised weights, the auxiliary features cropped and chunked into four),
# two GRUs and a softmax over 256 classes trained by cross-entropy under Adam; then
# sample-by-sample generation under torch.no_grad with GRUCells whose weights are the GRUs'
# (.data assignment) and samples drawn by inverse-CDF (torch.searchsorted of numpy
# uniforms into the softmax's cumsum: the two frameworks' random generators differ), the
# batch folded into overlapping segments and crossfaded back
def encode_mu_law(x, mu):
    mu = mu - 1
    fx = torch.sign(x) * torch.log1p(mu * torch.abs(x)) / math.log1p(mu)
    return torch.floor((fx + 1) / 2 * mu + 0.5).long()
def decode_mu_law(y, mu, from_labels=True):
    if from_labels:
        y = 2 * y / (mu - 1.) - 1.
    mu = mu - 1
    return torch.sign(y) / mu * ((1 + mu) ** torch.abs(y) - 1)
class ResBlock(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.conv1 = nn.Conv1d(dims, dims, kernel_size=1, bias=False)
        self.conv2 = nn.Conv1d(dims, dims, kernel_size=1, bias=False)
        self.batch_norm1 = nn.BatchNorm1d(dims)
        self.batch_norm2 = nn.BatchNorm1d(dims)
    def forward(self, x):
        residual = x
        x = self.conv1(x)
        x = self.batch_norm1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = self.batch_norm2(x)
        return x + residual
class MelResNet(nn.Module):
    def __init__(self, res_blocks, in_dims, compute_dims, res_out_dims, pad):
        super().__init__()
        k_size = pad * 2 + 1
        self.conv_in = nn.Conv1d(in_dims, compute_dims, kernel_size=k_size, bias=False)
        self.batch_norm = nn.BatchNorm1d(compute_dims)
        self.layers = nn.ModuleList([ResBlock(compute_dims) for _ in range(res_blocks)])
        self.conv_out = nn.Conv1d(compute_dims, res_out_dims, kernel_size=1)
    def forward(self, x):
        x = self.conv_in(x)
        x = self.batch_norm(x)
        x = F.relu(x)
        for f in self.layers:
            x = f(x)
        return self.conv_out(x)
class Stretch2d(nn.Module):
    def __init__(self, x_scale, y_scale):
        super().__init__()
        self.x_scale, self.y_scale = x_scale, y_scale
    def forward(self, x):
        b, c, h, w = x.size()
        x = x.unsqueeze(-1).unsqueeze(3)
        x = x.repeat(1, 1, 1, self.y_scale, 1, self.x_scale)
        return x.view(b, c, h * self.y_scale, w * self.x_scale)
class UpsampleNetwork(nn.Module):
    def __init__(self, feat_dims, upsample_scales, compute_dims, res_blocks, res_out_dims, pad):
        super().__init__()
        total_scale = np.cumprod(upsample_scales)[-1]
        self.indent = pad * total_scale
        self.resnet = MelResNet(res_blocks, feat_dims, compute_dims, res_out_dims, pad)
        self.resnet_stretch = Stretch2d(int(total_scale), 1)
        self.up_layers = nn.ModuleList()
        for scale in upsample_scales:
            k_size = (1, scale * 2 + 1)
            padding = (0, scale)
            stretch = Stretch2d(scale, 1)
            conv = nn.Conv2d(1, 1, kernel_size=k_size, padding=padding, bias=False)
            conv.weight.data.fill_(1. / k_size[1])
            self.up_layers.append(stretch)
            self.up_layers.append(conv)
    def forward(self, m):
        aux = self.resnet(m).unsqueeze(1)
        aux = self.resnet_stretch(aux)
        aux = aux.squeeze(1)
        m = m.unsqueeze(1)
        for f in self.up_layers:
            m = f(m)
        m = m.squeeze(1)[:, :, self.indent:-self.indent]
        return m.transpose(1, 2), aux.transpose(1, 2)
class WaveRNN(nn.Module):
    def __init__(self, rnn_dims=32, fc_dims=32, bits=8, pad=1, upsample_factors=(2, 4), feat_dims=8,
                 compute_dims=16, res_out_dims=16, res_blocks=2):
        super().__init__()
        self.n_classes = 2 ** bits
        self.rnn_dims = rnn_dims
        self.aux_dims = res_out_dims // 4
        self.hop_length = int(np.cumprod(upsample_factors)[-1])
        self.upsample = UpsampleNetwork(feat_dims, upsample_factors, compute_dims, res_blocks, res_out_dims, pad)
        self.I = nn.Linear(feat_dims + self.aux_dims + 1, rnn_dims)
        self.rnn1 = nn.GRU(rnn_dims, rnn_dims, batch_first=True)
        self.rnn2 = nn.GRU(rnn_dims + self.aux_dims, rnn_dims, batch_first=True)
        self.fc1 = nn.Linear(rnn_dims + self.aux_dims, fc_dims)
        self.fc2 = nn.Linear(fc_dims + self.aux_dims, fc_dims)
        self.fc3 = nn.Linear(fc_dims, self.n_classes)
        self.register_buffer('step', torch.zeros(1, dtype=torch.long))
    def forward(self, x, mels):
        self.step += 1
        bsize = x.size(0)
        h1 = torch.zeros(1, bsize, self.rnn_dims, device=x.device)
        h2 = torch.zeros(1, bsize, self.rnn_dims, device=x.device)
        mels, aux = self.upsample(mels)
        aux_idx = [self.aux_dims * i for i in range(5)]
        a1 = aux[:, :, aux_idx[0]:aux_idx[1]]
        a2 = aux[:, :, aux_idx[1]:aux_idx[2]]
        a3 = aux[:, :, aux_idx[2]:aux_idx[3]]
        a4 = aux[:, :, aux_idx[3]:aux_idx[4]]
        x = torch.cat([x.unsqueeze(-1), mels, a1], dim=2)
        x = self.I(x)
        res = x
        x, _ = self.rnn1(x, h1)
        x = x + res
        res = x
        x = torch.cat([x, a2], dim=2)
        x, _ = self.rnn2(x, h2)
        x = x + res
        x = torch.cat([x, a3], dim=2)
        x = F.relu(self.fc1(x))
        x = torch.cat([x, a4], dim=2)
        x = F.relu(self.fc2(x))
        return self.fc3(x)
    def get_gru_cell(self, gru):
        gru_cell = nn.GRUCell(gru.input_size, gru.hidden_size)
        gru_cell.weight_hh.data = gru.weight_hh_l0.data
        gru_cell.weight_ih.data = gru.weight_ih_l0.data
        gru_cell.bias_hh.data = gru.bias_hh_l0.data
        gru_cell.bias_ih.data = gru.bias_ih_l0.data
        return gru_cell
    def pad_tensor(self, x, pad, side='both'):
        b, t, c = x.size()
        total = t + 2 * pad if side == 'both' else t + pad
        padded = torch.zeros(b, total, c, device=x.device)
        if side == 'before' or side == 'both':
            padded[:, pad:pad + t, :] = x
        elif side == 'after':
            padded[:, :t, :] = x
        return padded
    def fold_with_overlap(self, x, target, overlap):
        _, total_len, features = x.size()
        num_folds = (total_len - overlap) // (target + overlap)
        extended_len = num_folds * (overlap + target) + overlap
        remaining = total_len - extended_len
        if remaining != 0:
            num_folds += 1
            padding = target + 2 * overlap - remaining
            x = self.pad_tensor(x, padding, side='after')
        folded = torch.zeros(num_folds, target + 2 * overlap, features, device=x.device)
        for i in range(num_folds):
            start = i * (target + overlap)
            end = start + target + 2 * overlap
            folded[i] = x[:, start:end, :]
        return folded
    def xfade_and_unfold(self, y, target, overlap):
        num_folds, length = y.shape
        target = length - 2 * overlap
        total_len = num_folds * (target + overlap) + overlap
        silence_len = overlap // 2
        fade_len = overlap - silence_len
        silence = np.zeros((silence_len), dtype=np.float64)
        t = np.linspace(-1, 1, fade_len, dtype=np.float64)
        fade_in = np.sqrt(0.5 * (1 + t))
        fade_out = np.sqrt(0.5 * (1 - t))
        fade_in = np.concatenate([silence, fade_in])
        fade_out = np.concatenate([fade_out, silence])
        y[:, :overlap] *= fade_in
        y[:, -overlap:] *= fade_out
        unfolded = np.zeros((total_len), dtype=np.float64)
        for i in range(num_folds):
            start = i * (target + overlap)
            end = start + target + 2 * overlap
            unfolded[start:end] += y[i]
        return unfolded
    def generate(self, mels, uniforms, target=12, overlap=4):
        self.eval()
        output = []
        rnn1 = self.get_gru_cell(self.rnn1)
        rnn2 = self.get_gru_cell(self.rnn2)
        with torch.no_grad():
            wave_len = (mels.size(-1) - 1) * self.hop_length
            mels = self.pad_tensor(mels.transpose(1, 2), pad=1, side='both')
            mels, aux = self.upsample(mels.transpose(1, 2))
            mels = self.fold_with_overlap(mels, target, overlap)
            aux = self.fold_with_overlap(aux, target, overlap)
            b_size, seq_len, _ = mels.size()
            h1 = torch.zeros(b_size, self.rnn_dims, device=mels.device)
            h2 = torch.zeros(b_size, self.rnn_dims, device=mels.device)
            x = torch.zeros(b_size, 1, device=mels.device)
            d = self.aux_dims
            aux_split = [aux[:, :, d * i:d * (i + 1)] for i in range(4)]
            for i in range(seq_len):
                m_t = mels[:, i, :]
                a1_t, a2_t, a3_t, a4_t = (a[:, i, :] for a in aux_split)
                x = torch.cat([x, m_t, a1_t], dim=1)
                x = self.I(x)
                h1 = rnn1(x, h1)
                x = x + h1
                inp = torch.cat([x, a2_t], dim=1)
                h2 = rnn2(inp, h2)
                x = x + h2
                x = torch.cat([x, a3_t], dim=1)
                x = F.relu(self.fc1(x))
                x = torch.cat([x, a4_t], dim=1)
                x = F.relu(self.fc2(x))
                logits = self.fc3(x)
                posterior = F.softmax(logits, dim=1)
                cdf = posterior.cumsum(dim=1)
                u = torch.from_numpy(uniforms[i, :b_size].astype(np.float32)).unsqueeze(1)
                sample = torch.searchsorted(cdf, u * cdf[:, -1:]).clamp(max=self.n_classes - 1)
                sample = 2 * sample.float() / (self.n_classes - 1.) - 1.
                output.append(sample)
                x = sample
        output = torch.stack(output).transpose(0, 1).squeeze(-1).cpu().numpy().astype(np.float64)
        output = decode_mu_law(torch.from_numpy(output), self.n_classes, False).numpy()
        output = self.xfade_and_unfold(output, target, overlap)
        return output[:wave_len]
model = WaveRNN(); sync(model)
net = comp(model, dynamic=True)
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
rng = np.random.default_rng(0)
hop, frames = 8, 6
def example(n):
    f0 = rng.uniform(0.02, 0.08, size=(n, 1))
    t = np.arange((frames + 2) * hop)
    wav = 0.6 * np.sin(2 * np.pi * f0 * t + rng.random((n, 1)) * 6) + 0.02 * rng.standard_normal((n, len(t)))
    # "mels": per-frame energies of a few bands, as a stand-in for a real mel spectrogram
    mel = np.stack([np.abs(np.fft.rfft(wav[:, i * hop:(i + 1) * hop] * np.hanning(hop)))[:, :5].repeat(2, 1)[:, :8]
                    for i in range(frames + 2)], -1)
    return torch.from_numpy(wav.astype(np.float32)), torch.from_numpy(np.log1p(mel).astype(np.float32))
LOSSES = []
for step in range(4):
    model.train()
    wav, mels = example(4)
    labels = encode_mu_law(wav, 256)
    x = 2 * labels[:, hop - 1:-hop - 1].float() / 255. - 1.   # previous sample, as fatchord's bits input
    y = labels[:, hop:-hop]
    logits = net(x, mels)
    loss = F.cross_entropy(logits.transpose(1, 2), y)
    opt.zero_grad(); loss.backward(); opt.step()
    LOSSES.append(loss.item())
_, mels = example(1)
audio = model.generate(mels, np.random.default_rng(2).random((40, 8)))
LOSSES += [float(np.abs(audio).mean()), float(audio[:10].sum()), int(model.step)]
