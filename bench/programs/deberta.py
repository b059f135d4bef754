"""DeBERTa-v2's disentangled attention as transformers writes it.

One step is a batch of 8 padded sequences of 128 tokens (lengths 64-128) with a tag per
token and a label per sequence. Relative positions log-bucketed (sign, abs, ceil(log)) to
32 buckets, content-to-position and position-to-content scores read from the shared
relative embeddings by torch.gather, the attention mask an outer product of the padding
mask filled with finfo.min; 2 post-norm layers of width 64, 4 heads; cross-entropy on the
tags and on the [CLS] head, AdamW with param groups. Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "deberta"
VOCAB, WIDTH, HEADS, LAYERS, BUCKETS, MAX_POS, BATCH, SEQ, TAGS = 1000, 64, 4, 2, 32, 128, 8, 128, 3


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
    def __init__(self, vocab=VOCAB, hidden=WIDTH, heads=HEADS, layers=LAYERS, buckets=BUCKETS,
                 max_pos=MAX_POS, n_tags=TAGS):
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


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = DebertaV2()
        load_params(NAME, self.model)
        self.fwd = compile(self.model)
        named = list(self.model.named_parameters())
        self.optimizer = torch.optim.AdamW(
            [{"params": [p for n, p in named if p.dim() >= 2], "weight_decay": 0.01},
             {"params": [p for n, p in named if p.dim() < 2], "weight_decay": 0.0}], lr=1e-3)

    def step(self) -> float:
        lens = self.r.integers(SEQ // 2, SEQ + 1, BATCH)
        mask = (np.arange(SEQ)[None] < lens[:, None]).astype(np.int64)
        ids = self.r.integers(1, VOCAB, (BATCH, SEQ)) * mask
        tags = np.where(mask > 0, (np.diff(ids, prepend=0, axis=1) > 0) + 1, -100)
        label = (ids[:, 1:9].sum(1) % 2).astype(np.int64)
        tag_logits, cls_logits = self.fwd(torch.from_numpy(ids), torch.from_numpy(mask))
        loss = (F.cross_entropy(tag_logits.reshape(-1, TAGS), torch.from_numpy(tags).reshape(-1))
                + F.cross_entropy(cls_logits, torch.from_numpy(label)))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
