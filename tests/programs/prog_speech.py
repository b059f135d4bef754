from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
class CNNLayerNorm(nn.Module):
    """Layer normalization over the feature axis of (batch, channel, feature, time)."""
    def __init__(self, n_feats):
        super(CNNLayerNorm, self).__init__()
        self.layer_norm = nn.LayerNorm(n_feats)
    def forward(self, x):
        x = x.transpose(2, 3).contiguous()
        x = self.layer_norm(x)
        return x.transpose(2, 3).contiguous()
class BidirectionalGRU(nn.Module):
    def __init__(self, rnn_dim, hidden_size, dropout, batch_first):
        super(BidirectionalGRU, self).__init__()
        self.BiGRU = nn.GRU(input_size=rnn_dim, hidden_size=hidden_size, num_layers=1,
                            batch_first=batch_first, bidirectional=True)
        self.layer_norm = nn.LayerNorm(rnn_dim)
        self.dropout = nn.Dropout(dropout)
    def forward(self, x):
        x = self.layer_norm(x)
        x = F.gelu(x)
        x, _ = self.BiGRU(x)
        x = self.dropout(x)
        return x
class SpeechModel(nn.Module):
    def __init__(self, n_feats=16, n_class=12, rnn_dim=24, stride=2):
        super().__init__()
        self.cnn = nn.Conv2d(1, 4, 3, stride=stride, padding=3 // 2)
        self.norm = CNNLayerNorm(n_feats // 2)
        self.front = nn.Sequential(
            nn.Conv1d(4 * (n_feats // 2), rnn_dim, kernel_size=5, padding=2),
            nn.BatchNorm1d(rnn_dim), nn.Hardtanh(0, 20, inplace=True),
            nn.Conv1d(rnn_dim, rnn_dim, kernel_size=3, padding=2, dilation=2, groups=4),
            nn.ReLU())
        self.birnn_layers = nn.Sequential(
            BidirectionalGRU(rnn_dim, rnn_dim, 0.0, batch_first=True),
            BidirectionalGRU(rnn_dim * 2, rnn_dim, 0.0, batch_first=True))
        self.classifier = nn.Sequential(nn.Linear(rnn_dim * 2, rnn_dim), nn.GELU(), nn.Dropout(0.0),
                                        nn.Linear(rnn_dim, n_class))
    def forward(self, x):
        x = self.cnn(x)                   # (batch, channel, feature, time)
        x = self.norm(x)
        sizes = x.size()
        x = x.view(sizes[0], sizes[1] * sizes[2], sizes[3])  # (batch, feature, time)
        x = self.front(x)
        x = x.transpose(1, 2)             # (batch, time, feature)
        x = self.birnn_layers(x)
        return self.classifier(x)
class DeepSpeechGRU(nn.Module):  # time-major, packed
    def __init__(self, n_feats=16, n_class=12, hid=20):
        super().__init__()
        self.conv = nn.Conv1d(n_feats, hid, 3, stride=1, padding=1)
        self.rnn = nn.GRU(hid, hid, num_layers=2, bidirectional=True)
        self.fc = nn.Linear(2 * hid, n_class)
    def forward(self, x, lengths):
        x = F.relu(self.conv(x)).permute(2, 0, 1)          # (T, N, C)
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), enforce_sorted=False)
        out, h = self.rnn(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, total_length=x.size(0))
        return self.fc(out)
model = SpeechModel(); ds = DeepSpeechGRU(); sync(model, ds)
criterion = nn.CTCLoss(blank=0, zero_infinity=True)
optimizer = torch.optim.AdamW(list(model.parameters()) + list(ds.parameters()), lr=5e-4)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=5e-4, steps_per_epoch=3, epochs=1, anneal_strategy='linear')
r = np.random.default_rng(0)
fwd = comp(model)
LOSSES = []
def GreedyDecoder(output, blank_label=0):
    arg_maxes = torch.argmax(output, dim=2)
    decodes = []
    for i, args in enumerate(arg_maxes):
        decode = []
        for j, index in enumerate(args):
            if index != blank_label:
                if j != 0 and index == args[j - 1]:
                    continue
                decode.append(index.item())
        decodes.append(decode)
    return decodes
for it in range(3):
    spectrograms = torch.from_numpy(r.standard_normal((4, 1, 16, 30)).astype(np.float32))
    label_lengths = [int(v) for v in r.integers(2, 6, 4)]
    labels = torch.from_numpy(np.stack([np.pad(r.integers(1, 12, l), (0, 6 - l)) for l in label_lengths]))
    input_lengths = [15, 14, 12, 15]
    output = fwd(spectrograms)              # (batch, time, n_class)
    output = F.log_softmax(output, dim=2)
    output = output.transpose(0, 1)         # (time, batch, n_class)
    loss = criterion(output, labels, input_lengths, label_lengths)
    feats = torch.from_numpy(r.standard_normal((4, 16, 20)).astype(np.float32))
    lens = torch.tensor([20, 17, 20, 11])
    lp = ds(feats, lens).log_softmax(-1)
    flat = torch.cat([labels[i, :label_lengths[i]] for i in range(4)])
    loss2 = F.ctc_loss(lp, flat, lens, torch.tensor(label_lengths), blank=0, reduction='mean')
    loss3 = F.ctc_loss(lp, labels.to(torch.int32), lens.to(torch.int32), torch.tensor(label_lengths, dtype=torch.int32), reduction='sum')
    optimizer.zero_grad()
    (loss + loss2).backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step(); scheduler.step()
    LOSSES += [loss.item(), loss2.item(), loss3.item()]
    dec = GreedyDecoder(output.transpose(0, 1))
    LOSSES.append(float(sum(len(d) for d in dec)))
LOSSES.append(scheduler.get_last_lr()[0] * 1e4)
none = nn.CTCLoss(reduction='none')(lp, labels, lens, torch.tensor(label_lengths))
LOSSES += none.tolist()
