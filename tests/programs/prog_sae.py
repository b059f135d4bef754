from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)

# A top-k sparse autoencoder on a model's activations (Gao et al. 2024, the public repos'
# style): pre-encoder bias from the data's median, k largest latents kept by topk and
# scatter, decoder rows held at unit norm with the gradient's parallel part removed,
# an AuxK loss from the dead latents reconstructing the residual.
class TopKSAE(nn.Module):
    def __init__(self, d_in=24, n_latents=96, k=6, k_aux=12):
        super().__init__()
        self.k, self.k_aux = k, k_aux
        self.b_dec = nn.Parameter(torch.zeros(d_in))
        self.encoder = nn.Linear(d_in, n_latents)
        self.W_dec = nn.Parameter(self.encoder.weight.detach().clone())   # n_latents, d_in
        self.register_buffer("stats_last_nonzero", torch.zeros(n_latents, dtype=torch.long))
        self.set_decoder_norm_to_unit_norm()

    @torch.no_grad()
    def set_decoder_norm_to_unit_norm(self):
        self.W_dec.data /= self.W_dec.data.norm(dim=1, keepdim=True)

    @torch.no_grad()
    def remove_gradient_parallel_to_decoder_directions(self):
        parallel = torch.einsum("ld,ld->l", self.W_dec.grad, self.W_dec.data)
        self.W_dec.grad -= parallel[:, None] * self.W_dec.data

    def decode(self, z):
        return z @ self.W_dec + self.b_dec

    def forward(self, x, dead_threshold=3):
        pre = F.relu(self.encoder(x - self.b_dec))
        vals, idx = pre.topk(self.k, dim=-1, sorted=False)
        z = torch.zeros_like(pre).scatter_(-1, idx, vals)
        recon = self.decode(z)
        fired = (z > 0).any(dim=0).long()
        self.stats_last_nonzero *= 1 - fired
        self.stats_last_nonzero += 1
        dead = self.stats_last_nonzero > dead_threshold
        aux_pre = pre.masked_fill(~dead, 0.0)
        a_vals, a_idx = aux_pre.topk(self.k_aux, dim=-1)
        aux_recon = torch.zeros_like(pre).scatter(-1, a_idx, a_vals) @ self.W_dec
        return recon, aux_recon, z

def normalized_mse(recon, x):
    return ((recon - x) ** 2).mean() / ((x - x.mean(0)) ** 2).mean()

rng = np.random.default_rng(0)
basis = rng.standard_normal((40, 24)).astype(np.float32)
def batch(n=32):   # sparse combinations of 40 hidden features
    codes = rng.random((n, 40)) * (rng.random((n, 40)) < 0.1)
    return torch.from_numpy((codes @ basis).astype(np.float32))

sae = TopKSAE(); sync(sae)
with torch.no_grad():
    sae.b_dec.copy_(batch(128).median(dim=0).values)
opt = torch.optim.Adam(sae.parameters(), lr=2e-3, eps=6.25e-10)
model = comp(sae)
LOSSES = []
for step in range(6):
    x = batch()
    recon, aux_recon, z = model(x)
    mse = normalized_mse(recon, x)
    aux = normalized_mse(aux_recon, (x - recon).detach())
    loss = mse + aux / 32
    opt.zero_grad(); loss.backward()
    sae.remove_gradient_parallel_to_decoder_directions()
    torch.nn.utils.clip_grad_norm_(sae.parameters(), 1.0)
    opt.step(); sae.set_decoder_norm_to_unit_norm()
    LOSSES += [mse.item(), aux.item(), (z > 0).float().sum(-1).mean().item(),
               int((sae.stats_last_nonzero > 3).sum())]
with torch.inference_mode():
    recon, _, z = model(batch(64))
LOSSES += [recon.norm().item(), z.abs().sum().item()]
