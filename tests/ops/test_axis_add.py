"""ops/axis_add.py: an index add along one dim with repeated positions (padding's and nearest
upsampling's backward) runs as slice adds, bitwise np.add.at's result; other keys, indexes out
of range and indexes with many repeats of one position are left to np.add.at."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.ops.axis_add import _pieces, add_along_axis

torch = pytest.importorskip("torch", reason="compares with PyTorch")

_INDEXES = {
    "reflect": np.r_[2:0:-1, 0:9, 7:5:-1],
    "replicate": np.r_[[0, 0, 0], 0:9, [8, 8, 8]],
    "circular": np.r_[7:9, 0:9, 0:2],
    "nearest x2": np.repeat(np.arange(9), 2),
    "nearest x3, negative": np.repeat(np.arange(9), 3) - 9,
    "scattered repeats": np.array([3, 1, 3, 0, 8, 1, 3, 5, 2, 2, 7]),
}


@pytest.mark.parametrize("dim", [0, 1, 2])
@pytest.mark.parametrize("name", sorted(_INDEXES))
def test_repeated_positions_add_as_np_add_at(name, dim):
    rng = np.random.default_rng(3)
    shape = [4, 5, 6]
    shape[dim] = 9
    idx = _INDEXES[name]
    key = (slice(None),) * dim + (idx,)
    base = rng.standard_normal(shape).astype(np.float32)   # (not zeros: the order of the adds shows)
    v = rng.standard_normal(base[key].shape).astype(np.float32) * 1e3
    want = base.copy()
    np.add.at(want, key, v)
    got = base.copy()
    assert add_along_axis(got, key, v)
    assert got.tobytes() == want.tobytes()


def test_each_index_takes_few_slice_adds():
    kinds = {name: [type(k).__name__ for k, _ in _pieces(idx % 9)] for name, idx in _INDEXES.items()}
    assert kinds["reflect"] == ["slice"] * 3
    assert kinds["replicate"] == ["slice"] * 7     # three edge copies each side, the run between
    assert kinds["circular"] == ["slice"] * 3
    assert kinds["nearest x2"] == ["slice"] * 2
    assert kinds["nearest x3, negative"] == ["slice"] * 3
    assert _pieces(_INDEXES["scattered repeats"])[0][0].__class__ is slice   # short runs first
    assert [type(k).__name__ for k, _ in _pieces(np.array([3, 1, 3, 0, 8, 1, 3, 5, 2, 2, 7] * 3))] == ["ndarray"] * 9
    # (rounds where runs would take more than 16 slices: 3 is there nine times)


@pytest.mark.parametrize("key", [
    (np.array([0, 1, 9]),),                     # out of range: np.add.at raises numpy's error
    (np.zeros(40, np.int64),),                  # one position 40 times: np.add.at's loop
    (slice(1, 3), np.array([0, 0, 1])),         # a partial slice
    (np.array([0, 0]), np.array([1, 1])),       # two index arrays
    (np.array([[0, 0], [1, 1]]),),              # a 2-D index
])
def test_other_keys_are_left_to_np_add_at(key):
    a = np.zeros((9, 4), np.float32)
    v = np.ones(np.zeros((9, 4))[key].shape if not isinstance(key[0], np.ndarray) or key[0].max() < 9
                else (3, 4), np.float32)
    assert not add_along_axis(a, key, v)
    assert not a.any()


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_padding_gradient_matches_pytorch(mode):
    x = np.random.default_rng(4).standard_normal((2, 3, 7, 6)).astype(np.float32)
    g = np.random.default_rng(5).standard_normal((2, 3, 7 + 3, 6 + 5)).astype(np.float32)
    tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    torch.nn.functional.pad(tx, (2, 3, 1, 2), mode=mode).backward(torch.tensor(g))
    tj.nn.functional.pad(jx, (2, 3, 1, 2), mode=mode).backward(tj.tensor(g))
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_nearest_upsampling_gradient_matches_pytorch():
    x = np.random.default_rng(6).standard_normal((2, 3, 5, 4)).astype(np.float32)
    tx, jx = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    ty = torch.nn.functional.interpolate(tx, scale_factor=3, mode="nearest")
    jy = tj.nn.functional.interpolate(jx, scale_factor=3, mode="nearest")
    g = np.random.default_rng(7).standard_normal(tuple(ty.shape)).astype(np.float32)
    ty.backward(torch.tensor(g))
    jy.backward(tj.tensor(g))
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)
