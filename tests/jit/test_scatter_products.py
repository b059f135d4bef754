"""An embedding's two gradients through the product after it, taken on the table's rows where
it has few (jit/scatter_products.py): ``index_add(zeros(V, O), views(G @ W), idx)`` as
``index_add(zeros(V, K), views(G), idx) @ W`` and ``G^T @ views(E[idx])`` as that sum's
transpose times E. Values as the products' rows added one by one, the rewrites only where
they apply, and an embedding + LSTM model's compiled gradients equal to eager ones."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn as nn
import tracejit.nn.functional as F
from tracejit.jit import passes
from tracejit.jit.interpreter import interpret
from tracejit.ops.indexing import index_add_
from inputs import captured_graph, op_names, training_variant

M0, M1, K, O = 6, 8, 40, 24          # G (M0*M1, K), W (K, O)


def _data(V, seed=0):
    r = np.random.default_rng(seed)
    g = r.standard_normal((M0 * M1, K)).astype(np.float32)
    w = r.standard_normal((K, O)).astype(np.float32)
    idx = r.integers(0, V, (M1, M0))
    return g, w, idx


def _scatter(V, base_value=0.0):
    def f(g, w, idx):
        d = (g @ w).reshape(M0, M1, O).permute(1, 0, 2)   # an embedding's gradient: (M1, M0, O)
        return index_add_(tj.full((V, O), base_value), d, (idx,), (("t", 0),))
    return f


def _want(V, g, w, idx, base_value=0.0):
    d = (g.astype(np.float64) @ w).reshape(M0, M1, O).transpose(1, 0, 2)
    out = np.full((V, O), base_value)
    np.add.at(out, idx, d)
    return out


def _products(graph) -> list:
    return [tuple(e.inputs[0].aval.shape) + tuple(e.inputs[1].aval.shape[1:])
            for e in graph.eqns if e.prim.name == "matmul"]


def test_few_rows_sum_before_the_product():
    V = 5
    g, w, idx = _data(V)
    graph = passes.optimize(captured_graph(_scatter(V), tj.tensor(g), tj.tensor(w), tj.tensor(idx)))
    assert _products(graph) == [(V, K, O)], graph.text(with_locations=False)
    assert op_names(graph).count("index_add") == 1
    got = interpret(graph, [tj.tensor(g), tj.tensor(w), tj.tensor(idx)])[0].numpy()
    np.testing.assert_allclose(got, _want(V, g, w, idx), rtol=2e-5, atol=2e-5)
    # compiled the same
    got_c = tj.trace(_scatter(V))(tj.tensor(g), tj.tensor(w), tj.tensor(idx)).numpy()
    np.testing.assert_allclose(got_c, _want(V, g, w, idx), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("V, base", [(30, 0.0), (5, 1.0)], ids=["many-rows", "nonzero-table"])
def test_left_alone_where_it_does_not_apply(V, base):
    # a table with as many rows as half the product's (no saving), or one that is not zero
    g, w, idx = _data(V, seed=1)
    graph = passes.optimize(captured_graph(_scatter(V, base), tj.tensor(g), tj.tensor(w), tj.tensor(idx)))
    assert _products(graph) == [(M0 * M1, K, O)]
    got = interpret(graph, [tj.tensor(g), tj.tensor(w), tj.tensor(idx)])[0].numpy()
    np.testing.assert_allclose(got, _want(V, g, w, idx, base), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_embedding_lstm_model_gradients_compiled_equal_eager(bidirectional):
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(7, 32)
            self.rnn = nn.LSTM(32, 32, num_layers=2, batch_first=True, bidirectional=bidirectional)
            self.head = nn.Linear(64 if bidirectional else 32, 7)

        def forward(self, tokens):
            out, _ = self.rnn(self.emb(tokens))
            return self.head(out).reshape(-1, 7)

    tj.manual_seed(0)
    net = LM()
    tokens = tj.tensor(np.random.default_rng(3).integers(0, 7, (4, 12)))
    target = tj.tensor(np.random.default_rng(4).integers(0, 7, 48))
    F.cross_entropy(net(tokens), target).backward()
    want = {k: p.grad.numpy().copy() for k, p in net.named_parameters()}
    net.zero_grad()
    cf = tj.script(lambda t: net(t))
    F.cross_entropy(cf(tokens), target).backward()
    for k, p in net.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), want[k], rtol=1e-4, atol=1e-6, err_msg=k)
    # the embedding's rows are summed once (one index_add) before the first layer's input
    # product (7, 128) @ (128, 32) and its weight's (128, 7) @ (7, 32); the (48, 128) @
    # (128, 32) input gradient and (128, 48) @ (48, 32) weight gradient left are the second
    # layer's
    _, bwd, _ = training_variant(cf)
    shapes = _products(bwd.graph)
    if bidirectional:
        # the two directions' input gradients are added before the embedding's index_add (no
        # rewrite there); each direction's first-layer weight gradient is on the table's rows
        assert shapes.count((128, 7, 32)) == 2 and (128, 48, 32) not in shapes, shapes
        return
    assert (7, 128, 32) in shapes and shapes.count((48, 128, 32)) == 1, shapes
    assert (128, 7, 32) in shapes and shapes.count((128, 48, 32)) == 1, shapes
    assert op_names(bwd.graph).count("index_add") == 1


@pytest.mark.parametrize("V", [5, 30])
def test_weight_gradient_of_gathered_rows(V):
    # loss = sum((E[idx] viewed as rows) @ W^T * R): W's gradient is G^T @ rows with G = R
    r = np.random.default_rng(5)
    e = r.standard_normal((V, O)).astype(np.float32)
    w = r.standard_normal((K, O)).astype(np.float32)
    rr = r.standard_normal((M0 * M1, K)).astype(np.float32)
    idx = r.integers(-V, V, (M1, M0))         # negative rows too

    def loss(e, w, idx, rr):
        x = e[idx].permute(1, 0, 2).reshape(M0 * M1, O)
        return (x @ w.T * rr).sum()

    E, Wt = tj.tensor(e), tj.tensor(w, requires_grad=True)
    loss(E, Wt, tj.tensor(idx), tj.tensor(rr)).backward()
    want = Wt.grad.numpy().copy()
    x64 = e.astype(np.float64)[idx].transpose(1, 0, 2).reshape(M0 * M1, O)
    np.testing.assert_allclose(want, rr.T.astype(np.float64) @ x64, rtol=1e-4, atol=1e-4)
    Wt.grad = None
    cf = tj.trace(loss)
    cf(E, Wt, tj.tensor(idx), tj.tensor(rr)).backward()
    np.testing.assert_allclose(Wt.grad.numpy(), want, rtol=1e-4, atol=1e-4)
    fwd = training_variant(cf)[0]        # a loss: its gradients come with the forward
    shapes = _products(fwd.graph)
    if V == 5:      # the rows summed per table row first: (K, V) @ (V, O)
        assert (K, V, O) in shapes and (K, M0 * M1, O) not in shapes, shapes
    else:           # no saving: the product over the tokens' rows
        assert (K, M0 * M1, O) in shapes, shapes
