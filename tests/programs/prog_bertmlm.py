from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR
torch.manual_seed(0)
# BERT masked-LM pretraining as HuggingFace writes it: DataCollatorForLanguageModeling's
# 80/10/10 masking (torch.bernoulli on torch.full probability matrices, torch.randint
# replacement words, -100 labels on a clone), token-type and learned position embeddings,
# the extended attention mask (1 - mask) * finfo.min, a prediction head whose decoder is
# tied to the word embeddings, AdamW with a no-decay group and
# get_linear_schedule_with_warmup. The masking's draws differ between random generators,
# so training feeds it 0/1 probability matrices from numpy (bernoulli of 0 or 1 is fixed);
# one call on the generator's own draws is checked for what it must give
class BertConfig:
    vocab_size = 64; hidden_size = 32; num_hidden_layers = 2; num_attention_heads = 4
    intermediate_size = 64; max_position_embeddings = 24; type_vocab_size = 2
    layer_norm_eps = 1e-12; hidden_dropout_prob = 0.0; attention_probs_dropout_prob = 0.0
    pad_token_id = 0; cls_token_id = 1; sep_token_id = 2; mask_token_id = 3
class BertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.register_buffer("position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(self.position_ids.size(), dtype=torch.long), persistent=False)
    def forward(self, input_ids=None, token_type_ids=None, position_ids=None):
        input_shape = input_ids.size()
        seq_length = input_shape[1]
        if position_ids is None:
            position_ids = self.position_ids[:, :seq_length]
        if token_type_ids is None:
            token_type_ids = self.token_type_ids[:, :seq_length].expand(input_shape[0], seq_length)
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings += self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))
class BertSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = int(config.hidden_size / config.num_attention_heads)
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)
    def forward(self, hidden_states, attention_mask=None):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            attention_scores = attention_scores + attention_mask
        attention_probs = self.dropout(nn.functional.softmax(attention_scores, dim=-1))
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (self.all_head_size,))
class BertSelfOutput(nn.Module):
    def __init__(self, config, d_in):
        super().__init__()
        self.dense = nn.Linear(d_in, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)
class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.attention_output = BertSelfOutput(config, config.hidden_size)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = BertSelfOutput(config, config.intermediate_size)
    def forward(self, hidden_states, attention_mask=None):
        attention_output = self.attention_output(self.attention(hidden_states, attention_mask), hidden_states)
        intermediate_output = F.gelu(self.intermediate(attention_output))
        return self.output(intermediate_output, attention_output)
class BertLMPredictionHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.decoder.bias = self.bias
    def forward(self, hidden_states):
        hidden_states = self.LayerNorm(F.gelu(self.dense(hidden_states)))
        return self.decoder(hidden_states)
class BertForMaskedLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])
        self.cls = BertLMPredictionHead(config)
        self.apply(self._init_weights)
        self.tie_weights()
    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(mean=0.0, std=0.02)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(mean=0.0, std=0.02)
            if module.padding_idx is not None:
                module.weight.data[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)
    def get_input_embeddings(self):
        return self.embeddings.word_embeddings
    def get_output_embeddings(self):
        return self.cls.decoder
    def tie_weights(self):
        self.get_output_embeddings().weight = self.get_input_embeddings().weight
    def get_extended_attention_mask(self, attention_mask, dtype):
        extended_attention_mask = attention_mask[:, None, None, :].to(dtype=dtype)
        return (1.0 - extended_attention_mask) * torch.finfo(dtype).min
    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
        hidden_states = self.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
        if attention_mask is None:
            attention_mask = torch.ones(input_ids.shape, device=input_ids.device)
        extended_attention_mask = self.get_extended_attention_mask(attention_mask, hidden_states.dtype)
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, extended_attention_mask)
        prediction_scores = self.cls(hidden_states)
        masked_lm_loss = None
        if labels is not None:
            loss_fct = nn.CrossEntropyLoss()  # -100 index = padding token
            masked_lm_loss = loss_fct(prediction_scores.view(-1, self.config.vocab_size), labels.view(-1))
        return masked_lm_loss, prediction_scores
def torch_mask_tokens(inputs, special_tokens_mask, config, mlm_probability=0.15, draws=None):
    """DataCollatorForLanguageModeling.torch_mask_tokens; `draws` (three uniform arrays and
    replacement words from numpy) fixes its random choices, as a seeded generator would."""
    labels = inputs.clone()
    probability_matrix = torch.full(labels.shape, mlm_probability)
    if draws is not None:
        probability_matrix = torch.from_numpy((draws[0] < mlm_probability).astype(np.float32))
    probability_matrix.masked_fill_(special_tokens_mask, value=0.0)
    masked_indices = torch.bernoulli(probability_matrix).bool()
    labels[~masked_indices] = -100  # We only compute loss on masked tokens
    p_replace = torch.full(labels.shape, 0.8) if draws is None else torch.from_numpy((draws[1] < 0.8).astype(np.float32))
    indices_replaced = torch.bernoulli(p_replace).bool() & masked_indices
    inputs[indices_replaced] = config.mask_token_id
    p_random = torch.full(labels.shape, 0.5) if draws is None else torch.from_numpy((draws[2] < 0.5).astype(np.float32))
    indices_random = torch.bernoulli(p_random).bool() & masked_indices & ~indices_replaced
    random_words = torch.randint(config.vocab_size, labels.shape, dtype=torch.long)
    if draws is not None:
        random_words = torch.from_numpy(draws[3])
    inputs[indices_random] = random_words[indices_random]
    return inputs, labels
def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps, last_epoch=-1):
    def lr_lambda(current_step: int):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))
    return LambdaLR(optimizer, lr_lambda, last_epoch)
config = BertConfig()
model = BertForMaskedLM(config); sync(model)
model.tie_weights()   # loading replaced the decoder's tensor: tie again, as from_pretrained does
LOSSES = [float(model.cls.decoder.weight is model.embeddings.word_embeddings.weight)]
no_decay = ["bias", "LayerNorm.weight"]
optimizer_grouped_parameters = [
    {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
    {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
]
optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=2e-3, betas=(0.9, 0.999), eps=1e-6)
scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=2, num_training_steps=8)
r = np.random.default_rng(0)
def make_batch(bs=6, T=16):
    lens = r.integers(6, T + 1, bs)
    ids = np.zeros((bs, T), np.int64); tt = np.zeros((bs, T), np.int64)
    for i, n in enumerate(lens):
        half = n // 2
        ids[i, :n] = r.integers(4, 20, n) * (1 + (np.arange(n) % 3 == 0))   # a learnable pattern
        ids[i, 0], ids[i, half], ids[i, n - 1] = config.cls_token_id, config.sep_token_id, config.sep_token_id
        tt[i, half + 1:n] = 1
    mask = (np.arange(T)[None] < lens[:, None]).astype(np.int64)
    special = torch.from_numpy((ids <= config.mask_token_id))
    draws = [r.random((bs, T)) for _ in range(3)] + [r.integers(0, config.vocab_size, (bs, T))]
    inputs, labels = torch_mask_tokens(torch.from_numpy(ids), special, config, draws=draws)
    return {"input_ids": inputs, "attention_mask": torch.from_numpy(mask), "token_type_ids": torch.from_numpy(tt),
            "labels": labels}
fwd = comp(model)
model.train()
for step in range(8):
    batch = make_batch()
    loss, _ = fwd(**batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step(); scheduler.step(); optimizer.zero_grad()
    LOSSES += [loss.item(), scheduler.get_last_lr()[0], int((batch["labels"] != -100).sum())]
# the tie holds through training: one tensor, updated once per step
LOSSES.append(float(model.cls.decoder.weight.data_ptr() == model.embeddings.word_embeddings.weight.data_ptr()))
model.eval()
with torch.no_grad():
    batch = make_batch()
    loss, scores = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], batch["labels"])
    LOSSES += [loss.item(), scores.argmax(-1).float().mean().item()]
# the collator on the generator's own draws: labels -100 exactly where the input is kept
# unmasked or special, about 15% masked, masked tokens the mask id about 80% of the time
ids = torch.randint(4, config.vocab_size, (64, 64))
special = torch.zeros(ids.shape, dtype=torch.bool); special[:, 0] = True
inputs, labels = torch_mask_tokens(ids.clone(), special, config)
masked = labels != -100
LOSSES += [float(bool((labels[masked] == ids[masked]).all())), float(bool((inputs[~masked] == ids[~masked]).all())),
           float(bool((~masked[:, 0]).all())), float(abs(masked.float().mean().item() - 0.15) < 0.03),
           float(abs((inputs[masked] == config.mask_token_id).float().mean().item() - 0.8) < 0.1)]
