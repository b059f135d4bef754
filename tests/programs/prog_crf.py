from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch
import torch.autograd as autograd
import torch.nn as nn
import torch.optim as optim
torch.manual_seed(1)
def argmax(vec):
    _, idx = torch.max(vec, 1)
    return idx.item()
def prepare_sequence(seq, to_ix):
    idxs = [to_ix[w] for w in seq]
    return torch.tensor(idxs, dtype=torch.long)
def log_sum_exp(vec):
    max_score = vec[0, argmax(vec)]
    max_score_broadcast = max_score.view(1, -1).expand(1, vec.size()[1])
    return max_score + torch.log(torch.sum(torch.exp(vec - max_score_broadcast)))
START_TAG = "<START>"; STOP_TAG = "<STOP>"
class BiLSTM_CRF(nn.Module):
    def __init__(self, vocab_size, tag_to_ix, embedding_dim, hidden_dim):
        super(BiLSTM_CRF, self).__init__()
        self.embedding_dim = embedding_dim
        self.hidden_dim = hidden_dim
        self.vocab_size = vocab_size
        self.tag_to_ix = tag_to_ix
        self.tagset_size = len(tag_to_ix)
        self.word_embeds = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim // 2, num_layers=1, bidirectional=True)
        self.hidden2tag = nn.Linear(hidden_dim, self.tagset_size)
        self.transitions = nn.Parameter(torch.randn(self.tagset_size, self.tagset_size))
        self.transitions.data[tag_to_ix[START_TAG], :] = -10000
        self.transitions.data[:, tag_to_ix[STOP_TAG]] = -10000
        self.hidden = self.init_hidden()
    def init_hidden(self):
        return (torch.zeros(2, 1, self.hidden_dim // 2), torch.zeros(2, 1, self.hidden_dim // 2))
    def _forward_alg(self, feats):
        init_alphas = torch.full((1, self.tagset_size), -10000.)
        init_alphas[0][self.tag_to_ix[START_TAG]] = 0.
        forward_var = init_alphas
        for feat in feats:
            alphas_t = []
            for next_tag in range(self.tagset_size):
                emit_score = feat[next_tag].view(1, -1).expand(1, self.tagset_size)
                trans_score = self.transitions[next_tag].view(1, -1)
                next_tag_var = forward_var + trans_score + emit_score
                alphas_t.append(log_sum_exp(next_tag_var).view(1))
            forward_var = torch.cat(alphas_t).view(1, -1)
        terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
        alpha = log_sum_exp(terminal_var)
        return alpha
    def _get_lstm_features(self, sentence):
        self.hidden = self.init_hidden()
        embeds = self.word_embeds(sentence).view(len(sentence), 1, -1)
        lstm_out, self.hidden = self.lstm(embeds, self.hidden)
        lstm_out = lstm_out.view(len(sentence), self.hidden_dim)
        lstm_feats = self.hidden2tag(lstm_out)
        return lstm_feats
    def _score_sentence(self, feats, tags):
        score = torch.zeros(1)
        tags = torch.cat([torch.tensor([self.tag_to_ix[START_TAG]], dtype=torch.long), tags])
        for i, feat in enumerate(feats):
            score = score + self.transitions[tags[i + 1], tags[i]] + feat[tags[i + 1]]
        score = score + self.transitions[self.tag_to_ix[STOP_TAG], tags[-1]]
        return score
    def _viterbi_decode(self, feats):
        backpointers = []
        init_vvars = torch.full((1, self.tagset_size), -10000.)
        init_vvars[0][self.tag_to_ix[START_TAG]] = 0
        forward_var = init_vvars
        for feat in feats:
            bptrs_t = []; viterbivars_t = []
            for next_tag in range(self.tagset_size):
                next_tag_var = forward_var + self.transitions[next_tag]
                best_tag_id = argmax(next_tag_var)
                bptrs_t.append(best_tag_id)
                viterbivars_t.append(next_tag_var[0][best_tag_id].view(1))
            forward_var = (torch.cat(viterbivars_t) + feat).view(1, -1)
            backpointers.append(bptrs_t)
        terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
        best_tag_id = argmax(terminal_var)
        path_score = terminal_var[0][best_tag_id]
        best_path = [best_tag_id]
        for bptrs_t in reversed(backpointers):
            best_tag_id = bptrs_t[best_tag_id]
            best_path.append(best_tag_id)
        start = best_path.pop()
        assert start == self.tag_to_ix[START_TAG]
        best_path.reverse()
        return path_score, best_path
    def neg_log_likelihood(self, sentence, tags):
        feats = self._get_lstm_features(sentence)
        forward_score = self._forward_alg(feats)
        gold_score = self._score_sentence(feats, tags)
        return forward_score - gold_score
    def forward(self, sentence):
        lstm_feats = self._get_lstm_features(sentence)
        score, tag_seq = self._viterbi_decode(lstm_feats)
        return score, tag_seq
class BatchCRF(nn.Module):
    """The batched CRF most taggers use: masks, logsumexp over a broadcast, gather."""
    def __init__(self, num_tags, vocab, emb=12, hid=10):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb, padding_idx=0)
        self.lstm = nn.LSTM(emb, hid, batch_first=True, bidirectional=True)
        self.proj = nn.Linear(2 * hid, num_tags)
        self.start_transitions = nn.Parameter(torch.empty(num_tags))
        self.end_transitions = nn.Parameter(torch.empty(num_tags))
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags))
        nn.init.uniform_(self.start_transitions, -0.1, 0.1)
        nn.init.uniform_(self.end_transitions, -0.1, 0.1)
        nn.init.uniform_(self.transitions, -0.1, 0.1)
    def emissions(self, x):
        out, _ = self.lstm(self.emb(x))
        return self.proj(out)
    def _score(self, em, tags, mask):
        B, T = tags.shape
        score = self.start_transitions[tags[:, 0]] + em[:, 0].gather(1, tags[:, :1]).squeeze(1)
        for i in range(1, T):
            trans = self.transitions[tags[:, i - 1], tags[:, i]]
            emit = em[:, i].gather(1, tags[:, i].unsqueeze(1)).squeeze(1)
            score = score + (trans + emit) * mask[:, i]
        seq_ends = mask.long().sum(dim=1) - 1
        last_tags = tags.gather(1, seq_ends.unsqueeze(1)).squeeze(1)
        return score + self.end_transitions[last_tags]
    def _normalizer(self, em, mask):
        score = self.start_transitions + em[:, 0]
        for i in range(1, em.size(1)):
            next_score = torch.logsumexp(score.unsqueeze(2) + self.transitions + em[:, i].unsqueeze(1), dim=1)
            score = torch.where(mask[:, i].unsqueeze(1).bool(), next_score, score)
        return torch.logsumexp(score + self.end_transitions, dim=1)
    def forward(self, x, tags, mask):
        em = self.emissions(x)
        return (self._normalizer(em, mask) - self._score(em, tags, mask.float())).mean()
    @torch.no_grad()
    def decode(self, x, mask):
        em = self.emissions(x)
        score = self.start_transitions + em[:, 0]
        history = []
        for i in range(1, em.size(1)):
            next_score, indices = (score.unsqueeze(2) + self.transitions + em[:, i].unsqueeze(1)).max(dim=1)
            score = torch.where(mask[:, i].unsqueeze(1), next_score, score)
            history.append(indices)
        score += self.end_transitions
        seq_ends = mask.long().sum(dim=1) - 1
        best = []
        for b in range(x.size(0)):
            _, best_last_tag = score[b].max(dim=0)
            best_tags = [best_last_tag.item()]
            for hist in reversed(history[:seq_ends[b]]):
                best_last_tag = hist[b][best_tags[-1]]
                best_tags.append(best_last_tag.item())
            best_tags.reverse()
            best.append(best_tags)
        return best
EMBEDDING_DIM = 5; HIDDEN_DIM = 4
training_data = [(
    "the wall street journal reported today that apple corporation made money".split(),
    "B I I I O O O B I O O".split()
), (
    "georgia tech is a university in georgia".split(),
    "B I O O O O B".split()
)]
word_to_ix = {}
for sentence, tags in training_data:
    for word in sentence:
        if word not in word_to_ix:
            word_to_ix[word] = len(word_to_ix)
tag_to_ix = {"B": 0, "I": 1, "O": 2, START_TAG: 3, STOP_TAG: 4}
model = BiLSTM_CRF(len(word_to_ix), tag_to_ix, EMBEDDING_DIM, HIDDEN_DIM)
crf = BatchCRF(5, 30)
sync(model, crf)
optimizer = optim.SGD(model.parameters(), lr=0.01, weight_decay=1e-4)
LOSSES = []
with torch.no_grad():
    precheck_sent = prepare_sequence(training_data[0][0], word_to_ix)
    s, path = model(precheck_sent)
    LOSSES += [s.item()] + [float(t) for t in path]
for epoch in range(2):
    for sentence, tags in training_data:
        model.zero_grad()
        sentence_in = prepare_sequence(sentence, word_to_ix)
        targets = torch.tensor([tag_to_ix[t] for t in tags], dtype=torch.long)
        loss = model.neg_log_likelihood(sentence_in, targets)
        loss.backward()
        optimizer.step()
        LOSSES.append(loss.item())
with torch.no_grad():
    s, path = model(prepare_sequence(training_data[0][0], word_to_ix))
    LOSSES += [s.item()] + [float(t) for t in path]
r = np.random.default_rng(0)
opt = optim.Adam(crf.parameters(), lr=0.05)
fwd = comp(crf)
for it in range(3):
    lengths = r.integers(2, 8, 4); lengths[0] = 7
    x = np.zeros((4, 7), np.int64); y = np.zeros((4, 7), np.int64)
    for b, l in enumerate(lengths):
        x[b, :l] = r.integers(1, 30, l); y[b, :l] = r.integers(0, 5, l)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    mask = x != 0
    loss = fwd(x, y, mask)
    opt.zero_grad(); loss.backward(); opt.step()
    LOSSES.append(loss.item())
for p in crf.decode(x, mask):
    LOSSES += [float(t) for t in p]
