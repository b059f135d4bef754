"""scaled_dot_product_attention, MultiheadAttention and the Transformer layers vs PyTorch:
same state_dict keys, weights copied by name, forward values and gradients (float64,
dropout off / eval mode for exact comparisons)."""
import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit import nn

torch = pytest.importorskip("torch", reason="compares with PyTorch")
pytestmark = [pytest.mark.filterwarnings("ignore:Support for mismatched"),  # torch notices
              pytest.mark.filterwarnings("ignore:enable_nested_tensor"),
              pytest.mark.usefixtures("float64_with_torch")]

R = np.random.default_rng(0)


def _copy(tm, jm):
    assert list(jm.state_dict()) == list(tm.state_dict())
    jm.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})


def _lib_args(lib, args):
    return [lib.tensor(a, requires_grad=a.dtype.kind == "f") if isinstance(a, np.ndarray) else a for a in args]


def _compare(tm, jm, args, kwargs=None, first_only=False):
    """Run both modules on the same inputs; compare outputs, input grads and param grads."""
    kwargs = kwargs or {}
    ta, ja = _lib_args(torch, args), _lib_args(tj, args)
    tk = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    jk = {k: tj.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    to, jo = tm(*ta, **tk), jm(*ja, **jk)
    if first_only:
        to, jo = to[0], jo[0]
    outs = list(zip(to, jo)) if isinstance(to, tuple) else [(to, jo)]
    gs = []
    for t, j in outs:
        if t is None:
            assert j is None
            continue
        np.testing.assert_allclose(j.detach().numpy(), t.detach().numpy(), rtol=1e-9, atol=1e-10)
        gs.append(R.standard_normal(tuple(t.shape)))
    sum((t * torch.tensor(g)).sum() for (t, _), g in zip([o for o in outs if o[0] is not None], gs)).backward()
    sum((j * tj.tensor(g)).sum() for (_, j), g in zip([o for o in outs if o[0] is not None], gs)).backward()
    for t, j in zip(ta, ja):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            np.testing.assert_allclose(j.grad.numpy(), t.grad.numpy(), rtol=1e-8, atol=1e-10)
    jp = dict(jm.named_parameters())
    for name, p in tm.named_parameters():
        if p.grad is not None:
            np.testing.assert_allclose(jp[name].grad.numpy(), p.grad.numpy(), rtol=1e-8, atol=1e-10,
                                       err_msg=name)


Q, K, V = R.standard_normal((2, 3, 5, 8)), R.standard_normal((2, 3, 6, 8)), R.standard_normal((2, 3, 6, 4))
BOOL_MASK = R.random((5, 6)) > 0.3
BOOL_MASK[:, 0] = True


@pytest.mark.parametrize("kw", [{}, {"is_causal": True}, {"scale": 0.3}, {"attn_mask": BOOL_MASK},
                                {"attn_mask": R.standard_normal((5, 6))}])
def test_scaled_dot_product_attention(kw):
    class Wrap:
        def __init__(self, lib):
            self.f = (torch.nn.functional if lib is torch else F).scaled_dot_product_attention

        def __call__(self, *a, **k):
            return self.f(*a, **k)

    tm, jm = Wrap(torch), Wrap(tj)
    tm.named_parameters = jm.named_parameters = lambda: iter(())
    _compare(tm, jm, [Q, K, V], kw)


def test_sdpa_dropout_is_random_and_checks_masks():
    tj.manual_seed(0)
    q = tj.tensor(Q)
    a = F.scaled_dot_product_attention(q, tj.tensor(K), tj.tensor(V), dropout_p=0.5)
    b = F.scaled_dot_product_attention(q, tj.tensor(K), tj.tensor(V))
    assert not np.allclose(a.numpy(), b.numpy())
    with pytest.raises(ValueError, match="not both"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=tj.ones(5, 5), is_causal=True)


MHA_CONFIGS = [dict(), dict(batch_first=True), dict(kdim=5, vdim=3), dict(bias=False),
               dict(add_bias_kv=True, add_zero_attn=True)]


@pytest.mark.parametrize("cfg", MHA_CONFIGS, ids=lambda c: ",".join(c) or "default")
@pytest.mark.parametrize("call", ["plain", "key_padding_mask", "float_attn_mask_per_head_weights",
                                  "bool_3d_mask_and_padding", "no_weights"])
def test_multihead_attention_matches_torch(cfg, call):
    torch.manual_seed(0)
    tm, jm = torch.nn.MultiheadAttention(8, 2, **cfg), nn.MultiheadAttention(8, 2, **cfg)
    _copy(tm, jm)
    n, L, S = 3, 4, 5
    shape = (lambda t, e: (n, t, e)) if cfg.get("batch_first") else (lambda t, e: (t, n, e))
    args = [R.standard_normal(shape(L, 8)), R.standard_normal(shape(S, cfg.get("kdim", 8))),
            R.standard_normal(shape(S, cfg.get("vdim", 8)))]
    kpm = np.zeros((n, S), bool)
    kpm[0, -2:] = True
    kwargs = {"plain": {}, "key_padding_mask": {"key_padding_mask": kpm},
              "float_attn_mask_per_head_weights": {"attn_mask": R.standard_normal((L, S)),
                                                   "average_attn_weights": False},
              "bool_3d_mask_and_padding": {"attn_mask": R.random((n * 2, L, S)) > 0.8,
                                           "key_padding_mask": kpm},
              "no_weights": {"need_weights": False}}[call]
    _compare(tm, jm, args, kwargs)


def test_multihead_attention_unbatched_and_init():
    torch.manual_seed(0)
    tm, jm = torch.nn.MultiheadAttention(8, 4), nn.MultiheadAttention(8, 4)
    # PyTorch's init: xavier-uniform in_proj (bound sqrt(6 / (E + 3E))), zero biases
    bound = np.sqrt(6 / (8 + 24))
    w = jm.in_proj_weight.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.5 * bound
    assert not jm.in_proj_bias.detach().numpy().any() and not jm.out_proj.bias.detach().numpy().any()
    _copy(tm, jm)
    x = R.standard_normal((5, 8))
    _compare(tm, jm, [x, x, x])
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(10, 3)
    with pytest.raises(ValueError, match="embed_dim=8"):
        jm(tj.ones(2, 3, 6), tj.ones(2, 3, 6), tj.ones(2, 3, 6))


@pytest.mark.parametrize("cfg", [dict(), dict(batch_first=True, norm_first=True, activation="gelu"),
                                 dict(activation=F.silu, layer_norm_eps=1e-3, bias=False)],
                         ids=["default", "batch_first,norm_first,gelu", "callable,eps,nobias"])
def test_encoder_layer_and_stack_match_torch(cfg):
    torch.manual_seed(0)
    tcfg = dict(cfg)
    if callable(cfg.get("activation")):
        tcfg["activation"] = torch.nn.functional.silu
    tl = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, **tcfg)
    jl = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, **cfg)
    _copy(tl, jl)
    shape = (3, 4, 8) if cfg.get("batch_first") else (4, 3, 8)
    x = R.standard_normal(shape)
    mask = np.triu(np.full((4, 4), -np.inf), 1)
    kpm = np.zeros((3, 4), bool)
    kpm[1, -1] = True
    _compare(tl, jl, [x], {"src_mask": mask, "src_key_padding_mask": kpm})
    tl.zero_grad(set_to_none=True)
    jl.zero_grad(set_to_none=True)
    te = torch.nn.TransformerEncoder(tl, 2, norm=torch.nn.LayerNorm(8), enable_nested_tensor=False)
    je = nn.TransformerEncoder(jl, 2, norm=nn.LayerNorm(8))
    _copy(te, je)
    assert je.layers[0].linear1.weight is not je.layers[1].linear1.weight  # independent copies
    _compare(te, je, [x], {"mask": mask})


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_and_transformer_match_torch(norm_first):
    torch.manual_seed(0)
    tl = torch.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, norm_first=norm_first)
    jl = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, norm_first=norm_first)
    _copy(tl, jl)
    tgt, mem = R.standard_normal((4, 3, 8)), R.standard_normal((6, 3, 8))
    mask = nn.Transformer.generate_square_subsequent_mask(4).numpy()
    np.testing.assert_array_equal(mask, torch.nn.Transformer.generate_square_subsequent_mask(4).numpy())
    mkpm = np.zeros((3, 6), bool)
    mkpm[2, :2] = True
    _compare(tl, jl, [tgt, mem], {"tgt_mask": mask, "memory_key_padding_mask": mkpm})
    tt = torch.nn.Transformer(8, 2, 1, 1, 16, dropout=0.0, norm_first=norm_first)
    jt = nn.Transformer(8, 2, 1, 1, 16, dropout=0.0, norm_first=norm_first)
    _copy(tt, jt)
    _compare(tt, jt, [R.standard_normal((6, 3, 8)), tgt], {"tgt_mask": mask})


def test_dropout_active_in_training_only():
    tj.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.5)
    x = tj.randn(4, 3, 8)
    assert not np.allclose(layer(x).detach().numpy(), layer(x).detach().numpy())
    layer.eval()
    np.testing.assert_array_equal(layer(x).detach().numpy(), layer(x).detach().numpy())


def _encoder_compiled_matches_eager(make_compiled):
    tj.manual_seed(0)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), 2)
    x = tj.randn(3, 4, 8)
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    ref = enc(x, mask=mask)
    ref.pow(2).sum().backward()
    g_ref = {n: p.grad.numpy().copy() for n, p in enc.named_parameters()}
    for compiled in make_compiled(enc):
        enc.zero_grad()
        got = compiled(x, mask=mask)
        np.testing.assert_allclose(got.detach().numpy(), ref.detach().numpy(), rtol=1e-9, atol=1e-10)
        got.pow(2).sum().backward()
        for n, p in enc.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), g_ref[n], rtol=1e-7, atol=1e-9, err_msg=n)


def test_encoder_captures_under_script_and_trace():
    # capture + IR autodiff through the reference interpreter (fast); numba below (slow)
    _encoder_compiled_matches_eager(lambda enc: (tj.script(enc, compiler="interpret"),
                                                 tj.trace(enc, compiler="interpret")))


@pytest.mark.slow  # numba compiles ~40 kernels cold (about 100 s on 2 shared cores)
def test_encoder_compiles_with_numba():
    _encoder_compiled_matches_eager(lambda enc: (tj.script(enc), tj.trace(enc)))


def test_sdpa_traces_with_masks():
    def attend(q, k, v, m):
        causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return causal + F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    q, k, v = (tj.tensor(a) for a in (Q, K[..., :5, :], V[..., :5, :]))
    m = tj.tensor(BOOL_MASK[:, :5])
    expect = attend(q, k, v, m)
    for compiled in (tj.trace(attend, compiler="interpret"), tj.script(attend, compiler="interpret")):
        np.testing.assert_allclose(compiled(q, k, v, m).numpy(), expect.numpy(), rtol=1e-12)


def test_functional_mha_takes_pytorchs_positional_arguments():
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(8, 2)
    jm = nn.MultiheadAttention(8, 2)
    _copy(tm, jm)
    x = R.standard_normal((4, 3, 8))

    def call(lib, m, t):
        f = (torch.nn.functional if lib is torch else F).multi_head_attention_forward
        return f(t, t, t, 8, 2, m.in_proj_weight, m.in_proj_bias, None, None, False, 0.0,
                 m.out_proj.weight, m.out_proj.bias)

    to, tw = call(torch, tm, torch.tensor(x))
    jo, jw = call(tj, jm, tj.tensor(x))
    np.testing.assert_allclose(jo.detach().numpy(), to.detach().numpy(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(jw.detach().numpy(), tw.detach().numpy(), rtol=1e-9, atol=1e-10)


def test_sdpa_fused_softmax_compiled_gradients_match_eager_and_torch():
    # scale and the additive mask are part of the softmax op (ops/softmax_prim.py): the
    # mask's own gradient (a learned bias) flows back, eagerly and compiled with numba,
    # and a mask that broadcasts the scores to a larger shape still works.
    fmask = R.standard_normal((5, 6))

    def attend(q, k, v, m):
        return (F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.7)
                + F.scaled_dot_product_attention(q, k, v, is_causal=True))

    def torch_attend(q, k, v, m):
        return (torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.7)
                + torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))

    args = (Q, K, V[..., :6, :], fmask)
    ta = [torch.tensor(a, requires_grad=True) for a in args]
    torch_attend(*ta).pow(2).sum().backward()
    for f in (attend, tj.trace(attend)):
        ja = [tj.tensor(a, requires_grad=True) for a in args]
        out = f(*ja)
        np.testing.assert_allclose(out.detach().numpy(), torch_attend(*ta).detach().numpy(), rtol=1e-9, atol=1e-10)
        out.pow(2).sum().backward()
        for j, t in zip(ja, ta):
            np.testing.assert_allclose(j.grad.numpy(), t.grad.numpy(), rtol=1e-8, atol=1e-10)
    wide = R.standard_normal((4, 2, 3, 5, 6))      # broadcasts the scores up (PyTorch refuses)
    got = F.scaled_dot_product_attention(tj.tensor(Q), tj.tensor(K), tj.tensor(V), attn_mask=tj.tensor(wide))
    z = Q @ K.swapaxes(-1, -2) / np.sqrt(8) + wide
    w = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(got.numpy(), (w / w.sum(-1, keepdims=True)) @ V, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("batch_first", [False, True])
def test_a_learned_float_mask_gets_its_gradient_when_captured(batch_first):
    """A float attn_mask computed from a parameter (a learned position bias) or from an
    argument that requires grad takes its gradient through a compiled self-attention as
    eagerly and in PyTorch (the capture read the derived mask as needing none, and the
    fused attention ops leave a mask's gradient out)."""
    def make(lib):
        class Biased(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.attn = lib.nn.MultiheadAttention(8, 2, batch_first=batch_first)
                self.bias = lib.nn.Parameter(lib.tensor(np.linspace(-1, 1, 25).reshape(5, 5)))

            def forward(self, x, extra):
                return self.attn(x, x, x, attn_mask=self.bias.tanh() + extra, need_weights=False)[0]
        return Biased()

    tm, jm = make(torch), make(tj)
    _copy(tm, jm)
    x, extra = R.standard_normal((2, 5, 8) if batch_first else (5, 2, 8)), R.standard_normal((5, 5))
    want_args = _lib_args(torch, [x, extra])
    tm(*want_args).pow(2).sum().backward()
    for run in (jm, tj.trace(jm, compiler="interpret")):
        jm.zero_grad()
        args = _lib_args(tj, [x, extra])
        run(*args).pow(2).sum().backward()
        np.testing.assert_allclose(jm.bias.grad.numpy(), tm.bias.grad.numpy(), rtol=1e-9)
        np.testing.assert_allclose(args[1].grad.numpy(), want_args[1].grad.numpy(), rtol=1e-9)


@pytest.mark.parametrize("case", ["padded", "not_left_aligned", "grad", "training", "odd_heads", "float_mask"])
def test_encoder_inference_zeroes_padded_positions_as_pytorchs_nested_path(case):
    """With enable_nested_tensor, PyTorch's encoder in inference leaves right-padded
    positions out (zeros, then the final norm); where its conditions fail (padding not at
    the end, gradients wanted, training, an odd head count) the positions keep values."""
    x = R.standard_normal((3, 5, 8))
    kpm = np.array([[False] * 5, [False, False, False, True, True], [False] + [True] * 4])
    if case == "not_left_aligned":
        kpm[1] = [False, True, False, False, True]
    heads = 1 if case == "odd_heads" else 2

    def make(lib):
        lib.manual_seed(0)
        layer = lib.nn.TransformerEncoderLayer(8, heads, 16, dropout=0.0, batch_first=True)
        enc = lib.nn.TransformerEncoder(layer, 2, norm=lib.nn.LayerNorm(8))
        enc.train(case == "training")
        return enc
    tm, jm = make(torch), make(tj)
    _copy(tm, jm)

    def run(lib, m):
        mask = lib.tensor(kpm)
        if case == "float_mask":
            mask = lib.zeros(kpm.shape, dtype=lib.float64).masked_fill(mask, float("-inf"))
        with lib.set_grad_enabled(case == "grad"):
            return m(lib.tensor(x), src_key_padding_mask=mask).detach().numpy()
    want, got = run(torch, tm), run(tj, jm)
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-9)
    zeroed = case in ("padded", "float_mask")
    assert np.allclose(want[2, 1:], want[2, 1]) == zeroed   # (the norm of a zero row: its bias)
