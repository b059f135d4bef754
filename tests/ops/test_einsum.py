"""einsum (ops/einsum.py): a repeated label within one operand takes the diagonal as a view,
as PyTorch's, so writes into the result reach the operand; values and gradients."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("eq, shape", [("ii->i", (4, 4)), ("ii", (4, 4)), ("bii->bi", (2, 3, 3)),
                                       ("iji->ij", (3, 2, 3))])
def test_repeated_labels_take_the_diagonal_as_a_view(eq, shape):
    a = np.random.default_rng(0).standard_normal(shape)
    res = []
    for m in (torch, tj):
        x = m.tensor(a, requires_grad=True)
        h = x * 1.0
        y = m.einsum(eq, h)
        if y.ndim:
            y.mul_(2.0)   # reaches h where y is a view
        (y * y).sum().backward()
        res.append((y.detach().numpy(), h.detach().numpy(), x.grad.numpy(), y._base is not None))
    for got, want in zip(res[1], res[0]):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_compiled_diagonal_einsum_matches_eager():
    a = np.random.default_rng(1).standard_normal((2, 3, 3))
    f = tj.compile(lambda h: tj.einsum("bii->bi", h) * 2.0)
    np.testing.assert_allclose(f(tj.tensor(a)).numpy(), np.einsum("bii->bi", a) * 2.0, rtol=1e-12)


@pytest.mark.parametrize("eq, shapes, gemms", [
    ("bld,dn->bldn", [(2, 3, 4), (4, 5)], 0),               # nothing contracted: a multiply
    ("bld,bln,bld->bldn", [(2, 3, 4), (2, 3, 5), (2, 3, 4)], 0),
    ("bdn,bn->bd", [(2, 4, 5), (2, 5)], 0),                 # batched matrix-vector
    ("bn,bdn->db", [(2, 5), (2, 4, 5)], 0),
    ("i,j->ji", [(3,), (4,)], 0),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], 3),            # a real product stays a GEMM
    ("ij,j->i", [(3, 4), (4,)], 3),                          # no batch: one GEMV
])
def test_values_gradients_and_gemms_match_the_step_kind(monkeypatch, eq, shapes, gemms):
    """Steps that contract nothing, or batched matrix-vector steps, run as a broadcast
    multiply (summed), with no GEMM forward or backward; values and gradients as PyTorch's."""
    from layer_pairs import count_calls, gemm_count
    from tracejit.ops import linalg
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s) for s in shapes]
    res = []
    for m in (torch, tj):
        if m is tj:
            calls = count_calls(monkeypatch, linalg.PRODUCTS)
        xs = [m.tensor(a, requires_grad=True) for a in arrays]
        y = m.einsum(eq, *xs)
        (y * y).sum().backward()
        res.append([y.detach().numpy()] + [x.grad.numpy() for x in xs])
    assert gemm_count(calls) == gemms, calls
    for got, want in zip(res[1], res[0]):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    f = tj.compile(lambda *xs: tj.einsum(eq, *xs))
    np.testing.assert_allclose(f(*[tj.tensor(a) for a in arrays]).numpy(), res[0][0], rtol=1e-10)


def test_an_integer_matrix_vector_step_keeps_its_dtype():
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    b = np.arange(8, dtype=np.int32).reshape(2, 4)
    got = tj.einsum("bij,bj->bi", tj.tensor(a), tj.tensor(b))
    want = torch.einsum("bij,bj->bi", torch.tensor(a), torch.tensor(b))
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1] == "int32"
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("eq, shapes", [("bdn,bn->bd", [(2, 3, 4), (2, 4)]),
                                        ("bld,dn->bldn", [(2, 3, 4), (4, 5)]),
                                        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)])])
def test_under_autocast_every_step_form_returns_pytorchs_dtype(eq, shapes):
    """Steps lowered as broadcast multiplies return PyTorch's dtype under bf16 autocast:
    bf16 where a sum is contracted (PyTorch runs a bmm), float32 for an outer product."""
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(0)
    xs = [r.standard_normal(s).astype(np.float32) for s in shapes]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = torch.einsum(eq, *[torch.tensor(x) for x in xs])
    with tj.autocast("cpu", dtype=tj.bfloat16):
        got = tj.einsum(eq, *[tj.tensor(x) for x in xs])
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=2e-2, atol=2e-2)
