from _harness import sync  # the runner: weights shared with the PyTorch run
import numpy as np, torch, torch.nn as nn
from torch.utils.data import DataLoader, Dataset
torch.manual_seed(0)
class TextClassificationModel(nn.Module):
    def __init__(s, vocab_size, embed_dim, num_class):
        super().__init__(); s.embedding = nn.EmbeddingBag(vocab_size, embed_dim, sparse=False); s.fc = nn.Linear(embed_dim, num_class); s.init_weights()
    def init_weights(s):
        initrange = 0.5; s.embedding.weight.data.uniform_(-initrange, initrange); s.fc.weight.data.uniform_(-initrange, initrange); s.fc.bias.data.zero_()
    def forward(s, text, offsets): return s.fc(s.embedding(text, offsets))
r = np.random.default_rng(0)
class DS(Dataset):
    def __init__(s): s.items = [(int(r.integers(0, 4)), list(r.integers(0, 100, int(r.integers(1, 12))))) for _ in range(64)]
    def __len__(s): return len(s.items)
    def __getitem__(s, i): return s.items[i]
def collate_batch(batch):
    label_list, text_list, offsets = [], [], [0]
    for (_label, _text) in batch:
        label_list.append(_label)
        processed_text = torch.tensor(_text, dtype=torch.int64)
        text_list.append(processed_text); offsets.append(processed_text.size(0))
    label_list = torch.tensor(label_list, dtype=torch.int64)
    offsets = torch.tensor(offsets[:-1]).cumsum(dim=0)
    text_list = torch.cat(text_list)
    return label_list, text_list, offsets
model = TextClassificationModel(100, 16, 4); sync(model)
crit = torch.nn.CrossEntropyLoss(); opt = torch.optim.SGD(model.parameters(), lr=5)
sched = torch.optim.lr_scheduler.StepLR(opt, 1.0, gamma=0.1)
LOSSES = []
for label, text, offsets in DataLoader(DS(), batch_size=16, shuffle=False, collate_fn=collate_batch):
    opt.zero_grad(); pl = model(text, offsets); loss = crit(pl, label); loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1); opt.step()
    LOSSES.append(loss.item()); LOSSES.append((pl.argmax(1) == label).sum().item())
sched.step(); LOSSES.append(sched.get_last_lr()[0])
