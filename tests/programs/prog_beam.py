from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# a GRU encoder-decoder with Luong attention trained by teacher forcing on a reversal task,
# then decoded by batched beam search as the NMT toolkits write it: beams flattened into the
# batch (batch * beam rows), log_softmax scores added to each beam's running score, topk
# over beam * vocab of each sentence, the source beam by floor division and the token by
# remainder, hidden states and the attention's projected memory reordered by index_select
# with flat offsets, finished beams masked to extend only by EOS at no cost, and the best
# hypothesis picked by GNMT's length penalty ((5 + len) / 6) ** alpha
PAD, BOS, EOS, V = 0, 1, 2, 24
class Encoder(nn.Module):
    def __init__(self, vocab, emb, hid):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.rnn = nn.GRU(emb, hid, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hid, hid)
    def forward(self, src):
        outputs, hidden = self.rnn(self.embedding(src))
        hidden = torch.tanh(self.fc(torch.cat((hidden[-2], hidden[-1]), dim=1)))
        return outputs, hidden.unsqueeze(0)
class Decoder(nn.Module):
    def __init__(self, vocab, emb, hid):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.rnn = nn.GRU(emb + hid, hid, batch_first=True)
        self.attn_proj = nn.Linear(2 * hid, hid, bias=False)
        self.out = nn.Linear(2 * hid, vocab)
    def project(self, enc_out):
        return self.attn_proj(enc_out)
    def forward(self, token, hidden, context, keys, src_mask):
        emb = self.embedding(token).unsqueeze(1)                       # (N, 1, E)
        output, hidden = self.rnn(torch.cat([emb, context.unsqueeze(1)], dim=-1), hidden)
        scores = torch.bmm(keys, output.transpose(1, 2)).squeeze(2)    # (N, S)
        scores = scores.masked_fill(~src_mask, float("-inf"))
        attn = F.softmax(scores, dim=-1)
        context = torch.bmm(attn.unsqueeze(1), keys).squeeze(1)        # (N, H)
        logits = self.out(torch.cat([output.squeeze(1), context], dim=-1))
        return logits, hidden, context
def make_batch(r, n):
    lens = r.integers(4, 9, size=n)
    S = int(lens.max())
    src = np.full((n, S), PAD); tgt = np.full((n, S + 2), PAD)
    for i, l in enumerate(lens):
        seq = r.integers(3, V, size=l)
        src[i, :l] = seq
        tgt[i, 0] = BOS; tgt[i, 1:l + 1] = seq[::-1]; tgt[i, l + 1] = EOS
    return torch.from_numpy(src), torch.from_numpy(tgt)
enc, dec = Encoder(V, 16, 32), Decoder(V, 16, 32); sync(enc, dec)
enc_fwd, dec_fwd = comp(enc), comp(dec)
opt = torch.optim.Adam(list(enc.parameters()) + list(dec.parameters()), lr=1e-2)
r = np.random.default_rng(0)
LOSSES = []
for it in range(40):
    src, tgt = make_batch(r, 32)
    enc_out, hidden = enc_fwd(src)
    keys, src_mask = dec.project(enc_out), src != PAD
    context = torch.zeros(src.size(0), 32)
    loss = 0.0
    for t in range(tgt.size(1) - 1):
        logits, hidden, context = dec_fwd(tgt[:, t], hidden, context, keys, src_mask)
        loss = loss + F.cross_entropy(logits, tgt[:, t + 1], ignore_index=PAD)
    loss = loss / (tgt.size(1) - 1)
    opt.zero_grad(); loss.backward()
    torch.nn.utils.clip_grad_norm_(list(enc.parameters()) + list(dec.parameters()), 1.0)
    opt.step()
    if it % 8 == 7:
        LOSSES.append(loss.item())
@torch.no_grad()
def beam_search(src, beam_size=4, max_len=12, alpha=0.6):
    B = src.size(0)
    enc_out, hidden = enc_fwd(src)
    keys, src_mask = dec.project(enc_out), src != PAD
    # expand every sentence to beam_size rows: (B * beam, ...)
    expand = torch.arange(B).view(-1, 1).repeat(1, beam_size).view(-1)
    keys, src_mask = keys.index_select(0, expand), src_mask.index_select(0, expand)
    hidden = hidden.index_select(1, expand)
    context = torch.zeros(B * beam_size, keys.size(-1))
    tokens = torch.full((B * beam_size, 1), BOS, dtype=torch.long)
    scores = torch.zeros(B, beam_size)
    scores[:, 1:] = float("-inf")     # all beams start equal: keep one alive
    scores = scores.view(-1)
    finished = torch.zeros(B * beam_size, dtype=torch.bool)
    lengths = torch.zeros(B * beam_size)
    offsets = (torch.arange(B) * beam_size).unsqueeze(1)
    eos_only = torch.full((V,), float("-inf")); eos_only[EOS] = 0.0
    for step in range(max_len):
        logits, hidden, context = dec_fwd(tokens[:, -1], hidden, context, keys, src_mask)
        logp = F.log_softmax(logits, dim=-1)
        logp = torch.where(finished.unsqueeze(1), eos_only.unsqueeze(0), logp)
        cand = (scores.unsqueeze(1) + logp).view(B, beam_size * V)
        top_scores, top_ids = cand.topk(beam_size, dim=1)
        beam_ids = torch.div(top_ids, V, rounding_mode="floor")
        token_ids = top_ids % V
        select = (offsets + beam_ids).view(-1)
        hidden = hidden.index_select(1, select)
        context = context.index_select(0, select)
        tokens = torch.cat([tokens.index_select(0, select), token_ids.view(-1, 1)], dim=1)
        was_finished = finished.gather(0, select)
        lengths = lengths.gather(0, select) + (~was_finished).float()
        finished = was_finished | (token_ids.view(-1) == EOS)
        scores = top_scores.view(-1)
        if finished.all():
            break
    penalty = ((5.0 + lengths) / 6.0).pow(alpha)
    normed = (scores / penalty).view(B, beam_size)
    best = normed.argmax(dim=1)
    best_tokens = tokens.view(B, beam_size, -1)[torch.arange(B), best]
    return best_tokens, normed.gather(1, best.unsqueeze(1)).squeeze(1), tokens.size(1)
enc.eval(); dec.eval()
src, tgt = make_batch(r, 5)
best, best_scores, steps = beam_search(src)
LOSSES += best_scores.tolist() + best.float().flatten().tolist() + [float(steps)]
best1, _, _ = beam_search(src, beam_size=1)   # beam 1 is greedy decoding
with torch.no_grad():
    enc_out, hidden = enc_fwd(src)
    keys, mask = dec.project(enc_out), src != PAD
    tok, context, greedy = torch.full((5,), BOS), torch.zeros(5, 32), []
    for _ in range(best1.size(1) - 1):
        logits, hidden, context = dec_fwd(tok, hidden, context, keys, mask)
        tok = logits.argmax(-1); greedy.append(tok)
greedy = torch.stack(greedy, 1)
done = (best1[:, 1:] == EOS).cumsum(1) - (best1[:, 1:] == EOS).long() > 0   # after the first EOS
assert torch.equal(best1[:, 1:][~done], greedy[~done]), (best1, greedy)
