from _harness import sync  # the runner: weights shared with the PyTorch run
import numpy as np, torch, torch.nn as nn
torch.manual_seed(0)
class RNNModel(nn.Module):
    def __init__(s, ntoken, ninp, nhid, nlayers, rnn_type="LSTM", dropout=0.0, tie=True):
        super().__init__()
        s.drop = nn.Dropout(dropout); s.encoder = nn.Embedding(ntoken, ninp)
        s.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        s.decoder = nn.Linear(nhid, ntoken)
        if tie: s.decoder.weight = s.encoder.weight
        s.rnn_type, s.nhid, s.nlayers = rnn_type, nhid, nlayers
        initrange = 0.1; nn.init.uniform_(s.encoder.weight, -initrange, initrange); nn.init.zeros_(s.decoder.bias)
    def forward(s, input, hidden):
        emb = s.drop(s.encoder(input)); output, hidden = s.rnn(emb, hidden)
        output = s.drop(output); decoded = s.decoder(output).view(-1, s.decoder.out_features)
        return nn.functional.log_softmax(decoded, dim=1), hidden
    def init_hidden(s, bsz):
        weight = next(s.parameters())
        if s.rnn_type == 'LSTM': return (weight.new_zeros(s.nlayers, bsz, s.nhid), weight.new_zeros(s.nlayers, bsz, s.nhid))
        return weight.new_zeros(s.nlayers, bsz, s.nhid)
def repackage_hidden(h):
    if isinstance(h, torch.Tensor): return h.detach()
    return tuple(repackage_hidden(v) for v in h)
LOSSES = []
r = np.random.default_rng(0)
data = torch.from_numpy(r.integers(0, 30, (60, 4)))
for kind in ("LSTM", "GRU", "RNN_TANH"):
    model = RNNModel(30, 16, 16, 2, kind if kind != "RNN_TANH" else "RNN"); sync(model)
    crit = nn.NLLLoss(); lr = 20
    hidden = model.init_hidden(4)
    for i in range(0, 30, 10):
        x, y = data[i:i + 10], data[i + 1:i + 11].reshape(-1)
        model.zero_grad(); hidden = repackage_hidden(hidden)
        out, hidden = model(x, hidden); loss = crit(out, y); loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters(): p.data.add_(p.grad, alpha=-lr)
        LOSSES.append(loss.item())
    with torch.no_grad():
        inp = torch.randint(30, (1, 1), dtype=torch.long); h = model.init_hidden(1)
        o, h = model(inp, h); wi = torch.multinomial(o.squeeze().div(1.0).exp().cpu(), 1)[0]
