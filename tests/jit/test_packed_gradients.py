"""Self-attention's packed q/k/v gradient written once, in the layout its weight GEMM reads
(ops/attention_prim.py's attention_backward), concat's C-contiguous result from strided
inputs (ops/shape.py), and `loops.unbind_steps`' stacked gradient."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.jit import passes
from differential import assert_compiled_matches


def test_concat_of_strided_inputs_is_c_contiguous_and_exact():
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((4, 3, 5)).astype(np.float32).transpose(2, 0, 1) for _ in range(3)]
    for dim in (0, 1, 2, -1):
        got = tj.cat([tj.tensor(x) for x in xs], dim).numpy()
        want = np.concatenate(xs, axis=dim)
        assert got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)
    # mixed dtypes promote as before
    got = tj.cat([tj.tensor(xs[0]), tj.tensor(xs[1].astype(np.float64))], 1)
    assert got.dtype == tj.float64
    np.testing.assert_array_equal(got.numpy(), np.concatenate([xs[0], xs[1].astype(np.float64)], 1))


@pytest.mark.parametrize("batch_first", [True, False])
def test_self_attention_packed_gradient_compiled_matches_eager_and_torch(batch_first):
    torch = pytest.importorskip("torch")
    tj.manual_seed(0)
    E, H, N, T = 16, 4, 3, 5
    m = tj.nn.MultiheadAttention(E, H, batch_first=batch_first)
    ref = torch.nn.MultiheadAttention(E, H, batch_first=batch_first)
    ref.load_state_dict({k: torch.tensor(v.numpy()) for k, v in m.state_dict().items()})
    shape = (N, T, E) if batch_first else (T, N, E)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)

    def loss(m, x):
        y, _ = m(x, x, x, need_weights=False)
        return (y * y).sum()

    cf = tj.trace(loss)
    for _ in range(2):
        m.zero_grad()
        cf(m, tj.tensor(x)).backward()
    xr = torch.tensor(x)
    yr, _ = ref(xr, xr, xr, need_weights=False)
    (yr * yr).sum().backward()
    for name, p in m.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), dict(ref.named_parameters())[name].grad.numpy(),
                                   rtol=1e-4, atol=1e-5, err_msg=name)
    xt = tj.tensor(x, requires_grad=True)
    assert_compiled_matches(lambda x: loss(m, x), xt, rtol=1e-4, atol=1e-5)


def test_packed_qkv_gradient_is_made_in_the_gemm_layout():
    """The backward of self-attention's packed projection makes dq, dk, dv in one buffer,
    the (tokens, 3E) rows of the weight GEMM (ops/attention_prim.py's attention_backward:
    each GEMM writes its slice): no concat, no reshape between it and the GEMMs."""
    from tracejit.jit.autodiff import split
    tj.manual_seed(0)
    m = tj.nn.MultiheadAttention(16, 4, batch_first=True)
    x = tj.randn(3, 5, 16, requires_grad=True)
    cf = tj.trace(lambda x: m(x, x, x, need_weights=False)[0].sum())
    cf(x)
    g = cf.entries[0].graph
    bwd = passes.optimize(split(g, [True] * len(g.inputs))[1])
    assert not [e for e in bwd.eqns if e.prim.name == "concat"], bwd.text(with_locations=False)
    ab = [e for e in bwd.eqns if e.prim.name == "attention_backward"]
    assert len(ab) == 1 and ab[0].out.aval.shape == (15, 48), bwd.text(with_locations=False)
    users = sorted(e.prim.name for e in bwd.eqns if ab[0].out in e.inputs)
    assert users == ["matmul", "permute", "sum"], users


def test_unbind_steps_along_an_inner_dim_is_one_node_with_a_stacked_gradient():
    from tracejit.jit.loops import unbind_steps
    rng = np.random.default_rng(2)
    x_np = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    w_np = rng.standard_normal((4, 2, 3, 5)).astype(np.float32)
    x = tj.tensor(x_np, requires_grad=True)
    parts = unbind_steps(x, 2)
    assert len(parts) == 4 and all(p.grad_fn is parts[0].grad_fn for p in parts)
    for k, p in enumerate(parts):
        np.testing.assert_array_equal(p.detach().numpy(), x_np[:, :, k])
    # slice 1 unused: its gradient is zeros
    loss = sum(((p * tj.tensor(w_np[k])).sum() for k, p in enumerate(parts) if k != 1), tj.tensor(0.0))
    loss.backward()
    want = np.moveaxis(w_np, 0, 2).copy()
    want[:, :, 1] = 0
    np.testing.assert_array_equal(x.grad.numpy(), want)
    assert x.grad.numpy().flags.c_contiguous
