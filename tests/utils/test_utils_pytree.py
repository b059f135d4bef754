"""tracejit.utils._pytree against torch.utils._pytree: the same leaves, the same rebuilt
trees, the same errors, and registered container types."""
from __future__ import annotations

import collections
import dataclasses

import pytest

import tracejit as tj
from tracejit.utils import _pytree as ours

torch = pytest.importorskip("torch")
theirs = torch.utils._pytree

Point = collections.namedtuple("Point", "x y")


def _tree():
    return {"a": [1, (2, None)], "b": Point(3, [4]), "c": collections.OrderedDict(q=5, p=(6,)),
            "d": collections.defaultdict(list, {"k": 7}), "e": collections.deque([8, 9], maxlen=3), "f": ()}


def test_flatten_unflatten_and_map_match_torch():
    tree = _tree()
    leaves, spec = ours.tree_flatten(tree)
    want, want_spec = theirs.tree_flatten(tree)
    assert leaves == want == [1, 2, None, 3, 4, 5, 6, 7, 8, 9]
    assert (spec.num_leaves, spec.num_nodes) == (want_spec.num_leaves, want_spec.num_nodes)
    back = ours.tree_unflatten([x * 10 if x else x for x in leaves], spec)
    assert back == theirs.tree_unflatten([x * 10 if x else x for x in want], want_spec)
    assert type(back["b"]) is Point and type(back["c"]) is collections.OrderedDict
    assert back["d"].default_factory is list and back["e"].maxlen == 3
    inc = lambda x: x if x is None else x + 1  # noqa: E731
    assert ours.tree_map(inc, tree) == theirs.tree_map(inc, tree)
    assert ours.tree_map(lambda a, b: (a, b), [1, (2, 3)], [4, (5, 6)]) == [(1, 4), ((2, 5), (3, 6))]
    assert ours.tree_leaves(None) == theirs.tree_leaves(None) == [None]
    assert ours.tree_structure(3).is_leaf() and ours.tree_structure([1, 2]) == ours.tree_structure([3, 4])
    assert ours.tree_structure([1, 2]) != ours.tree_structure((1, 2))
    assert ours.tree_leaves([1, [2, 3]], is_leaf=lambda x: isinstance(x, list) and len(x) == 2 and x[0] == 2) == \
        [1, [2, 3]]


def test_map_only_and_predicates_on_tensors():
    t = tj.ones(2)
    tree = {"w": t, "n": 3, "s": [t * 2, "x"]}
    doubled = ours.tree_map_only(tj.Tensor, lambda v: v * 2, tree)
    assert doubled["n"] == 3 and doubled["s"][1] == "x" and doubled["s"][0].tolist() == [4.0, 4.0]
    assert ours.tree_any_only(tj.Tensor, lambda v: v.sum().item() == 4, tree)
    assert not ours.tree_all(lambda v: isinstance(v, tj.Tensor), tree)
    seen = []
    assert ours.tree_map_(seen.append, [1, (2,)]) == [1, (2,)] and seen == [1, 2]


def test_errors_match_torch():
    spec = ours.tree_structure([1, (2, 3)])
    with pytest.raises(ValueError, match="`leaves` has length 2 but the spec refers to a pytree that holds 3"):
        ours.tree_unflatten([1, 2], spec)
    for lib in (ours, theirs):
        with pytest.raises(ValueError, match="Node arity mismatch; expected 2, but got 1"):
            lib.tree_map(lambda a, b: a + b, [1, 2], [1])
    with pytest.raises(TypeError, match="Expected `treespec` to be instance of TreeSpec"):
        ours.tree_unflatten([1], [1])
    with pytest.raises(ValueError, match="already registered as pytree node"):
        ours.register_pytree_node(list, lambda x: (x, None), lambda xs, _: xs)


def test_registered_type_flattens_as_torch():
    @dataclasses.dataclass
    class Pair:
        left: object
        right: object

    for lib in (ours, theirs):
        lib.register_pytree_node(Pair, lambda p: ([p.left, p.right], None), lambda xs, _: Pair(*xs))
        leaves, spec = lib.tree_flatten([Pair(1, Pair(2, 3))])
        assert leaves == [1, 2, 3]
        assert lib.tree_unflatten([4, 5, 6], spec) == [Pair(4, Pair(5, 6))]
    assert tj.utils._pytree is ours
