from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
torch.manual_seed(0)
# BERT4Rec as its PyTorch ports train it: users' item histories cut to the last max_len
# items and left-padded with 0, a cloze task masking items with [MASK] (the label -100
# elsewhere), a bidirectional nn.TransformerEncoder (GELU, batch_first) under a key padding
# mask built from the ids, a GELU head whose logits over the items are scored against the
# item embedding by matmul plus a bias, cross_entropy with ignore_index, Adam with
# weight_decay and a DataLoader over a Dataset with a collate_fn; evaluated by appending
# [MASK] to each history, gathering the scores of the held-out item and sampled negatives,
# and HR@5 / NDCG@5 from the held-out item's rank
N_ITEMS, MAX_LEN = 30, 10
PAD, MASK = 0, N_ITEMS + 1
class BERT4Rec(nn.Module):
    def __init__(self, d=16, n_heads=2, n_layers=2):
        super().__init__()
        self.item = nn.Embedding(N_ITEMS + 2, d, padding_idx=PAD)
        self.pos = nn.Embedding(MAX_LEN, d)
        self.norm = nn.LayerNorm(d)
        layer = nn.TransformerEncoderLayer(d, n_heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.out = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d))
        self.bias = nn.Parameter(torch.zeros(N_ITEMS + 2))
    def forward(self, seq):
        positions = torch.arange(seq.size(1), device=seq.device).unsqueeze(0).expand_as(seq)
        x = self.norm(self.item(seq) + self.pos(positions))
        x = self.encoder(x, src_key_padding_mask=seq == PAD)
        return self.out(x) @ self.item.weight.t() + self.bias     # (B, T, items)
class ClozeDataset(Dataset):
    def __init__(self, histories, rng, mask_prob=0.3):
        self.histories, self.rng, self.mask_prob = histories, rng, mask_prob
    def __len__(self):
        return len(self.histories)
    def __getitem__(self, i):
        seq = self.histories[i][-MAX_LEN:]
        tokens, labels = [], []
        for s in seq:
            p = self.rng.random()
            if p < self.mask_prob:
                p /= self.mask_prob
                tokens.append(MASK if p < 0.8 else int(self.rng.integers(1, N_ITEMS + 1)) if p < 0.9 else s)
                labels.append(s)
            else:
                tokens.append(s)
                labels.append(-100)
        pad = MAX_LEN - len(tokens)
        return torch.tensor([PAD] * pad + tokens), torch.tensor([-100] * pad + labels)
def collate(batch):
    seqs, labels = zip(*batch)
    return torch.stack(seqs), torch.stack(labels)
r = np.random.default_rng(0)
histories = []
for u in range(24):   # each user walks the catalogue with a stride of their own
    n, start, stride = int(r.integers(5, 14)), int(r.integers(1, N_ITEMS + 1)), int(r.integers(1, 4))
    histories.append([(start + stride * k - 1) % N_ITEMS + 1 for k in range(n)])
train = [h[:-1] for h in histories]
model = BERT4Rec(); sync(model)
fwd = comp(model)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, weight_decay=1e-5)
loader = DataLoader(ClozeDataset(train, r), batch_size=8, shuffle=False, collate_fn=collate)
LOSSES = []
for epoch in range(2):
    model.train()
    for seqs, labels in loader:
        logits = fwd(seqs)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        LOSSES.append(loss.item())
model.eval()
with torch.no_grad():
    seqs = torch.tensor([[PAD] * (MAX_LEN - len(h[-MAX_LEN + 1:]) - 1) + h[-MAX_LEN + 1:] + [MASK] for h in train])
    answers = torch.tensor([h[-1] for h in histories])
    negatives = torch.from_numpy(r.integers(1, N_ITEMS + 1, (len(histories), 10)))
    candidates = torch.cat([answers[:, None], negatives], dim=1)
    scores = fwd(seqs)[:, -1, :].gather(1, candidates)
    scores[:, 1:] = scores[:, 1:].masked_fill(negatives == answers[:, None], -1e9)
    rank = (scores[:, 1:] > scores[:, :1]).sum(1)
    hit = (rank < 5).float()
    ndcg = hit / torch.log2(rank.float() + 2)
    LOSSES += [hit.mean().item(), ndcg.mean().item()] + scores[:2].flatten().tolist()
