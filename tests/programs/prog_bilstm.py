from _harness import sync  # the runner: weights shared with the PyTorch run
import numpy as np, torch, torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
torch.manual_seed(0)
class Tagger(nn.Module):
    def __init__(s, vocab=50, emb=16, hid=24, ntag=5):
        super().__init__()
        s.emb = nn.Embedding(vocab, emb, padding_idx=0)
        s.lstm = nn.LSTM(emb, hid, num_layers=2, bidirectional=True, batch_first=True, dropout=0.0)
        s.fc = nn.Linear(2 * hid, ntag)
    def forward(s, x, lengths):
        e = s.emb(x)
        packed = pack_padded_sequence(e, lengths, batch_first=True, enforce_sorted=False)
        out, (h, c) = s.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True)
        return s.fc(out), h
model = Tagger(); sync(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
crit = nn.CrossEntropyLoss(ignore_index=-100)
r = np.random.default_rng(0)
LOSSES = []
for it in range(3):
    lens = [int(l) for l in r.integers(2, 9, 6)]
    seqs = [torch.tensor(r.integers(1, 50, l)) for l in lens]
    tags = [torch.tensor(r.integers(0, 5, l)) for l in lens]
    x = pad_sequence(seqs, batch_first=True); t = pad_sequence(tags, batch_first=True, padding_value=-100)
    logits, h = model(x, torch.tensor(lens))
    loss = crit(logits.reshape(-1, 5), t[:, :logits.size(1)].reshape(-1))
    opt.zero_grad(); loss.backward(); nn.utils.clip_grad_norm_(model.parameters(), 5.0); opt.step()
    LOSSES += [loss.item(), h.abs().sum().item()]
