from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# BART-style denoising pretraining (fairseq's DenoisingDataset, HF's BartForConditionalGeneration
# shapes): documents of full-stop-ended sentences noised in numpy by sentence permutation and
# text infilling (Poisson(3) span lengths, each span one <mask>, zero-length spans inserting
# one), padded batches of changing length; an nn.Transformer (batch_first, GELU, post-norm)
# with learned positions offset by 2, a layernorm_embedding, key padding masks for source,
# target and memory and generate_square_subsequent_mask; labels with -100 at padding,
# decoder inputs by shift_tokens_right, an LM head tied to the embedding plus a
# final_logits_bias buffer; label-smoothed cross-entropy, AdamW under a linear warmup LambdaLR,
# then greedy reconstruction under no_grad with the source encoded once
BOS, PAD, EOS, MASK, STOP = 0, 1, 2, 3, 4
VOCAB = 40
def shift_tokens_right(input_ids, pad_token_id, decoder_start_token_id):
    shifted_input_ids = input_ids.new_zeros(input_ids.shape)
    shifted_input_ids[:, 1:] = input_ids[:, :-1].clone()
    shifted_input_ids[:, 0] = decoder_start_token_id
    shifted_input_ids.masked_fill_(shifted_input_ids == -100, pad_token_id)
    return shifted_input_ids
class LearnedPositionalEmbedding(nn.Embedding):
    def __init__(self, num_embeddings, embedding_dim):
        self.offset = 2
        super().__init__(num_embeddings + self.offset, embedding_dim)
    def forward(self, input_ids, past_key_values_length=0):
        bsz, seq_len = input_ids.shape[:2]
        positions = torch.arange(past_key_values_length, past_key_values_length + seq_len, dtype=torch.long,
                                 device=self.weight.device).expand(bsz, -1)
        return super().forward(positions + self.offset)
class BartDenoiser(nn.Module):
    def __init__(self, d_model=32, heads=4, layers=2, ffn=64, max_pos=64):
        super().__init__()
        self.shared = nn.Embedding(VOCAB, d_model, padding_idx=PAD)
        self.embed_positions = LearnedPositionalEmbedding(max_pos, d_model)
        self.layernorm_embedding = nn.LayerNorm(d_model)
        self.embed_scale = math.sqrt(d_model)
        self.transformer = nn.Transformer(d_model, heads, layers, layers, ffn, dropout=0.0, activation="gelu",
                                          batch_first=True)
        self.lm_head = nn.Linear(d_model, VOCAB, bias=False)
        self.lm_head.weight = self.shared.weight
        self.register_buffer("final_logits_bias", torch.zeros((1, VOCAB)))
    def embed(self, ids):
        return self.layernorm_embedding(self.shared(ids) * self.embed_scale + self.embed_positions(ids))
    def encode(self, input_ids, attention_mask):
        return self.transformer.encoder(self.embed(input_ids), src_key_padding_mask=attention_mask == 0)
    def decode(self, decoder_input_ids, memory, attention_mask):
        T = decoder_input_ids.size(1)
        causal = nn.Transformer.generate_square_subsequent_mask(T)
        h = self.transformer.decoder(self.embed(decoder_input_ids), memory, tgt_mask=causal,
                                     tgt_key_padding_mask=decoder_input_ids == PAD,
                                     memory_key_padding_mask=attention_mask == 0, tgt_is_causal=True)
        return self.lm_head(h) + self.final_logits_bias
    def forward(self, input_ids, attention_mask, labels):
        decoder_input_ids = shift_tokens_right(labels, PAD, EOS)
        return self.decode(decoder_input_ids, self.encode(input_ids, attention_mask), attention_mask)
r = np.random.default_rng(0)
def document():
    sents = [list(r.integers(5, VOCAB, size=r.integers(3, 7))) + [STOP] for _ in range(r.integers(2, 4))]
    return sents
def permute_sentences(sents):
    return [sents[i] for i in r.permutation(len(sents))]
def add_whole_word_mask(tokens, p=0.3, poisson_lambda=3.0):
    tokens, n = list(tokens), len(tokens)
    num_to_mask = int(math.ceil(n * p))
    out, i, masked = [], 0, 0
    starts = set(r.choice(n, size=max(1, num_to_mask // 3), replace=False).tolist())
    while i < n:
        if i in starts and masked < num_to_mask:
            span = int(r.poisson(poisson_lambda))
            out.append(MASK)
            if span == 0:           # an inserted mask: the token stays
                out.append(tokens[i]); i += 1
            else:
                i += span; masked += span
        else:
            out.append(tokens[i]); i += 1
    return out
def make_batch(bsz):
    srcs, tgts = [], []
    for _ in range(bsz):
        sents = document()
        target = [BOS] + [t for s in sents for t in s] + [EOS]
        source = [BOS] + add_whole_word_mask([t for s in permute_sentences(sents) for t in s]) + [EOS]
        srcs.append(source); tgts.append(target)
    S, T = max(map(len, srcs)), max(map(len, tgts))
    input_ids = torch.full((bsz, S), PAD, dtype=torch.long)
    attention_mask = torch.zeros(bsz, S, dtype=torch.long)
    labels = torch.full((bsz, T), -100, dtype=torch.long)
    for i, (s, t) in enumerate(zip(srcs, tgts)):
        input_ids[i, :len(s)] = torch.tensor(s); attention_mask[i, :len(s)] = 1
        labels[i, :len(t)] = torch.tensor(t)
    return input_ids, attention_mask, labels
model = BartDenoiser(); sync(model)
fwd = comp(model, dynamic=True)
opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 3))
loss_fct = nn.CrossEntropyLoss(ignore_index=-100, label_smoothing=0.1)
LOSSES = []
for step in range(6):
    input_ids, attention_mask, labels = make_batch(6)
    logits = fwd(input_ids, attention_mask, labels)
    loss = loss_fct(logits.view(-1, VOCAB), labels.view(-1))
    opt.zero_grad(); loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step(); sched.step()
    LOSSES.append(loss.item())
model.eval()
with torch.no_grad():
    input_ids, attention_mask, labels = make_batch(3)
    memory = model.encode(input_ids, attention_mask)
    out = torch.full((3, 1), EOS, dtype=torch.long)
    for _ in range(8):
        logits = model.decode(out, memory, attention_mask)
        out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    LOSSES += [logits.log_softmax(-1).max(-1).values.mean().item()] + [float(t) for t in out[0].tolist()]
