from _harness import sync  # the runner: weights shared with the PyTorch run
import random, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from collections import namedtuple, deque

random.seed(0); torch.manual_seed(0)
Transition = namedtuple('Transition', ('state', 'action', 'next_state', 'reward'))
class ReplayMemory:
    def __init__(s, cap): s.memory = deque([], maxlen=cap)
    def push(s, *a): s.memory.append(Transition(*a))
    def sample(s, n): return random.sample(s.memory, n)
    def __len__(s): return len(s.memory)
class DQN(nn.Module):
    def __init__(s, n_obs, n_act):
        super().__init__(); s.layer1 = nn.Linear(n_obs, 64); s.layer2 = nn.Linear(64, 64); s.layer3 = nn.Linear(64, n_act)
    def forward(s, x): x = F.relu(s.layer1(x)); x = F.relu(s.layer2(x)); return s.layer3(x)
policy_net = DQN(4, 2); target_net = DQN(4, 2); sync(policy_net)
target_net.load_state_dict(policy_net.state_dict())
optimizer = torch.optim.AdamW(policy_net.parameters(), lr=1e-4, amsgrad=True)
memory = ReplayMemory(1000)
r = np.random.default_rng(0)
for i in range(200):
    st = torch.tensor(r.standard_normal(4), dtype=torch.float32).unsqueeze(0)
    a = torch.tensor([[int(r.integers(0, 2))]], device="cpu", dtype=torch.long)
    nx = None if i % 17 == 0 else torch.tensor(r.standard_normal(4), dtype=torch.float32).unsqueeze(0)
    memory.push(st, a, nx, torch.tensor([float(r.random())]))
LOSSES = []
for step in range(4):
    transitions = memory.sample(32)
    batch = Transition(*zip(*transitions))
    non_final_mask = torch.tensor(tuple(map(lambda s: s is not None, batch.next_state)), dtype=torch.bool)
    non_final_next_states = torch.cat([s for s in batch.next_state if s is not None])
    state_batch = torch.cat(batch.state); action_batch = torch.cat(batch.action); reward_batch = torch.cat(batch.reward)
    state_action_values = policy_net(state_batch).gather(1, action_batch)
    next_state_values = torch.zeros(32)
    with torch.no_grad():
        next_state_values[non_final_mask] = target_net(non_final_next_states).max(1).values
    expected = (next_state_values * 0.99) + reward_batch
    criterion = nn.SmoothL1Loss()
    loss = criterion(state_action_values, expected.unsqueeze(1))
    optimizer.zero_grad(); loss.backward()
    torch.nn.utils.clip_grad_value_(policy_net.parameters(), 100)
    optimizer.step()
    tsd = target_net.state_dict(); psd = policy_net.state_dict()
    for key in psd: tsd[key] = psd[key] * 0.005 + tsd[key] * (1 - 0.005)
    target_net.load_state_dict(tsd)
    LOSSES.append(loss.item())
with torch.no_grad():
    act = policy_net(state_batch[:1]).max(1).indices.view(1, 1)
LOSSES.append(float(act.item()))
