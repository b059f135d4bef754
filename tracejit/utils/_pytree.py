"""``torch.utils._pytree``: flatten nested containers to leaves and a `TreeSpec`, rebuild
them, map over leaves, and register more container types (transformers registers its
``ModelOutput``). Tuples, lists, dicts, ``OrderedDict``, ``defaultdict``, ``deque`` and
namedtuples are containers; anything else (``None`` included) is a leaf.

Separate from tracejit.jit.pytree, which compiled calls use on every argument: that one
keeps key types in its spec for guards and knows no registered types."""
from __future__ import annotations

import collections
from typing import Any, Callable, NamedTuple, Optional

__all__ = ["TreeSpec", "LeafSpec", "register_pytree_node", "tree_flatten", "tree_unflatten", "tree_leaves",
           "tree_structure", "tree_iter", "tree_is_leaf", "tree_map", "tree_map_", "tree_map_only",
           "tree_map_only_", "tree_all", "tree_any", "tree_all_only", "tree_any_only", "is_namedtuple",
           "is_namedtuple_class", "is_namedtuple_instance", "SUPPORTED_NODES"]


class NodeDef(NamedTuple):
    type: type
    flatten_fn: Callable
    unflatten_fn: Callable


SUPPORTED_NODES: dict = {}


def register_pytree_node(cls: type, flatten_fn: Callable, unflatten_fn: Callable, *,
                         serialized_type_name: Optional[str] = None, **_options: Any) -> None:
    """Make `cls` a container: ``flatten_fn(x) -> (children, context)``,
    ``unflatten_fn(children, context) -> x``."""
    if not isinstance(cls, type):
        raise TypeError(f"register_pytree_node: cls must be a type, got {cls!r}")
    if cls in SUPPORTED_NODES:
        raise ValueError(f"{cls} is already registered as pytree node.")
    SUPPORTED_NODES[cls] = NodeDef(cls, flatten_fn, unflatten_fn)


def _register_pytree_node(cls, flatten_fn, unflatten_fn, to_str_fn=None, maybe_from_str_fn=None, **kw) -> None:
    """The older name (and its positional string functions, unused here)."""
    register_pytree_node(cls, flatten_fn, unflatten_fn, **kw)


def is_namedtuple_class(cls: type) -> bool:
    return isinstance(cls, type) and issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple)


def is_namedtuple_instance(obj: Any) -> bool:
    return is_namedtuple_class(type(obj))


def is_namedtuple(obj: Any) -> bool:
    return is_namedtuple_class(obj if isinstance(obj, type) else type(obj))


register_pytree_node(tuple, lambda t: (list(t), None), lambda xs, _: tuple(xs))
register_pytree_node(list, lambda t: (list(t), None), lambda xs, _: list(xs))
register_pytree_node(dict, lambda d: (list(d.values()), list(d)), lambda xs, keys: dict(zip(keys, xs)))
register_pytree_node(collections.OrderedDict, lambda d: (list(d.values()), list(d)),
                     lambda xs, keys: collections.OrderedDict(zip(keys, xs)))
register_pytree_node(collections.defaultdict, lambda d: (list(d.values()), [d.default_factory, list(d)]),
                     lambda xs, c: collections.defaultdict(c[0], zip(c[1], xs)))
register_pytree_node(collections.deque, lambda d: (list(d), d.maxlen),
                     lambda xs, maxlen: collections.deque(xs, maxlen=maxlen))
# (keyed by the namedtuple factory, as torch's: one node type for every namedtuple class)
SUPPORTED_NODES[collections.namedtuple] = NodeDef(collections.namedtuple, lambda t: (list(t), type(t)),
                                                  lambda xs, cls: cls(*xs))


def _node_type(tree: Any) -> type:
    return collections.namedtuple if is_namedtuple_instance(tree) else type(tree)


def tree_is_leaf(tree: Any, is_leaf: Optional[Callable] = None) -> bool:
    return (is_leaf is not None and is_leaf(tree)) or _node_type(tree) not in SUPPORTED_NODES


class TreeSpec:
    """A tree's structure: its node `type` (None for a leaf), the `context` its flatten
    function returned, and the children's specs."""

    def __init__(self, type: Optional[type], context: Any, children_specs: list) -> None:  # noqa: A002
        self.type, self.context, self.children_specs = type, context, list(children_specs)
        self.num_children = len(self.children_specs)
        self.num_leaves = 1 if type is None else sum(c.num_leaves for c in self.children_specs)
        self.num_nodes = 1 + sum(c.num_nodes for c in self.children_specs)

    def is_leaf(self) -> bool:
        return self.type is None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TreeSpec) and (self.type, self.context, self.children_specs) == \
            (other.type, other.context, other.children_specs)

    __hash__ = None  # type: ignore[assignment]   (mutable context, as torch's)

    def __repr__(self) -> str:
        if self.type is None:
            return "*"
        name = "namedtuple" if self.type is collections.namedtuple else self.type.__name__
        return f"TreeSpec({name}, {self.context}, [{', '.join(map(repr, self.children_specs))}])"

    def unflatten(self, leaves) -> Any:
        leaves = list(leaves)
        if len(leaves) != self.num_leaves:
            raise ValueError(f"treespec.unflatten(leaves): `leaves` has length {len(leaves)} but the spec "
                             f"refers to a pytree that holds {self.num_leaves} items ({self}).")
        return self._build(iter(leaves))

    def _build(self, it) -> Any:
        if self.type is None:
            return next(it)
        return SUPPORTED_NODES[self.type].unflatten_fn([c._build(it) for c in self.children_specs], self.context)

    def flatten_up_to(self, tree: Any) -> list:
        """`tree`'s subtrees at this spec's leaves (`tree` has this structure above them)."""
        out: list = []
        self._up_to(tree, out)
        return out

    def _up_to(self, tree, out) -> None:
        if self.type is None:
            out.append(tree)
            return
        if _node_type(tree) is not self.type:
            raise ValueError(f"Node type mismatch; expected {self.type}, but got {type(tree)}.")
        children, context = SUPPORTED_NODES[self.type].flatten_fn(tree)
        if len(children) != self.num_children:
            raise ValueError(f"Node arity mismatch; expected {self.num_children}, but got {len(children)}.")
        if context != self.context:
            raise ValueError(f"Node context mismatch for custom node type {self.type}.")
        for c, sub in zip(self.children_specs, children):
            c._up_to(sub, out)


class LeafSpec(TreeSpec):
    def __init__(self) -> None:
        super().__init__(None, None, [])


def _flatten(tree, leaves: list, is_leaf) -> TreeSpec:
    if tree_is_leaf(tree, is_leaf):
        leaves.append(tree)
        return LeafSpec()
    node_type = _node_type(tree)
    children, context = SUPPORTED_NODES[node_type].flatten_fn(tree)
    return TreeSpec(node_type, context, [_flatten(c, leaves, is_leaf) for c in children])


def tree_flatten(tree: Any, is_leaf: Optional[Callable] = None) -> tuple:
    """-> (leaves, spec); ``tree_unflatten(leaves, spec)`` rebuilds `tree`."""
    leaves: list = []
    return leaves, _flatten(tree, leaves, is_leaf)


def tree_unflatten(leaves, treespec: TreeSpec) -> Any:
    if not isinstance(treespec, TreeSpec):
        raise TypeError(f"tree_unflatten(leaves, treespec): Expected `treespec` to be instance of "
                        f"TreeSpec but got item of type {type(treespec)}.")
    return treespec.unflatten(leaves)


def tree_leaves(tree: Any, is_leaf: Optional[Callable] = None) -> list:
    return tree_flatten(tree, is_leaf)[0]


def tree_iter(tree: Any, is_leaf: Optional[Callable] = None):
    return iter(tree_leaves(tree, is_leaf))


def tree_structure(tree: Any, is_leaf: Optional[Callable] = None) -> TreeSpec:
    return tree_flatten(tree, is_leaf)[1]


def tree_map(func: Callable, tree: Any, *rests: Any, is_leaf: Optional[Callable] = None) -> Any:
    """`tree` with each leaf ``func(leaf, *the same place in each of rests)``."""
    leaves, spec = tree_flatten(tree, is_leaf)
    flat = [leaves] + [spec.flatten_up_to(r) for r in rests]
    return spec.unflatten(func(*xs) for xs in zip(*flat))


def tree_map_(func: Callable, tree: Any, *rests: Any, is_leaf: Optional[Callable] = None) -> Any:
    """`func` called on each leaf (and its partners in `rests`) for its effect; -> `tree`."""
    leaves, spec = tree_flatten(tree, is_leaf)
    for xs in zip(leaves, *(spec.flatten_up_to(r) for r in rests)):
        func(*xs)
    return tree


def _only(type_or_types_or_pred, func: Callable) -> Callable:
    if isinstance(type_or_types_or_pred, (type, tuple)) or hasattr(type_or_types_or_pred, "__args__"):
        pred = lambda x: isinstance(x, type_or_types_or_pred)  # noqa: E731
    elif callable(type_or_types_or_pred):
        pred = type_or_types_or_pred
    else:
        raise TypeError(f"expected a type, a tuple of types or a predicate, got {type_or_types_or_pred!r}")
    return lambda x: func(x) if pred(x) else x


def tree_map_only(type_or_types_or_pred, /, func: Callable, tree: Any, is_leaf: Optional[Callable] = None) -> Any:
    """`tree` with `func` applied to the leaves of those types (or passing the predicate)."""
    return tree_map(_only(type_or_types_or_pred, func), tree, is_leaf=is_leaf)


def tree_map_only_(type_or_types_or_pred, /, func: Callable, tree: Any, is_leaf: Optional[Callable] = None) -> Any:
    return tree_map_(_only(type_or_types_or_pred, func), tree, is_leaf=is_leaf)


def tree_all(pred: Callable, tree: Any, is_leaf: Optional[Callable] = None) -> bool:
    return all(map(pred, tree_leaves(tree, is_leaf)))


def tree_any(pred: Callable, tree: Any, is_leaf: Optional[Callable] = None) -> bool:
    return any(map(pred, tree_leaves(tree, is_leaf)))


def tree_all_only(type_or_types, pred: Callable, tree: Any, is_leaf: Optional[Callable] = None) -> bool:
    return all(pred(x) for x in tree_leaves(tree, is_leaf) if isinstance(x, type_or_types))


def tree_any_only(type_or_types, pred: Callable, tree: Any, is_leaf: Optional[Callable] = None) -> bool:
    return any(pred(x) for x in tree_leaves(tree, is_leaf) if isinstance(x, type_or_types))
