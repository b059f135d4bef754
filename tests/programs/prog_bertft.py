from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
import torch.utils.checkpoint
torch.manual_seed(0)
class Config:
    vocab_size = 100; hidden_size = 32; num_attention_heads = 4; intermediate_size = 64
    num_hidden_layers = 2; max_position_embeddings = 32; type_vocab_size = 2
    layer_norm_eps = 1e-12; hidden_dropout_prob = 0.0; num_labels = 3
class BertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.register_buffer("position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)), persistent=False)
    def forward(self, input_ids, token_type_ids):
        seq_length = input_ids.size(1)
        position_ids = self.position_ids[:, :seq_length]
        emb = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids) + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(emb))
class BertSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3)
    def forward(self, hidden_states, attention_mask):
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.attention_head_size)
        scores = scores + attention_mask
        probs = self.dropout(nn.functional.softmax(scores, dim=-1))
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return ctx.view(ctx.size()[:-2] + (self.all_head_size,))
class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.attn_out = nn.Linear(config.hidden_size, config.hidden_size)
        self.attn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.out_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
    def forward(self, hidden_states, attention_mask):
        a = self.attn_norm(self.attn_out(self.attention(hidden_states, attention_mask)) + hidden_states)
        h = F.gelu(self.intermediate(a))
        return self.out_norm(self.output(h) + a)
class BertForSequenceClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.gradient_checkpointing = True
    def get_extended_attention_mask(self, attention_mask, dtype):
        extended = attention_mask[:, None, None, :].to(dtype=dtype)
        return (1.0 - extended) * torch.finfo(dtype).min
    def forward(self, input_ids, attention_mask, token_type_ids, labels=None):
        h = self.embeddings(input_ids, token_type_ids)
        ext = self.get_extended_attention_mask(attention_mask, h.dtype)
        for layer_module in self.layer:
            if self.gradient_checkpointing and self.training:
                h = torch.utils.checkpoint.checkpoint(layer_module.__call__, h, ext, use_reentrant=False)
            else:
                h = layer_module(h, ext)
        pooled = torch.tanh(self.pooler(h[:, 0]))
        logits = self.classifier(pooled)
        loss = F.cross_entropy(logits.view(-1, self.config.num_labels), labels.view(-1)) if labels is not None else None
        return loss, logits
config = Config()
model = BertForSequenceClassification(config); sync(model)
no_decay = ["bias", "LayerNorm.weight", "norm.weight"]
grouped = [
    {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
    {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
]
optimizer = torch.optim.AdamW(grouped, lr=5e-4, eps=1e-8)
num_training_steps, num_warmup_steps = 6, 2
def lr_lambda(current_step):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
scaler = torch.cuda.amp.GradScaler(enabled=False)
accum = 2
r = np.random.default_rng(0); fwd = comp(model)
LOSSES = []
model.zero_grad()
for step in range(8):
    model.train()
    lens = r.integers(5, 13, 4)
    ids = r.integers(1, config.vocab_size, (4, 12)); mask = (np.arange(12)[None] < lens[:, None]).astype(np.int64)
    ids = ids * mask
    batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
             "token_type_ids": torch.from_numpy((np.arange(12)[None] >= 6).astype(np.int64).repeat(4, 0)),
             "labels": torch.from_numpy(r.integers(0, 3, 4))}
    loss, logits = fwd(**batch)
    loss = loss / accum
    scaler.scale(loss).backward()
    LOSSES.append(loss.item())
    if (step + 1) % accum == 0:
        scaler.unscale_(optimizer)
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer); scaler.update(); scheduler.step(); optimizer.zero_grad()
        LOSSES.append(float(gn)); LOSSES.append(scheduler.get_last_lr()[0])
model.eval()
with torch.no_grad():
    _, logits = model(**{k: v for k, v in batch.items() if k != "labels"})
LOSSES += logits.softmax(-1)[:, 0].tolist()
