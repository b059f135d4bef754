from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader
torch.manual_seed(0)
# a Decision Transformer as min-decision-transformer writes it: offline trajectories with
# discounted returns-to-go, a Dataset sampling context windows, returns-to-go, states and
# actions embedded and interleaved by torch.stack(..., dim=1).permute.reshape, timestep
# embeddings, GPT blocks with a register_buffer'd tril mask, actions predicted from the
# state tokens (h[:, 1::3]); AdamW under a LambdaLR warmup and gradient clipping; then a
# rollout in a point-mass environment conditioned on a target return, the context growing
# a step at a time up to its length and sliding after
def discount_cumsum(x, gamma):
    disc_cumsum = np.zeros_like(x)
    disc_cumsum[-1] = x[-1]
    for t in reversed(range(x.shape[0] - 1)):
        disc_cumsum[t] = x[t] + gamma * disc_cumsum[t + 1]
    return disc_cumsum
class MaskedCausalAttention(nn.Module):
    def __init__(self, h_dim, max_T, n_heads, drop_p):
        super().__init__()
        self.n_heads = n_heads
        self.max_T = max_T
        self.q_net = nn.Linear(h_dim, h_dim)
        self.k_net = nn.Linear(h_dim, h_dim)
        self.v_net = nn.Linear(h_dim, h_dim)
        self.proj_net = nn.Linear(h_dim, h_dim)
        self.att_drop = nn.Dropout(drop_p)
        self.proj_drop = nn.Dropout(drop_p)
        ones = torch.ones((max_T, max_T))
        mask = torch.tril(ones).view(1, 1, max_T, max_T)
        self.register_buffer('mask', mask)
    def forward(self, x):
        B, T, C = x.shape
        N, D = self.n_heads, C // self.n_heads
        q = self.q_net(x).view(B, T, N, D).transpose(1, 2)
        k = self.k_net(x).view(B, T, N, D).transpose(1, 2)
        v = self.v_net(x).view(B, T, N, D).transpose(1, 2)
        weights = q @ k.transpose(2, 3) / math.sqrt(D)
        weights = weights.masked_fill(self.mask[..., :T, :T] == 0, float('-inf'))
        normalized_weights = F.softmax(weights, dim=-1)
        attention = self.att_drop(normalized_weights @ v)
        attention = attention.transpose(1, 2).contiguous().view(B, T, N * D)
        return self.proj_drop(self.proj_net(attention))
class Block(nn.Module):
    def __init__(self, h_dim, max_T, n_heads, drop_p):
        super().__init__()
        self.attention = MaskedCausalAttention(h_dim, max_T, n_heads, drop_p)
        self.mlp = nn.Sequential(nn.Linear(h_dim, 4 * h_dim), nn.GELU(), nn.Linear(4 * h_dim, h_dim), nn.Dropout(drop_p))
        self.ln1 = nn.LayerNorm(h_dim)
        self.ln2 = nn.LayerNorm(h_dim)
    def forward(self, x):
        x = x + self.attention(x)   # residual
        x = self.ln1(x)
        x = x + self.mlp(x)
        x = self.ln2(x)
        return x
class DecisionTransformer(nn.Module):
    def __init__(self, state_dim, act_dim, n_blocks, h_dim, context_len, n_heads, drop_p, max_timestep=4096):
        super().__init__()
        self.state_dim, self.act_dim, self.h_dim = state_dim, act_dim, h_dim
        input_seq_len = 3 * context_len
        blocks = [Block(h_dim, input_seq_len, n_heads, drop_p) for _ in range(n_blocks)]
        self.transformer = nn.Sequential(*blocks)
        self.embed_ln = nn.LayerNorm(h_dim)
        self.embed_timestep = nn.Embedding(max_timestep, h_dim)
        self.embed_rtg = torch.nn.Linear(1, h_dim)
        self.embed_state = torch.nn.Linear(state_dim, h_dim)
        self.embed_action = torch.nn.Linear(act_dim, h_dim)
        self.predict_rtg = torch.nn.Linear(h_dim, 1)
        self.predict_state = torch.nn.Linear(h_dim, state_dim)
        self.predict_action = nn.Sequential(*([nn.Linear(h_dim, act_dim)] + [nn.Tanh()]))
    def forward(self, timesteps, states, actions, returns_to_go):
        B, T, _ = states.shape
        time_embeddings = self.embed_timestep(timesteps)
        state_embeddings = self.embed_state(states) + time_embeddings
        action_embeddings = self.embed_action(actions) + time_embeddings
        returns_embeddings = self.embed_rtg(returns_to_go) + time_embeddings
        # stack rtg, states and actions and reshape sequence as (r_0, s_0, a_0, r_1, s_1, a_1, ...)
        h = torch.stack((returns_embeddings, state_embeddings, action_embeddings), dim=1
                        ).permute(0, 2, 1, 3).reshape(B, 3 * T, self.h_dim)
        h = self.embed_ln(h)
        h = self.transformer(h)
        return_preds = self.predict_rtg(h[:, 2::3])     # given r, s, a
        state_preds = self.predict_state(h[:, 2::3])    # given r, s, a
        action_preds = self.predict_action(h[:, 1::3])  # given r, s
        return state_preds, action_preds, return_preds
class PointMass:
    """s' = s + 0.1 a (clipped); reward -|s'| (reach the origin)."""
    def __init__(self, rng):
        self.rng = rng
    def reset(self):
        self.s = self.rng.uniform(-1, 1, 2).astype(np.float32)
        return self.s.copy()
    def step(self, a):
        self.s = np.clip(self.s + 0.1 * np.clip(a, -1, 1), -2, 2).astype(np.float32)
        return self.s.copy(), float(-np.abs(self.s).sum())
rng = np.random.default_rng(0)
env = PointMass(rng)
trajectories = []
for _ in range(12):
    s, obs, acts, rews = env.reset(), [], [], []
    for t in range(20):
        a = np.clip(-s * rng.uniform(0.2, 1.5) + rng.normal(0, 0.3, 2), -1, 1).astype(np.float32)
        obs.append(s); acts.append(a)
        s, r = env.step(a); rews.append(r)
    trajectories.append({'observations': np.array(obs), 'actions': np.array(acts), 'rewards': np.array(rews, np.float32)})
state_mean = np.concatenate([t['observations'] for t in trajectories]).mean(0)
state_std = np.concatenate([t['observations'] for t in trajectories]).std(0) + 1e-6
rtg_scale = 10.0
class D4RLTrajectoryDataset(Dataset):
    def __init__(self, trajectories, context_len, rtg_scale):
        self.context_len = context_len
        self.trajectories = trajectories
        for traj in self.trajectories:
            traj['observations'] = (traj['observations'] - state_mean) / state_std
            traj['returns_to_go'] = discount_cumsum(traj['rewards'], 1.0) / rtg_scale
    def __len__(self):
        return len(self.trajectories)
    def __getitem__(self, idx):
        traj = self.trajectories[idx]
        si = (idx * 7) % (traj['rewards'].shape[0] - self.context_len)   # (random.randint's role)
        states = torch.from_numpy(traj['observations'][si: si + self.context_len].astype(np.float32))
        actions = torch.from_numpy(traj['actions'][si: si + self.context_len])
        returns_to_go = torch.from_numpy(traj['returns_to_go'][si: si + self.context_len].astype(np.float32))
        timesteps = torch.arange(start=si, end=si + self.context_len, step=1)
        traj_mask = torch.ones(self.context_len, dtype=torch.long)
        return timesteps, states, actions, returns_to_go, traj_mask
context_len, state_dim, act_dim = 6, 2, 2
dataset = D4RLTrajectoryDataset(trajectories, context_len, rtg_scale)
loader = DataLoader(dataset, batch_size=4, shuffle=False, drop_last=True)
model = DecisionTransformer(state_dim, act_dim, n_blocks=2, h_dim=32, context_len=context_len, n_heads=2,
                            drop_p=0.0, max_timestep=64)
sync(model)
fwd = comp(model)
warmup_steps = 4
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda steps: min((steps + 1) / warmup_steps, 1))
LOSSES = []
for epoch in range(3):
    model.train()
    for timesteps, states, actions, returns_to_go, traj_mask in loader:
        action_target = torch.clone(actions).detach()
        state_preds, action_preds, return_preds = fwd(timesteps=timesteps, states=states, actions=actions,
                                                      returns_to_go=returns_to_go.unsqueeze(dim=-1))
        action_preds = action_preds.view(-1, act_dim)[traj_mask.view(-1,) > 0]
        action_target = action_target.view(-1, act_dim)[traj_mask.view(-1,) > 0]
        action_loss = F.mse_loss(action_preds, action_target, reduction='mean')
        optimizer.zero_grad()
        action_loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        scheduler.step()
        LOSSES.append(action_loss.detach().cpu().item())
# evaluation rollout: the context grows to context_len, then slides
model.eval()
env = PointMass(np.random.default_rng(1))
max_ep_len = 10
with torch.no_grad():
    timesteps = torch.arange(start=0, end=max_ep_len, step=1).repeat(1, 1)
    actions = torch.zeros((1, max_ep_len, act_dim), dtype=torch.float32)
    states = torch.zeros((1, max_ep_len, state_dim), dtype=torch.float32)
    rewards_to_go = torch.zeros((1, max_ep_len, 1), dtype=torch.float32)
    running_state = env.reset()
    running_rtg = -3.0 / rtg_scale
    total_reward = 0.0
    for t in range(max_ep_len):
        states[0, t] = torch.from_numpy((running_state - state_mean) / state_std)
        running_rtg = running_rtg - (0.0 if t == 0 else running_reward / rtg_scale)
        rewards_to_go[0, t] = running_rtg
        if t < context_len:
            _, act_preds, _ = fwd(timesteps[:, :context_len], states[:, :context_len], actions[:, :context_len],
                                  rewards_to_go[:, :context_len])
            act = act_preds[0, t].detach()
        else:
            _, act_preds, _ = fwd(timesteps[:, t - context_len + 1:t + 1], states[:, t - context_len + 1:t + 1],
                                  actions[:, t - context_len + 1:t + 1], rewards_to_go[:, t - context_len + 1:t + 1])
            act = act_preds[0, -1].detach()
        running_state, running_reward = env.step(act.cpu().numpy())
        actions[0, t] = act
        total_reward += running_reward
        LOSSES.append(running_reward)
LOSSES.append(total_reward)
