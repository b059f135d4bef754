"""A variational autoencoder on 28x28 images, as pytorch/examples' vae writes it.

784 -> 400 -> (mu, logvar) of 20 -> 400 -> 784 with ReLU and a sigmoid, the
reparameterization ``mu + eps * exp(0.5 * logvar)``, binary cross-entropy summed plus the
KL divergence, Adam(1e-3), batch 128. The noise ``eps`` is drawn with numpy and passed in,
so both frameworks see the same. Compiled: the model.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "vae"
BATCH, LATENT = 128, 20


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, LATENT)
        self.fc22 = nn.Linear(400, LATENT)
        self.fc3 = nn.Linear(LATENT, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar, eps):
        std = torch.exp(0.5 * logvar)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x, eps):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar, eps)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = [(torch.from_numpy(r.random((BATCH, 1, 28, 28), dtype="float32")),
                         torch.from_numpy(r.standard_normal((BATCH, LATENT), dtype="float32")))
                        for _ in range(4)]
        self.model = VAE()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.forward = compile(self.model)
        self.i = 0

    def step(self) -> float:
        data, eps = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.model.train()
        self.optimizer.zero_grad()
        recon_batch, mu, logvar = self.forward(data, eps)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        self.optimizer.step()
        return loss.item()
