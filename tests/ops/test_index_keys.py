"""Index keys (ops/index_keys.py): the spec of an index mixing integer tensors with ints,
slices, None and Ellipsis is kept per rank and item kinds, and a kept spec gives the values
the loop gives, read from each call's own tensors; eager reads and writes through a boolean
mask of two or more dims (`flat_mask`) merge the mask's dims into one, with PyTorch's
values, gradients and in-place memory."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.ops import index_keys
from tracejit.ops.index_keys import flat_mask

torch = pytest.importorskip("torch")


def test_kept_spec_reads_each_calls_tensors():
    x = np.arange(4 * 6 * 8, dtype=np.float32).reshape(4, 6, 8)
    a = tj.tensor(x)
    key = index_keys._kept_key(a, (slice(None), tj.tensor([0]), tj.tensor([1])))
    index_keys._KEPT.pop(key, None)
    for j, k in (([0, 2], [1, 3]), ([5, 1], [7, 0]), ([-1], [2])):   # (the second and third: kept)
        got = a[:, tj.tensor(j), tj.tensor(k)].numpy()
        np.testing.assert_array_equal(got, torch.tensor(x)[:, torch.tensor(j), torch.tensor(k)].numpy())
    assert key in index_keys._KEPT


@pytest.mark.parametrize("index", [
    lambda t: (Ellipsis, t([4])), lambda t: (t([1, 0]), slice(1, 3)), lambda t: (None, 0, t([2, 2])),
    lambda t: (t([[0], [3]]), slice(None, None, 2), t([1, 2, 3]))])
def test_kept_spec_matches_torch(index):
    x = np.arange(4 * 6 * 5, dtype=np.float32).reshape(4, 6, 5)
    for _ in range(2):
        got = tj.tensor(x)[index(lambda v: tj.tensor(v))].numpy()
        want = torch.tensor(x)[index(lambda v: torch.tensor(v))].numpy()
        np.testing.assert_array_equal(got, want)


def test_masks_bools_and_errors_are_not_kept():
    a = tj.ones(3, 4)
    assert index_keys._kept_key(a, (tj.tensor([True, False, True]), 0)) is None
    assert index_keys._kept_key(a, (tj.tensor([1], dtype=tj.uint8), 0)) is None
    assert index_keys._kept_key(a, (True, tj.tensor([1]))) is None
    assert index_keys._kept_key(a, (0, 1)) is None   # (no tensor: indexing.py keeps those)
    assert index_keys._kept_key(a, (slice(0.5, None), tj.tensor([1]))) is None
    key = index_keys._kept_key(a, (0, 1, tj.tensor([0])))
    for _ in range(2):
        with pytest.raises(IndexError, match="too many indices"):
            a[0, 1, tj.tensor([0])]
    assert key not in index_keys._KEPT


A = np.random.default_rng(0).standard_normal((4, 5, 6)).astype(np.float32)
M2 = A[..., 0] > 0          # the two leading dims
M3 = A > 0.3                # all three


def _both(fn):
    got = fn(tj, tj.tensor(A), tj.tensor(M2), tj.tensor(M3))
    want = fn(torch, torch.tensor(A), torch.tensor(M2), torch.tensor(M3))
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fn", [
    lambda L, a, m2, m3: (a[m2], a[m3]),
    lambda L, a, m2, m3: (a.transpose(0, 1)[m2.t()],),   # (a strided operand)
])
def test_read_matches_torch(fn):
    _both(fn)


def _writes(L, a, m2, m3):
    x, y, z, w = a.clone(), a.clone(), a.clone(), a.clone()
    x[m2] = 7.0
    y[m3] = a[m3] * 2
    z[m2] = L.arange(6.0)
    w.index_put_((m3,), a[m3], accumulate=True)
    return x, y, z, w


def test_writes_match_torch():
    _both(_writes)


def test_gradients_match_torch():
    def fn(L, a, m2, m3):
        g = a.clone().requires_grad_(True)
        (g[m3] ** 2).sum().backward()
        h = a.clone().requires_grad_(True)
        v = (h * 3)[m2]
        u = h * 1
        u[m2] = v * v
        u.sum().backward()
        return g.grad, h.grad
    _both(fn)


def test_write_keeps_the_tensors_memory():
    x = tj.tensor(A)
    before = x._data
    version = x._version
    x[tj.tensor(M3)] = 0.0
    assert x._data is before and x._version == version + 1
    np.testing.assert_array_equal(x.numpy(), np.where(M3, 0.0, A))


def test_only_leading_multi_dim_masks_merge():
    a = tj.tensor(A)
    assert flat_mask(a, tj.tensor(M2)) is not None
    assert flat_mask(a, (tj.tensor(M3),)) is not None
    assert flat_mask(a, tj.tensor(M2[0])) is None            # (one dim: nothing to merge)
    assert flat_mask(a, tj.tensor(M3[0])) is None            # (not the leading dims)
    assert flat_mask(a, (slice(None), tj.tensor(M3[0]))) is None


def test_mismatched_mask_raises():
    with pytest.raises(IndexError, match="shape of the mask"):
        tj.tensor(A)[tj.tensor(M3[:, :4])]
    x = tj.tensor(A)
    with pytest.raises(IndexError, match="shape of the mask"):
        x[tj.tensor(M3[:, :4])] = 1.0
    np.testing.assert_array_equal(x.numpy(), A)


def test_a_list_index_kept_between_calls_reads_and_writes_as_pytorch():
    torch = pytest.importorskip("torch")
    x = np.arange(24.0).reshape(2, 3, 4)
    for key in ([[0, -1]], (Ellipsis, [-1]), (slice(None), [2, 0], [1, 3]), [[1, 0], [2, 2]]):
        for _ in range(3):   # the first call keeps the spec, the others take the kept list
            got, want = tj.tensor(x)[key], torch.tensor(x)[key]
            np.testing.assert_array_equal(got.numpy(), want.numpy())
            got.numpy()[...] = -1.0   # a copy: the next call still reads x
            y, yt = tj.tensor(x), torch.tensor(x)
            y[key], yt[key] = 5.0, 5.0
            np.testing.assert_array_equal(y.numpy(), yt.numpy())
    assert index_keys._kept_key(tj.tensor(x), (Ellipsis, [-1])) == (3, Ellipsis, (list, (-1,)))
    assert index_keys._kept_key(tj.tensor(x), ([0, True],)) is None   # (a bool: no key)
    assert index_keys._kept_key(tj.tensor(x), (list(range(17)),)) is None   # (long: data)
    with pytest.raises(IndexError):
        tj.tensor(x)[..., [4]]
    with pytest.raises(IndexError):
        tj.tensor(x)[..., [4]]   # (the same error from the kept spec)
