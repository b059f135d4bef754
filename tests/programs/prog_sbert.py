from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
torch.manual_seed(0)
# a sentence-embedding model as sentence-transformers trains one: a small Transformer
# encoder (nn.TransformerEncoder with a key padding mask), mean pooling under the attention
# mask (sum of masked token embeddings over the clamped token count), F.normalize,
# MultipleNegativesRankingLoss (cosine similarities of anchors against every positive in
# the batch, scaled by 20, cross-entropy against the diagonal), pairs padded per batch by a
# collate_fn (so the sequence length changes with the batch), AdamW with a warmup; an
# evaluation of cosine similarities by F.cosine_similarity under no_grad
class PairDataset(Dataset):
    def __init__(self, n, rng):
        self.pairs = []
        for _ in range(n):
            la, lb = (int(v) for v in rng.integers(4, 13, 2))
            a = rng.integers(3, 60, la)
            b = np.concatenate([a[:max(2, la // 2)], rng.integers(3, 60, lb)])[:lb]   # a paraphrase shares a prefix
            self.pairs.append((a, b))
    def __len__(self): return len(self.pairs)
    def __getitem__(self, i): return self.pairs[i]
def collate(batch):
    def pad(seqs):
        n = max(len(s) for s in seqs)
        ids = torch.zeros(len(seqs), n, dtype=torch.long)
        mask = torch.zeros(len(seqs), n, dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = torch.as_tensor(s); mask[i, :len(s)] = 1
        return {"input_ids": ids, "attention_mask": mask}
    return pad([a for a, _ in batch]), pad([b for _, b in batch])
class SentenceEncoder(nn.Module):
    def __init__(self, vocab=60, d_model=32, nhead=4, layers=2, max_len=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model, padding_idx=0)
        self.pos = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=64, dropout=0.0, batch_first=True,
                                           activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.size(1)).unsqueeze(0)
        token_embeddings = self.encoder(self.tok(input_ids) + self.pos(positions),
                                        src_key_padding_mask=attention_mask == 0)
        input_mask_expanded = attention_mask.unsqueeze(-1).expand(token_embeddings.size()).float()
        sum_embeddings = torch.sum(token_embeddings * input_mask_expanded, 1)
        sum_mask = torch.clamp(input_mask_expanded.sum(1), min=1e-9)
        return F.normalize(sum_embeddings / sum_mask, p=2, dim=1)
def cos_sim(a, b):
    a_norm = torch.nn.functional.normalize(a, p=2, dim=1)
    b_norm = torch.nn.functional.normalize(b, p=2, dim=1)
    return torch.mm(a_norm, b_norm.transpose(0, 1))
class MultipleNegativesRankingLoss(nn.Module):
    def __init__(self, model, scale=20.0):
        super().__init__()
        self.model, self.scale = model, scale
        self.cross_entropy_loss = nn.CrossEntropyLoss()
    def forward(self, anchors, positives):
        scores = cos_sim(self.model(**anchors), self.model(**positives)) * self.scale
        labels = torch.arange(len(scores), dtype=torch.long, device=scores.device)
        return self.cross_entropy_loss(scores, labels)
r = np.random.default_rng(0)
ds = PairDataset(48, r)
loader = DataLoader(ds, batch_size=12, shuffle=False, collate_fn=collate)
model = SentenceEncoder(); sync(model)
encoder = comp(model, dynamic=True)
loss_fn = MultipleNegativesRankingLoss(encoder)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
warmup = 3
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
LOSSES = []
for epoch in range(2):
    model.train()
    for anchors, positives in loader:
        loss = loss_fn(anchors, positives)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step(); scheduler.step()
        LOSSES.append(loss.item())
model.eval()
with torch.no_grad():
    a, b = collate(ds.pairs[:8])
    ea, eb = encoder(**a), encoder(**b)
    sims = F.cosine_similarity(ea, eb)
    LOSSES += [sims.mean().item(), (cos_sim(ea, eb).argmax(1) == torch.arange(8)).float().mean().item()]
