from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# xLSTM's mLSTM as NX-AI's xlstm writes it (mlstm/backends.py, layer.py): the parallel
# stabilized form for training (log forget gates by logsigmoid, a cumsum padded by a zero row,
# repeat and subtract its transpose, a causal torch.where with -inf, the input gate added, a
# row-wise max stabilizer, exp, a normalizer max(|sum|, exp(-max))), the recurrent form for
# generation (m_t = max(log f + m, log i), exponential gates, matrix memory C and normalizer
# n, q/k/v squeezed in place by squeeze_), a multi-head LayerNorm by group_norm over heads, a
# causal depthwise Conv1d before q and k, an output gate and learnable skip; a character LM
# trained with AdamW and clip_grad_norm_, then greedy generation step by step from the
# recurrent state, checked against the parallel form on the same sequence
def parallel_stabilized_simple(queries, keys, values, igate_preact, fgate_preact, lower_triangular_matrix=None,
                               stabilize_rowwise=True, eps=1e-6):
    B, NH, S, DH = queries.shape
    _dtype, _device = queries.dtype, queries.device
    log_fgates = torch.nn.functional.logsigmoid(fgate_preact)   # (B, NH, S, 1)
    if lower_triangular_matrix is None or S < lower_triangular_matrix.size(-1):
        ltr = torch.tril(torch.ones((S, S), dtype=torch.bool, device=_device))
    else:
        ltr = lower_triangular_matrix
    assert ltr.dtype == torch.bool, f"lower_triangular_matrix must be of dtype bool, got {ltr.dtype}"
    log_fgates_cumsum = torch.cat([torch.zeros((B, NH, 1, 1), dtype=_dtype, device=_device),
                                   torch.cumsum(log_fgates, dim=-2)], dim=-2)   # (B, NH, S+1, 1)
    rep_log_fgates_cumsum = log_fgates_cumsum.repeat(1, 1, 1, S + 1)   # (B, NH, S+1, S+1)
    _log_fg_matrix = rep_log_fgates_cumsum - rep_log_fgates_cumsum.transpose(-2, -1)
    log_fg_matrix = torch.where(ltr, _log_fg_matrix[:, :, 1:, 1:], -float("inf"))   # (B, NH, S, S)
    log_D_matrix = log_fg_matrix + igate_preact.transpose(-2, -1)   # (B, NH, S, S)
    if stabilize_rowwise:
        max_log_D, _ = torch.max(log_D_matrix, dim=-1, keepdim=True)   # (B, NH, S, 1)
    else:
        max_log_D = torch.max(log_D_matrix.view(B, NH, -1), dim=-1, keepdim=True)[0].unsqueeze(-1)
    log_D_matrix_stabilized = log_D_matrix - max_log_D
    D_matrix = torch.exp(log_D_matrix_stabilized)
    keys_scaled = keys / math.sqrt(DH)
    qk_matrix = queries @ keys_scaled.transpose(-2, -1)   # (B, NH, S, S)
    C_matrix = qk_matrix * D_matrix
    normalizer = torch.maximum(C_matrix.sum(dim=-1, keepdim=True).abs(), torch.exp(-max_log_D))
    C_matrix_normalized = C_matrix / (normalizer + eps)
    return C_matrix_normalized @ values   # (B, NH, S, DH)
def recurrent_step_stabilized_simple(c_state, n_state, m_state, q, k, v, igate_preact, fgate_preact, eps=1e-6):
    B, NH, S, DH = q.shape
    q, k, v = q.squeeze_(2).unsqueeze(-1), k.squeeze_(2).unsqueeze(-1), v.squeeze_(2).unsqueeze(-1)   # (B, NH, DH, 1)
    log_fg_act = torch.nn.functional.logsigmoid(fgate_preact)   # (B, NH, 1, 1)
    m_state_new = torch.max(log_fg_act + m_state, igate_preact)   # (B, NH, 1, 1)
    fg_act = torch.exp(log_fg_act + m_state - m_state_new)
    ig_act = torch.exp(igate_preact - m_state_new)
    k_scaled = k / math.sqrt(DH)
    c_state_new = fg_act * c_state + ig_act * (k_scaled @ v.transpose(-1, -2))   # (B, NH, DH, DH)
    n_state_new = fg_act * n_state + ig_act * k_scaled   # (B, NH, DH, 1)
    h_num = q.transpose(-1, -2) @ c_state_new   # (B, NH, 1, DH)
    qn_dotproduct = q.transpose(-1, -2) @ n_state_new   # (B, NH, 1, 1)
    max_val = torch.exp(-m_state_new)
    h_denom = torch.maximum(qn_dotproduct.abs(), max_val) + eps
    return h_num / h_denom, (c_state_new, n_state_new, m_state_new)
class MultiHeadLayerNorm(nn.Module):
    def __init__(self, ndim, num_heads, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.num_heads, self.eps = num_heads, eps
    def forward(self, x):   # (B, NH, S, DH)
        B, NH, S, DH = x.shape
        gn_in_1 = x.transpose(1, 2)   # (B, S, NH, DH)
        gn_in_2 = gn_in_1.reshape(B * S, NH * DH)
        out = F.group_norm(gn_in_2, num_groups=NH, weight=self.weight, bias=None, eps=self.eps)
        return out.view(B, S, NH * DH)
class CausalConv1d(nn.Module):
    def __init__(self, feature_dim, kernel_size=4):
        super().__init__()
        self.pad = kernel_size - 1
        self.conv = nn.Conv1d(feature_dim, feature_dim, kernel_size, padding=self.pad, groups=feature_dim)
    def forward(self, x):   # (B, S, D)
        y = self.conv(x.transpose(1, 2))
        return y[:, :, :-self.pad].transpose(1, 2)
class mLSTMLayer(nn.Module):
    def __init__(self, embedding_dim, num_heads=2, proj_factor=2, conv_kernel=4):
        super().__init__()
        inner = proj_factor * embedding_dim
        self.num_heads, self.inner = num_heads, inner
        self.proj_up = nn.Linear(embedding_dim, 2 * inner, bias=False)
        self.conv1d = CausalConv1d(inner, conv_kernel)
        self.conv_act_fn = nn.SiLU()
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(inner, inner, bias=False) for _ in range(3))
        self.igate = nn.Linear(3 * inner, num_heads)
        self.fgate = nn.Linear(3 * inner, num_heads)
        self.outnorm = MultiHeadLayerNorm(inner, num_heads)
        self.learnable_skip = nn.Parameter(torch.ones(inner))
        self.proj_down = nn.Linear(inner, embedding_dim, bias=False)
        self.register_buffer("causal_mask", torch.tril(torch.ones(64, 64, dtype=torch.bool)), persistent=False)
        with torch.no_grad():   # the repository's gate init: forget gates open, input gates small
            self.fgate.bias.copy_(torch.linspace(3.0, 6.0, num_heads))
            self.igate.bias.normal_(0.0, 0.1)
    def _heads(self, t):
        B, S, _ = t.shape
        return t.view(B, S, self.num_heads, -1).transpose(1, 2)   # (B, NH, S, DH)
    def forward(self, x):
        B, S, _ = x.shape
        x_inner = self.proj_up(x)
        x_mlstm, z = torch.split(x_inner, split_size_or_sections=self.inner, dim=-1)
        x_mlstm_conv_act = self.conv_act_fn(self.conv1d(x_mlstm))
        q, k, v = self.q_proj(x_mlstm_conv_act), self.k_proj(x_mlstm_conv_act), self.v_proj(x_mlstm)
        if_gate_input = torch.cat([q, k, v], dim=-1)
        igate_preact = self.igate(if_gate_input).transpose(-1, -2).unsqueeze(-1)   # (B, NH, S, 1)
        fgate_preact = self.fgate(if_gate_input).transpose(-1, -2).unsqueeze(-1)
        h_state = parallel_stabilized_simple(self._heads(q), self._heads(k), self._heads(v), igate_preact,
                                             fgate_preact, lower_triangular_matrix=self.causal_mask[:S, :S])
        h_state_norm = self.outnorm(h_state)
        h_state_norm = h_state_norm + (self.learnable_skip * x_mlstm_conv_act)
        return self.proj_down(h_state_norm * F.silu(z))
    def step(self, x, mlstm_state, conv_state):
        """One token: x (B, 1, D); conv_state the last conv_kernel inputs (B, K, inner)."""
        B = x.shape[0]
        x_mlstm, z = torch.split(self.proj_up(x), split_size_or_sections=self.inner, dim=-1)
        conv_state = torch.cat([conv_state[:, 1:], x_mlstm], dim=1)
        conv = (conv_state * self.conv1d.conv.weight[:, 0].T.unsqueeze(0)).sum(1, keepdim=True) + self.conv1d.conv.bias
        x_conv = self.conv_act_fn(conv)
        q, k, v = self.q_proj(x_conv), self.k_proj(x_conv), self.v_proj(x_mlstm)
        g_in = torch.cat([q, k, v], dim=-1)
        ig, fg = self.igate(g_in).view(B, self.num_heads, 1, 1), self.fgate(g_in).view(B, self.num_heads, 1, 1)
        h, mlstm_state = recurrent_step_stabilized_simple(*mlstm_state, self._heads(q), self._heads(k),
                                                          self._heads(v), ig, fg)
        h = self.outnorm(h) + self.learnable_skip * x_conv
        return self.proj_down(h * F.silu(z)), mlstm_state, conv_state
class xLSTMLM(nn.Module):
    def __init__(self, vocab, dim=16, num_blocks=2, num_heads=2):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, dim)
        self.norms = nn.ModuleList([nn.LayerNorm(dim) for _ in range(num_blocks)])
        self.blocks = nn.ModuleList([mLSTMLayer(dim, num_heads) for _ in range(num_blocks)])
        self.post_blocks_norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
    def forward(self, idx):
        x = self.token_embedding(idx)
        for norm, block in zip(self.norms, self.blocks):
            x = x + block(norm(x))
        return self.lm_head(self.post_blocks_norm(x))
    def init_state(self, B):
        states = []
        for block in self.blocks:
            NH, DH = block.num_heads, block.inner // block.num_heads
            states.append(((torch.zeros(B, NH, DH, DH), torch.zeros(B, NH, DH, 1), torch.zeros(B, NH, 1, 1)),
                           torch.zeros(B, block.conv1d.pad + 1, block.inner)))
        return states
    def step(self, idx, states):
        x = self.token_embedding(idx)
        new = []
        for norm, block, (mstate, cstate) in zip(self.norms, self.blocks, states):
            y, mstate, cstate = block.step(norm(x), mstate, cstate)
            x = x + y
            new.append((mstate, cstate))
        return self.lm_head(self.post_blocks_norm(x)), new
text = "the quick brown fox jumps over the lazy dog. " * 8
chars = sorted(set(text)); stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
model = xLSTMLM(len(chars)); sync(model)
net, step_fn = comp(model), comp(model.step)
decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embedding" not in n]
no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embedding" not in n)]
optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                              lr=3e-3, betas=(0.9, 0.95))
r = np.random.default_rng(0)
LOSSES = []
for it in range(6):
    ix = r.integers(0, len(data) - 25, 8)
    x = torch.stack([data[i:i + 24] for i in ix]); y = torch.stack([data[i + 1:i + 25] for i in ix])
    logits = net(x)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    LOSSES += [loss.item(), norm.item()]
model.eval()
with torch.no_grad():   # the recurrent form gives the parallel form's logits; then greedy decoding
    prompt = data[:10].unsqueeze(0)
    states = model.init_state(1)
    for t in range(prompt.size(1)):
        step_logits, states = step_fn(prompt[:, t:t + 1], states)
    par_logits = net(prompt)[:, -1:]
    LOSSES.append((step_logits - par_logits).abs().max().item() < 1e-4)
    out = []
    tok = step_logits.argmax(-1)
    for _ in range(8):
        out.append(int(tok))
        step_logits, states = step_fn(tok, states)
        tok = step_logits.argmax(-1)
    LOSSES += out + [step_logits.logsumexp(-1).item(), states[0][0][2].sum().item()]
