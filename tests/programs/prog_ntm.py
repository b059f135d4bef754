from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch import optim
torch.manual_seed(0)
# a Neural Turing Machine on the copy task as pytorch-ntm writes it: an LSTM controller, a
# memory matrix addressed by content (cosine similarity, softmax with a key strength),
# interpolated with the last weighting, shifted by a circular convolution (F.conv1d on a
# wrapped copy, one batch row at a time) and sharpened; a read head and a write head
# (erase then add by outer products); one step compiled, called in a Python loop over the
# sequence with the state as a tuple; RMSprop with momentum, gradients clamped by value
def _split_cols(mat, lengths):
    assert mat.size()[1] == sum(lengths), "Lengths must be summed to num columns"
    l = np.cumsum([0] + lengths)
    return [mat[:, s:e] for s, e in zip(l[:-1], l[1:])]
def _convolve(w, s):
    """Circular convolution implementation."""
    assert s.size(0) == 3
    t = torch.cat([w[-1:], w, w[:1]])
    c = F.conv1d(t.view(1, 1, -1), s.view(1, 1, -1)).view(-1)
    return c
class NTMMemory(nn.Module):
    def __init__(self, N, M):
        super(NTMMemory, self).__init__()
        self.N, self.M = N, M
        stdev = 1 / (np.sqrt(N + M))
        self.register_buffer('mem_bias', torch.Tensor(N, M))
        nn.init.uniform_(self.mem_bias, -stdev, stdev)
    def reset(self, batch_size):
        return self.mem_bias.clone().repeat(batch_size, 1, 1)
    def read(self, memory, w):
        return torch.matmul(w.unsqueeze(1), memory).squeeze(1)
    def write(self, memory, w, e, a):
        erase = torch.matmul(w.unsqueeze(-1), e.unsqueeze(1))
        add = torch.matmul(w.unsqueeze(-1), a.unsqueeze(1))
        return memory * (1 - erase) + add
    def address(self, memory, k, β, g, s, γ, w_prev):
        wc = self._similarity(memory, k, β)
        wg = self._interpolate(w_prev, wc, g)
        ŵ = self._shift(wg, s)
        return self._sharpen(ŵ, γ)
    def _similarity(self, memory, k, β):
        k = k.view(k.size(0), 1, -1)
        return F.softmax(β * F.cosine_similarity(memory + 1e-16, k + 1e-16, dim=-1), dim=1)
    def _interpolate(self, w_prev, wc, g):
        return g * wc + (1 - g) * w_prev
    def _shift(self, wg, s):
        result = torch.zeros(wg.size())
        for b in range(wg.size(0)):
            result[b] = _convolve(wg[b], s[b])
        return result
    def _sharpen(self, ŵ, γ):
        w = ŵ ** γ
        return torch.div(w, torch.sum(w, dim=1).view(-1, 1) + 1e-16)
class NTMHead(nn.Module):
    def __init__(self, M, controller_size, is_read):
        super().__init__()
        self.M, self.is_read = M, is_read
        self.lengths = [M, 1, 1, 3, 1] + ([] if is_read else [M, M])
        self.fc = nn.Linear(controller_size, sum(self.lengths))
    def forward(self, memory, embeddings, w_prev, mem):
        o = self.fc(embeddings)
        k, β, g, s, γ, *ea = _split_cols(o, self.lengths)
        w = mem.address(memory, k, F.softplus(β), torch.sigmoid(g), F.softmax(s, dim=1), 1 + F.softplus(γ), w_prev)
        if self.is_read:
            return mem.read(memory, w), w, memory
        e, a = ea
        return None, w, mem.write(memory, w, torch.sigmoid(e), a)
class NTMCell(nn.Module):   # one time step: controller, write head, read head, output
    def __init__(self, num_inputs, num_outputs, controller_size, N, M):
        super().__init__()
        self.memory = NTMMemory(N, M)
        self.controller = nn.LSTMCell(num_inputs + M, controller_size)
        self.read_head = NTMHead(M, controller_size, True)
        self.write_head = NTMHead(M, controller_size, False)
        self.fc = nn.Linear(controller_size + M, num_outputs)
    def forward(self, x, prev_state):
        memory, prev_read, (h, c), w_read, w_write = prev_state
        h, c = self.controller(torch.cat([x, prev_read], dim=1), (h, c))
        _, w_write, memory = self.write_head(memory, h, w_write, self.memory)
        read, w_read, _ = self.read_head(memory, h, w_read, self.memory)
        o = torch.sigmoid(self.fc(torch.cat([h, read], dim=1)))
        return o, (memory, read, (h, c), w_read, w_write)
class EncapsulatedNTM(nn.Module):
    def __init__(self, num_inputs, num_outputs, controller_size, N, M):
        super().__init__()
        self.num_inputs, self.num_outputs, self.N, self.M = num_inputs, num_outputs, N, M
        self.cell = NTMCell(num_inputs, num_outputs, controller_size, N, M)
        self.controller_size = controller_size
    def init_sequence(self, batch_size):
        z = lambda *s: torch.zeros(*s)
        return (self.cell.memory.reset(batch_size), z(batch_size, self.M),
                (z(batch_size, self.controller_size), z(batch_size, self.controller_size)),
                z(batch_size, self.N), z(batch_size, self.N))
model = EncapsulatedNTM(num_inputs=5, num_outputs=4, controller_size=24, N=12, M=6); sync(model)
step = comp(model.cell)
criterion = nn.BCELoss()
optimizer = optim.RMSprop(model.parameters(), momentum=0.9, alpha=0.95, lr=1e-3)
def dataloader(num_batches, batch_size, seq_width, min_len, max_len, rng):
    """The copy task: random bit sequences, a delimiter channel, the sequence to recall."""
    for batch_num in range(num_batches):
        seq_len = int(rng.integers(min_len, max_len + 1))
        seq = torch.from_numpy(rng.binomial(1, 0.5, (seq_len, batch_size, seq_width)).astype(np.float32))
        inp = torch.zeros(seq_len + 1, batch_size, seq_width + 1)
        inp[:seq_len, :, :seq_width] = seq
        inp[seq_len, :, seq_width] = 1.0   # delimiter in our control channel
        yield batch_num + 1, inp.float(), seq.clone().float()
def train_batch(net, criterion, optimizer, X, Y):
    optimizer.zero_grad()
    inp_seq_len, batch_size = X.size(0), X.size(1)
    outp_seq_len, _, _ = Y.size()
    state = net.init_sequence(batch_size)
    for i in range(inp_seq_len):   # feed the sequence + delimiter
        _, state = step(X[i], state)
    y_out = torch.zeros(Y.size())
    for i in range(outp_seq_len):  # read the output (no input given)
        y_out[i], state = step(torch.zeros(batch_size, net.num_inputs), state)
    loss = criterion(y_out, Y)
    loss.backward()
    for p in net.parameters():
        p.grad.data.clamp_(-10, 10)
    optimizer.step()
    y_out_binarized = y_out.clone().data
    y_out_binarized.apply_(lambda x: 0 if x < 0.5 else 1)
    cost = torch.sum(torch.abs(y_out_binarized - Y.data))
    return loss.item(), cost.item() / batch_size
LOSSES = []
for batch_num, x, y in dataloader(6, 4, 4, 2, 4, np.random.default_rng(0)):
    loss, cost = train_batch(model, criterion, optimizer, x, y)
    LOSSES += [loss, cost]
LOSSES.append(sum(p.sum() for p in model.parameters()).item())
