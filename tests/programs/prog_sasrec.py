from _harness import sync, comp  # the runner: weights shared with the PyTorch run; torch.compile
import numpy as np, torch
# SASRec (Kang & McAuley; pmixer/SASRec.pytorch style): item embeddings with padding_idx=0
# scaled by sqrt(d), learned positions (0 at padding), a timeline mask by (seq == 0), causal
# self-attention by nn.MultiheadAttention (attn_mask and key_padding_mask, sequences padded on
# the right), point-wise Conv1d feed-forwards, BCE over positive and negative items at the
# non-padding positions (np.where indices), an L2 term on the item table; the model takes
# numpy id arrays (torch.LongTensor inside); HR@10 / NDCG@10 over 20 sampled candidates
torch.manual_seed(0)


class Args:
    hidden_units, num_blocks, num_heads, dropout_rate, maxlen = 32, 2, 2, 0.0, 12
    l2_emb, lr, device = 1e-4, 1e-3, "cpu"


class PointWiseFeedForward(torch.nn.Module):
    def __init__(self, hidden_units, dropout_rate):
        super(PointWiseFeedForward, self).__init__()
        self.conv1 = torch.nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout1 = torch.nn.Dropout(p=dropout_rate)
        self.relu = torch.nn.ReLU()
        self.conv2 = torch.nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout2 = torch.nn.Dropout(p=dropout_rate)

    def forward(self, inputs):
        outputs = self.dropout2(self.conv2(self.relu(self.dropout1(self.conv1(inputs.transpose(-1, -2))))))
        outputs = outputs.transpose(-1, -2)  # as Conv1D requires (N, C, Length)
        outputs += inputs
        return outputs


class SASRec(torch.nn.Module):
    def __init__(self, user_num, item_num, args):
        super(SASRec, self).__init__()
        self.user_num = user_num
        self.item_num = item_num
        self.dev = args.device
        self.item_emb = torch.nn.Embedding(self.item_num + 1, args.hidden_units, padding_idx=0)
        self.pos_emb = torch.nn.Embedding(args.maxlen + 1, args.hidden_units, padding_idx=0)
        self.emb_dropout = torch.nn.Dropout(p=args.dropout_rate)
        self.attention_layernorms = torch.nn.ModuleList()
        self.attention_layers = torch.nn.ModuleList()
        self.forward_layernorms = torch.nn.ModuleList()
        self.forward_layers = torch.nn.ModuleList()
        self.last_layernorm = torch.nn.LayerNorm(args.hidden_units, eps=1e-8)
        for _ in range(args.num_blocks):
            self.attention_layernorms.append(torch.nn.LayerNorm(args.hidden_units, eps=1e-8))
            self.attention_layers.append(torch.nn.MultiheadAttention(args.hidden_units, args.num_heads,
                                                                     args.dropout_rate))
            self.forward_layernorms.append(torch.nn.LayerNorm(args.hidden_units, eps=1e-8))
            self.forward_layers.append(PointWiseFeedForward(args.hidden_units, args.dropout_rate))

    def log2feats(self, log_seqs):
        seqs = self.item_emb(torch.LongTensor(log_seqs).to(self.dev))
        seqs *= self.item_emb.embedding_dim ** 0.5
        poss = np.tile(np.arange(1, log_seqs.shape[1] + 1), [log_seqs.shape[0], 1])
        poss *= (log_seqs != 0)
        seqs += self.pos_emb(torch.LongTensor(poss).to(self.dev))
        seqs = self.emb_dropout(seqs)
        timeline_mask = torch.BoolTensor(log_seqs == 0).to(self.dev)
        seqs *= ~timeline_mask.unsqueeze(-1)  # broadcast in last dim
        tl = seqs.shape[1]  # time dim len for enforce causality
        attention_mask = ~torch.tril(torch.ones((tl, tl), dtype=torch.bool, device=self.dev))
        for i in range(len(self.attention_layers)):
            seqs = torch.transpose(seqs, 0, 1)
            Q = self.attention_layernorms[i](seqs)
            mha_outputs, _ = self.attention_layers[i](Q, seqs, seqs, attn_mask=attention_mask,
                                                      key_padding_mask=timeline_mask)
            seqs = Q + mha_outputs
            seqs = torch.transpose(seqs, 0, 1)
            seqs = self.forward_layernorms[i](seqs)
            seqs = self.forward_layers[i](seqs)
            seqs *= ~timeline_mask.unsqueeze(-1)
        log_feats = self.last_layernorm(seqs)  # (U, T, C) -> (U, -1, C)
        return log_feats

    def forward(self, user_ids, log_seqs, pos_seqs, neg_seqs):  # for training
        log_feats = self.log2feats(log_seqs)
        pos_embs = self.item_emb(torch.LongTensor(pos_seqs).to(self.dev))
        neg_embs = self.item_emb(torch.LongTensor(neg_seqs).to(self.dev))
        pos_logits = (log_feats * pos_embs).sum(dim=-1)
        neg_logits = (log_feats * neg_embs).sum(dim=-1)
        return pos_logits, neg_logits  # pos_pred, neg_pred

    def predict(self, user_ids, log_seqs, item_indices, last):  # for inference
        log_feats = self.log2feats(log_seqs)
        final_feat = log_feats[torch.arange(len(last)), torch.LongTensor(last)]  # the last item's
        item_embs = self.item_emb(torch.LongTensor(item_indices).to(self.dev))  # (U, I, C)
        logits = item_embs.matmul(final_feat.unsqueeze(-1)).squeeze(-1)
        return logits  # preds # (U, I)


r = np.random.default_rng(0)
usernum, itemnum, args = 40, 60, Args()
histories = [r.integers(1, itemnum + 1, r.integers(4, 2 * args.maxlen)) for _ in range(usernum)]


def sample_batch(users):
    """sequences of each user's last maxlen + 1 items, padded on the right; negatives not in the history"""
    seq = np.zeros([len(users), args.maxlen], dtype=np.int64)
    pos = np.zeros([len(users), args.maxlen], dtype=np.int64)
    neg = np.zeros([len(users), args.maxlen], dtype=np.int64)
    for k, u in enumerate(users):
        h = histories[u][-(args.maxlen + 1):]
        n = len(h) - 1
        seq[k, :n], pos[k, :n] = h[:-1], h[1:]
        for j in range(n):
            t = r.integers(1, itemnum + 1)     # torch.randint's role (the same stream in both runs)
            while t in histories[u]:
                t = r.integers(1, itemnum + 1)
            neg[k, j] = t
    return users, seq, pos, neg


model = SASRec(usernum, itemnum, args).to(args.device)
for name, param in model.named_parameters():
    try:
        torch.nn.init.xavier_normal_(param.data)
    except Exception:
        pass  # just ignore those failed init layers
model.pos_emb.weight.data[0, :] = 0
model.item_emb.weight.data[0, :] = 0
sync(model)
net = comp(model)
bce_criterion = torch.nn.BCEWithLogitsLoss()
adam_optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98))
LOSSES = []
model.train()
for step in range(4):
    u, seq, pos, neg = sample_batch(r.choice(usernum, 16, replace=False))
    pos_logits, neg_logits = net(u, seq, pos, neg)
    pos_labels, neg_labels = torch.ones(pos_logits.shape, device=args.device), torch.zeros(neg_logits.shape, device=args.device)
    adam_optimizer.zero_grad()
    indices = np.where(pos != 0)
    loss = bce_criterion(pos_logits[indices], pos_labels[indices])
    loss += bce_criterion(neg_logits[indices], neg_labels[indices])
    for param in model.item_emb.parameters():
        loss += args.l2_emb * torch.norm(param)
    loss.backward()
    adam_optimizer.step()
    LOSSES.append(loss.item())
LOSSES.append(float(model.item_emb.weight.grad[0].abs().sum()))    # padding_idx gets no gradient
negs = torch.randint(1, itemnum + 1, (64,))
LOSSES.append(float(negs.min() >= 1 and negs.max() <= itemnum))
# evaluation: the held-out last item among 19 sampled negatives, HR@10 and NDCG@10
model.eval()
NDCG, HT = 0.0, 0.0
with torch.no_grad():
    users = np.arange(0, usernum, 2)
    seq = np.zeros([len(users), args.maxlen], dtype=np.int64)
    items, last = [], []
    for k, u in enumerate(users):
        h = histories[u][-(args.maxlen + 1):-1]
        seq[k, :len(h)] = h
        last.append(len(h) - 1)
        cand = [histories[u][-1]]
        while len(cand) < 20:
            t = r.integers(1, itemnum + 1)
            if t not in histories[u] and t not in cand:
                cand.append(t)
        items.append(cand)
    predictions = -model.predict(users, seq, np.array(items), last)
    for k in range(len(users)):
        rank = predictions[k].argsort().argsort()[0].item()
        if rank < 10:
            NDCG += 1 / np.log2(rank + 2)
            HT += 1
LOSSES += [NDCG / len(users), HT / len(users), predictions.mean().item()]
