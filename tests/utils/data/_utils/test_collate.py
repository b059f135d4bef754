"""``_utils.collate.collate`` with a ``collate_fn_map``: PyTorch's documented way to
collate a type of one's own while keeping the default collation for the rest."""
import collections

import numpy as np
import pytest

import tracejit as tj
from tracejit.utils.data._utils import collate as tj_collate

torch = pytest.importorskip("torch")
from torch.utils.data._utils import collate as pt_collate  # noqa: E402

Point = collections.namedtuple("Point", "x y")


class Box:
    def __init__(self, v):
        self.v = v


def _batch(m):
    return [{"img": m.tensor([[1.0, 2.0], [3.0, 4.0]]) * (i + 1), "label": i, "w": 0.5 * i,
             "name": f"s{i}", "arr": np.arange(3) + i, "pt": Point(i, np.float32(i)), "box": Box(i),
             "pair": (i, [float(i), 2.0])} for i in range(3)]


def _plain(x):
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x).__name__, [_plain(v) for v in x]
    if hasattr(x, "numpy"):
        return str(x.dtype).split(".")[-1], x.tolist()
    return x


def test_a_custom_type_by_the_map_and_the_default_for_the_rest():
    out = {}
    for name, m, c in (("tj", tj, tj_collate), ("pt", torch, pt_collate)):
        def box_fn(batch, *, collate_fn_map=None, m=m):
            return m.tensor([b.v for b in batch]) * 10
        fmap = dict(c.default_collate_fn_map)
        fmap[Box] = box_fn
        out[name] = _plain(c.collate(_batch(m), collate_fn_map=fmap))
    assert out["tj"] == out["pt"]
    assert out["tj"]["box"] == ("int64", [0, 10, 20])


def test_a_type_without_a_function_is_a_type_error():
    with pytest.raises(TypeError, match="Box"):
        tj_collate.collate([Box(1), Box(2)], collate_fn_map=tj_collate.default_collate_fn_map)
    with pytest.raises(RuntimeError, match="equal size"):
        tj_collate.collate([[1, 2], [3]], collate_fn_map=tj_collate.default_collate_fn_map)
