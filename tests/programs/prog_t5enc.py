from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
# a T5 encoder as transformers' modeling_t5.py writes it: relative position buckets (exact
# for short distances, logarithmic beyond, by torch.log on the float distances and a
# .to(torch.long)), an Embedding of the buckets per head computed by the first layer and
# shared by the later ones, added with the padding mask (finfo.min) to unscaled attention
# scores; T5LayerNorm (RMS, no bias), a gated-GELU feed-forward, no biases; trained as a
# sequence classifier on mean-pooled states with gradient accumulation, LambdaLR's linear
# warmup and decay, clip_grad_norm_, AdamW
class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps
    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states
class T5Attention(nn.Module):
    def __init__(self, d_model, n_heads, has_relative_attention_bias=False, num_buckets=32, max_distance=128):
        super().__init__()
        self.n_heads, self.key_value_proj_dim = n_heads, d_model // n_heads
        self.inner_dim = n_heads * self.key_value_proj_dim
        self.q = nn.Linear(d_model, self.inner_dim, bias=False)
        self.k = nn.Linear(d_model, self.inner_dim, bias=False)
        self.v = nn.Linear(d_model, self.inner_dim, bias=False)
        self.o = nn.Linear(self.inner_dim, d_model, bias=False)
        self.has_relative_attention_bias = has_relative_attention_bias
        self.relative_attention_num_buckets, self.relative_attention_max_distance = num_buckets, max_distance
        if self.has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(num_buckets, self.n_heads)
    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        # now relative_position is in the range [0, inf)
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1))
        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets
    def compute_bias(self, query_length, key_length):
        context_position = torch.arange(query_length, dtype=torch.long)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position  # shape (query_length, key_length)
        relative_position_bucket = self._relative_position_bucket(
            relative_position, bidirectional=True, num_buckets=self.relative_attention_num_buckets,
            max_distance=self.relative_attention_max_distance)
        values = self.relative_attention_bias(relative_position_bucket)  # (query_length, key_length, n_heads)
        values = values.permute([2, 0, 1]).unsqueeze(0)  # (1, n_heads, query_length, key_length)
        return values
    def forward(self, hidden_states, mask=None, position_bias=None):
        batch_size, seq_length = hidden_states.shape[:2]
        def shape(states):
            return states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)
        def unshape(states):
            return states.transpose(1, 2).contiguous().view(batch_size, -1, self.inner_dim)
        query_states, key_states = shape(self.q(hidden_states)), shape(self.k(hidden_states))
        value_states = shape(self.v(hidden_states))
        scores = torch.matmul(query_states, key_states.transpose(3, 2))
        if position_bias is None:
            position_bias = self.compute_bias(seq_length, seq_length)
            if mask is not None:
                position_bias = position_bias + mask  # (batch_size, n_heads, seq_length, key_length)
        scores += position_bias
        attn_weights = nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
        attn_output = unshape(torch.matmul(attn_weights, value_states))
        return self.o(attn_output), position_bias
class T5DenseGatedActDense(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.wi_0 = nn.Linear(d_model, d_ff, bias=False)
        self.wi_1 = nn.Linear(d_model, d_ff, bias=False)
        self.wo = nn.Linear(d_ff, d_model, bias=False)
        self.act = nn.GELU(approximate="tanh")
    def forward(self, hidden_states):
        hidden_gelu = self.act(self.wi_0(hidden_states))
        return self.wo(hidden_gelu * self.wi_1(hidden_states))
class T5Block(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, has_relative_attention_bias):
        super().__init__()
        self.attn_norm = T5LayerNorm(d_model)
        self.SelfAttention = T5Attention(d_model, n_heads, has_relative_attention_bias)
        self.ff_norm = T5LayerNorm(d_model)
        self.DenseReluDense = T5DenseGatedActDense(d_model, d_ff)
    def forward(self, hidden_states, attention_mask, position_bias):
        attn, position_bias = self.SelfAttention(self.attn_norm(hidden_states), attention_mask, position_bias)
        hidden_states = hidden_states + attn
        hidden_states = hidden_states + self.DenseReluDense(self.ff_norm(hidden_states))
        return hidden_states, position_bias
class T5EncoderClassifier(nn.Module):
    def __init__(self, vocab=50, d_model=32, n_heads=4, d_ff=48, n_layers=2, n_classes=3):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d_model)
        self.block = nn.ModuleList([T5Block(d_model, n_heads, d_ff, has_relative_attention_bias=bool(i == 0))
                                    for i in range(n_layers)])
        self.final_layer_norm = T5LayerNorm(d_model)
        self.classifier = nn.Linear(d_model, n_classes)
    def forward(self, input_ids, attention_mask):
        hidden_states = self.embed_tokens(input_ids)
        extended_attention_mask = attention_mask[:, None, None, :].to(hidden_states.dtype)
        extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(hidden_states.dtype).min
        position_bias = None
        for layer_module in self.block:
            hidden_states, position_bias = layer_module(hidden_states, extended_attention_mask, position_bias)
        hidden_states = self.final_layer_norm(hidden_states)
        m = attention_mask.unsqueeze(-1).to(hidden_states.dtype)
        pooled = (hidden_states * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return self.classifier(pooled)
r = np.random.default_rng(0)
N, L = 48, 20
lengths = r.integers(6, L + 1, N)
ids = r.integers(1, 50, (N, L)); mask = (np.arange(L)[None] < lengths[:, None])
ids = np.where(mask, ids, 0)
labels = (ids[:, 0] % 3).astype(np.int64)
ds = TensorDataset(torch.from_numpy(ids), torch.from_numpy(mask.astype(np.int64)), torch.from_numpy(labels))
loader = DataLoader(ds, batch_size=8, shuffle=False)
model = T5EncoderClassifier(); sync(model)
net = comp(model)
params = [{"params": [p for n, p in model.named_parameters() if "norm" not in n], "weight_decay": 0.01},
          {"params": [p for n, p in model.named_parameters() if "norm" in n], "weight_decay": 0.0}]
optimizer = torch.optim.AdamW(params, lr=3e-3)
accumulation_steps, num_warmup_steps, num_training_steps = 2, 2, 6
def lr_lambda(current_step: int):   # transformers' get_linear_schedule_with_warmup
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
LOSSES = []
model.train()
for epoch in range(2):
    for step, (input_ids, attention_mask, y) in enumerate(loader):
        logits = net(input_ids, attention_mask)
        loss = F.cross_entropy(logits, y) / accumulation_steps
        loss.backward()
        if (step + 1) % accumulation_steps == 0:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            LOSSES += [norm.item(), scheduler.get_last_lr()[0]]
        LOSSES.append(loss.item() * accumulation_steps)
model.eval()
with torch.no_grad():
    buckets = T5Attention._relative_position_bucket(torch.arange(-70, 70)[None, :])
    LOSSES += [net(torch.from_numpy(ids[:8]), torch.from_numpy(mask[:8].astype(np.int64))).sum().item(),
               buckets.sum().item(), model.block[0].SelfAttention.relative_attention_bias.weight.sum().item()]
