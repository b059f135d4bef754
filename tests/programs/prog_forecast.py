from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import random, numpy as np, torch, torch.nn as nn
torch.manual_seed(0); random.seed(0)
class Encoder(nn.Module):
    def __init__(self, input_size=2, hidden_size=16, num_layers=2):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True, dropout=0.0)
    def forward(self, x):
        outputs, (hidden, cell) = self.lstm(x)
        return hidden, cell
class Decoder(nn.Module):
    def __init__(self, output_size=1, hidden_size=16, num_layers=2):
        super().__init__()
        self.lstm = nn.LSTM(output_size, hidden_size, num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_size, output_size)
    def forward(self, x, hidden, cell):            # one step: x (batch, 1, output_size)
        output, (hidden, cell) = self.lstm(x, (hidden, cell))
        return self.fc(output), hidden, cell
class Seq2Seq(nn.Module):
    """Encoder-decoder forecaster; the decoder is fed the truth with probability
    teacher_forcing_ratio at each step, else its own previous prediction."""
    def __init__(self, encoder, decoder):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
    def forward(self, src, trg, teacher_forcing_ratio=0.5):
        batch_size, trg_len, _ = trg.shape
        outputs = torch.zeros(batch_size, trg_len, 1)
        hidden, cell = self.encoder(src)
        dec_input = src[:, -1:, :1]                 # last observed value
        for t in range(trg_len):
            out, hidden, cell = self.decoder(dec_input, hidden, cell)
            outputs[:, t:t + 1] = out
            teacher_force = random.random() < teacher_forcing_ratio
            dec_input = trg[:, t:t + 1] if teacher_force else out
        return outputs
def make_windows(series, n_in, n_out):
    X, Y = [], []
    for i in range(len(series) - n_in - n_out + 1):
        X.append(series[i:i + n_in]); Y.append(series[i + n_in:i + n_in + n_out, :1])
    return torch.tensor(np.array(X), dtype=torch.float32), torch.tensor(np.array(Y), dtype=torch.float32)
rng = np.random.default_rng(0)
t = np.arange(80)
series = np.stack([np.sin(t / 5.0) + 0.1 * rng.standard_normal(80), np.cos(t / 7.0)], 1)
series = (series - series.mean(0)) / series.std(0)
X, Y = make_windows(series, 12, 4)
train_X, train_Y, val_X, val_Y = X[:48], Y[:48], X[48:], Y[48:]
model = Seq2Seq(Encoder(), Decoder()); sync(model)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode='min', factor=0.5, patience=0)
criterion = nn.MSELoss()
fwd = comp(model)
LOSSES = []
for epoch in range(3):
    model.train()
    perm = torch.from_numpy(rng.permutation(48))
    for i in range(0, 48, 16):
        idx = perm[i:i + 16]
        optimizer.zero_grad()
        output = fwd(train_X[idx], train_Y[idx], teacher_forcing_ratio=0.5)
        loss = criterion(output, train_Y[idx])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        LOSSES.append(loss.item())
    model.eval()
    with torch.no_grad():
        val_loss = criterion(fwd(val_X, val_Y, teacher_forcing_ratio=0.0), val_Y).item()
    scheduler.step(val_loss)
    LOSSES += [val_loss, optimizer.param_groups[0]['lr']]
