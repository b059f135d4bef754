"""Batched beam search over a GRU encoder-decoder with Luong attention, as the NMT
toolkits write it.

A bidirectional GRU encoder (vocabulary 1000, width 128) and a GRU decoder whose input is
the token's embedding and the last attention context. A step decodes 16 sentences of 20
tokens with beam 5 under ``torch.no_grad``: the beams flattened into the batch (80 rows),
``log_softmax`` added to each beam's score, ``topk`` over beam * vocabulary per sentence,
source beams by floor division and tokens by remainder, hidden states and contexts
reordered by ``index_select``, finished beams extended only by EOS at no cost, 24 steps
at most, the best hypothesis by GNMT's length penalty. The step's "loss": the mean of
the best normalized scores. Compiled: the encoder and the decoder step.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "beam"
VOCAB, EMB, HID, BATCH, SRC, BEAM, MAX_LEN = 1000, 64, 128, 16, 20, 5, 24
PAD, BOS, EOS = 0, 1, 2


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, EMB, padding_idx=PAD)
        self.rnn = nn.GRU(EMB, HID, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * HID, HID)
        self.attn_proj = nn.Linear(2 * HID, HID, bias=False)

    def forward(self, src):
        outputs, hidden = self.rnn(self.embedding(src))
        hidden = torch.tanh(self.fc(torch.cat((hidden[-2], hidden[-1]), dim=1)))
        return self.attn_proj(outputs), hidden.unsqueeze(0)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, EMB, padding_idx=PAD)
        self.rnn = nn.GRU(EMB + HID, HID, batch_first=True)
        self.out = nn.Linear(2 * HID, VOCAB)

    def forward(self, token, hidden, context, keys, src_mask):
        emb = self.embedding(token).unsqueeze(1)
        output, hidden = self.rnn(torch.cat([emb, context.unsqueeze(1)], dim=-1), hidden)
        scores = torch.bmm(keys, output.transpose(1, 2)).squeeze(2)
        attn = F.softmax(scores.masked_fill(~src_mask, float("-inf")), dim=-1)
        context = torch.bmm(attn.unsqueeze(1), keys).squeeze(1)
        return self.out(torch.cat([output.squeeze(1), context], dim=-1)), hidden, context


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        lens = r.integers(SRC // 2, SRC + 1, BATCH)
        src = r.integers(3, VOCAB, (BATCH, SRC))
        src[lens[:, None] <= np.arange(SRC)[None]] = PAD
        self.src = torch.from_numpy(src)
        self.enc, self.dec = Encoder(), Decoder()
        load_params(NAME, self.enc, self.dec)
        self.enc.eval(), self.dec.eval()
        self.enc_fwd, self.dec_fwd = compile(self.enc), compile(self.dec)

    @torch.no_grad()
    def step(self) -> float:
        src, B = self.src, BATCH
        keys, hidden = self.enc_fwd(src)
        expand = torch.arange(B).view(-1, 1).repeat(1, BEAM).view(-1)
        keys, src_mask = keys.index_select(0, expand), (src != PAD).index_select(0, expand)
        hidden = hidden.index_select(1, expand)
        context = torch.zeros(B * BEAM, HID)
        tokens = torch.full((B * BEAM, 1), BOS, dtype=torch.long)
        scores = torch.zeros(B, BEAM)
        scores[:, 1:] = float("-inf")
        scores = scores.view(-1)
        finished = torch.zeros(B * BEAM, dtype=torch.bool)
        lengths = torch.zeros(B * BEAM)
        offsets = (torch.arange(B) * BEAM).unsqueeze(1)
        eos_only = torch.full((VOCAB,), float("-inf"))
        eos_only[EOS] = 0.0
        for _ in range(MAX_LEN):
            logits, hidden, context = self.dec_fwd(tokens[:, -1], hidden, context, keys, src_mask)
            logp = torch.where(finished.unsqueeze(1), eos_only.unsqueeze(0), F.log_softmax(logits, dim=-1))
            top_scores, top_ids = (scores.unsqueeze(1) + logp).view(B, BEAM * VOCAB).topk(BEAM, dim=1)
            beam_ids, token_ids = torch.div(top_ids, VOCAB, rounding_mode="floor"), top_ids % VOCAB
            select = (offsets + beam_ids).view(-1)
            hidden, context = hidden.index_select(1, select), context.index_select(0, select)
            tokens = torch.cat([tokens.index_select(0, select), token_ids.view(-1, 1)], dim=1)
            was_finished = finished.gather(0, select)
            lengths = lengths.gather(0, select) + (~was_finished).float()
            finished = was_finished | (token_ids.view(-1) == EOS)
            scores = top_scores.view(-1)
            if finished.all():
                break
        normed = (scores / ((5.0 + lengths) / 6.0).pow(0.6)).view(B, BEAM)
        return normed.max(dim=1).values.mean().item()
