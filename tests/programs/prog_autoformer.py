from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# Autoformer (the paper repo's layers) forecasting a noisy seasonal series: series
# decomposition by a moving average (ends replicated by repeat, nn.AvgPool1d), the
# Auto-Correlation mechanism (period correlations by torch.fft.rfft / irfft of queries
# times conjugate keys, top-k delays by topk over the mean correlation, time-delay
# aggregation by gather from the values repeated twice), a seasonal LayerNorm that
# subtracts its mean over time, a decoder accumulating trends through a circular Conv1d,
# fixed sinusoidal nn.Embedding temporal features, the trend/seasonal initialisation of the
# decoder input, Adam with a halving learning rate and MSE, then evaluation under no_grad
class moving_avg(nn.Module):
    def __init__(self, kernel_size, stride):
        super(moving_avg, self).__init__()
        self.kernel_size = kernel_size
        self.avg = nn.AvgPool1d(kernel_size=kernel_size, stride=stride, padding=0)
    def forward(self, x):
        front = x[:, 0:1, :].repeat(1, (self.kernel_size - 1) // 2, 1)
        end = x[:, -1:, :].repeat(1, (self.kernel_size - 1) // 2, 1)
        x = torch.cat([front, x, end], dim=1)
        x = self.avg(x.permute(0, 2, 1))
        return x.permute(0, 2, 1)
class series_decomp(nn.Module):
    def __init__(self, kernel_size):
        super(series_decomp, self).__init__()
        self.moving_avg = moving_avg(kernel_size, stride=1)
    def forward(self, x):
        moving_mean = self.moving_avg(x)
        res = x - moving_mean
        return res, moving_mean
class my_Layernorm(nn.Module):
    def __init__(self, channels):
        super(my_Layernorm, self).__init__()
        self.layernorm = nn.LayerNorm(channels)
    def forward(self, x):
        x_hat = self.layernorm(x)
        bias = torch.mean(x_hat, dim=1).unsqueeze(1).repeat(1, x.shape[1], 1)
        return x_hat - bias
class FixedEmbedding(nn.Module):
    def __init__(self, c_in, d_model):
        super(FixedEmbedding, self).__init__()
        w = torch.zeros(c_in, d_model).float()
        w.require_grad = False
        position = torch.arange(0, c_in).float().unsqueeze(1)
        div_term = (torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model)).exp()
        w[:, 0::2] = torch.sin(position * div_term)
        w[:, 1::2] = torch.cos(position * div_term)
        self.emb = nn.Embedding(c_in, d_model)
        self.emb.weight = nn.Parameter(w, requires_grad=False)
    def forward(self, x):
        return self.emb(x).detach()
class DataEmbedding_wo_pos(nn.Module):
    def __init__(self, c_in, d_model):
        super(DataEmbedding_wo_pos, self).__init__()
        self.tokenConv = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1, padding_mode='circular', bias=False)
        nn.init.kaiming_normal_(self.tokenConv.weight, mode='fan_in', nonlinearity='leaky_relu')
        self.hour_embed = FixedEmbedding(24, d_model)
        self.weekday_embed = FixedEmbedding(7, d_model)
        self.dropout = nn.Dropout(p=0.0)
    def forward(self, x, x_mark):
        x = self.tokenConv(x.permute(0, 2, 1)).transpose(1, 2)
        x = x + self.hour_embed(x_mark[:, :, 0]) + self.weekday_embed(x_mark[:, :, 1])
        return self.dropout(x)
class AutoCorrelation(nn.Module):
    def __init__(self, factor=1):
        super(AutoCorrelation, self).__init__()
        self.factor = factor
    def time_delay_agg_full(self, values, corr):
        batch, head, channel, length = values.shape
        init_index = torch.arange(length).unsqueeze(0).unsqueeze(0).unsqueeze(0).repeat(batch, head, channel, 1)
        top_k = int(self.factor * math.log(length))
        weights, delay = torch.topk(corr, top_k, dim=-1)
        tmp_corr = torch.softmax(weights, dim=-1)
        tmp_values = values.repeat(1, 1, 1, 2)
        delays_agg = torch.zeros_like(values).float()
        for i in range(top_k):
            tmp_delay = init_index + delay[..., i].unsqueeze(-1)
            pattern = torch.gather(tmp_values, dim=-1, index=tmp_delay)
            delays_agg = delays_agg + pattern * (tmp_corr[..., i].unsqueeze(-1))
        return delays_agg
    def forward(self, queries, keys, values):
        B, L, H, E = queries.shape
        _, S, _, D = values.shape
        if L > S:
            zeros = torch.zeros_like(queries[:, :(L - S), :]).float()
            values = torch.cat([values, zeros], dim=1)
            keys = torch.cat([keys, zeros], dim=1)
        else:
            values = values[:, :L, :, :]
            keys = keys[:, :L, :, :]
        q_fft = torch.fft.rfft(queries.permute(0, 2, 3, 1).contiguous(), dim=-1)
        k_fft = torch.fft.rfft(keys.permute(0, 2, 3, 1).contiguous(), dim=-1)
        res = q_fft * torch.conj(k_fft)
        corr = torch.fft.irfft(res, n=L, dim=-1)
        V = self.time_delay_agg_full(values.permute(0, 2, 3, 1).contiguous(), corr).permute(0, 3, 1, 2)
        return V.contiguous()
class AutoCorrelationLayer(nn.Module):
    def __init__(self, correlation, d_model, n_heads):
        super(AutoCorrelationLayer, self).__init__()
        d_keys = d_values = d_model // n_heads
        self.inner_correlation = correlation
        self.query_projection = nn.Linear(d_model, d_keys * n_heads)
        self.key_projection = nn.Linear(d_model, d_keys * n_heads)
        self.value_projection = nn.Linear(d_model, d_values * n_heads)
        self.out_projection = nn.Linear(d_values * n_heads, d_model)
        self.n_heads = n_heads
    def forward(self, queries, keys, values):
        B, L, _ = queries.shape
        _, S, _ = keys.shape
        H = self.n_heads
        queries = self.query_projection(queries).view(B, L, H, -1)
        keys = self.key_projection(keys).view(B, S, H, -1)
        values = self.value_projection(values).view(B, S, H, -1)
        out = self.inner_correlation(queries, keys, values).view(B, L, -1)
        return self.out_projection(out)
class EncoderLayer(nn.Module):
    def __init__(self, attention, d_model, d_ff, moving_avg=5):
        super(EncoderLayer, self).__init__()
        self.attention = attention
        self.conv1 = nn.Conv1d(d_model, d_ff, kernel_size=1, bias=False)
        self.conv2 = nn.Conv1d(d_ff, d_model, kernel_size=1, bias=False)
        self.decomp1, self.decomp2 = series_decomp(moving_avg), series_decomp(moving_avg)
        self.activation = F.gelu
    def forward(self, x):
        x = x + self.attention(x, x, x)
        x, _ = self.decomp1(x)
        y = self.activation(self.conv1(x.transpose(-1, 1)))
        y = self.conv2(y).transpose(-1, 1)
        res, _ = self.decomp2(x + y)
        return res
class DecoderLayer(nn.Module):
    def __init__(self, self_attention, cross_attention, d_model, c_out, d_ff, moving_avg=5):
        super(DecoderLayer, self).__init__()
        self.self_attention, self.cross_attention = self_attention, cross_attention
        self.conv1 = nn.Conv1d(d_model, d_ff, kernel_size=1, bias=False)
        self.conv2 = nn.Conv1d(d_ff, d_model, kernel_size=1, bias=False)
        self.decomp1, self.decomp2, self.decomp3 = (series_decomp(moving_avg) for _ in range(3))
        self.projection = nn.Conv1d(d_model, c_out, kernel_size=3, stride=1, padding=1,
                                    padding_mode='circular', bias=False)
        self.activation = F.relu
    def forward(self, x, cross):
        x = x + self.self_attention(x, x, x)
        x, trend1 = self.decomp1(x)
        x = x + self.cross_attention(x, cross, cross)
        x, trend2 = self.decomp2(x)
        y = self.activation(self.conv1(x.transpose(-1, 1)))
        y = self.conv2(y).transpose(-1, 1)
        x, trend3 = self.decomp3(x + y)
        residual_trend = trend1 + trend2 + trend3
        residual_trend = self.projection(residual_trend.permute(0, 2, 1)).transpose(1, 2)
        return x, residual_trend
class Autoformer(nn.Module):
    def __init__(self, enc_in=2, c_out=2, seq_len=24, label_len=12, pred_len=8, d_model=16,
                 n_heads=2, d_ff=32, e_layers=2, moving_avg=5):
        super(Autoformer, self).__init__()
        self.seq_len, self.label_len, self.pred_len = seq_len, label_len, pred_len
        self.decomp = series_decomp(moving_avg)
        self.enc_embedding = DataEmbedding_wo_pos(enc_in, d_model)
        self.dec_embedding = DataEmbedding_wo_pos(enc_in, d_model)
        self.encoder = nn.ModuleList([EncoderLayer(AutoCorrelationLayer(AutoCorrelation(), d_model, n_heads),
                                                   d_model, d_ff, moving_avg) for _ in range(e_layers)])
        self.enc_norm = my_Layernorm(d_model)
        self.decoder = DecoderLayer(AutoCorrelationLayer(AutoCorrelation(), d_model, n_heads),
                                    AutoCorrelationLayer(AutoCorrelation(), d_model, n_heads),
                                    d_model, c_out, d_ff, moving_avg)
        self.dec_norm = my_Layernorm(d_model)
        self.dec_projection = nn.Linear(d_model, c_out, bias=True)
    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec):
        mean = torch.mean(x_enc, dim=1).unsqueeze(1).repeat(1, self.pred_len, 1)
        zeros = torch.zeros([x_dec.shape[0], self.pred_len, x_dec.shape[2]], device=x_enc.device)
        seasonal_init, trend_init = self.decomp(x_enc)
        trend_init = torch.cat([trend_init[:, -self.label_len:, :], mean], dim=1)
        seasonal_init = torch.cat([seasonal_init[:, -self.label_len:, :], zeros], dim=1)
        enc_out = self.enc_embedding(x_enc, x_mark_enc)
        for layer in self.encoder:
            enc_out = layer(enc_out)
        enc_out = self.enc_norm(enc_out)
        dec_out = self.dec_embedding(seasonal_init, x_mark_dec)
        x, residual_trend = self.decoder(dec_out, enc_out)
        seasonal_part = self.dec_projection(self.dec_norm(x))
        trend_part = trend_init + residual_trend
        dec_out = trend_part + seasonal_part
        return dec_out[:, -self.pred_len:, :]
model = Autoformer(); sync(model)
net = comp(model, fullgraph=True)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
rng = np.random.default_rng(0)
T = 400
hours = np.arange(T) % 24; days = (np.arange(T) // 24) % 7
series = np.stack([np.sin(2 * np.pi * np.arange(T) / 24) + 0.05 * np.arange(T) / 24,
                   np.cos(2 * np.pi * np.arange(T) / 12)], -1) + 0.1 * rng.standard_normal((T, 2))
series = series.astype(np.float32); marks = np.stack([hours, days], -1)
def batch(ix):
    s = [np.arange(i, i + 24) for i in ix]; r = [np.arange(i + 12, i + 32) for i in ix]
    return (torch.from_numpy(series[s]), torch.from_numpy(marks[s]), torch.from_numpy(series[r]),
            torch.from_numpy(marks[r]))
LOSSES = []
for epoch in range(2):
    model.train()
    for it in range(3):
        x, xm, y, ym = batch(rng.integers(0, T - 32, size=6))
        pred = net(x, xm, torch.zeros_like(y), ym)
        loss = F.mse_loss(pred, y[:, -8:])
        opt.zero_grad(); loss.backward(); opt.step()
        LOSSES.append(loss.item())
    for g in opt.param_groups:
        g['lr'] = 1e-3 * (0.5 ** ((epoch + 1) - 1))
    model.eval()
    with torch.no_grad():
        x, xm, y, ym = batch(np.arange(0, 300, 60))
        LOSSES.append(F.l1_loss(net(x, xm, torch.zeros_like(y), ym), y[:, -8:]).item())
