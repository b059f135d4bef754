"""Adafactor, Muon and SparseAdam: steps on the same parameters and loss give PyTorch's
parameters (float32 and float64, several groups), state_dict round trips, argument errors."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")


def _run(lib, name, shapes, kws, dtype, steps=6, split_at=None):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s) for s in shapes]
    ps = [lib.tensor(x.copy(), dtype=getattr(lib, dtype), requires_grad=True) for x in xs]
    groups = [dict(params=[p], **kw) for p, kw in zip(ps, kws)]
    opt = getattr(lib.optim, name)(groups)
    for _ in range(steps):
        opt.zero_grad()
        sum((((p - 0.3) ** 3).sum() + (p * p).sum()) for p in ps).backward()
        opt.step()
    return [p.detach().numpy() for p in ps], opt


ADAFACTOR = [dict(lr=0.05), dict(lr=0.02, weight_decay=0.1), dict(lr=0.3, maximize=True, d=2.0)]


@pytest.mark.parametrize("dtype, tol", [("float64", 1e-10), ("float32", 1e-5)])
def test_adafactor_matches_torch(dtype, tol):
    shapes = [(4, 5), (6,), (2, 3, 4)]
    want, _ = _run(torch, "Adafactor", shapes, ADAFACTOR, dtype)
    got, _ = _run(tj, "Adafactor", shapes, ADAFACTOR, dtype)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)



def test_adafactor_steps_bfloat16_parameters_as_torch():
    rng = np.random.default_rng(0)
    x0 = [rng.standard_normal(s).astype(np.float32) for s in [(4, 5), (6,)]]
    grads = [[rng.standard_normal(x.shape).astype(np.float32) for x in x0] for _ in range(4)]
    out = {}
    for lib in (torch, tj):
        ps = [lib.tensor(x).to(lib.bfloat16).requires_grad_() for x in x0]
        opt = lib.optim.Adafactor([dict(params=[ps[0]], lr=0.05, weight_decay=0.1), dict(params=[ps[1]], lr=0.05)])
        for gs in grads:
            for p, g in zip(ps, gs):
                p.grad = lib.tensor(g).to(lib.bfloat16)
            opt.step()
        assert all(p.dtype == lib.bfloat16 for p in ps)
        out[lib] = [p.detach().float().numpy() for p in ps]
    for g, w, x in zip(out[tj], out[torch], x0):
        assert np.abs(w - x).max() > 0.05
        np.testing.assert_allclose(g, w, atol=2 ** -7 * np.abs(w).max())   # (one bfloat16 rounding apart)

MUON = [dict(lr=0.02), dict(lr=0.05, nesterov=False, weight_decay=0.01),
        dict(lr=0.03, adjust_lr_fn="match_rms_adamw", momentum=0.9)]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_muon_matches_torch_to_bfloat16(dtype):
    shapes = [(6, 4), (3, 5), (5, 5)]
    x0 = [np.random.default_rng(0).standard_normal(s) for s in shapes]
    want, _ = _run(torch, "Muon", shapes, MUON, dtype, steps=4)
    got, _ = _run(tj, "Muon", shapes, MUON, dtype, steps=4)
    for g, w, x, kw in zip(got, want, x0, MUON):
        moved = np.abs(w - x).max()
        assert moved > 0.01
        # the orthogonalized update is bfloat16 (8 mantissa bits), as in PyTorch
        np.testing.assert_allclose(g, w, atol=0.02 * moved)



def test_muon_steps_bfloat16_parameters_as_torch():
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((5, 4)).astype(np.float32)
    grads = [rng.standard_normal((5, 4)).astype(np.float32) for _ in range(3)]
    out = {}
    for lib in (torch, tj):
        p = lib.tensor(x0).to(lib.bfloat16).requires_grad_()
        opt = lib.optim.Muon([p], lr=0.02)
        for g in grads:
            p.grad = lib.tensor(g).to(lib.bfloat16)
            opt.step()
        assert p.dtype == lib.bfloat16 and opt.state[p]["momentum_buffer"].dtype == lib.bfloat16
        out[lib] = p.detach().float().numpy()
    assert np.abs(out[torch] - x0).max() > 0.03
    np.testing.assert_allclose(out[tj], out[torch], atol=2 ** -7 * np.abs(out[torch]).max())

def test_muon_orthogonalizes():
    from tracejit.optim.factored import _orthogonalize
    g = np.random.default_rng(1).standard_normal((8, 5)).astype(np.float32)
    o = _orthogonalize(np, g, (3.4445, -4.7750, 2.0315), 5, 1e-7)
    s = np.linalg.svd(o, compute_uv=False)
    assert o.shape == (8, 5) and 0.5 < s.min() and s.max() < 1.5


SPARSE = [dict(lr=0.05), dict(lr=0.1, betas=(0.8, 0.99), maximize=True)]


@pytest.mark.parametrize("dtype, tol", [("float64", 1e-12), ("float32", 1e-6)])
def test_sparse_adam_embedding_matches_torch(dtype, tol):
    w0 = np.random.default_rng(2).standard_normal((10, 3))
    batches = [[1, 4, 4, 7], [0, 1, 9], [4, 5]]
    out = []
    for lib in (torch, tj):
        # tracejit's Embedding has no `sparse` flag: its gradient is the dense one
        kw = dict(sparse=True) if lib is torch else {}
        emb = lib.nn.Embedding(10, 3, **kw).to(getattr(lib, dtype))
        emb2 = lib.nn.Embedding(10, 3, **kw).to(getattr(lib, dtype))
        with lib.no_grad():
            emb.weight.copy_(lib.tensor(w0))
            emb2.weight.copy_(lib.tensor(w0[::-1].copy()))
        opt = lib.optim.SparseAdam([dict(params=emb.parameters(), **SPARSE[0]),
                                    dict(params=emb2.parameters(), **SPARSE[1])])
        for idx in batches:
            opt.zero_grad()
            i = lib.tensor(idx)
            ((emb(i) - 0.5) ** 2).sum().add((emb2(i) ** 3).sum()).backward()
            opt.step()
        out.append((emb.weight.detach().numpy().copy(), emb2.weight.detach().numpy().copy()))
    for g, w in zip(out[1], out[0]):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    untouched = [2, 3, 6, 8]
    np.testing.assert_array_equal(out[1][0][untouched], w0[untouched].astype(dtype))


def test_sparse_adam_steps_bfloat16_parameters_as_torch():
    w0 = np.random.default_rng(3).standard_normal((10, 3)).astype(np.float32)
    out = []
    for lib in (torch, tj):
        kw = dict(sparse=True) if lib is torch else {}
        emb = lib.nn.Embedding(10, 3, **kw)
        with lib.no_grad():
            emb.weight.copy_(lib.tensor(w0))
        emb = emb.to(lib.bfloat16)
        opt = lib.optim.SparseAdam(emb.parameters(), lr=0.1, maximize=True)
        for idx in ([1, 4, 4, 7], [0, 1, 9]):
            opt.zero_grad()
            emb(lib.tensor(idx)).float().pow(2).sum().backward()
            opt.step()
        assert emb.weight.dtype == lib.bfloat16 and opt.state[emb.weight]["exp_avg"].dtype == lib.bfloat16
        out.append(emb.weight.detach().float().numpy())
    np.testing.assert_allclose(out[1], out[0], atol=2 ** -7 * np.abs(out[0]).max())   # (one bfloat16 rounding)
    untouched = [2, 3, 5, 6, 8]
    np.testing.assert_array_equal(out[1][untouched], out[0][untouched])


@pytest.mark.parametrize("name, kws, shapes", [
    ("Adafactor", ADAFACTOR[:2], [(4, 5), (6,)]), ("Muon", MUON[:2], [(6, 4), (3, 5)]),
    ("SparseAdam", SPARSE, [(5, 2), (4,)])])
def test_state_dict_round_trip(name, kws, shapes):
    ref, _ = _run(tj, name, shapes, kws, "float64", steps=6)
    _, opt = _run(tj, name, shapes, kws, "float64", steps=3)
    sd = opt.state_dict()
    ps = [p for g in opt.param_groups for p in g["params"]]
    fresh = getattr(tj.optim, name)([dict(params=[p], **kw) for p, kw in zip(ps, kws)])
    fresh.load_state_dict(sd)
    for _ in range(3):
        fresh.zero_grad()
        sum((((p - 0.3) ** 3).sum() + (p * p).sum()) for p in ps).backward()
        fresh.step()
    for p, r in zip(ps, ref):
        np.testing.assert_allclose(p.detach().numpy(), r, rtol=1e-12, atol=1e-12)
    assert sorted(sd["state"][0]) == sorted(
        {"Adafactor": ["step", "row_var", "col_var"], "Muon": ["momentum_buffer"],
         "SparseAdam": ["step", "exp_avg", "exp_avg_sq"]}[name])


def test_adafactor_rejects_bad_factored_state():
    p = tj.zeros(3, 4, requires_grad=True)
    opt = tj.optim.Adafactor([p])
    sd = {"state": {0: {"step": 1, "row_var": tj.zeros(3, 4), "col_var": tj.zeros(1, 4)}},
          "param_groups": opt.state_dict()["param_groups"]}
    with pytest.raises(ValueError, match="row_var"):
        opt.load_state_dict(sd)


@pytest.mark.parametrize("name, kw, word", [
    ("Adafactor", dict(lr=-1.0), "lr"), ("Adafactor", dict(beta2_decay=0.5), "beta2_decay"),
    ("Adafactor", dict(eps=(-1.0, 1e-3)), "eps"), ("Adafactor", dict(eps=(None, -1.0)), "eps"),
    ("Adafactor", dict(d=0.5), "d"), ("Adafactor", dict(weight_decay=-0.1), "weight_decay"),
    ("Muon", dict(lr=-1.0), "lr"), ("Muon", dict(momentum=-0.5), "momentum"),
    ("Muon", dict(weight_decay=-1.0), "weight_decay"), ("Muon", dict(adjust_lr_fn="x"), "adjust_lr_fn"),
    ("Muon", dict(ns_steps=100), "ns_steps"), ("Muon", dict(ns_coefficients=(1, 2)), "ns_coefficients"),
    ("SparseAdam", dict(lr=0.0), "lr"), ("SparseAdam", dict(eps=0.0), "eps"),
    ("SparseAdam", dict(betas=(1.0, 0.9)), "index 0"), ("SparseAdam", dict(betas=(0.9, -0.1)), "index 1")])
def test_bad_arguments_name_the_argument(name, kw, word):
    p = tj.zeros(3, 4, requires_grad=True)
    with pytest.raises(ValueError, match=word):
        getattr(tj.optim, name)([p], **kw)


def test_muon_rejects_non_matrix():
    with pytest.raises(ValueError, match="2D"):
        tj.optim.Muon([tj.zeros(3, requires_grad=True)])
    opt = tj.optim.Muon([tj.zeros(3, 2, requires_grad=True)])
    with pytest.raises(ValueError, match="2D"):
        opt.add_param_group({"params": [tj.zeros(2, 2, 2, requires_grad=True)]})


def test_defaults_match_torch():
    for name in ("Adafactor", "Muon", "SparseAdam"):
        a = getattr(torch.optim, name)([torch.zeros(2, 2, requires_grad=True)]).defaults
        b = getattr(tj.optim, name)([tj.zeros(2, 2, requires_grad=True)]).defaults
        assert {k: v for k, v in b.items() if k in a} == a, name
