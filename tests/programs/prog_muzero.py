from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch
torch.manual_seed(0)
# MuZero's training step as werner-duvaud/muzero-general writes it (models.py's
# MuZeroFullyConnectedNetwork, trainer.py's update_weights), scaled down: representation,
# dynamics and prediction MLPs with min-max normalized hidden states, values and rewards as
# categorical supports under the invertible h(x) transform (scalar_to_support by floor and
# scatter_, support_to_scalar by softmax), a K-step unroll whose hidden state's gradient is
# halved by a register_hook, per-step losses summed and weighted by PER importance weights,
# new priorities read back by .numpy(), SGD with an exponential learning-rate decay set by hand


def mlp(input_size, layer_sizes, output_size, activation=torch.nn.ELU):
    sizes = [input_size] + layer_sizes + [output_size]
    layers = []
    for i in range(len(sizes) - 1):
        act = activation if i < len(sizes) - 2 else torch.nn.Identity
        layers += [torch.nn.Linear(sizes[i], sizes[i + 1]), act()]
    return torch.nn.Sequential(*layers)


def support_to_scalar(logits, support_size):
    probabilities = torch.softmax(logits, dim=1)
    support = (torch.tensor([x for x in range(-support_size, support_size + 1)])
               .expand(probabilities.shape).float().to(device=probabilities.device))
    x = torch.sum(support * probabilities, dim=1, keepdim=True)
    x = torch.sign(x) * (((torch.sqrt(1 + 4 * 0.001 * (torch.abs(x) + 1 + 0.001)) - 1) / (2 * 0.001)) ** 2 - 1)
    return x


def scalar_to_support(x, support_size):
    x = torch.sign(x) * (torch.sqrt(torch.abs(x) + 1) - 1) + 0.001 * x
    x = torch.clamp(x, -support_size, support_size)
    floor = x.floor()
    prob = x - floor
    logits = torch.zeros(x.shape[0], x.shape[1], 2 * support_size + 1).to(x.device)
    logits.scatter_(2, (floor + support_size).long().unsqueeze(-1), (1 - prob).unsqueeze(-1))
    indexes = floor + support_size + 1
    prob = prob.masked_fill_(2 * support_size < indexes, 0.0)
    indexes = indexes.masked_fill_(2 * support_size < indexes, 0.0)
    logits.scatter_(2, indexes.long().unsqueeze(-1), prob.unsqueeze(-1))
    return logits


class MuZeroFullyConnectedNetwork(torch.nn.Module):
    def __init__(self, observation_size, action_space_size, encoding_size, support_size, hidden=32):
        super().__init__()
        self.action_space_size = action_space_size
        self.full_support_size = 2 * support_size + 1
        self.representation_network = mlp(observation_size, [hidden], encoding_size)
        self.dynamics_encoded_state_network = mlp(encoding_size + action_space_size, [hidden], encoding_size)
        self.dynamics_reward_network = mlp(encoding_size, [hidden], self.full_support_size)
        self.prediction_policy_network = mlp(encoding_size, [hidden], action_space_size)
        self.prediction_value_network = mlp(encoding_size, [hidden], self.full_support_size)

    def prediction(self, encoded_state):
        return self.prediction_policy_network(encoded_state), self.prediction_value_network(encoded_state)

    def representation(self, observation):
        encoded_state = self.representation_network(observation.view(observation.shape[0], -1))
        # Scale encoded state between [0, 1] (See appendix paper Training)
        min_encoded_state = encoded_state.min(1, keepdim=True)[0]
        max_encoded_state = encoded_state.max(1, keepdim=True)[0]
        scale_encoded_state = max_encoded_state - min_encoded_state
        scale_encoded_state[scale_encoded_state < 1e-5] += 1e-5
        return (encoded_state - min_encoded_state) / scale_encoded_state

    def dynamics(self, encoded_state, action):
        action_one_hot = torch.zeros((action.shape[0], self.action_space_size)).to(action.device).float()
        action_one_hot.scatter_(1, action.long(), 1.0)
        x = torch.cat((encoded_state, action_one_hot), dim=1)
        next_encoded_state = self.dynamics_encoded_state_network(x)
        reward = self.dynamics_reward_network(next_encoded_state)
        min_next_encoded_state = next_encoded_state.min(1, keepdim=True)[0]
        max_next_encoded_state = next_encoded_state.max(1, keepdim=True)[0]
        scale_next_encoded_state = max_next_encoded_state - min_next_encoded_state
        scale_next_encoded_state[scale_next_encoded_state < 1e-5] += 1e-5
        return (next_encoded_state - min_next_encoded_state) / scale_next_encoded_state, reward

    def initial_inference(self, observation):
        encoded_state = self.representation(observation)
        policy_logits, value = self.prediction(encoded_state)
        reward = torch.log(torch.zeros(1, self.full_support_size).scatter(
            1, torch.tensor([[self.full_support_size // 2]]).long(), 1.0).repeat(len(observation), 1))
        return value, reward, policy_logits, encoded_state

    def recurrent_inference(self, encoded_state, action):
        next_encoded_state, reward = self.dynamics(encoded_state, action)
        policy_logits, value = self.prediction(next_encoded_state)
        return value, reward, policy_logits, next_encoded_state


def loss_function(value, reward, policy_logits, target_value, target_reward, target_policy):
    value_loss = (-target_value * torch.nn.LogSoftmax(dim=1)(value)).sum(1)
    reward_loss = (-target_reward * torch.nn.LogSoftmax(dim=1)(reward)).sum(1)
    policy_loss = (-target_policy * torch.nn.LogSoftmax(dim=1)(policy_logits)).sum(1)
    return value_loss, reward_loss, policy_loss


obs_size, n_actions, support_size, K, batch_size = 8, 3, 5, 3, 16
model = MuZeroFullyConnectedNetwork(obs_size, n_actions, 10, support_size); sync(model)
initial_inference = comp(model.initial_inference)
recurrent_inference = comp(model.recurrent_inference)
lr_init, lr_decay_rate, lr_decay_steps = 0.05, 0.9, 2
optimizer = torch.optim.SGD(model.parameters(), lr=lr_init, momentum=0.9, weight_decay=1e-4)
rng = np.random.default_rng(0)
LOSSES = []
for training_step in range(4):
    lr = lr_init * lr_decay_rate ** (training_step / lr_decay_steps)
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    observation_batch = torch.tensor(rng.standard_normal((batch_size, obs_size)), dtype=torch.float32)
    action_batch = torch.tensor(rng.integers(0, n_actions, (batch_size, K + 1)), dtype=torch.long).unsqueeze(-1)
    target_value = torch.tensor(rng.uniform(-3, 30, (batch_size, K + 1)), dtype=torch.float32)
    target_reward = torch.tensor(rng.uniform(0, 2, (batch_size, K + 1)), dtype=torch.float32)
    target_policy = torch.tensor(rng.dirichlet(np.ones(n_actions), (batch_size, K + 1)), dtype=torch.float32)
    weight_batch = torch.tensor(rng.uniform(0.5, 1.0, batch_size), dtype=torch.float32)
    gradient_scale_batch = torch.tensor(np.full((batch_size, K + 1), float(K)), dtype=torch.float32)
    target_value_scalar = np.array(target_value, dtype="float32")
    priorities = np.zeros_like(target_value_scalar)
    target_value = scalar_to_support(target_value, support_size)
    target_reward = scalar_to_support(target_reward, support_size)

    value, reward, policy_logits, hidden_state = initial_inference(observation_batch)
    predictions = [(value, reward, policy_logits)]
    for i in range(1, action_batch.shape[1]):
        value, reward, policy_logits, hidden_state = recurrent_inference(hidden_state, action_batch[:, i])
        # Scale the gradient at the start of the dynamics function (See paper appendix Training)
        hidden_state.register_hook(lambda grad: grad * 0.5)
        predictions.append((value, reward, policy_logits))

    value, reward, policy_logits = predictions[0]
    current_value_loss, _, current_policy_loss = loss_function(
        value.squeeze(-1), reward.squeeze(-1), policy_logits, target_value[:, 0], target_reward[:, 0],
        target_policy[:, 0])
    value_loss, reward_loss, policy_loss = current_value_loss, torch.zeros_like(current_value_loss), current_policy_loss
    pred_value_scalar = support_to_scalar(value, support_size).detach().cpu().numpy().squeeze()
    priorities[:, 0] = np.abs(pred_value_scalar - target_value_scalar[:, 0]) ** 1.0
    for i in range(1, len(predictions)):
        value, reward, policy_logits = predictions[i]
        current_value_loss, current_reward_loss, current_policy_loss = loss_function(
            value.squeeze(-1), reward.squeeze(-1), policy_logits, target_value[:, i], target_reward[:, i],
            target_policy[:, i])
        # Scale gradient by the number of unroll steps (See paper appendix Training)
        current_value_loss.register_hook(lambda grad: grad / gradient_scale_batch[:, i])
        current_reward_loss.register_hook(lambda grad: grad / gradient_scale_batch[:, i])
        current_policy_loss.register_hook(lambda grad: grad / gradient_scale_batch[:, i])
        value_loss += current_value_loss
        reward_loss += current_reward_loss
        policy_loss += current_policy_loss
        pred_value_scalar = support_to_scalar(value, support_size).detach().cpu().numpy().squeeze()
        priorities[:, i] = np.abs(pred_value_scalar - target_value_scalar[:, i]) ** 1.0

    loss = value_loss * 0.25 + reward_loss + policy_loss
    loss *= weight_batch  # Correct PER bias by using importance-sampling (IS) weights
    loss = loss.mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    LOSSES += [loss.item(), value_loss.mean().item(), reward_loss.mean().item(), policy_loss.mean().item(),
               float(priorities.mean())]
model.eval()
with torch.no_grad():
    root_value, reward, policy_logits, hidden_state = initial_inference(observation_batch[:2])
    value, reward, policy_logits, _ = recurrent_inference(hidden_state, torch.tensor([[1], [2]]))
LOSSES += support_to_scalar(root_value, support_size).flatten().tolist() + policy_logits.flatten().tolist()
LOSSES.append(support_to_scalar(reward, support_size).sum().item())
