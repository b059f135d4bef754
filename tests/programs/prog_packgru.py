from _harness import sync  # the runner: weights shared with the PyTorch run
import numpy as np, torch, torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
torch.manual_seed(0)
# sentiment-style classifier over variable-length sequences: packed bidirectional GRU,
# masked mean pooling, OneCycleLR then ReduceLROnPlateau, gradient clipping by value
class Classifier(nn.Module):
    def __init__(s, vocab=60, emb=12, hid=16, ncls=3):
        super().__init__()
        s.emb = nn.Embedding(vocab, emb, padding_idx=0)
        s.rnn = nn.GRU(emb, hid, num_layers=2, batch_first=True, bidirectional=True)
        s.fc = nn.Linear(2 * hid, ncls)
    def forward(s, x, lengths):
        packed = pack_padded_sequence(s.emb(x), lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h_n = s.rnn(packed)
        out, out_lens = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
        mask = (torch.arange(x.size(1))[None, :] < out_lens[:, None]).unsqueeze(-1).float()
        pooled = (out * mask).sum(1) / mask.sum(1)
        return s.fc(pooled), h_n
model = Classifier(); sync(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=4)
crit = nn.CrossEntropyLoss()
r = np.random.default_rng(0)
def batch(n=8, T=10):
    lens = r.integers(1, T + 1, n); x = np.zeros((n, T), np.int64)
    for b, l in enumerate(lens): x[b, :l] = r.integers(1, 60, l)
    return torch.from_numpy(x), torch.from_numpy(lens), torch.from_numpy(r.integers(0, 3, n))
LOSSES = []
for it in range(4):
    x, lens, y = batch()
    model.train(); logits, h_n = model(x, lens); loss = crit(logits, y)
    opt.zero_grad(); loss.backward(); nn.utils.clip_grad_value_(model.parameters(), clip_value=0.5)
    opt.step(); sched.step()
    LOSSES += [loss.item(), h_n.abs().sum().item(), sched.get_last_lr()[0]]
plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode='min', factor=0.5, patience=0)
for g in opt.param_groups: g['lr'] = 1e-3
for epoch in range(3):
    x, lens, y = batch()
    logits, _ = model(x, lens); loss = crit(logits, y); opt.zero_grad(); loss.backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.5); opt.step()
    model.eval()
    with torch.no_grad():
        vx, vlens, vy = batch(); val = crit(model(vx, vlens)[0], vy).item()
    plateau.step(1.0 + epoch)   # a rising validation loss: the rate halves after each epoch
    LOSSES += [loss.item(), val, opt.param_groups[0]['lr']]
