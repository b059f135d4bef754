"""numpy array arguments: graph inputs guarded by dtype and shape, numpy's simple
elementwise operators on them traced, anything else constants as before (jit/numpy_args.py)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import tracejit as tj

torch = pytest.importorskip("torch")


def _emb_pair():
    emb, ref = tj.nn.Embedding(30, 4), torch.nn.Embedding(30, 4)
    ref.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in emb.state_dict().items()})
    return emb, ref


def _sasrec_like(lib, emb):
    """SASRec's front: ids to embeddings, numpy position ids zeroed at padding, a padding mask."""
    def f(ids, weights):
        x = emb(lib.LongTensor(ids))
        poss = np.tile(np.arange(1, ids.shape[1] + 1), [ids.shape[0], 1])
        poss *= (ids != 0)
        pad = lib.BoolTensor(ids == 0)
        w = lib.as_tensor(weights)
        return (x.sum(-1) * ~pad + lib.LongTensor(poss)) * w[lib.from_numpy(ids) % 2]
    return f


def test_id_arrays_are_inputs_not_constants(compiler):
    emb, ref_emb = _emb_pair()
    f = _sasrec_like(tj, emb)
    cf = tj.trace(f, compiler=compiler)
    ref = _sasrec_like(torch, ref_emb)
    r = np.random.default_rng(0)
    weights = np.array([0.5, 2.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for b in (6, 6, 6, 4, 5, 3):
            ids = r.integers(0, 30, (b, 7))
            ids[:, 5:] = 0
            got = cf(ids, weights)
            np.testing.assert_allclose(got.detach().numpy(), f(ids, weights).detach().numpy(), rtol=1e-6)
            np.testing.assert_allclose(got.detach().numpy(), ref(ids, weights).detach().numpy(), rtol=1e-5, atol=1e-6)
    # new arrays of ids share an entry; np.arange needs the batch size as an int: one per size
    assert cf.cache_stats()["compiles"] == 4
    assert cf.cache_stats()["eager_fallbacks"] == 0
    assert all("identity" not in r for r in cf.cache_stats()["recompile_reasons"])


def test_changing_batch_goes_symbolic_and_values_follow_the_arrays():
    lin = tj.nn.Linear(4, 2)
    table = tj.randn(10, 4)

    def f(ids, mask):
        return lin(table[tj.as_tensor(ids)]).sum(-1) * tj.from_numpy(mask)
    cf = tj.compile(f, fullgraph=True)
    r = np.random.default_rng(1)
    for b in (8, 8, 5, 9, 3, 11):
        ids, mask = r.integers(0, 10, (b,)), r.random(b) > 0.5
        np.testing.assert_allclose(cf(ids, mask).detach().numpy(), f(ids, mask).detach().numpy(), rtol=1e-6)
    st = cf.cache_stats()
    assert st["compiles"] == 2 and st["dynamic_dims"] == [("ids", 0), ("mask", 0)]
    assert cf.entries[1].descs[0].text() == "ids: ndarray int64[s0]"


def test_guards_check_class_dtype_and_shape():
    cf = tj.trace(lambda a: tj.as_tensor(a) * 2, compiler="interpret")
    a = np.arange(6, dtype=np.int32)
    assert cf(a).tolist() == (a * 2).tolist()
    assert cf(a + 1).tolist() == ((a + 1) * 2).tolist()        # a new array: a hit
    assert cf(a.astype(np.int64)).dtype is tj.int64             # another dtype: captured again
    assert cf(tj.arange(3)).tolist() == [0, 2, 4]               # a tensor: captured again
    st = cf.cache_stats()
    assert st["compiles"] == 3 and st["hits"] == 1
    assert any("ndarray -> a tensor" in r or "dtype" in r for r in st["recompile_reasons"])


def test_numpy_functions_keep_the_array_a_constant_then_break():
    def f(x, a):
        return x + tj.as_tensor(np.cumsum(a))   # numpy code reads the values: not traced
    x = tj.ones(4)
    a = np.arange(4.0, dtype=np.float32)
    traced = tj.trace(f, compiler="interpret")   # fullgraph: a constant per array, as before
    for k in range(3):
        np.testing.assert_allclose(traced(x, a + k).numpy(), 1 + np.cumsum(a + k))
    assert traced.cache_stats()["compiles"] == 3
    comp = tj.compile(f)
    assert comp(x, a).tolist() == (1 + np.cumsum(a)).tolist()
    assert comp(x, a).tolist() == (1 + np.cumsum(a)).tolist()   # the same array: its entry
    with pytest.warns(RuntimeWarning, match="numpy code reads array argument 'a'"):
        assert comp(x, a + 1).tolist() == (1 + np.cumsum(a + 1)).tolist()
    st = comp.cache_stats()
    assert st["compiles"] == 1 and st["hits"] == 1 and st["eager_fallbacks"] == 1


def test_values_used_as_python_numbers_stay_guarded_constants():
    cf = tj.trace(lambda x, shape: x.reshape(*shape.tolist()), compiler="interpret")
    x = tj.arange(12)
    s = np.array([3, 4])
    assert cf(x, s).shape == (3, 4)
    assert cf(x, s).shape == (3, 4)
    assert cf(x, np.array([4, 3])).shape == (4, 3)
    assert cf.cache_stats()["compiles"] == 2


@pytest.mark.parametrize("a", [np.array(["a", "b"]), np.arange(3, dtype=np.uint16),
                               np.ma.masked_array([1.0, 2.0])])
def test_arrays_without_a_tensor_dtype_are_constants(a):
    cf = tj.trace(lambda x, a: x * len(a), compiler="interpret")
    assert cf(tj.ones(2), a).tolist() == [float(len(a))] * 2
    assert cf.entries[0].descs[1].kind == "const"


def test_a_write_into_an_array_argument_is_seen_as_eagerly():
    def f(a):
        t = tj.from_numpy(a)
        t.add_(1)
        return t * 2
    a, b = np.zeros(3, np.float32), np.zeros(3, np.float32)
    cf = tj.trace(f, compiler="interpret")
    np.testing.assert_allclose(cf(a).numpy(), f(b).numpy())
    np.testing.assert_allclose(a, b)


def test_numpy_semantics_not_torchs_refuse_tracing():
    # int array / 2 is float64 in numpy (float32 in torch): a constant of the capture
    cf = tj.trace(lambda x, a: x + tj.as_tensor(a / 2), compiler="interpret")
    a = np.arange(3)
    out = cf(tj.zeros(3, dtype=tj.float64), a)
    assert out.dtype is tj.float64 and out.tolist() == [0.0, 0.5, 1.0]
    assert cf.entries[0].descs[1].kind == "const"
    # and with a tensor operand numpy defers to the tensor: torch's semantics, traced
    ct = tj.trace(lambda x, a: x * a, compiler="interpret")
    got = ct(tj.ones(3), np.arange(3.0))
    assert got.dtype is tj.float64 and got.tolist() == [0.0, 1.0, 2.0]
    assert ct(tj.ones(3), np.arange(3.0) + 1).tolist() == [1.0, 2.0, 3.0]
    assert ct.cache_stats()["compiles"] == 1


def test_user_code_sees_an_array():
    seen = []

    def f(x, a):
        seen.append((isinstance(a, np.ndarray), a.dtype, a.shape, a.ndim, a.size, len(a)))
        if isinstance(a, np.ndarray):
            a = tj.from_numpy(a)
        return x[a]
    cf = tj.trace(f, compiler="interpret")
    x = tj.arange(10.0)
    assert cf(x, np.array([1, 3])).tolist() == [1.0, 3.0]
    assert cf(x, np.array([4, 0])).tolist() == [4.0, 0.0]
    assert seen == [(True, np.dtype(np.int64), (2,), 1, 2, 2)]
    assert cf.cache_stats()["compiles"] == 1


def test_numpy_code_is_logged_as_a_fallback(caplog):
    cf = tj.trace(lambda x, a: x + tj.as_tensor(np.cumsum(a)), compiler="interpret")
    with caplog.at_level("INFO", logger="tracejit.fallback"):
        cf(tj.zeros(2), np.ones(2, np.float32))
    assert "numpy.cumsum on numpy array argument 'a'" in caplog.text
    assert "capturing numpy arguments ['a'] as constants" in caplog.text


def test_traced_numpy_operators_give_numpys_dtypes_and_values():
    def f(a, b):
        return [tj.as_tensor(v) for v in (a + 1, a * 2.5, a > 0.5, -a, ~(a != 0), a - b, 3 - a,
                                          a == b, (a & 1) ^ 2, b * 1.5)]
    a = np.array([0, 1, 2**40 + 1, -3], np.int64)
    b = np.array([1, 1, 2, -3], np.int32)
    cf = tj.trace(f, compiler="interpret")
    for k in range(3):
        got, want = cf(a + k, b - k), f(a + k, b - k)
        for g, w in zip(got, want):
            assert g.dtype is w.dtype and g.tolist() == w.tolist()
        with np.errstate(all="ignore"):
            expect = (a + k + 1, (a + k) * 2.5, a + k > 0.5, -(a + k), ~(a + k != 0), a + k - (b - k),
                      3 - (a + k), a + k == b - k, ((a + k) & 1) ^ 2, (b - k) * 1.5)
        for g, e in zip(got, expect):
            assert g.numpy().dtype == e.dtype and g.tolist() == e.tolist()
    assert cf.cache_stats()["compiles"] == 1
    assert all(d.kind == "tensor" for d in cf.entries[0].descs)


@pytest.mark.parametrize("use", ["layer", "operator"])
def test_an_array_where_eagerly_a_tensor_is_needed_is_refused_alike(use):
    lin, w = tj.nn.Linear(3, 2), tj.ones(3, 2)
    fn = (lambda a: lin(a) * 2.0) if use == "layer" else (lambda a: (a @ w) * 2.0)
    a = np.ones((2, 3), np.float32)
    with pytest.raises(TypeError, match="ndarray") as eager:
        fn(a)
    with pytest.raises(TypeError, match="ndarray") as compiled:
        tj.trace(fn, compiler="interpret")(a)
    if use == "layer":
        assert str(compiled.value) == str(eager.value)
