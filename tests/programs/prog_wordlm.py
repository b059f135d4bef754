from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""
    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super(RNNModel, self).__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ['LSTM', 'GRU']:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            nonlinearity = {'RNN_TANH': 'tanh', 'RNN_RELU': 'relu'}[rnn_type]
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            if nhid != ninp:
                raise ValueError('When using the tied flag, nhid must be equal to emsize')
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.rnn_type = rnn_type; self.nhid = nhid; self.nlayers = nlayers
    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)
    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden
    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == 'LSTM':
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))
        else:
            return weight.new_zeros(self.nlayers, bsz, self.nhid)
def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    data = data.view(bsz, -1).t().contiguous()
    return data.to(device)
def get_batch(source, i, bptt=8):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i+seq_len]
    target = source[i+1:i+1+seq_len].view(-1)
    return data, target
def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    else:
        return tuple(repackage_hidden(v) for v in h)
r = np.random.default_rng(0)
ntokens = 40
corpus = torch.tensor(r.integers(0, ntokens, 600), dtype=torch.long)
train_data = batchify(corpus[:480], 6); val_data = batchify(corpus[480:], 4)
model = RNNModel('LSTM', ntokens, 24, 24, 2, dropout=0.0, tie_weights=True).to(device)
gru = RNNModel('GRU', ntokens, 16, 20, 1, dropout=0.0)
sync(model, gru)
criterion = nn.NLLLoss()
LOSSES = []
def evaluate(data_source, m, bsz):
    m.eval()
    total_loss = 0.
    hidden = m.init_hidden(bsz)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, 8):
            data, targets = get_batch(data_source, i)
            output, hidden = m(data, hidden)
            hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)
def train(m, lr, clip=0.25):
    m.train()
    total_loss = 0.
    hidden = m.init_hidden(6)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, 8)):
        data, targets = get_batch(train_data, i)
        m.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = fwd(data, hidden) if m is model else m(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), clip)
        for p in m.parameters():
            p.data.add_(p.grad, alpha=-lr)
        total_loss += loss.item()
        if batch < 3:
            LOSSES.append(loss.item())
    return total_loss
fwd = comp(model)
lr = 20.0; best_val_loss = None
for epoch in range(1, 3):
    train(model, lr)
    val_loss = evaluate(val_data, model, 4)
    LOSSES.append(val_loss); LOSSES.append(math.exp(min(val_loss, 50)))
    if not best_val_loss or val_loss < best_val_loss:
        best_val_loss = val_loss
    else:
        lr /= 4.0
opt = torch.optim.SGD(gru.parameters(), lr=1.0, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
hidden = gru.init_hidden(6)
for i in range(0, 24, 8):
    data, targets = get_batch(train_data, i)
    hidden = repackage_hidden(hidden)
    output, hidden = gru(data, hidden)
    loss = criterion(output, targets)
    opt.zero_grad(); loss.backward()
    nn.utils.clip_grad_norm_(gru.parameters(), 0.5, norm_type=2.0)
    opt.step(); sched.step()
    LOSSES.append(loss.item())
LOSSES.append(sched.get_last_lr()[0])
assert model.decoder.weight is model.encoder.weight
