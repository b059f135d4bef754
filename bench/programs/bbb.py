"""Bayes by Backprop on MNIST-sized data, as the "Weight Uncertainty in Neural Networks"
tutorials write it.

A 784-400-400-10 network whose every weight is a Gaussian (mu, rho), sigma =
log1p(exp(rho)), sampled by reparameterization at each forward; the log posterior and a
scale-mixture prior (two ``torch.distributions.Normal``) summed over every weight and kept
on the layers; two samples a step, the ELBO from their mean log-probabilities and the
summed NLL of their mean output; Adam; batch 100. The standard-normal draws come from
numpy and are passed to the forward. Compiled: the network.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "bbb"
SIZES, BATCH, SAMPLES, NUM_BATCHES = (784, 400, 400, 10), 100, 2, 600
PI, SIGMA_1, SIGMA_2 = 0.5, math.exp(-0), math.exp(-6)


class ScaleMixtureGaussian:
    def __init__(self):
        self.gaussian1 = torch.distributions.Normal(0, SIGMA_1)
        self.gaussian2 = torch.distributions.Normal(0, SIGMA_2)

    def log_prob(self, x):
        prob1 = torch.exp(self.gaussian1.log_prob(x))
        prob2 = torch.exp(self.gaussian2.log_prob(x))
        return torch.log(PI * prob1 + (1 - PI) * prob2).sum()


def gaussian_log_prob(x, mu, sigma):
    return (-math.log(math.sqrt(2 * math.pi)) - torch.log(sigma) - ((x - mu) ** 2) / (2 * sigma ** 2)).sum()


class BayesianLinear(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight_mu = nn.Parameter(torch.zeros(n_out, n_in))
        self.weight_rho = nn.Parameter(torch.zeros(n_out, n_in))
        self.bias_mu = nn.Parameter(torch.zeros(n_out))
        self.bias_rho = nn.Parameter(torch.zeros(n_out))
        self.prior = ScaleMixtureGaussian()
        self.log_prior, self.log_variational_posterior = 0, 0

    def forward(self, x, eps_w, eps_b):
        w_sigma, b_sigma = torch.log1p(torch.exp(self.weight_rho)), torch.log1p(torch.exp(self.bias_rho))
        weight = self.weight_mu + w_sigma * eps_w
        bias = self.bias_mu + b_sigma * eps_b
        self.log_prior = self.prior.log_prob(weight) + self.prior.log_prob(bias)
        self.log_variational_posterior = (gaussian_log_prob(weight, self.weight_mu, w_sigma)
                                          + gaussian_log_prob(bias, self.bias_mu, b_sigma))
        return F.linear(x, weight, bias)


class BayesianNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([BayesianLinear(a, b) for a, b in zip(SIZES, SIZES[1:])])

    def forward(self, x, eps):
        for i, layer in enumerate(self.layers):
            x = layer(x, *eps[i])
            x = F.relu(x) if i < len(self.layers) - 1 else F.log_softmax(x, dim=1)
        log_prior = sum(layer.log_prior for layer in self.layers)
        return x, log_prior, sum(layer.log_variational_posterior for layer in self.layers)


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = BayesianNetwork()
        load_params(NAME, self.model)
        with torch.no_grad():   # rho around -4.5: sigma about 0.01, as the tutorial starts
            for layer in self.model.layers:
                layer.weight_rho.sub_(4.5)
                layer.bias_rho.sub_(4.5)
        self.net = compile(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.x = torch.from_numpy(self.r.random((4, BATCH, SIZES[0])).astype(np.float32))
        self.y = torch.from_numpy(self.r.integers(0, 10, (4, BATCH)))
        self.i = 0

    def eps(self):
        return [(torch.from_numpy(self.r.standard_normal((b, a)).astype(np.float32)),
                 torch.from_numpy(self.r.standard_normal(b).astype(np.float32))) for a, b in zip(SIZES, SIZES[1:])]

    def step(self) -> float:
        x, y = self.x[self.i % 4], self.y[self.i % 4]
        self.i += 1
        self.model.zero_grad()
        outputs, log_priors, log_posts = [], [], []
        for _ in range(SAMPLES):
            out, log_prior, log_post = self.net(x, self.eps())
            outputs.append(out)
            log_priors.append(log_prior)
            log_posts.append(log_post)
        nll = F.nll_loss(torch.stack(outputs).mean(0), y, reduction="sum")
        loss = (torch.stack(log_posts).mean() - torch.stack(log_priors).mean()) / NUM_BATCHES + nll
        loss.backward()
        self.optimizer.step()
        return loss.item()
