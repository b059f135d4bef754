from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# Child-Sum Tree-LSTM semantic relatedness as dasguptar/treelstm.pytorch writes it: Python
# Tree objects built from parent-pointer arrays, a recursive forward that stores each
# node's (c, h) on the node, leaves' zero states by .detach().new(1, d).fill_(0.)
# .requires_grad_(), children's states gathered by zip(*map(...)) and cat, the node cell
# (a per-child forget gate by repeat) compiled with dynamic=True over child counts, the
# similarity head on |l - r| and l * r, a sparse target distribution over the 1-5 score
# (map_label_to_target by floor/ceil), KLDivLoss, a backward per pair and Adagrad stepped
# every batch of pairs, and the expected score in eval
class Tree(object):
    def __init__(self):
        self.parent = None
        self.num_children = 0
        self.children = list()
    def add_child(self, child):
        child.parent = self
        self.num_children += 1
        self.children.append(child)
    def size(self):
        if getattr(self, '_size', None):
            return self._size
        count = 1
        for i in range(self.num_children):
            count += self.children[i].size()
        self._size = count
        return self._size
    def depth(self):
        if getattr(self, '_depth', None):
            return self._depth
        count = 0
        if self.num_children > 0:
            for i in range(self.num_children):
                child_depth = self.children[i].depth()
                if child_depth > count:
                    count = child_depth
            count += 1
        self._depth = count
        return self._depth
def read_tree(parents):
    """The dataset's read_tree: parent pointers (1-based, 0 the root) to a Tree."""
    trees = dict()
    root = None
    for i in range(1, len(parents) + 1):
        if i - 1 not in trees.keys() and parents[i - 1] != -1:
            idx = i
            prev = None
            while True:
                parent = parents[idx - 1]
                if parent == -1:
                    break
                tree = Tree()
                if prev is not None:
                    tree.add_child(prev)
                trees[idx - 1] = tree
                tree.idx = idx - 1
                if parent - 1 in trees.keys():
                    trees[parent - 1].add_child(tree)
                    break
                elif parent == 0:
                    root = tree
                    break
                else:
                    prev = tree
                    idx = parent
    return root
class ChildSumTreeLSTM(nn.Module):
    def __init__(self, in_dim, mem_dim):
        super(ChildSumTreeLSTM, self).__init__()
        self.in_dim = in_dim
        self.mem_dim = mem_dim
        self.ioux = nn.Linear(self.in_dim, 3 * self.mem_dim)
        self.iouh = nn.Linear(self.mem_dim, 3 * self.mem_dim)
        self.fx = nn.Linear(self.in_dim, self.mem_dim)
        self.fh = nn.Linear(self.mem_dim, self.mem_dim)
    def node_forward(self, inputs, child_c, child_h):
        child_h_sum = torch.sum(child_h, dim=0, keepdim=True)
        iou = self.ioux(inputs) + self.iouh(child_h_sum)
        i, o, u = torch.split(iou, iou.size(1) // 3, dim=1)
        i, o, u = F.sigmoid(i), F.sigmoid(o), F.tanh(u)
        f = F.sigmoid(
            self.fh(child_h) +
            self.fx(inputs).repeat(len(child_h), 1)
        )
        fc = torch.mul(f, child_c)
        c = torch.mul(i, u) + torch.sum(fc, dim=0, keepdim=True)
        h = torch.mul(o, F.tanh(c))
        return c, h
    def forward(self, tree, inputs):
        for idx in range(tree.num_children):
            self.forward(tree.children[idx], inputs)
        if tree.num_children == 0:
            child_c = inputs[0].detach().new(1, self.mem_dim).fill_(0.).requires_grad_()
            child_h = inputs[0].detach().new(1, self.mem_dim).fill_(0.).requires_grad_()
        else:
            child_c, child_h = zip(* map(lambda x: x.state, tree.children))
            child_c, child_h = torch.cat(child_c, dim=0), torch.cat(child_h, dim=0)
        tree.state = self.node_forward(inputs[tree.idx].unsqueeze(0), child_c, child_h)
        return tree.state
class Similarity(nn.Module):
    def __init__(self, mem_dim, hidden_dim, num_classes):
        super(Similarity, self).__init__()
        self.mem_dim = mem_dim
        self.hidden_dim = hidden_dim
        self.num_classes = num_classes
        self.wh = nn.Linear(2 * self.mem_dim, self.hidden_dim)
        self.wp = nn.Linear(self.hidden_dim, self.num_classes)
    def forward(self, lvec, rvec):
        mult_dist = torch.mul(lvec, rvec)
        abs_dist = torch.abs(torch.add(lvec, -rvec))
        vec_dist = torch.cat((mult_dist, abs_dist), 1)
        out = F.sigmoid(self.wh(vec_dist))
        out = F.log_softmax(self.wp(out), dim=1)
        return out
class SimilarityTreeLSTM(nn.Module):
    def __init__(self, vocab_size, in_dim, mem_dim, hidden_dim, num_classes, sparsity, freeze):
        super(SimilarityTreeLSTM, self).__init__()
        self.emb = nn.Embedding(vocab_size, in_dim, padding_idx=0, sparse=sparsity)
        if freeze:
            self.emb.weight.requires_grad = False
        self.childsumtreelstm = ChildSumTreeLSTM(in_dim, mem_dim)
        self.similarity = Similarity(mem_dim, hidden_dim, num_classes)
    def forward(self, ltree, linputs, rtree, rinputs):
        linputs = self.emb(linputs)
        rinputs = self.emb(rinputs)
        lstate, lhidden = self.childsumtreelstm(ltree, linputs)
        rstate, rhidden = self.childsumtreelstm(rtree, rinputs)
        output = self.similarity(lhidden, rhidden)
        return output
def map_label_to_target(label, num_classes):
    target = torch.zeros(1, num_classes, dtype=torch.float, device='cpu')
    ceil = int(np.ceil(label))
    floor = int(np.floor(label))
    if ceil == floor:
        target[0, floor-1] = 1
    else:
        target[0, floor-1] = ceil - label
        target[0, ceil-1] = label - floor
    return target
def random_parents(r, n):
    """A random dependency tree over n words: each word's head an earlier word (0: the root)."""
    parents = [0] + [int(r.integers(1, i + 1)) for i in range(1, n)]
    order = r.permutation(n)
    rank = {int(w): k + 1 for k, w in enumerate(order)}
    out = [0] * n
    for i, p in enumerate(parents):
        out[rank[i] - 1] = rank[p - 1] if p else 0
    return out
def make_pair(r, vocab):
    nl, nr = int(r.integers(3, 7)), int(r.integers(3, 7))
    lsent, rsent = torch.from_numpy(r.integers(1, vocab, nl)), torch.from_numpy(r.integers(1, vocab, nr))
    label = 1 + 4 * float(np.isin(lsent.numpy(), rsent.numpy()).mean())
    return read_tree(random_parents(r, nl)), lsent, read_tree(random_parents(r, nr)), rsent, label
NUM_CLASSES, VOCAB = 5, 20
model = SimilarityTreeLSTM(VOCAB, 8, 8, 6, NUM_CLASSES, sparsity=False, freeze=False)
sync(model)
model.childsumtreelstm.node_forward = comp(model.childsumtreelstm.node_forward, dynamic=True)
criterion = nn.KLDivLoss(reduction='batchmean')
optimizer = torch.optim.Adagrad(filter(lambda p: p.requires_grad, model.parameters()), lr=0.05, weight_decay=1e-4)
r = np.random.default_rng(0)
dataset = [make_pair(r, VOCAB) for _ in range(4)]
LOSSES = []
model.train()
optimizer.zero_grad()
total_loss, batchsize = 0.0, 2
indices = torch.from_numpy(r.permutation(len(dataset)))
for idx in range(len(dataset)):
    ltree, linput, rtree, rinput, label = dataset[int(indices[idx])]
    target = map_label_to_target(label, NUM_CLASSES)
    output = model(ltree, linput, rtree, rinput)
    loss = criterion(output, target)
    total_loss += loss.item()
    loss.backward()
    if idx % batchsize == 0 and idx > 0:
        optimizer.step()
        optimizer.zero_grad()
    LOSSES.append(loss.item())
LOSSES.append(total_loss / len(dataset))
model.eval()
with torch.no_grad():
    indices = torch.arange(1, NUM_CLASSES + 1, dtype=torch.float, device='cpu')
    for ltree, linput, rtree, rinput, label in dataset[:2]:
        output = model(ltree, linput, rtree, rinput)
        LOSSES += [torch.dot(indices, torch.exp(output.squeeze())).item(), ltree.depth(), rtree.size()]
