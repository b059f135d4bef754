"""default_collate's handling of string and nested fields, against PyTorch."""
import collections

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
