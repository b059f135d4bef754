"""Self-attention's weights and context as one plan step (compiler/attnpair.py): a compiled
self-attention runs `attention_weights` and the `attention_context` reading its weights as
one `AttentionPair` step; results and gradients are those of the two primitives (bitwise:
the same products and softmax rows), with masks, both token layouts and returned weights."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit import nn
from tracejit.compiler import attnpair
from tracejit.compiler.attnpair import AttentionBackwardSum, AttentionPair
from tracejit.compiler.cpu.kernels import attention_kernels as AK
from tracejit.ops import attention_prim as AP
from inputs import training_variant

pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")
E, H, N, T = 16, 4, 3, 6


def _run(batch_first, paired, kw, dtype, sums=False, monkeypatch=None):
    """(output, returned weights or None, input grad, parameter grads, the forward plan);
    `sums`: the backward's bias gradient in the backward's pass (`AttentionBackwardSum`)."""
    rng = np.random.default_rng(0)
    tj.manual_seed(0)
    m = nn.MultiheadAttention(E, H, batch_first=batch_first).to(dtype=getattr(tj, dtype))
    x = tj.tensor(rng.standard_normal((N, T, E) if batch_first else (T, N, E)).astype(dtype), requires_grad=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRACEJIT_ATTENTION_PAIR", "1" if paired else "0")
        mp.setenv("TRACEJIT_ATTENTION_BACKWARD_SUMS", "1" if sums else "0")
        f = tj.trace(lambda x: m(x, x, x, **kw))
        out, w = f(x)
        loss = (out * out).sum() + (0 if w is None else (w * w).sum())
        loss.backward()
    grads = [(name, p.grad.numpy()) for name, p in m.named_parameters()]
    fwd, bwd = training_variant(f)[:2]
    return out.detach().numpy(), None if w is None else w.detach().numpy(), x.grad.numpy(), grads, fwd, bwd


MASKS = {
    "plain": {"need_weights": False},
    "weights_returned": {"average_attn_weights": False},
    "float_mask": {"attn_mask": np.random.default_rng(1).standard_normal((T, T)), "need_weights": False},
    "key_padding": {"key_padding_mask": np.array([[0] * 5 + [1], [0] * 6, [0, 0, 0, 1, 1, 1]], bool),
                    "need_weights": False},
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("call", list(MASKS))
@pytest.mark.parametrize("batch_first", [True, False])
def test_pair_is_one_step_with_the_two_primitives_results(batch_first, call, dtype):
    kw = {k: tj.tensor(v.astype(dtype) if v.dtype.kind == "f" else v) if isinstance(v, np.ndarray) else v
          for k, v in MASKS[call].items()}
    got = _run(batch_first, True, kw, dtype)
    want = _run(batch_first, False, kw, dtype)
    steps = [it for it in got[4].items if isinstance(it, AttentionPair)]
    assert len(steps) == 1, got[4].describe()
    assert not any(isinstance(it, AttentionPair) for it in want[4].items)
    names = [getattr(getattr(it, "prim", None), "name", None) for it in got[4].items]
    assert "attention_weights" not in names and "attention_context" not in names
    for a, b in zip(got[:3], want[:3]):
        if b is not None:
            np.testing.assert_array_equal(a, b)
    for (_, a), (_, b) in zip(got[3], want[3]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("call", ["plain", "float_mask"])
@pytest.mark.parametrize("batch_first", [True, False])
def test_backward_and_its_bias_sum_are_one_step(batch_first, call, dtype):
    """With `BACKWARD_SUMS` the backward's packed gradient and the in-projection's bias
    gradient (its sum over rows) are one `AttentionBackwardSum` step: every other result and
    gradient is bitwise the unpaired plan's, the bias gradient equal to the dtype's rounding."""
    kw = {k: tj.tensor(v.astype(dtype)) if isinstance(v, np.ndarray) else v for k, v in MASKS[call].items()}
    got = _run(batch_first, True, kw, dtype, sums=True)
    want = _run(batch_first, False, kw, dtype)
    steps = [it for it in got[5].items if isinstance(it, AttentionBackwardSum)]
    assert len(steps) == 1, got[5].describe()
    assert "attention_backward + its sum over rows" in got[5].describe()
    names = [getattr(getattr(it, "prim", None), "name", None) for it in got[5].items]
    assert "attention_backward" not in names
    assert not any(isinstance(it, AttentionBackwardSum) for it in want[5].items)
    for a, b in zip(got[:3], want[:3]):
        if b is not None:
            np.testing.assert_array_equal(a, b)
    tol = 2e-6 if dtype == "float32" else 1e-13
    for (name, a), (_, b) in zip(got[3], want[3]):
        if name == "in_proj_bias":
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol * np.abs(b).max())
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)


@pytest.mark.parametrize("seq_first", [False, True])
@pytest.mark.parametrize("mask", [None, (1, 1, T, T), (N, 1, 1, T)])
@pytest.mark.parametrize("kernel", [True, False])
def test_weights_and_context_is_the_two_impls(monkeypatch, seq_first, mask, kernel):
    rng = np.random.default_rng(2)
    qkv = rng.standard_normal((N * T, 3 * E)).astype(np.float32)
    args = () if mask is None else (rng.standard_normal(mask).astype(np.float32),)
    if not kernel:   # the numpy form (other array modules, dtypes, or the kernel compiling)
        monkeypatch.setattr(AK, "softmax_kernel", lambda *a: None)
        monkeypatch.setattr(AK, "_forward_part_kernel", lambda *a: None)
    kw = dict(tokens=(T, N) if seq_first else (N, T), heads=H, seq_first=seq_first, scale=0.5)
    w, ctx = AK.weights_and_context(np, qkv, *args, **kw)
    w0 = AP.ATTENTION_WEIGHTS.run(np, qkv, *args, **kw)
    np.testing.assert_array_equal(w, w0)
    np.testing.assert_array_equal(ctx, AP.ATTENTION_CONTEXT.run(np, qkv, w0, **kw))
    # against numpy's definition
    p = qkv.reshape(kw["tokens"] + (3, H, E // H))
    q, k, v = (p[:, :, i].transpose((1, 2, 0, 3) if seq_first else (0, 2, 1, 3)) for i in range(3))
    s = q @ np.swapaxes(k, -1, -2) * np.float32(0.5) + (args[0] if args else 0)
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(w, e / e.sum(-1, keepdims=True), rtol=2e-5, atol=1e-6)
    o = (w @ v).transpose((2, 0, 1, 3) if seq_first else (0, 2, 1, 3)).reshape(kw["tokens"] + (E,))
    np.testing.assert_allclose(ctx, o, rtol=2e-5, atol=1e-6)


def test_pair_needs_the_same_qkv_and_parameters():
    """A context on weights of another projection, or with another scale, keeps its step."""
    rng = np.random.default_rng(3)
    a, b = (tj.tensor(rng.standard_normal((N * T, 3 * E))) for _ in range(2))
    kw = dict(tokens=(N, T), heads=H, seq_first=False, scale=0.5)

    def f(a, b):
        w = AP.attention_weights(a, **kw)
        return AP.attention_context(b, w, **kw), AP.attention_context(a, w, **(kw | {"scale": 0.25}))

    def g(a, b):
        w = AP.attention_weights(a, **kw)
        return AP.attention_context(a, w, **kw), AP.attention_context(a, w, **kw)
    for fn, pairs in ((f, 0), (g, 1)):
        cf = tj.trace(fn)
        outs = cf(a, b)
        plan = cf._entries[-1].executor._infer
        assert sum(isinstance(it, AttentionPair) for it in plan.items) == pairs, plan.describe()
        for o, w_ in zip(outs, fn(a, b)):
            np.testing.assert_array_equal(o.numpy(), w_.numpy())
