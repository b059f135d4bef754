"""searchsorted and bucketize against PyTorch: sides, sorter, batched sequences, int32
results, and the errors for contradicting or misshaped arguments."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import ShapeError

torch = pytest.importorskip("torch", reason="compares with PyTorch")

SEQ = [1.0, 3.0, 3.0, 5.0, 7.0]
VALS = [[0.0, 3.0, 6.0], [7.0, 8.0, 3.0]]
CASES = {
    "left": lambda m: m.searchsorted(m.tensor(SEQ), m.tensor(VALS)),
    "right": lambda m: m.searchsorted(m.tensor(SEQ), m.tensor(VALS), right=True),
    "side": lambda m: m.searchsorted(m.tensor(SEQ), m.tensor(VALS), side="right", out_int32=True),
    "sorter": lambda m: m.searchsorted(m.tensor([5.0, 1.0, 7.0, 3.0]), m.tensor([2.0, 6.0]),
                                       sorter=m.tensor([1, 3, 0, 2])),
    "batched": lambda m: m.searchsorted(m.tensor([[1.0, 2.0, 4.0], [0.0, 5.0, 9.0]]), m.tensor([[3.0], [6.0]])),
    "scalar": lambda m: m.searchsorted(m.tensor(SEQ), m.tensor(4.0)),
    "bucketize": lambda m: m.bucketize(m.tensor(VALS), m.tensor(SEQ)),
    "bucketize right": lambda m: m.bucketize(m.tensor(VALS), m.tensor(SEQ), right=True, out_int32=True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_same_indices_as_pytorch(case):
    got, ref = CASES[case](tj), CASES[case](torch)
    assert str(got.dtype).split(".")[-1] == str(ref.dtype).split(".")[-1]
    assert got.tolist() == ref.tolist()


def test_bad_arguments_name_the_culprit():
    with pytest.raises(ShapeError, match="boundaries must be 1-D"):
        tj.bucketize(tj.ones(2), tj.ones(2, 2))
    with pytest.raises(ValueError, match="contradict"):
        tj.searchsorted(tj.tensor(SEQ), tj.tensor(2.0), right=True, side="left")
    with pytest.raises(ShapeError, match="sorter"):
        tj.searchsorted(tj.tensor(SEQ), tj.tensor(2.0), sorter=tj.tensor([0, 1]))


def test_cummax_and_cummin_of_a_0d_tensor_give_it_at_index_0():
    for fn in (tj.cummax, tj.cummin):
        for dim in (0, -1):
            values, indices = fn(tj.tensor(3.5), dim)
            assert values.shape == () and values.item() == 3.5 and indices.item() == 0
    with pytest.raises(IndexError, match="dim 1"):
        tj.cummax(tj.tensor(3.0), 1)


def test_any_and_all_of_uint8_give_uint8_as_pytorch():
    torch = pytest.importorskip("torch")
    for m in (tj, torch):
        a = m.tensor([[0, 3], [1, 2]], dtype=m.uint8)
        outs = [a.any(), a.all(), m.any(a, 1), m.all(a, dim=0, keepdim=True), m.tensor([], dtype=m.uint8).all()]
        assert [o.dtype for o in outs] == [m.uint8] * 5
        assert [o.tolist() for o in outs] == [1, 0, [1, 1], [[0, 1]], 1]
    assert tj.tensor([0, 2]).any().dtype == tj.bool
