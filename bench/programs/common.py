"""What every program shares: parameters and data drawn with numpy by name.

A program runs under ``torch`` or under tracejit swapped in for it (torchswap.py); both
must start from the same weights and see the same batches, so every parameter is
overwritten after construction with a value drawn from a seed made of the program's and
the parameter's state_dict names, and every batch (inputs, targets, noise a program would
draw with its framework's generator) comes from the program's numpy generator.
"""
from __future__ import annotations

import zlib

import numpy as np
import torch


def rng(*names: str) -> np.random.Generator:
    """A numpy generator seeded by `names` (the same stream in every framework)."""
    return np.random.default_rng(zlib.crc32("/".join(names).encode()))


def param_value(program: str, key: str, shape: tuple) -> np.ndarray:
    """The shared initial value of parameter `key` (float32): uniform in +-1/sqrt(fan_in),
    PyTorch's default for Linear/Conv/recurrent weights (fan_in: the product of all dims
    but the first; a 1-D parameter its length), except a normalization layer's scale (a
    1-D ``weight``), which is 1 +- 0.1 as a trained one might be."""
    r = rng(program, key)
    if len(shape) == 1 and key.endswith("weight"):
        return (1.0 + r.uniform(-0.1, 0.1, shape)).astype(np.float32)
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
    bound = 1.0 / np.sqrt(max(fan_in, 1))
    return r.uniform(-bound, bound, shape).astype(np.float32)


def load_params(program: str, *modules) -> None:
    """Overwrite every parameter of `modules` with its shared value, by state_dict name
    (prefixed by the module's class name when there are several)."""
    with torch.no_grad():
        for m in modules:
            prefix = type(m).__name__ + "." if len(modules) > 1 else ""
            for key, p in m.named_parameters():
                value = param_value(program, prefix + key, tuple(p.shape))
                p.copy_(torch.from_numpy(value).to(p.dtype))


def tensor_params(program: str, **shapes) -> dict:
    """Leaf tensors that require grad, for programs that keep raw parameter tensors."""
    return {k: torch.from_numpy(param_value(program, k, s)).requires_grad_()
            for k, s in shapes.items()}


def random_graph(program: str, nodes: int, edges: int, features: int, classes: int):
    """A citation-style graph: `edges` undirected edges (both directions listed) plus a
    self-loop per node as a (2, E) int64 edge list, sparse binary bag-of-words features
    row-normalized (nodes, features), labels, and the first 140 nodes as training set."""
    r = rng(program, "graph")
    src = r.integers(0, nodes, edges)
    dst = (src + 1 + r.integers(0, nodes - 1, edges)) % nodes   # no self-loops yet
    loops = np.arange(nodes)
    edge_index = np.stack([np.concatenate([src, dst, loops]),
                           np.concatenate([dst, src, loops])]).astype(np.int64)
    x = (r.random((nodes, features)) < 0.0127).astype(np.float32)
    x /= np.maximum(x.sum(1, keepdims=True), 1.0)
    y = r.integers(0, classes, nodes).astype(np.int64)
    train = np.arange(140, dtype=np.int64)
    return (torch.from_numpy(x), torch.from_numpy(edge_index), torch.from_numpy(y),
            torch.from_numpy(train))
