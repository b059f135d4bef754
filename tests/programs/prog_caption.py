from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
torch.manual_seed(0)
# image captioning as the CNN-encoder / Transformer-decoder tutorials write it: a small CNN
# whose feature map becomes the memory sequence, nn.TransformerDecoder with batch_first and
# norm_first layers, the causal mask from nn.Transformer.generate_square_subsequent_mask
# with tgt_is_causal, caption padding as tgt_key_padding_mask, label smoothing, AdamW
# under a warmup LambdaLR, then greedy decoding under torch.inference_mode()
PAD, BOS, EOS, VOCAB = 0, 1, 2, 30
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=64):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(1, max_len, d_model)
        pe[0, :, 0::2] = torch.sin(position * div_term)
        pe[0, :, 1::2] = torch.cos(position * div_term)
        self.register_buffer('pe', pe)
    def forward(self, x):
        x = x + self.pe[:, :x.size(1)]
        return self.dropout(x)
class Encoder(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.cnn = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.GELU(),
                                 nn.Conv2d(16, d_model, 3, stride=2, padding=1), nn.BatchNorm2d(d_model), nn.GELU())
    def forward(self, images):
        features = self.cnn(images)                     # (B, d, h, w)
        return features.flatten(2).permute(0, 2, 1)     # (B, h*w, d)
class Captioner(nn.Module):
    def __init__(self, d_model=32, nhead=4, num_layers=2):
        super().__init__()
        self.encoder = Encoder(d_model)
        self.embed = nn.Embedding(VOCAB, d_model, padding_idx=PAD)
        self.pos = PositionalEncoding(d_model, dropout=0.0)
        layer = nn.TransformerDecoderLayer(d_model, nhead, dim_feedforward=64, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.decoder = nn.TransformerDecoder(layer, num_layers, norm=nn.LayerNorm(d_model))
        self.fc = nn.Linear(d_model, VOCAB)
        self.d_model = d_model
    def forward(self, images, captions):
        memory = self.encoder(images)
        return self.decode(memory, captions)
    def decode(self, memory, captions):
        T = captions.size(1)
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(T, device=captions.device)
        x = self.pos(self.embed(captions) * math.sqrt(self.d_model))
        out = self.decoder(x, memory, tgt_mask=tgt_mask, tgt_key_padding_mask=captions == PAD,
                           tgt_is_causal=True)
        return self.fc(out)
model = Captioner(); sync(model)
criterion = nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=0.1)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
warmup = 2
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
r = np.random.default_rng(0)
def batch(n=4):
    images = torch.from_numpy(r.standard_normal((n, 3, 12, 12)).astype(np.float32))
    caps = [torch.tensor([BOS] + r.integers(3, VOCAB, int(r.integers(2, 7))).tolist() + [EOS]) for _ in range(n)]
    return images, pad_sequence(caps, batch_first=True, padding_value=PAD)
fwd = comp(model)
LOSSES = []
model.train()
for it in range(3):
    images, captions = batch()
    logits = fwd(images, captions[:, :-1])
    loss = criterion(logits.reshape(-1, VOCAB), captions[:, 1:].reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    optimizer.step(); scheduler.step()
    LOSSES += [loss.item(), scheduler.get_last_lr()[0]]
model.eval()
with torch.inference_mode():
    images, _ = batch(2)
    memory = model.encoder(images)
    ys = torch.full((2, 1), BOS, dtype=torch.long)
    for _ in range(6):
        next_word = model.decode(memory, ys)[:, -1].argmax(-1, keepdim=True)
        ys = torch.cat([ys, next_word], dim=1)
    assert ys.shape == (2, 7) and not ys.requires_grad
    LOSSES += [float(t) for t in ys.flatten().tolist()] + [memory.abs().mean().item()]
