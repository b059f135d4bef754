from _harness import sync, comp  # the runner: weights shared with the PyTorch run; torch.compile
import math, random, numpy as np, torch
from torch import nn, optim
from torch.nn import functional as F
# Rainbow DQN pieces (Kaixhin/Rainbow style): NoisyLinear with factorised Gaussian noise
# (reset_noise: sign * sqrt of randn, outer products copied into buffers), dueling heads over
# C51 atoms, double-Q action selection, the categorical projection (floor/ceil, the l == u
# fix-ups, index_add_ on a flattened offset), a prioritised replay (a sum tree, importance
# weights), n-step returns, Adam with eps, clip_grad_norm_, the target distributions'
# entropy logged by torch.distributions.Categorical
random.seed(0); np.random.seed(0); torch.manual_seed(0)
NOISE = np.random.default_rng(1)


def randn(size):   # torch.randn's role, the same stream under both frameworks
    return torch.from_numpy(NOISE.standard_normal(size).astype(np.float32))


class NoisyLinear(nn.Module):
    def __init__(self, in_features, out_features, std_init=0.5):
        super(NoisyLinear, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.std_init = std_init
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
        self.register_buffer('weight_epsilon', torch.empty(out_features, in_features))
        self.bias_mu = nn.Parameter(torch.empty(out_features))
        self.bias_sigma = nn.Parameter(torch.empty(out_features))
        self.register_buffer('bias_epsilon', torch.empty(out_features))
        self.reset_parameters()
        self.reset_noise()

    def reset_parameters(self):
        mu_range = 1 / math.sqrt(self.in_features)
        self.weight_mu.data.uniform_(-mu_range, mu_range)
        self.weight_sigma.data.fill_(self.std_init / math.sqrt(self.in_features))
        self.bias_mu.data.uniform_(-mu_range, mu_range)
        self.bias_sigma.data.fill_(self.std_init / math.sqrt(self.out_features))

    def _scale_noise(self, size):
        x = randn(size)
        return x.sign().mul_(x.abs().sqrt_())

    def reset_noise(self):
        epsilon_in = self._scale_noise(self.in_features)
        epsilon_out = self._scale_noise(self.out_features)
        self.weight_epsilon.copy_(epsilon_out.ger(epsilon_in))
        self.bias_epsilon.copy_(epsilon_out)

    def forward(self, input):
        if self.training:
            return F.linear(input, self.weight_mu + self.weight_sigma * self.weight_epsilon,
                            self.bias_mu + self.bias_sigma * self.bias_epsilon)
        else:
            return F.linear(input, self.weight_mu, self.bias_mu)


class DQN(nn.Module):
    def __init__(self, state_dim, action_space, atoms, hidden_size=32, noisy_std=0.1):
        super(DQN, self).__init__()
        self.atoms = atoms
        self.action_space = action_space
        self.fc_in = nn.Sequential(nn.Linear(state_dim, hidden_size), nn.ReLU())
        self.fc_h_v = NoisyLinear(hidden_size, hidden_size, std_init=noisy_std)
        self.fc_h_a = NoisyLinear(hidden_size, hidden_size, std_init=noisy_std)
        self.fc_z_v = NoisyLinear(hidden_size, self.atoms, std_init=noisy_std)
        self.fc_z_a = NoisyLinear(hidden_size, action_space * self.atoms, std_init=noisy_std)

    def forward(self, x, log=False):
        x = self.fc_in(x)
        v = self.fc_z_v(F.relu(self.fc_h_v(x)))  # Value stream
        a = self.fc_z_a(F.relu(self.fc_h_a(x)))  # Advantage stream
        v, a = v.view(-1, 1, self.atoms), a.view(-1, self.action_space, self.atoms)
        q = v + a - a.mean(1, keepdim=True)  # Combine streams
        if log:  # Use log softmax for numerical stability
            q = F.log_softmax(q, dim=2)  # Log probabilities with action over second dimension
        else:
            q = F.softmax(q, dim=2)  # Probabilities with action over second dimension
        return q

    def reset_noise(self):
        for name, module in self.named_children():
            if 'fc_h' in name or 'fc_z' in name:
                module.reset_noise()


class SegmentTree():
    def __init__(self, size):
        self.index = 0
        self.size = size
        self.full = False  # Used to track actual capacity
        self.tree_start = 2 ** (size - 1).bit_length() - 1  # Put all used node leaves on last tree level
        self.sum_tree = np.zeros((self.tree_start + self.size,), dtype=np.float32)
        self.max = 1  # Initial max value to return (1 = 1^ω)

    def _update_nodes(self, indices):
        children_indices = indices * 2 + np.expand_dims([1, 2], axis=1)
        self.sum_tree[indices] = np.sum(self.sum_tree[children_indices], axis=0)

    def _propagate(self, indices):
        parents = (indices - 1) // 2
        unique_parents = np.unique(parents)
        self._update_nodes(unique_parents)
        if parents[0] != 0:
            self._propagate(parents)

    def update(self, indices, values):
        self.sum_tree[indices] = values  # Set new values
        self._propagate(indices)  # Propagate values
        current_max_value = np.max(values)
        self.max = max(current_max_value, self.max)

    def _update_index(self, index, value):
        self.sum_tree[index] = value
        parent = (index - 1) // 2
        while parent >= 0:
            self.sum_tree[parent] = self.sum_tree[2 * parent + 1] + self.sum_tree[2 * parent + 2]
            parent = (parent - 1) // 2
        self.max = max(value, self.max)

    def append(self, value):
        self._update_index(self.index + self.tree_start, value)
        self.index = (self.index + 1) % self.size
        self.full = self.full or self.index == 0

    def find(self, values):
        idx = np.zeros(len(values), dtype=np.int64)
        values = values.copy()
        while idx[0] < self.tree_start:
            left = 2 * idx + 1
            go_right = values > self.sum_tree[left]
            values = np.where(go_right, values - self.sum_tree[left], values)
            idx = np.where(go_right, left + 1, left)
        return idx - self.tree_start

    def total(self):
        return self.sum_tree[0]


class ReplayMemory():
    def __init__(self, capacity, history, discount, multi_step, priority_weight, priority_exponent):
        self.capacity = capacity
        self.discount = discount
        self.n = multi_step
        self.priority_weight = priority_weight  # Initial importance sampling weight β, annealed to 1
        self.priority_exponent = priority_exponent
        self.t = 0
        self.n_step_scaling = torch.tensor([self.discount ** i for i in range(self.n)], dtype=torch.float32)
        self.transitions = SegmentTree(capacity)
        self.states = np.zeros((capacity, history), dtype=np.float32)
        self.actions = np.zeros(capacity, dtype=np.int64)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.nonterminal = np.ones(capacity, dtype=np.float32)

    def append(self, state, action, reward, terminal):
        i = self.transitions.index
        self.states[i], self.actions[i], self.rewards[i], self.nonterminal[i] = state, action, reward, not terminal
        self.transitions.append(self.transitions.max)  # new transitions at maximum priority
        self.t = 0 if terminal else self.t + 1

    def _get_samples_from_segments(self, batch_size, p_total, rng):
        segment_length = p_total / batch_size  # Batch size number of segments, based on sum over all probabilities
        segment_starts = np.arange(batch_size) * segment_length
        samples = rng.uniform(0.0, segment_length, [batch_size]) + segment_starts
        idxs = np.clip(self.transitions.find(samples), 0, self.capacity - self.n - 2)
        probs = self.transitions.sum_tree[idxs + self.transitions.tree_start]
        states = torch.from_numpy(self.states[idxs])
        next_states = torch.from_numpy(self.states[idxs + self.n])
        actions = torch.from_numpy(self.actions[idxs])
        rewards = torch.from_numpy(np.stack([self.rewards[idxs + k] for k in range(self.n)], 1))
        # n-step discounted returns; a terminal inside the window cuts them
        alive = torch.from_numpy(np.stack([self.nonterminal[idxs + k] for k in range(self.n)], 1))
        alive = torch.cumprod(torch.cat([torch.ones(batch_size, 1), alive[:, :-1]], 1), 1)
        R = torch.matmul(rewards * alive, self.n_step_scaling)
        nonterminals = (alive[:, -1] * torch.from_numpy(self.nonterminal[idxs + self.n - 1])).unsqueeze(1)
        return probs, idxs, states, actions, R, next_states, nonterminals

    def sample(self, batch_size, rng):
        p_total = self.transitions.total()
        probs, idxs, states, actions, returns, next_states, nonterminals = self._get_samples_from_segments(batch_size, p_total, rng)
        probs = probs / p_total  # Calculate normalised probabilities
        capacity = self.capacity if self.transitions.full else self.transitions.index
        weights = (capacity * probs) ** -self.priority_weight  # Compute importance-sampling weights w
        weights = torch.tensor(weights / weights.max(), dtype=torch.float32)  # Normalise by max importance-sampling weight from batch
        return idxs, states, actions, returns, next_states, nonterminals, weights

    def update_priorities(self, idxs, priorities):
        priorities = np.power(priorities, self.priority_exponent)
        self.transitions.update(idxs + self.transitions.tree_start, priorities)


class Agent():
    def __init__(self, state_dim, action_space, atoms=21, V_min=-5, V_max=5, multi_step=3, discount=0.99,
                 batch_size=16, lr=1e-3, adam_eps=1.5e-4, norm_clip=10):
        self.action_space = action_space
        self.atoms = atoms
        self.Vmin, self.Vmax = V_min, V_max
        self.support = torch.linspace(V_min, V_max, self.atoms)  # Support (range) of z
        self.delta_z = (V_max - V_min) / (self.atoms - 1)
        self.batch_size = batch_size
        self.n = multi_step
        self.discount = discount
        self.norm_clip = norm_clip
        self.online_net_raw = DQN(state_dim, action_space, atoms)
        sync(self.online_net_raw)
        self.online_net = comp(self.online_net_raw)
        self.online_net.train()
        self.target_net_raw = DQN(state_dim, action_space, atoms)
        self.target_net = comp(self.target_net_raw)
        self.update_target_net()
        self.target_net.train()
        for param in self.target_net_raw.parameters():
            param.requires_grad = False
        self.optimiser = optim.Adam(self.online_net_raw.parameters(), lr=lr, eps=adam_eps)

    # Resets noisy weights in all linear layers (of online net only)
    def reset_noise(self):
        self.online_net_raw.reset_noise()

    # Acts based on single state (no batch)
    def act(self, state):
        with torch.no_grad():
            return (self.online_net(state.unsqueeze(0)) * self.support).sum(2).argmax(1).item()

    def learn(self, mem, rng):
        idxs, states, actions, returns, next_states, nonterminals, weights = mem.sample(self.batch_size, rng)
        # Calculate current state probabilities (online network noise already sampled)
        log_ps = self.online_net(states, log=True)  # Log probabilities log p(s_t, ·; θonline)
        log_ps_a = log_ps[range(self.batch_size), actions]  # log p(s_t, a_t; θonline)
        with torch.no_grad():
            # Calculate nth next state probabilities
            pns = self.online_net(next_states)  # Probabilities p(s_t+n, ·; θonline)
            dns = self.support.expand_as(pns) * pns  # Distribution d_t+n = (z, p(s_t+n, ·; θonline))
            argmax_indices_ns = dns.sum(2).argmax(1)  # Perform argmax action selection using online network
            self.target_net_raw.reset_noise()  # Sample new target net noise
            pns = self.target_net(next_states)  # Probabilities p(s_t+n, ·; θtarget)
            pns_a = pns[range(self.batch_size), argmax_indices_ns]  # Double-Q probabilities
            # Compute Tz (Bellman operator T applied to z)
            Tz = returns.unsqueeze(1) + nonterminals * (self.discount ** self.n) * self.support.unsqueeze(0)
            Tz = Tz.clamp(min=self.Vmin, max=self.Vmax)  # Clamp between supported values
            # Compute L2 projection of Tz onto fixed support z
            b = (Tz - self.Vmin) / self.delta_z  # b = (Tz - Vmin) / Δz
            l, u = b.floor().to(torch.int64), b.ceil().to(torch.int64)
            # Fix disappearing probability mass when l = b = u (b is int)
            l[(u > 0) * (l == u)] -= 1
            u[(l < (self.atoms - 1)) * (l == u)] += 1
            # Distribute probability of Tz
            m = states.new_zeros(self.batch_size, self.atoms)
            offset = torch.linspace(0, ((self.batch_size - 1) * self.atoms), self.batch_size).unsqueeze(1).expand(self.batch_size, self.atoms).to(actions)
            m.view(-1).index_add_(0, (l + offset).view(-1), (pns_a * (u.float() - b)).view(-1))  # m_l = m_l + p(s_t+n, a*)(u - b)
            m.view(-1).index_add_(0, (u + offset).view(-1), (pns_a * (b - l.float())).view(-1))  # m_u = m_u + p(s_t+n, a*)(b - l)
        loss = -torch.sum(m * log_ps_a, 1)  # Cross-entropy loss (minimises DKL(m||p(s_t, a_t)))
        self.online_net.zero_grad()
        (weights * loss).mean().backward()  # Backpropagate importance-weighted minibatch loss
        nn.utils.clip_grad_norm_(self.online_net_raw.parameters(), self.norm_clip)  # Clip gradients by L2 norm
        self.optimiser.step()
        mem.update_priorities(idxs, loss.detach().cpu().numpy())  # Update priorities of sampled transitions
        # logged: how spread the projected target distributions are
        self.target_entropy = torch.distributions.Categorical(probs=m.clamp(min=1e-8)).entropy().mean().item()
        return (weights * loss).mean().item()

    def update_target_net(self):
        self.target_net_raw.load_state_dict(self.online_net_raw.state_dict())


state_dim, n_actions = 6, 3
agent = Agent(state_dim, n_actions)
mem = ReplayMemory(64, state_dim, agent.discount, agent.n, priority_weight=0.4, priority_exponent=0.5)
rng = np.random.default_rng(0)
W = rng.standard_normal((state_dim, n_actions)).astype(np.float32)
state = torch.from_numpy(rng.standard_normal(state_dim).astype(np.float32))
LOSSES = []
priority_weight_increase = (1 - 0.4) / 12
for T in range(1, 61):
    if T % 4 == 0:
        agent.reset_noise()  # Draw a new set of noisy weights
    action = agent.act(state)
    reward = float(np.tanh(state.numpy() @ W[:, action]))
    done = T % 15 == 0
    mem.append(state.numpy(), action, reward, done)
    state = torch.from_numpy((0.9 * state.numpy() + 0.3 * rng.standard_normal(state_dim)).astype(np.float32))
    if T >= 36 and T % 2 == 0:
        mem.priority_weight = min(mem.priority_weight + priority_weight_increase, 1)
        LOSSES += [agent.learn(mem, rng), agent.target_entropy]
    if T % 20 == 0:
        agent.update_target_net()
LOSSES.append(float(mem.transitions.total()))
agent.online_net.eval()
with torch.no_grad():
    q = (agent.online_net(torch.from_numpy(mem.states[:8])) * agent.support).sum(2)
LOSSES.append(q.mean().item())
