from _harness import sync, comp  # the runner: weights shared with the PyTorch run; torch.compile
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
# Transformer-XL (kimiyoung/transformer-xl style): segment-level recurrence with detached
# memories, relative positional attention (r_w_bias / r_r_bias, the pad-and-view rel_shift),
# memories initialised as empty 1-D tensors, adaptive softmax, Adam under cosine annealing
torch.manual_seed(0)


class PositionalEmbedding(nn.Module):
    def __init__(self, demb):
        super(PositionalEmbedding, self).__init__()
        self.demb = demb
        inv_freq = 1 / (10000 ** (torch.arange(0.0, demb, 2.0) / demb))
        self.register_buffer('inv_freq', inv_freq)

    def forward(self, pos_seq, bsz=None):
        sinusoid_inp = torch.ger(pos_seq, self.inv_freq)
        pos_emb = torch.cat([sinusoid_inp.sin(), sinusoid_inp.cos()], dim=-1)
        if bsz is not None:
            return pos_emb[:, None, :].expand(-1, bsz, -1)
        return pos_emb[:, None, :]


class PositionwiseFF(nn.Module):
    def __init__(self, d_model, d_inner, dropout, pre_lnorm=False):
        super(PositionwiseFF, self).__init__()
        self.CoreNet = nn.Sequential(nn.Linear(d_model, d_inner), nn.ReLU(inplace=True), nn.Dropout(dropout),
                                     nn.Linear(d_inner, d_model), nn.Dropout(dropout))
        self.layer_norm = nn.LayerNorm(d_model)
        self.pre_lnorm = pre_lnorm

    def forward(self, inp):
        if self.pre_lnorm:
            return self.CoreNet(self.layer_norm(inp)) + inp
        return self.layer_norm(inp + self.CoreNet(inp))


class RelPartialLearnableMultiHeadAttn(nn.Module):
    def __init__(self, n_head, d_model, d_head, dropout, dropatt=0.0, pre_lnorm=False):
        super().__init__()
        self.n_head, self.d_model, self.d_head = n_head, d_model, d_head
        self.qkv_net = nn.Linear(d_model, 3 * n_head * d_head, bias=False)
        self.r_net = nn.Linear(d_model, n_head * d_head, bias=False)
        self.drop = nn.Dropout(dropout)
        self.dropatt = nn.Dropout(dropatt)
        self.o_net = nn.Linear(n_head * d_head, d_model, bias=False)
        self.layer_norm = nn.LayerNorm(d_model)
        self.scale = 1 / (d_head ** 0.5)
        self.pre_lnorm = pre_lnorm

    def _rel_shift(self, x, zero_triu=False):
        zero_pad = torch.zeros((x.size(0), 1, *x.size()[2:]), device=x.device, dtype=x.dtype)
        x_padded = torch.cat([zero_pad, x], dim=1)
        x_padded = x_padded.view(x.size(1) + 1, x.size(0), *x.size()[2:])
        x = x_padded[1:].view_as(x)
        if zero_triu:
            ones = torch.ones((x.size(0), x.size(1)))
            x = x * torch.tril(ones, x.size(1) - x.size(0))[:, :, None, None]
        return x

    def forward(self, w, r, r_w_bias, r_r_bias, attn_mask=None, mems=None):
        qlen, rlen, bsz = w.size(0), r.size(0), w.size(1)
        if mems is not None:
            cat = torch.cat([mems, w], 0)
            w_heads = self.qkv_net(self.layer_norm(cat) if self.pre_lnorm else cat)
            r_head_k = self.r_net(r)
            w_head_q, w_head_k, w_head_v = torch.chunk(w_heads, 3, dim=-1)
            w_head_q = w_head_q[-qlen:]
        else:
            w_heads = self.qkv_net(self.layer_norm(w) if self.pre_lnorm else w)
            r_head_k = self.r_net(r)
            w_head_q, w_head_k, w_head_v = torch.chunk(w_heads, 3, dim=-1)
        klen = w_head_k.size(0)
        w_head_q = w_head_q.view(qlen, bsz, self.n_head, self.d_head)
        w_head_k = w_head_k.view(klen, bsz, self.n_head, self.d_head)
        w_head_v = w_head_v.view(klen, bsz, self.n_head, self.d_head)
        r_head_k = r_head_k.view(rlen, self.n_head, self.d_head)
        rw_head_q = w_head_q + r_w_bias                                  # qlen x bsz x n_head x d_head
        AC = torch.einsum('ibnd,jbnd->ijbn', (rw_head_q, w_head_k))       # qlen x klen x bsz x n_head
        rr_head_q = w_head_q + r_r_bias
        BD = torch.einsum('ibnd,jnd->ijbn', (rr_head_q, r_head_k))        # qlen x klen x bsz x n_head
        BD = self._rel_shift(BD)
        attn_score = AC + BD
        attn_score.mul_(self.scale)
        if attn_mask is not None and attn_mask.any().item():
            if attn_mask.dim() == 2:
                attn_score = attn_score.float().masked_fill(attn_mask[None, :, :, None], -float('inf')).type_as(attn_score)
            elif attn_mask.dim() == 3:
                attn_score = attn_score.float().masked_fill(attn_mask[:, :, :, None], -float('inf')).type_as(attn_score)
        attn_prob = F.softmax(attn_score, dim=1)
        attn_prob = self.dropatt(attn_prob)
        attn_vec = torch.einsum('ijbn,jbnd->ibnd', (attn_prob, w_head_v))
        attn_vec = attn_vec.contiguous().view(attn_vec.size(0), attn_vec.size(1), self.n_head * self.d_head)
        attn_out = self.drop(self.o_net(attn_vec))
        if self.pre_lnorm:
            return w + attn_out
        return self.layer_norm(w + attn_out)


class RelPartialLearnableDecoderLayer(nn.Module):
    def __init__(self, n_head, d_model, d_head, d_inner, dropout, **kwargs):
        super().__init__()
        self.dec_attn = RelPartialLearnableMultiHeadAttn(n_head, d_model, d_head, dropout, **kwargs)
        self.pos_ff = PositionwiseFF(d_model, d_inner, dropout, pre_lnorm=kwargs.get('pre_lnorm'))

    def forward(self, dec_inp, r, r_w_bias, r_r_bias, dec_attn_mask=None, mems=None):
        output = self.dec_attn(dec_inp, r, r_w_bias, r_r_bias, attn_mask=dec_attn_mask, mems=mems)
        return self.pos_ff(output)


class MemTransformerLM(nn.Module):
    def __init__(self, n_token, n_layer, n_head, d_model, d_head, d_inner, dropout, dropatt,
                 tgt_len=None, ext_len=0, mem_len=0, cutoffs=()):
        super().__init__()
        self.n_token, self.d_model, self.n_head, self.d_head = n_token, d_model, n_head, d_head
        self.word_emb = nn.Embedding(n_token, d_model)
        self.emb_scale = d_model ** 0.5
        self.drop = nn.Dropout(dropout)
        self.n_layer, self.tgt_len, self.mem_len, self.ext_len = n_layer, tgt_len, mem_len, ext_len
        self.layers = nn.ModuleList([RelPartialLearnableDecoderLayer(n_head, d_model, d_head, d_inner, dropout,
                                                                     dropatt=dropatt) for _ in range(n_layer)])
        self.crit = nn.AdaptiveLogSoftmaxWithLoss(d_model, n_token, cutoffs=list(cutoffs), div_value=2.0)
        self.pos_emb = PositionalEmbedding(self.d_model)
        self.r_w_bias = nn.Parameter(torch.Tensor(self.n_head, self.d_head))
        self.r_r_bias = nn.Parameter(torch.Tensor(self.n_head, self.d_head))
        nn.init.normal_(self.r_w_bias, 0.0, 0.02); nn.init.normal_(self.r_r_bias, 0.0, 0.02)

    def init_mems(self):
        if self.mem_len > 0:
            param = next(self.parameters())
            return [torch.empty(0, dtype=param.dtype, device=param.device) for i in range(self.n_layer + 1)]
        return None

    def _update_mems(self, hids, mems, qlen, mlen):
        if mems is None:
            return None
        assert len(hids) == len(mems), 'len(hids) != len(mems)'
        with torch.no_grad():
            new_mems = []
            end_idx = mlen + max(0, qlen - 0 - self.ext_len)
            beg_idx = max(0, end_idx - self.mem_len)
            for i in range(len(hids)):
                cat = torch.cat([mems[i], hids[i]], dim=0)
                new_mems.append(cat[beg_idx:end_idx].detach())
        return new_mems

    def _forward(self, dec_inp, mems=None):
        qlen, bsz = dec_inp.size()
        word_emb = self.word_emb(dec_inp) * self.emb_scale
        mlen = mems[0].size(0) if mems is not None else 0
        klen = mlen + qlen
        dec_attn_mask = torch.triu(word_emb.new_ones(qlen, klen), diagonal=1 + mlen).byte()[:, :, None].bool()
        hids = []
        pos_seq = torch.arange(klen - 1, -1, -1.0, device=word_emb.device, dtype=word_emb.dtype)
        pos_emb = self.drop(self.pos_emb(pos_seq))
        core_out = self.drop(word_emb)
        hids.append(core_out)
        for i, layer in enumerate(self.layers):
            mems_i = None if mems is None else mems[i]
            core_out = layer(core_out, pos_emb, self.r_w_bias, self.r_r_bias, dec_attn_mask=dec_attn_mask, mems=mems_i)
            hids.append(core_out)
        core_out = self.drop(core_out)
        new_mems = self._update_mems(hids, mems, mlen, qlen)
        return core_out, new_mems

    def forward(self, data, target, *mems):
        if not mems:
            mems = self.init_mems()
        tgt_len = target.size(0)
        hidden, new_mems = self._forward(data, mems=mems)
        pred_hid = hidden[-tgt_len:]
        out = self.crit(pred_hid.reshape(-1, pred_hid.size(-1)), target.reshape(-1))
        loss = -out.output.view(tgt_len, -1)
        if new_mems is None:
            return [loss]
        return [loss] + new_mems


class LMOrderedIterator(object):
    def __init__(self, data, bsz, bptt, ext_len=None):
        self.bsz, self.bptt, self.ext_len = bsz, bptt, ext_len if ext_len is not None else 0
        self.n_step = data.size(0) // bsz
        data = data.narrow(0, 0, self.n_step * bsz)
        self.data = data.view(bsz, -1).t().contiguous()
        self.n_batch = (self.n_step + self.bptt - 1) // self.bptt

    def get_batch(self, i, bptt=None):
        if bptt is None:
            bptt = self.bptt
        seq_len = min(bptt, self.data.size(0) - 1 - i)
        end_idx = i + seq_len
        beg_idx = max(0, i - self.ext_len)
        data = self.data[beg_idx:end_idx]
        target = self.data[i + 1:i + 1 + seq_len]
        return data, target, seq_len

    def get_fixlen_iter(self, start=0):
        for i in range(start, self.data.size(0) - 1, self.bptt):
            yield self.get_batch(i)

    def __iter__(self):
        return self.get_fixlen_iter()


n_token = 60
r = np.random.default_rng(0)
corpus = torch.from_numpy(r.zipf(1.3, 4 * 8 * 6 + 1) % n_token).long()
net = MemTransformerLM(n_token, n_layer=2, n_head=2, d_model=32, d_head=16, d_inner=64, dropout=0.0,
                       dropatt=0.0, tgt_len=8, mem_len=8, cutoffs=[10, 30])
sync(net)
model = comp(net)
optimizer = torch.optim.Adam(net.parameters(), lr=2.5e-3)
max_step = 8
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max_step, eta_min=0.0)
train_iter = LMOrderedIterator(corpus, bsz=4, bptt=8)
LOSSES = []
train_step = 0
for epoch in range(2):
    net.train()
    mems = tuple()
    for batch, (data, target, seq_len) in enumerate(train_iter):
        model.zero_grad()
        ret = model(data, target, *mems)
        loss, mems = ret[0], ret[1:]
        loss = loss.float().mean().type_as(loss)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 0.25)
        optimizer.step()
        train_step += 1
        scheduler.step(train_step) if train_step <= max_step else None
        if batch % 2 == 0:
            LOSSES.append(loss.item())
LOSSES.append(optimizer.param_groups[0]['lr'])
# evaluation: the same iterator without grad, the memory carried over
net.eval()
total_len, total_loss = 0, 0.
with torch.no_grad():
    mems = tuple()
    for i, (data, target, seq_len) in enumerate(train_iter):
        ret = model(data, target, *mems)
        loss, mems = ret[0], ret[1:]
        loss = loss.mean()
        total_loss += seq_len * loss.float().item()
        total_len += seq_len
LOSSES.append(total_loss / total_len)
LOSSES.append(math.exp(total_loss / total_len) / 100)
