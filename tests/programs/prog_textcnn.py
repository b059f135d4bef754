from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
class TextCNN(nn.Module):
    """Kim (2014): parallel convolutions of several widths, max-over-time pooling."""
    def __init__(self, vocab_size=50, embed_dim=16, n_filters=6, filter_sizes=(2, 3, 4),
                 output_dim=3, dropout=0.0, pad_idx=0):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_idx)
        self.static = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_idx)
        self.static.weight.requires_grad = False
        self.convs = nn.ModuleList([nn.Conv2d(in_channels=2, out_channels=n_filters,
                                              kernel_size=(fs, embed_dim)) for fs in filter_sizes])
        self.convs1d = nn.ModuleList([nn.Conv1d(embed_dim, n_filters, fs) for fs in filter_sizes])
        self.fc = nn.Linear(2 * len(filter_sizes) * n_filters, output_dim)
        self.dropout = nn.Dropout(dropout)
    def forward(self, text):                                   # (batch, sent len)
        embedded = torch.stack([self.embedding(text), self.static(text)], dim=1)
        conved = [F.relu(conv(embedded)).squeeze(3) for conv in self.convs]
        pooled = [F.max_pool1d(conv, conv.shape[2]).squeeze(2) for conv in conved]
        e = self.embedding(text).permute(0, 2, 1)
        pooled += [F.relu(conv(e)).max(dim=2)[0] for conv in self.convs1d]
        cat = self.dropout(torch.cat(pooled, dim=1))
        return self.fc(cat)
model = TextCNN(); sync(model)
optimizer = torch.optim.Adadelta(filter(lambda p: p.requires_grad, model.parameters()), lr=1.0)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
fwd = comp(model)
r = np.random.default_rng(0)
LOSSES = []
for step in range(4):
    text = torch.from_numpy(r.integers(1, 50, (8, 12)))
    text[:, 9:] = 0                                           # padded tail
    label = torch.from_numpy(r.integers(0, 3, 8))
    model.train()
    predictions = fwd(text)
    loss = criterion(predictions, label)
    optimizer.zero_grad()
    loss.backward()
    # the max-norm constraint of the paper, on the classifier's rows
    with torch.no_grad():
        w = model.fc.weight
        w.mul_(torch.clamp(3.0 / (w.norm(dim=1, keepdim=True) + 1e-8), max=1.0))
    optimizer.step()
    acc = (predictions.argmax(1) == label).float().mean()
    LOSSES += [loss.item(), acc.item()]
model.eval()
with torch.no_grad():
    probs = torch.softmax(fwd(text), dim=1)
LOSSES += probs[:, 0].tolist()
LOSSES.append(model.static.weight.sum().item())
