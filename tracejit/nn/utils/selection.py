"""Which k elements PyTorch's CPU ``topk`` returns when values tie at the cut.

``torch.topk`` on CPU picks its k elements with the C++ library's ``std::nth_element``
(introselect), or ``std::partial_sort`` (a heap select) when ``64 * k <= n``; neither is
stable, so among equal values the ones chosen depend on the algorithm's swaps. Pruning
turns that choice into a mask (which weights become zero), so ``prune`` asks this module
for PyTorch's set: without a tie at the cut any selection agrees, and numpy answers; with
one, the selection is replayed step for step (libstdc++'s algorithms) on integer ranks.
"""
from __future__ import annotations

import numpy as np

__all__ = ["topk_set"]


def topk_set(values: np.ndarray, k: int, largest: bool) -> np.ndarray:
    """Indices (ascending) of the `k` elements of the 1-D `values` that PyTorch's CPU topk
    selects; NaN counts as the largest value, as there."""
    values = np.asarray(values).ravel()
    n = values.size
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k >= n:
        return np.arange(n, dtype=np.int64)
    # ranks: equal values share one, NaN ranks above everything; "less" is then integer <
    uniq, rank = np.unique(values, return_inverse=True)
    rank = rank.astype(np.int64).ravel()
    if largest:
        rank = -rank
    order = np.sort(rank)
    cut = order[k - 1]
    if order[k] != cut:         # no tie across the cut: the set is every rank <= cut
        return np.flatnonzero(rank <= cut).astype(np.int64)
    keys = rank.tolist()
    idx = list(range(n))
    if k * 64 <= n:
        _heap_select(keys, idx, 0, k, n)
    else:
        _introselect(keys, idx, 0, k - 1, n, 2 * (n.bit_length() - 1))
    return np.sort(np.asarray(idx[:k], dtype=np.int64))


# Each routine below moves (key, index) pairs exactly as libstdc++'s namesake moves its
# elements, comparing keys with "<" only.

def _introselect(keys: list, idx: list, first: int, nth: int, last: int, depth: int) -> None:
    while last - first > 3:
        if depth == 0:
            _heap_select(keys, idx, first, nth + 1, last)
            _swap(keys, idx, first, nth)
            return
        depth -= 1
        cut = _partition_pivot(keys, idx, first, last)
        if cut <= nth:
            first = cut
        else:
            last = cut
    _insertion_sort(keys, idx, first, last)


def _swap(keys: list, idx: list, a: int, b: int) -> None:
    keys[a], keys[b] = keys[b], keys[a]
    idx[a], idx[b] = idx[b], idx[a]


def _partition_pivot(keys: list, idx: list, first: int, last: int) -> int:
    a, b, c = first + 1, first + (last - first) // 2, last - 1
    ka, kb, kc = keys[a], keys[b], keys[c]
    if ka < kb:
        med = b if kb < kc else (c if ka < kc else a)
    else:
        med = a if ka < kc else (c if kb < kc else b)
    _swap(keys, idx, first, med)
    pivot = keys[first]
    lo, hi = first + 1, last
    while True:
        while keys[lo] < pivot:
            lo += 1
        hi -= 1
        while pivot < keys[hi]:
            hi -= 1
        if not lo < hi:
            return lo
        _swap(keys, idx, lo, hi)
        lo += 1


def _insertion_sort(keys: list, idx: list, first: int, last: int) -> None:
    for i in range(first + 1, last):
        kv, iv = keys[i], idx[i]
        if kv < keys[first]:
            keys[first + 1:i + 1], idx[first + 1:i + 1] = keys[first:i], idx[first:i]
            keys[first], idx[first] = kv, iv
        else:
            j = i - 1
            while kv < keys[j]:
                keys[j + 1], idx[j + 1] = keys[j], idx[j]
                j -= 1
            keys[j + 1], idx[j + 1] = kv, iv


def _heap_select(keys: list, idx: list, first: int, middle: int, last: int) -> None:
    length = middle - first
    if length >= 2:                       # make_heap
        parent = (length - 2) // 2
        while True:
            _adjust_heap(keys, idx, first, parent, length, keys[first + parent], idx[first + parent])
            if parent == 0:
                break
            parent -= 1
    for i in range(middle, last):
        if keys[i] < keys[first]:         # pop_heap into i
            kv, iv = keys[i], idx[i]
            keys[i], idx[i] = keys[first], idx[first]
            _adjust_heap(keys, idx, first, 0, length, kv, iv)


def _adjust_heap(keys: list, idx: list, first: int, hole: int, length: int, kv, iv) -> None:
    top = child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if keys[first + child] < keys[first + child - 1]:
            child -= 1
        keys[first + hole], idx[first + hole] = keys[first + child], idx[first + child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        keys[first + hole], idx[first + hole] = keys[first + child - 1], idx[first + child - 1]
        hole = child - 1
    parent = (hole - 1) // 2                # push_heap
    while hole > top and keys[first + parent] < kv:
        keys[first + hole], idx[first + hole] = keys[first + parent], idx[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    keys[first + hole], idx[first + hole] = kv, iv
