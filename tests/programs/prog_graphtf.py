from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# A Graph Transformer (Dwivedi & Bresson) as its repository writes it, the DGL message
# functions written with index ops: Laplacian positional encodings from torch.linalg.eigh of
# each graph's symmetric normalized Laplacian (the k smallest non-trivial eigenvectors, signs
# made canonical, then flipped at random in training), atom-type embeddings, attention
# restricted to the edges (scores by K[src] * Q[dst], exp(clamp(-5, 5)), sums by index_add_
# into the destinations), residuals, LayerNorm (its layer_norm configuration), a two-layer
# FFN, a mean readout by index_add_ / bincount and an MLPReadout; batches of graphs of
# changing sizes (dynamic=True), an L1 loss, Adam under ReduceLROnPlateau
def laplacian_positional_encoding(n, src, dst, pos_enc_dim):
    A = torch.zeros(n, n)
    A[src, dst] = 1.0
    deg = A.sum(1).clamp(min=1)
    N = torch.diag(deg ** -0.5)
    L = torch.eye(n) - N @ A @ N
    EigVal, EigVec = torch.linalg.eigh(L)
    if (EigVal[1:pos_enc_dim + 2].diff() < 1e-3).any():
        return None   # a symmetric graph: its eigenvectors are not unique
    EigVec = EigVec[:, 1:pos_enc_dim + 1]
    # eigenvectors are unique up to sign (LAPACK builds differ): the largest entry positive
    sign = torch.sign(EigVec.gather(0, EigVec.abs().argmax(0, keepdim=True)))
    return EigVec * sign
def random_graph(rng, pos_enc_dim):
    """A ring with random chords (connected, without symmetries); the target counts triangles."""
    while True:
        g = ring_with_chords(rng, pos_enc_dim)
        if g["lap"] is not None:
            return g
def ring_with_chords(rng, pos_enc_dim):
    n = int(rng.integers(8, 16))
    edges = {(i, (i + 1) % n) for i in range(n)}
    for _ in range(n // 2):
        a, b = rng.integers(0, n, 2)
        if a != b:
            edges.add((int(a), int(b)))
    und = sorted(edges | {(b, a) for a, b in edges})
    src = torch.tensor([a for a, _ in und]); dst = torch.tensor([b for _, b in und])
    A = np.zeros((n, n)); A[src.numpy(), dst.numpy()] = 1
    y = np.trace(A @ A @ A) / 6 / n
    feats = torch.from_numpy(rng.integers(0, 5, n))
    return dict(n=n, src=src, dst=dst, x=feats, lap=laplacian_positional_encoding(n, src, dst, pos_enc_dim), y=y)
def collate(graphs):
    offs = np.cumsum([0] + [g["n"] for g in graphs])
    src = torch.cat([g["src"] + o for g, o in zip(graphs, offs)])
    dst = torch.cat([g["dst"] + o for g, o in zip(graphs, offs)])
    batch = torch.cat([torch.full((g["n"],), i, dtype=torch.long) for i, g in enumerate(graphs)])
    return (torch.cat([g["x"] for g in graphs]), torch.cat([g["lap"] for g in graphs]), src, dst, batch,
            torch.tensor([[g["y"]] for g in graphs], dtype=torch.float32))
class MultiHeadAttentionLayer(nn.Module):
    def __init__(self, in_dim, out_dim, num_heads, use_bias):
        super().__init__()
        self.out_dim, self.num_heads = out_dim, num_heads
        self.Q = nn.Linear(in_dim, out_dim * num_heads, bias=use_bias)
        self.K = nn.Linear(in_dim, out_dim * num_heads, bias=use_bias)
        self.V = nn.Linear(in_dim, out_dim * num_heads, bias=use_bias)
    def propagate_attention(self, K_h, Q_h, V_h, src, dst, num_nodes):
        score = (K_h[src] * Q_h[dst]).sum(-1, keepdim=True)        # src_dot_dst
        score = torch.exp((score / np.sqrt(self.out_dim)).clamp(-5, 5))   # scaled_exp
        wV = torch.zeros_like(V_h).index_add_(0, dst, V_h[src] * score)
        z = score.new_zeros(num_nodes, self.num_heads, 1).index_add_(0, dst, score)
        return wV, z
    def forward(self, h, src, dst):
        Q_h = self.Q(h).view(-1, self.num_heads, self.out_dim)
        K_h = self.K(h).view(-1, self.num_heads, self.out_dim)
        V_h = self.V(h).view(-1, self.num_heads, self.out_dim)
        wV, z = self.propagate_attention(K_h, Q_h, V_h, src, dst, h.shape[0])
        return wV / (z + torch.full_like(z, 1e-6))
class GraphTransformerLayer(nn.Module):
    def __init__(self, in_dim, out_dim, num_heads, dropout=0.0, residual=True, use_bias=False):
        super().__init__()
        self.in_channels, self.out_channels, self.num_heads = in_dim, out_dim, num_heads
        self.dropout, self.residual = dropout, residual
        self.attention = MultiHeadAttentionLayer(in_dim, out_dim // num_heads, num_heads, use_bias)
        self.O = nn.Linear(out_dim, out_dim)
        self.layer_norm1 = nn.LayerNorm(out_dim)
        self.FFN_layer1 = nn.Linear(out_dim, out_dim * 2)
        self.FFN_layer2 = nn.Linear(out_dim * 2, out_dim)
        self.layer_norm2 = nn.LayerNorm(out_dim)
    def forward(self, h, src, dst):
        h_in1 = h
        attn_out = self.attention(h, src, dst)
        h = attn_out.view(-1, self.out_channels)
        h = F.dropout(h, self.dropout, training=self.training)
        h = self.O(h)
        if self.residual:
            h = h_in1 + h
        h = self.layer_norm1(h)
        h_in2 = h
        h = F.relu(self.FFN_layer1(h))
        h = F.dropout(h, self.dropout, training=self.training)
        h = self.FFN_layer2(h)
        if self.residual:
            h = h_in2 + h
        return self.layer_norm2(h)
class MLPReadout(nn.Module):
    def __init__(self, input_dim, output_dim, L=2):
        super().__init__()
        list_FC_layers = [nn.Linear(input_dim // 2 ** l, input_dim // 2 ** (l + 1), bias=True) for l in range(L)]
        list_FC_layers.append(nn.Linear(input_dim // 2 ** L, output_dim, bias=True))
        self.FC_layers = nn.ModuleList(list_FC_layers)
        self.L = L
    def forward(self, x):
        y = x
        for l in range(self.L):
            y = F.relu(self.FC_layers[l](y))
        return self.FC_layers[self.L](y)
class GraphTransformerNet(nn.Module):
    def __init__(self, num_atom_type=5, hidden_dim=32, n_heads=4, L=3, pos_enc_dim=4):
        super().__init__()
        self.embedding_lap_pos_enc = nn.Linear(pos_enc_dim, hidden_dim)
        self.embedding_h = nn.Embedding(num_atom_type, hidden_dim)
        self.layers = nn.ModuleList([GraphTransformerLayer(hidden_dim, hidden_dim, n_heads) for _ in range(L)])
        self.MLP_layer = MLPReadout(hidden_dim, 1)
    def forward(self, x, h_lap_pos_enc, src, dst, batch, num_graphs: int):
        h = self.embedding_h(x)
        h = h + self.embedding_lap_pos_enc(h_lap_pos_enc.float())
        for conv in self.layers:
            h = conv(h, src, dst)
        hg = h.new_zeros(num_graphs, h.shape[1]).index_add_(0, batch, h)     # mean_nodes
        hg = hg / torch.bincount(batch, minlength=num_graphs).unsqueeze(1).to(h.dtype)
        return self.MLP_layer(hg)
rng = np.random.default_rng(0)
pos_enc_dim = 4
train = [random_graph(rng, pos_enc_dim) for _ in range(24)]
test = [random_graph(rng, pos_enc_dim) for _ in range(6)]
model = GraphTransformerNet(pos_enc_dim=pos_enc_dim); sync(model)
net = comp(model, dynamic=True)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode='min', factor=0.5, patience=1)
LOSSES = []
for epoch in range(2):
    model.train()
    epoch_loss, order = 0.0, rng.permutation(len(train))
    for it in range(0, len(train), 8):
        x, lap, src, dst, batch, y = collate([train[i] for i in order[it:it + 8]])
        sign_flip = torch.from_numpy(rng.random(lap.size(1)).astype(np.float32))
        sign_flip[sign_flip >= 0.5] = 1.0; sign_flip[sign_flip < 0.5] = -1.0
        lap = lap * sign_flip.unsqueeze(0)
        optimizer.zero_grad()
        scores = net(x, lap, src, dst, batch, 8)
        loss = nn.L1Loss()(scores, y)
        loss.backward()
        optimizer.step()
        epoch_loss += loss.detach().item()
        LOSSES.append(loss.item())
    scheduler.step(epoch_loss)
model.eval()
with torch.no_grad():
    x, lap, src, dst, batch, y = collate(test)
    mae = F.l1_loss(net(x, lap, src, dst, batch, len(test)), y)
LOSSES += [mae.item(), optimizer.param_groups[0]['lr']]
