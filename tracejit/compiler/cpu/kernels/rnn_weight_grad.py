"""A recurrent layer's hidden weight gradient dW = sum_t dg_t h_{t-1}^T in blocks of steps,
computed by the worker pool's threads while the backward loop (one thread) produces dg_t.

Why: where the load policy gives one thread, the split loop (which adds dW itself) does
not run, and dW would be the loop thread's too (~8 ms for the LSTM LM). Here the pool's
threads multiply each block of steps as soon as the loop wrote it; the launcher takes the
blocks left when its loop ends. Blocks are smaller towards the end (`CUTS`) and added in
one fixed order, so the bits do not depend on who did a block or how many threads ran.
"""
from __future__ import annotations

import itertools
import threading
import time

import numpy as np

from ..runtime import coreshare
from ..runtime import sharepool
from ....ops.lstm_prim import hprev_steps
from ....threads import blas_threads_set

__all__ = ["blocks", "block_product", "hprev_steps", "weight_grad_alongside", "CUTS"]

# Block ends as fractions of the loop's units: the pool's threads keep up with the loop, and the
# last block, ready only when the loop ends, is 1/16 of the product.
CUTS = (0.375, 0.625, 0.8125, 0.9375, 1.0)

# How long a part waits between looks at the loop's progress: a step of the LSTM LM's loop
# takes ~180 us.
POLL_S = 5e-5


def blocks(L: int) -> list:
    """The loop units (u0, u1) of each block, in the loop's order, none empty."""
    out, u0 = [], 0
    for c in CUTS:
        u1 = max(u0, min(L, int(round(c * L))))
        if u1 > u0:
            out.append((u0, u1))
            u0 = u1
    if u0 < L:
        out.append((u0, L))
    return out


def _times(L: int, u0: int, u1: int, reverse: bool) -> tuple:
    # the time steps [t0, t1) of units u0..u1-1 (the loop runs backward in time: unit r is
    # step L - 1 - r of a forward layer, step r of a reverse one)
    return (u0, u1) if reverse else (L - u1, L - u0)


def block_product(G2, Z, h0, t0: int, t1: int, reverse: bool, out) -> None:
    """out = sum over t0 <= t < t1 of dg_t h_prev(t)^T: G2 (L*N, G*H) every step's gate
    gradient as rows, the h_prev from `hprev_steps`."""
    H, N = h0.shape
    hb = hprev_steps(np, Z, h0, t0, t1, reverse)
    np.matmul(G2[t0 * N:t1 * N].T, hb.reshape(H, (t1 - t0) * N).T, out=out)


def weight_grad_alongside(loop, sync, G2, Z, h0, reverse: bool, out, shares: int) -> None:
    """``loop()`` (a backward loop kernel that adds 1 to ``sync[0]`` after each unit) on this
    thread, and out (G*H, H) = dW from its G2 in blocks: `shares` - 1 threads of the worker
    pool take each block as soon as the loop wrote it, this thread the blocks left after the
    loop; everything here when `shares` is 1 or another launch holds the pool."""
    L = Z.shape[0]
    if L == 0:
        loop()
        out[...] = 0
        return
    blks = blocks(L)
    nb = len(blks)
    parts = np.empty((nb,) + out.shape, dtype=out.dtype)
    failed = []
    # blocks are added into out in their order as soon as each and all before it are done,
    # so the sum's order (its bits) is fixed whoever did a block
    fold = threading.Lock()
    done = [False] * nb
    folded = [0]

    def compute(p):
        t0, t1 = _times(L, blks[p][0], blks[p][1], reverse)
        block_product(G2, Z, h0, t0, t1, reverse, parts[p])
        with fold:
            done[p] = True
            while folded[0] < nb and done[folded[0]]:
                k = folded[0]
                if k == 0:
                    out[...] = parts[0]
                else:
                    np.add(out, parts[k], out=out)
                folded[0] = k + 1

    def share(next_part, t, nt):
        if t == 0:
            try:
                loop()
            except BaseException:
                failed.append(True)
                raise
        while True:
            p = next_part()              # itertools.count's __next__: atomic under the GIL
            if p >= nb:
                return
            while sync[0] < blks[p][1]:  # the loop has not written the block's steps yet
                if failed:
                    return
                time.sleep(POLL_S)
            compute(p)

    nt = min(shares, nb + 1)
    if nt < 2 or not sharepool.try_launch():
        loop()
        coreshare.adapt_blas()
        for p in range(nb):
            compute(p)
        return
    try:
        with blas_threads_set(1):
            sharepool.run_shares(share, (itertools.count().__next__,), (), nt)
    finally:
        sharepool.end_launch()
    assert folded[0] == nb
