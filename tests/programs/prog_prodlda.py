from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import argparse, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.autograd import Variable
torch.manual_seed(0)
# ProdLDA (Srivastava & Sutton's autoencoding variational inference for topic models) as
# its PyTorch port writes it: a softplus encoder, BatchNorm'd posterior mean and log
# variance, the Dirichlet prior's Laplace approximation in the softmax basis kept as
# buffers, reparameterized topic proportions (the noise made by input.data.new().resize_as_
# and filled from numpy, as torch's generator cannot be shared), a product of experts
# decoder (softmax of a BatchNorm'd linear map), the negative log-likelihood of the word
# counts plus the Gaussian KL written out, legacy Variable wrappers and
# `.data.uniform_` init; Adam with beta1 0.99, compiled with the loss inside the forward
# (a keyword argument choosing it); perplexity in eval. The layers before a BatchNorm have no
# bias: its gradient is rounding noise, which Adam's normalized step turns into lr-sized
# moves of the running means (any two summation orders then disagree in eval)
class ProdLDA(nn.Module):
    def __init__(self, net_arch):
        super(ProdLDA, self).__init__()
        ac = net_arch
        self.net_arch = net_arch
        self.en1_fc = nn.Linear(ac.num_input, ac.en1_units)
        self.en2_fc = nn.Linear(ac.en1_units, ac.en2_units)
        self.en2_drop = nn.Dropout(ac.drop)
        self.mean_fc = nn.Linear(ac.en2_units, ac.num_topic, bias=False)
        self.mean_bn = nn.BatchNorm1d(ac.num_topic)
        self.logvar_fc = nn.Linear(ac.en2_units, ac.num_topic, bias=False)
        self.logvar_bn = nn.BatchNorm1d(ac.num_topic)
        self.p_drop = nn.Dropout(ac.drop)
        self.decoder = nn.Linear(ac.num_topic, ac.num_input, bias=False)
        self.decoder_bn = nn.BatchNorm1d(ac.num_input)
        # prior: Dirichlet(alpha) by its Laplace approximation in the softmax basis
        a = 1.0 * np.ones((1, ac.num_topic)).astype(np.float32)
        prior_mean = torch.from_numpy((np.log(a).T - np.mean(np.log(a), 1)).T)
        prior_var = torch.from_numpy((((1.0 / a) * (1 - (2.0 / ac.num_topic))).T
                                      + (1.0 / (ac.num_topic * ac.num_topic)) * np.sum(1.0 / a, 1)).T)
        prior_logvar = prior_var.log()
        self.register_buffer('prior_mean', prior_mean)
        self.register_buffer('prior_var', prior_var)
        self.register_buffer('prior_logvar', prior_logvar)
        if ac.init_mult != 0:
            self.decoder.weight.data.uniform_(0, ac.init_mult)
    def forward(self, input, noise, compute_loss=False, avg_loss=True):
        en1 = F.softplus(self.en1_fc(input))
        en2 = F.softplus(self.en2_fc(en1))
        en2 = self.en2_drop(en2)
        posterior_mean = self.mean_bn(self.mean_fc(en2))
        posterior_logvar = self.logvar_bn(self.logvar_fc(en2))
        posterior_var = posterior_logvar.exp()
        eps = Variable(input.data.new().resize_as_(posterior_mean.data).copy_(noise))
        z = posterior_mean + posterior_var.sqrt() * eps
        p = F.softmax(z, dim=1)
        p = self.p_drop(p)
        recon = F.softmax(self.decoder_bn(self.decoder(p)), dim=1)
        if compute_loss:
            return recon, self.loss(input, recon, posterior_mean, posterior_logvar, posterior_var, avg_loss)
        return recon
    def loss(self, input, recon, posterior_mean, posterior_logvar, posterior_var, avg=True):
        NL = -(input * (recon + 1e-10).log()).sum(1)
        prior_mean = Variable(self.prior_mean).expand_as(posterior_mean)
        prior_var = Variable(self.prior_var).expand_as(posterior_mean)
        prior_logvar = Variable(self.prior_logvar).expand_as(posterior_mean)
        var_division = posterior_var / prior_var
        diff = posterior_mean - prior_mean
        diff_term = diff * diff / prior_var
        logvar_division = prior_logvar - posterior_logvar
        KLD = 0.5 * ((var_division + diff_term + logvar_division).sum(1) - self.net_arch.num_topic)
        loss = (NL + KLD)
        if avg:
            return loss.mean()
        return loss
def make_corpus(rng, n_docs, vocab, topics, length=40):
    """Documents drawn by LDA's generative story from sparse topics."""
    beta = rng.dirichlet(np.full(vocab, 0.05), topics)
    theta = rng.dirichlet(np.full(topics, 0.3), n_docs)
    return np.stack([rng.multinomial(length, t @ beta) for t in theta]).astype(np.float32)
parser = argparse.ArgumentParser()
parser.add_argument('-f', '--en1-units', type=int, default=32)
parser.add_argument('-s', '--en2-units', type=int, default=32)
parser.add_argument('-t', '--num-topic', type=int, default=6)
parser.add_argument('-b', '--batch-size', type=int, default=16)
parser.add_argument('-r', '--learning-rate', type=float, default=0.002)
parser.add_argument('-m', '--momentum', type=float, default=0.99)
parser.add_argument('-e', '--num-epoch', type=int, default=3)
parser.add_argument('-q', '--init-mult', type=float, default=1.0)
parser.add_argument('-v', '--variance', type=float, default=0.995)
parser.add_argument('-d', '--drop', type=float, default=0.0)
args = parser.parse_args([])
rng = np.random.default_rng(0)
tensor_tr = torch.from_numpy(make_corpus(rng, 64, 50, 6))
tensor_te = torch.from_numpy(make_corpus(rng, 16, 50, 6))
args.num_input = tensor_tr.shape[1]
model = ProdLDA(args); sync(model)
net = comp(model)
optimizer = torch.optim.Adam(model.parameters(), args.learning_rate, betas=(args.momentum, 0.999))
LOSSES = []
for epoch in range(args.num_epoch):
    all_indices = torch.from_numpy(rng.permutation(tensor_tr.size(0)))
    loss_epoch = 0.0
    model.train()
    for batch_indices in torch.split(all_indices, args.batch_size):
        input = Variable(tensor_tr[batch_indices])
        noise = torch.from_numpy(rng.standard_normal((len(batch_indices), args.num_topic)).astype(np.float32))
        recon, loss = net(input, noise, compute_loss=True)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss_epoch += loss.data.item()
        LOSSES.append(loss.item())
    LOSSES.append(loss_epoch / len(all_indices))
model.eval()
with torch.no_grad():
    noise = torch.from_numpy(rng.standard_normal((tensor_te.size(0), args.num_topic)).astype(np.float32))
    recon, loss = net(tensor_te, noise, compute_loss=True, avg_loss=False)
    counts = tensor_te.sum(1)
    LOSSES += [torch.exp((loss / counts).mean()).item(),
               model.decoder.weight.data.cpu().numpy().T.argsort(axis=1)[:, -1].sum().item()]
