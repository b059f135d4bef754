"""A GRU encoder-decoder with Bahdanau attention, as the PyTorch translation tutorial
("NLP From Scratch: Translation with a Sequence to Sequence Network and Attention") writes
it in its batched form.

Encoder: Embedding + GRU (batch_first). Decoder: Embedding; additive attention
``Va(tanh(Wa(query) + Ua(keys)))``, a softmax over the source positions and ``bmm`` for
the context; the embedded token and the context concatenated into a one-step GRU; a
Linear to the output vocabulary; a Python loop of 10 steps with teacher forcing;
``log_softmax`` and NLLLoss; one Adam per network. Batch 32, hidden 128, vocabularies
1200 and 1000. Compiled: the encoder and the decoder.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "seq2seq"
IN_VOCAB, OUT_VOCAB, HIDDEN, MAX_LENGTH, BATCH = 1200, 1000, 128, 10, 32
SOS_token = 0


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)

    def forward(self, input):
        embedded = self.embedding(input)
        output, hidden = self.gru(embedded)
        return output, hidden


class BahdanauAttention(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
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
    def __init__(self, hidden_size, output_size):
        super().__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.attention = BahdanauAttention(hidden_size)
        self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)

    def forward(self, encoder_outputs, encoder_hidden, target_tensor):
        batch_size = encoder_outputs.size(0)
        decoder_input = torch.empty(batch_size, 1, dtype=torch.long).fill_(SOS_token)
        decoder_hidden = encoder_hidden
        decoder_outputs = []
        for i in range(MAX_LENGTH):
            decoder_output, decoder_hidden = self.forward_step(decoder_input, decoder_hidden,
                                                               encoder_outputs)
            decoder_outputs.append(decoder_output)
            decoder_input = target_tensor[:, i].unsqueeze(1)   # teacher forcing
        decoder_outputs = torch.cat(decoder_outputs, dim=1)
        return F.log_softmax(decoder_outputs, dim=-1), decoder_hidden

    def forward_step(self, input, hidden, encoder_outputs):
        embedded = self.embedding(input)
        query = hidden.permute(1, 0, 2)
        context, _ = self.attention(query, encoder_outputs)
        input_gru = torch.cat((embedded, context), dim=2)
        output, hidden = self.gru(input_gru, hidden)
        return self.out(output), hidden


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = [(torch.from_numpy(r.integers(1, IN_VOCAB, (BATCH, MAX_LENGTH))),
                         torch.from_numpy(r.integers(1, OUT_VOCAB, (BATCH, MAX_LENGTH))))
                        for _ in range(4)]
        self.encoder = EncoderRNN(IN_VOCAB, HIDDEN)
        self.decoder = AttnDecoderRNN(HIDDEN, OUT_VOCAB)
        load_params(NAME, self.encoder, self.decoder)
        self.encoder_optimizer = torch.optim.Adam(self.encoder.parameters(), lr=0.001)
        self.decoder_optimizer = torch.optim.Adam(self.decoder.parameters(), lr=0.001)
        self.criterion = nn.NLLLoss()
        self.run_encoder = compile(self.encoder)
        self.run_decoder = compile(self.decoder)
        self.i = 0

    def step(self) -> float:
        input_tensor, target_tensor = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.encoder_optimizer.zero_grad()
        self.decoder_optimizer.zero_grad()
        encoder_outputs, encoder_hidden = self.run_encoder(input_tensor)
        decoder_outputs, _ = self.run_decoder(encoder_outputs, encoder_hidden, target_tensor)
        loss = self.criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)),
                              target_tensor.view(-1))
        loss.backward()
        self.encoder_optimizer.step()
        self.decoder_optimizer.step()
        return loss.item()
