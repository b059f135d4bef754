"""attention_context / attention_backward (ops/attention_prim.py, and the CPU's forms in
compiler/cpu/kernels/attention_kernels.py): self-attention's context
from the packed q/k/v projection, whose backward writes dq, dk, dv into one packed buffer.
Checked against PyTorch (weights copied by state_dict name, float64): values, first
derivatives, second derivatives (create_graph), masks, returned weights; the fallbacks
(a learned mask, dropout) and the primitive against its numpy definition."""
import numpy as np
import pytest

import tracejit as tj
from tracejit import nn
from tracejit.compiler.cpu.kernels import attention_kernels as AK
from tracejit.ops import attention_prim as AP

torch = pytest.importorskip("torch", reason="compares with PyTorch")

pytestmark = pytest.mark.usefixtures("float64_with_torch")
R = np.random.default_rng(3)
E, H, N, T = 8, 2, 3, 5


def _pair(batch_first):
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(E, H, batch_first=batch_first)
    jm = nn.MultiheadAttention(E, H, batch_first=batch_first)
    jm.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    return tm, jm


def _node_names(t):
    seen, todo, names = set(), [t.grad_fn], []
    while todo:
        n = todo.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        names.append(type(n).__name__ if not hasattr(n, "name") else n.name())
        todo += [nx for nx, _ in n.next_functions]
    return names


def _close(a, b, **kw):
    np.testing.assert_allclose(a, b, **({"rtol": 1e-8, "atol": 1e-10} | kw))


CALLS = {
    "plain": {"need_weights": False},
    "weights_averaged": {},
    "weights_per_head": {"average_attn_weights": False},
    "key_padding_mask": {"key_padding_mask": np.array([[0, 0, 0, 1, 1], [0] * 5, [0, 0, 0, 0, 1]], bool),
                         "need_weights": False},
    "float_mask_no_grad": {"attn_mask": R.standard_normal((T, T)), "need_weights": False},
}


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("batch_first", [True, False])
def test_self_attention_matches_torch_with_one_packed_gradient(batch_first, call):
    tm, jm = _pair(batch_first)
    x = R.standard_normal((N, T, E) if batch_first else (T, N, E))
    kw = CALLS[call]
    tk = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    jk = {k: tj.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    to, tw = tm(tx, tx, tx, **tk)
    jo, jw = jm(jx, jx, jx, **jk)
    assert "AttentionBackward0" in _node_names(jo)
    _close(jo.detach().numpy(), to.detach().numpy())
    go = R.standard_normal(to.shape)
    tl, jl = (to * torch.tensor(go)).sum(), (jo * tj.tensor(go)).sum()
    if tw is not None:           # the returned weights' gradient goes through their own graph
        gw = R.standard_normal(tw.shape)
        _close(jw.detach().numpy(), tw.detach().numpy())
        tl, jl = tl + (tw * torch.tensor(gw)).sum(), jl + (jw * tj.tensor(gw)).sum()
    tl.backward()
    jl.backward()
    _close(jx.grad.numpy(), tx.grad.numpy())
    jp = dict(jm.named_parameters())
    for name, p in tm.named_parameters():
        _close(jp[name].grad.numpy(), p.grad.numpy(), err_msg=name)


def test_unbatched_self_attention():
    tm, jm = _pair(False)
    x = R.standard_normal((T, E))
    tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    to, jo = tm(tx, tx, tx)[0], jm(jx, jx, jx)[0]      # (three unsqueezes: the composite path)
    _close(jo.detach().numpy(), to.detach().numpy())
    to.pow(2).sum().backward()
    jo.pow(2).sum().backward()
    _close(jx.grad.numpy(), tx.grad.numpy())


def test_learned_mask_and_dropout_take_the_composite_path():
    # a mask needing a gradient gets it only through the weights' graph: no attention_context
    tm, jm = _pair(True)
    x, m = R.standard_normal((N, T, E)), R.standard_normal((T, T))
    tmask, jmask = torch.tensor(m, requires_grad=True), tj.tensor(m, requires_grad=True)
    tx, jx = torch.tensor(x), tj.tensor(x)
    to = tm(tx, tx, tx, attn_mask=tmask, need_weights=False)[0]
    jo = jm(jx, jx, jx, attn_mask=jmask, need_weights=False)[0]
    assert "AttentionBackward0" not in _node_names(jo)
    to.pow(2).sum().backward()
    jo.pow(2).sum().backward()
    _close(jmask.grad.numpy(), tmask.grad.numpy())
    drop = nn.MultiheadAttention(E, H, dropout=0.5, batch_first=True)
    y = drop(jx, jx, jx, need_weights=False)[0]
    assert "AttentionBackward0" not in _node_names(y)


@pytest.mark.parametrize("batch_first", [True, False])
def test_second_derivatives_match_torch(batch_first):
    """attention_backward's own VJP: d/dtheta of |d loss / dx|^2, with the returned weights
    in the loss too (their graph carries the weights' dependence on q and k)."""
    tm, jm = _pair(batch_first)
    x = R.standard_normal((N, T, E) if batch_first else (T, N, E))
    gw = R.standard_normal((N, T, T))
    res = []
    for lib, m in ((torch, tm), (tj, jm)):
        xt = lib.tensor(x, requires_grad=True)
        out, w = m(xt, xt, xt)
        loss = out.pow(2).sum() + (w * lib.tensor(gw)).sum()
        (gx,) = (torch.autograd.grad if lib is torch else tj.autograd.grad)(loss, [xt], create_graph=True)
        gx.pow(2).sum().backward()
        res.append((xt.grad.numpy(), {n: p.grad.numpy() for n, p in m.named_parameters()}))
    (tgx, tgp), (jgx, jgp) = res
    _close(jgx, tgx, rtol=1e-7)
    for name in tgp:
        _close(jgp[name], tgp[name], rtol=1e-7, err_msg=name)


@pytest.fixture(params=["at once", "split"])
def batch_split(request):
    """"split": every batch split forced over 3 shares (conftest.py `forced_split`)."""
    if request.param == "split":
        return request.param, request.getfixturevalue("forced_split")
    return request.param, []


def _against_definition(n, t, e, h, seq_first):
    """attention_context, attention_backward and the weights kernel of a random packed
    projection against numpy's definition (scale 0.3)."""
    a, c = (t, n) if seq_first else (n, t)
    qkv = R.standard_normal((a * c, 3 * e))
    p5 = qkv.reshape(a, c, 3, h, e // h)
    perm = (1, 2, 0, 3) if seq_first else (0, 2, 1, 3)
    q, k, v = (p5[:, :, i].transpose(perm) for i in range(3))
    s = q @ k.swapaxes(-1, -2) * 0.3
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    g = R.standard_normal((a, c, e))
    kw = dict(tokens=(a, c), heads=h, seq_first=seq_first, scale=0.3)
    inv = (2, 0, 1, 3) if seq_first else (0, 2, 1, 3)
    ctx = (w @ v).transpose(inv).reshape(a, c, e)
    _close(AP.attention_context(tj.tensor(qkv), tj.tensor(w), **kw).numpy(), ctx, rtol=1e-12)
    _close(AK.weights(qkv, **kw), w, rtol=1e-12)
    got = AP.attention_backward(tj.tensor(g), tj.tensor(qkv), tj.tensor(w), **kw).numpy()
    gh = g.reshape(a, c, h, e // h).transpose(perm)
    dw = gh @ v.swapaxes(-1, -2)
    ds = w * (dw - (dw * w).sum(-1, keepdims=True)) * 0.3
    want = np.stack([p.transpose(inv) for p in (ds @ k, ds.swapaxes(-1, -2) @ q, w.swapaxes(-1, -2) @ gh)], 2)
    _close(got, want.reshape(a * c, 3 * e), rtol=1e-12)


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("seq_first", [False, True])
def test_primitive_against_its_numpy_definition(seq_first, kernel, batch_split, monkeypatch):
    """context, backward and the weights against numpy; the backward by its part kernel,
    or (`kernel` False) by slices as array operations."""
    if not kernel:
        monkeypatch.setattr(AK, "_backward_part_kernel", lambda *arrays: None)
    _against_definition(N, T, E, H, seq_first)
    mode, launches = batch_split
    # split: the context, the pair and the backward each over the N = 3 batch entries, one a share
    assert launches == ([3, 3, 3] if mode == "split" else [])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transposing_kernel_writes_each_head_transposed(dtype):
    """`_transpose_kernel`: out[e, h, 0] = x[e, h]^T for strided head stacks (rows in blocks
    of 16 and a remainder: T = 37), as attention's products read k^T and v^T."""
    x = R.standard_normal((2, 37, 3, 4, 5)).astype(dtype)[:, :, 1].transpose(0, 2, 1, 3)   # (2, 4, 37, 5)
    tr = AK._transpose_kernel(np, x)
    assert tr is not None
    out = np.full((2, 4, 1, 5, 37), np.nan, dtype)
    tr(x, out)
    assert np.array_equal(out[:, :, 0], x.transpose(0, 1, 3, 2))
    assert AK._transpose_kernel(np, x.astype(np.float16)) is None


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("seq_first", [False, True])
def test_products_in_row_blocks_against_the_numpy_definition(seq_first, kernel, batch_split, monkeypatch):
    """The scores, the context and the backward's four products as two row blocks per head with
    the right operand copied or (`kernel`) transposed into a buffer (`_head_products`,
    `_head_products_t`: what T = 128, head_dim 64 takes), forced here by a lower small-matrix
    bound; with `kernel` the weights' and the backward's parts run as one numba call
    each (GEMMs by address), without it the weights' parts are driven from Python (q k^T a
    whole product) and the backward runs by slices. Context, backward and the weights
    against numpy, at once and split."""
    monkeypatch.setattr(AK, "_SMALL_GEMM", 128)
    if kernel:
        assert AK._backward_part_kernel(np, np.zeros((1, 1, 2, 2)), np.zeros(2), np.zeros(2)) is not None
        assert AK._forward_part_kernel(np, np.zeros(2)) is not None
    else:
        for name in ("_transpose_kernel", "_backward_part_kernel", "_forward_part_kernel"):
            monkeypatch.setattr(AK, name, lambda *arrays: None)
    assert AK._block_rows(8, 4, 8) == 4 and AK._block_rows(5, 4, 5) == 5
    _against_definition(3, 8, 8, 2, seq_first)
    mode, launches = batch_split
    assert launches == ([3, 3, 3] if mode == "split" else [])


@pytest.mark.parametrize("seq_first", [False, True])
def test_part_kernels_on_their_way_run_numpy_and_ask_for_no_fallback(seq_first, monkeypatch):
    """While a part kernel is compiling (`_gemm_kernel` gives (None, address)), the weights
    and the backward run numpy's form and ask for none of the fallback
    form's kernels (softmax's row kernel, the transposing copy: they would be compiled
    ahead of the part kernels only to go idle); where the weights' part kernel is not
    coming (None), they are asked for. Values against numpy's definition either way."""
    asked = []

    def fallback(name):
        def ask(*arrays):
            asked.append(name)
            return None
        return ask
    for name in ("softmax_kernel", "_transpose_kernel"):
        monkeypatch.setattr(AK, name, fallback(name))
    monkeypatch.setattr(AK.row_forms, "run", fallback("row_forms.run"))   # (the rows-form kernels)
    monkeypatch.setattr(AK, "_forward_part_kernel", lambda *arrays: (None, 0))
    monkeypatch.setattr(AK, "_backward_part_kernel", lambda *arrays: (None, 0))
    _against_definition(3, 8, 8, 2, seq_first)
    assert asked == []
    monkeypatch.setattr(AK, "_forward_part_kernel", lambda *arrays: None)
    monkeypatch.setattr(AK, "_backward_part_kernel", lambda *arrays: None)
    _against_definition(3, 8, 8, 2, seq_first)
    assert "softmax_kernel" in asked


def test_backward_same_bits_at_once_and_split(forced_split):
    """The packed gradient's bits do not depend on how the batch is split over shares."""
    kw = dict(tokens=(5, 8), heads=2, seq_first=False, scale=0.3)
    qkv = R.standard_normal((40, 24)).astype(np.float32)
    g = R.standard_normal((5, 8, 8)).astype(np.float32)
    w = AP.ATTENTION_WEIGHTS.run(np, qkv, **kw)
    split = AK.backward(g, qkv, w, **kw)
    assert forced_split == [3, 3]
    from tracejit.compiler.cpu.runtime import sharepool
    sharepool.SPLIT_MIN_WORK = 1 << 62                # (monkeypatched by forced_split: undone after)
    once = AK.backward(g, qkv, w, **kw)
    assert forced_split == [3, 3]
    np.testing.assert_array_equal(split, once)


MASKS = {"none": None, "causal": np.triu(np.full((T, T), -np.inf), 1),
         "key_padding": np.where(R.random((N, 1, 1, T)) < 0.3, -np.inf, 0.0),
         "per_head": R.standard_normal((N, H, T, T))}


@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("seq_first", [False, True])
def test_weights_primitive_against_its_numpy_definition(seq_first, mask, batch_split, monkeypatch):
    """attention_weights: softmax(q k^T * scale + mask) of the packed projection, per batch
    element (scores into a buffer, softmax into the weights), with and without the row
    kernel (numpy's form then), at once and split; its VJP: (ds k | ds^T q | 0)."""
    a, c = (T, N) if seq_first else (N, T)
    qkv = R.standard_normal((a * c, 3 * E))
    p5 = qkv.reshape(a, c, 3, H, E // H)
    perm = (1, 2, 0, 3) if seq_first else (0, 2, 1, 3)
    q, k, v = (p5[:, :, i].transpose(perm) for i in range(3))
    m = MASKS[mask]
    s = q @ k.swapaxes(-1, -2) * 0.3 + (0.0 if m is None else m)
    want = np.exp(s - s.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    kw = dict(tokens=(a, c), heads=H, seq_first=seq_first, scale=0.3)
    x = tj.tensor(qkv, requires_grad=True)
    mk = None if m is None else tj.tensor(m)
    mode, launches = batch_split
    for kernel in (True, False):
        if not kernel:
            # split: the kernel's weights over the N = 3 batch entries, one a share
            assert launches == ([3] if mode == "split" else [])
            monkeypatch.setattr(AK, "softmax_kernel", lambda *arrays: None)
            monkeypatch.setattr(AK, "_forward_part_kernel", lambda *arrays: None)
        w = AP.attention_weights(x, mk, **kw)
        _close(w.detach().numpy(), want, rtol=1e-12)
    gw = R.standard_normal(want.shape)
    (w * tj.tensor(gw)).sum().backward()
    ds = want * (gw - (gw * want).sum(-1, keepdims=True)) * 0.3
    inv = (2, 0, 1, 3) if seq_first else (0, 2, 1, 3)
    grad = np.stack([p.transpose(inv) for p in (ds @ k, ds.swapaxes(-1, -2) @ q, np.zeros_like(v))], 2)
    _close(x.grad.numpy(), grad.reshape(a * c, 3 * E), rtol=1e-11)


def test_self_attention_takes_the_weights_primitive_unless_the_mask_needs_a_gradient():
    tm, jm = _pair(True)
    x, m = tj.tensor(R.standard_normal((N, T, E))), R.standard_normal((T, T))
    assert "AttentionWeightsBackward0" in _node_names(jm(x, x, x, attn_mask=tj.tensor(m))[0])
    learned = tj.tensor(m, requires_grad=True)
    assert "AttentionWeightsBackward0" not in _node_names(jm(x, x, x, attn_mask=learned)[0])


def test_bad_shapes_name_the_op():
    with pytest.raises(Exception, match="attention_weights.*mask"):
        AP.attention_weights(tj.zeros(15, 24), tj.zeros(3, 2, 4, 5), tokens=(3, 5), heads=2,
                             seq_first=False, scale=1.0)
    with pytest.raises(Exception, match="attention_weights.*packed"):
        AP.attention_weights(tj.zeros(15, 20), tokens=(3, 5), heads=2, seq_first=False, scale=1.0)
    qkv, w = tj.zeros(15, 24), tj.zeros(3, 2, 5, 5)
    with pytest.raises(Exception, match="attention_context.*weights"):
        AP.attention_context(qkv, tj.zeros(3, 2, 5, 4), tokens=(3, 5), heads=2, seq_first=False, scale=1.0)
    with pytest.raises(Exception, match="attention_context.*packed"):
        AP.attention_context(tj.zeros(15, 20), w, tokens=(3, 5), heads=2, seq_first=False, scale=1.0)
    with pytest.raises(Exception, match="attention_backward"):
        AP.attention_backward(tj.zeros(3, 5, 7), qkv, w, tokens=(3, 5), heads=2, seq_first=False, scale=1.0)


@pytest.mark.parametrize("batch_first", [True, False])
def test_compiled_matches_eager_and_has_no_concat(batch_first):
    from tracejit.jit import passes
    from tracejit.jit.autodiff import split
    tm, jm = _pair(batch_first)
    x = R.standard_normal((N, T, E) if batch_first else (T, N, E))

    def loss(x):
        return jm(x, x, x, need_weights=False)[0].pow(2).sum()

    grads = []
    for f in (loss, tj.trace(loss)):
        jm.zero_grad()
        xt = tj.tensor(x, requires_grad=True)
        f(xt).backward()
        grads.append([xt.grad.numpy()] + [p.grad.numpy() for p in jm.parameters()])
    for a, b in zip(*grads):
        _close(b, a, rtol=1e-10)
    cf = tj.trace(loss, compiler="interpret")
    cf(tj.tensor(x, requires_grad=True))
    g = cf.entries[0].graph
    bwd = passes.optimize(split(g, [True] * len(g.inputs))[1])
    names = [e.prim.name for e in bwd.eqns]
    assert "attention_backward" in names and "concat" not in names and "softmax_backward" not in names


def test_all_masked_rows_give_nan_as_the_definition():
    """A score row whose mask is all -inf: the rows-form softmax gives nan for it (as numpy's
    form and PyTorch do), the other rows their softmax."""
    n, t, e, h = 2, 6, 8, 2
    qkv = R.standard_normal((n * t, 3 * e)).astype(np.float32)
    m = np.triu(np.full((t, t), -np.inf, np.float32), 1)
    m[3] = -np.inf
    kw = dict(tokens=(n, t), heads=h, seq_first=False, scale=0.5)
    p = qkv.reshape(n, t, 3, h, e // h)
    q, k = (p[:, :, i].transpose(0, 2, 1, 3) for i in range(2))
    s = q @ np.swapaxes(k, -1, -2) * np.float32(0.5) + m
    with np.errstate(invalid="ignore"):
        w = AK.weights(qkv, m, **kw)
        want = np.exp(s - s.max(-1, keepdims=True))
        want /= want.sum(-1, keepdims=True)
    assert np.isnan(w[:, :, 3]).all() and not np.isnan(np.delete(w, 3, axis=2)).any()
    np.testing.assert_allclose(np.delete(w, 3, axis=2), np.delete(want, 3, axis=2), rtol=1e-5, atol=1e-7)
