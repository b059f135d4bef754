from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
torch.manual_seed(0)
# an LSTM autoencoder for variable-length multivariate time series, as the anomaly-detection
# tutorials write it: sequences padded and packed (enforce_sorted=False), the encoder's last
# hidden state repeated over time as the decoder's input, a masked reconstruction loss,
# Adam with ReduceLROnPlateau, and per-sequence reconstruction errors as anomaly scores
class Encoder(nn.Module):
    def __init__(self, n_features, embedding_dim=8):
        super(Encoder, self).__init__()
        self.hidden_dim = 2 * embedding_dim
        self.rnn1 = nn.LSTM(input_size=n_features, hidden_size=self.hidden_dim, num_layers=1, batch_first=True)
        self.rnn2 = nn.LSTM(input_size=self.hidden_dim, hidden_size=embedding_dim, num_layers=1, batch_first=True)
    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        packed, _ = self.rnn1(packed)
        _, (hidden_n, _) = self.rnn2(packed)
        return hidden_n[-1]                              # (B, embedding_dim)
class Decoder(nn.Module):
    def __init__(self, input_dim=8, n_features=3):
        super(Decoder, self).__init__()
        self.hidden_dim = 2 * input_dim
        self.rnn1 = nn.LSTM(input_size=input_dim, hidden_size=input_dim, num_layers=1, batch_first=True)
        self.rnn2 = nn.LSTM(input_size=input_dim, hidden_size=self.hidden_dim, num_layers=1, batch_first=True)
        self.output_layer = nn.Linear(self.hidden_dim, n_features)
    def forward(self, z, lengths, total_length):
        x = z.unsqueeze(1).repeat(1, total_length, 1)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        packed, _ = self.rnn1(packed)
        packed, _ = self.rnn2(packed)
        x, _ = pad_packed_sequence(packed, batch_first=True, total_length=total_length)
        return self.output_layer(x)
class RecurrentAutoencoder(nn.Module):
    def __init__(self, n_features, embedding_dim=8):
        super(RecurrentAutoencoder, self).__init__()
        self.encoder = Encoder(n_features, embedding_dim)
        self.decoder = Decoder(embedding_dim, n_features)
    def forward(self, x, lengths):
        z = self.encoder(x, lengths)
        return self.decoder(z, lengths, x.size(1))
def masked_mse(pred, target, lengths):
    mask = (torch.arange(target.size(1))[None, :] < lengths[:, None]).unsqueeze(-1).float()
    return ((pred - target) ** 2 * mask).sum() / (mask.sum() * target.size(2))
r = np.random.default_rng(0)
def make_series(n, anomalous=False):
    out = []
    for _ in range(n):
        L = int(r.integers(5, 13))
        t = np.linspace(0, 2 * np.pi, L)
        s = np.stack([np.sin(t + r.uniform(0, 1)), np.cos(2 * t), 0.1 * t], axis=1) + 0.05 * r.standard_normal((L, 3))
        if anomalous:
            s[L // 2] += 2.0
        out.append(torch.tensor(s, dtype=torch.float32))
    lengths = torch.tensor([len(s) for s in out])
    return pad_sequence(out, batch_first=True), lengths
model = RecurrentAutoencoder(3); sync(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=0)
fwd = comp(model)
LOSSES = []
for epoch in range(4):
    model.train()
    x, lengths = make_series(6)
    optimizer.zero_grad()
    loss = masked_mse(fwd(x, lengths), x, lengths)
    loss.backward()
    optimizer.step()
    model.eval()
    with torch.no_grad():
        vx, vl = make_series(4)
        val = masked_mse(fwd(vx, vl), vx, vl).item()
    scheduler.step(val)
    LOSSES += [loss.item(), val, optimizer.param_groups[0]["lr"]]
with torch.no_grad():
    for anomalous in (False, True):
        x, lengths = make_series(3, anomalous)
        pred = model(x, lengths)
        mask = torch.arange(x.size(1))[None, :, None] < lengths[:, None, None]
        scores = ((pred - x).abs() * mask).sum(dim=(1, 2)) / lengths
        LOSSES += scores.tolist()
