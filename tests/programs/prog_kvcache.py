from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn
from torch.nn import functional as F
torch.manual_seed(0)
# a decoder-only language model with a key/value cache as the GPT-2 ports write it
# (past_key_values: a tuple per layer, torch.cat along time), trained a few steps, then
# generating 20 tokens one at a time under torch.no_grad() with temperature and top-k
# sampling by torch.multinomial; top_k=1 makes the sampled tokens comparable across
# frameworks (their random generators differ)
class Attention(nn.Module):
    def __init__(self, n_embd, n_head, n_ctx):
        super().__init__()
        self.n_head, self.split_size = n_head, n_embd
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("bias", torch.tril(torch.ones(n_ctx, n_ctx)).view(1, 1, n_ctx, n_ctx), persistent=False)
    def split_heads(self, x, k=False):
        new_x_shape = x.size()[:-1] + (self.n_head, x.size(-1) // self.n_head)
        x = x.view(*new_x_shape)
        return x.permute(0, 2, 3, 1) if k else x.permute(0, 2, 1, 3)
    def merge_heads(self, x):
        x = x.permute(0, 2, 1, 3).contiguous()
        new_x_shape = x.size()[:-2] + (x.size(-2) * x.size(-1),)
        return x.view(*new_x_shape)
    def _attn(self, q, k, v):
        w = torch.matmul(q, k) / math.sqrt(v.size(-1))
        nd, ns = w.size(-2), w.size(-1)
        b = self.bias[:, :, ns - nd:ns, :ns]
        w = w * b - 1e10 * (1 - b)
        w = nn.Softmax(dim=-1)(w)
        return torch.matmul(w, v)
    def forward(self, x, layer_past=None):
        x = self.c_attn(x)
        query, key, value = x.split(self.split_size, dim=2)
        query = self.split_heads(query)
        key = self.split_heads(key, k=True)
        value = self.split_heads(value)
        if layer_past is not None:
            past_key, past_value = layer_past[0].transpose(-2, -1), layer_past[1]
            key = torch.cat((past_key, key), dim=-1)
            value = torch.cat((past_value, value), dim=-2)
        present = torch.stack((key.transpose(-2, -1), value))
        a = self._attn(query, key, value)
        a = self.merge_heads(a)
        return self.c_proj(a), present
class MLP(nn.Module):
    def __init__(self, n_state, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, n_state); self.c_proj = nn.Linear(n_state, n_embd)
    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))
class Block(nn.Module):
    def __init__(self, n_ctx, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5); self.attn = Attention(n_embd, n_head, n_ctx)
        self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5); self.mlp = MLP(4 * n_embd, n_embd)
    def forward(self, x, layer_past=None):
        a, present = self.attn(self.ln_1(x), layer_past=layer_past)
        x = x + a
        m = self.mlp(self.ln_2(x))
        return x + m, present
class GPT2LMHeadModel(nn.Module):
    def __init__(self, vocab_size=50, n_positions=40, n_embd=32, n_head=4, n_layer=2):
        super().__init__()
        self.n_layer = n_layer
        self.wte = nn.Embedding(vocab_size, n_embd); self.wpe = nn.Embedding(n_positions, n_embd)
        self.h = nn.ModuleList([Block(n_positions, n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)
    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_(); module.weight.data.fill_(1.0)
    def forward(self, input_ids, position_ids=None, past=None, lm_labels=None):
        if past is None:
            past_length = 0
            past = [None] * len(self.h)
        else:
            past_length = past[0][0].size(-2)
        if position_ids is None:
            position_ids = torch.arange(past_length, input_ids.size(-1) + past_length, dtype=torch.long, device=input_ids.device)
            position_ids = position_ids.unsqueeze(0).expand_as(input_ids)
        hidden_states = self.wte(input_ids) + self.wpe(position_ids)
        presents = []
        for block, layer_past in zip(self.h, past):
            hidden_states, present = block(hidden_states, layer_past)
            presents.append(present)
        hidden_states = self.ln_f(hidden_states)
        lm_logits = self.lm_head(hidden_states)
        if lm_labels is not None:
            loss_fct = nn.CrossEntropyLoss(ignore_index=-1)
            loss = loss_fct(lm_logits.view(-1, lm_logits.size(-1)), lm_labels.view(-1))
            return loss
        return lm_logits, presents
def top_k_logits(logits, k):
    if k == 0:
        return logits
    values, _ = torch.topk(logits, k)
    min_values = values[:, -1].unsqueeze(1).expand_as(logits)
    return torch.where(logits < min_values, torch.ones_like(logits, dtype=logits.dtype) * -1e10, logits)
def sample_sequence(model, length, context, batch_size=1, temperature=1.0, top_k=0):
    context = context.unsqueeze(0).repeat(batch_size, 1)
    prev, output, past = context, context, None
    with torch.no_grad():
        for i in range(length):
            logits, past = model(prev, past=past)
            logits = logits[:, -1, :] / temperature
            logits = top_k_logits(logits, k=top_k)
            log_probs = F.softmax(logits, dim=-1)
            prev = torch.multinomial(log_probs, num_samples=1)
            output = torch.cat((output, prev), dim=1)
    return output, past
model = GPT2LMHeadModel(); sync(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
r = np.random.default_rng(0)
data = torch.from_numpy(r.integers(0, 50, size=(600,)).astype(np.int64))
fwd = comp(model)
LOSSES = []
model.train()
for it in range(3):
    ix = r.integers(0, len(data) - 13, size=(4,))
    x = torch.stack([data[i:i + 12] for i in ix]); y = torch.stack([data[i + 1:i + 13] for i in ix])
    loss = fwd(x, lm_labels=y)
    optimizer.zero_grad(); loss.backward(); optimizer.step()
    LOSSES.append(loss.item())
model.eval()
context = torch.tensor([3, 17, 5, 9], dtype=torch.long)
out, past = sample_sequence(fwd, 20, context, batch_size=2, temperature=0.8, top_k=1)
assert out.shape == (2, 24) and past[0].shape == (2, 2, 4, 23, 8), (out.shape, past[0].shape)
LOSSES += [float(t) for t in out[0, 4:].tolist()] + [past[1].pow(2).mean().item()]
# cached and uncached logits agree: the last step recomputed from the whole sequence
with torch.no_grad():
    full, _ = model(out[:, :-1])
    step, _ = model(out[:, -2:-1], past=[p[:, :, :, :-1] for p in past])
LOSSES.append((full[:, -1] - step[:, -1]).abs().max().item() < 1e-4)
sampled, _ = sample_sequence(fwd, 20, context, batch_size=3, temperature=1.0, top_k=10)
assert sampled.shape == (3, 24) and int(sampled.min()) >= 0 and int(sampled.max()) < 50
