"""Wide elementwise groups cut into parts of bounded operand count (compiler/groupsplit.py).

The values of every program are checked against eager and the IR interpreter, with the
bound set low enough that the programs' groups are cut, and every cut plan is checked to
be a valid schedule whose groups respect the bound.
"""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler import groupsplit
from tracejit.compiler.fusion import Group, partition
from differential import assert_compiled_matches, assert_valid_partition
from inputs import T, gelu

pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _plans(cf):
    prog = cf._entries[-1].executor
    (train,) = prog._train.values()
    return train[:2]


def _groups(plan):
    return [it for it in plan.items if isinstance(it, Group)]


def _recurrence(a, b, c):
    """A cell state carried through elementwise steps only: one group of every step's
    gates, as a recurrent cell's backward recomputes them."""
    hs = []
    for t in range(a.shape[0]):
        c = tj.sigmoid(a[t]) * c + tj.sigmoid(b[t]) * tj.tanh(a[t] - b[t])
        hs.append(tj.tanh(c) * tj.sigmoid(b[t]))
    return tj.stack(hs), c


def _operands(g):
    return len(g.inputs) + len(g.outputs)


def test_recurrence_cut_at_the_bound_matches_eager(monkeypatch):
    monkeypatch.setattr(groupsplit, "MAX_OPERANDS", 8)
    a, b, c = T(12, 5, 6, seed=1), T(12, 5, 6, seed=2), T(5, 6, seed=3)
    cf = assert_compiled_matches(_recurrence, a, b, c)
    for plan in _plans(cf):
        assert_valid_partition(plan.items, plan.graph)
        groups = _groups(plan)
        assert all(_operands(g) <= 8 or len(g.eqns) == 1 for g in groups if not g.rows and g.reduction is None)
    # uncut, the forward's chain is one group of far more operands
    fwd = _plans(cf)[0]
    whole = [g for g in partition(fwd.graph) if isinstance(g, Group)]
    assert max(_operands(g) for g in whole) > 8
    assert len(_groups(fwd)) > len(whole)


def test_gelu_cut_into_single_equations_matches_eager(monkeypatch):
    """A bound of 2 cuts every group down to parts of one equation (or two where a value
    stays inside), and the values still agree."""
    monkeypatch.setattr(groupsplit, "MAX_OPERANDS", 2)
    x, y, z = T(64, seed=1), T(64, seed=2), T(64, seed=3)
    cf = assert_compiled_matches(gelu, x, y, z)
    fwd, bwd = _plans(cf)
    for plan in (fwd, bwd):
        assert_valid_partition(plan.items, plan.graph)
    assert len(_groups(fwd)) >= 5


def test_split_keeps_every_equation_once_and_orders_parts():
    a, b, c = T(12, 5, 6, seed=1), T(12, 5, 6, seed=2), T(5, 6, seed=3)
    cf = tj.trace(_recurrence, compiler="interpret")
    cf(a, b, c)
    g = cf._entries[-1].opt_graph
    items = partition(g)
    cut = groupsplit.split_wide_groups(items, g, max_operands=6)
    assert_valid_partition(cut, g)
    eqns = [e for it in cut for e in (it.members if isinstance(it, Group) else [it])]
    assert sorted(map(id, eqns)) == sorted(id(e) for e in g.eqns)
    gids = [it.gid for it in cut if isinstance(it, Group)]
    assert len(set(gids)) == len(gids)
    # a group within the bound is left as it was
    assert groupsplit.split_wide_groups(items, g, max_operands=10_000) == items


def test_lstm_cells_stepped_compiled_match_pytorch():
    """Two LSTMCells stepped over a sequence, compiled (the backward recomputes every
    step's gates: the widest groups), against PyTorch with the same weights."""
    torch = pytest.importorskip("torch")

    def build(nn):
        return nn.LSTMCell(3, 8), nn.LSTMCell(8, 8)

    t_cells = build(torch.nn)
    j_cells = build(tj.nn)
    for t_cell, j_cell in zip(t_cells, j_cells):
        t_cell.double()
        j_cell.double()
        j_cell.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in t_cell.state_dict().items()})

    def run(lib, cells, x):
        h1 = c1 = h2 = c2 = lib.zeros(x.shape[0], 8, dtype=lib.float64)
        outs = []
        for t in range(x.shape[1]):
            h1, c1 = cells[0](x[:, t], (h1, c1))
            h2, c2 = cells[1](h1, (h2, c2))
            outs.append(h2)
        return lib.stack(outs, 1)

    x = np.random.default_rng(0).standard_normal((4, 30, 3))
    w = np.random.default_rng(1).standard_normal((4, 30, 8))
    (run(torch, t_cells, torch.tensor(x)) * torch.tensor(w)).sum().backward()
    step = tj.compile(lambda x: run(tj, j_cells, x))
    for _ in range(2):
        for cell in j_cells:
            cell.zero_grad()
        out = step(tj.tensor(x))
        (out * tj.tensor(w)).sum().backward()
        np.testing.assert_allclose(out.detach().numpy(), run(torch, t_cells, torch.tensor(x)).detach().numpy(),
                                   rtol=1e-10, atol=1e-12)
        for t_cell, j_cell in zip(t_cells, j_cells):
            j_params = dict(j_cell.named_parameters())
            for name, p in t_cell.named_parameters():
                np.testing.assert_allclose(j_params[name].grad.numpy(), p.grad.numpy(),
                                           rtol=1e-9, atol=1e-11, err_msg=name)
