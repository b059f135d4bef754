"""Checkpoints that a restarted job resumes from exactly (``tracejit.distributed.checkpoint``).

`save_checkpoint` is called by every rank: rank 0 writes the given state (state dicts,
counters) together with every rank's random-number state, atomically (a temporary file
renamed over the old one, so a rank killed while writing never leaves half a file), and
all ranks leave only once it is on disk. `load_checkpoint` returns the state, or None
when there is none yet, and puts back this rank's random-number state (tracejit's
generator, numpy's global one and Python's ``random``). A run resumed this way (model,
optimizer, sampler position, random state) takes the same steps as one never stopped.
Without a process group both work on the one process.
"""
from __future__ import annotations

import os
import random
from typing import Any, Dict, Optional

import numpy as np

__all__ = ["save_checkpoint", "load_checkpoint", "rng_state", "set_rng_state"]


def rng_state() -> Dict[str, Any]:
    """This process's random-number state: tracejit's generator, numpy's global one, Python's."""
    from ..ops.random import get_rng_state
    kind, key, pos, has_gauss, cached = np.random.get_state()
    # the key as int64: tracejit's file format stores no uint32
    return {"tracejit": get_rng_state(), "numpy": [kind, key.astype(np.int64), pos, has_gauss, cached],
            "python": random.getstate()}


def set_rng_state(state: Dict[str, Any]) -> None:
    from ..ops.random import set_rng_state as _set
    _set(state["tracejit"])
    kind, key, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(key).astype(np.uint32), pos, has_gauss, cached))
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))


def _group():
    from . import process_group as pg
    return pg._group


def save_checkpoint(path: str, **state: Any) -> None:
    """Every rank calls this; rank 0 writes ``state`` and all ranks' random states to `path`."""
    from ..serialization import save
    g = _group()
    rngs = g.world.allgather_obj(rng_state(), "save_checkpoint") if g is not None and g.size > 1 \
        else [rng_state()]
    if g is None or g.rank == 0:
        path = os.fspath(path)
        tmp = f"{path}.tmp{os.getpid()}"
        save({"state": state, "rng": rngs, "world_size": len(rngs)}, tmp)
        os.replace(tmp, path)
    if g is not None and g.size > 1:
        g.world.barrier("save_checkpoint (waiting for rank 0 to write)")


def load_checkpoint(path: str) -> Optional[Dict[str, Any]]:
    """The state `save_checkpoint` wrote (None if `path` does not exist); restores this rank's random state.

    In a world of another size than the one that saved, ranks beyond the saved ones keep
    their own random state.
    """
    from ..serialization import load
    path = os.fspath(path)
    if not os.path.exists(path):
        return None
    blob = load(path)
    g = _group()
    rank = g.rank if g is not None else 0
    if rank < len(blob["rng"]):
        set_rng_state(blob["rng"][rank])
    return blob["state"]
