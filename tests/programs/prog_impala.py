from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import copy, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# IMPALA as torchbeast's monobeast writes it, on a batch of Catch games: an actor model that
# lags the learner's weights (load_state_dict every other update, so its policy is the
# behaviour policy) steps the games one frame at a time and stores rollouts of T + 1 frames
# (frame, reward, done, last action, the behaviour logits); the learner's AtariNet-style net
# (convs, fc, clipped reward and one-hot last action into an LSTM core whose state is reset
# by (~done).float() inside a Python loop over time) runs on the whole rollout from the
# rollout's initial core state; V-trace (vtrace.from_logits: clipped importance weights, a
# reversed loop accumulating vs - V under no_grad) gives the policy-gradient advantages and
# the baseline targets; losses as monobeast's (pg, 0.5 * baseline, entropy), RMSprop
# (eps=0.01) under a linearly decaying LambdaLR, clip_grad_norm_(40)
def action_log_probs(policy_logits, actions):
    return -F.nll_loss(F.log_softmax(torch.flatten(policy_logits, 0, -2), dim=-1),
                       torch.flatten(actions), reduction="none").view_as(actions)
@torch.no_grad()
def from_importance_weights(log_rhos, discounts, rewards, values, bootstrap_value,
                            clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0):
    rhos = torch.exp(log_rhos)
    clipped_rhos = torch.clamp(rhos, max=clip_rho_threshold)
    cs = torch.clamp(rhos, max=1.0)
    values_t_plus_1 = torch.cat([values[1:], torch.unsqueeze(bootstrap_value, 0)], dim=0)
    deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)
    acc = torch.zeros_like(bootstrap_value)
    result = []
    for t in range(discounts.shape[0] - 1, -1, -1):
        acc = deltas[t] + discounts[t] * cs[t] * acc
        result.append(acc)
    result.reverse()
    vs_minus_v_xs = torch.stack(result)
    vs = torch.add(vs_minus_v_xs, values)
    vs_t_plus_1 = torch.cat([vs[1:], torch.unsqueeze(bootstrap_value, 0)], dim=0)
    clipped_pg_rhos = torch.clamp(rhos, max=clip_pg_rho_threshold)
    pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_t_plus_1 - values)
    return vs, pg_advantages
def from_logits(behavior_policy_logits, target_policy_logits, actions, discounts, rewards, values, bootstrap_value):
    target_action_log_probs = action_log_probs(target_policy_logits, actions)
    behavior_action_log_probs = action_log_probs(behavior_policy_logits, actions)
    log_rhos = target_action_log_probs - behavior_action_log_probs
    return from_importance_weights(log_rhos, discounts, rewards, values, bootstrap_value)
def compute_baseline_loss(advantages):
    return 0.5 * torch.sum(advantages ** 2)
def compute_entropy_loss(logits):
    policy = F.softmax(logits, dim=-1)
    log_policy = F.log_softmax(logits, dim=-1)
    return torch.sum(policy * log_policy)
def compute_policy_gradient_loss(logits, actions, advantages):
    cross_entropy = F.nll_loss(F.log_softmax(torch.flatten(logits, 0, 1), dim=-1),
                               target=torch.flatten(actions, 0, 1), reduction="none")
    cross_entropy = cross_entropy.view_as(advantages)
    return torch.sum(cross_entropy * advantages.detach())
class AtariNet(nn.Module):
    def __init__(self, observation_shape, num_actions, use_lstm=True):
        super().__init__()
        self.observation_shape, self.num_actions = observation_shape, num_actions
        self.conv1 = nn.Conv2d(observation_shape[0], 8, kernel_size=3, stride=1, padding=1)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, stride=2, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 64)
        core_output_size = self.fc.out_features + num_actions + 1
        self.use_lstm = use_lstm
        if use_lstm:
            self.core = nn.LSTM(core_output_size, core_output_size, 1)
        self.policy = nn.Linear(core_output_size, self.num_actions)
        self.baseline = nn.Linear(core_output_size, 1)
    def initial_state(self, batch_size):
        return tuple(torch.zeros(self.core.num_layers, batch_size, self.core.hidden_size) for _ in range(2))
    def forward(self, inputs, core_state=()):
        x = inputs["frame"]  # [T, B, C, H, W].
        T, B, *_ = x.shape
        x = torch.flatten(x, 0, 1)  # Merge time and batch.
        x = x.float() / 255.0
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = x.view(T * B, -1)
        x = F.relu(self.fc(x))
        one_hot_last_action = F.one_hot(inputs["last_action"].view(T * B), self.num_actions).float()
        clipped_reward = torch.clamp(inputs["reward"], -1, 1).view(T * B, 1)
        core_input = torch.cat([x, clipped_reward, one_hot_last_action], dim=-1)
        core_input = core_input.view(T, B, -1)
        core_output_list = []
        notdone = (~inputs["done"]).float()
        for input, nd in zip(core_input.unbind(), notdone.unbind()):
            nd = nd.view(1, -1, 1)
            core_state = tuple(nd * s for s in core_state)
            output, core_state = self.core(input.unsqueeze(0), core_state)
            core_output_list.append(output)
        core_output = torch.flatten(torch.cat(core_output_list), 0, 1)
        policy_logits = self.policy(core_output)
        baseline = self.baseline(core_output)
        action = torch.argmax(policy_logits, dim=1)
        policy_logits = policy_logits.view(T, B, self.num_actions)
        baseline = baseline.view(T, B)
        action = action.view(T, B)
        return dict(policy_logits=policy_logits, baseline=baseline, action=action), core_state
class Catch:
    """A ball falls down an 8x8 screen; the paddle on the bottom row moves left, stays or right."""
    def __init__(self, rng, size=8):
        self.rng, self.size = rng, size
        self.reset()
    def reset(self):
        self.ball = [0, int(self.rng.integers(0, self.size))]
        self.paddle = self.size // 2
    def frame(self):
        f = np.zeros((1, self.size, self.size), np.uint8)
        f[0, self.ball[0], self.ball[1]] = 255; f[0, -1, self.paddle] = 128
        return f
    def step(self, action):
        self.paddle = int(np.clip(self.paddle + action - 1, 0, self.size - 1))
        self.ball[0] += 1
        if self.ball[0] == self.size - 1:
            reward = 1.0 if self.ball[1] == self.paddle else -1.0
            self.reset()
            return reward, True
        return 0.0, False
T, B, num_actions = 8, 4, 3
rng = np.random.default_rng(0)
envs = [Catch(rng) for _ in range(B)]
model = AtariNet((1, 8, 8), num_actions); sync(model)
actor_model = copy.deepcopy(model); actor_model.eval()
learner, actor = comp(model, fullgraph=True), comp(actor_model, fullgraph=True)
optimizer = torch.optim.RMSprop(model.parameters(), lr=4e-3, momentum=0, eps=0.01, alpha=0.99)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 1 - min(epoch * T * B, 800) / 1000)
env_output = dict(frame=torch.from_numpy(np.stack([e.frame() for e in envs]))[None], reward=torch.zeros(1, B),
                  done=torch.ones(1, B, dtype=torch.bool), last_action=torch.zeros(1, B, dtype=torch.int64))
agent_state = model.initial_state(B)
LOSSES = []
for update in range(6):
    initial_agent_state = agent_state
    with torch.no_grad():
        agent_output, agent_state = actor(env_output, agent_state)
    rollout = {k: [v] for k, v in env_output.items()}
    rollout["policy_logits"] = [torch.zeros_like(agent_output["policy_logits"])]   # index t + 1: frame t's
    rollout["action"] = [env_output["last_action"]]
    for t in range(T):
        rollout["policy_logits"].append(agent_output["policy_logits"])
        probs = F.softmax(agent_output["policy_logits"][0], dim=-1).numpy().astype(np.float64)
        actions = np.array([rng.choice(num_actions, p=p / p.sum()) for p in probs])
        steps = [e.step(a) for e, a in zip(envs, actions)]
        env_output = dict(frame=torch.from_numpy(np.stack([e.frame() for e in envs]))[None],
                          reward=torch.tensor([[r for r, _ in steps]], dtype=torch.float32),
                          done=torch.tensor([[d for _, d in steps]]),
                          last_action=torch.from_numpy(actions)[None])
        with torch.no_grad():
            agent_output, agent_state = actor(env_output, agent_state)
        for k, v in env_output.items():
            rollout[k].append(v)
        rollout["action"].append(env_output["last_action"])
    batch = {k: torch.cat(v) for k, v in rollout.items()}
    learner_outputs, unused_state = learner(batch, initial_agent_state)
    bootstrap_value = learner_outputs["baseline"][-1]
    batch = {key: tensor[1:] for key, tensor in batch.items()}
    learner_outputs = {key: tensor[:-1] for key, tensor in learner_outputs.items()}
    rewards = batch["reward"]
    clipped_rewards = torch.clamp(rewards, -1, 1)
    discounts = (~batch["done"]).float() * 0.99
    vs, pg_advantages = from_logits(batch["policy_logits"], learner_outputs["policy_logits"], batch["action"],
                                    discounts, clipped_rewards, learner_outputs["baseline"], bootstrap_value)
    pg_loss = compute_policy_gradient_loss(learner_outputs["policy_logits"], batch["action"], pg_advantages)
    baseline_loss = 0.5 * compute_baseline_loss(vs - learner_outputs["baseline"])
    entropy_loss = 0.0006 * compute_entropy_loss(learner_outputs["policy_logits"])
    total_loss = pg_loss + baseline_loss + entropy_loss
    optimizer.zero_grad()
    total_loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 40.0)
    optimizer.step(); scheduler.step()
    if update % 2 == 1:
        actor_model.load_state_dict(model.state_dict())
    LOSSES += [total_loss.item(), pg_loss.item(), baseline_loss.item(), vs.sum().item()]
actor_model.load_state_dict(model.state_dict())
with torch.no_grad():   # the actor with the learner's final weights
    out, _ = actor(env_output, model.initial_state(B))
LOSSES += [out["baseline"].sum().item(), float(out["action"].sum())]
