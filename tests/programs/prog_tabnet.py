from _harness import sync, comp  # the runner: weights shared with the PyTorch run; torch.compile
import numpy as np, torch
from torch import nn
from torch.autograd import Function
from torch.nn import Linear, BatchNorm1d, ReLU
from torch.utils.data import DataLoader, TensorDataset
# TabNet (dreamquark-ai/tabnet style): sparsemax as a custom autograd.Function (sort, cumsum,
# support size, an in-place shift of its input), ghost batch norm over chunks of the batch,
# shared and step-specific GLU blocks, attentive transformers with a prior updated per
# step, the sparsity (entropy) loss, categorical embeddings, Adam under StepLR
np.random.seed(0); torch.manual_seed(0)


def _make_ix_like(input, dim=0):
    d = input.size(dim)
    rho = torch.arange(1, d + 1, device=input.device, dtype=input.dtype)
    view = [1] * input.dim()
    view[0] = -1
    return rho.view(view).transpose(0, dim)


class SparsemaxFunction(Function):
    @staticmethod
    def forward(ctx, input, dim=-1):
        ctx.dim = dim
        max_val, _ = input.max(dim=dim, keepdim=True)
        input -= max_val  # same numerical stability trick as for softmax
        tau, supp_size = SparsemaxFunction._threshold_and_support(input, dim=dim)
        output = torch.clamp(input - tau, min=0)
        ctx.save_for_backward(supp_size, output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        supp_size, output = ctx.saved_tensors
        dim = ctx.dim
        grad_input = grad_output.clone()
        grad_input[output == 0] = 0
        v_hat = grad_input.sum(dim=dim) / supp_size.to(output.dtype).squeeze()
        v_hat = v_hat.unsqueeze(dim)
        grad_input = torch.where(output != 0, grad_input - v_hat, grad_input)
        return grad_input, None

    @staticmethod
    def _threshold_and_support(input, dim=-1):
        input_srt, _ = torch.sort(input, descending=True, dim=dim)
        input_cumsum = input_srt.cumsum(dim) - 1
        rhos = _make_ix_like(input, dim)
        support = rhos * input_srt > input_cumsum
        support_size = support.sum(dim=dim).unsqueeze(dim)
        tau = input_cumsum.gather(dim, support_size - 1)
        tau /= support_size.to(input.dtype)
        return tau, support_size


sparsemax = SparsemaxFunction.apply


class Sparsemax(nn.Module):
    def __init__(self, dim=-1):
        self.dim = dim
        super(Sparsemax, self).__init__()

    def forward(self, input):
        return sparsemax(input, self.dim)


def initialize_non_glu(module, input_dim, output_dim):
    gain_value = np.sqrt((input_dim + output_dim) / np.sqrt(4 * input_dim))
    torch.nn.init.xavier_normal_(module.weight, gain=gain_value)


def initialize_glu(module, input_dim, output_dim):
    gain_value = np.sqrt((input_dim + output_dim) / np.sqrt(input_dim))
    torch.nn.init.xavier_normal_(module.weight, gain=gain_value)


class GBN(torch.nn.Module):
    """Ghost Batch Normalization https://arxiv.org/abs/1705.08741"""

    def __init__(self, input_dim, virtual_batch_size=128, momentum=0.01):
        super(GBN, self).__init__()
        self.input_dim = input_dim
        self.virtual_batch_size = virtual_batch_size
        self.bn = BatchNorm1d(self.input_dim, momentum=momentum)

    def forward(self, x):
        chunks = x.chunk(int(np.ceil(x.shape[0] / self.virtual_batch_size)), 0)
        res = [self.bn(x_) for x_ in chunks]
        return torch.cat(res, dim=0)


class GLU_Layer(torch.nn.Module):
    def __init__(self, input_dim, output_dim, fc=None, virtual_batch_size=128, momentum=0.02):
        super(GLU_Layer, self).__init__()
        self.output_dim = output_dim
        if fc:
            self.fc = fc
        else:
            self.fc = Linear(input_dim, 2 * output_dim, bias=False)
        initialize_glu(self.fc, input_dim, 2 * output_dim)
        self.bn = GBN(2 * output_dim, virtual_batch_size=virtual_batch_size, momentum=momentum)

    def forward(self, x):
        x = self.fc(x)
        x = self.bn(x)
        out = torch.mul(x[:, : self.output_dim], torch.sigmoid(x[:, self.output_dim:]))
        return out


class GLU_Block(torch.nn.Module):
    def __init__(self, input_dim, output_dim, n_glu=2, first=False, shared_layers=None,
                 virtual_batch_size=128, momentum=0.02):
        super(GLU_Block, self).__init__()
        self.first = first
        self.shared_layers = shared_layers
        self.n_glu = n_glu
        self.glu_layers = torch.nn.ModuleList()
        params = {"virtual_batch_size": virtual_batch_size, "momentum": momentum}
        fc = shared_layers[0] if shared_layers else None
        self.glu_layers.append(GLU_Layer(input_dim, output_dim, fc=fc, **params))
        for glu_id in range(1, self.n_glu):
            fc = shared_layers[glu_id] if shared_layers else None
            self.glu_layers.append(GLU_Layer(output_dim, output_dim, fc=fc, **params))

    def forward(self, x):
        scale = torch.sqrt(torch.FloatTensor([0.5]).to(x.device))
        if self.first:  # the first layer of the block has no scale multiplication
            x = self.glu_layers[0](x)
            layers_left = range(1, self.n_glu)
        else:
            layers_left = range(self.n_glu)
        for glu_id in layers_left:
            x = torch.add(x, self.glu_layers[glu_id](x))
            x = x * scale
        return x


class FeatTransformer(torch.nn.Module):
    def __init__(self, input_dim, output_dim, shared_layers, n_glu_independent, virtual_batch_size=128, momentum=0.02):
        super(FeatTransformer, self).__init__()
        params = {"n_glu": n_glu_independent, "virtual_batch_size": virtual_batch_size, "momentum": momentum}
        if shared_layers is None:
            self.shared = torch.nn.Identity()
            is_first = True
        else:
            self.shared = GLU_Block(input_dim, output_dim, first=True, shared_layers=shared_layers,
                                    n_glu=len(shared_layers), virtual_batch_size=virtual_batch_size, momentum=momentum)
            is_first = False
        if n_glu_independent == 0:
            self.specifics = torch.nn.Identity()
        else:
            spec_input_dim = input_dim if is_first else output_dim
            self.specifics = GLU_Block(spec_input_dim, output_dim, first=is_first, **params)

    def forward(self, x):
        x = self.shared(x)
        x = self.specifics(x)
        return x


class AttentiveTransformer(torch.nn.Module):
    def __init__(self, input_dim, group_dim, group_matrix, virtual_batch_size=128, momentum=0.02, mask_type="sparsemax"):
        super(AttentiveTransformer, self).__init__()
        self.fc = Linear(input_dim, group_dim, bias=False)
        initialize_non_glu(self.fc, input_dim, group_dim)
        self.bn = GBN(group_dim, virtual_batch_size=virtual_batch_size, momentum=momentum)
        if mask_type == "sparsemax":
            self.selector = Sparsemax(dim=-1)
        else:
            self.selector = nn.Softmax(dim=-1)

    def forward(self, priors, processed_feat):
        x = self.fc(processed_feat)
        x = self.bn(x)
        x = torch.mul(x, priors)
        x = self.selector(x)
        return x


class TabNetEncoder(torch.nn.Module):
    def __init__(self, input_dim, output_dim, n_d=8, n_a=8, n_steps=3, gamma=1.3, n_independent=2, n_shared=2,
                 epsilon=1e-15, virtual_batch_size=128, momentum=0.02, mask_type="sparsemax", group_attention_matrix=None):
        super(TabNetEncoder, self).__init__()
        self.input_dim, self.output_dim = input_dim, output_dim
        self.n_d, self.n_a, self.n_steps, self.gamma, self.epsilon = n_d, n_a, n_steps, gamma, epsilon
        self.virtual_batch_size = virtual_batch_size
        self.initial_bn = BatchNorm1d(self.input_dim, momentum=0.01)
        self.group_attention_matrix = torch.eye(self.input_dim) if group_attention_matrix is None else group_attention_matrix
        self.attention_dim = self.group_attention_matrix.shape[0]
        if n_shared > 0:
            shared_feat_transform = torch.nn.ModuleList()
            for i in range(n_shared):
                if i == 0:
                    shared_feat_transform.append(Linear(self.input_dim, 2 * (n_d + n_a), bias=False))
                else:
                    shared_feat_transform.append(Linear(n_d + n_a, 2 * (n_d + n_a), bias=False))
        else:
            shared_feat_transform = None
        self.initial_splitter = FeatTransformer(self.input_dim, n_d + n_a, shared_feat_transform, n_glu_independent=n_independent,
                                                virtual_batch_size=self.virtual_batch_size, momentum=momentum)
        self.feat_transformers = torch.nn.ModuleList()
        self.att_transformers = torch.nn.ModuleList()
        for step in range(n_steps):
            transformer = FeatTransformer(self.input_dim, n_d + n_a, shared_feat_transform, n_glu_independent=n_independent,
                                          virtual_batch_size=self.virtual_batch_size, momentum=momentum)
            attention = AttentiveTransformer(n_a, self.attention_dim, group_matrix=group_attention_matrix,
                                             virtual_batch_size=self.virtual_batch_size, momentum=momentum, mask_type=mask_type)
            self.feat_transformers.append(transformer)
            self.att_transformers.append(attention)

    def forward(self, x, prior=None):
        x = self.initial_bn(x)
        bs = x.shape[0]  # batch size
        if prior is None:
            prior = torch.ones((bs, self.attention_dim)).to(x.device)
        M_loss = 0
        att = self.initial_splitter(x)[:, self.n_d:]
        steps_output = []
        for step in range(self.n_steps):
            M = self.att_transformers[step](prior, att)
            M_loss += torch.mean(torch.sum(torch.mul(M, torch.log(M + self.epsilon)), dim=1))
            # update prior
            prior = torch.mul(self.gamma - M, prior)
            # output
            M_feature_level = torch.matmul(M, self.group_attention_matrix)
            masked_x = torch.mul(M_feature_level, x)
            out = self.feat_transformers[step](masked_x)
            d = ReLU()(out[:, : self.n_d])
            steps_output.append(d)
            # update attention
            att = out[:, self.n_d:]
        M_loss /= self.n_steps
        return steps_output, M_loss


class EmbeddingGenerator(torch.nn.Module):
    def __init__(self, input_dim, cat_dims, cat_idxs, cat_emb_dims):
        super(EmbeddingGenerator, self).__init__()
        self.embeddings = torch.nn.ModuleList()
        for cat_dim, emb_dim in zip(cat_dims, cat_emb_dims):
            self.embeddings.append(torch.nn.Embedding(cat_dim, emb_dim))
        self.continuous_idx = torch.ones(input_dim, dtype=torch.bool)
        self.continuous_idx[cat_idxs] = 0
        self.post_embed_dim = int(input_dim + np.sum(cat_emb_dims) - len(cat_emb_dims))

    def forward(self, x):
        cols = []
        cat_feat_counter = 0
        for feat_init_idx, is_continuous in enumerate(self.continuous_idx):
            if is_continuous:
                cols.append(x[:, feat_init_idx].float().view(-1, 1))
            else:
                cols.append(self.embeddings[cat_feat_counter](x[:, feat_init_idx].long()))
                cat_feat_counter += 1
        return torch.cat(cols, dim=1)


class TabNet(torch.nn.Module):
    def __init__(self, input_dim, output_dim, cat_idxs, cat_dims, cat_emb_dim, **kw):
        super(TabNet, self).__init__()
        self.embedder = EmbeddingGenerator(input_dim, cat_dims, cat_idxs, [cat_emb_dim] * len(cat_idxs))
        self.post_embed_dim = self.embedder.post_embed_dim
        self.encoder = TabNetEncoder(self.post_embed_dim, output_dim, **kw)
        self.final_mapping = Linear(kw.get("n_d", 8), output_dim, bias=False)
        initialize_non_glu(self.final_mapping, kw.get("n_d", 8), output_dim)

    def forward(self, x):
        x = self.embedder(x)
        steps_output, M_loss = self.encoder(x)
        res = torch.sum(torch.stack(steps_output, dim=0), dim=0)
        out = self.final_mapping(res)
        return out, M_loss


rng = np.random.default_rng(0)
n, n_num = 200, 6
cat_idxs, cat_dims = [1, 4], [5, 7]
X = rng.standard_normal((n, n_num + len(cat_idxs))).astype(np.float32)
for i, d in zip(cat_idxs, cat_dims):
    X[:, i] = rng.integers(0, d, n)
y = ((X[:, 0] + (X[:, 1] > 2) - X[:, 2] * X[:, 3] > 0.3).astype(np.int64) + (X[:, 5] > 1)).astype(np.int64)
net = TabNet(X.shape[1], 3, cat_idxs, cat_dims, 3, n_d=8, n_a=8, n_steps=3, gamma=1.3,
             virtual_batch_size=32, momentum=0.02)
sync(net)
network = comp(net)
optimizer = torch.optim.Adam(net.parameters(), lr=4e-3)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.9)
train_dataloader = DataLoader(TensorDataset(torch.from_numpy(X[:160]), torch.from_numpy(y[:160])),
                              batch_size=64, shuffle=False, drop_last=False)
lambda_sparse = 1e-3
loss_fn = torch.nn.functional.cross_entropy
LOSSES = []
for epoch in range(2):
    network.train()
    for batch_idx, (Xb, yb) in enumerate(train_dataloader):
        for param in net.parameters():
            param.grad = None
        output, M_loss = network(Xb)
        loss = loss_fn(output, yb)
        loss = loss - lambda_sparse * M_loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1)
        optimizer.step()
        LOSSES.append(loss.cpu().detach().numpy().item())
    scheduler.step()
network.eval()
with torch.no_grad():
    out, M_loss = network(torch.from_numpy(X[160:]))
    pred = torch.nn.Softmax(dim=1)(out).cpu().detach().numpy()
LOSSES += [float(pred[:, 1].mean()), M_loss.item()]
LOSSES.append(net.encoder.initial_bn.running_var.mean().item())
