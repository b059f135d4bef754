"""default_collate's handling of string and nested fields and of the layout of stacked samples,
against PyTorch."""
import collections

import numpy as np

import pytest

import tracejit as tj

torch = pytest.importorskip("torch")
from torch.utils.data import default_collate as t_collate  # noqa: E402

P = collections.namedtuple("P", "name x")


def _shape(v):
    if hasattr(v, "shape"):
        return ("tensor", tuple(v.shape), str(v.dtype).split(".")[-1])
    if isinstance(v, dict):
        return {k: _shape(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [_shape(x) for x in v])
    return v


@pytest.mark.parametrize("batch", [
    [(1.0, "a", [1, 2]), (2.0, "b", [3, 4])],
    [{"s": "a", "n": 1}, {"s": "b", "n": 2}],
    ["a", "b"],
    ("a", "b"),
    [P("a", 1.5), P("b", 2.5)],
])
def test_collate_structure_as_pytorch(batch):
    assert _shape(tj.utils.data.default_collate(batch)) == _shape(t_collate(batch))


@pytest.mark.parametrize("batch", [[1, 2.5], [True, False], [True, 2], [3, 4], [2.5, 1]])
def test_collate_python_numbers_as_pytorch(batch):
    got, want = tj.utils.data.default_collate(batch), t_collate(batch)
    assert _shape(got) == _shape(want)
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("data", [
    collections.OrderedDict(x=np.float32(2.5), y=np.arange(3)), [np.int16(3), (np.bool_(True), "s")],
])
def test_default_convert_numpy_scalars_and_mapping_type_as_pytorch(data):
    from torch.utils.data import default_convert as t_convert
    got, want = tj.utils.data.default_convert(data), t_convert(data)
    assert type(got) is type(want)
    assert _shape(got) == _shape(want)
    assert str(got).replace("tracejit", "torch") == str(want)


@pytest.mark.parametrize("layout", ["transposed", "channels_last"])
def test_collated_samples_are_row_major_as_pytorch(layout):
    got = []
    for m, collate in ((torch, t_collate), (tj, tj.utils.data.default_collate)):
        x = m.arange(48.0).reshape(1, 3, 4, 4)
        x = x[0].transpose(0, 2) if layout == "transposed" else x.to(memory_format=m.channels_last)[0]
        out = collate([x, x + 1])
        got.append((out.stride(), out.tolist()))
    assert got[1] == got[0]
