from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch
import torch.nn as nn
from torch import Tensor
from torch.nn import Transformer
torch.manual_seed(0)
DEVICE = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
UNK_IDX, PAD_IDX, BOS_IDX, EOS_IDX = 0, 1, 2, 3
class PositionalEncoding(nn.Module):
    def __init__(self, emb_size: int, dropout: float, maxlen: int = 50):
        super(PositionalEncoding, self).__init__()
        den = torch.exp(- torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        pos_embedding = pos_embedding.unsqueeze(-2)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer('pos_embedding', pos_embedding)
    def forward(self, token_embedding: Tensor):
        return self.dropout(token_embedding + self.pos_embedding[:token_embedding.size(0), :])
class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, emb_size):
        super(TokenEmbedding, self).__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size
    def forward(self, tokens: Tensor):
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)
class Seq2SeqTransformer(nn.Module):
    def __init__(self, num_encoder_layers, num_decoder_layers, emb_size, nhead, src_vocab_size,
                 tgt_vocab_size, dim_feedforward=512, dropout=0.1):
        super(Seq2SeqTransformer, self).__init__()
        self.transformer = Transformer(d_model=emb_size, nhead=nhead, num_encoder_layers=num_encoder_layers,
                                       num_decoder_layers=num_decoder_layers, dim_feedforward=dim_feedforward,
                                       dropout=dropout)
        self.generator = nn.Linear(emb_size, tgt_vocab_size)
        self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
        self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
        self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout)
    def forward(self, src, trg, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, memory_key_padding_mask):
        src_emb = self.positional_encoding(self.src_tok_emb(src))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
        outs = self.transformer(src_emb, tgt_emb, src_mask, tgt_mask, None,
                                src_padding_mask, tgt_padding_mask, memory_key_padding_mask)
        return self.generator(outs)
    def encode(self, src: Tensor, src_mask: Tensor):
        return self.transformer.encoder(self.positional_encoding(self.src_tok_emb(src)), src_mask)
    def decode(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor):
        return self.transformer.decoder(self.positional_encoding(self.tgt_tok_emb(tgt)), memory, tgt_mask)
def generate_square_subsequent_mask(sz):
    mask = (torch.triu(torch.ones((sz, sz), device=DEVICE)) == 1).transpose(0, 1)
    mask = mask.float().masked_fill(mask == 0, float('-inf')).masked_fill(mask == 1, float(0.0))
    return mask
def create_mask(src, tgt):
    src_seq_len = src.shape[0]
    tgt_seq_len = tgt.shape[0]
    tgt_mask = generate_square_subsequent_mask(tgt_seq_len)
    src_mask = torch.zeros((src_seq_len, src_seq_len), device=DEVICE).type(torch.bool)
    src_padding_mask = (src == PAD_IDX).transpose(0, 1)
    tgt_padding_mask = (tgt == PAD_IDX).transpose(0, 1)
    return src_mask, tgt_mask, src_padding_mask, tgt_padding_mask
SRC_V, TGT_V = 30, 28
transformer = Seq2SeqTransformer(2, 2, 32, 4, SRC_V, TGT_V, 64, dropout=0.0)
for p in transformer.parameters():
    if p.dim() > 1:
        nn.init.xavier_uniform_(p)
transformer = transformer.to(DEVICE)
sync(transformer)
loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD_IDX)
optimizer = torch.optim.Adam(transformer.parameters(), lr=0.0001, betas=(0.9, 0.98), eps=1e-9)
r = np.random.default_rng(0)
def batch(n=5):
    srcs, tgts = [], []
    for _ in range(n):
        ls, lt = int(r.integers(3, 9)), int(r.integers(3, 9))
        srcs.append(torch.tensor([BOS_IDX] + list(r.integers(4, SRC_V, ls)) + [EOS_IDX]))
        tgts.append(torch.tensor([BOS_IDX] + list(r.integers(4, TGT_V, lt)) + [EOS_IDX]))
    return (nn.utils.rnn.pad_sequence(srcs, padding_value=PAD_IDX), nn.utils.rnn.pad_sequence(tgts, padding_value=PAD_IDX))
fwd = comp(transformer)
LOSSES = []
transformer.train()
for it in range(3):
    src, tgt = batch()
    src = src.to(DEVICE); tgt = tgt.to(DEVICE)
    tgt_input = tgt[:-1, :]
    src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)
    logits = fwd(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, src_padding_mask)
    optimizer.zero_grad()
    tgt_out = tgt[1:, :]
    loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
    loss.backward()
    optimizer.step()
    LOSSES.append(loss.item())
m1 = Transformer.generate_square_subsequent_mask(5)
m2 = nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float32)
assert bool((m1 == generate_square_subsequent_mask(5)).all()) and m2.dtype == torch.float32
def greedy_decode(model, src, src_mask, max_len, start_symbol):
    src = src.to(DEVICE); src_mask = src_mask.to(DEVICE)
    memory = model.encode(src, src_mask)
    ys = torch.ones(1, 1).fill_(start_symbol).type(torch.long).to(DEVICE)
    for i in range(max_len - 1):
        memory = memory.to(DEVICE)
        tgt_mask = (generate_square_subsequent_mask(ys.size(0)).type(torch.bool)).to(DEVICE)
        out = model.decode(ys, memory, tgt_mask)
        out = out.transpose(0, 1)
        prob = model.generator(out[:, -1])
        _, next_word = torch.max(prob, dim=1)
        next_word = next_word.item()
        ys = torch.cat([ys, torch.ones(1, 1).type_as(src.data).fill_(next_word)], dim=0)
        if next_word == EOS_IDX:
            break
    return ys
transformer.eval()
src = torch.tensor([BOS_IDX, 5, 9, 12, 7, EOS_IDX]).view(-1, 1)
num_tokens = src.shape[0]
src_mask = (torch.zeros(num_tokens, num_tokens)).type(torch.bool)
with torch.no_grad():
    tgt_tokens = greedy_decode(transformer, src, src_mask, max_len=num_tokens + 5, start_symbol=BOS_IDX).flatten()
LOSSES += [float(t) for t in tgt_tokens.tolist()]
# batch_first encoder with a boolean causal mask and key padding, as a classifier uses it
enc_layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True, norm_first=True)
enc = nn.TransformerEncoder(enc_layer, num_layers=2, enable_nested_tensor=False)
sync(enc)
x = torch.from_numpy(r.standard_normal((3, 7, 16)).astype(np.float32))
kpm = torch.tensor([[False] * 7, [False] * 5 + [True] * 2, [False] * 3 + [True] * 4])
causal = nn.Transformer.generate_square_subsequent_mask(7).bool() if False else torch.triu(torch.ones(7, 7, dtype=torch.bool), diagonal=1)
y = enc(x, mask=causal, src_key_padding_mask=kpm)
LOSSES.append(y.masked_fill(kpm.unsqueeze(-1), 0.0).pow(2).mean().item())
