from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from math import sqrt
from torch.utils.data import Dataset, DataLoader
torch.manual_seed(0)
# Informer (the paper repo's layers) forecasting a noisy multi-seasonal series: ProbSparse
# self-attention (keys sampled by torch.randint, query sparsity M = max - mean, top-u
# queries by topk, their full scores gathered by advanced indexing and scattered back into
# a mean (encoder) or cumsum (masked decoder) context under ProbMask), a distilling
# Conv1d (circular padding) + BatchNorm + ELU + MaxPool1d between encoder layers, token
# embeddings by a circular Conv1d, sinusoidal positions, a decoder with a start token and
# zero placeholders, Adam with the repo's halving adjust_learning_rate and early-stopping
# bookkeeping. The key samples differ between random generators, so training draws them
# from numpy (index_sample); the last forward samples with torch.randint at a factor that
# keeps every query, where the result does not depend on the draws
class PositionalEmbedding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super(PositionalEmbedding, self).__init__()
        pe = torch.zeros(max_len, d_model).float()
        pe.require_grad = False
        position = torch.arange(0, max_len).float().unsqueeze(1)
        div_term = (torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model)).exp()
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0)
        self.register_buffer('pe', pe)
    def forward(self, x):
        return self.pe[:, :x.size(1)]
class TokenEmbedding(nn.Module):
    def __init__(self, c_in, d_model):
        super(TokenEmbedding, self).__init__()
        self.tokenConv = nn.Conv1d(in_channels=c_in, out_channels=d_model, kernel_size=3, padding=1,
                                   padding_mode='circular')
        for m in self.modules():
            if isinstance(m, nn.Conv1d):
                nn.init.kaiming_normal_(m.weight, mode='fan_in', nonlinearity='leaky_relu')
    def forward(self, x):
        return self.tokenConv(x.permute(0, 2, 1)).transpose(1, 2)
class DataEmbedding(nn.Module):
    def __init__(self, c_in, d_model, dropout=0.0):
        super(DataEmbedding, self).__init__()
        self.value_embedding = TokenEmbedding(c_in=c_in, d_model=d_model)
        self.position_embedding = PositionalEmbedding(d_model=d_model, max_len=96)
        self.temporal_embedding = nn.Linear(2, d_model)   # TimeFeatureEmbedding (hour, day)
        self.dropout = nn.Dropout(p=dropout)
    def forward(self, x, x_mark):
        x = self.value_embedding(x) + self.position_embedding(x) + self.temporal_embedding(x_mark)
        return self.dropout(x)
class TriangularCausalMask():
    def __init__(self, B, L, device="cpu"):
        mask_shape = [B, 1, L, L]
        with torch.no_grad():
            self._mask = torch.triu(torch.ones(mask_shape, dtype=torch.bool), diagonal=1).to(device)
    @property
    def mask(self):
        return self._mask
class ProbMask():
    def __init__(self, B, H, L, index, scores, device="cpu"):
        _mask = torch.ones(L, scores.shape[-1], dtype=torch.bool).to(device).triu(1)
        _mask_ex = _mask[None, None, :].expand(B, H, L, scores.shape[-1])
        indicator = _mask_ex[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], index, :].to(device)
        self._mask = indicator.view(scores.shape).to(device)
    @property
    def mask(self):
        return self._mask
class FullAttention(nn.Module):
    def __init__(self, mask_flag=True, factor=5, scale=None, attention_dropout=0.1):
        super(FullAttention, self).__init__()
        self.scale, self.mask_flag = scale, mask_flag
        self.dropout = nn.Dropout(attention_dropout)
    def forward(self, queries, keys, values, attn_mask, index_sample=None):
        B, L, H, E = queries.shape
        _, S, _, D = values.shape
        scale = self.scale or 1. / sqrt(E)
        scores = torch.einsum("blhe,bshe->bhls", queries, keys)
        if self.mask_flag:
            if attn_mask is None:
                attn_mask = TriangularCausalMask(B, L, device=queries.device)
            scores.masked_fill_(attn_mask.mask, -np.inf)
        A = self.dropout(torch.softmax(scale * scores, dim=-1))
        V = torch.einsum("bhls,bshd->blhd", A, values)
        return (V.contiguous(), None)
class ProbAttention(nn.Module):
    def __init__(self, mask_flag=True, factor=5, scale=None, attention_dropout=0.1):
        super(ProbAttention, self).__init__()
        self.factor, self.scale, self.mask_flag = factor, scale, mask_flag
        self.dropout = nn.Dropout(attention_dropout)
    def _prob_QK(self, Q, K, sample_k, n_top, index_sample=None):  # n_top: c*ln(L_q)
        B, H, L_K, E = K.shape
        _, _, L_Q, _ = Q.shape
        # calculate the sampled Q_K
        K_expand = K.unsqueeze(-3).expand(B, H, L_Q, L_K, E)
        if index_sample is None:
            index_sample = torch.randint(L_K, (L_Q, sample_k))  # real U = U_part(factor*ln(L_k))*L_q
        K_sample = K_expand[:, :, torch.arange(L_Q).unsqueeze(1), index_sample, :]
        Q_K_sample = torch.matmul(Q.unsqueeze(-2), K_sample.transpose(-2, -1)).squeeze(-2)
        # find the Top_k query with sparisty measurement
        M = Q_K_sample.max(-1)[0] - torch.div(Q_K_sample.sum(-1), L_K)
        M_top = M.topk(n_top, sorted=False)[1]
        # use the reduced Q to calculate Q_K
        Q_reduce = Q[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], M_top, :]  # factor*ln(L_q)
        Q_K = torch.matmul(Q_reduce, K.transpose(-2, -1))  # factor*ln(L_q)*L_k
        return Q_K, M_top
    def _get_initial_context(self, V, L_Q):
        B, H, L_V, D = V.shape
        if not self.mask_flag:
            V_sum = V.mean(dim=-2)
            contex = V_sum.unsqueeze(-2).expand(B, H, L_Q, V_sum.shape[-1]).clone()
        else:  # use mask
            assert (L_Q == L_V)  # requires that L_Q == L_V, i.e. for self-attention only
            contex = V.cumsum(dim=-2)
        return contex
    def _update_context(self, context_in, V, scores, index, L_Q, attn_mask):
        B, H, L_V, D = V.shape
        if self.mask_flag:
            attn_mask = ProbMask(B, H, L_Q, index, scores, device=V.device)
            scores.masked_fill_(attn_mask.mask, -np.inf)
        attn = torch.softmax(scores, dim=-1)  # nn.Softmax(dim=-1)(scores)
        context_in[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], index, :] = \
            torch.matmul(attn, V).type_as(context_in)
        return (context_in, None)
    def forward(self, queries, keys, values, attn_mask, index_sample=None):
        B, L_Q, H, D = queries.shape
        _, L_K, _, _ = keys.shape
        queries = queries.transpose(2, 1)
        keys = keys.transpose(2, 1)
        values = values.transpose(2, 1)
        U_part = self.factor * np.ceil(np.log(L_K)).astype('int').item()  # c*ln(L_k)
        u = self.factor * np.ceil(np.log(L_Q)).astype('int').item()  # c*ln(L_q)
        U_part = U_part if U_part < L_K else L_K
        u = u if u < L_Q else L_Q
        if index_sample is not None:
            index_sample = index_sample[:L_Q, :U_part] % L_K
        scores_top, index = self._prob_QK(queries, keys, sample_k=U_part, n_top=u, index_sample=index_sample)
        # add scale factor
        scale = self.scale or 1. / sqrt(D)
        if scale is not None:
            scores_top = scores_top * scale
        # get the context
        context = self._get_initial_context(values, L_Q)
        # update the context with selected top_k queries
        context, attn = self._update_context(context, values, scores_top, index, L_Q, attn_mask)
        return context.transpose(2, 1).contiguous(), attn
class AttentionLayer(nn.Module):
    def __init__(self, attention, d_model, n_heads, d_keys=None, d_values=None, mix=False):
        super(AttentionLayer, self).__init__()
        d_keys = d_keys or (d_model // n_heads)
        d_values = d_values or (d_model // n_heads)
        self.inner_attention = attention
        self.query_projection = nn.Linear(d_model, d_keys * n_heads)
        self.key_projection = nn.Linear(d_model, d_keys * n_heads)
        self.value_projection = nn.Linear(d_model, d_values * n_heads)
        self.out_projection = nn.Linear(d_values * n_heads, d_model)
        self.n_heads, self.mix = n_heads, mix
    def forward(self, queries, keys, values, attn_mask, index_sample=None):
        B, L, _ = queries.shape
        _, S, _ = keys.shape
        H = self.n_heads
        queries = self.query_projection(queries).view(B, L, H, -1)
        keys = self.key_projection(keys).view(B, S, H, -1)
        values = self.value_projection(values).view(B, S, H, -1)
        out, attn = self.inner_attention(queries, keys, values, attn_mask, index_sample)
        if self.mix:
            out = out.transpose(2, 1).contiguous()
        out = out.view(B, L, -1)
        return self.out_projection(out), attn
class ConvLayer(nn.Module):
    def __init__(self, c_in):
        super(ConvLayer, self).__init__()
        self.downConv = nn.Conv1d(in_channels=c_in, out_channels=c_in, kernel_size=3, padding=1,
                                  padding_mode='circular')
        self.norm = nn.BatchNorm1d(c_in)
        self.activation = nn.ELU()
        self.maxPool = nn.MaxPool1d(kernel_size=3, stride=2, padding=1)
    def forward(self, x):
        x = self.downConv(x.permute(0, 2, 1))
        x = self.norm(x)
        x = self.activation(x)
        x = self.maxPool(x)
        return x.transpose(1, 2)
class EncoderLayer(nn.Module):
    def __init__(self, attention, d_model, d_ff=None, dropout=0.0, activation="relu"):
        super(EncoderLayer, self).__init__()
        d_ff = d_ff or 4 * d_model
        self.attention = attention
        self.conv1 = nn.Conv1d(in_channels=d_model, out_channels=d_ff, kernel_size=1)
        self.conv2 = nn.Conv1d(in_channels=d_ff, out_channels=d_model, kernel_size=1)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = F.relu if activation == "relu" else F.gelu
    def forward(self, x, attn_mask=None, index_sample=None):
        new_x, attn = self.attention(x, x, x, attn_mask=attn_mask, index_sample=index_sample)
        x = x + self.dropout(new_x)
        y = x = self.norm1(x)
        y = self.dropout(self.activation(self.conv1(y.transpose(-1, 1))))
        y = self.dropout(self.conv2(y).transpose(-1, 1))
        return self.norm2(x + y), attn
class Encoder(nn.Module):
    def __init__(self, attn_layers, conv_layers=None, norm_layer=None):
        super(Encoder, self).__init__()
        self.attn_layers = nn.ModuleList(attn_layers)
        self.conv_layers = nn.ModuleList(conv_layers) if conv_layers is not None else None
        self.norm = norm_layer
    def forward(self, x, attn_mask=None, index_sample=None):
        attns = []
        if self.conv_layers is not None:
            for attn_layer, conv_layer in zip(self.attn_layers, self.conv_layers):
                x, attn = attn_layer(x, attn_mask=attn_mask, index_sample=index_sample)
                x = conv_layer(x)
                attns.append(attn)
            x, attn = self.attn_layers[-1](x, attn_mask=attn_mask, index_sample=index_sample)
            attns.append(attn)
        else:
            for attn_layer in self.attn_layers:
                x, attn = attn_layer(x, attn_mask=attn_mask, index_sample=index_sample)
                attns.append(attn)
        if self.norm is not None:
            x = self.norm(x)
        return x, attns
class DecoderLayer(nn.Module):
    def __init__(self, self_attention, cross_attention, d_model, d_ff=None, dropout=0.0, activation="relu"):
        super(DecoderLayer, self).__init__()
        d_ff = d_ff or 4 * d_model
        self.self_attention, self.cross_attention = self_attention, cross_attention
        self.conv1 = nn.Conv1d(in_channels=d_model, out_channels=d_ff, kernel_size=1)
        self.conv2 = nn.Conv1d(in_channels=d_ff, out_channels=d_model, kernel_size=1)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = F.relu if activation == "relu" else F.gelu
    def forward(self, x, cross, x_mask=None, cross_mask=None, index_sample=None):
        x = x + self.dropout(self.self_attention(x, x, x, attn_mask=x_mask, index_sample=index_sample)[0])
        x = self.norm1(x)
        x = x + self.dropout(self.cross_attention(x, cross, cross, attn_mask=cross_mask)[0])
        y = x = self.norm2(x)
        y = self.dropout(self.activation(self.conv1(y.transpose(-1, 1))))
        y = self.dropout(self.conv2(y).transpose(-1, 1))
        return self.norm3(x + y)
class Informer(nn.Module):
    def __init__(self, enc_in, dec_in, c_out, out_len, factor=2, d_model=32, n_heads=4, e_layers=2, d_layers=1,
                 d_ff=64, dropout=0.0, activation='gelu', distil=True, mix=True):
        super(Informer, self).__init__()
        self.pred_len = out_len
        self.enc_embedding = DataEmbedding(enc_in, d_model, dropout)
        self.dec_embedding = DataEmbedding(dec_in, d_model, dropout)
        self.encoder = Encoder(
            [EncoderLayer(AttentionLayer(ProbAttention(False, factor, attention_dropout=dropout), d_model, n_heads, mix=False),
                          d_model, d_ff, dropout=dropout, activation=activation) for l in range(e_layers)],
            [ConvLayer(d_model) for l in range(e_layers - 1)] if distil else None,
            norm_layer=torch.nn.LayerNorm(d_model))
        self.decoder_layers = nn.ModuleList([
            DecoderLayer(AttentionLayer(ProbAttention(True, factor, attention_dropout=dropout), d_model, n_heads, mix=mix),
                         AttentionLayer(FullAttention(False, factor, attention_dropout=dropout), d_model, n_heads, mix=False),
                         d_model, d_ff, dropout=dropout, activation=activation) for l in range(d_layers)])
        self.decoder_norm = torch.nn.LayerNorm(d_model)
        self.projection = nn.Linear(d_model, c_out, bias=True)
    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec, index_sample=None):
        enc_out = self.enc_embedding(x_enc, x_mark_enc)
        enc_out, attns = self.encoder(enc_out, attn_mask=None, index_sample=index_sample)
        dec_out = self.dec_embedding(x_dec, x_mark_dec)
        for layer in self.decoder_layers:
            dec_out = layer(dec_out, enc_out, index_sample=index_sample)
        dec_out = self.projection(self.decoder_norm(dec_out))
        return dec_out[:, -self.pred_len:, :]  # [B, L, D]
class Dataset_Custom(Dataset):
    def __init__(self, data, stamp, seq_len, label_len, pred_len):
        self.data_x = self.data_y = data
        self.data_stamp = stamp
        self.seq_len, self.label_len, self.pred_len = seq_len, label_len, pred_len
    def __getitem__(self, index):
        s_begin = index * 3
        s_end = s_begin + self.seq_len
        r_begin = s_end - self.label_len
        r_end = r_begin + self.label_len + self.pred_len
        return (self.data_x[s_begin:s_end], self.data_y[r_begin:r_end], self.data_stamp[s_begin:s_end],
                self.data_stamp[r_begin:r_end])
    def __len__(self):
        return (len(self.data_x) - self.seq_len - self.pred_len + 1) // 3
def adjust_learning_rate(optimizer, epoch, learning_rate):
    lr_adjust = {epoch: learning_rate * (0.5 ** ((epoch - 1) // 1))}
    if epoch in lr_adjust.keys():
        lr = lr_adjust[epoch]
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr
rng = np.random.default_rng(0)
n = 160
t = np.arange(n)
series = np.stack([np.sin(2 * np.pi * t / 24) + 0.5 * np.sin(2 * np.pi * t / 7), np.cos(2 * np.pi * t / 12)], 1)
series = (series + 0.1 * rng.standard_normal(series.shape)).astype(np.float32)
stamp = np.stack([(t % 24) / 23.0 - 0.5, (t // 24 % 7) / 6.0 - 0.5], 1).astype(np.float32)
seq_len, label_len, pred_len = 24, 8, 8
data = Dataset_Custom(series, stamp, seq_len, label_len, pred_len)
loader = DataLoader(data, batch_size=8, shuffle=False, drop_last=True)
model = Informer(2, 2, 2, pred_len); sync(model)
fwd = comp(model)
learning_rate = 2e-3
model_optim = torch.optim.Adam(model.parameters(), lr=learning_rate)
criterion = nn.MSELoss()
LOSSES = []
best = None
for epoch in range(2):
    model.train()
    train_loss = []
    for i, (batch_x, batch_y, batch_x_mark, batch_y_mark) in enumerate(loader):
        if i >= 4:
            break
        model_optim.zero_grad()
        batch_x, batch_y = batch_x.float(), batch_y.float()
        # decoder input: the label window, then zero placeholders for the horizon
        dec_inp = torch.zeros([batch_y.shape[0], pred_len, batch_y.shape[-1]]).float()
        dec_inp = torch.cat([batch_y[:, :label_len, :], dec_inp], dim=1).float()
        index_sample = torch.from_numpy(rng.integers(0, 10 ** 6, (seq_len, seq_len)))   # torch.randint's role
        outputs = fwd(batch_x, batch_x_mark, dec_inp, batch_y_mark, index_sample)
        batch_y = batch_y[:, -pred_len:, 0:]
        loss = criterion(outputs, batch_y)
        train_loss.append(loss.item())
        loss.backward()
        model_optim.step()
        last = (batch_x, batch_x_mark, dec_inp, batch_y_mark, batch_y)
    LOSSES += train_loss
    vali = np.average(train_loss)
    best = vali if best is None or vali < best else best
    adjust_learning_rate(model_optim, epoch + 1, learning_rate)
    LOSSES.append(model_optim.param_groups[0]['lr'])
# with factor large enough every query is kept: the sampled keys no longer matter. (Kept
# in training mode: the distilling convs' biases feed BatchNorm, so their gradients are
# zero up to rounding, which Adam turns into lr-sized steps that only eval's running
# means see.)
for mod in model.modules():
    if isinstance(mod, ProbAttention):
        mod.factor = 20
with torch.no_grad():
    out = fwd(*last[:4])
LOSSES += [criterion(out, last[4]).item(), out.abs().mean().item()]
