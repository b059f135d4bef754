from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
# the "NLP from scratch" translation tutorial: a GRU encoder, a decoder with Bahdanau
# (additive) attention run step by step with teacher forcing, NLLLoss over log_softmax
SOS_token, EOS_token, MAX_LENGTH = 0, 1, 8
class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size, dropout_p=0.1):
        super(EncoderRNN, self).__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.dropout = nn.Dropout(dropout_p)
    def forward(self, input):
        embedded = self.dropout(self.embedding(input))
        output, hidden = self.gru(embedded)
        return output, hidden
class BahdanauAttention(nn.Module):
    def __init__(self, hidden_size):
        super(BahdanauAttention, self).__init__()
        self.Wa = nn.Linear(hidden_size, hidden_size)
        self.Ua = nn.Linear(hidden_size, hidden_size)
        self.Va = nn.Linear(hidden_size, 1)
    def forward(self, query, keys):
        scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(keys)))
        scores = scores.squeeze(2).unsqueeze(1)
        weights = F.softmax(scores, dim=-1)
        context = torch.bmm(weights, keys)
        return context, weights
class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size, dropout_p=0.1):
        super(AttnDecoderRNN, self).__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.attention = BahdanauAttention(hidden_size)
        self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)
        self.dropout = nn.Dropout(dropout_p)
    def forward(self, encoder_outputs, encoder_hidden, target_tensor=None):
        batch_size = encoder_outputs.size(0)
        decoder_input = torch.empty(batch_size, 1, dtype=torch.long).fill_(SOS_token)
        decoder_hidden = encoder_hidden
        decoder_outputs = []
        attentions = []
        for i in range(MAX_LENGTH):
            decoder_output, decoder_hidden, attn_weights = self.forward_step(
                decoder_input, decoder_hidden, encoder_outputs)
            decoder_outputs.append(decoder_output)
            attentions.append(attn_weights)
            if target_tensor is not None:
                decoder_input = target_tensor[:, i].unsqueeze(1)  # Teacher forcing
            else:
                _, topi = decoder_output.topk(1)
                decoder_input = topi.squeeze(-1).detach()  # detach from history as input
        decoder_outputs = torch.cat(decoder_outputs, dim=1)
        decoder_outputs = F.log_softmax(decoder_outputs, dim=-1)
        attentions = torch.cat(attentions, dim=1)
        return decoder_outputs, decoder_hidden, attentions
    def forward_step(self, input, hidden, encoder_outputs):
        embedded = self.dropout(self.embedding(input))
        query = hidden.permute(1, 0, 2)
        context, attn_weights = self.attention(query, encoder_outputs)
        input_gru = torch.cat((embedded, context), dim=2)
        output, hidden = self.gru(input_gru, hidden)
        output = self.out(output)
        return output, hidden, attn_weights
r = np.random.default_rng(0)
n_words_in, n_words_out, hidden_size, N = 30, 25, 32, 48
# pairs padded to MAX_LENGTH with EOS then zeros, as the tutorial's get_dataloader builds them
input_ids = np.zeros((N, MAX_LENGTH), dtype=np.int32); target_ids = np.zeros((N, MAX_LENGTH), dtype=np.int32)
for k in range(N):
    li, lo = r.integers(3, MAX_LENGTH), r.integers(3, MAX_LENGTH)
    input_ids[k, :li] = r.integers(2, n_words_in, li); input_ids[k, li] = EOS_token
    target_ids[k, :lo] = r.integers(2, n_words_out, lo); target_ids[k, lo] = EOS_token
train_data = TensorDataset(torch.LongTensor(input_ids), torch.LongTensor(target_ids))
# (the shuffle drawn with numpy: the two frameworks' generators differ)
train_dataloader = DataLoader(train_data, sampler=r.permutation(N).tolist(), batch_size=16)
encoder = EncoderRNN(n_words_in, hidden_size, dropout_p=0.0)
decoder = AttnDecoderRNN(hidden_size, n_words_out, dropout_p=0.0)
sync(encoder, decoder)
enc, dec = comp(encoder), comp(decoder)
encoder_optimizer = torch.optim.Adam(encoder.parameters(), lr=0.01)
decoder_optimizer = torch.optim.Adam(decoder.parameters(), lr=0.01)
criterion = nn.NLLLoss()
LOSSES = []
for epoch in range(2):
    for data in train_dataloader:
        input_tensor, target_tensor = data
        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()
        encoder_outputs, encoder_hidden = enc(input_tensor)
        decoder_outputs, _, _ = dec(encoder_outputs, encoder_hidden, target_tensor)
        loss = criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)), target_tensor.view(-1))
        loss.backward()
        encoder_optimizer.step()
        decoder_optimizer.step()
        LOSSES.append(loss.item())
with torch.no_grad():   # greedy decoding
    encoder_outputs, encoder_hidden = enc(torch.LongTensor(input_ids[:4]))
    decoder_outputs, decoder_hidden, attn = dec(encoder_outputs, encoder_hidden)
    _, topi = decoder_outputs.topk(1)
    LOSSES += [topi.squeeze().float().sum().item(), decoder_outputs.max(-1)[0].sum().item(), (attn * attn).sum().item()]
