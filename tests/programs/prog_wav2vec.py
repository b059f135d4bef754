from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)

# wav2vec 2.0 pre-training, lite, as fairseq writes it: a conv feature encoder over raw
# audio (Conv1d stride 5 then 2, GroupNorm on the first layer, GELU) whose gradient is
# scaled by a custom autograd.Function, time masks from numpy's compute_mask_indices with
# a learned mask embedding written by boolean indexing, a weight-normed grouped positional
# conv, a Transformer, a Gumbel-softmax product quantizer (hard one-hots over two groups
# of codevectors, an annealed temperature), cosine-similarity logits against negatives from
# the same utterance (positives equal to a negative masked by -inf), and the diversity and
# feature penalties. The Gumbel noise and negatives that decide the compared losses are
# drawn in numpy and passed in (the runs must share them); the final checks draw them with
# F.gumbel_softmax, torch.randint, torch.randperm and torch.bernoulli and compare what
# does not depend on the draw.
class GradMultiply(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        res = x.new(x)
        return res
    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None
class Fp32GroupNorm(nn.GroupNorm):
    def forward(self, input):
        output = F.group_norm(input.float(), self.num_groups, self.weight.float() if self.weight is not None else None,
                              self.bias.float() if self.bias is not None else None, self.eps)
        return output.type_as(input)
class TransposeLast(nn.Module):
    def forward(self, x):
        return x.transpose(-2, -1)
class SamePad(nn.Module):
    def __init__(self, kernel_size):
        super().__init__()
        self.remove = 1 if kernel_size % 2 == 0 else 0
    def forward(self, x):
        if self.remove > 0:
            x = x[:, :, : -self.remove]
        return x
class ConvFeatureExtractionModel(nn.Module):
    def __init__(self, conv_layers, dropout=0.0):
        super().__init__()
        def block(n_in, n_out, k, stride, is_group_norm=False):
            conv = nn.Conv1d(n_in, n_out, k, stride=stride, bias=False)
            nn.init.kaiming_normal_(conv.weight)
            if is_group_norm:
                return nn.Sequential(conv, nn.Dropout(p=dropout), Fp32GroupNorm(n_out, n_out, affine=True), nn.GELU())
            return nn.Sequential(conv, nn.Dropout(p=dropout), nn.GELU())
        in_d = 1
        self.conv_layers = nn.ModuleList()
        for i, (dim, k, stride) in enumerate(conv_layers):
            self.conv_layers.append(block(in_d, dim, k, stride, is_group_norm=i == 0))
            in_d = dim
    def forward(self, x):
        x = x.unsqueeze(1)   # BxT -> BxCxT
        for conv in self.conv_layers:
            x = conv(x)
        return x
class GumbelVectorQuantizer(nn.Module):
    def __init__(self, dim, num_vars, temp, groups, vq_dim):
        super().__init__()
        self.groups = groups
        self.input_dim = dim
        self.num_vars = num_vars
        var_dim = vq_dim // groups
        self.vars = nn.Parameter(torch.FloatTensor(1, groups * num_vars, var_dim))
        nn.init.uniform_(self.vars)
        self.weight_proj = nn.Linear(self.input_dim, groups * num_vars)
        nn.init.normal_(self.weight_proj.weight, mean=0, std=1)
        nn.init.zeros_(self.weight_proj.bias)
        self.max_temp, self.min_temp, self.temp_decay = temp
        self.curr_temp = self.max_temp
    def set_num_updates(self, num_updates):
        self.curr_temp = max(self.max_temp * self.temp_decay ** num_updates, self.min_temp)
    def forward(self, x, gumbels=None, produce_targets=False):
        result = {"num_vars": self.num_vars * self.groups}
        bsz, tsz, fsz = x.shape
        x = x.reshape(-1, fsz)
        x = self.weight_proj(x)
        x = x.view(bsz * tsz * self.groups, -1)
        _, k = x.max(-1)
        hard_x = x.new_zeros(*x.shape).scatter_(-1, k.view(-1, 1), 1.0).view(bsz * tsz, self.groups, -1)
        hard_probs = torch.mean(hard_x.float(), dim=0)
        result["code_perplexity"] = torch.exp(-torch.sum(hard_probs * torch.log(hard_probs + 1e-7), dim=-1)).sum()
        avg_probs = torch.softmax(x.view(bsz * tsz, self.groups, -1).float(), dim=-1).mean(dim=0)
        result["prob_perplexity"] = torch.exp(-torch.sum(avg_probs * torch.log(avg_probs + 1e-7), dim=-1)).sum()
        result["temp"] = self.curr_temp
        if self.training:
            if gumbels is None:
                x = F.gumbel_softmax(x.float(), tau=self.curr_temp, hard=True).type_as(x)
            else:   # F.gumbel_softmax's own computation, with the noise given
                y_soft = ((x + gumbels.view_as(x)) / self.curr_temp).softmax(-1)
                index = y_soft.max(-1, keepdim=True)[1]
                y_hard = torch.zeros_like(x).scatter_(-1, index, 1.0)
                x = y_hard - y_soft.detach() + y_soft
        else:
            x = hard_x
        x = x.view(bsz * tsz, -1)
        vars = self.vars
        if produce_targets:
            result["targets"] = x.view(bsz * tsz * self.groups, -1).argmax(dim=-1).view(bsz, tsz, self.groups).detach()
        x = x.unsqueeze(-1) * vars
        x = x.view(bsz * tsz, self.groups, self.num_vars, -1)
        x = x.sum(-2)
        result["x"] = x.view(bsz, tsz, -1)
        return result
class EncoderLayer(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads, dropout=0.0, batch_first=True)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ffn)
        self.fc2 = nn.Linear(ffn, d)
        self.final_layer_norm = nn.LayerNorm(d)
    def forward(self, x, key_padding_mask=None):
        residual = x
        x, attn = self.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = self.self_attn_layer_norm(residual + x)
        residual = x
        x = self.fc2(F.gelu(self.fc1(x)))
        return self.final_layer_norm(residual + x)
class Wav2Vec2Model(nn.Module):
    def __init__(self, embed=32, enc=48, final_dim=24, num_negatives=5):
        super().__init__()
        self.feature_extractor = ConvFeatureExtractionModel([(embed, 10, 5), (embed, 3, 2), (embed, 3, 2)])
        self.layer_norm = nn.LayerNorm(embed)
        self.post_extract_proj = nn.Linear(embed, enc)
        self.feature_grad_mult = 0.1
        self.mask_emb = nn.Parameter(torch.FloatTensor(enc).uniform_())
        self.quantizer = GumbelVectorQuantizer(embed, num_vars=16, temp=(2.0, 0.5, 0.9), groups=2, vq_dim=final_dim)
        self.project_q = nn.Linear(final_dim, final_dim)
        self.pos_conv = nn.Conv1d(enc, enc, kernel_size=16, padding=8, groups=4)
        std = math.sqrt(4 / (16 * enc))
        nn.init.normal_(self.pos_conv.weight, mean=0, std=std)
        nn.init.constant_(self.pos_conv.bias, 0)
        self.pos_conv = nn.utils.weight_norm(self.pos_conv, name="weight", dim=2)
        self.pos_conv = nn.Sequential(self.pos_conv, SamePad(16), nn.GELU())
        self.enc_layer_norm = nn.LayerNorm(enc)
        self.layers = nn.ModuleList([EncoderLayer(enc, 4, 64) for _ in range(2)])
        self.final_proj = nn.Linear(enc, final_dim)
        self.n_negatives = num_negatives
        self.logit_temp = 0.1
    def sample_negatives(self, y, num):
        bsz, tsz, fsz = y.shape
        y = y.view(-1, fsz)
        high = tsz
        with torch.no_grad():
            tszs = torch.arange(num).unsqueeze(-1).expand(-1, self.n_negatives).flatten()
            neg_idxs = torch.randint(low=0, high=high - 1, size=(bsz, self.n_negatives * num))
            neg_idxs[neg_idxs >= tszs] += 1
        return neg_idxs
    def compute_preds(self, x, y, negatives, neg_is_pos):
        y = y.unsqueeze(0)
        targets = torch.cat([y, negatives], dim=0)
        logits = torch.cosine_similarity(x.float(), targets.float(), dim=-1).type_as(x)
        logits = logits / self.logit_temp
        if neg_is_pos.any():
            logits[1:][neg_is_pos] = float("-inf")
        return logits
    def forward(self, source, mask_indices, neg_idxs=None, gumbels=None):
        if self.feature_grad_mult > 0:
            features = self.feature_extractor(source)
            if self.feature_grad_mult != 1.0:
                features = GradMultiply.apply(features, self.feature_grad_mult)
        else:
            with torch.no_grad():
                features = self.feature_extractor(source)
        features_pen = features.float().pow(2).mean()
        features = features.transpose(1, 2)
        features = self.layer_norm(features)
        unmasked_features = features.clone()
        features = self.post_extract_proj(features)
        x = features
        x[mask_indices] = self.mask_emb.to(x.dtype)
        x_conv = self.pos_conv(x.transpose(1, 2)).transpose(1, 2)
        x = self.enc_layer_norm(x + x_conv)
        for layer in self.layers:
            x = layer(x)
        bsz = x.size(0)
        x = x[mask_indices].view(bsz, -1, x.size(-1))
        y = unmasked_features[mask_indices].view(bsz, -1, unmasked_features.size(-1))
        q = self.quantizer(y, gumbels=gumbels)
        y = self.project_q(q["x"])
        num = y.size(1)
        if neg_idxs is None:
            neg_idxs = self.sample_negatives(y, num)
        flat = (neg_idxs + torch.arange(bsz).unsqueeze(1) * num).view(-1)
        negs = y.reshape(-1, y.size(-1))[flat].view(bsz, num, self.n_negatives, -1).permute(2, 0, 1, 3)
        # (fairseq compares y with its negatives; equal codes are compared before project_q
        # here, as a GEMM need not give equal rows equal bits: PyTorch's does not at every shape)
        yq = q["x"].reshape(-1, q["x"].size(-1))
        neg_is_pos = (q["x"] == yq[flat].view(bsz, num, self.n_negatives, -1).permute(2, 0, 1, 3)).all(-1)
        x = self.final_proj(x)
        logits = self.compute_preds(x, y, negs, neg_is_pos)
        return {"x": logits, "features_pen": features_pen, "prob_perplexity": q["prob_perplexity"],
                "code_perplexity": q["code_perplexity"], "num_vars": q["num_vars"], "neg_idxs": neg_idxs}
def compute_mask_indices(shape, mask_prob, mask_length, rng, min_masks=1):
    """fairseq's: spans of `mask_length` from numpy-chosen starts, every row trimmed to the
    fewest masked frames any row has (so the masked frames stack into a batch)."""
    bsz, all_sz = shape
    mask = np.full((bsz, all_sz), False)
    mask_idcs = []
    for i in range(bsz):
        num_mask = max(min_masks, int(mask_prob * all_sz / float(mask_length) + rng.random()))
        mask_idc = rng.choice(all_sz - mask_length, num_mask, replace=False)
        mask_idc = np.asarray([mask_idc[j] + offset for j in range(len(mask_idc)) for offset in range(mask_length)])
        mask_idcs.append(np.unique(mask_idc[mask_idc < all_sz]))
    min_len = min([len(m) for m in mask_idcs])
    for i, mask_idc in enumerate(mask_idcs):
        if len(mask_idc) > min_len:
            mask_idc = rng.choice(mask_idc, min_len, replace=False)
        mask[i, mask_idc] = True
    return mask
def numpy_negatives(rng, bsz, num, n):
    tszs = np.repeat(np.arange(num), n)
    idx = rng.integers(0, num - 1, (bsz, n * num))
    idx[idx >= tszs] += 1
    return torch.from_numpy(idx)
def wav2vec_loss(net_output, loss_weights=(0.1, 10.0)):
    logits = net_output["x"]
    logits = logits.transpose(0, 2).reshape(-1, logits.size(0))
    target = logits.new_zeros(logits.size(0), dtype=torch.long)
    loss = F.cross_entropy(logits, target, reduction="sum")
    sample_size = target.numel()
    nv = net_output["num_vars"]
    extra = [(nv - net_output["prob_perplexity"]) / nv, net_output["features_pen"]]
    for coef, p in zip(loss_weights, extra):
        loss = loss + coef * sample_size * p
    return loss / sample_size, logits
model = Wav2Vec2Model(); sync(model)
net = comp(model)
opt = torch.optim.Adam(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 3))
rng = np.random.default_rng(0)
LOSSES = []
B, L = 2, 1600
T = ((L - 10) // 5 + 1 - 3) // 2 + 1
T = (T - 3) // 2 + 1
for step in range(5):
    wav = torch.from_numpy((0.1 * rng.standard_normal((B, L))).astype(np.float32))
    mask = torch.from_numpy(compute_mask_indices((B, T), 0.5, 4, rng))
    num = int(mask[0].sum())
    u = rng.random((B * num * 2, 16)).clip(1e-10, 1 - 1e-10)
    gumbels = torch.from_numpy((-np.log(-np.log(u))).astype(np.float32))
    out = net(wav, mask, numpy_negatives(rng, B, num, model.n_negatives), gumbels)
    loss, logits = wav2vec_loss(out)
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    opt.step(); sched.step()
    model.quantizer.set_num_updates(step + 1)
    with torch.no_grad():
        acc = (logits.argmax(-1) == 0).float().mean()
    LOSSES += [loss.item(), out["prob_perplexity"].item(), out["features_pen"].item()]
# the draws of torch's random functions: only what does not depend on them is compared
wav = torch.from_numpy((0.1 * rng.standard_normal((B, L))).astype(np.float32))
mask = torch.from_numpy(compute_mask_indices((B, T), 0.5, 4, rng))
with torch.no_grad():
    out = net(wav, mask)        # training mode: F.gumbel_softmax and torch.randint inside
    neg = out["neg_idxs"].view(B, -1, model.n_negatives)
    num = neg.size(1)
    own = (neg == torch.arange(num).view(1, -1, 1)).sum()
    y = out["x"][0]
    q = model.quantizer(torch.from_numpy(rng.standard_normal((2, 7, 32)).astype(np.float32)), produce_targets=True)
    codes = model.quantizer.vars.view(2, 16, -1)
    picked = torch.cat([codes[g][q["targets"][..., g]] for g in range(2)], -1)
    model.eval()
    ev = net(wav, mask)         # eval: hard argmax codes; negatives still drawn
    perm = torch.randperm(T)[: num // 2]
    span = torch.zeros(T, dtype=torch.bool)
    span[perm] = True
    bern = torch.bernoulli(torch.full((B, T), 0.3))
LOSSES += [out["prob_perplexity"].item(), out["features_pen"].item(), float(own), float(neg.min() >= 0),
           float(neg.max() <= num - 1), float(torch.isfinite(y).all()), (q["x"] - picked).abs().max().item(),
           q["prob_perplexity"].item(), ev["x"][0].sum().item(), ev["code_perplexity"].item(),
           float(span.sum()), float(((bern == 0) | (bern == 1)).all()), float(tuple(ev["x"].shape) == (6, B, num))]
