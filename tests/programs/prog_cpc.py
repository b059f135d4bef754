from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn
torch.manual_seed(0)
# Contrastive Predictive Coding on raw audio (van den Oord et al.; the CDCK2 reference
# reimplementation's shape): a strided Conv1d encoder (strides 5, 4, 2, 2, 2: one frame per
# 160 samples) with BatchNorm and in-place ReLUs, a GRU over the frames up to a sampled time
# t, one Linear per future step predicting z_{t+k}; the targets gathered into a
# torch.empty buffer by item assignment in a loop over np.arange, the InfoNCE loss over the
# batch's other utterances by mm and an implicit-dim LogSoftmax's diagonal, the accuracy by
# argmax of an implicit-dim Softmax over dim 0; the GRU's hidden state passed in and out;
# Adam; then the frozen encoder's features train a speaker classifier (logistic regression)
class CDCK2(nn.Module):
    def __init__(self, timestep, batch_size, seq_len, channels=32, hidden=24):
        super().__init__()
        self.batch_size, self.seq_len, self.timestep = batch_size, seq_len, timestep
        self.channels, self.hidden = channels, hidden
        self.encoder = nn.Sequential(
            nn.Conv1d(1, channels, kernel_size=10, stride=5, padding=3, bias=False),
            nn.BatchNorm1d(channels), nn.ReLU(inplace=True),
            nn.Conv1d(channels, channels, kernel_size=8, stride=4, padding=2, bias=False),
            nn.BatchNorm1d(channels), nn.ReLU(inplace=True),
            nn.Conv1d(channels, channels, kernel_size=4, stride=2, padding=1, bias=False),
            nn.BatchNorm1d(channels), nn.ReLU(inplace=True),
            nn.Conv1d(channels, channels, kernel_size=4, stride=2, padding=1, bias=False),
            nn.BatchNorm1d(channels), nn.ReLU(inplace=True),
            nn.Conv1d(channels, channels, kernel_size=4, stride=2, padding=1, bias=False),
            nn.BatchNorm1d(channels), nn.ReLU(inplace=True))
        self.gru = nn.GRU(channels, hidden, num_layers=1, bidirectional=False, batch_first=True)
        self.Wk = nn.ModuleList([nn.Linear(hidden, channels) for i in range(timestep)])
        self.softmax = nn.Softmax()
        self.lsoftmax = nn.LogSoftmax()
        def _weights_init(m):
            if isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if isinstance(m, nn.Conv1d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm1d):
                m.weight.data.fill_(1); m.bias.data.zero_()
        self.apply(_weights_init)
    def init_hidden(self, batch_size):
        return torch.zeros(1, batch_size, self.hidden)
    def forward(self, x, hidden, t_samples):
        batch = x.size()[0]
        z = self.encoder(x)
        z = z.transpose(1, 2)                         # N * L * C
        nce = 0
        encode_samples = torch.empty((self.timestep, batch, self.channels)).float()
        for i in np.arange(1, self.timestep + 1):
            encode_samples[i - 1] = z[:, t_samples + i, :].view(batch, self.channels)
        forward_seq = z[:, :t_samples + 1, :]
        output, hidden = self.gru(forward_seq, hidden)
        c_t = output[:, t_samples, :].view(batch, self.hidden)
        pred = torch.empty((self.timestep, batch, self.channels)).float()
        for i in np.arange(0, self.timestep):
            linear = self.Wk[i]
            pred[i] = linear(c_t)
        for i in np.arange(0, self.timestep):
            total = torch.mm(encode_samples[i], torch.transpose(pred[i], 0, 1))
            correct = torch.sum(torch.eq(torch.argmax(self.softmax(total), dim=0), torch.arange(0, batch)))
            nce += torch.sum(torch.diag(self.lsoftmax(total)))
        nce /= -1. * batch * self.timestep
        accuracy = 1. * correct / batch
        return accuracy, nce, hidden
    def predict(self, x, hidden):
        z = self.encoder(x).transpose(1, 2)
        output, hidden = self.gru(z, hidden)
        return output, hidden
r = np.random.default_rng(0)
SEQ, BATCH, STEPS = 2560, 8, 4
freqs = r.uniform(80, 400, size=(6, 3))
def utterances(n):
    spk = r.integers(0, 6, n); t = np.arange(SEQ) / 8000.0
    x = sum(np.sin(2 * np.pi * freqs[spk, j, None] * t * (1 + 0.02 * r.standard_normal((n, 1)))) / (j + 1)
            for j in range(3))
    x = x * np.exp(-((t - r.uniform(0.05, 0.25, (n, 1))) ** 2) / 0.02) + 0.05 * r.standard_normal((n, SEQ))
    return torch.from_numpy(x.astype(np.float32)).unsqueeze(1), torch.from_numpy(spk)
model = CDCK2(STEPS, BATCH, SEQ); sync(model)
fwd = comp(model)
optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.98), eps=1e-9, amsgrad=True)
LOSSES = []
frames = SEQ // 160
for step in range(6):
    data, _ = utterances(BATCH)
    t_samples = int(r.integers(frames - STEPS))     # the reference draws it by torch.randint
    hidden = model.init_hidden(len(data))
    acc, loss, hidden = fwd(data, hidden, t_samples)
    optimizer.zero_grad(); loss.backward(); optimizer.step()
    LOSSES += [loss.item(), acc.item()]
model.eval()
spk_model = nn.Sequential(nn.Linear(24, 6), nn.LogSoftmax(dim=-1)); sync(spk_model)
spk_opt = torch.optim.Adam(spk_model.parameters(), lr=1e-2)
for step in range(4):
    data, target = utterances(BATCH)
    with torch.no_grad():
        output, _ = model.predict(data, model.init_hidden(len(data)))
    logp = spk_model(output.mean(1))
    loss = nn.functional.nll_loss(logp, target)
    spk_opt.zero_grad(); loss.backward(); spk_opt.step()
    LOSSES.append(loss.item())
with torch.no_grad():
    acc, nce, _ = fwd(*utterances(BATCH)[:1], model.init_hidden(BATCH), 3)
    LOSSES += [nce.item(), acc.item()]
