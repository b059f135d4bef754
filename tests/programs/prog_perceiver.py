from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from functools import wraps
torch.manual_seed(0)
# Perceiver (Jaegle et al. 2021) as lucidrains/perceiver-pytorch writes it, scaled down:
# Fourier position features (linspace grids by meshgrid, sin/cos of pi * x * scales over
# num_bands frequencies up to max_freq, the raw position concatenated), a learned latent
# array repeated over the batch, cross-attention from the latents to the long flattened
# input (PreNorm with a context norm), latent self-attention blocks, GEGLU feed-forwards,
# weights shared across depth by cache_fn (a decorator keeping the first module built),
# attention by einsum with heads folded into the batch (einops-style rearranges by
# view/permute), a key mask by masked_fill with -finfo.max, mean over latents, a
# LayerNorm + Linear head; AdamW under a StepLR, label smoothing; embeddings returned in eval
def exists(val):
    return val is not None
def default(val, d):
    return val if exists(val) else d
def cache_fn(f):
    cache = dict()
    @wraps(f)
    def cached_fn(*args, _cache=True, key=None, **kwargs):
        if not _cache:
            return f(*args, **kwargs)
        nonlocal cache
        if key in cache:
            return cache[key]
        result = f(*args, **kwargs)
        cache[key] = result
        return result
    return cached_fn
def fourier_encode(x, max_freq, num_bands=4):
    x = x.unsqueeze(-1)
    device, dtype, orig_x = x.device, x.dtype, x
    scales = torch.linspace(1., max_freq / 2, num_bands, device=device, dtype=dtype)
    scales = scales[(*((None,) * (len(x.shape) - 1)), Ellipsis)]
    x = x * scales * math.pi
    x = torch.cat([x.sin(), x.cos()], dim=-1)
    x = torch.cat((x, orig_x), dim=-1)
    return x
class PreNorm(nn.Module):
    def __init__(self, dim, fn, context_dim=None):
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(dim)
        self.norm_context = nn.LayerNorm(context_dim) if exists(context_dim) else None
    def forward(self, x, **kwargs):
        x = self.norm(x)
        if exists(self.norm_context):
            context = kwargs['context']
            normed_context = self.norm_context(context)
            kwargs.update(context=normed_context)
        return self.fn(x, **kwargs)
class GEGLU(nn.Module):
    def forward(self, x):
        x, gates = x.chunk(2, dim=-1)
        return x * F.gelu(gates)
class FeedForward(nn.Module):
    def __init__(self, dim, mult=4, dropout=0.):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim * mult * 2), GEGLU(), nn.Linear(dim * mult, dim), nn.Dropout(dropout))
    def forward(self, x):
        return self.net(x)
class Attention(nn.Module):
    def __init__(self, query_dim, context_dim=None, heads=8, dim_head=64, dropout=0.):
        super().__init__()
        inner_dim = dim_head * heads
        context_dim = default(context_dim, query_dim)
        self.scale = dim_head ** -0.5
        self.heads = heads
        self.to_q = nn.Linear(query_dim, inner_dim, bias=False)
        self.to_kv = nn.Linear(context_dim, inner_dim * 2, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.to_out = nn.Linear(inner_dim, query_dim)
    def forward(self, x, context=None, mask=None):
        h = self.heads
        q = self.to_q(x)
        context = default(context, x)
        k, v = self.to_kv(context).chunk(2, dim=-1)
        # rearrange(t, 'b n (h d) -> (b h) n d', h=h)
        q, k, v = map(lambda t: t.view(t.shape[0], t.shape[1], h, -1).permute(0, 2, 1, 3).reshape(-1, t.shape[1], t.shape[2] // h), (q, k, v))
        sim = torch.einsum('b i d, b j d -> b i j', q, k) * self.scale
        if exists(mask):
            mask = mask.reshape(mask.shape[0], -1)                            # 'b ... -> b (...)'
            max_neg_value = -torch.finfo(sim.dtype).max
            mask = mask[:, None, :].repeat_interleave(h, dim=0)               # repeat 'b j -> (b h) () j'
            sim.masked_fill_(~mask, max_neg_value)
        attn = sim.softmax(dim=-1)
        attn = self.dropout(attn)
        out = torch.einsum('b i j, b j d -> b i d', attn, v)
        out = out.view(-1, h, out.shape[1], out.shape[2]).permute(0, 2, 1, 3).flatten(2)   # '(b h) n d -> b n (h d)'
        return self.to_out(out)
class Perceiver(nn.Module):
    def __init__(self, *, num_freq_bands, depth, max_freq, input_channels=3, input_axis=2, num_latents=16,
                 latent_dim=32, cross_heads=1, latent_heads=4, cross_dim_head=16, latent_dim_head=8,
                 num_classes=10, weight_tie_layers=False, fourier_encode_data=True, self_per_cross_attn=1):
        super().__init__()
        self.input_axis = input_axis
        self.max_freq = max_freq
        self.num_freq_bands = num_freq_bands
        self.fourier_encode_data = fourier_encode_data
        fourier_channels = (input_axis * ((num_freq_bands * 2) + 1)) if fourier_encode_data else 0
        input_dim = fourier_channels + input_channels
        self.latents = nn.Parameter(torch.randn(num_latents, latent_dim))
        get_cross_attn = lambda: PreNorm(latent_dim, Attention(latent_dim, input_dim, heads=cross_heads, dim_head=cross_dim_head), context_dim=input_dim)
        get_cross_ff = lambda: PreNorm(latent_dim, FeedForward(latent_dim))
        get_latent_attn = lambda: PreNorm(latent_dim, Attention(latent_dim, heads=latent_heads, dim_head=latent_dim_head))
        get_latent_ff = lambda: PreNorm(latent_dim, FeedForward(latent_dim))
        get_cross_attn, get_cross_ff, get_latent_attn, get_latent_ff = map(cache_fn, (get_cross_attn, get_cross_ff, get_latent_attn, get_latent_ff))
        self.layers = nn.ModuleList([])
        for i in range(depth):
            should_cache = i > 0 and weight_tie_layers
            cache_args = {'_cache': should_cache}
            self_attns = nn.ModuleList([])
            for block_ind in range(self_per_cross_attn):
                self_attns.append(nn.ModuleList([get_latent_attn(**cache_args, key=block_ind),
                                                 get_latent_ff(**cache_args, key=block_ind)]))
            self.layers.append(nn.ModuleList([get_cross_attn(**cache_args), get_cross_ff(**cache_args), self_attns]))
        self.to_logits = nn.Sequential(nn.LayerNorm(latent_dim), nn.Linear(latent_dim, num_classes))
    def forward(self, data, mask=None, return_embeddings=False):
        b, *axis, _, device, dtype = *data.shape, data.device, data.dtype
        assert len(axis) == self.input_axis, 'input data must have the right number of axis'
        if self.fourier_encode_data:
            axis_pos = list(map(lambda size: torch.linspace(-1., 1., steps=size, device=device, dtype=dtype), axis))
            pos = torch.stack(torch.meshgrid(*axis_pos, indexing='ij'), dim=-1)
            enc_pos = fourier_encode(pos, self.max_freq, self.num_freq_bands)
            enc_pos = enc_pos.reshape(*enc_pos.shape[:(self.input_axis)], -1)   # '... n d -> ... (n d)'
            enc_pos = enc_pos.unsqueeze(0).expand(b, *enc_pos.shape)           # repeat '... -> b ...'
            data = torch.cat((data, enc_pos), dim=-1)
        data = data.reshape(b, -1, data.shape[-1])                              # 'b ... d -> b (...) d'
        x = self.latents.unsqueeze(0).repeat(b, 1, 1)                           # repeat 'n d -> b n d'
        for cross_attn, cross_ff, self_attns in self.layers:
            x = cross_attn(x, context=data, mask=mask) + x
            x = cross_ff(x) + x
            for self_attn, self_ff in self_attns:
                x = self_attn(x) + x
                x = self_ff(x) + x
        if return_embeddings:
            return x
        x = x.mean(dim=-2)                                                      # Reduce('b n d -> b d', 'mean')
        return self.to_logits(x)
model = Perceiver(num_freq_bands=4, depth=2, max_freq=8., weight_tie_layers=True, self_per_cross_attn=2)
sync(model)
net = comp(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
r = np.random.default_rng(0)
LOSSES = [float(sum(p.numel() for p in model.parameters()))]   # the tied layers counted once
for step in range(5):
    img = torch.from_numpy(r.standard_normal((4, 12, 12, 3)).astype(np.float32))
    mask = torch.from_numpy(r.random((4, 12, 12)) < 0.9)
    y = torch.from_numpy(r.integers(0, 10, 4))
    model.train()
    logits = net(img, mask=mask)
    loss = F.cross_entropy(logits, y, label_smoothing=0.1)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    LOSSES += [loss.item(), model.latents.grad.norm().item()]
model.eval()
with torch.no_grad():
    emb = net(img, return_embeddings=True)
    LOSSES += [emb.mean().item(), emb.std().item()] + net(img).softmax(-1)[:, 0].tolist()
