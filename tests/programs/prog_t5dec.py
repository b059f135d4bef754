from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# A T5 encoder-decoder as transformers' modeling_t5.py writes it, decoding greedily from a
# cache under torch.inference_mode: unidirectional relative position buckets for the
# decoder's self-attention (computed for the whole key length, then the last query rows
# kept: position_bias[:, :, -seq_length:, :]), a causal mask in finfo.min added to them,
# cross-attention whose keys and values are projected once from the encoder states and
# kept in the cache tuple (self keys grow by cat), labels shifted right to the decoder's
# start token with -100 for padding, a tied LM head scaled by d_model ** -0.5, Adafactor-
# free AdamW; the encoder and the decoder compiled apart, the decoder dynamic=True
PAD, START, EOS, VOCAB = 0, 0, 1, 12
class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps
    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))
class T5Attention(nn.Module):
    def __init__(self, d_model, n_heads, is_decoder, has_relative_attention_bias=False, num_buckets=8,
                 max_distance=16):
        super().__init__()
        self.is_decoder, self.n_heads, self.d_kv = is_decoder, n_heads, d_model // n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model, bias=False) for _ in range(4))
        self.has_relative_attention_bias = has_relative_attention_bias
        self.num_buckets, self.max_distance = num_buckets, max_distance
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(num_buckets, n_heads)
    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact) / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1))
        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets
    def compute_bias(self, query_length, key_length):
        context_position = torch.arange(query_length, dtype=torch.long)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position
        bucket = self._relative_position_bucket(relative_position, bidirectional=not self.is_decoder,
                                                num_buckets=self.num_buckets, max_distance=self.max_distance)
        values = self.relative_attention_bias(bucket)
        return values.permute([2, 0, 1]).unsqueeze(0)
    def forward(self, hidden_states, mask=None, key_value_states=None, position_bias=None, past_key_value=None):
        batch_size, seq_length = hidden_states.shape[:2]
        real_seq_length = seq_length
        if past_key_value is not None:
            real_seq_length += past_key_value[0].shape[2] if key_value_states is None else 0
        key_length = real_seq_length if key_value_states is None else key_value_states.shape[1]
        def shape(states):
            return states.view(batch_size, -1, self.n_heads, self.d_kv).transpose(1, 2)
        def unshape(states):
            return states.transpose(1, 2).contiguous().view(batch_size, -1, self.n_heads * self.d_kv)
        def project(hidden_states, proj_layer, key_value_states, past_key_value):
            if key_value_states is None:
                hidden_states = shape(proj_layer(hidden_states))
            elif past_key_value is None:
                hidden_states = shape(proj_layer(key_value_states))
            if past_key_value is not None:
                if key_value_states is None:
                    hidden_states = torch.cat([past_key_value, hidden_states], dim=2)
                else:
                    hidden_states = past_key_value
            return hidden_states
        query_states = shape(self.q(hidden_states))
        key_states = project(hidden_states, self.k, key_value_states,
                             past_key_value[0] if past_key_value is not None else None)
        value_states = project(hidden_states, self.v, key_value_states,
                               past_key_value[1] if past_key_value is not None else None)
        scores = torch.matmul(query_states, key_states.transpose(3, 2))
        if position_bias is None:
            if not self.has_relative_attention_bias:
                position_bias = torch.zeros((1, self.n_heads, real_seq_length, key_length), dtype=scores.dtype)
            else:
                position_bias = self.compute_bias(real_seq_length, key_length)
            if past_key_value is not None:
                position_bias = position_bias[:, :, -hidden_states.size(1):, :]
            if mask is not None:
                position_bias = position_bias + mask
        scores += position_bias
        attn_weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        attn_output = self.o(unshape(torch.matmul(attn_weights, value_states)))
        present = (key_states, value_states) if self.is_decoder else None
        return attn_output, present, position_bias
class T5Block(nn.Module):
    def __init__(self, d_model, n_heads, is_decoder, has_bias):
        super().__init__()
        self.is_decoder = is_decoder
        self.ln_self = T5LayerNorm(d_model)
        self.self_attn = T5Attention(d_model, n_heads, is_decoder, has_bias)
        if is_decoder:
            self.ln_cross = T5LayerNorm(d_model)
            self.cross_attn = T5Attention(d_model, n_heads, is_decoder)
        self.ln_ff = T5LayerNorm(d_model)
        self.wi_0, self.wi_1 = nn.Linear(d_model, 2 * d_model, bias=False), nn.Linear(d_model, 2 * d_model, bias=False)
        self.wo = nn.Linear(2 * d_model, d_model, bias=False)
    def forward(self, x, mask, position_bias, enc=None, enc_mask=None, enc_bias=None, past=None):
        self_past, cross_past = (past[:2], past[2:]) if past is not None else (None, None)
        h, present, position_bias = self.self_attn(self.ln_self(x), mask, position_bias=position_bias,
                                                   past_key_value=self_past)
        x = x + h
        if self.is_decoder:
            h, cross_present, enc_bias = self.cross_attn(self.ln_cross(x), enc_mask, key_value_states=enc,
                                                         position_bias=enc_bias, past_key_value=cross_past)
            x = x + h
            present = present + cross_present
        h = self.ln_ff(x)
        x = x + self.wo(F.gelu(self.wi_0(h), approximate="tanh") * self.wi_1(h))
        return x, present, position_bias, enc_bias
class T5Stack(nn.Module):
    def __init__(self, embed_tokens, d_model, n_heads, n_layers, is_decoder):
        super().__init__()
        self.embed_tokens, self.is_decoder = embed_tokens, is_decoder
        self.block = nn.ModuleList([T5Block(d_model, n_heads, is_decoder, i == 0) for i in range(n_layers)])
        self.final_layer_norm = T5LayerNorm(d_model)
    def forward(self, input_ids, attention_mask, encoder_hidden_states=None, encoder_attention_mask=None,
                past_key_values=None):
        x = self.embed_tokens(input_ids)
        batch_size, seq_length = input_ids.shape
        past_length = past_key_values[0][0].shape[2] if past_key_values is not None else 0
        min_value = torch.finfo(x.dtype).min
        if self.is_decoder:
            mask_seq_length = past_length + seq_length
            seq_ids = torch.arange(mask_seq_length)
            causal = seq_ids[None, None, :].repeat(batch_size, mask_seq_length, 1) <= seq_ids[None, :, None]
            causal = causal[:, -seq_length:, :].to(x.dtype)
            ext = (1.0 - causal[:, None, :, :]) * min_value
            enc_ext = (1.0 - encoder_attention_mask[:, None, None, :].to(x.dtype)) * min_value
        else:
            ext = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * min_value
            enc_ext = None
        position_bias, enc_bias, presents = None, None, ()
        for i, block in enumerate(self.block):
            past = past_key_values[i] if past_key_values is not None else None
            x, present, position_bias, enc_bias = block(x, ext, position_bias, encoder_hidden_states, enc_ext,
                                                        enc_bias, past)
            presents = presents + (present,)
        x = self.final_layer_norm(x)
        return (x, presents) if self.is_decoder else x
class T5(nn.Module):
    def __init__(self, d_model=16, n_heads=2, n_layers=2):
        super().__init__()
        self.d_model = d_model
        self.shared = nn.Embedding(VOCAB, d_model)
        self.encoder = T5Stack(self.shared, d_model, n_heads, n_layers, False)
        self.decoder = T5Stack(self.shared, d_model, n_heads, n_layers, True)
    def decode(self, decoder_input_ids, enc, enc_mask, past_key_values=None):
        h, presents = self.decoder(decoder_input_ids, None, enc, enc_mask, past_key_values)
        h = h * (self.d_model ** -0.5)
        return F.linear(h, self.shared.weight), presents
def shift_right(labels):
    shifted = labels.new_zeros(labels.shape)
    shifted[..., 1:] = labels[..., :-1].clone()
    shifted[..., 0] = START
    return shifted.masked_fill(shifted == -100, PAD)
def batch(r, n):
    """Reverse each sequence of 3-6 tokens (ids 2..), then EOS; padded, labels -100."""
    lengths = r.integers(3, 7, n)
    src = np.zeros((n, 6), np.int64)
    labels = np.full((n, 7), -100, np.int64)
    for i, l in enumerate(lengths):
        toks = r.integers(2, VOCAB, l)
        src[i, :l] = toks
        labels[i, :l] = toks[::-1]
        labels[i, l] = EOS
    return torch.from_numpy(src), torch.from_numpy((src != PAD).astype(np.int64)), torch.from_numpy(labels)
model = T5()
sync(model)
encode = comp(model.encoder)
decode = comp(model.decode, dynamic=True)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
r = np.random.default_rng(0)
LOSSES = []
for step in range(3):
    src, src_mask, labels = batch(r, 4)
    enc = encode(src, src_mask)
    logits, _ = decode(shift_right(labels), enc, src_mask)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    LOSSES.append(loss.item())
model.eval()
with torch.inference_mode():
    src, src_mask, labels = batch(r, 3)
    enc = encode(src, src_mask)
    tokens = torch.full((3, 1), START, dtype=torch.long)
    full, _ = decode(tokens, enc, src_mask)
    past = None
    finished = torch.zeros(3, dtype=torch.bool)
    for t in range(6):
        logits, past = decode(tokens[:, -1:], enc, src_mask, past)
        nxt = logits[:, -1].argmax(-1)
        nxt = torch.where(finished, torch.full_like(nxt, PAD), nxt)
        finished |= nxt == EOS
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
        LOSSES += logits[0, -1].tolist()
    full, _ = decode(tokens[:, :-1], enc, src_mask)     # the uncached pass over the same prefix
    LOSSES += [(full[:, -1] - logits[:, -1]).abs().max().item() < 1e-4] + tokens.flatten().tolist()
    LOSSES.append(len(past) * len(past[0]))
