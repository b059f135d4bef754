"""scaled_dot_product_attention with query rows whose every key is masked: 0 there, as
PyTorch's safe softmax, with PyTorch's gradients (no nan), eager and compiled."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("compiled", [False, True])
def test_fully_masked_rows_give_zeros_and_finite_gradients(kind, compiled):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, 4, 5)).astype(np.float32) for _ in range(3))
    allowed = np.ones((2, 1, 4, 4), bool)
    allowed[0, 0, 1] = False          # one query row of batch 0 sees no key
    allowed[1, 0, :, 2] = False
    mask = allowed if kind == "bool" else np.where(allowed, 0.0, -np.inf).astype(np.float32)
    w = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    res = []
    for lib in (torch, tj):
        ts = [lib.tensor(a, requires_grad=True) for a in (q, k, v)]

        def f(a, b, c):
            return lib.nn.functional.scaled_dot_product_attention(a, b, c, attn_mask=lib.tensor(mask))
        out = (tj.compile(f) if compiled and lib is tj else f)(*ts)
        (out * lib.tensor(w)).sum().backward()
        res.append([out.detach().numpy()] + [t.grad.numpy() for t in ts])
    assert np.all(res[1][0][0, :, 1] == 0)
    for a, b in zip(res[1], res[0]):
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("compiled", [False, True])
def test_multihead_attention_without_weights_zeroes_fully_masked_rows(batch_first, compiled):
    """need_weights=False runs PyTorch's SDPA path (safe softmax); with weights it is nan."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4) if batch_first else (3, 2, 4)).astype(np.float32)
    kpm = np.array([[False, False, True], [True, True, True]])
    attn = np.zeros((3, 3), bool)
    attn[0, :2] = True                # with kpm, query 0 of batch 0 sees no key either
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(4, 2, batch_first=batch_first)
    m = tj.nn.MultiheadAttention(4, 2, batch_first=batch_first)
    m.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    res = []
    for lib, mod in ((torch, tm), (tj, m)):
        t = lib.tensor(x, requires_grad=True)

        def f(a):
            return mod(a, a, a, key_padding_mask=lib.tensor(kpm), attn_mask=lib.tensor(attn),
                       need_weights=False)[0]
        out = (tj.compile(f) if compiled and lib is tj else f)(t)
        (out * out).sum().backward()
        res.append([out.detach().numpy(), t.grad.numpy()] + [p.grad.numpy() for p in mod.parameters()])
    for a, b in zip(res[1], res[0]):
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bool_mask_over_a_cache_matches_torch(dtype):
    """New queries against a longer cache with a bool ``tril(diagonal=S - L)`` mask (no row
    masked through), in the scores' dtype: PyTorch's values and gradients."""
    rng = np.random.default_rng(2)
    q = rng.standard_normal((1, 4, 5, 8)).astype(dtype)
    k, v = (rng.standard_normal((1, 4, 20, 8)).astype(dtype) for _ in range(2))
    res = []
    for lib in (torch, tj):
        ts = [lib.tensor(a, requires_grad=True) for a in (q, k, v)]
        mask = lib.ones(5, 20, dtype=lib.bool).tril(diagonal=15)
        out = lib.nn.functional.scaled_dot_product_attention(*ts, attn_mask=mask)
        out.square().sum().backward()
        res.append([out.detach().numpy()] + [t.grad.numpy() for t in ts])
    assert res[1][0].dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for a, b in zip(res[1], res[0]):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
