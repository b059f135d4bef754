"""VQ-VAE (van den Oord et al.) with an EMA codebook, as the common PyTorch ports write it.

Batch 16 images 3x32x32; encoder: two stride-2 4x4 convs, a 3x3 conv, 2 residual blocks;
a 1x1 conv to 16-dim latents; the quantizer: distances to 128 codes by matmul, argmin,
one-hot codes by ``scatter_``, the codebook updated by exponential moving averages (new
``nn.Parameter``s each step), commitment loss, the straight-through estimator
(``inputs + (quantized - inputs).detach()``), perplexity; decoder: a 3x3 conv, 2
residual blocks, two ConvTranspose2d. MSE + commitment loss, Adam. Compiled: the
encoder (with the 1x1 conv) and the decoder, as two modules; the quantizer runs eagerly.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "vqvae"
BATCH, HIDDENS, RES_HIDDENS, CODES, DIM = 16, 64, 32, 128, 16


class VectorQuantizerEMA(nn.Module):
    def __init__(self, num_embeddings, embedding_dim, commitment_cost=0.25, decay=0.99, epsilon=1e-5):
        super().__init__()
        self._embedding_dim, self._num_embeddings = embedding_dim, num_embeddings
        self._embedding = nn.Embedding(num_embeddings, embedding_dim)
        self._commitment_cost, self._decay, self._epsilon = commitment_cost, decay, epsilon
        self.register_buffer('_ema_cluster_size', torch.zeros(num_embeddings))
        self._ema_w = nn.Parameter(torch.Tensor(num_embeddings, embedding_dim))

    def forward(self, inputs):
        inputs = inputs.permute(0, 2, 3, 1).contiguous()
        input_shape = inputs.shape
        flat_input = inputs.view(-1, self._embedding_dim)
        distances = (torch.sum(flat_input ** 2, dim=1, keepdim=True) + torch.sum(self._embedding.weight ** 2, dim=1)
                     - 2 * torch.matmul(flat_input, self._embedding.weight.t()))
        encoding_indices = torch.argmin(distances, dim=1).unsqueeze(1)
        encodings = torch.zeros(encoding_indices.shape[0], self._num_embeddings)
        encodings.scatter_(1, encoding_indices, 1)
        quantized = torch.matmul(encodings, self._embedding.weight).view(input_shape)
        if self.training:
            self._ema_cluster_size = self._ema_cluster_size * self._decay + (1 - self._decay) * torch.sum(encodings, 0)
            n = torch.sum(self._ema_cluster_size.data)
            self._ema_cluster_size = ((self._ema_cluster_size + self._epsilon)
                                      / (n + self._num_embeddings * self._epsilon) * n)
            dw = torch.matmul(encodings.t(), flat_input)
            self._ema_w = nn.Parameter(self._ema_w * self._decay + (1 - self._decay) * dw)
            self._embedding.weight = nn.Parameter(self._ema_w / self._ema_cluster_size.unsqueeze(1))
        loss = self._commitment_cost * F.mse_loss(quantized.detach(), inputs)
        quantized = inputs + (quantized - inputs).detach()
        avg_probs = torch.mean(encodings, dim=0)
        perplexity = torch.exp(-torch.sum(avg_probs * torch.log(avg_probs + 1e-10)))
        return loss, quantized.permute(0, 3, 1, 2).contiguous(), perplexity


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self._block = nn.Sequential(nn.ReLU(True), nn.Conv2d(HIDDENS, RES_HIDDENS, 3, 1, 1, bias=False),
                                    nn.ReLU(True), nn.Conv2d(RES_HIDDENS, HIDDENS, 1, 1, bias=False))

    def forward(self, x):
        return x + self._block(x)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self._conv_1 = nn.Conv2d(3, HIDDENS // 2, 4, 2, 1)
        self._conv_2 = nn.Conv2d(HIDDENS // 2, HIDDENS, 4, 2, 1)
        self._conv_3 = nn.Conv2d(HIDDENS, HIDDENS, 3, 1, 1)
        self._residual_stack = nn.Sequential(Residual(), Residual(), nn.ReLU())
        self._pre_vq_conv = nn.Conv2d(HIDDENS, DIM, 1, 1)

    def forward(self, x):
        x = F.relu(self._conv_2(F.relu(self._conv_1(x))))
        return self._pre_vq_conv(self._residual_stack(self._conv_3(x)))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self._conv_1 = nn.Conv2d(DIM, HIDDENS, 3, 1, 1)
        self._residual_stack = nn.Sequential(Residual(), Residual(), nn.ReLU())
        self._conv_trans_1 = nn.ConvTranspose2d(HIDDENS, HIDDENS // 2, 4, 2, 1)
        self._conv_trans_2 = nn.ConvTranspose2d(HIDDENS // 2, 3, 4, 2, 1)

    def forward(self, x):
        x = self._residual_stack(self._conv_1(x))
        return self._conv_trans_2(F.relu(self._conv_trans_1(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self._encoder, self._vq_vae, self._decoder = Encoder(), VectorQuantizerEMA(CODES, DIM), Decoder()


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = Model()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.encode, self.decode = compile(self.model._encoder), compile(self.model._decoder)

    def step(self) -> float:
        data = torch.from_numpy((self.r.random((BATCH, 3, 32, 32)) - 0.5).astype(np.float32))
        self.optimizer.zero_grad()
        vq_loss, quantized, perplexity = self.model._vq_vae(self.encode(data))
        loss = F.mse_loss(self.decode(quantized), data) / 0.06 + vq_loss
        loss.backward()
        self.optimizer.step()
        return loss.item()
