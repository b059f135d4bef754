from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import collections, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# A Differentiable Neural Computer as DeepMind's dnc (addressing.py, access.py) reads ported
# to PyTorch: an LSTMCell controller emits an interface vector split by sizes (keys, oneplus
# strengths, sigmoid gates, softmax read modes); content addressing by cosine similarity and a
# sharpened softmax; dynamic allocation from the usage vector sorted ascending (torch.sort),
# an exclusive cumprod over the sorted usage, scattered back to memory order; write weights
# that mix allocation and content; erase/add writes by outer products; a temporal link matrix
# (precedence, its diagonal masked by torch.eye) read forwards and backwards by bmm; the state
# a namedtuple of tensors; the whole sequence unrolled by a Python loop inside the compiled
# forward; a repeat-copy task under BCE-with-logits on the answer phase, RMSprop and
# clip_grad_norm_
AccessState = collections.namedtuple('AccessState', ('memory', 'read_weights', 'write_weights', 'linkage',
                                                     'precedence', 'usage'))
_EPSILON = 1e-6
def oneplus(x):
    return 1 + F.softplus(x)
def weighted_softmax(activations, strengths):
    return F.softmax(activations * strengths.unsqueeze(-1), dim=-1)
def content_weights(memory, keys, strengths):
    """memory B x N x W, keys B x H x W, strengths B x H -> B x H x N"""
    dot = torch.matmul(keys, memory.transpose(1, 2))
    memory_norms = torch.sqrt(torch.sum(memory * memory, dim=2, keepdim=True) + _EPSILON)
    key_norms = torch.sqrt(torch.sum(keys * keys, dim=2, keepdim=True) + _EPSILON)
    norm = torch.matmul(key_norms, memory_norms.transpose(1, 2))
    similarity = dot / (norm + _EPSILON)
    return weighted_softmax(similarity, strengths)
def allocation(usage):
    """Free-list allocation: the least used slot first (addressing.py's _allocation)."""
    usage = _EPSILON + (1 - _EPSILON) * usage
    nonusage = 1 - usage
    sorted_nonusage, indices = torch.sort(nonusage, dim=1, descending=True)
    sorted_usage = 1 - sorted_nonusage
    prod_sorted_usage = torch.cumprod(sorted_usage, dim=1)
    prod_sorted_usage = torch.cat([torch.ones_like(prod_sorted_usage[:, :1]), prod_sorted_usage[:, :-1]], dim=1)
    sorted_allocation = sorted_nonusage * prod_sorted_usage
    # undo the sort: scatter each slot's allocation back to its memory position
    return torch.zeros_like(sorted_allocation).scatter_(1, indices, sorted_allocation)
def update_usage(write_weights, free_gate, read_weights, prev_usage):
    write_weights = write_weights.detach().unsqueeze(1)   # (one write head) no gradient through usage
    usage = prev_usage + (1 - prev_usage) * (1 - torch.prod(1 - write_weights, 1))
    free_read_weights = free_gate.unsqueeze(-1) * read_weights
    phi = torch.prod(1 - free_read_weights, dim=1)
    return usage * phi
def link_update(prev_link, prev_precedence, write_weights):
    """prev_link B x N x N, prev_precedence B x N, write_weights B x N"""
    write_weights_i = write_weights.unsqueeze(2)
    write_weights_j = write_weights.unsqueeze(1)
    prev_precedence_j = prev_precedence.unsqueeze(1)
    link = (1 - write_weights_i - write_weights_j) * prev_link + write_weights_i * prev_precedence_j
    n = link.size(-1)
    link = link * (1 - torch.eye(n, dtype=link.dtype, device=link.device))   # no self links
    precedence = (1 - write_weights.sum(1, keepdim=True)) * prev_precedence + write_weights
    return link, precedence
class MemoryAccess(nn.Module):
    def __init__(self, input_size, memory_size=12, word_size=6, num_reads=2):
        super().__init__()
        self.N, self.W, self.R = memory_size, word_size, num_reads
        self.sizes = collections.OrderedDict([
            ('read_keys', num_reads * word_size), ('read_strengths', num_reads), ('write_key', word_size),
            ('write_strength', 1), ('erase_vector', word_size), ('write_vector', word_size),
            ('free_gate', num_reads), ('allocation_gate', 1), ('write_gate', 1), ('read_mode', num_reads * 3)])
        self.interface = nn.Linear(input_size, sum(self.sizes.values()))
    def _read_inputs(self, inputs):
        B = inputs.size(0)
        parts = dict(zip(self.sizes, torch.split(self.interface(inputs), list(self.sizes.values()), dim=1)))
        return {
            'read_keys': parts['read_keys'].view(B, self.R, self.W),
            'read_strengths': oneplus(parts['read_strengths']),
            'write_key': parts['write_key'].view(B, 1, self.W),
            'write_strength': oneplus(parts['write_strength']),
            'erase_vector': torch.sigmoid(parts['erase_vector']),
            'write_vector': parts['write_vector'],
            'free_gate': torch.sigmoid(parts['free_gate']),
            'allocation_gate': torch.sigmoid(parts['allocation_gate']),
            'write_gate': torch.sigmoid(parts['write_gate']),
            'read_mode': F.softmax(parts['read_mode'].view(B, self.R, 3), dim=-1)}
    def forward(self, inputs, prev_state):
        inputs = self._read_inputs(inputs)
        usage = update_usage(prev_state.write_weights, inputs['free_gate'], prev_state.read_weights, prev_state.usage)
        # write: allocation and content, mixed and gated
        write_content = content_weights(prev_state.memory, inputs['write_key'], inputs['write_strength'])[:, 0]
        alloc = allocation(usage)
        ag, wg = inputs['allocation_gate'], inputs['write_gate']
        write_weights = wg * (ag * alloc + (1 - ag) * write_content)
        erase = torch.bmm(write_weights.unsqueeze(2), inputs['erase_vector'].unsqueeze(1))
        add = torch.bmm(write_weights.unsqueeze(2), inputs['write_vector'].unsqueeze(1))
        memory = prev_state.memory * (1 - erase) + add
        linkage, precedence = link_update(prev_state.linkage, prev_state.precedence, write_weights)
        # read: backward, content and forward modes
        content = content_weights(memory, inputs['read_keys'], inputs['read_strengths'])
        forward_w = torch.bmm(prev_state.read_weights, linkage.transpose(1, 2))
        backward_w = torch.bmm(prev_state.read_weights, linkage)
        mode = inputs['read_mode']
        read_weights = mode[..., 0:1] * backward_w + mode[..., 1:2] * content + mode[..., 2:3] * forward_w
        read_words = torch.bmm(read_weights, memory)
        return read_words, AccessState(memory, read_weights, write_weights, linkage, precedence, usage)
class DNC(nn.Module):
    def __init__(self, input_size, output_size, hidden_size=32, memory_size=12, word_size=6, num_reads=2):
        super().__init__()
        self.controller = nn.LSTMCell(input_size + num_reads * word_size, hidden_size)
        self.access = MemoryAccess(hidden_size, memory_size, word_size, num_reads)
        self.output = nn.Linear(hidden_size + num_reads * word_size, output_size)
        self.N, self.W, self.R, self.H = memory_size, word_size, num_reads, hidden_size
    def initial_state(self, B, device=None):
        z = lambda *s: torch.zeros(*s, device=device)
        access = AccessState(z(B, self.N, self.W), z(B, self.R, self.N), z(B, self.N), z(B, self.N, self.N),
                             z(B, self.N), z(B, self.N))
        return (z(B, self.H), z(B, self.H)), access, z(B, self.R * self.W)
    def forward(self, x):
        """x: T x B x input_size -> T x B x output_size"""
        (h, c), access_state, read_vec = self.initial_state(x.size(1), x.device)
        outputs = []
        for t in range(x.size(0)):
            h, c = self.controller(torch.cat([x[t], read_vec], dim=1), (h, c))
            read_words, access_state = self.access(h, access_state)
            read_vec = read_words.reshape(x.size(1), -1)
            outputs.append(self.output(torch.cat([h, read_vec], dim=1)))
        return torch.stack(outputs), access_state
def repeat_copy_batch(rng, B, bits=4, length=3, repeats=2):
    """The input: a pattern, an end flag holding the repeat count; the target: the pattern repeated."""
    T = length + 1 + length * repeats
    x = np.zeros((T, B, bits + 2), np.float32); y = np.zeros((T, B, bits), np.float32); mask = np.zeros((T, B), np.float32)
    pattern = rng.integers(0, 2, (length, B, bits)).astype(np.float32)
    x[:length, :, :bits] = pattern
    x[length, :, bits] = 1; x[length, :, bits + 1] = repeats / 2.0
    for k in range(repeats):
        s = length + 1 + k * length
        y[s:s + length] = pattern; mask[s:s + length] = 1
    return torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(mask)
model = DNC(input_size=6, output_size=4); sync(model)
net = comp(model)
optimizer = torch.optim.RMSprop(model.parameters(), lr=3e-3, momentum=0.9, eps=1e-10)
rng = np.random.default_rng(0)
LOSSES = []
for step in range(5):
    x, y, mask = repeat_copy_batch(rng, B=8)
    logits, state = net(x)
    xent = F.binary_cross_entropy_with_logits(logits, y, reduction='none').sum(-1)
    loss = (xent * mask).sum() / x.size(1)
    optimizer.zero_grad()
    loss.backward()
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    optimizer.step()
    LOSSES += [loss.item(), gnorm.item(), state.usage.sum().item()]
with torch.no_grad():
    x, y, mask = repeat_copy_batch(rng, B=4)
    logits, state = net(x)
    bit_errors = ((torch.sigmoid(logits) > 0.5).float() != y).float().mul(mask.unsqueeze(-1)).sum()
LOSSES += [bit_errors.item(), state.linkage.sum().item(), state.read_weights.sum().item()]
