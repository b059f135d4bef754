from _harness import sync  # the runner: weights shared with the PyTorch run
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.backends.cudnn.benchmark = True
torch.set_float32_matmul_precision("high")
torch.manual_seed(0)
class G(nn.Module):
    def __init__(s):
        super().__init__()
        s.conv = nn.utils.spectral_norm(nn.Conv2d(3, 8, 3, padding=1))
        s.lin = nn.utils.parametrizations.weight_norm(nn.Linear(8, 8))
        s.mha = nn.MultiheadAttention(8, 2, batch_first=True)
        s.tr = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16, dropout=0.0, batch_first=True)
        s.gru = nn.GRU(8, 8, batch_first=True)
        nn.init.kaiming_normal_(s.conv.weight_orig if hasattr(s.conv, "weight_orig") else s.conv.weight, mode="fan_out", nonlinearity="relu")
    def forward(s, x, pad_mask):
        h = F.leaky_relu(s.conv(x), 0.2)
        h = F.interpolate(h, scale_factor=0.5, mode="nearest")
        h = h.flatten(2).transpose(1, 2)            # B, L, 8
        h = s.lin(h)
        a, w = s.mha(h, h, h, key_padding_mask=pad_mask, need_weights=True, average_attn_weights=True)
        h = h + checkpoint(lambda t: torch.tanh(t) * 2, a, use_reentrant=False)
        tgt = h[:, :5]
        mask = nn.Transformer.generate_square_subsequent_mask(5)
        o = s.tr(h, tgt, tgt_mask=mask, src_key_padding_mask=pad_mask)
        g, _ = s.gru(o)
        y = torch.einsum("bld,bmd->blm", g, o).mean(-1)
        return torch.where(y > 0, y, 0.1 * y), w
m = G().to(device); sync(m)
opt = torch.optim.Adam(m.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=10)
scaler = torch.cuda.amp.GradScaler(enabled=False)
r = np.random.default_rng(0)
LOSSES = []
for i in range(3):
    x = torch.from_numpy(r.standard_normal((2, 3, 8, 8)).astype(np.float32)).to(device)
    pad = torch.zeros(2, 16, dtype=torch.bool); pad[1, 12:] = True
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=False):
        y, w = m(x, pad)
        loss = y.pow(2).mean() + F.gumbel_softmax(y, tau=1.0, hard=True).sum() * 0
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward(); scaler.step(opt); scaler.update(); sched.step()
    LOSSES += [loss.item(), w.sum().item()]
