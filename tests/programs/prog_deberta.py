from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# DeBERTa-v2's disentangled attention as transformers writes it: log-bucketed relative
# positions (sign, abs, ceil(log)), content-to-position and position-to-content scores
# read from the shared relative embeddings by torch.gather on clamped indices, a
# scale of sqrt(d * 3), the attention mask as an outer product of the padding mask filled
# with finfo.min, a token classifier and a sentence-pair head on [CLS], padded batches of
# varying length compiled with dynamic=True; AdamW under a LambdaLR linear warmup-decay
def make_log_bucket_position(relative_pos, bucket_size, max_position):
    sign = torch.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = torch.where((relative_pos < mid) & (relative_pos > -mid),
                          torch.tensor(mid - 1).type_as(relative_pos), torch.abs(relative_pos))
    log_pos = torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid))
                         * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, relative_pos.type_as(log_pos), log_pos * sign)
def build_relative_position(query_layer, key_layer, bucket_size=-1, max_position=-1):
    query_size, key_size = query_layer.size(-2), key_layer.size(-2)
    q_ids = torch.arange(query_size, dtype=torch.long, device=query_layer.device)
    k_ids = torch.arange(key_size, dtype=torch.long, device=key_layer.device)
    rel_pos_ids = q_ids[:, None] - k_ids[None, :]
    if bucket_size > 0 and max_position > 0:
        rel_pos_ids = make_log_bucket_position(rel_pos_ids, bucket_size, max_position)
    rel_pos_ids = rel_pos_ids.to(torch.long)
    rel_pos_ids = rel_pos_ids[:query_size, :]
    return rel_pos_ids.unsqueeze(0)
class DisentangledSelfAttention(nn.Module):
    def __init__(self, hidden, heads, position_buckets, max_relative_positions):
        super().__init__()
        self.num_attention_heads, self.attention_head_size = heads, hidden // heads
        self.query_proj = nn.Linear(hidden, hidden)
        self.key_proj = nn.Linear(hidden, hidden)
        self.value_proj = nn.Linear(hidden, hidden)
        self.position_buckets, self.max_relative_positions = position_buckets, max_relative_positions
        self.pos_ebd_size = position_buckets
    def transpose_for_scores(self, x, attention_heads):
        new_x_shape = x.size()[:-1] + (attention_heads, -1)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3).contiguous().view(-1, x.size(1), x.size(-1))
    def forward(self, hidden_states, attention_mask, relative_pos, rel_embeddings):
        query_layer = self.transpose_for_scores(self.query_proj(hidden_states), self.num_attention_heads)
        key_layer = self.transpose_for_scores(self.key_proj(hidden_states), self.num_attention_heads)
        value_layer = self.transpose_for_scores(self.value_proj(hidden_states), self.num_attention_heads)
        scale_factor = 3   # content-to-content, c2p and p2c
        scale = torch.sqrt(torch.tensor(query_layer.size(-1), dtype=torch.float) * scale_factor)
        attention_scores = torch.bmm(query_layer, key_layer.transpose(-1, -2) / scale.to(dtype=query_layer.dtype))
        rel_att = self.disentangled_attention_bias(query_layer, key_layer, relative_pos, rel_embeddings, scale_factor)
        attention_scores = attention_scores + rel_att
        attention_scores = attention_scores.view(-1, self.num_attention_heads, attention_scores.size(-2),
                                                 attention_scores.size(-1))
        attention_mask = attention_mask.bool()
        attention_scores = attention_scores.masked_fill(~(attention_mask), torch.finfo(query_layer.dtype).min)
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        context_layer = torch.bmm(attention_probs.view(-1, attention_probs.size(-2), attention_probs.size(-1)),
                                  value_layer)
        context_layer = (context_layer.view(-1, self.num_attention_heads, context_layer.size(-2),
                                            context_layer.size(-1)).permute(0, 2, 1, 3).contiguous())
        new_context_layer_shape = context_layer.size()[:-2] + (-1,)
        return context_layer.view(new_context_layer_shape)
    def disentangled_attention_bias(self, query_layer, key_layer, relative_pos, rel_embeddings, scale_factor):
        relative_pos = relative_pos.long().to(query_layer.device)
        att_span = self.pos_ebd_size
        rel_embeddings = rel_embeddings[0: att_span * 2, :].unsqueeze(0)
        pos_query_layer = self.transpose_for_scores(self.query_proj(rel_embeddings), self.num_attention_heads).repeat(
            query_layer.size(0) // self.num_attention_heads, 1, 1)
        pos_key_layer = self.transpose_for_scores(self.key_proj(rel_embeddings), self.num_attention_heads).repeat(
            query_layer.size(0) // self.num_attention_heads, 1, 1)
        score = 0
        # content -> position
        scale = torch.sqrt(torch.tensor(pos_key_layer.size(-1), dtype=torch.float) * scale_factor)
        c2p_att = torch.bmm(query_layer, pos_key_layer.transpose(-1, -2))
        c2p_pos = torch.clamp(relative_pos + att_span, 0, att_span * 2 - 1)
        c2p_att = torch.gather(c2p_att, dim=-1, index=c2p_pos.squeeze(0).expand(
            [query_layer.size(0), query_layer.size(1), relative_pos.size(-1)]))
        score += c2p_att / scale.to(dtype=c2p_att.dtype)
        # position -> content
        scale = torch.sqrt(torch.tensor(pos_query_layer.size(-1), dtype=torch.float) * scale_factor)
        r_pos = build_relative_position(key_layer, key_layer, bucket_size=self.position_buckets,
                                        max_position=self.max_relative_positions)
        p2c_pos = torch.clamp(-r_pos + att_span, 0, att_span * 2 - 1)
        p2c_att = torch.bmm(key_layer, pos_query_layer.transpose(-1, -2))
        p2c_att = torch.gather(p2c_att, dim=-1, index=p2c_pos.squeeze(0).expand(
            [query_layer.size(0), key_layer.size(-2), key_layer.size(-2)])).transpose(-1, -2)
        score += p2c_att / scale.to(dtype=p2c_att.dtype)
        return score
class Layer(nn.Module):
    def __init__(self, hidden, heads, buckets, max_pos):
        super().__init__()
        self.attention = DisentangledSelfAttention(hidden, heads, buckets, max_pos)
        self.attn_out = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-7)
        self.intermediate = nn.Linear(hidden, 2 * hidden)
        self.output = nn.Linear(2 * hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-7)
        self.dropout = nn.Dropout(0.0)
    def forward(self, x, attention_mask, relative_pos, rel_embeddings):
        a = self.attention(x, attention_mask, relative_pos, rel_embeddings)
        x = self.ln1(x + self.dropout(self.attn_out(a)))
        return self.ln2(x + self.dropout(self.output(F.gelu(self.intermediate(x)))))
class DebertaV2(nn.Module):
    def __init__(self, vocab=20, hidden=16, heads=2, layers=2, buckets=4, max_pos=16, n_tags=3):
        super().__init__()
        self.embeddings = nn.Embedding(vocab, hidden, padding_idx=0)
        self.emb_ln = nn.LayerNorm(hidden, eps=1e-7)
        self.rel_embeddings = nn.Embedding(2 * buckets, hidden)
        self.rel_ln = nn.LayerNorm(hidden, eps=1e-7, elementwise_affine=True)
        self.layer = nn.ModuleList([Layer(hidden, heads, buckets, max_pos) for _ in range(layers)])
        self.buckets, self.max_pos = buckets, max_pos
        self.tagger = nn.Linear(hidden, n_tags)
        self.pooler = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, 2)
    def get_attention_mask(self, attention_mask):
        extended_attention_mask = attention_mask.unsqueeze(1).unsqueeze(2)
        attention_mask = extended_attention_mask * extended_attention_mask.squeeze(-2).unsqueeze(-1)
        return attention_mask
    def forward(self, input_ids, attention_mask):
        x = self.emb_ln(self.embeddings(input_ids)) * attention_mask.unsqueeze(-1).to(torch.float)
        mask = self.get_attention_mask(attention_mask)
        relative_pos = build_relative_position(x, x, bucket_size=self.buckets, max_position=self.max_pos)
        rel_embeddings = self.rel_ln(self.rel_embeddings.weight)
        for layer in self.layer:
            x = layer(x, mask, relative_pos, rel_embeddings)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return self.tagger(x), self.classifier(pooled)
def batch(r, n, length):
    """Token tags: whether a token is larger than the one before; label: whether the
    first half sums above the second."""
    lengths = r.integers(length // 2, length + 1, n)
    lengths[0] = length
    ids = np.zeros((n, length), np.int64)
    for i, l in enumerate(lengths):
        ids[i, :l] = r.integers(1, 20, l)
    mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int64)
    tags = np.where(mask > 0, (np.diff(ids, prepend=0, axis=1) > 0) + 1, -100)
    tags[:, 0] = 0
    label = np.array([ids[i, :l // 2].sum() > ids[i, l // 2:l].sum() for i, l in enumerate(lengths)])
    return (torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(tags),
            torch.from_numpy(label.astype(np.int64)))
model = DebertaV2()
sync(model)
fwd = comp(model, dynamic=True)
no_decay = ["bias", "LayerNorm.weight", "ln"]
groups = [{"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
           "weight_decay": 0.01},
          {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
           "weight_decay": 0.0}]
optimizer = torch.optim.AdamW(groups, lr=5e-3)
total, warmup = 4, 1
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda s: s / warmup if s < warmup else max(0.0, (total - s) / (total - warmup)))
r = np.random.default_rng(0)
LOSSES = []
for step, length in enumerate([10, 12, 9]):
    ids, mask, tags, label = batch(r, 4, length)
    tag_logits, cls_logits = fwd(ids, mask)
    loss = F.cross_entropy(tag_logits.reshape(-1, 3), tags.reshape(-1)) + F.cross_entropy(cls_logits, label)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    LOSSES += [loss.item(), scheduler.get_last_lr()[0]]
model.eval()
with torch.no_grad():
    ids, mask, tags, label = batch(r, 3, 11)
    tag_logits, cls_logits = fwd(ids, mask)
    LOSSES += tag_logits[mask.bool()].flatten()[:24].tolist() + cls_logits.flatten().tolist()
