from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# knowledge-graph embeddings as the KnowledgeGraphEmbedding repo trains them, written with
# complex tensors: RotatE (entities stored as (.., dim, 2) floats read by
# torch.view_as_complex, relations as phases turned into unit rotations by torch.polar,
# distances by .abs() of the complex difference) and ComplEx (complex64 parameters,
# Re<h, r, conj t>, an N3 regularizer on view_as_real), trained by Adam with
# self-adversarial negative sampling (softmax weights, detached) and F.logsigmoid margins,
# alternating head-batch and tail-batch corruption, evaluated by filtered ranks (MRR, Hits@k)
class KGEModel(nn.Module):
    def __init__(self, model_name, nentity, nrelation, hidden_dim, gamma):
        super(KGEModel, self).__init__()
        self.model_name = model_name
        self.nentity, self.nrelation, self.hidden_dim = nentity, nrelation, hidden_dim
        self.epsilon = 2.0
        self.gamma = nn.Parameter(torch.Tensor([gamma]), requires_grad=False)
        self.embedding_range = nn.Parameter(torch.Tensor([(self.gamma.item() + self.epsilon) / hidden_dim]),
                                            requires_grad=False)
        if model_name == 'RotatE':
            self.entity_embedding = nn.Parameter(torch.zeros(nentity, hidden_dim, 2))
            self.relation_embedding = nn.Parameter(torch.zeros(nrelation, hidden_dim))
            nn.init.uniform_(self.entity_embedding, -self.embedding_range.item(), self.embedding_range.item())
        else:
            self.entity_embedding = nn.Parameter(torch.zeros(nentity, hidden_dim, dtype=torch.cfloat))
            self.relation_embedding = nn.Parameter(torch.zeros(nrelation, hidden_dim, dtype=torch.cfloat))
            with torch.no_grad():
                self.entity_embedding.copy_(torch.randn(nentity, hidden_dim, dtype=torch.cfloat) * 0.1)
        nn.init.uniform_(self.relation_embedding if model_name == 'RotatE' else torch.view_as_real(self.relation_embedding),
                         -self.embedding_range.item(), self.embedding_range.item())
    def forward(self, sample, mode='single'):
        if mode == 'single':
            batch_size, negative_sample_size = sample.size(0), 1
            head = torch.index_select(self.entity_embedding, dim=0, index=sample[:, 0]).unsqueeze(1)
            relation = torch.index_select(self.relation_embedding, dim=0, index=sample[:, 1]).unsqueeze(1)
            tail = torch.index_select(self.entity_embedding, dim=0, index=sample[:, 2]).unsqueeze(1)
        elif mode == 'head-batch':
            tail_part, head_part = sample
            batch_size, negative_sample_size = head_part.size(0), head_part.size(1)
            head = torch.index_select(self.entity_embedding, dim=0, index=head_part.view(-1)).view(
                batch_size, negative_sample_size, *self.entity_embedding.shape[1:])
            relation = torch.index_select(self.relation_embedding, dim=0, index=tail_part[:, 1]).unsqueeze(1)
            tail = torch.index_select(self.entity_embedding, dim=0, index=tail_part[:, 2]).unsqueeze(1)
        elif mode == 'tail-batch':
            head_part, tail_part = sample
            batch_size, negative_sample_size = tail_part.size(0), tail_part.size(1)
            head = torch.index_select(self.entity_embedding, dim=0, index=head_part[:, 0]).unsqueeze(1)
            relation = torch.index_select(self.relation_embedding, dim=0, index=head_part[:, 1]).unsqueeze(1)
            tail = torch.index_select(self.entity_embedding, dim=0, index=tail_part.view(-1)).view(
                batch_size, negative_sample_size, *self.entity_embedding.shape[1:])
        else:
            raise ValueError('mode %s not supported' % mode)
        return getattr(self, self.model_name)(head, relation, tail, mode)
    def RotatE(self, head, relation, tail, mode):
        pi = 3.14159265358979323846
        head, tail = torch.view_as_complex(head), torch.view_as_complex(tail)
        phase_relation = relation / (self.embedding_range.item() / pi)
        rotation = torch.polar(torch.ones_like(phase_relation), phase_relation)
        if mode == 'head-batch':
            score = rotation.conj() * tail - head
        else:
            score = head * rotation - tail
        return self.gamma.item() - score.abs().sum(dim=2)
    def ComplEx(self, head, relation, tail, mode):
        return torch.real(head * relation * tail.conj()).sum(dim=2)
def train_step(model, fwd, optimizer, positive_sample, negative_sample, subsampling_weight, mode, args):
    model.train()
    optimizer.zero_grad()
    negative_score = fwd((positive_sample, negative_sample), mode=mode)
    # self-adversarial sampling: no backpropagation through the weights
    negative_score = (F.softmax(negative_score * args["adversarial_temperature"], dim=1).detach()
                      * F.logsigmoid(-negative_score)).sum(dim=1)
    positive_score = F.logsigmoid(fwd(positive_sample)).squeeze(dim=1)
    positive_sample_loss = - (subsampling_weight * positive_score).sum() / subsampling_weight.sum()
    negative_sample_loss = - (subsampling_weight * negative_score).sum() / subsampling_weight.sum()
    loss = (positive_sample_loss + negative_sample_loss) / 2
    if args["regularization"] != 0.0:
        e = torch.view_as_real(model.entity_embedding) if model.entity_embedding.is_complex() else model.entity_embedding
        r = torch.view_as_real(model.relation_embedding) if model.relation_embedding.is_complex() else model.relation_embedding
        loss = loss + args["regularization"] * (e.norm(p=3) ** 3 + r.norm(p=3) ** 3)
    loss.backward()
    optimizer.step()
    return {'positive_sample_loss': positive_sample_loss.item(), 'negative_sample_loss': negative_sample_loss.item(),
            'loss': loss.item()}
def test_step(model, triples, all_true):
    model.eval()
    logs = []
    with torch.no_grad():
        for mode in ('head-batch', 'tail-batch'):
            positive = torch.from_numpy(triples)
            candidates = torch.arange(model.nentity).repeat(len(triples), 1)
            score = model((positive, candidates), mode)
            filter_bias = torch.zeros_like(score)
            for i, (h, rel, t) in enumerate(triples.tolist()):
                for e in range(model.nentity):
                    key = (e, rel, t) if mode == 'head-batch' else (h, rel, e)
                    if key in all_true and e != (h if mode == 'head-batch' else t):
                        filter_bias[i, e] = -1e4
            score = score + filter_bias
            argsort = torch.argsort(score, dim=1, descending=True)
            positive_arg = positive[:, 0] if mode == 'head-batch' else positive[:, 2]
            for i in range(len(triples)):
                ranking = (argsort[i, :] == positive_arg[i]).nonzero()
                assert ranking.size(0) == 1
                ranking = 1 + ranking.item()
                logs.append({'MRR': 1.0 / ranking, 'HITS@1': 1.0 if ranking <= 1 else 0.0,
                             'HITS@3': 1.0 if ranking <= 3 else 0.0})
    return {metric: sum(log[metric] for log in logs) / len(logs) for metric in logs[0]}
# a synthetic graph: relation r maps entity e to (e * (r + 2) + r) mod n
rng = np.random.default_rng(0)
nentity, nrelation = 40, 4
triples = np.array([(h, rel, (h * (rel + 2) + rel) % nentity) for h in range(nentity) for rel in range(nrelation)])
all_true = set(map(tuple, triples.tolist()))
count = {}
for h, rel, t in triples.tolist():
    count[(h, rel)] = count.get((h, rel), 4) + 1; count[(t, -rel - 1)] = count.get((t, -rel - 1), 4) + 1
LOSSES = []
for name, lr, reg in (("RotatE", 0.05, 0.0), ("ComplEx", 0.05, 1e-4)):
    model = KGEModel(name, nentity, nrelation, hidden_dim=8, gamma=6.0); sync(model)
    fwd = comp(model)
    optimizer = torch.optim.Adam(filter(lambda p: p.requires_grad, model.parameters()), lr=lr)
    args = {"adversarial_temperature": 1.0, "regularization": reg}
    for step in range(10):
        idx = rng.choice(len(triples), 16, replace=False)
        pos = triples[idx]
        mode = 'head-batch' if step % 2 == 0 else 'tail-batch'
        neg = rng.integers(0, nentity, (16, 8))
        w = np.array([count[(h, rel)] + count[(t, -rel - 1)] for h, rel, t in pos.tolist()], np.float32)
        log = train_step(model, fwd, optimizer, torch.from_numpy(pos), torch.from_numpy(neg),
                         torch.sqrt(1 / torch.from_numpy(w)), mode, args)
        LOSSES += [log['positive_sample_loss'], log['negative_sample_loss'], log['loss']]
    metrics = test_step(model, triples[:12], all_true)
    LOSSES += [metrics['MRR'], metrics['HITS@1'], metrics['HITS@3']]
    LOSSES.append(model.entity_embedding.abs().mean().item())
