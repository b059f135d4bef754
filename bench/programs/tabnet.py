"""A TabNet training step (dreamquark-ai/pytorch-tabnet's TabNetNoEmbeddings, small).

Sparsemax as a custom autograd.Function (sort, cumsum, the support size, an in-place
shift of its input), ghost batch norm (the batch in chunks of 64, each through one
BatchNorm1d), shared and step-specific GLU blocks scaled by sqrt(0.5), attentive
transformers with a prior updated per step, the entropy sparsity loss. 24 features,
n_d = n_a = 16, 4 steps, batch 256, Adam. Many small ops per step: dispatch-bound eager.
Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Function

from .common import load_params, rng

NAME = "tabnet"
FEATURES, CLASSES, ND, STEPS, BATCH, VBS = 24, 4, 16, 4, 256, 64


class Sparsemax(Function):
    @staticmethod
    def forward(ctx, input, dim=-1):
        ctx.dim = dim
        max_val, _ = input.max(dim=dim, keepdim=True)
        input -= max_val
        srt, _ = torch.sort(input, descending=True, dim=dim)
        cumsum = srt.cumsum(dim) - 1
        rhos = torch.arange(1, input.size(dim) + 1, dtype=input.dtype).view(1, -1)
        support_size = (rhos * srt > cumsum).sum(dim=dim).unsqueeze(dim)
        tau = cumsum.gather(dim, support_size - 1) / support_size.to(input.dtype)
        output = torch.clamp(input - tau, min=0)
        ctx.save_for_backward(support_size, output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        supp_size, output = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[output == 0] = 0
        v_hat = (grad_input.sum(dim=ctx.dim) / supp_size.to(output.dtype).squeeze()).unsqueeze(ctx.dim)
        return torch.where(output != 0, grad_input - v_hat, grad_input), None


class GBN(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.bn = nn.BatchNorm1d(dim, momentum=0.02)

    def forward(self, x):
        return torch.cat([self.bn(x_) for x_ in x.chunk(int(np.ceil(x.shape[0] / VBS)), 0)], dim=0)


class GLUBlock(nn.Module):
    def __init__(self, fcs, first):
        super().__init__()
        self.fcs, self.first = fcs, first
        self.bns = nn.ModuleList([GBN(fc.out_features) for fc in fcs])

    def forward(self, x):
        scale = torch.sqrt(torch.FloatTensor([0.5]))
        for i, (fc, bn) in enumerate(zip(self.fcs, self.bns)):
            h = bn(fc(x))
            h = h[:, :2 * ND] * torch.sigmoid(h[:, 2 * ND:])
            x = h if (self.first and i == 0) else (x + h) * scale
        return x


class TabNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.initial_bn = nn.BatchNorm1d(FEATURES, momentum=0.01)
        shared = nn.ModuleList([nn.Linear(FEATURES, 4 * ND, bias=False), nn.Linear(2 * ND, 4 * ND, bias=False)])

        def transformer():
            specific = nn.ModuleList([nn.Linear(2 * ND, 4 * ND, bias=False) for _ in range(2)])
            return nn.Sequential(GLUBlock(shared, True), GLUBlock(specific, False))
        self.splitter = transformer()
        self.feat = nn.ModuleList([transformer() for _ in range(STEPS)])
        self.att_fc = nn.ModuleList([nn.Linear(ND, FEATURES, bias=False) for _ in range(STEPS)])
        self.att_bn = nn.ModuleList([GBN(FEATURES) for _ in range(STEPS)])
        self.final = nn.Linear(ND, CLASSES, bias=False)

    def forward(self, x):
        x = self.initial_bn(x)
        prior = torch.ones(x.shape[0], FEATURES)
        att = self.splitter(x)[:, ND:]
        M_loss, out = 0, 0
        for step in range(STEPS):
            M = Sparsemax.apply(self.att_bn[step](self.att_fc[step](att)) * prior, -1)
            M_loss += torch.mean(torch.sum(M * torch.log(M + 1e-15), dim=1))
            prior = (1.3 - M) * prior
            h = self.feat[step](M * x)
            out = out + torch.relu(h[:, :ND])
            att = h[:, ND:]
        return self.final(out), M_loss / STEPS


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.model = TabNet()
        load_params(NAME, self.model)
        self.forward = compile(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=2e-2)
        self.batches = []
        for _ in range(4):
            x = r.standard_normal((BATCH, FEATURES)).astype(np.float32)
            y = ((x[:, 0] > 0).astype(np.int64) + 2 * (x[:, 1] * x[:, 2] > 0)).astype(np.int64)
            self.batches.append((torch.from_numpy(x), torch.from_numpy(y)))
        self.i = 0

    def step(self) -> float:
        x, y = self.batches[self.i % len(self.batches)]
        self.i += 1
        out, M_loss = self.forward(x)
        loss = nn.functional.cross_entropy(out, y) - 1e-3 * M_loss
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 1)
        self.optimizer.step()
        return loss.item()
