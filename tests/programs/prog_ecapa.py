from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# ECAPA-TDNN speaker embeddings (as the open-source ECAPA ports write it) on synthetic
# "speakers" (harmonic tones of a speaker's pitch), features and augmentation computed
# before the model as SpeechBrain's recipes do: log-mel filterbanks by torch.stft and a mel
# matrix, mean normalisation, SpecAugment (frequency and time bands masked by
# arange comparisons against per-utterance starts), SE-Res2Net blocks (torch.split into
# scales, a Python loop feeding each scale the previous one, squeeze-excitation), dilated
# Conv1d + BatchNorm1d, multi-layer feature aggregation, attentive statistics pooling with
# global context (weighted mean and std, sqrt of a clamped variance), and the additive
# angular margin softmax (AAM: F.normalize, cos(theta + m) by sqrt(1 - cos^2), torch.where
# on a threshold), SGD with StepLR; then cosine scoring of embeddings in eval
def mel_filterbank(n_fft, n_mels, sr):
    mel = lambda f: 2595 * np.log10(1 + f / 700); hz = lambda m: 700 * (10 ** (m / 2595) - 1)
    pts = hz(np.linspace(mel(20), mel(sr / 2), n_mels + 2)); bins = np.fft.rfftfreq(n_fft, 1 / sr)
    fb = np.zeros((n_mels, len(bins)), np.float32)
    for i in range(n_mels):
        l, c, r = pts[i:i + 3]
        fb[i] = np.maximum(0, np.minimum((bins - l) / (c - l), (r - bins) / (r - c)))
    return torch.from_numpy(fb)
class FbankAug(nn.Module):
    def __init__(self, freq_mask_width=(0, 4), time_mask_width=(0, 6)):
        super().__init__()
        self.time_mask_width, self.freq_mask_width = time_mask_width, freq_mask_width
    def mask_along_axis(self, x, dim, rng):
        ori_shape = x.shape
        batch, fea, time = x.shape
        D, width_range = (fea, self.freq_mask_width) if dim == 1 else (time, self.time_mask_width)
        mask_len = torch.from_numpy(rng.integers(*width_range, size=(batch, 1))).unsqueeze(2)
        mask_pos = torch.from_numpy(rng.integers(0, max(1, D - int(mask_len.max())), size=(batch, 1))).unsqueeze(2)
        arange = torch.arange(D, device=x.device).view(1, 1, -1)
        mask = (mask_pos <= arange) * (arange < (mask_pos + mask_len))
        mask = mask.any(dim=1)
        mask = mask.unsqueeze(2) if dim == 1 else mask.unsqueeze(1)
        x = x.masked_fill_(mask, 0.0)
        return x.view(*ori_shape)
    def forward(self, x, rng):
        x = self.mask_along_axis(x, dim=2, rng=rng)
        x = self.mask_along_axis(x, dim=1, rng=rng)
        return x
class Fbank(nn.Module):
    def __init__(self, n_mels=20, n_fft=128, sr=4000):
        super().__init__()
        self.n_fft = n_fft
        self.register_buffer('fb', mel_filterbank(n_fft, n_mels, sr))
        self.register_buffer('window', torch.hamming_window(n_fft))
    def forward(self, x):
        with torch.no_grad():
            x = F.pad(x.unsqueeze(1), (1, 0), 'reflect').squeeze(1)
            x = torch.cat([x[:, :1], x[:, 1:] - 0.97 * x[:, :-1]], 1)   # pre-emphasis
            spec = torch.stft(x, self.n_fft, hop_length=32, window=self.window, return_complex=True).abs().pow(2)
            x = torch.matmul(self.fb, spec) + 1e-6
            x = x.log()
            return x - torch.mean(x, dim=-1, keepdim=True)
class SEModule(nn.Module):
    def __init__(self, channels, bottleneck=16):
        super(SEModule, self).__init__()
        self.se = nn.Sequential(nn.AdaptiveAvgPool1d(1), nn.Conv1d(channels, bottleneck, kernel_size=1, padding=0),
                                nn.ReLU(), nn.Conv1d(bottleneck, channels, kernel_size=1, padding=0), nn.Sigmoid())
    def forward(self, input):
        return input * self.se(input)
class Bottle2neck(nn.Module):
    def __init__(self, inplanes, planes, kernel_size, dilation, scale=4):
        super(Bottle2neck, self).__init__()
        width = int(math.floor(planes / scale))
        self.conv1 = nn.Conv1d(inplanes, width * scale, kernel_size=1)
        self.bn1 = nn.BatchNorm1d(width * scale)
        self.nums = scale - 1
        num_pad = math.floor(kernel_size / 2) * dilation
        self.convs = nn.ModuleList([nn.Conv1d(width, width, kernel_size=kernel_size, dilation=dilation, padding=num_pad)
                                    for _ in range(self.nums)])
        self.bns = nn.ModuleList([nn.BatchNorm1d(width) for _ in range(self.nums)])
        self.conv3 = nn.Conv1d(width * scale, planes, kernel_size=1)
        self.bn3 = nn.BatchNorm1d(planes)
        self.relu = nn.ReLU()
        self.width = width
        self.se = SEModule(planes)
    def forward(self, x):
        residual = x
        out = self.bn1(self.relu(self.conv1(x)))
        spx = torch.split(out, self.width, 1)
        for i in range(self.nums):
            sp = spx[i] if i == 0 else sp + spx[i]
            sp = self.bns[i](self.relu(self.convs[i](sp)))
            out = sp if i == 0 else torch.cat((out, sp), 1)
        out = torch.cat((out, spx[self.nums]), 1)
        out = self.bn3(self.relu(self.conv3(out)))
        out = self.se(out)
        return out + residual
class ECAPA_TDNN(nn.Module):
    def __init__(self, C=32, n_mels=20, emb=24):
        super(ECAPA_TDNN, self).__init__()
        self.conv1 = nn.Conv1d(n_mels, C, kernel_size=5, stride=1, padding=2)
        self.relu = nn.ReLU()
        self.bn1 = nn.BatchNorm1d(C)
        self.layer1 = Bottle2neck(C, C, kernel_size=3, dilation=2)
        self.layer2 = Bottle2neck(C, C, kernel_size=3, dilation=3)
        self.layer3 = Bottle2neck(C, C, kernel_size=3, dilation=4)
        self.layer4 = nn.Conv1d(3 * C, 48, kernel_size=1)
        self.attention = nn.Sequential(nn.Conv1d(48 * 3, 16, kernel_size=1), nn.ReLU(), nn.BatchNorm1d(16),
                                       nn.Tanh(), nn.Conv1d(16, 48, kernel_size=1), nn.Softmax(dim=2))
        self.bn5 = nn.BatchNorm1d(96)
        self.fc6 = nn.Linear(96, emb)
        self.bn6 = nn.BatchNorm1d(emb)
    def forward(self, x):
        x = self.bn1(self.relu(self.conv1(x)))
        x1 = self.layer1(x)
        x2 = self.layer2(x + x1)
        x3 = self.layer3(x + x1 + x2)
        x = self.relu(self.layer4(torch.cat((x1, x2, x3), dim=1)))
        t = x.size()[-1]
        global_x = torch.cat((x, torch.mean(x, dim=2, keepdim=True).repeat(1, 1, t),
                              torch.sqrt(torch.var(x, dim=2, keepdim=True).clamp(min=1e-4)).repeat(1, 1, t)), dim=1)
        w = self.attention(global_x)
        mu = torch.sum(x * w, dim=2)
        sg = torch.sqrt((torch.sum((x ** 2) * w, dim=2) - mu ** 2).clamp(min=1e-4))
        x = torch.cat((mu, sg), 1)
        x = self.bn5(x)
        return self.bn6(self.fc6(x))
class AAMsoftmax(nn.Module):
    def __init__(self, n_class, m, s, emb=24):
        super(AAMsoftmax, self).__init__()
        self.m, self.s = m, s
        self.weight = torch.nn.Parameter(torch.FloatTensor(n_class, emb), requires_grad=True)
        self.ce = nn.CrossEntropyLoss()
        nn.init.xavier_normal_(self.weight, gain=1)
        self.cos_m, self.sin_m = math.cos(self.m), math.sin(self.m)
        self.th = math.cos(math.pi - self.m)
        self.mm = math.sin(math.pi - self.m) * self.m
    def forward(self, x, label=None):
        cosine = F.linear(F.normalize(x), F.normalize(self.weight))
        sine = torch.sqrt((1.0 - torch.mul(cosine, cosine)).clamp(0, 1))
        phi = cosine * self.cos_m - sine * self.sin_m
        phi = torch.where((cosine - self.th) > 0, phi, cosine - self.mm)
        one_hot = torch.zeros_like(cosine)
        one_hot.scatter_(1, label.view(-1, 1), 1)
        output = (one_hot * phi) + ((1.0 - one_hot) * cosine)
        output = output * self.s
        loss = self.ce(output, label)
        prec1 = (output.detach().argmax(1) == label).float().mean() * 100
        return loss, prec1
compute_features, augment = Fbank(), FbankAug()   # features and SpecAugment before the model
speaker_encoder = ECAPA_TDNN()
speaker_loss = AAMsoftmax(n_class=4, m=0.2, s=30)
sync(speaker_encoder, speaker_loss)
encoder, aam = comp(speaker_encoder, fullgraph=True), comp(speaker_loss, fullgraph=True)
params = list(speaker_encoder.parameters()) + list(speaker_loss.parameters())
optim = torch.optim.SGD(params, lr=2e-3, momentum=0.9, weight_decay=2e-5)
scheduler = torch.optim.lr_scheduler.StepLR(optim, step_size=2, gamma=0.5)
rng = np.random.default_rng(0); aug_rng = np.random.default_rng(1)
pitch = np.array([110., 160., 230., 330.])
def utterances(labels, n=1024):
    t = np.arange(n) / 4000.
    w = [sum(np.sin(2 * np.pi * pitch[l] * (h + 1) * t + rng.random() * 6) / (h + 1) for h in range(3))
         + 0.3 * rng.standard_normal(n) for l in labels]
    return torch.from_numpy(np.stack(w).astype(np.float32))
LOSSES = []
for step in range(4):
    speaker_encoder.train(); speaker_loss.train()
    labels = torch.from_numpy(rng.integers(0, 4, 8))
    feats = augment(compute_features(utterances(labels.numpy())), aug_rng)
    embedding = encoder(feats)
    nloss, prec = aam(embedding, labels)
    optim.zero_grad(); nloss.backward(); optim.step(); scheduler.step()
    LOSSES += [nloss.item(), prec.item()]
speaker_encoder.eval()
with torch.no_grad():
    emb = F.normalize(encoder(compute_features(utterances([0, 0, 1, 2, 3, 3]))), p=2, dim=1)
    scores = emb @ emb.t()
LOSSES += scores[0].tolist() + [speaker_encoder.bn5.running_var.mean().item()]
