from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import copy, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# TD3 as the authors' TD3.py and utils.py write it: a tanh actor scaled by max_action, one
# Critic module holding twin Q networks (forward gives both, Q1 the first), target policy
# smoothing with clipped noise, a clamped next action, the min of the target Qs, delayed
# actor updates every policy_freq iterations, soft target updates by param.data.copy_, a
# replay buffer of numpy arrays sampled into torch.FloatTensor, exploration noise added to
# select_action's numpy output, a toy point-mass environment; noise drawn with numpy
class Actor(nn.Module):
    def __init__(self, state_dim, action_dim, max_action):
        super(Actor, self).__init__()
        self.l1 = nn.Linear(state_dim, 64)
        self.l2 = nn.Linear(64, 64)
        self.l3 = nn.Linear(64, action_dim)
        self.max_action = max_action
    def forward(self, state):
        a = F.relu(self.l1(state))
        a = F.relu(self.l2(a))
        return self.max_action * torch.tanh(self.l3(a))
class Critic(nn.Module):
    def __init__(self, state_dim, action_dim):
        super(Critic, self).__init__()
        self.l1 = nn.Linear(state_dim + action_dim, 64)   # Q1 architecture
        self.l2 = nn.Linear(64, 64)
        self.l3 = nn.Linear(64, 1)
        self.l4 = nn.Linear(state_dim + action_dim, 64)   # Q2 architecture
        self.l5 = nn.Linear(64, 64)
        self.l6 = nn.Linear(64, 1)
    def forward(self, state, action):
        sa = torch.cat([state, action], 1)
        q1 = F.relu(self.l1(sa))
        q1 = F.relu(self.l2(q1))
        q1 = self.l3(q1)
        q2 = F.relu(self.l4(sa))
        q2 = F.relu(self.l5(q2))
        q2 = self.l6(q2)
        return q1, q2
    def Q1(self, state, action):
        sa = torch.cat([state, action], 1)
        q1 = F.relu(self.l1(sa))
        q1 = F.relu(self.l2(q1))
        q1 = self.l3(q1)
        return q1
class ReplayBuffer(object):
    def __init__(self, state_dim, action_dim, max_size=int(1e6)):
        self.max_size, self.ptr, self.size = max_size, 0, 0
        self.state = np.zeros((max_size, state_dim))
        self.action = np.zeros((max_size, action_dim))
        self.next_state = np.zeros((max_size, state_dim))
        self.reward = np.zeros((max_size, 1))
        self.not_done = np.zeros((max_size, 1))
    def add(self, state, action, next_state, reward, done):
        self.state[self.ptr] = state
        self.action[self.ptr] = action
        self.next_state[self.ptr] = next_state
        self.reward[self.ptr] = reward
        self.not_done[self.ptr] = 1. - done
        self.ptr = (self.ptr + 1) % self.max_size
        self.size = min(self.size + 1, self.max_size)
    def sample(self, batch_size, rng):
        ind = rng.integers(0, self.size, size=batch_size)
        return (torch.FloatTensor(self.state[ind]), torch.FloatTensor(self.action[ind]),
                torch.FloatTensor(self.next_state[ind]), torch.FloatTensor(self.reward[ind]),
                torch.FloatTensor(self.not_done[ind]))
class TD3(object):
    def __init__(self, state_dim, action_dim, max_action, discount=0.99, tau=0.005, policy_noise=0.2,
                 noise_clip=0.5, policy_freq=2):
        self.actor_module = Actor(state_dim, action_dim, max_action)
        self.critic_module = Critic(state_dim, action_dim)
        sync(self.actor_module, self.critic_module)
        self.actor_target_module = copy.deepcopy(self.actor_module)
        self.critic_target_module = copy.deepcopy(self.critic_module)
        self.actor, self.critic = comp(self.actor_module), comp(self.critic_module)
        self.actor_target, self.critic_target = comp(self.actor_target_module), comp(self.critic_target_module)
        self.actor_optimizer = torch.optim.Adam(self.actor_module.parameters(), lr=3e-4)
        self.critic_optimizer = torch.optim.Adam(self.critic_module.parameters(), lr=3e-4)
        self.max_action, self.discount, self.tau = max_action, discount, tau
        self.policy_noise, self.noise_clip, self.policy_freq = policy_noise, noise_clip, policy_freq
        self.total_it = 0
    def select_action(self, state):
        state = torch.FloatTensor(state.reshape(1, -1))
        return self.actor(state).cpu().data.numpy().flatten()
    def train(self, replay_buffer, rng, batch_size=32):
        self.total_it += 1
        state, action, next_state, reward, not_done = replay_buffer.sample(batch_size, rng)
        randn = torch.from_numpy(rng.standard_normal(action.shape).astype(np.float32))
        with torch.no_grad():
            # Select action according to policy and add clipped noise
            noise = (randn * self.policy_noise).clamp(-self.noise_clip, self.noise_clip)
            next_action = (self.actor_target(next_state) + noise).clamp(-self.max_action, self.max_action)
            target_Q1, target_Q2 = self.critic_target(next_state, next_action)
            target_Q = torch.min(target_Q1, target_Q2)
            target_Q = reward + not_done * self.discount * target_Q
        current_Q1, current_Q2 = self.critic(state, action)
        critic_loss = F.mse_loss(current_Q1, target_Q) + F.mse_loss(current_Q2, target_Q)
        self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()
        actor_loss = None
        if self.total_it % self.policy_freq == 0:
            actor_loss = -self.critic_module.Q1(state, self.actor(state)).mean()
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()
            for param, target_param in zip(self.critic_module.parameters(), self.critic_target_module.parameters()):
                target_param.data.copy_(self.tau * param.data + (1 - self.tau) * target_param.data)
            for param, target_param in zip(self.actor_module.parameters(), self.actor_target_module.parameters()):
                target_param.data.copy_(self.tau * param.data + (1 - self.tau) * target_param.data)
        return critic_loss.item(), None if actor_loss is None else actor_loss.item()
class PointMass:   # move a point to the origin: reward -|x|^2 - 0.1 |a|^2
    def __init__(self, rng):
        self.rng = rng
    def reset(self):
        self.x, self.t = self.rng.uniform(-1, 1, 3), 0
        return np.concatenate([self.x, [0.0]])
    def step(self, a):
        self.x = np.clip(self.x + 0.1 * a, -2, 2); self.t += 1
        r = -float((self.x ** 2).sum()) - 0.1 * float((a ** 2).sum())
        return np.concatenate([self.x, [self.t / 10]]), r, self.t >= 10
rng = np.random.default_rng(0)
env = PointMass(rng)
state_dim, action_dim, max_action = 4, 3, 1.0
policy = TD3(state_dim, action_dim, max_action)
replay_buffer = ReplayBuffer(state_dim, action_dim, max_size=1000)
start_timesteps, expl_noise = 20, 0.1
state, done, episode_reward, LOSSES = env.reset(), False, 0.0, []
for t in range(32):
    if t < start_timesteps:
        action = rng.uniform(-max_action, max_action, action_dim)
    else:
        action = (policy.select_action(np.array(state))
                  + rng.normal(0, max_action * expl_noise, size=action_dim)).clip(-max_action, max_action)
    next_state, reward, done = env.step(action)
    replay_buffer.add(state, action, next_state, reward, float(done))
    state = next_state
    episode_reward += reward
    if t >= start_timesteps:
        critic_loss, actor_loss = policy.train(replay_buffer, rng)
        LOSSES.append(critic_loss)
        if actor_loss is not None:
            LOSSES.append(actor_loss)
    if done:
        LOSSES.append(episode_reward)
        state, done, episode_reward = env.reset(), False, 0.0
LOSSES += [sum(p.sum() for p in policy.critic_target_module.parameters()).item(),
           float(policy.select_action(np.zeros(state_dim)).sum())]
