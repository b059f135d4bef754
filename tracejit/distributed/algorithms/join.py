"""`Join`: training on uneven inputs (``torch.distributed.algorithms.join``'s semantics).

Ranks that run out of inputs first *join*: in the context's ``__exit__`` they loop,
shadowing the collectives the ranks still training run in each iteration, until every
rank has joined. Each iteration of a rank still training announces itself with an
all-reduce of 1 (`Join.notify_join_context`, called by the first joinable, e.g. in
DistributedDataParallel's forward); a joined rank contributes 0 to the same all-reduce,
so a sum of 0 means every rank has joined. Between those counts each joinable's
`JoinHook.main_hook` matches one iteration's collectives; at the end
``post_hook(is_last_joiner)`` lets each joinable settle (DDP copies the model of the
last rank to join to every rank). ``throw_on_early_termination=True`` instead raises on
every rank as soon as one has run out. The counts run on a communicator of their own.
"""
from __future__ import annotations

from typing import Any, List, Optional

import numpy as np

from ..collectives import Work

__all__ = ["Join", "Joinable", "JoinHook"]


class JoinHook:
    """What a joined rank runs for one joinable: ``main_hook`` per shadowed iteration, then ``post_hook``."""

    def main_hook(self) -> None:
        """Match the collectives one training iteration of this joinable runs."""

    def post_hook(self, is_last_joiner: bool) -> None:
        """Run once every rank has joined (``is_last_joiner``: this rank was among the last)."""


class _JoinConfig:
    __slots__ = ("enable", "throw_on_early_termination", "is_first_joinable")

    def __init__(self, enable: bool = False, throw_on_early_termination: bool = False,
                 is_first_joinable: bool = False):
        self.enable = enable
        self.throw_on_early_termination = throw_on_early_termination
        self.is_first_joinable = is_first_joinable


class Joinable:
    """A class whose per-iteration collectives a `Join` context can shadow on joined ranks."""

    def join_hook(self, **kwargs) -> JoinHook:
        raise NotImplementedError(f"{type(self).__name__} must define join_hook()")

    @property
    def join_device(self):
        from ...device import device
        return device("cpu")

    @property
    def join_process_group(self):
        from .. import process_group
        return process_group._group

    def _get_join_config(self) -> _JoinConfig:
        cfg = self.__dict__.get("_join_config")
        return cfg if cfg is not None else _JoinConfig()


def _channel(what: str):
    from .. import process_group as pg
    g = pg._require(what)
    chan = getattr(g, "join_channel", None)
    if chan is None:
        chan = g.join_channel = g.new_channel("join context setup") if g.size > 1 else None
    return g, chan


class Join:
    """``with Join([ddp_model, ...]):`` train on inputs of different lengths per rank."""

    def __init__(self, joinables: List[Joinable], enable: bool = True,
                 throw_on_early_termination: bool = False, **kwargs: Any) -> None:
        if len(joinables) == 0:
            raise ValueError("Join: the list of joinables must not be empty")
        for j in joinables:
            if not isinstance(j, Joinable):
                raise TypeError(f"Join: {type(j).__name__} is not a Joinable (it needs join_hook(), "
                                f"join_device and join_process_group)")
        self._joinables = list(joinables)
        self._join_hooks = [j.join_hook(**kwargs) for j in self._joinables]
        self._enable = enable
        self._throw = throw_on_early_termination
        self._group, self._chan = _channel("Join")

    def _set_configs(self, enable: bool) -> None:
        for i, j in enumerate(self._joinables):
            object.__setattr__(j, "_join_config", _JoinConfig(enable, self._throw, i == 0))

    def __enter__(self) -> "Join":
        self._set_configs(self._enable)
        return self

    def __exit__(self, exc_type, exc, tb) -> Optional[bool]:
        try:
            if not self._enable or exc_type is not None:
                return None
            if self._chan is None:  # a group of one: nothing to shadow
                for h in self._join_hooks:
                    h.post_hook(True)
                return None
            is_last_joiner = True
            while True:
                if self._count_training() == 0:
                    break
                if self._throw:
                    self._notify_to_terminate()
                for h in self._join_hooks:
                    h.main_hook()
                is_last_joiner = False
            for h in self._join_hooks:
                h.post_hook(is_last_joiner)
            return None
        finally:
            self._set_configs(False)

    def _count_training(self) -> int:
        zero = np.zeros(1, np.int64)
        self._chan.allreduce(zero, self._group.MPI.SUM, "the join context's count of ranks still training "
                                                        "(this rank has joined)")
        return int(zero[0])

    def _notify_to_terminate(self) -> None:
        one = np.ones(1, np.int64)
        self._chan.allreduce(one, self._group.MPI.SUM, "the join context's early-termination check")
        raise RuntimeError(f"Join: rank {self._group.rank} exhausted its inputs first "
                           f"(throw_on_early_termination=True): raising on every rank")

    @staticmethod
    def notify_join_context(joinable: Joinable) -> Optional[Work]:
        """Called by a joinable once per iteration on a rank still training: counts it.

        Returns the count's `Work` (its ``result()`` holds the number of ranks still
        training) for the first joinable of an enabled context, else None.
        """
        cfg = joinable._get_join_config()
        if not (cfg.enable and cfg.is_first_joinable):
            return None
        g, chan = _channel("Join.notify_join_context")
        if chan is None:
            one = np.ones(1, np.int64)
            return Work(None, result=one)
        one = np.ones(1, np.int64)
        req, op = chan.start_allreduce(one, g.MPI.SUM, "the join context's count of ranks still training")
        work = Work(req, keep=(one,), ops=(op,), result=one)
        if cfg.throw_on_early_termination:
            flag = np.zeros(1, np.int64)
            chan.allreduce(flag, g.MPI.SUM, "the join context's early-termination check")
            if flag[0]:
                raise RuntimeError(f"Join: rank {g.rank} sees that some rank exhausted its inputs "
                                   f"(throw_on_early_termination=True): raising on every rank")
        return work
