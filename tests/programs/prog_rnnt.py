from _harness import sync, comp  # the runner: weights shared with the PyTorch run; torch.compile
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
# RNN-Transducer (Graves 2012; the "Sequence-to-sequence learning with Transducers" tutorial
# style): an LSTM encoder over features, a prediction network (Embedding + LSTM over the
# blank-prefixed labels), a joint network by broadcasting (B,T,1,H) + (B,1,U+1,H), log_softmax,
# and the transducer loss as a dynamic program over the (T, U) lattice: once by loops writing
# log_alpha[:, t, u] in place, once by torch.logsumexp over anti-diagonals; greedy decoding
torch.manual_seed(0)
NULL_INDEX = 0


class Encoder(nn.Module):
    def __init__(self, num_inputs, num_hidden, num_layers):
        super(Encoder, self).__init__()
        self.lstm = nn.LSTM(input_size=num_inputs, hidden_size=num_hidden, num_layers=num_layers,
                            batch_first=True, bidirectional=True, dropout=0.0)
        self.linear = nn.Linear(num_hidden * 2, num_hidden)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.linear(out)


class Predictor(nn.Module):
    def __init__(self, num_outputs, num_hidden):
        super(Predictor, self).__init__()
        self.embed = nn.Embedding(num_outputs, num_hidden, padding_idx=NULL_INDEX)
        self.lstm = nn.LSTM(num_hidden, num_hidden, batch_first=True)
        self.linear = nn.Linear(num_hidden, num_hidden)
        self.initial_state = nn.Parameter(torch.randn(num_hidden))
        self.start_symbol = NULL_INDEX

    def forward_one_step(self, input, previous_state):
        embedding = self.embed(input)
        out, state = self.lstm(embedding.unsqueeze(1), previous_state)
        return self.linear(out.squeeze(1)), state

    def forward(self, y):
        # the labels shifted right behind a start (blank) symbol
        start = torch.full((y.shape[0], 1), self.start_symbol, dtype=torch.long)
        y = torch.cat([start, y], dim=1)
        out, _ = self.lstm(self.embed(y))
        return self.linear(out)


class Joiner(nn.Module):
    def __init__(self, num_outputs, num_hidden):
        super(Joiner, self).__init__()
        self.linear = nn.Linear(num_hidden, num_outputs)

    def forward(self, encoder_out, predictor_out):
        out = encoder_out + predictor_out
        out = F.relu(out)
        return self.linear(out)


class Transducer(nn.Module):
    def __init__(self, num_inputs, num_outputs, num_hidden=32, num_layers=1):
        super(Transducer, self).__init__()
        self.encoder = Encoder(num_inputs, num_hidden, num_layers)
        self.predictor = Predictor(num_outputs, num_hidden)
        self.joiner = Joiner(num_outputs, num_hidden)

    def forward(self, x, y):
        encoder_out = self.encoder(x)                 # (B, T, H)
        predictor_out = self.predictor(y)             # (B, U+1, H)
        joiner_out = self.joiner(encoder_out.unsqueeze(2), predictor_out.unsqueeze(1))
        return joiner_out.log_softmax(-1)             # (B, T, U+1, V)


def compute_forward_prob(joiner_out, T, U, y):
    """log p(y|x) by the loop over the lattice (log_alpha written in place)."""
    B, T_max, U_max = joiner_out.shape[0], joiner_out.shape[1], joiner_out.shape[2] - 1
    log_alpha = torch.zeros(B, T_max, U_max + 1)
    for t in range(T_max):
        for u in range(U_max + 1):
            if u == 0:
                if t == 0:
                    log_alpha[:, t, u] = 0.
                else:
                    log_alpha[:, t, u] = log_alpha[:, t - 1, u] + joiner_out[:, t - 1, 0, NULL_INDEX]
            else:
                emit = torch.gather(joiner_out[:, t, u - 1], dim=1, index=y[:, u - 1].view(-1, 1)).reshape(-1)
                if t == 0:
                    log_alpha[:, t, u] = log_alpha[:, t, u - 1] + emit
                else:
                    log_alpha[:, t, u] = torch.logsumexp(torch.stack([
                        log_alpha[:, t - 1, u] + joiner_out[:, t - 1, u, NULL_INDEX],
                        log_alpha[:, t, u - 1] + emit]), dim=0)
    log_probs = []
    for b in range(B):
        t = T[b] - 1
        u = U[b]
        log_probs.append(log_alpha[b, t, u] + joiner_out[b, t, u, NULL_INDEX])
    return torch.stack(log_probs)


def transducer_loss_diagonal(log_probs, labels, T, U):
    """The same recursion over anti-diagonals t + u = n: each step one logsumexp over its cells."""
    B, T_max, U1, _ = log_probs.shape
    blank = log_probs[..., NULL_INDEX]                                            # (B, T, U+1)
    emit = torch.gather(log_probs[:, :, :-1], 3, labels[:, None, :, None].expand(B, T_max, U1 - 1, 1)).squeeze(-1)
    neg_inf = torch.tensor(float("-inf"))
    alpha = [torch.zeros(B, 1)]                                                   # diagonal 0: (t, u) = (0, 0)
    for n in range(1, T_max + U1 - 1):
        prev = alpha[-1]
        u = torch.arange(max(0, n - T_max + 1), min(n, U1 - 1) + 1)
        t = n - u
        u_prev = torch.arange(max(0, n - 1 - T_max + 1), min(n - 1, U1 - 1) + 1)
        idx = {int(v): i for i, v in enumerate(u_prev)}
        from_t = [idx.get(int(v), -1) for v in u]            # (t-1, u) on the last diagonal
        from_u = [idx.get(int(v) - 1, -1) for v in u]        # (t, u-1)
        a_t = torch.stack([prev[:, i] + blank[:, int(tt) - 1, int(uu)] if i >= 0 and tt > 0 else neg_inf.expand(B)
                           for i, tt, uu in zip(from_t, t, u)], 1)
        a_u = torch.stack([prev[:, i] + emit[:, int(tt), int(uu) - 1] if i >= 0 and uu > 0 else neg_inf.expand(B)
                           for i, tt, uu in zip(from_u, t, u)], 1)
        alpha.append(torch.logsumexp(torch.stack([a_t, a_u]), dim=0))
    out = []
    for b in range(B):
        n = int(T[b]) - 1 + int(U[b])
        u0 = max(0, n - T_max + 1)
        out.append(alpha[n][b, int(U[b]) - u0] + blank[b, int(T[b]) - 1, int(U[b])])
    return -torch.stack(out).mean()


def greedy_search(model, x, T, max_symbols=3):
    y_batch = []
    B = len(x)
    encoder_out = model.encoder(x)
    U_max = 8
    for b in range(B):
        t, u_t, y = 0, 0, [model.predictor.start_symbol]
        predictor_state = None
        g, predictor_state = model.predictor.forward_one_step(torch.tensor([y[-1]]), predictor_state)
        while t < T[b] and len(y) - 1 < U_max:
            h = model.joiner(encoder_out[b, t], g[0])
            argmax = h.max(-1)[1].item()
            if argmax == NULL_INDEX or u_t >= max_symbols:
                t += 1
                u_t = 0
            else:
                u_t += 1
                y.append(argmax)
                g, predictor_state = model.predictor.forward_one_step(torch.tensor([y[-1]]), predictor_state)
        y_batch.append(y[1:])
    return y_batch


r = np.random.default_rng(0)
B, T_max, U_max, F_in, V = 3, 7, 3, 10, 6
model = Transducer(F_in, V, num_hidden=24)
sync(model)
net = comp(model)
forward_prob = comp(compute_forward_prob)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)


def batch():
    T = r.integers(T_max - 2, T_max + 1, B)
    U = r.integers(1, U_max + 1, B)
    x = r.standard_normal((B, T_max, F_in)).astype(np.float32)
    y = np.zeros((B, U_max), np.int64)
    for b in range(B):
        y[b, :U[b]] = r.integers(1, V, U[b])
        x[b, :, y[b, 0]] += 1.0    # a feature that tells the first label
        x[b, T[b]:] = 0
    return torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(T), torch.from_numpy(U)


LOSSES = []
for step in range(4):
    x, y, T, U = batch()
    log_probs = net(x, y)
    if step % 2 == 0:
        loss = -forward_prob(log_probs, T, U, y).mean()
    else:
        loss = transducer_loss_diagonal(log_probs, y, T, U)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    LOSSES.append(loss.item())
model.eval()
with torch.no_grad():
    x, y, T, U = batch()
    log_probs = net(x, y)
    LOSSES.append(-compute_forward_prob(log_probs, T, U, y).mean().item())
    LOSSES.append(transducer_loss_diagonal(log_probs, y, T, U).item())
    hyps = greedy_search(model, x, T)
    LOSSES.append(sum(len(h) for h in hyps))
