from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
# Bayes by Backprop as the "Weight Uncertainty in Neural Networks" tutorials write it: each
# weight a Gaussian (mu, rho) with sigma = log1p(exp(rho)), sampled by reparameterization
# at every forward, a scale-mixture prior pi N(0, s1) + (1 - pi) N(0, s2) by
# torch.distributions.Normal, the ELBO estimated from several samples a step (the log
# posterior minus the log prior over the number of batches, plus the summed NLL); the
# standard-normal draws come from numpy (as randn would) and are handed to the forward
PI, SIGMA_1, SIGMA_2 = 0.5, torch.FloatTensor([math.exp(-0)]), torch.FloatTensor([math.exp(-6)])
class Gaussian(object):
    def __init__(self, mu, rho):
        super().__init__()
        self.mu, self.rho = mu, rho
    @property
    def sigma(self):
        return torch.log1p(torch.exp(self.rho))
    def sample(self, epsilon):
        return self.mu + self.sigma * epsilon
    def log_prob(self, input):
        return (-math.log(math.sqrt(2 * math.pi)) - torch.log(self.sigma)
                - ((input - self.mu) ** 2) / (2 * self.sigma ** 2)).sum()
class ScaleMixtureGaussian(object):
    def __init__(self, pi, sigma1, sigma2):
        super().__init__()
        self.pi = pi
        self.gaussian1 = torch.distributions.Normal(0, sigma1)
        self.gaussian2 = torch.distributions.Normal(0, sigma2)
    def log_prob(self, input):
        prob1 = torch.exp(self.gaussian1.log_prob(input))
        prob2 = torch.exp(self.gaussian2.log_prob(input))
        return (torch.log(self.pi * prob1 + (1 - self.pi) * prob2)).sum()
class BayesianLinear(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight_mu = nn.Parameter(torch.Tensor(out_features, in_features).uniform_(-0.2, 0.2))
        self.weight_rho = nn.Parameter(torch.Tensor(out_features, in_features).uniform_(-5, -4))
        self.weight = Gaussian(self.weight_mu, self.weight_rho)
        self.bias_mu = nn.Parameter(torch.Tensor(out_features).uniform_(-0.2, 0.2))
        self.bias_rho = nn.Parameter(torch.Tensor(out_features).uniform_(-5, -4))
        self.bias = Gaussian(self.bias_mu, self.bias_rho)
        self.weight_prior = ScaleMixtureGaussian(PI, SIGMA_1, SIGMA_2)
        self.bias_prior = ScaleMixtureGaussian(PI, SIGMA_1, SIGMA_2)
        self.log_prior, self.log_variational_posterior = 0, 0
    def forward(self, input, eps=None, sample=False, calculate_log_probs=False):
        if self.training or sample:
            weight, bias = self.weight.sample(eps[0]), self.bias.sample(eps[1])
        else:
            weight, bias = self.weight.mu, self.bias.mu
        if self.training or calculate_log_probs:
            self.log_prior = self.weight_prior.log_prob(weight) + self.bias_prior.log_prob(bias)
            self.log_variational_posterior = self.weight.log_prob(weight) + self.bias.log_prob(bias)
        else:
            self.log_prior, self.log_variational_posterior = 0, 0
        return F.linear(input, weight, bias)
class BayesianNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = BayesianLinear(20, 32)
        self.l2 = BayesianLinear(32, 32)
        self.l3 = BayesianLinear(32, 4)
    def forward(self, x, eps=None, sample=False):
        eps = eps or [None] * 3
        x = F.relu(self.l1(x, eps[0], sample))
        x = F.relu(self.l2(x, eps[1], sample))
        x = F.log_softmax(self.l3(x, eps[2], sample), dim=1)
        return x, self.log_prior(), self.log_variational_posterior()
    def log_prior(self):
        return self.l1.log_prior + self.l2.log_prior + self.l3.log_prior
    def log_variational_posterior(self):
        return self.l1.log_variational_posterior + self.l2.log_variational_posterior + self.l3.log_variational_posterior
r = np.random.default_rng(0)
def draw_eps(net):
    return [(torch.from_numpy(r.standard_normal((l.out_features, l.in_features)).astype(np.float32)),
             torch.from_numpy(r.standard_normal(l.out_features).astype(np.float32))) for l in (net.l1, net.l2, net.l3)]
X = r.standard_normal((96, 20)).astype(np.float32)
Y = (X[:, :4] @ r.standard_normal((4, 4)) + 0.1 * r.standard_normal((96, 4))).argmax(1)
BATCH_SIZE, SAMPLES, CLASSES = 32, 3, 4
loader = DataLoader(TensorDataset(torch.from_numpy(X), torch.from_numpy(Y)), batch_size=BATCH_SIZE, shuffle=False)
NUM_BATCHES = len(loader)
model = BayesianNetwork(); sync(model)
net = comp(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
def sample_elbo(input, target, samples=SAMPLES):
    outputs = torch.zeros(samples, BATCH_SIZE, CLASSES)
    log_priors = torch.zeros(samples)
    log_variational_posteriors = torch.zeros(samples)
    for i in range(samples):
        outputs[i], log_priors[i], log_variational_posteriors[i] = net(input, draw_eps(model), sample=True)
    log_prior = log_priors.mean()
    log_variational_posterior = log_variational_posteriors.mean()
    negative_log_likelihood = F.nll_loss(outputs.mean(0), target, reduction='sum')
    loss = (log_variational_posterior - log_prior) / NUM_BATCHES + negative_log_likelihood
    return loss, log_prior, log_variational_posterior, negative_log_likelihood
LOSSES = []
for epoch in range(2):
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        model.zero_grad()
        loss, log_prior, log_variational_posterior, negative_log_likelihood = sample_elbo(data, target)
        loss.backward()
        optimizer.step()
        LOSSES += [loss.item(), log_prior.item(), negative_log_likelihood.item()]
model.eval()
with torch.no_grad():   # the ensemble of sampled networks and the mean network, as the tutorial tests
    data = torch.from_numpy(X[:32])
    outputs = torch.stack([net(data, draw_eps(model), sample=True)[0] for _ in range(SAMPLES)])
    mean_out = net(data)[0]
    LOSSES += [outputs.exp().mean(0).max(1)[0].sum().item(), mean_out.sum().item(),
               model.l1.weight.sigma.mean().item()]
